"""Is a branch's fixed point a minimum? Stability in the pinned direction, the collapse, and
gradient descent at finite d (issue 39)."""
import contextlib
import io
import json

import pytest

from attnlab import ModelParams, run_simulation
from attnlab.theory import solve_state_evolution
from attnlab.theory.stability import STEP, pinned_eigenvalue

P03 = ModelParams(sigma=0.5, lam=0.01, omega=0.3)
P05 = P03.replace(omega=0.5)


def test_collapsed_point_is_not_a_branch():
    """At sigma = 0.3 the semantic map collapses to Q = 0 (gradient descent from Q* ends
    positional there, issue 39): not on the branch, not a minimum."""
    res = solve_state_evolution(P03.replace(sigma=0.3), 0.8, "semantic", warn=False)
    assert res.collapsed and res.converged
    assert not res.on_branch and not res.minimum and res.status == "collapsed"
    assert res.to_dict()["on_branch"] is False and res.to_dict()["minimum"] is False


def test_semantic_fixed_point_unstable_along_m_where_gradient_descent_leaves():
    """omega 0.5, alpha 0.8: the pinned semantic fixed point has lambda_m ~ 1.4 > 1; omega 0.3:
    ~0.05 < 1. L-BFGS from Q* (after gradient descent's warm-up) at d = 500 leaves m ~ 0 in the
    first case (measured |m| = 0.26, the positional branch's 0.27) and stays semantic in the second
    (|m| = 0.006, theta = 0.30; SE 0.32). (At d = 300 seed 0 ends mixed, |m| = 0.09.) The held probe
    finds omega 0.5, alpha 0.8 only just stable (0.98; status "undecided", not asserted here so close
    to 1); at alpha 0.6 both probes find a saddle."""
    unstable = solve_state_evolution(P05, 0.8, "semantic", warn=False)
    stable = solve_state_evolution(P03, 0.8, "semantic", warn=False)
    assert unstable.on_branch and unstable.stability > 1.2 and unstable.stable is False
    saddle = solve_state_evolution(P05, 0.6, "semantic", warn=False)
    assert saddle.stability_held > 1 and saddle.status == "unstable" and saddle.minimum is False
    assert stable.stability < 0.5 and stable.minimum and stable.status == "minimum"
    left = run_simulation(P05, 0.8, 500, init="semantic", seed=0, method="lbfgs", n_test=500, progress=False)
    stayed = run_simulation(P03, 0.8, 500, init="semantic", seed=0, method="lbfgs", n_test=500, progress=False)
    assert abs(left.m) > 0.2 and abs(stayed.m) < 0.03 and stayed.theta > 0.25


def test_positional_fixed_point_unstable_along_theta_at_large_alpha():
    """omega 0: the positional branch is a minimum at alpha 1 (lambda_theta ~ 0.25) but not at
    alpha 4 (~2.2): L-BFGS from the positional start at d = 300 ends semantic there (measured
    theta = 0.87, |m| = 0.002) and positional at alpha 1 (m = 0.22, |theta| = 0.01)."""
    P0 = P03.replace(omega=0.0)
    low, high = (solve_state_evolution(P0, a, "positional", warn=False) for a in (1.0, 4.0))
    assert low.minimum and low.stability < 0.5
    assert high.on_branch and high.stability > 1.5 and not high.minimum
    left, stayed = (run_simulation(P0, a, 300, init="positional", seed=0, method="lbfgs", n_test=500, progress=False)
                    for a in (4.0, 1.0))
    assert abs(left.theta) > 0.5 and abs(stayed.theta) < 0.05 and stayed.m > 0.15


def test_eigenvalue_does_not_depend_on_the_step(monkeypatch):
    """The central difference is the derivative: halving the step moves lambda by < 0.02."""
    res = solve_state_evolution(P05, 0.8, "semantic", warn=False)
    base = pinned_eigenvalue(res)
    monkeypatch.setattr("attnlab.theory.stability.STEP", STEP / 2)
    assert pinned_eigenvalue(res) == pytest.approx(base, abs=0.02)


@pytest.mark.parametrize("alpha", [2.0, 3.0])
def test_eigenvalue_is_the_closed_form_response_away_from_basin_edges(alpha):
    """omega 0.5, alpha 2 and 3 (V ~ 17 and 12): both probes agree with the closed form
    (measured -0.912, -0.914, -0.920 at alpha 2; -2.321 all three at alpha 3), an independent
    computation: a linear response, not a difference of the map."""
    res = solve_state_evolution(P05, alpha, "semantic", warn=False)
    closed = pinned_eigenvalue(res, basins="linear")
    assert res.stability == pytest.approx(closed, abs=0.02)
    assert pinned_eigenvalue(res, basins="held") == pytest.approx(closed, abs=0.02)


def test_samples_at_basin_edges_decide_the_response_at_small_alpha():
    """omega 0.5, alpha 1.0 (V ~ 25): redescending every sample gives lambda_m ~ 1.17 (not a
    minimum), holding each in its basin ~ 0.82, the closed form of samples that stay ~ 0.50: the
    samples whose basin the probe moves or removes are what separates them (book Chapter 6)."""
    res = solve_state_evolution(P05, 1.0, "semantic", warn=False)
    held = pinned_eigenvalue(res, basins="held")
    assert pinned_eigenvalue(res, basins="linear") < held - 0.2 and held < 1.0 < res.stability
    assert res.stability - held > 0.2


def test_bad_basins_name_the_parameter():
    res = solve_state_evolution(P05, 1.0, "semantic", warn=False)
    with pytest.raises(ValueError, match="basins"):
        pinned_eigenvalue(res, basins="kept")


def test_unpinned_result_has_no_pinned_eigenvalue():
    """pin=False leaves m free: nothing pinned to probe (NaN, stable None), not labelled unstable."""
    pinned = solve_state_evolution(P03, 1.0, "semantic", warn=False)
    free = solve_state_evolution(P03, 1.0, "semantic", pin=False, init=pinned.overlaps.__class__(
        q=pinned.overlaps.q, m=0.01, V=pinned.overlaps.V, theta=pinned.overlaps.theta), warn=False)
    assert free.stable is None and free.status in ("minimum", "not converged")


def _theory_json(*args: str) -> tuple[dict, str]:
    """``attnlab theory ARGS --json``: the JSON object and what was warned."""
    from attnlab.cli import main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["theory", *args, "--json"]) == 0
    return json.loads(out.getvalue()), err.getvalue()


def test_cli_theory_says_no_semantic_minimum_and_where_gd_goes():
    """omega 0.5, alpha 0.6: below both probes' spinodals (held 0.76, redescend 1.12)."""
    res, err = _theory_json("--omega", "0.5", "--alpha", "0.6")
    assert res["status"] == "unstable" and res["minimum"] is False and res["stability"] > 1
    assert res["stability_held"] > 1 and res["probes_agree"] is True
    assert "no semantic minimum here" in res["note"] and res["note"] in " ".join(err.split())
    assert res["instead"]["branch"] == "positional"
    assert res["instead"]["m"] == pytest.approx(0.26, abs=0.02)


@pytest.mark.parametrize("branch, omega, alphas", [("semantic", 0.5, (0.6, 1.0, 1.3)),
                                                   ("positional", 0.1, (2.2, 2.35, 2.5))])
def test_probes_disagree_only_between_their_spinodals(branch, omega, alphas):
    """Book Chapter 6, "How sure is a spinodal?": the semantic minimum at omega 0.5 starts at
    alpha 0.76 by the held probe and 1.12 by the default (redescend) one; the positional minimum
    at omega 0.1 ends at 2.25 (held) and 2.45 (redescend). Outside those bands the probes agree
    (and differ across the band), inside it they do not: status "undecided", minimum None."""
    lo, mid, hi = (solve_state_evolution(P03.replace(omega=omega), a, branch, warn=False) for a in alphas)
    assert lo.probes_agree is True and hi.probes_agree is True and lo.stable != hi.stable
    assert mid.probes_agree is False and (mid.stability < 1) != (mid.stability_held < 1)
    assert mid.stability_held == pinned_eigenvalue(mid, basins="held")
    assert mid.status == "undecided" and mid.minimum is None and {lo.minimum, hi.minimum} == {True, False}
    assert mid.to_dict()["probes_agree"] is False and mid.to_dict()["stability_held"] == mid.stability_held


@pytest.mark.parametrize("branch, omega, alpha, other, default, held", [
    ("semantic", "0.5", "1.0", "positional", "unstable", "a minimum"),
    ("positional", "0.1", "2.35", "semantic", "a minimum", "unstable")])
def test_cli_theory_cannot_tell_between_the_probes(branch, omega, alpha, other, default, held):
    """Where the probes disagree the CLI does not say "no minimum" nor where gradient descent
    goes: it says the state evolution cannot tell, which probe says what, and where gradient
    descent goes if it leaves (at omega 0.5, alpha 1.0 about half of the book's runs from Q* at
    d = 4000-8000 are still semantic)."""
    res, err = _theory_json("--branch", branch, "--omega", omega, "--alpha", alpha)
    assert res["probes_agree"] is False and "no " + branch + " minimum" not in res["note"]
    assert res["status"] == "undecided" and res["minimum"] is None
    assert res["note"].startswith(f"the state evolution cannot tell whether there is a {branch} minimum here")
    assert f"its fixed point is {default} by the default probe (eigenvalue {res['stability']:.3g}) and {held} " \
           f"by the held probe ({res['stability_held']:.3g})" in res["note"]
    assert "may stay on it or leave for the " + other + " minimum" in res["note"]
    assert res["note"] in " ".join(err.split()) and res["instead"]["branch"] == other
    from attnlab.cli import main
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.redirect_stderr(io.StringIO()):
        assert main(["theory", "--branch", branch, "--omega", omega, "--alpha", alpha]) == 0
    assert "instead: {'branch': '" + other + "', 'm': " in text.getvalue() and "np.float64" not in text.getvalue()


def test_cli_theory_global_minimizer_does_not_say_where_gradient_descent_goes():
    """The global prox describes the paper's global minimum, not gradient descent's path."""
    res, _ = _theory_json("--omega", "0.5", "--alpha", "0.6", "--minimizer", "global")
    assert res["minimum"] is False and "gradient descent" not in res["note"]
    assert "the other branch has the positional minimum" in res["note"]


def test_cli_theory_is_quiet_where_both_probes_find_a_minimum():
    res, err = _theory_json("--omega", "0.5", "--alpha", "1.3")
    assert res["minimum"] is True and res["probes_agree"] is True
    assert "note" not in res and "instead" not in res and "warning" not in err
