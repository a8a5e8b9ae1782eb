"""Core library against independent computations: dense formulas, finite
differences, 2-D numerical integration and the sanity values of the specification
(eps_g(Q = 0) = 4.41e-3 and eps_g_lin = 1.97e-3 at sigma = 0.5, omega = 0.3)."""
import math

import numpy as np
import pytest
import torch

import attnlab
from attnlab import ModelParams
from attnlab.data import make_problem, positional_encodings, sample_dataset
from attnlab.objective import AttentionRisk
from attnlab.training import TrainingDivergedError, minimize_risk

from reference import T as _T, gauss2 as _gauss2

P0 = ModelParams(sigma=0.5, lam=0.01, omega=0.3)


def dense_student(x, Q):
    """Loop-by-loop student f_Q(x) = softmax(h h^T) x, written from the definition."""
    n, L, d = x.shape
    out = np.zeros_like(x)
    for mu in range(n):
        h = x[mu] @ Q / math.sqrt(d)  # (L, r)
        for l in range(L):
            scores = np.array([h[l] @ h[k] for k in range(L)])
            w = np.exp(scores - scores.max())
            w /= w.sum()
            out[mu, l] = sum(w[k] * x[mu, k] for k in range(L))
    return out


def naive_risk(x, y, Q, lam):
    d = x.shape[2]
    return ((y - dense_student(x, Q)) ** 2).sum() / (2 * d) + 0.5 * lam * (Q ** 2).sum()


@pytest.fixture(scope="module")
def small():
    data = sample_dataset(P0.replace(r=2), 7, 11, seed=3)
    Q = np.random.default_rng(5).standard_normal((11, 2))
    return data, Q


def test_positional_encodings_are_the_papers():
    P = positional_encodings(2, 16)
    assert np.allclose(P[0], 1 / 4) and np.allclose(P[1], -1 / 4)
    P4 = positional_encodings(4, 16)
    assert np.allclose(P4 @ P4.T, np.eye(4))


def test_student_matches_dense_implementation(small):
    data, Q = small
    expected = dense_student(data.x, Q)
    assert np.allclose(attnlab.student_output(data.x, Q), expected, atol=1e-12)
    module = attnlab.AttentionStudent(data.d, 2, Q0=Q)
    got = module(torch.as_tensor(data.x)).detach().numpy()
    assert np.allclose(got, expected, atol=1e-12)


def test_teacher_matches_definition(small):
    data, _ = small
    z = data.z
    hstar = z @ data.Qstar / math.sqrt(data.d)
    for mu in range(data.n):
        S = np.exp(np.outer(hstar[mu], hstar[mu]))
        S /= S.sum(axis=1, keepdims=True)
        T = 0.7 * S + 0.3 * np.array(P0.A)
        assert np.allclose(data.y[mu], T @ z[mu], atol=1e-12)
    module = attnlab.AttentionTeacher(data.Qstar, P0)
    assert np.allclose(module(torch.as_tensor(z)).numpy(), data.y, atol=1e-12)


def test_risk_matches_naive_formula_to_1e10(small):
    data, Q = small
    risk = AttentionRisk(data.x, data.y, P0.lam)
    R, _ = risk.value_and_grad(risk.as_tensor(Q))
    assert R == pytest.approx(naive_risk(data.x, data.y, Q, P0.lam), rel=1e-10, abs=0)


def test_gradient_matches_finite_differences_and_autograd(small):
    data, Q = small
    risk = AttentionRisk(data.x, data.y, P0.lam)
    _, g = risk.value_and_grad(risk.as_tensor(Q))
    g = g.numpy()
    eps = 1e-6
    fd = np.zeros_like(Q)
    for idx in np.ndindex(Q.shape):
        e = np.zeros_like(Q)
        e[idx] = eps
        fd[idx] = (naive_risk(data.x, data.y, Q + e, P0.lam) - naive_risk(data.x, data.y, Q - e, P0.lam)) / (2 * eps)
    assert np.allclose(g, fd, rtol=1e-6, atol=1e-9)
    # autograd through the dense torch formula that materialises S @ X
    X, Y = torch.as_tensor(data.x), torch.as_tensor(data.y)
    Qt = torch.as_tensor(Q).requires_grad_(True)
    R = ((Y - attnlab.student_output(X, Qt)) ** 2).sum() / (2 * data.d) + 0.5 * P0.lam * (Qt ** 2).sum()
    (ga,) = torch.autograd.grad(R, Qt)
    assert np.allclose(g, ga.numpy(), rtol=1e-10, atol=1e-13)


def test_quadrature_reference_gives_science_sanity_values():
    rho = P0.sigma ** 2
    U = np.full((2, 2), 0.5)
    eg0 = rho / 2 * _gauss2(lambda a, b: ((_T(a, b, 0.3, P0.A) - U) ** 2).sum(), rho)
    assert eg0 == pytest.approx(4.41e-3, abs=0.006e-3)
    ET = np.array([[_gauss2(lambda a, b, i=i, j=j: _T(a, b, 0.3, P0.A)[i, j], rho) for j in range(2)] for i in range(2)])
    ET2 = _gauss2(lambda a, b: (_T(a, b, 0.3, P0.A) ** 2).sum(), rho)
    eglin = rho / 2 * (ET2 - (ET ** 2).sum())
    assert eglin == pytest.approx(1.97e-3, abs=0.006e-3)


@pytest.mark.parametrize("seed", [0, 1])
def test_uniform_attention_error_matches_integral(seed):
    d = 1000
    Qstar = attnlab.sample_teacher(d, seed)
    rho = P0.sigma ** 2 * (Qstar @ Qstar) / d  # variance of h* for this teacher draw
    U = np.full((2, 2), 0.5)
    expected = P0.sigma ** 2 / 2 * _gauss2(lambda a, b: ((_T(a, b, 0.3, P0.A) - U) ** 2).sum(), rho)
    eg, sem = attnlab.generalization_error(np.zeros(d), P0, Qstar, n_test=20_000, seed=seed)
    # 1/d corrections are ~0.1% here; the Monte Carlo error dominates.
    assert abs(eg - expected) < 4 * sem + 2e-3 * expected
    assert abs(eg - 4.41e-3) < 4 * sem + 4.41e-3 * 3 * math.sqrt(2 / d)  # teacher-norm fluctuation


def test_linear_baseline_ridge_and_error():
    d = 600
    data = make_problem(P0, 2.0, d, seed=4)
    B = attnlab.fit_linear_baseline(data.x, data.y, P0.lam)
    # independent: lstsq on the stacked per-coordinate regression y_l = sum_k B_lk x_k
    Xs = data.x.transpose(0, 2, 1).reshape(-1, 2)
    Ys = data.y.transpose(0, 2, 1).reshape(-1, 2)
    B_ls = np.linalg.lstsq(Xs, Ys, rcond=None)[0].T
    assert np.allclose(B, B_ls, atol=5e-5)  # lam = 0.01 vs n*sigma^2 ~ 300: tiny shrinkage
    rho = P0.sigma ** 2 * (data.Qstar @ data.Qstar) / d
    ET = np.array([[_gauss2(lambda a, b, i=i, j=j: _T(a, b, 0.3, P0.A)[i, j], rho) for j in range(2)] for i in range(2)])
    assert np.allclose(B, ET, atol=0.02)
    ET2 = _gauss2(lambda a, b: (_T(a, b, 0.3, P0.A) ** 2).sum(), rho)
    expected = P0.sigma ** 2 / 2 * (ET2 - (ET ** 2).sum())
    eg, sem = attnlab.generalization_error(np.zeros(d), P0, data.Qstar, n_test=20_000, seed=4, B=B)
    assert abs(eg - expected) < 4 * sem + 0.03 * expected  # B's estimation error is O(1/n)


@pytest.fixture(scope="module")
def trained():
    data = make_problem(P0, 1.5, 300, seed=1)
    out = {}
    for init in ("random", "semantic"):
        res = minimize_risk(data, P0.lam, init=init, method="lbfgs", progress=False)
        out[init] = (res, attnlab.overlaps(attnlab.canonical_sign(res.Q, data.Qstar, data.P), data.Qstar, data.P))
    return data, out


def test_two_minima_from_two_inits(trained):
    """Both minima are reached: gradient rms at the level where L-BFGS-B stops on the
    relative reduction of R (a few 1e-9 at d = 300); ``converged`` says whether it
    went below gtol = 1e-9 (issue 15, item 8)."""
    _, out = trained
    res, ov = out["random"]
    assert res.grad_rms < 1e-8 and ov.m[0] > 0.15 and abs(ov.theta[0]) < 0.1
    res, ov = out["semantic"]
    assert res.grad_rms < 1e-8 and ov.theta[0] > 0.4 and abs(ov.m[0]) < 0.05
    for res, _ in out.values():
        assert res.converged == (res.grad_rms <= 1e-9)


@pytest.mark.parametrize("init", ["random", "semantic"])
def test_gd_and_lbfgs_reach_the_same_risk(trained, init):
    data, out = trained
    gd = minimize_risk(data, P0.lam, init=init, method="gd", steps=5000, progress=False)
    assert gd.risk == pytest.approx(out[init][0].risk, rel=1e-4)
    assert gd.risk >= out[init][0].risk - 1e-9 * abs(gd.risk)  # L-BFGS is the tighter minimiser


def test_adam_descends_to_the_positional_minimum(trained):
    data, out = trained
    adam = minimize_risk(data, P0.lam, init="positional", method="adam", steps=3000, progress=False)
    assert adam.risk == pytest.approx(out["random"][0].risk, rel=1e-3)


def test_divergence_is_reported_not_hidden():
    data = make_problem(P0, 1.0, 50, seed=0)
    with pytest.raises(TrainingDivergedError, match="lr"):
        minimize_risk(data, P0.lam, method="gd", lr=1e4, steps=2000, progress=False)


def test_determinism():
    a = attnlab.run_simulation(P0, 1.0, 60, init="random", seed=7, method="lbfgs", n_test=500, progress=False)
    b = attnlab.run_simulation(P0, 1.0, 60, init="random", seed=7, method="lbfgs", n_test=500, progress=False)
    da, db = a.to_dict(), b.to_dict()
    da.pop("seconds"), db.pop("seconds")
    assert da == db
    f32 = sample_dataset(P0, 5, 10, seed=1, dtype="float32")
    assert f32.x.dtype == np.float32 and np.allclose(f32.x, sample_dataset(P0, 5, 10, seed=1).x, atol=1e-6)


def test_make_problem_uses_the_requested_teacher():
    """teacher="exact-norm" reaches the data: |Q*|^2 = d exactly, and the targets use that Q*."""
    import attnlab
    from attnlab.data import make_problem, sample_teacher

    data = make_problem(attnlab.ModelParams(), 0.5, 50, seed=3, teacher="exact-norm")
    assert np.linalg.norm(data.Qstar) ** 2 == pytest.approx(50)
    np.testing.assert_allclose(data.Qstar, sample_teacher(50, 3, "exact-norm"))
    assert not np.allclose(make_problem(attnlab.ModelParams(), 0.5, 50, seed=3).Qstar, data.Qstar)


def test_no_training_sample_is_an_error_not_another_alpha():
    """alpha * d below one half used to run with n = 1, i.e. at another alpha, silently."""
    from attnlab.data import n_samples

    assert n_samples(0.011, 100) == 1 and n_samples(1.5, 100) == 150
    with pytest.raises(ValueError, match=r"alpha must be > 0.005 at d = 100"):
        n_samples(1e-9, 100)
    with pytest.raises(ValueError, match="no training sample"):
        make_problem(ModelParams(), 0.004, 100, seed=0)
