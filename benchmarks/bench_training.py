"""Benchmarks of the trainers at d = 1000, n = 2000 (alpha = 2).

1. One full-batch GD step: attnlab's exact sufficient-statistics risk
   (``AttentionRisk``: touches X only through h = XQ/sqrt(d) and
   X^T dR/dh, hand-written gradient) against a naive autograd step that
   materialises ``S @ X`` of shape (n, L, d), side by side in one run.
2. A full minimisation with the fast optimiser (L-BFGS after a GD warm-up)
   from both inits, and plain GD (5000 steps, lr 0.15) for comparison.

Run: ``python benchmarks/bench_training.py``.
"""
import math
import time

import numpy as np
import torch

from attnlab.attention import softmax_attention
from attnlab.data import make_problem
from attnlab.objective import AttentionRisk
from attnlab.params import ModelParams
from attnlab.training import minimize_risk


def naive_step(X, Y, Q, lam, lr):
    Q = Q.detach().requires_grad_(True)
    d = X.shape[-1]
    S = softmax_attention(X @ Q / math.sqrt(d))
    R = ((Y - S @ X) ** 2).sum() / (2 * d) + 0.5 * lam * (Q ** 2).sum()
    (g,) = torch.autograd.grad(R, Q)
    return Q.detach() - lr * g


def fast_step(risk, Q, lr):
    _, g = risk.value_and_grad(Q)
    return Q - lr * g


def timeit(fn, repeat=30):
    fn()
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main():
    p = ModelParams(omega=0.3)
    data = make_problem(p, 2.0, 1000, seed=0)
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, n={data.n}, d={data.d}")
    for dtype in ("float64", "float32"):
        tdt = {"float64": torch.float64, "float32": torch.float32}[dtype]
        risk = AttentionRisk(data.x, data.y, p.lam, dtype=dtype)
        X = torch.as_tensor(data.x, dtype=tdt)
        Y = torch.as_tensor(data.y, dtype=tdt)
        Q = torch.as_tensor(0.1 * np.random.default_rng(0).standard_normal((1000, 1)), dtype=tdt)
        t_fast = timeit(lambda: fast_step(risk, Q, 0.15))
        t_naive = timeit(lambda: naive_step(X, Y, Q, p.lam, 0.15))
        same = torch.allclose(fast_step(risk, Q, 0.15), naive_step(X, Y, Q, p.lam, 0.15),
                              rtol=1e-4 if dtype == "float32" else 1e-9, atol=0)
        print(f"{dtype}: fast {t_fast * 1e3:.2f} ms, naive {t_naive * 1e3:.2f} ms, "
              f"ratio {t_naive / t_fast:.1f}x, same step: {same}")
    for init in ("random", "semantic"):
        t = time.perf_counter()
        res = minimize_risk(data, p.lam, init=init, method="lbfgs", progress=False)
        t_lbfgs = time.perf_counter() - t
        t = time.perf_counter()
        gd = minimize_risk(data, p.lam, init=init, method="gd", progress=False)
        t_gd = time.perf_counter() - t
        print(f"{init:>9} init: L-BFGS {t_lbfgs:.1f} s ({res.steps} steps, eps_t={res.eps_t:.6g}), "
              f"GD {t_gd:.1f} s (5000 steps, eps_t={gd.eps_t:.6g}), ratio {t_gd / t_lbfgs:.1f}x")


if __name__ == "__main__":
    main()
