"""Benchmark the state-evolution solver, and compare it with a plain reference.

1. attnlab: fixed points with the followed proximal minimiser (the default;
   quasi-Monte Carlo, default and ``Quadrature.fast()`` point sets) side by side
   with the global minimiser (default split rule, the cheap ``Quadrature.fast()``
   split rule, tensor Gauss-Hermite), alpha_c/alpha_l for one omega, a phase
   diagram over ten omegas, for both minimisers.
2. A plain reference of the same channel update done the usual slow way: one
   ``scipy.optimize.minimize`` per quadrature node (multi-start, for the
   global minimiser) and nested 1-D Gauss-Hermite loops. At the same rule the
   two compute the same numbers, so this is a ratio at equal accuracy.

Run: ``python benchmarks/bench_state_evolution.py [--quick]``.
"""
import argparse
import time

import numpy as np
import scipy.optimize
from numpy.polynomial.hermite_e import hermegauss
from scipy.special import expit

from attnlab import ModelParams
from attnlab.theory import Quadrature, find_transition, phase_diagram, solve_state_evolution
from attnlab.theory import Overlaps
from attnlab.theory.channel import gauss_hermite_expectations


def reference_expectations(ov, params, order_xi, order_eta):
    """Nested loops over a tensor Gauss-Hermite rule (teacher noise in the rotated
    coordinates attnlab uses), one scipy minimisation per node."""
    s2 = params.sigma ** 2
    A = params.A_array
    xg, xw = hermegauss(order_xi)
    eg, ew = hermegauss(order_eta)
    xw, ew = xw / xw.sum(), ew / ew.sum()
    c = np.sqrt(s2 - ov.theta ** 2 / ov.q)
    sq = np.sqrt(ov.q)
    acc = np.zeros(5)

    def loss(h, T11, T22):
        d = h[0] - h[1]
        return s2 * ((expit(h[0] * d) - T11) ** 2 + (expit(-h[1] * d) - T22) ** 2)

    starts = [np.array(v) for v in [(0, 0), (1, 1), (-1, -1), (1, -1), (-1, 1), (2, 0), (-2, 0), (0, 2), (0, -2)]]
    for i1, x1 in enumerate(xg):
        for i2, x2 in enumerate(xg):
            for j1, es in enumerate(eg):
                for j2, ed in enumerate(eg):
                    # teacher noise on the same rotated nodes as attnlab (eta_s, eta_d)
                    e1, e2 = (es + ed) / np.sqrt(2), (es - ed) / np.sqrt(2)
                    wt = xw[i1] * xw[i2] * ew[j1] * ew[j2]
                    w = np.array([sq * x1 + ov.m, sq * x2 - ov.m])
                    hs = np.array([ov.theta / sq * x1 + c * e1, ov.theta / sq * x2 + c * e2])
                    dd = hs[0] - hs[1]
                    T11 = (1 - params.omega) * expit(hs[0] * dd) + params.omega * A[0, 0]
                    T22 = (1 - params.omega) * expit(-hs[1] * dd) + params.omega * A[1, 1]
                    F = lambda h: ((h - w) ** 2).sum() / (2 * ov.V) + loss(h, T11, T22)
                    best = min((scipy.optimize.minimize(F, w + s, method="BFGS") for s in starts), key=lambda r: r.fun)
                    f = (best.x - w) / ov.V
                    acc += wt * np.array([f[0] - f[1], (f ** 2).sum(), f[0] * x1 + f[1] * x2,
                                          f[0] * e1 + f[1] * e2, best.fun])
    return dict(zip(["f_s", "f_sq", "f_xi", "f_eta", "M"], acc))


def timed(fn, *a, **k):
    t = time.perf_counter()
    out = fn(*a, **k)
    return out, time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip the phase diagram")
    ap.add_argument("--reference-only", action="store_true", help="only the comparison with the plain reference")
    args = ap.parse_args()
    p = ModelParams(omega=0.3)
    if args.reference_only:
        return compare_reference(p)
    rules = {"default": Quadrature(), "fast": Quadrature.fast(), "gauss-hermite": Quadrature(method="gauss-hermite")}
    cases = [("followed", "default"), ("followed", "fast"), ("global", "default"), ("global", "fast"),
             ("global", "gauss-hermite")]
    for mz in ("followed", "global"):  # compile the numba kernels (cached on disk)
        solve_state_evolution(p, 1.0, "semantic", quad=rules["fast"], minimizer=mz)
    print("== one fixed point (cold start; warm start from the SEResult at alpha - 0.05, Jacobian included)")
    for mz, name in cases:
        quad = rules[name]
        for branch, alpha in (("semantic", 1.0), ("positional", 1.0), ("semantic", 1.6), ("positional", 0.8)):
            res, t = timed(solve_state_evolution, p, alpha, branch, quad=quad, minimizer=mz)
            near = solve_state_evolution(p, alpha - 0.05, branch, quad=quad, minimizer=mz)
            _, t_warm = timed(solve_state_evolution, p, alpha, branch, quad=quad, init=near, minimizer=mz)
            print(f"{mz:>8} {name:>13} {branch:>10} alpha={alpha}: {t:5.2f} s (warm {t_warm:5.2f} s), "
                  f"{res.iterations} map evaluations, m={res.m:.5f}, theta={res.theta:.5f}")
    print("== alpha_c and alpha_l at omega = 0.3")
    for mz, name in cases[:4]:
        tr, t = timed(find_transition, p, quad=rules[name], minimizer=mz)
        print(f"{mz:>8} {name:>13}: alpha_c={tr.alpha_c:.4f} alpha_l={tr.alpha_l:.4f} in {t:.1f} s")
    if not args.quick:
        omegas = np.linspace(0.0, 0.45, 10)
        for mz, name in cases[:4]:
            rows, t = timed(phase_diagram, p, omegas, quad=rules[name], workers=2, minimizer=mz)
            print(f"== 10-omega phase diagram ({mz} minimiser, {name} rule, 2 processes): {t:.1f} s; "
                  f"alpha_c {[round(r.alpha_c, 4) for r in rows]}")
    compare_reference(p)


def compare_reference(p):
    print("== channel update at equal accuracy: attnlab vs plain reference (Gauss-Hermite 6 x 6 x 4 x 4)")
    ov = Overlaps(q=0.06, m=0.0, V=15.0, theta=0.07)
    quad = Quadrature(method="gauss-hermite", order_xi=6, order_eta=4)
    fast, t_fast = timed(gauss_hermite_expectations, ov, p, quad)
    ref, t_ref = timed(reference_expectations, ov, p, 6, 4)
    # f_s vanishes by symmetry on this (m = 0) point: compare on the scale of each quantity
    # where it is non-zero, and in absolute terms for f_s.
    diffs = {k: abs(getattr(fast[0], k) - ref[k]) / (abs(ref[k]) if k != "f_s" else 1.0) for k in ref}
    print(f"attnlab {t_fast * 1e3:.1f} ms, reference {t_ref:.1f} s, ratio {t_ref / t_fast:.0f}x")
    print("differences (relative; absolute for f_s):", {k: f"{v:.1e}" for k, v in diffs.items()})


if __name__ == "__main__":
    main()
