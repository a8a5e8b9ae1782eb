"""Precompute the state-evolution tables that the book's chapters plot.

The chapters prefer the results cached by ``attnlab reproduce`` (``results/``, default
quadrature); when those are missing they read these smaller tables, made with the cheap
split rule of :func:`attnlab.widgets.fast_quadrature` (error ~1e-3), instead of spending
minutes of the book build on state-evolution sweeps. Every chapter that uses them says so
and can recompute everything with ``FULL_SCALE = True``.

Usage (from the repository root; about 1-2 minutes on two cores)::

    python book/_scripts/make_book_cache.py            # all tables
    python book/_scripts/make_book_cache.py curves     # one of: curves, asymmetric, phase, spinodals

Writes ``book/_data/NAME.csv`` and ``book/_data/NAME.json`` (what, how, with which code).
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import attnlab
from attnlab.theory import ConvergenceWarning, find_transition, linear_baseline_error, se_curve
from attnlab.widgets import fast_quadrature

OUT = Path(__file__).resolve().parent.parent / "_data"
ALPHAS = [round(a, 2) for a in np.arange(0.1, 2.01, 0.1)]
OMEGAS = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]


def _write(name: str, rows: list[dict], description: str, seconds: float) -> None:
    OUT.mkdir(exist_ok=True)
    with open(OUT / f"{name}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.10g}" if isinstance(v, float) else v) for k, v in r.items()})
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = "unknown"
    q = fast_quadrature()
    meta = dict(description=description, quadrature=repr(q), attnlab_version=attnlab.__version__,
                git_commit=commit, seconds=round(seconds, 1), script="book/_scripts/make_book_cache.py")
    (OUT / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {OUT / name}.csv ({len(rows)} rows, {seconds:.0f} s)")


def curves(name: str, params: attnlab.ModelParams, description: str) -> None:
    t0 = time.perf_counter()
    lin = linear_baseline_error(params)
    rows = []
    for branch in ("positional", "semantic"):
        for r in se_curve(params, ALPHAS, branch, quad=fast_quadrature()):
            rows.append(dict(branch=branch, minimizer=r.minimizer, alpha=float(r.alpha), m=float(r.m), theta=float(r.theta),
                             qnorm=float(r.qnorm), eps_t=float(r.eps_t), eps_g=float(r.eps_g),
                             eps_g_linear=float(lin), converged=bool(r.converged), omega=params.omega,
                             sigma=params.sigma, **{"lambda": params.lam},
                             A11=params.A[0][0], A12=params.A[0][1], A21=params.A[1][0], A22=params.A[1][1]))
    _write(name, rows, description, time.perf_counter() - t0)


def phase(name: str) -> None:
    t0 = time.perf_counter()
    rows = []
    for omega in OMEGAS:
        tr, gl = (find_transition(attnlab.ModelParams(omega=omega), quad=fast_quadrature(), xtol=1e-2, minimizer=mz)
                  for mz in ("followed", "global"))
        rows.append(dict(omega=omega, alpha_c=tr.alpha_c, alpha_l=tr.alpha_l, alpha_c_global=gl.alpha_c,
                         alpha_l_global=gl.alpha_l, eps_g_linear=tr.eps_g_linear,
                         xtol=tr.xtol, sigma=0.5, **{"lambda": 0.01}))
        print(rows[-1], flush=True)
    _write(name, rows, "alpha_c(omega), alpha_l(omega) from find_transition (alpha in (0, 3], xtol 1e-2) with the "
           "followed minimiser (alpha_c, alpha_l) and the global one (alpha_c_global, alpha_l_global), "
           "sigma = 0.5, lambda = 0.01, A = [[0.6, 0.4], [0.4, 0.6]]", time.perf_counter() - t0)


def spinodals(name: str) -> None:
    from attnlab.theory.spinodals import find_spinodals
    t0 = time.perf_counter()
    rows = []
    for omega in OMEGAS:
        s = find_spinodals(attnlab.ModelParams(omega=omega), quad=fast_quadrature())
        rows.append(dict(omega=omega, alpha_s_semantic=s.alpha_s_semantic, alpha_s_positional=s.alpha_s_positional,
                         semantic_intervals=json.dumps(s.semantic), positional_intervals=json.dumps(s.positional),
                         alpha_min=s.alpha_min, alpha_max=s.alpha_max, xtol=s.xtol, minimizer=s.minimizer,
                         sigma=0.5, **{"lambda": 0.01}))
        print(rows[-1], flush=True)
    _write(name, rows, "spinodals from find_spinodals (alpha in [0.05, 20], 16-point geometric grid, ends bisected "
           "to 1%) with the followed minimiser: above alpha_s_semantic the semantic minimum exists, below "
           "alpha_s_positional the positional one (NaN: beyond 20); the intervals where each branch is a minimum "
           "(stable along its pinned overlap, attnlab.theory.stability); sigma = 0.5, lambda = 0.01, "
           "A = [[0.6, 0.4], [0.4, 0.6]]", time.perf_counter() - t0)


def main(which: list[str]) -> None:
    warnings.simplefilter("ignore", ConvergenceWarning)  # recorded per row in `converged`
    todo = which or ["curves", "asymmetric", "phase", "spinodals"]
    if "curves" in todo:
        curves("se_curves", attnlab.ModelParams(),
               "SE branches at omega = 0.3, sigma = 0.5, lambda = 0.01, default A, alpha = 0.1..2.0")
    if "asymmetric" in todo:
        curves("se_curves_asymmetric_A", attnlab.ModelParams(A=attnlab.PAPER_A_ASYMMETRIC),
               "SE branches at omega = 0.3, sigma = 0.5, lambda = 0.01, A = [[0.3, 0.7], [0.8, 0.2]]")
    if "phase" in todo:
        phase("phase_diagram")
    if "spinodals" in todo:
        spinodals("spinodals")


if __name__ == "__main__":
    main(sys.argv[1:])
