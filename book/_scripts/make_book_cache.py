"""Precompute the state-evolution tables that the book's chapters plot.

The chapters prefer the results cached by ``attnlab reproduce`` (``results/``, default
quadrature); when those are missing they read these smaller tables, made with the cheap
split rule of :func:`attnlab.widgets.fast_quadrature` (error ~1e-3), instead of spending
minutes of the book build on state-evolution sweeps. Every chapter that uses them says so
and can recompute everything with ``FULL_SCALE = True``.

Usage (from the repository root; about 1-2 minutes on two cores)::

    python book/_scripts/make_book_cache.py            # all tables
    python book/_scripts/make_book_cache.py curves     # one of: curves, asymmetric, phase, spinodals

and, not part of "all tables" (gradient descent at d = 4000: about 15 minutes on two cores)::

    python book/_scripts/make_book_cache.py response

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


def _write(name: str, rows: list[dict], description: str, seconds: float, quadrature=None) -> None:
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
    q = fast_quadrature() if quadrature is None else quadrature
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


def _spinodal_row(params: attnlab.ModelParams) -> dict:
    from attnlab.theory.spinodals import find_spinodals
    s = find_spinodals(params, quad=fast_quadrature())
    row = dict(omega=params.omega, alpha_s_semantic=s.alpha_s_semantic, alpha_s_positional=s.alpha_s_positional,
               semantic_intervals=json.dumps(s.semantic), positional_intervals=json.dumps(s.positional),
               alpha_min=s.alpha_min, alpha_max=s.alpha_max, xtol=s.xtol, minimizer=s.minimizer,
               sigma=params.sigma, **{"lambda": params.lam})
    print(row, flush=True)
    return row


SPINODALS_TEXT = ("spinodals from find_spinodals (alpha in [0.05, 20], 16-point geometric grid, ends bisected to "
                  "1%) with the followed minimiser: above alpha_s_semantic the semantic minimum exists, below "
                  "alpha_s_positional the positional one (NaN: beyond 20); the intervals where each branch is a "
                  "minimum (stable along its pinned overlap, attnlab.theory.stability)")


def spinodals(name: str) -> None:
    t0 = time.perf_counter()
    rows = [_spinodal_row(attnlab.ModelParams(omega=omega)) for omega in OMEGAS]
    _write(name, rows, SPINODALS_TEXT + "; sigma = 0.5, lambda = 0.01, A = [[0.6, 0.4], [0.4, 0.6]]",
           time.perf_counter() - t0)


def spinodals_sigma_lambda(name: str) -> None:
    """The spinodals at the explorers' sigma (lambda = 0.01) and lambda (sigma = 0.5)."""
    from attnlab.explorer_grid import LAMS, SIGMAS
    t0 = time.perf_counter()
    cases = [(s, 0.01) for s in SIGMAS] + [(0.5, lam) for lam in LAMS if lam != 0.01]
    rows = [_spinodal_row(attnlab.ModelParams(omega=omega, sigma=s, lam=lam)) for s, lam in cases for omega in OMEGAS]
    _write(name, rows, SPINODALS_TEXT + f"; (sigma, lambda) in {cases}, A = [[0.6, 0.4], [0.4, 0.6]]",
           time.perf_counter() - t0)


#: The response check (Chapter 6, "Asking gradient descent: the response of m"): omega 0.5, semantic branch.
RESPONSE_OMEGA, RESPONSE_D, RESPONSE_SEEDS = 0.5, 4000, (0, 1, 2)
RESPONSE_ALPHAS = (2.0, 1.8, 1.6, 1.4, 1.3, 1.2, 1.1, 1.05, 1.0, 0.95)


def _follow(job: tuple) -> list[dict]:
    """One followed gradient-descent sweep ``(omega, start, alphas, d, seed, susceptibility)``, one row per alpha."""
    import torch
    from attnlab.hysteresis import follow_minimum
    torch.set_num_threads(1)
    omega, start, alphas, d, seed, susceptibility = job
    t0 = time.perf_counter()
    out = follow_minimum(attnlab.ModelParams(omega=omega), alphas, d, start=start, seed=seed,
                         susceptibility=susceptibility)
    print(f"omega {omega} {start} d {d} seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    return [dict(source="gd", seed=seed, d=d, **{k: (v.item() if hasattr(v, "item") else v)
                                                 for k, v in zip(out, col)})
            for col in zip(*out.values())]


def _response_sweep(seed: int) -> list[dict]:
    return _follow((RESPONSE_OMEGA, "semantic", RESPONSE_ALPHAS, RESPONSE_D, seed, True))


def response(name: str) -> None:
    """Gradient descent's response of m (chi_m) along the followed semantic minimum, and the SE's."""
    from concurrent.futures import ProcessPoolExecutor

    from attnlab.theory import Quadrature, solve_state_evolution
    from attnlab.theory.stability import BASINS, STEP, pinned_eigenvalue, pinned_susceptibility
    t0 = time.perf_counter()
    with ProcessPoolExecutor(2) as pool:
        gd = [r for rows in pool.map(_response_sweep, RESPONSE_SEEDS) for r in rows]
    se = []
    p = attnlab.ModelParams(omega=RESPONSE_OMEGA)
    for a in RESPONSE_ALPHAS:
        r = solve_state_evolution(p, a, "semantic", warn=False)
        se.append(dict(source="se", alpha=a, converged=bool(r.converged), theta=float(r.theta),
                       D=float(p.lam + p.sigma ** 2 * r.hats.Vhat),
                       **{f"lambda_m_{b}": pinned_eigenvalue(r, basins=b) for b in BASINS},
                       **{f"chi_m_{b}": pinned_susceptibility(r, basins=b) for b in BASINS}))
    keys = list(dict.fromkeys(k for r in gd + se for k in r))
    rows = [{k: r.get(k, "") for k in keys} for r in gd + se]
    _write(name, rows, f"response of m (chi_m = dm/dh for the field -d h m) on the semantic branch at omega = "
           f"{RESPONSE_OMEGA}, sigma = 0.5, lambda = 0.01: source gd: gradient descent (L-BFGS after the GD "
           f"warm-up) followed down alpha = {list(RESPONSE_ALPHAS)} from Q* at d = {RESPONSE_D}, seeds "
           f"{list(RESPONSE_SEEDS)} (attnlab.hysteresis.follow_minimum with susceptibility=True: chi_m = "
           "p_1^T H^-1 p_1 by conjugate gradients, lam_min the Hessian's lowest eigenvalue by Lanczos, "
           "grad_rms where L-BFGS stopped, target 1e-9); source se: the state evolution's "
           f"1 / (D (1 - lambda_m)) with the probes {list(BASINS)} of attnlab.theory.stability (finite "
           f"step STEP = {STEP} of sqrt(q) for redescend and held; 'linear' has none), followed minimiser, "
           "the quadrature below", time.perf_counter() - t0, quadrature=Quadrature())


#: Where gradient descent leaves the semantic minimum (Chapter 6, "Where gradient descent leaves,
#: as d grows"): omega 0.5, followed down from Q*; (d, seeds) of the sweeps.
EXITS_OMEGA = 0.5
EXITS_RUNS = {1000: (0, 1, 2, 3), 2000: (0, 1, 2, 3), 4000: (0, 1, 2, 3), 8000: (0, 1)}
EXITS_ALPHAS = tuple(round(1.6 - 0.05 * i, 2) for i in range(17))  # 1.6 ... 0.8


def exits(name: str) -> None:
    """Gradient descent followed down alpha from Q* at omega 0.5 at several d: where it leaves m = 0.

    Resumes: the sweeps (d, seed) already in ``book/_data/NAME.csv`` are kept (refused if their
    alphas or (d, seed) are not those of EXITS_*), only the missing ones run, the table is written
    after each finished sweep, and the provenance's seconds add up (its description names the
    commit of the kept sweeps).
    """
    from concurrent.futures import ProcessPoolExecutor

    from attnlab.experiments.figures import load_book_data, load_book_provenance
    t0 = time.perf_counter()
    kept, seconds, note = [], 0.0, ""
    if (OUT / f"{name}.csv").exists():
        old, prov = load_book_data(name), load_book_provenance(name)
        kept = [dict(zip(old, col)) for col in zip(*old.values())]
        for d, seed in {(int(r["d"]), int(r["seed"])) for r in kept}:
            alphas = sorted((float(r["alpha"]) for r in kept if (int(r["d"]), int(r["seed"])) == (d, seed)), reverse=True)
            if seed not in EXITS_RUNS.get(d, ()) or not np.allclose(alphas, EXITS_ALPHAS):
                raise SystemExit(f"{name}.csv holds a sweep d = {d}, seed {seed} that is not one of EXITS_RUNS on "
                                 "EXITS_ALPHAS: move the table aside to start afresh")
        seconds = float(prov["seconds"])
        note = f"; sweeps kept from the table written at commit {prov['git_commit']}" if kept else ""
    done = {(int(r["d"]), int(r["seed"])) for r in kept}
    jobs = [(EXITS_OMEGA, "semantic", EXITS_ALPHAS, d, seed, False)
            for d in sorted(EXITS_RUNS, reverse=True) for seed in EXITS_RUNS[d] if (d, seed) not in done]
    runs = "; ".join(f"d = {d}: seeds {list(s)}" for d, s in EXITS_RUNS.items())
    rows = kept
    with ProcessPoolExecutor(2) as pool:  # longest first
        for sweep in pool.map(_follow, jobs):  # written after each sweep: a later failure loses nothing
            rows = rows + [{k: v for k, v in r.items() if k != "source"} for r in sweep]
            rows.sort(key=lambda r: (int(r["d"]), int(r["seed"]), -float(r["alpha"])))
            _write(name, rows, f"gradient descent (L-BFGS after the GD warm-up, attnlab.hysteresis.follow_minimum) "
                   f"followed down alpha = {EXITS_ALPHAS[0]} ... {EXITS_ALPHAS[-1]} (step 0.05) from Q* on the "
                   f"semantic minimum at omega = {EXITS_OMEGA}, sigma = 0.5, lambda = 0.01 ({runs}); nested "
                   f"training sets per seed; outcome by attnlab.metrics.classify_outcome; seconds: wall time of "
                   f"all sweeps, summed over resumed runs{note}", seconds + time.perf_counter() - t0)


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
    if "spinodals_sigma_lambda" in todo:
        spinodals_sigma_lambda("spinodals_sigma_lambda")
    if "response" in todo:
        response("response")
    if "exits" in todo:
        exits("exits")


if __name__ == "__main__":
    main(sys.argv[1:])
