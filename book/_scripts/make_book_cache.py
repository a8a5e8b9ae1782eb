"""Precompute the state-evolution tables that the book's chapters plot.

The chapters prefer the results cached by ``attnlab reproduce`` (``results/``, default
quadrature); when those are missing they read these smaller tables, made with the cheap
split rule of :func:`attnlab.widgets.fast_quadrature` (error ~1e-3), instead of spending
minutes of the book build on state-evolution sweeps. Every chapter that uses them says so
and can recompute everything with ``FULL_SCALE = True``.

Usage (from the repository root; about 1-2 minutes on two cores)::

    python book/_scripts/make_book_cache.py            # all tables
    python book/_scripts/make_book_cache.py curves     # one of: curves, asymmetric, phase, spinodals,
                                                       # spinodals_held

and, not part of "all tables" (gradient descent at d = 4000: response, response_theta about 15-30
minutes each on two cores, response_sizes under a minute)::

    python book/_scripts/make_book_cache.py response response_theta response_sizes

and the followed sweeps of ``EXITS`` (exits, exits_sigma_lambda, exits_positional,
exits_positional_sigma_lambda, exits_positional_omega03, approach_positional: half an hour to
several hours each on two cores; resumable), fresh_positional, fresh_semantic (gradient
descent from one start, fresh at each alpha; resumable) and thresholds_semantic (bisection
per training set, about an hour; resumable)::

    python book/_scripts/make_book_cache.py exits_positional_sigma_lambda

A followed-sweep table is checked against the current code, without running it all, by running
the cheapest sweep of each of its cases again (minutes; recorded under ``verified`` in its .json)::

    python book/_scripts/make_book_cache.py --verify exits_positional

It refuses to start while attnlab/ or book/_scripts/ has uncommitted changes (``--allow-dirty``
runs anyway and records ``git_dirty: true``). Writes ``book/_data/NAME.csv`` and
``book/_data/NAME.json`` (what, how, with which code).
"""
from __future__ import annotations

import csv
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import attnlab
from attnlab.experiments.store import read_columns, read_provenance
from attnlab.experiments.sweeps import code_provenance
from attnlab.theory import ConvergenceWarning, find_transition, linear_baseline_error, se_curve
from attnlab.widgets import fast_quadrature

OUT = Path(__file__).resolve().parent.parent / "_data"
#: The code a table depends on: its provenance names their commit, and the script refuses to
#: start while a tracked file under them differs from it (``--allow-dirty`` records git_dirty: true).
CODE_PATHS = ("attnlab", "book/_scripts")
#: The code provenance taken when :func:`main` starts (a sweep of hours must not name a commit
#: made while it ran).
PROVENANCE: dict | None = None
ALPHAS = [round(a, 2) for a in np.arange(0.1, 2.01, 0.1)]
OMEGAS = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
#: The spinodals of the default model (both probes): every 0.05, to draw where the lines turn.
SPINODAL_OMEGAS = [round(0.05 * i, 2) for i in range(11)]


def _write(name: str, rows: list[dict], description: str, seconds: float, quadrature=None) -> None:
    OUT.mkdir(exist_ok=True)
    with open(OUT / f"{name}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.10g}" if isinstance(v, float) else v) for k, v in r.items()})
    q = fast_quadrature() if quadrature is None else quadrature
    code = PROVENANCE or code_provenance(CODE_PATHS)  # the code when the run started, not when it ended
    meta = dict(description=description, quadrature=repr(q), attnlab_version=attnlab.__version__,
                git_commit=code["git_commit"], git_dirty=code["git_dirty"], numpy=code.get("numpy"),
                torch=code.get("torch"), seconds=round(seconds, 1),
                script="book/_scripts/make_book_cache.py")
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


def _spinodal_row(params: attnlab.ModelParams, basins: str = "redescend") -> dict:
    from attnlab.theory.spinodals import find_spinodals
    s = find_spinodals(params, quad=fast_quadrature(), basins=basins)
    row = dict(omega=params.omega, alpha_s_semantic=s.alpha_s_semantic, alpha_s_positional=s.alpha_s_positional,
               semantic_intervals=json.dumps(s.semantic), positional_intervals=json.dumps(s.positional),
               alpha_min=s.alpha_min, alpha_max=s.alpha_max, xtol=s.xtol, minimizer=s.minimizer,
               sigma=params.sigma, **{"lambda": params.lam}, basins=s.basins)
    print(row, flush=True)
    return row


SPINODALS_TEXT = ("spinodals from find_spinodals (alpha in [0.05, 20], 16-point geometric grid, ends bisected to "
                  "1%) with the followed minimiser: above alpha_s_semantic the semantic minimum exists, below "
                  "alpha_s_positional the positional one (NaN: beyond 20); the intervals where each branch is a "
                  "minimum (stable along its pinned overlap, attnlab.theory.stability); basins: the stability "
                  "probe")


def spinodals(name: str, basins: str = "redescend") -> None:
    """The spinodals of the default model (``basins``: the stability probe, Chapter 6's "How sure
    is a spinodal?")."""
    t0 = time.perf_counter()
    rows = [_spinodal_row(attnlab.ModelParams(omega=omega), basins) for omega in SPINODAL_OMEGAS]
    _write(name, rows, SPINODALS_TEXT + f" ({basins}); sigma = 0.5, lambda = 0.01, A = [[0.6, 0.4], [0.4, 0.6]]",
           time.perf_counter() - t0)


def spinodals_sigma_lambda(name: str) -> None:
    """The spinodals at the explorers' sigma (lambda = 0.01) and lambda (sigma = 0.5)."""
    from attnlab.explorer_grid import LAMS, SIGMAS
    t0 = time.perf_counter()
    cases = [(s, 0.01) for s in SIGMAS] + [(0.5, lam) for lam in LAMS if lam != 0.01]
    rows = [_spinodal_row(attnlab.ModelParams(omega=omega, sigma=s, lam=lam)) for s, lam in cases for omega in OMEGAS]
    _write(name, rows, SPINODALS_TEXT + f"; (sigma, lambda) in {cases}, A = [[0.6, 0.4], [0.4, 0.6]]",
           time.perf_counter() - t0)


#: The response checks (Chapter 6, "Asking gradient descent: the response of m" and "... of
#: theta"): per table, the start (and so the branch and the overlap pulled on), omega, d, seeds
#: and the sweep's alphas (in its order: down from Q*, up from the positional start).
RESPONSES = {
    "response": dict(start="semantic", omega=0.5, d=4000, seeds=(0, 1, 2),
                     alphas=(2.0, 1.8, 1.6, 1.4, 1.3, 1.2, 1.1, 1.05, 1.0, 0.95)),
    "response_theta": dict(start="positional", omega=0.1, d=4000, seeds=(0, 1, 2),
                           alphas=(1.0, 1.4, 1.8, 2.0, 2.1, 2.2, 2.3, 2.4, 2.5, 2.6)),
}


def _follow(job: tuple) -> list[dict]:
    """One followed gradient-descent sweep ``(params, start, alphas, d, seed, susceptibility, label)``
    (``params``: keyword arguments of ModelParams), one row per alpha; ``label`` adds the
    columns sigma, lambda and omega."""
    import torch
    from attnlab.hysteresis import follow_minimum
    torch.set_num_threads(1)
    kw, start, alphas, d, seed, susceptibility, label = job
    params = attnlab.ModelParams(**kw)
    t0 = time.perf_counter()
    out = follow_minimum(params, alphas, d, start=start, seed=seed, susceptibility=susceptibility)
    print(f"{kw} {start} d {d} seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    tags = dict(sigma=params.sigma, **{"lambda": params.lam}, omega=params.omega) if label else {}
    return [dict(source="gd", **tags, seed=seed, d=d, **{k: (v.item() if hasattr(v, "item") else v)
                                                         for k, v in zip(out, col)})
            for col in zip(*out.values())]


def _response_sweep(job: tuple) -> list[dict]:
    name, seed = job
    c = RESPONSES[name]
    return _follow((dict(omega=c["omega"]), c["start"], c["alphas"], c["d"], seed, True, False))


def response(name: str) -> None:
    """Gradient descent's response of the overlap its start's branch pins (chi_m from Q*, chi_theta
    from the positional start) along the followed minimum, and the SE's on that branch."""
    from concurrent.futures import ProcessPoolExecutor

    from attnlab.theory import Quadrature, solve_state_evolution
    from attnlab.theory.stability import BASINS, STEP, pinned_direction, pinned_eigenvalue, pinned_susceptibility
    c = RESPONSES[name]
    branch = c["start"]
    p_name = pinned_direction(branch)
    probes = BASINS if branch == "semantic" else tuple(b for b in BASINS if b != "linear")
    t0 = time.perf_counter()
    with ProcessPoolExecutor(2) as pool:
        gd = [r for rows in pool.map(_response_sweep, [(name, s) for s in c["seeds"]]) for r in rows]
    se = []
    p = attnlab.ModelParams(omega=c["omega"])
    for a in c["alphas"]:
        r = solve_state_evolution(p, a, branch, warn=False)
        se.append(dict(source="se", alpha=a, converged=bool(r.converged), m=float(r.m), theta=float(r.theta),
                       D=float(p.lam + p.sigma ** 2 * r.hats.Vhat),
                       **{f"lambda_{p_name}_{b}": pinned_eigenvalue(r, basins=b) for b in probes},
                       **{f"chi_{p_name}_{b}": pinned_susceptibility(r, basins=b) for b in probes}))
    keys = list(dict.fromkeys(k for r in gd + se for k in r))
    rows = [{k: r.get(k, "") for k in keys} for r in gd + se]
    how = ("p_1^T H^-1 p_1" if p_name == "m" else "Q*^T H^-1 Q* / d") + " by conjugate gradients"
    field = "-d h m" if p_name == "m" else "-d h theta"
    _write(name, rows, f"response of {p_name} (chi_{p_name} = d{p_name}/dh for the field {field}) on the {branch} "
           f"branch at omega = {c['omega']}, sigma = 0.5, lambda = 0.01: source gd: gradient descent (L-BFGS "
           f"after the GD warm-up) followed along alpha = {list(c['alphas'])} from the {branch} start at d = "
           f"{c['d']}, seeds {list(c['seeds'])} (attnlab.hysteresis.follow_minimum with susceptibility=True: "
           f"chi_{p_name} = {how}, lam_min the Hessian's lowest eigenvalue by Lanczos, grad_rms where L-BFGS "
           f"stopped, target 1e-9); source se: the state evolution's 1 / (D (1 - lambda_{p_name})) with the "
           f"probes {list(probes)} of attnlab.theory.stability (finite step STEP = {STEP} of "
           f"{'sqrt(q)' if p_name == 'm' else 'sqrt(q rho)'} for redescend and held"
           f"{chr(59) + ' linear has none' if 'linear' in probes else ''}), followed minimiser, the quadrature below",
           time.perf_counter() - t0, quadrature=Quadrature())


#: chi_theta at one point of the response_theta sweep over sizes (Chapter 6, "... of theta"):
#: is gradient descent's difference from the state evolution a finite-size effect?
RESPONSE_SIZES = dict(omega=0.1, alpha=1.0, seeds={500: range(8), 1000: range(8), 2000: range(6)})


def _from_start(params: attnlab.ModelParams, alpha: float, d: int, seed: int, start: str = "positional"):
    """The minimum gradient descent (L-BFGS after the GD warm-up, one thread) reaches from ``start``
    (the positional start Q0 = 0.5 * 1_d, or Q*) on a fresh training set: ``(data, result, overlaps)``."""
    import torch

    from attnlab.data import make_problem
    from attnlab.metrics import overlaps
    from attnlab.training import minimize_risk
    torch.set_num_threads(1)
    data = make_problem(params, alpha, d, seed=seed)
    res = minimize_risk(data, params.lam, init=start, method="lbfgs", seed=seed, progress=False)
    return data, res, overlaps(res.Q, data.Qstar, data.P)


def _single_response(job: tuple) -> dict:
    """chi_theta at the minimum that gradient descent reaches from the positional start."""
    from attnlab.curvature import semantic_susceptibility
    d, seed = job
    c = RESPONSE_SIZES
    p = attnlab.ModelParams(omega=c["omega"])
    data, res, ov = _from_start(p, c["alpha"], d, seed)
    return dict(source="gd", d=d, seed=seed, alpha=c["alpha"], m=float(ov.m[0]), theta=float(ov.theta[0]),
                chi_theta=semantic_susceptibility(data, p.lam, res.Q).chi, grad_rms=float(res.grad_rms),
                converged=bool(res.converged), qstar_norm=float(data.Qstar @ data.Qstar / d))


def response_sizes(name: str) -> None:
    """Gradient descent's chi_theta on the positional minimum at several d, one alpha."""
    from concurrent.futures import ProcessPoolExecutor

    from attnlab.theory import Quadrature, solve_state_evolution
    from attnlab.theory.stability import pinned_eigenvalue, pinned_susceptibility
    c = RESPONSE_SIZES
    t0 = time.perf_counter()
    jobs = [(d, s) for d, seeds in c["seeds"].items() for s in seeds]
    with ProcessPoolExecutor(2) as pool:
        gd = list(pool.map(_single_response, jobs))
    r = solve_state_evolution(attnlab.ModelParams(omega=c["omega"]), c["alpha"], "positional", warn=False)
    se = [dict(source="se", alpha=c["alpha"], converged=bool(r.converged),
               **{f"lambda_theta_{b}": pinned_eigenvalue(r, basins=b) for b in ("redescend", "held")},
               **{f"chi_theta_{b}": pinned_susceptibility(r, basins=b) for b in ("redescend", "held")})]
    keys = list(dict.fromkeys(k for row in gd + se for k in row))
    _write(name, [{k: row.get(k, "") for k in keys} for row in gd + se],
           f"response of theta (chi_theta = Q*^T H^-1 Q* / d, attnlab.curvature.semantic_susceptibility) at the "
           f"minimum gradient descent (L-BFGS after the GD warm-up) reaches from the positional start at omega = "
           f"{c['omega']}, alpha = {c['alpha']}, sigma = 0.5, lambda = 0.01: d = "
           + ", ".join(f"{d} (seeds {list(seeds)})" for d, seeds in c["seeds"].items())
           + "; qstar_norm = |Q*|^2 / d of the seed's teacher; source se: the state evolution's "
           "1 / (D (1 - lambda_theta)) with the probes redescend and held, followed minimiser",
           time.perf_counter() - t0, quadrature=Quadrature())


#: Gradient descent from one start, a fresh run (own training set, no warm start) at each alpha
#: (Chapter 6, "From a fresh start"): the protocol the state evolution's followed minimiser
#: describes, against the followed sweeps of the EXITS tables. Per table: the start and its cases
#: (ModelParams keywords, alphas, {d: seeds}).
FRESH = {
    # the positional ends at sigma 0.6 (2.15) and lambda 0.005 (2.40), omega 0; alpha 1.9 at d = 8000
    "fresh_positional": ("positional", [
        (dict(omega=0.0, sigma=0.6), (1.7, 1.9, 2.0, 2.1, 2.2, 2.3), {2000: range(4), 4000: range(4)}),
        (dict(omega=0.0, lam=0.005), (1.7, 1.9, 2.1, 2.3, 2.5, 2.7), {2000: range(4), 4000: range(4)}),
        (dict(omega=0.0, sigma=0.6), (1.9,), {8000: range(4)}),
        (dict(omega=0.0, lam=0.005), (1.9,), {8000: range(4)})]),
    # the semantic ends where the three probes agree: sigma 0.4, omega 0 (1.06) and lambda 0.02,
    # omega 0.5 (2.01)
    "fresh_semantic": ("semantic", [
        (dict(omega=0.0, sigma=0.4), (0.95, 1.0, 1.05, 1.1, 1.15, 1.2, 1.3), {2000: range(4), 4000: range(4)}),
        (dict(omega=0.5, lam=0.02), (1.9, 2.0, 2.1, 2.2, 2.3, 2.4), {2000: range(4), 4000: range(4)}),
        # a larger size where the runs at d = 4000 switch (lambda 0.02: alpha 2.1 at d = 8000 needs
        # more memory than attnlab allows on a 24 GiB machine)
        (dict(omega=0.0, sigma=0.4), (1.1, 1.15, 1.2), {8000: range(4)}),
        (dict(omega=0.5, lam=0.02), (2.1, 2.2, 2.3), {6000: range(4)})]),
}


def _fresh_row(job: tuple) -> dict:
    from attnlab.metrics import canonical_sign, classify_outcome, overlaps
    kw, alpha, d, seed, start = job
    params = attnlab.ModelParams(**kw)
    t0 = time.perf_counter()
    data, res, _ = _from_start(params, alpha, d, seed, start)
    ov = overlaps(canonical_sign(res.Q, data.Qstar, data.P), data.Qstar, data.P)
    m, theta = float(ov.m[0]), float(ov.theta[0])
    return dict(sigma=params.sigma, **{"lambda": params.lam}, omega=params.omega, d=d, seed=seed, alpha=alpha,
                m=m, theta=theta, qnorm=float(ov.qnorm), eps_t=float(res.eps_t), converged=bool(res.converged),
                grad_rms=float(res.grad_rms), outcome=str(classify_outcome(m, theta)),
                seconds=round(time.perf_counter() - t0, 1))


def _completed(fn, jobs: list, failed: list, name_of):
    """Yield ``fn(job)`` for each job as it completes, on two worker processes; a job that raises
    is added to ``failed`` as ``"name_of(job): error"``, for the caller to report after it has
    saved the others."""
    from concurrent.futures import ProcessPoolExecutor, as_completed
    with ProcessPoolExecutor(2) as pool:
        futures = {pool.submit(fn, job): job for job in jobs}
        for fut in as_completed(futures):
            try:
                result = fut.result()
            except Exception as err:  # reported by the caller, after the other jobs are saved
                failed.append(f"{name_of(futures[fut])}: {err}")
                continue
            yield result


def _fresh_key(r: dict) -> tuple:
    """A fresh run's identity in a table: its parameters, size, seed and alpha."""
    return tuple(round(float(r[c]), 6) for c in ("sigma", "lambda", "omega", "d", "seed", "alpha"))


def fresh(name: str) -> None:
    """Gradient descent from one start, fresh at every alpha (``FRESH[name]``).

    Resumes: rows already in ``book/_data/NAME.csv`` that belong to the cases are kept as they are;
    the table is written after each run; a run that fails is reported at the end, after the others.
    """
    from attnlab.data import n_samples

    key = _fresh_key
    start, cases = FRESH[name]
    jobs = [(kw, a, d, s, start) for kw, alphas, runs in cases for d, seeds in runs.items()
            for s in seeds for a in alphas]
    for kw, a, d, _, _ in jobs:  # refused before anything runs
        n_samples(a, d, attnlab.ModelParams(**kw).L)
    wanted = {key(dict(sigma=p.sigma, omega=p.omega, d=d, seed=s, alpha=a, **{"lambda": p.lam})): job
              for job in jobs for kw, a, d, s, _ in [job] for p in [attnlab.ModelParams(**kw)]}
    rows, seconds, note = [], 0.0, ""
    if (OUT / f"{name}.csv").exists():  # kept as written (text), so a resumed table keeps their digits
        with open(OUT / f"{name}.csv", newline="") as fh:
            rows = [r for r in csv.DictReader(fh) if key(r) in wanted]
        prov = json.loads((OUT / f"{name}.json").read_text())
        seconds = float(prov["seconds"])
        note = f"; {len(rows)} runs kept from the table written at commit {prov['git_commit']}" if rows else ""
    todo = [wanted[k] for k in wanted if k not in {key(r) for r in rows}]
    todo.sort(key=lambda j: -j[1] * j[2] ** 2)  # longest first
    t0, failed = time.perf_counter(), []
    for r in _completed(_fresh_row, todo, failed, lambda j: f"{j[0]} alpha {j[1]} d {j[2]} seed {j[3]}"):
        rows.append(r)
        print(f"{name}: sigma {r['sigma']} lambda {r['lambda']} d {r['d']} seed {r['seed']} alpha {r['alpha']}: "
              f"{r['outcome']} m {r['m']:.4f} theta {r['theta']:.4f} ({r['seconds']} s)", flush=True)
        rows.sort(key=key)
        what = "the positional start Q0 = 0.5 * 1_d" if start == "positional" else "the informed start Q0 = Q*"
        _write(name, rows, f"gradient descent (L-BFGS after the GD warm-up, one thread per run) from {what}, "
               "a fresh run at every alpha (no warm start) on the first alpha * d samples of the seed's draw: " + "; ".join(
                   f"{kw}: alpha {list(alphas)}, " + ", ".join(f"d = {d}: seeds {list(s)}" for d, s in runs.items())
                   for kw, alphas, runs in cases)
               + " (other parameters the defaults: sigma = 0.5, lambda = 0.01); m, theta sign-canonicalised; "
               "outcome by attnlab.metrics.classify_outcome; seconds: wall time of the runs, summed over "
               f"resumed runs{note}", seconds + time.perf_counter() - t0)
    if failed:
        raise SystemExit(f"{len(failed)} of {len(todo)} runs failed (the others are in {name}.csv; "
                         "run again to retry):\n" + "\n".join(failed))


#: Where a fresh run from Q* stops ending on the semantic minimum, one training set at a time
#: (Chapter 6, "One training set at a time"): bisection in alpha between a run that does not
#: end on the semantic minimum (lo) and one that does (hi), each a fresh run as in FRESH. Per table: ModelParams
#: keywords and {d: ((lo, hi), seeds, bisection steps)}; hi at d = 10000 is the largest alpha
#: attnlab's memory guard admits on a 24 GiB machine.
THRESHOLDS = {
    "thresholds_semantic": (dict(omega=0.0, sigma=0.4), {
        2000: ((1.0, 2.28), range(12), 6), 4000: ((1.0, 1.64), range(12), 5),
        8000: ((1.0, 1.48), range(12), 5), 10000: ((1.0, 1.31), range(8), 4)}),
}


def _bisect_seed(job: tuple) -> list[dict]:
    """One training set's bisection: its runs in the order made, each carrying the final bracket
    (``alpha_lo``, ``alpha_hi``; empty where lo ends semantic or hi does not: no bracket).

    A run ends on the semantic minimum when ``|theta| > |m|``: near the minimum's end its m
    softens, and runs with theta ~ 0.3 and |m| just above attnlab.metrics.OUTCOME_MIN (outcome
    "mixed") are on it, far from the positional minimum's |m| ~ 0.19, theta ~ 0."""
    kw, d, seed, (lo, hi), steps, kept = job
    rows = []

    def semantic(alpha: float) -> bool:
        r = dict(kept.get(round(alpha, 6)) or _fresh_row((kw, alpha, d, seed, "semantic")))
        r["step"] = len(rows)
        rows.append(r)
        return abs(float(r["theta"])) > abs(float(r["m"]))
    bracketed = not semantic(lo) and semantic(hi)
    for _ in range(steps if bracketed else 0):
        mid = round((lo + hi) / 2, 6)
        lo, hi = (lo, mid) if semantic(mid) else (mid, hi)
    for r in rows:
        r.update(alpha_lo=lo if bracketed else "", alpha_hi=hi if bracketed else "")
    return rows


def thresholds(name: str) -> None:
    """Per training set, the alpha below which a fresh run from Q* no longer ends semantic
    (``THRESHOLDS[name]``, bisection). Resumes: a training set whose runs are all in the table
    is kept as written, a run already there is not made again; the table is written after
    each training set."""
    from attnlab.data import n_samples
    kw, sizes = THRESHOLDS[name]
    p = attnlab.ModelParams(**kw)
    for d, ((_, hi), _, _) in sizes.items():  # refused before anything runs
        n_samples(hi, d, p.L)
    kept = []
    if (OUT / f"{name}.csv").exists():
        with open(OUT / f"{name}.csv", newline="") as fh:
            kept = list(csv.DictReader(fh))
    prov = json.loads((OUT / f"{name}.json").read_text()) if kept else {}
    seconds = float(prov.get("seconds", 0.0))
    jobs = [(kw, d, s, bracket, steps, {round(float(r["alpha"]), 6): r for r in kept
                                        if int(r["d"]) == d and int(r["seed"]) == s})
            for d, (bracket, seeds, steps) in sizes.items() for s in seeds]
    jobs.sort(key=lambda j: -j[1])  # largest d first
    wanted = {(d, s) for _, d, s, *_ in jobs}
    rows = [r for r in kept if (int(r["d"]), int(r["seed"])) in wanted]  # on disk until replaced: nothing lost
    t0, failed = time.perf_counter(), []
    for new in _completed(_bisect_seed, jobs, failed, lambda j: f"d {j[1]} seed {j[2]}"):
        r = new[-1]
        rows = [q for q in rows if (int(q["d"]), int(q["seed"])) != (int(r["d"]), int(r["seed"]))] + new
        print(f"{name}: d {r['d']} seed {r['seed']}: bracket [{r['alpha_lo']}, {r['alpha_hi']}]", flush=True)
        rows.sort(key=lambda r: (int(r["d"]), int(r["seed"]), int(r["step"])))
        _write(name, rows, "per training set, bisection in alpha for where gradient descent (L-BFGS after "
               "the GD warm-up, one thread per run) from the informed start Q0 = Q*, a fresh run at every "
               f"alpha on the first alpha * d samples of the seed's draw, stops ending semantic: {kw} (other "
               "parameters the defaults: sigma = 0.5, lambda = 0.01); " + "; ".join(
                   f"d = {d}: bracket {list(b)}, seeds {list(s)}, {k} bisection steps" for d, (b, s, k) in sizes.items())
               + "; a run ends on the semantic minimum when |theta| > |m|; step: the order of the runs; "
               "alpha_lo, alpha_hi: the final bracket (empty: lo ends semantic or hi does not); m, theta "
               "sign-canonicalised; outcome by attnlab.metrics.classify_outcome; "
               "seconds: wall time of the runs" + (f"; resumed from the table written at commit "
                                                  f"{prov['git_commit']}" if kept else ""),
               seconds + time.perf_counter() - t0)
    if failed:
        raise SystemExit(f"{len(failed)} of {len(jobs)} training sets failed (the others are in {name}.csv; "
                         "run again to retry):\n" + "\n".join(failed))


#: Where gradient descent leaves the semantic minimum (Chapter 6, "Where gradient descent leaves,
#: as d grows"), followed down from Q*: per table, the cases (ModelParams keywords, alphas, {d: seeds}).
EXITS_ALPHAS = tuple(round(1.6 - 0.05 * i, 2) for i in range(17))  # 1.6 ... 0.8
POSITIONAL_ALPHAS = tuple(round(1.7 + 0.05 * i, 2) for i in range(19))  # 1.7 ... 2.6
EXITS = {
    "exits": [(dict(omega=0.5), EXITS_ALPHAS, {1000: (0, 1, 2, 3), 2000: (0, 1, 2, 3), 4000: (0, 1, 2, 3),
                                                8000: (0, 1)})],
    # where the three probes of the state evolution agree on the semantic spinodal (about 1.05 and 2.0)
    "exits_sigma_lambda": [
        (dict(omega=0.0, sigma=0.4), tuple(round(1.5 - 0.05 * i, 2) for i in range(16)),  # 1.5 ... 0.75
         {2000: tuple(range(12)), 4000: tuple(range(12)), 8000: tuple(range(12))}),  # 12 seeds: the error bar
        # d = 8000 at alpha 2.6 needs more memory than attnlab allows on a 24 GiB machine: d = 6000
        (dict(omega=0.5, lam=0.02), tuple(round(2.6 - 0.05 * i, 2) for i in range(21)),  # 2.6 ... 1.6
         {2000: tuple(range(12)), 4000: tuple(range(12)), 6000: tuple(range(8))}),  # more seeds: the error bar
    ],
    # followed *up* from the positional start: where it leaves theta = 0 (omega 0.1: the probes
    # end the positional minimum at about 2.25 and 2.45); d = 6000 at alpha 2.7 is n = 16200
    "exits_positional": [(dict(omega=0.1), tuple(round(2.0 + 0.05 * i, 2) for i in range(15)),  # 2.0 ... 2.7
                          {1000: (0, 1, 2, 3), 2000: (0, 1, 2, 3), 4000: (0, 1, 2, 3), 6000: (0, 1)})],
    # the same at omega = 0 and, there, at one more sigma and lambda (the probes end the positional
    # minimum at about 2.23 / 1.97 (omega 0), 2.16 / 1.97 (sigma 0.6), 2.34 / 2.01 (lambda 0.005))
    "exits_positional_sigma_lambda": [
        (dict(omega=0.0), POSITIONAL_ALPHAS, {2000: (0, 1, 2, 3), 4000: tuple(range(8)), 6000: (0, 1)}),
        (dict(omega=0.0, sigma=0.6), POSITIONAL_ALPHAS, {2000: (0, 1, 2, 3), 4000: (0, 1, 2, 3)}),
        (dict(omega=0.0, lam=0.005), POSITIONAL_ALPHAS, {2000: (0, 1, 2, 3), 4000: (0, 1, 2, 3)}),
    ],
    # omega 0.3: the positional minimum ends only at alpha ~ 18.8 (both probes), and lambda_theta
    # creeps up to 1 over alpha ~ 4 ... 18; alpha * d up to 20 * 2500 is what attnlab allows on 24 GiB
    "exits_positional_omega03": [
        (dict(omega=0.3), tuple(round(2.0 + 0.5 * i, 2) for i in range(21)) + tuple(float(a) for a in range(13, 21)),
         {1000: tuple(range(8)), 2000: tuple(range(8)), 2500: tuple(range(6))}),  # 2.0 ... 12.0 step 0.5, 13 ... 20 step 1
    ],
    # not an exit: the positional minimum's m on the way to its end at d = 8000 (alpha 1.9 is
    # n * d = 122M, within attnlab's memory guard), where gradient descent's |m| at d = 2000 and
    # 4000 falls below the state evolution's (sigma 0.6, lambda 0.005: the gap does not shrink)
    "approach_positional": [(dict(omega=0.0, sigma=0.6), POSITIONAL_ALPHAS[:5], {8000: (0, 1, 2, 3)}),  # 1.7 ... 1.9
                            (dict(omega=0.0, lam=0.005), POSITIONAL_ALPHAS[:5], {8000: (0, 1, 2, 3)})],
}
#: The start of each EXITS table's sweeps (default: from Q*, down in alpha).
EXITS_START = {"exits_positional": "positional", "exits_positional_sigma_lambda": "positional",
               "exits_positional_omega03": "positional", "approach_positional": "positional"}


def exits(name: str) -> None:
    """Gradient descent followed along alpha (the cases of ``EXITS[name]``): down from Q*, where it leaves
    m = 0, or (``EXITS_START``) up from the positional start, where it leaves theta = 0.

    Resumes: the sweeps already in ``book/_data/NAME.csv`` are kept (refused if they are not
    sweeps of the cases, on their alphas), only the missing ones run, the table is written after
    each finished sweep, and the provenance's seconds add up (its description names the commit of
    the kept sweeps).
    """
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from attnlab.data import n_samples
    cases, label = EXITS[name], len(EXITS[name]) > 1
    start = EXITS_START.get(name, "semantic")
    order = -1.0 if start == "semantic" else 1.0  # the sweep's direction in alpha
    for kw, alphas, runs in cases:  # refused before anything runs, not after hours
        for d in runs:
            n_samples(max(alphas), d, attnlab.ModelParams(**kw).L)
    t0 = time.perf_counter()

    def key(params, d, seed):
        return (round(params.sigma, 6), round(params.lam, 6), round(params.omega, 6), int(d), int(seed))

    wanted = {key(attnlab.ModelParams(**kw), d, seed): alphas
              for kw, alphas, runs in cases for d, seeds in runs.items() for seed in seeds}
    kept, seconds, note = [], 0.0, ""
    if (OUT / f"{name}.csv").exists():
        old, prov = read_columns(OUT / f"{name}.csv"), read_provenance(OUT / f"{name}.csv")
        kept = [dict(zip(old, col)) for col in zip(*old.values())]

        def row_key(r):
            p = attnlab.ModelParams(**({"omega": float(r["omega"]), "sigma": float(r["sigma"]),
                                         "lam": float(r["lambda"])} if label else cases[0][0]))
            return key(p, r["d"], r["seed"])
        for k in {row_key(r) for r in kept}:
            alphas = sorted((float(r["alpha"]) for r in kept if row_key(r) == k), key=lambda a: order * a)
            if k not in wanted or not np.allclose(alphas, wanted[k]):
                raise SystemExit(f"{name}.csv holds a sweep {k} (sigma, lambda, omega, d, seed) that is not one of "
                                 f"EXITS[{name!r}] on its alphas: move the table aside to start afresh")
        done = {row_key(r) for r in kept}
        seconds = float(prov["seconds"])
        note = f"; sweeps kept from the table written at commit {prov['git_commit']}" if kept else ""
    else:
        done = set()
    jobs = [(kw, start, alphas, d, seed, False, label) for kw, alphas, runs in cases
            for d in sorted(runs, reverse=True) for seed in runs[d] if key(attnlab.ModelParams(**kw), d, seed) not in done]
    jobs.sort(key=lambda j: -j[3] * max(j[2]))  # longest first
    text = "; ".join(f"{kw}: alpha = {alphas[0]} ... {alphas[-1]} (steps {', '.join(f'{v:g}' for v in sorted(set(np.round(np.abs(np.diff(alphas)), 6))))}), "
                     + ", ".join(f"d = {d}: seeds {list(s)}" for d, s in runs.items()) for kw, alphas, runs in cases)
    rows, failed = kept, []
    with ProcessPoolExecutor(2) as pool:
        futures = {pool.submit(_follow, job): job for job in jobs}
        for done_sweep in as_completed(futures):  # written as each sweep ends: a failure loses nothing else
            try:
                sweep = done_sweep.result()
            except Exception as err:  # reported at the end, after the other sweeps are saved
                kw, _, _, d, seed, _, _ = futures[done_sweep]
                failed.append(f"{kw} d {d} seed {seed}: {err}")
                continue
            rows = rows + [{k: v for k, v in r.items() if k != "source"} for r in sweep]
            rows.sort(key=lambda r: tuple(float(r[c]) for c in (("sigma", "lambda", "omega") if label else ()))
                      + (int(r["d"]), int(r["seed"]), order * float(r["alpha"])))
            path = ("down alpha from Q* on the semantic minimum" if start == "semantic"
                    else "up alpha from the positional start Q0 = 0.5 * 1_d on the positional minimum")
            _write(name, rows, "gradient descent (L-BFGS after the GD warm-up, attnlab.hysteresis.follow_minimum) "
                   f"followed {path} ({text}; other parameters the defaults: "
                   "sigma = 0.5, lambda = 0.01); nested training sets per seed; outcome by "
                   "attnlab.metrics.classify_outcome; seconds: wall time of all sweeps, summed over resumed runs"
                   f"{note}", seconds + time.perf_counter() - t0)
    if failed:
        raise SystemExit(f"{len(failed)} of {len(jobs)} sweeps failed (the others are in {name}.csv; "
                         "run again to retry):\n" + "\n".join(failed))


#: How close a re-run row must be to the table's (``verify``), relative and absolute: with numpy
#: 2.4.6 and torch 2.13.0 the same code run again reproduces the book's tables to 8e-8 (1.0e-6
#: relative) in an overlap or an error before a sweep's first jump (the L-BFGS runs stop at a
#: gradient of ~1e-9 rms), except on 7 mixed rows just before two sweeps leave the positional
#: minimum, where it differs by up to 0.03 (Chapter 6, "One run, run again").
VERIFY_RTOL, VERIFY_ATOL = 1e-5, 1e-7
_NUMBERS = ("m", "theta", "qnorm", "eps_t", "eps_g")
_JOINT_SIGN = np.array([-1.0, -1.0, 1.0, 1.0, 1.0])  # Q -> -Q on _NUMBERS
def _first_jump(outcome) -> int:
    """Index of the first alpha of a sweep (in its order) where its outcome differs from the alpha
    before; ``len(outcome)`` for none. (A sign change of m and theta together is not one: the
    overlaps are sign-canonicalised, the larger one positive, and Q and -Q are one attention.)"""
    for k in range(1, len(outcome)):
        if outcome[k] != outcome[k - 1]:
            return k
    return len(outcome)


def verify(name: str) -> list[str]:
    """Run again, at the current commit, the cheapest sweep of each case of ``EXITS[name]`` (its
    smallest d, its first seed) and compare it with the table's rows of that sweep.

    The table's rows define the sweep's first jump: the first alpha where its outcome changes
    (:func:`_first_jump`). Up to there every number of the re-run (m, theta, qnorm, eps_t, eps_g;
    m and theta up to a joint sign) must agree within :data:`VERIFY_RTOL` of the table's plus
    :data:`VERIFY_ATOL`, and the outcome exactly; a row that does not is a failure, whatever its
    cause (a change of the code, or a row where a rounding-level difference sends the run
    elsewhere). So a re-run that jumps earlier than the table's run fails, one that jumps later
    does not: from the table's first jump on, the re-run need not land where the table's run did
    (a rounding-level difference can pick another nearby minimum, or move a later jump by a grid
    step), and the differences there, and the alphas where the outcome differs, are recorded,
    not required. ``converged`` (whether the gradient's rms fell below its target, ~1e-9) is not
    compared: where a run stops close to the target, rounding decides it (the flags that differ
    are counted).

    The check is recorded in ``NAME.json`` under ``verified`` (commit, git_dirty, numpy and torch
    versions, the sweeps and the alpha of each one's first jump in the table, rows compared, the
    largest difference in the rows that agree, the rows that differ before the first jump, each
    with both outcomes, its largest difference and the column of it; from the jump on, the
    largest differences and each alpha where the outcome differs, with both outcomes); the
    table's rows are not touched. For a table written before provenance recorded ``git_dirty``,
    the record says whether a clean commit reproduces it, and where it does not.

    Returns
    -------
    list of str
        The rows that differ before their sweep's first jump, one line each (empty: the sweeps
        are reproduced there).

    Raises
    ------
    SystemExit
        Status 2 (one line on stderr) where the table is missing.
    """
    from concurrent.futures import ProcessPoolExecutor
    start = EXITS_START.get(name, "semantic")
    label = len(EXITS[name]) > 1
    old, prov = read_columns(OUT / f"{name}.csv"), read_provenance(OUT / f"{name}.csv")
    if old is None or prov is None:
        _usage(f"no table {name} in {OUT} to verify: run make_book_cache.py {name} first")
    t0 = time.perf_counter()
    jobs = [(kw, start, alphas, min(runs), tuple(runs[min(runs)])[0], False, label) for kw, alphas, runs in EXITS[name]]
    with ProcessPoolExecutor(2) as pool:
        reruns = list(pool.map(_follow, jobs))
    differ, differing, moved, flags, sweeps, first, agreeing = [], [], [], 0, [], [], 0.0
    rows = {"before": 0, "after": 0}
    worst, absolute = {"before": 0.0, "after": 0.0}, {"before": 0.0, "after": 0.0}
    for (kw, _, _, d, seed, _, _), rerun in zip(jobs, reruns):
        params = attnlab.ModelParams(**kw)
        sweeps.append(f"{kw} d = {d} seed {seed}")
        mine = (old["d"] == d) & (old["seed"] == seed)
        if label:
            mine &= (np.isclose(old["sigma"], params.sigma) & np.isclose(old["lambda"], params.lam)
                     & np.isclose(old["omega"], params.omega))
        stored = {round(float(a), 6): i for i, a in zip(np.flatnonzero(mine), old["alpha"][mine])}
        missing = [r["alpha"] for r in rerun if round(float(r["alpha"]), 6) not in stored]
        if missing:
            first.append(None)
            differ.append(f"{sweeps[-1]}: alpha {', '.join(map(str, missing))} not in the table")
            differing.append(dict(sweep=sweeps[-1], alpha=float(missing[0]), outcome=None, table=None,
                                  max_abs_difference=None, column="not in the table"))
            continue
        idx = [stored[round(float(r["alpha"]), 6)] for r in rerun]  # the table's rows in the sweep's order
        jump = _first_jump([str(old["outcome"][i]) for i in idx])
        first.append(float(rerun[jump]["alpha"]) if jump < len(rerun) else None)
        for k, (row, i) in enumerate(zip(rerun, idx)):
            phase = "after" if k >= jump else "before"
            new, was = np.array([float(row[c]) for c in _NUMBERS]), np.array([float(old[c][i]) for c in _NUMBERS])
            flipped = new * _JOINT_SIGN  # m and theta of the other sign (Q and -Q are one attention)
            if np.max(np.abs(flipped - was)) < np.max(np.abs(new - was)):
                new = flipped
            off = np.abs(new - was)
            rows[phase] += 1
            worst[phase] = max(worst[phase], float(np.max(off / np.maximum(np.abs(was), 1e-300))))
            absolute[phase] = max(absolute[phase], float(np.max(off)))
            flags += str(row["converged"]) != str(old["converged"][i])
            same = str(row["outcome"]) == str(old["outcome"][i])
            line = (f"{sweeps[-1]} alpha {row['alpha']}: outcome {row['outcome']} (table {old['outcome'][i]}), "
                    + ", ".join(f"{c} {a:.10g} (table {b:.10g})" for c, a, b in zip(_NUMBERS, new, was)))
            agrees = same and np.all(off <= VERIFY_RTOL * np.abs(was) + VERIFY_ATOL)
            if phase == "before" and agrees:
                agreeing = max(agreeing, float(np.max(off)))
            if phase == "before" and not agrees:
                differ.append(line)
                differing.append(dict(sweep=sweeps[-1], alpha=float(row["alpha"]), outcome=str(row["outcome"]),
                                      table=str(old["outcome"][i]), max_abs_difference=float(f"{np.max(off):.3g}"),
                                      column=_NUMBERS[int(np.argmax(off))]))
            elif phase == "after" and not same:
                moved.append(dict(sweep=sweeps[-1], alpha=float(row["alpha"]), outcome=str(row["outcome"]),
                                  table=str(old["outcome"][i])))
    code = PROVENANCE or code_provenance(CODE_PATHS)
    prov["verified"] = dict(
        git_commit=code["git_commit"], git_dirty=code["git_dirty"], numpy=code.get("numpy"), torch=code.get("torch"),
        sweeps=sweeps,
        rows_before_first_jump=rows["before"], rows_differing=len(differ), differing=differing,
        max_abs_difference_before_jump=float(f"{absolute['before']:.3g}"),
        max_abs_difference_agreeing=float(f"{agreeing:.3g}"),
        max_relative_difference_before_jump=float(f"{worst['before']:.3g}"),
        first_jump=first, rows_from_first_jump=rows["after"], outcome_differs_after_jump=moved,
        max_abs_difference_after_jump=float(f"{absolute['after']:.3g}"),
        max_relative_difference_after_jump=float(f"{worst['after']:.3g}"), converged_flags_differing=flags,
        rtol=VERIFY_RTOL, atol=VERIFY_ATOL, seconds=round(time.perf_counter() - t0, 1),
        how="make_book_cache.py --verify: the cheapest sweep of each case run again; up to the sweep's first jump "
            "(where its outcome first changes) every number within rtol |table| + atol and the outcome exactly; "
            "from the jump on, differences recorded")
    (OUT / f"{name}.json").write_text(json.dumps(prov, indent=1) + "\n")
    print(f"{name}: {len(sweeps)} sweeps run again; before their first jump {rows['before']} rows, {len(differ)} "
          f"differ (largest difference {absolute['before']:.1e}, relative {worst['before']:.1e}); from it on "
          f"{rows['after']} rows, outcome differs in {len(moved)} (largest difference {absolute['after']:.1e}); "
          f"{flags} converged flags differ")
    for x in moved:
        print(f"  after the first jump: {x['sweep']} alpha {x['alpha']}: outcome {x['outcome']} (table {x['table']})")
    return [f"{name}: {line}" for line in differ]


def _usage(message: str) -> None:
    print(f"make_book_cache.py: {message}", file=sys.stderr)
    sys.exit(2)


TABLES = ("curves", "asymmetric", "phase", "spinodals", "spinodals_held", "spinodals_sigma_lambda", *RESPONSES, "response_sizes", *EXITS,
          *FRESH, *THRESHOLDS)


def main(argv: list[str]) -> None:
    """Run the tables named in ``argv`` (default: curves, asymmetric, phase, spinodals,
    spinodals_held).

    With ``--verify`` (followed-sweep tables only, :func:`verify`): run the cheapest sweep of
    each case again and record whether it reproduces the table; exit status 1 where a row
    differs.

    Exits with status 2 and one line on stderr for a name that is not a table, or when
    attnlab/ or book/_scripts/ has uncommitted changes (unless ``--allow-dirty``).
    """
    global PROVENANCE
    which = [a for a in argv if a not in ("--allow-dirty", "--verify")]
    unknown = [a for a in which if a not in TABLES]
    if unknown:
        _usage(f"unknown table {unknown[0]!r}; choose from {', '.join(TABLES)} (or none for the default five)")
    checking = "--verify" in argv
    if checking and (not which or any(a not in EXITS for a in which)):
        _usage(f"--verify checks the followed sweeps: name one or more of {', '.join(EXITS)}")
    PROVENANCE = code_provenance(CODE_PATHS)
    if PROVENANCE["git_dirty"] and "--allow-dirty" not in argv:
        _usage(f"{' or '.join(CODE_PATHS)} has uncommitted changes: commit them first (a table names the "
               "commit it was computed with), or pass --allow-dirty to record git_dirty: true")
    warnings.simplefilter("ignore", ConvergenceWarning)  # recorded per row in `converged`
    if checking:
        differ = [line for name in which for line in verify(name)]
        if differ:
            raise SystemExit(f"{len(differ)} rows differ from their tables:\n" + "\n".join(differ))
        return
    todo = which or ["curves", "asymmetric", "phase", "spinodals", "spinodals_held"]
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
    if "spinodals_held" in todo:
        spinodals("spinodals_held", basins="held")
    if "spinodals_sigma_lambda" in todo:
        spinodals_sigma_lambda("spinodals_sigma_lambda")
    for name in RESPONSES:
        if name in todo:
            response(name)
    if "response_sizes" in todo:
        response_sizes("response_sizes")
    for name in EXITS:
        if name in todo:
            exits(name)
    for name in FRESH:
        if name in todo:
            fresh(name)
    for name in THRESHOLDS:
        if name in todo:
            thresholds(name)


if __name__ == "__main__":
    main(sys.argv[1:])
