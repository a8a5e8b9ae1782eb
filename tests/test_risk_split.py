"""The split of the training loss into data term and ridge penalty
(attnlab.theory.risk_split), against gradient descent at finite d."""
import numpy as np
import pytest

from attnlab import ModelParams
from attnlab.data import make_problem
from attnlab.experiments.figures import load_results
from attnlab.extrapolation import extrapolate_runs
from attnlab.theory import solve_state_evolution
from attnlab.theory.risk_split import risk_split_table, se_risk_split, se_sample_losses, trained_risk_split
from attnlab.training import minimize_risk

P0 = ModelParams(sigma=0.5, lam=0.01, omega=0.3)


@pytest.fixture(scope="module")
def se_alpha1():
    return {b: solve_state_evolution(P0, 1.0, b) for b in ("positional", "semantic")}


def test_se_split_adds_up_and_penalty_is_the_ridge_term(se_alpha1):
    for r in se_alpha1.values():
        s = se_risk_split(r)
        assert s.data + s.penalty == pytest.approx(r.eps_t, rel=1e-12)
        assert s.penalty == pytest.approx(0.5 * P0.lam * r.overlaps.q / P0.sigma**2, rel=1e-9)
        assert s.data > 0 and s.penalty > 0


def test_semantic_minimum_fits_the_data_better_and_pays_in_norm(se_alpha1):
    """At alpha = 1 the semantic fixed point has the higher eps_t only through its penalty."""
    pos, sem = (se_risk_split(se_alpha1[b]) for b in ("positional", "semantic"))
    assert sem.total > pos.total
    assert sem.data < pos.data and sem.penalty > pos.penalty


def test_trained_split_matches_the_training_objective():
    data = make_problem(P0, 0.5, 120, seed=3)
    res = minimize_risk(data, P0.lam, init="semantic", method="lbfgs", seed=3, progress=False)
    s = trained_risk_split(res.Q, data, P0.lam)
    assert s.total == pytest.approx(res.risk / 120, rel=1e-9)


@pytest.mark.parametrize("init", ["positional", "semantic"])
def test_gd_at_moderate_d_reproduces_the_se_split(se_alpha1, init):
    """L-BFGS at d = 600 (exact-norm teacher, three seeds) against the SE split at alpha = 1."""
    d, parts = 600, []
    for seed in range(3):
        data = make_problem(P0, 1.0, d, seed=seed, teacher="exact-norm")
        res = minimize_risk(data, P0.lam, init=init, method="lbfgs", seed=seed, progress=False)
        parts.append(trained_risk_split(res.Q, data, P0.lam))
    se = se_risk_split(se_alpha1[init])
    data_gd = np.mean([p.data for p in parts])
    penalty_gd = np.mean([p.penalty for p in parts])
    assert data_gd == pytest.approx(se.data, rel=0.12)
    assert penalty_gd == pytest.approx(se.penalty, rel=0.15)


def test_extrapolated_gd_split_from_the_cached_runs(se_alpha1):
    """The se-vs-gd runs (d = 1000 ... 8000) extrapolated in 1/d against the SE split at alpha = 1."""
    runs = load_results("se-vs-gd")
    if runs is None:
        pytest.skip("results/se-vs-gd.csv not present")
    table = risk_split_table(runs)
    for key in ("data", "penalty"):
        for row in extrapolate_runs(table, key):
            if row["alpha"] != 1.0 or row["omega"] != 0.3:
                continue
            se = getattr(se_risk_split(se_alpha1[row["init"]]), key)
            assert abs(row["value"] - se) < max(3 * row["error"], 0.05 * se), (key, row["init"], row["value"], se)


def test_bad_input():
    with pytest.raises(KeyError, match="qnorm"):
        risk_split_table({"eps_t": [1.0], "lambda": [0.01]})
    with pytest.raises(ValueError, match="lam"):
        risk_split_table({"eps_t": [1.0], "qnorm": [0.1], "lambda": [-1.0]})


@pytest.mark.parametrize("branch", ["positional", "semantic"])
def test_data_term_is_alpha_times_the_loss_at_the_proximal_point(se_alpha1, branch):
    """Independent of Phi: alpha E[l(prox(w), h*)] by Monte Carlo equals eps_t - penalty."""
    r = se_alpha1[branch]
    mc = se_sample_losses(r, n_samples=100_000, seed=1)
    assert abs(mc["data"] - se_risk_split(r).data) < 4 * r.alpha * mc["stderr_train"] + 1e-3 * mc["data"]
    # and a fresh sample's mean loss is the test error
    assert abs(mc["test"] - r.eps_g) < 4 * mc["stderr_test"] + 1e-3 * r.eps_g
    assert mc["train"] < 0.6 * mc["test"]


def test_global_minimiser_data_term():
    r = solve_state_evolution(P0, 1.6, "semantic", minimizer="global")
    mc = se_sample_losses(r, n_samples=50_000, seed=2)
    assert abs(mc["data"] - se_risk_split(r).data) < 4 * r.alpha * mc["stderr_train"] + 2e-3 * mc["data"]


def test_sample_losses_bad_input(se_alpha1):
    with pytest.raises(ValueError, match="n_samples"):
        se_sample_losses(se_alpha1["semantic"], n_samples=10)
