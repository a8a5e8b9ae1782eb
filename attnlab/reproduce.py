"""Reproduce the paper's figures at full scale: ``attnlab reproduce``, cached results with provenance.

Source of the figures: Cui, Behrens, Krzakala, Zdeborova 2024 (arXiv:2402.03902),
Fig. 2 (overlaps and errors against ``alpha`` at ``omega = 0.3``, simulations at
``d = 1000``), Fig. 3 (the ``(alpha, omega)`` phase diagram) and the appendix
(another positional matrix ``A``, a rank-2 student, Adam against GD).

Each figure is a registered :class:`Figure`: a grid of finite-``d`` runs (run
by :mod:`attnlab.sweeps` on any executor, resumable), a list of
state-evolution tasks for the theory lines, and a plot. ``reproduce(name)``
writes, in ``out`` (default ``results/``):

* ``NAME.csv``: one row per run, every parameter a column (``d, alpha, omega,
  sigma, lambda, A11..A22, rank, init, method, seed, steps, lr, n_test``),
  then ``n, m, theta, qnorm, eps_t, eps_g, eps_g_sem, eps_g_linear, ...``;
* ``NAME-theory.csv``: the state-evolution points (``kind, branch, alpha, ...``)
  or thresholds (``kind = transition``: ``omega, alpha_c, alpha_l``);
* ``NAME.json`` and ``NAME-theory.json``: provenance (attnlab version, git
  commit, command line, seeds, dates, runtime, notes on the scale);
* ``NAME.png``: the figure.

``--quick`` runs a small version of the same figure (small ``d``, few
``alpha``, one seed) into ``NAME-quick.*``; it is a smoke test of the whole
pipeline, not a result.

The book loads cached results with :func:`load_results` (``None`` when the
file is absent, so a chapter can fall back to computing a small version) and
says where they came from with :func:`describe_results`.
"""
from __future__ import annotations

import math
import os
import shlex
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .explorer_grid import ALPHAS, LAMS, OMEGAS, SIGMAS, explorer_tasks
from .params import BRANCHES, DEFAULT_A, PAPER_A_ASYMMETRIC, ModelParams, check_choice, check_int, check_path
from .sweeps import (Sweep, grid, read_columns, read_provenance, run_sweeps, simulation_spec, spec_key)

__all__ = ["Figure", "FIGURES", "RESULTS_DIR", "get_figure", "figure_specs", "theory_specs", "reproduce",
           "run_theory_spec", "load_results", "load_provenance", "describe_results", "add_cli"]

#: Where :func:`load_results` looks by default: ``$ATTNLAB_RESULTS`` or the repository's ``results/``.
RESULTS_DIR = Path(os.environ.get("ATTNLAB_RESULTS", Path(__file__).resolve().parent.parent / "results"))

#: The paper's 25 sample complexities in (0, 2]: 0.08, 0.16, ..., 2.0.
ALPHAS_25 = tuple(float(f"{a:.4g}") for a in np.linspace(0.08, 2.0, 25))
PAPER = dict(sigma=0.5, lam=0.01)
INIT_LABELS = {"random": "random init", "semantic": r"informed init $Q_0 = Q^*$", "positional": "positional init"}
METHOD_LABELS = {"lbfgs": "GD + L-BFGS", "gd": "GD", "adam": "Adam"}
METHOD_MARKERS = {"lbfgs": "o", "gd": "o", "adam": "^"}


# ----------------------------------------------------------------------------- theory tasks

def _A_columns(A) -> dict:
    A = ModelParams(A=A).A
    return dict(A11=A[0][0], A12=A[0][1], A21=A[1][0], A22=A[1][1])


def _params_from(spec) -> ModelParams:
    return ModelParams(sigma=spec["sigma"], lam=spec["lambda"], omega=spec["omega"],
                       A=((spec["A11"], spec["A12"]), (spec["A21"], spec["A22"])))


def run_theory_spec(spec: dict) -> list[dict]:
    """Run one state-evolution task (a runner for :func:`attnlab.sweeps.run_sweeps`).

    ``spec["kind"]``:

    * ``"se-curve"``: fixed points on ``spec["branch"]`` at ``spec["alphas"]``
      (:func:`attnlab.theory.se_curve`, warm-started along the curve); one row
      per ``alpha`` with ``m, theta, qnorm, eps_t, eps_g, eps_g_linear,
      converged, residual, iterations`` (a point where the solver fails is a
      row with ``converged = False`` and NaN values, not a lost curve);
    * ``"transition"``: :func:`attnlab.theory.find_transition` at
      ``spec["omega"]``; one row with ``alpha_c, alpha_l, eps_g_linear, xtol``.

    An optional ``spec["minimizer"]`` (``"followed"`` or ``"global"``) picks the
    semantic branch's proximal minimiser (default: the solver's); the rows then
    carry a ``minimizer`` column.

    ``task_seconds`` is the wall time of the whole task.
    """
    from .theory import ConvergenceWarning, find_transition, linear_baseline_error, se_curve
    from .theory.solver import DEFAULT_MINIMIZER

    params = _params_from(spec)
    base = {k: spec[k] for k in ("kind", "omega", "sigma", "lambda", "A11", "A12", "A21", "A22", "minimizer")
            if k in spec}
    minimizer = spec.get("minimizer")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # recorded per row in `converged`
        if spec["kind"] == "se-curve":
            curve = se_curve(params, spec["alphas"], spec["branch"], minimizer=minimizer, quiet=True)
            lin = linear_baseline_error(params)
            secs = time.perf_counter() - t0
            return [dict(base, minimizer=r.minimizer, branch=spec["branch"], alpha=r.alpha, m=r.m, theta=r.theta,
                         qnorm=r.qnorm, eps_t=r.eps_t, eps_g=r.eps_g, eps_g_linear=lin, converged=bool(r.converged),
                         residual=r.residual, iterations=r.iterations, task_seconds=secs) for r in curve]
        if spec["kind"] == "transition":
            tr = find_transition(params, alpha_max=spec["alpha_max"], xtol=spec["xtol"], minimizer=minimizer)
            return [dict(base, minimizer=minimizer or DEFAULT_MINIMIZER, alpha_c=tr.alpha_c,
                         alpha_l=tr.alpha_l, eps_g_linear=tr.eps_g_linear, xtol=tr.xtol, alpha_max=spec["alpha_max"], task_seconds=time.perf_counter() - t0)]
    raise ValueError(f"theory spec kind must be 'se-curve' or 'transition', got {spec['kind']!r}")


def _model_columns(fixed: dict, omega=None) -> dict:
    p = ModelParams(sigma=fixed.get("sigma", 0.5), lam=fixed.get("lam", 0.01),
                    omega=fixed.get("omega", 0.3) if omega is None else omega, A=fixed.get("A", DEFAULT_A))
    return dict(omega=p.omega, sigma=p.sigma, **{"lambda": p.lam}, **_A_columns(p.A))


def _curve_tasks(fixed: dict, axes: dict) -> list[dict]:
    """Both SE branches along the grid's alphas (at the grid's single omega)."""
    alphas = sorted(set(axes["alpha"] if "alpha" in axes else [fixed["alpha"]]))
    omegas = axes.get("omega", [fixed.get("omega", 0.3)])
    return [dict(kind="se-curve", branch=b, alphas=[float(a) for a in alphas], **_model_columns(fixed, w))
            for w in omegas for b in ("positional", "semantic")]


def _arbiter_tasks(fixed: dict, axes: dict) -> list[dict]:
    """At every ``omega`` of the grid and for both proximal minimisers: both branches on a
    fine ``alpha`` grid over the sweep's range, and ``find_transition``."""
    alphas = axes["alpha"] if "alpha" in axes else [fixed["alpha"]]
    # a fine grid for smooth lines (not for a grid of three or fewer alphas, e.g. --quick)
    fine = sorted(set(np.round(np.linspace(min(alphas), max(alphas), 35 if len(alphas) > 3 else 0), 4).tolist())
                  | set(alphas))
    tasks = []
    for w in sorted(set(axes.get("omega", [fixed.get("omega", 0.3)]))):
        cols = _model_columns(fixed, w)
        for m in ("followed", "global"):
            tasks += [dict(kind="se-curve", branch=b, alphas=fine, minimizer=m, **cols) for b in BRANCHES]
            tasks.append(dict(kind="transition", alpha_max=3.0, xtol=1e-3, minimizer=m, **cols))
    return tasks


def _transition_tasks(fixed: dict, axes: dict) -> list[dict]:
    """``find_transition`` at every ``omega`` of the grid (searching ``alpha`` in ``(0, 3]``)."""
    return [dict(kind="transition", alpha_max=3.0, xtol=1e-3, **_model_columns(fixed, w))
            for w in sorted(set(axes["omega"]))]


# ----------------------------------------------------------------------------- plots

def _groups(runs: dict, keys: tuple) -> dict:
    """Indices of the rows of each combination of ``keys`` values."""
    cols = [runs[k] for k in keys]
    out: dict = {}
    for i, combo in enumerate(zip(*cols)):
        out.setdefault(tuple(v.item() if hasattr(v, "item") else v for v in combo), []).append(i)
    return out


def _mean_sem(values: np.ndarray) -> tuple[float, float]:
    values = np.asarray(values, dtype=float)
    sem = values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return float(values.mean()), float(sem)


def _aggregate(runs: dict, x: str, y: str, by: tuple) -> dict:
    """``{group: (xs, means, sems)}`` over seeds for each value of ``by`` (sorted by ``x``)."""
    out = {}
    for g, idx in _groups(runs, by).items():
        sub = {x: runs[x][idx], y: runs[y][idx]}
        xs = np.unique(sub[x])
        stats = [_mean_sem(sub[y][sub[x] == v]) for v in xs]
        out[g] = (xs, np.array([s[0] for s in stats]), np.array([s[1] for s in stats]))
    return out


PANELS = (("m", r"positional overlap $m = \mathbf{1}\cdot Q/d$"),
          ("theta", r"semantic overlap $\theta = Q^*\cdot Q/d$"),
          ("eps_t", r"training loss $\varepsilon_t = R/d$"),
          ("eps_g", r"test error $\varepsilon_g$"))


def _title(runs: dict, extra: str = "") -> str:
    def one(k, fmt="{:g}"):
        v = np.unique(runs[k]) if k in runs and len(runs[k]) else []
        return ", ".join(fmt.format(x) for x in v)
    A = ""
    if len(runs.get("A11", [])) and not np.isclose(runs["A11"][0], 0.6):
        A = f", A=[[{runs['A11'][0]:g}, {runs['A12'][0]:g}], [{runs['A21'][0]:g}, {runs['A22'][0]:g}]]"
    seeds = len(np.unique(runs["seed"])) if len(runs.get("seed", [])) else 0
    return (rf"$\omega$={one('omega')}, $\sigma$={one('sigma')}, $\lambda$={one('lambda')}{A}, "
            f"d={one('d')}, {seeds} seed(s){extra}")


def _theory_lines(ax, theory, y, x="alpha", rank_note=""):
    if theory is None or "branch" not in theory:
        return
    for branch in ("positional", "semantic"):
        sel = theory["branch"] == branch
        if not sel.any():
            continue
        order = np.argsort(theory[x][sel])
        from .plots import COLORS
        ax.plot(theory[x][sel][order], theory[y][sel][order], "-", color=COLORS[branch], lw=1.5,
                label=f"SE {branch} branch{rank_note}")


def _plot_alpha(runs, theory, path, extra_title="", rank_note=""):
    """2x2 panels of ``m, theta, eps_t, eps_g`` against ``alpha``: SE lines, simulation means +- SEM."""
    import matplotlib.pyplot as plt

    from .plots import COLORS

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True, sharex=True)
    methods = np.unique(runs["method"])
    for ax, (y, label) in zip(axes.flat, PANELS):
        _theory_lines(ax, theory, y, rank_note=rank_note)
        for (init, method), (xs, mu, se) in sorted(_aggregate(runs, "alpha", y, ("init", "method")).items()):
            color = COLORS["semantic"] if init == "semantic" else COLORS["positional"]
            lab = INIT_LABELS.get(init, init) + (f", {METHOD_LABELS.get(method, method)}" if len(methods) > 1 else "")
            shift = 1.015 if method == "adam" else 1.0  # Adam points nudged right so both stay visible
            ax.errorbar(xs * shift, mu, yerr=se, fmt=METHOD_MARKERS.get(method, "o"), ms=4, capsize=2, color=color,
                        mfc="white" if method == "adam" else color, label=lab)
        if y == "eps_g":
            if theory is not None and "eps_g_linear" in theory and len(theory["eps_g_linear"]):
                ax.axhline(theory["eps_g_linear"][0], color=COLORS["linear"], ls="--", label="linear baseline (theory)")
            xs, mu, se = next(iter(_aggregate(runs, "alpha", "eps_g_linear", ("d",)).values()))
            ax.errorbar(xs, mu, yerr=se, fmt="s", ms=3, color=COLORS["linear"], alpha=0.8,
                        label="linear baseline (simulation)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    axes[0, 0].legend(fontsize=7)
    axes[1, 1].legend(fontsize=7)
    method_txt = ", ".join(METHOD_LABELS.get(m, m) for m in methods)
    fig.suptitle(_title(runs, f"; {method_txt}; points: mean $\\pm$ SEM over seeds{extra_title}"), fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_rank2(runs, theory, path):
    _plot_alpha(runs, theory, path, extra_title="; rank-2 student (overlaps: norms over columns)",
                rank_note=" (rank 1)")


def _plot_finite_size(runs, theory, path):
    """Observables against ``d`` at fixed ``alpha``: SE values as horizontal lines."""
    import matplotlib.pyplot as plt

    from .plots import COLORS

    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True, sharex=True)
    for ax, (y, label) in zip(axes.flat, PANELS):
        for (init,), (xs, mu, se) in sorted(_aggregate(runs, "d", y, ("init",)).items()):
            color = COLORS["semantic"] if init == "semantic" else COLORS["positional"]
            ax.errorbar(xs, mu, yerr=se, fmt="o-", ms=4, capsize=2, color=color, label=INIT_LABELS.get(init, init))
        if theory is not None and "branch" in theory:
            for branch in ("positional", "semantic"):
                sel = theory["branch"] == branch
                if sel.any():
                    ax.axhline(theory[y][sel][0], color=COLORS[branch], ls="--", label=f"SE {branch} branch")
        if y == "eps_g" and theory is not None and "eps_g_linear" in theory and len(theory["eps_g_linear"]):
            ax.axhline(theory["eps_g_linear"][0], color=COLORS["linear"], ls=":", label="linear baseline (theory)")
        ax.set_xscale("log")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("embedding dimension $d$")
    axes[0, 0].legend(fontsize=7)
    axes[1, 1].legend(fontsize=7)
    alpha = ", ".join(f"{a:g}" for a in np.unique(runs["alpha"]))
    fig.suptitle(_title(runs, rf"; $\alpha$={alpha}; mean $\pm$ SEM over seeds").replace("d=", "d in "), fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_phase(runs, theory, path):
    """Map of ``eps_t(informed init) - eps_t(random init)`` over ``(alpha, omega)`` with SE thresholds."""
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt

    from .plots import COLORS

    alphas, omegas = np.unique(runs["alpha"]), np.unique(runs["omega"])
    diff = np.full((len(omegas), len(alphas)), np.nan)
    for i, w in enumerate(omegas):
        for j, a in enumerate(alphas):
            cell = (runs["omega"] == w) & (runs["alpha"] == a)
            sem = runs["eps_t"][cell & (runs["init"] == "semantic")]
            rnd = runs["eps_t"][cell & (runs["init"] == "random")]
            if len(sem) and len(rnd):
                diff[i, j] = sem.mean() - rnd.mean()
    fig, ax = plt.subplots(figsize=(6.4, 4.6), constrained_layout=True)
    lim = np.nanmax(np.abs(diff)) if np.isfinite(diff).any() else 1.0
    mesh = ax.pcolormesh(alphas, omegas, diff, shading="nearest", cmap="RdBu",
                         norm=mcolors.TwoSlopeNorm(0.0, -lim, lim))
    fig.colorbar(mesh, ax=ax, label=r"$\varepsilon_t$(informed init) $-$ $\varepsilon_t$(random init)"
                                     "\n(red: semantic minimum lower)")
    if theory is not None and "alpha_c" in theory:
        order = np.argsort(theory["omega"])
        ax.plot(theory["alpha_c"][order], theory["omega"][order], "-o", color=COLORS["alpha_c"], ms=3,
                label=r"$\alpha_c(\omega)$ (SE: training losses cross)")
        ax.plot(theory["alpha_l"][order], theory["omega"][order], "--s", color=COLORS["alpha_l"], ms=3,
                label=r"$\alpha_l(\omega)$ (SE: beats linear baseline)")
        ax.legend(fontsize=7, loc="lower right")
    step = 0.5 * np.diff(alphas).min(initial=0.2)
    right = alphas.max() + step
    if theory is not None and "alpha_c" in theory:  # show thresholds beyond the simulated range too
        finite = np.r_[theory["alpha_c"], theory["alpha_l"]]
        finite = finite[np.isfinite(finite)]
        right = max(right, 1.05 * finite.max(initial=0.0))
    ax.set_xlim(alphas.min() - step, right)
    ax.set_xlabel(r"sample complexity $\alpha = n/d$")
    ax.set_ylabel(r"positional weight $\omega$")
    method = ", ".join(METHOD_LABELS.get(m, m) for m in np.unique(runs["method"]))
    ax.set_title(f"d={', '.join(str(v) for v in np.unique(runs['d']))}, {method}, "
                 f"{len(np.unique(runs['seed']))} seed(s) per cell", fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_arbiter(runs, theory, path):
    from .plots import plot_arbiter

    plot_arbiter(runs, theory, path)


# ----------------------------------------------------------------------------- registry

@dataclass(frozen=True)
class Figure:
    """A reproducible figure.

    Attributes
    ----------
    name, description : str
    fixed : dict
        Keyword arguments of :func:`attnlab.sweeps.simulation_spec` shared by every run.
    axes : dict
        Full-scale grid: ``{"alpha": [...], "init": [...], "seed": [...], ...}``.
    quick : dict
        Replacements (of ``fixed`` or ``axes`` entries) for ``--quick``.
    theory : callable
        ``theory(fixed, axes) -> list of theory specs`` for :func:`run_theory_spec`.
    plot : callable
        ``plot(runs, theory, path)`` with column dicts (``theory`` may be ``None``,
        ``runs`` is ``None`` for a theory-only figure).
    notes : str
        Scale and method, saved in the provenance.
    simulations : bool
        ``False``: a theory-only figure (``fixed`` and ``axes`` then describe the
        state-evolution grid, and there is no ``NAME.csv`` of runs).
    """

    name: str
    description: str
    fixed: dict
    axes: dict
    quick: dict
    theory: Callable
    plot: Callable
    notes: str = ""
    simulations: bool = True


def _plot_explorer_grid(runs, theory, path):
    """Overview of the explorers' grid: alpha_c(omega) per sigma (panels) and lambda (lines)."""
    import matplotlib.pyplot as plt

    tr = theory["kind"] == "transition"
    sigmas = np.unique(theory["sigma"][tr])
    fig, axes = plt.subplots(1, len(sigmas), figsize=(3.4 * len(sigmas), 3.2), sharey=True, squeeze=False,
                             constrained_layout=True)
    for ax, s in zip(axes[0], sigmas):
        for lam in np.unique(theory["lambda"][tr]):
            sel = tr & (theory["sigma"] == s) & (theory["lambda"] == lam)
            order = np.argsort(theory["omega"][sel])
            ax.plot(theory["alpha_c"][sel][order], theory["omega"][sel][order], "-o", ms=3, label=rf"$\lambda$ = {lam:g}")
        ax.set(title=rf"$\sigma$ = {s:g}", xlabel=r"$\alpha_c$")
    axes[0][0].set_ylabel(r"$\omega$")
    axes[0][-1].legend(fontsize=8)
    fig.savefig(path, dpi=120)
    plt.close(fig)


#: alpha grid of the arbiter (``se-vs-gd``): the semantic branch's disputed range and beyond.
ARBITER_ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4, 1.7, 2.0)

_QUICK_ALPHA = dict(d=40, alpha=[0.5, 1.0, 2.0], seed=[0])

FIGURES: dict[str, Figure] = {f.name: f for f in [
    Figure(
        "phase-diagram",
        "(alpha, omega) phase diagram: SE alpha_c(omega), alpha_l(omega) over the map of "
        "eps_t(informed init) - eps_t(random init) from GD",
        fixed=dict(d=200, method="lbfgs", **PAPER),
        axes=dict(omega=[0.0, 0.1, 0.2, 0.3, 0.4, 0.5], alpha=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0],
                  init=["semantic", "random"], seed=[0, 1]),
        quick=dict(d=30, omega=[0.2, 0.4], alpha=[0.5, 1.5], seed=[0]),
        theory=_transition_tasks, plot=_plot_phase,
        notes="Map at d = 200 (coarser than the paper's d = 1000): 6 omega x 8 alpha x 2 inits x 2 seeds, "
              "GD warm-up then L-BFGS (method 'lbfgs', the minimum GD selects). Thresholds from the SE "
              "(find_transition, alpha in (0, 3], xtol 1e-3) at omega = 0..0.5."),
    Figure(
        "overlaps-vs-alpha",
        "omega = 0.3: m, theta, eps_t, eps_g against alpha; SE branches, d = 1000 GD from the informed and "
        "the random init (25 alpha x 3 seeds), linear baseline",
        fixed=dict(omega=0.3, d=1000, method="lbfgs", **PAPER),
        axes=dict(alpha=list(ALPHAS_25), init=["semantic", "random"], seed=[0, 1, 2]),
        quick=_QUICK_ALPHA,
        theory=_curve_tasks, plot=_plot_alpha,
        notes="Paper scale (Fig. 2): d = 1000, 25 alpha in (0, 2], 2 inits, 3 seeds; GD warm-up (lr 0.15) then "
              "L-BFGS to gradient rms 1e-9 (method 'lbfgs'); eps_g on 20,000 fresh samples."),
    Figure(
        "finite-size",
        "finite size: m, theta, eps_t, eps_g against d = 10..1000 at alpha = 1.5, omega = 0.3, both inits, "
        "SE values",
        fixed=dict(omega=0.3, alpha=1.5, method="lbfgs", **PAPER),
        axes=dict(d=[10, 20, 50, 100, 200, 500, 1000], init=["semantic", "random"], seed=[0, 1, 2, 3, 4]),
        quick=dict(d=[10, 20, 40], seed=[0]),
        theory=_curve_tasks, plot=_plot_finite_size,
        notes="d in {10, 20, 50, 100, 200, 500, 1000}, 2 inits, 5 seeds, alpha = 1.5; method 'lbfgs'."),
    Figure(
        "asymmetric-A",
        "another positional matrix A = [[0.3, 0.7], [0.8, 0.2]] at omega = 0.3: SE branches and GD against alpha",
        fixed=dict(omega=0.3, d=500, method="lbfgs", A=PAPER_A_ASYMMETRIC, **PAPER),
        axes=dict(alpha=[0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0], init=["semantic", "random"],
                  seed=[0, 1]),
        quick=_QUICK_ALPHA,
        theory=_curve_tasks, plot=_plot_alpha,
        notes="Reduced scale: d = 500, 10 alpha, 2 inits, 2 seeds; method 'lbfgs'."),
    Figure(
        "rank-2",
        "rank-2 student (Q of shape (d, 2)) at omega = 0.3 against alpha, with the rank-1 SE branches",
        fixed=dict(omega=0.3, d=500, method="lbfgs", rank=2, **PAPER),
        axes=dict(alpha=[0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0], init=["semantic", "random"],
                  seed=[0, 1]),
        quick=_QUICK_ALPHA,
        theory=_curve_tasks, plot=_plot_rank2,
        notes="Reduced scale: d = 500, 10 alpha, 2 inits, 2 seeds; method 'lbfgs'. The SE lines are the "
              "rank-1 theory (no rank-2 SE here); overlaps m, theta are norms over Q's two columns."),
    Figure(
        "adam-vs-gd",
        "Adam (lr 0.01) against plain GD (lr 0.15), 5000 steps each, at omega = 0.3 against alpha",
        fixed=dict(omega=0.3, d=300, **PAPER),
        axes=dict(alpha=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0], init=["semantic", "random"],
                  method=["gd", "adam"], seed=[0, 1]),
        quick=dict(d=40, alpha=[0.5, 1.5], seed=[0]),
        theory=_curve_tasks, plot=_plot_alpha,
        notes="Reduced scale: d = 300, 8 alpha, 2 inits, 2 seeds; plain full-batch GD (lr 0.15) and Adam "
              "(lr 0.01), 5000 steps each or until gradient rms 1e-9."),
    Figure(
        "se-vs-gd",
        "the arbiter: GD from Q* and from the positional init at d = 1000, 2000, 4000, extrapolated in 1/d, "
        "against both SE descriptions of the semantic branch; training-loss crossing alpha_c(omega)",
        fixed=dict(method="lbfgs", teacher="exact-norm", n_test=10_000, **PAPER),
        axes=dict(omega=[0.0, 0.1, 0.2, 0.3], alpha=list(ARBITER_ALPHAS), d=[1000, 2000, 4000],
                  init=["semantic", "positional"], seed=[0, 1, 2]),
        quick=dict(omega=[0.3], alpha=[0.6, 1.2], d=[40, 80], seed=[0]),
        theory=_arbiter_tasks, plot=_plot_arbiter,
        notes="Teacher rescaled to |Q*|^2 = d (rho = sigma^2 exactly; the runs cached in results/ drew it "
              "unscaled, N(0, I_d): make_problem ignored its teacher argument until that was fixed); GD warm-up (lr 0.15) then L-BFGS to "
              "gradient rms 1e-9 (method 'lbfgs'); eps_g on 10,000 fresh samples; extrapolation "
              "y(d) = y_inf + b/d by weighted least squares over the seed means at each d."),
    Figure(
        "explorer-grid",
        "the kernel-free explorers' grid: both SE branches along alpha at every (omega, sigma, lambda), and "
        "alpha_c, alpha_l on a denser omega grid",
        fixed=dict(), axes=dict(omega=list(OMEGAS), sigma=list(SIGMAS), lam=list(LAMS), alpha=list(ALPHAS)),
        quick=dict(omega=[0.2, 0.3], sigma=[0.5], lam=[0.01], alpha=[0.6, 1.2, 1.8]),
        theory=explorer_tasks, plot=_plot_explorer_grid, simulations=False,
        notes="State evolution only (default followed minimiser, default quadrature): se_curve with warm starts "
              "along alpha = 0.1..3 (step 0.1) per branch; find_transition (alpha in (0, 3], xtol 1e-3) at the "
              "omegas and their midpoints. Read by attnlab.explorer_grid.load_explorer_grid."),
]}


def get_figure(name: str) -> Figure:
    """The registered figure ``name`` (case-insensitive); ``ValueError`` naming ``figure`` otherwise."""
    if not isinstance(name, str):
        raise ValueError(f"figure must be a figure name (str), got {name!r}")
    lookup = {k.lower(): v for k, v in FIGURES.items()}
    if name.lower() not in lookup:
        raise ValueError(f"figure must be one of {sorted(FIGURES)}, got {name!r} (see attnlab reproduce --list)")
    return lookup[name.lower()]


def _grid_for(fig: Figure, quick: bool, overrides: dict | None) -> tuple[dict, dict]:
    fixed, axes = dict(fig.fixed), {k: list(v) for k, v in fig.axes.items()}
    changes = dict(fig.quick) if quick else {}
    if overrides is not None and not isinstance(overrides, dict):
        raise TypeError(f"overrides must be a dict of grid replacements (e.g. {{'seed': [3, 4]}}) or None, "
                        f"got {type(overrides).__name__}")
    changes.update({k: v for k, v in (overrides or {}).items() if v is not None})
    for k, v in changes.items():
        if isinstance(v, (list, tuple, np.ndarray)):
            if len(v) == 0:
                raise ValueError(f"{k} grid is empty: give at least one value")
            fixed.pop(k, None)
            axes[k] = list(v)
        else:
            axes.pop(k, None)
            fixed[k] = v
    return fixed, axes


def figure_specs(name: str, *, quick: bool = False, overrides: dict | None = None) -> list[dict]:
    """Validated simulation specs of a figure.

    Parameters
    ----------
    name : str
        A key of :data:`FIGURES`.
    quick : bool
        The small ``--quick`` version.
    overrides : dict, optional
        Replace grid axes or fixed parameters, e.g. ``{"seed": [3, 4], "d": [200]}``.

    Raises
    ------
    ValueError
        Unknown figure, empty grid or invalid values (message names the parameter).
    """
    fig = get_figure(name)
    fixed, axes = _grid_for(fig, quick, overrides)
    if not fig.simulations:
        return []
    return [simulation_spec(**g) for g in grid(fixed, axes)]


def theory_specs(name: str, *, quick: bool = False, overrides: dict | None = None) -> list[dict]:
    """State-evolution tasks of a figure (see :func:`run_theory_spec`)."""
    fig = get_figure(name)
    fixed, axes = _grid_for(fig, quick, overrides)
    return fig.theory(fixed, axes)


def _stem(fig: Figure, quick: bool) -> str:
    return fig.name + ("-quick" if quick else "")


def _select(cols: dict | None, keys: set) -> dict | None:
    if cols is None or "run_id" not in cols:
        return None
    sel = np.isin(cols["run_id"], list(keys))
    return {k: v[sel] for k, v in cols.items()}


def reproduce(name: str, *, workers: int = 2, out=None, quick: bool = False, theory: bool = True,
              plot: bool = True, executor=None, progress: bool = True, overrides: dict | None = None,
              command: str | None = None) -> dict:
    """Run (or resume) a figure's sweeps, save tidy CSVs with provenance, draw the figure.

    Parameters
    ----------
    name : str
        Figure name (:data:`FIGURES`, ``attnlab reproduce --list``).
    workers : int
        Processes of the default local pool (ignored if ``executor`` is given).
    out : str or Path, optional
        Output folder (default :data:`RESULTS_DIR`).
    quick : bool
        Small smoke-test version, written to ``NAME-quick.*``.
    theory, plot : bool
        Run the state-evolution tasks; draw ``NAME.png``.
    executor : concurrent.futures.Executor, optional
        E.g. ``distributed.Client(...).get_executor()``.
    progress : bool
        tqdm bar over all runs.
    overrides : dict, optional
        Grid replacements, see :func:`figure_specs`. Rows accumulate in the same
        CSV (each row carries its parameters); the figure shows the requested grid.

    Returns
    -------
    dict
        Paths and counts (``runs_total``, ``runs_skipped`` = resumed,
        ``runs_completed``, the same for ``theory_*``), ``seconds``.

    Raises
    ------
    ValueError
        Bad figure name, grid or ``workers``.
    attnlab.sweeps.SweepError
        If runs failed (the rest are saved).
    """
    fig = get_figure(name)
    workers = check_int("workers", workers, 1)
    specs = figure_specs(fig.name, quick=quick, overrides=overrides)
    tspecs = theory_specs(fig.name, quick=quick, overrides=overrides) if theory else []
    out = Path(RESULTS_DIR if out is None else check_path("out", out))
    stem = _stem(fig, quick)
    scale = ("QUICK smoke-test scale (not a result): " if quick else "") + fig.notes
    sweeps = []
    if tspecs:  # few long tasks: submit first
        sweeps.append(Sweep(tspecs, out / f"{stem}-theory.csv", run_theory_spec,
                            description=f"State evolution for: {fig.description}", notes=scale))
    if specs:
        sweeps.append(Sweep(specs, out / f"{stem}.csv", description=fig.description, notes=scale))
    if not sweeps:
        raise ValueError(f"figure {fig.name!r} is theory-only: leave out --no-theory")
    t0 = time.perf_counter()
    reports = run_sweeps(sweeps, executor=executor, workers=workers, progress=progress, command=command)
    result = dict(figure=fig.name, quick=quick, out=str(out))
    if specs:
        rep = reports[-1]
        result.update(csv=rep.path, provenance=rep.provenance, runs_total=rep.total, runs_skipped=rep.skipped,
                      runs_completed=rep.completed)
    theory_cols = None
    if tspecs:
        trep = reports[0]
        result.update(theory_csv=trep.path, theory_total=trep.total, theory_skipped=trep.skipped,
                      theory_completed=trep.completed)
        theory_cols = _select(read_columns(trep.path, key="run_id"), {spec_key(s) for s in tspecs})
    if plot:
        runs = _select(read_columns(out / f"{stem}.csv", key="run_id"), {spec_key(s) for s in specs}) if specs else None
        png = out / f"{stem}.png"
        fig.plot(runs, theory_cols, png)
        result["figure_path"] = str(png)
    result["seconds"] = round(time.perf_counter() - t0, 2)
    return result


# ----------------------------------------------------------------------------- cached results for the book

def _cache_path(name: str, table: str, results_dir) -> Path:
    check_choice("table", table, ("runs", "theory"))
    quick = isinstance(name, str) and name.lower().endswith("-quick")
    fig = get_figure(name[: -len("-quick")] if quick else name)
    base = Path(RESULTS_DIR if results_dir is None else check_path("results_dir", results_dir))
    return base / (_stem(fig, quick) + ("-theory" if table == "theory" else "") + ".csv")


def load_results(name: str, *, table: str = "runs", results_dir=None) -> dict | None:
    """Cached results of a figure as numpy columns, or ``None`` if the CSV is missing.

    Parameters
    ----------
    name : str
        Figure name (e.g. ``"overlaps-vs-alpha"``; ``"NAME-quick"`` for quick runs).
    table : {"runs", "theory"}
        The simulation runs (one row per run) or the state-evolution table.
    results_dir : str or Path, optional
        Default :data:`RESULTS_DIR` (``$ATTNLAB_RESULTS`` or the repository's ``results/``).

    Returns
    -------
    dict of str to ndarray or None
        One array per column (bool, int64, float64 or str); all rows of the file.

    Raises
    ------
    ValueError
        Unknown figure name or ``table``.
    attnlab.sweeps.CorruptResultsError
        (a ``ValueError``) If the CSV is damaged (cut off, no header, a value
        that does not parse, not UTF-8); the message names the file and line.
    """
    return read_columns(_cache_path(name, table, results_dir), key="run_id")


def load_provenance(name: str, *, table: str = "runs", results_dir=None) -> dict | None:
    """The provenance sidecar of a cached CSV (``None`` if missing)."""
    return read_provenance(_cache_path(name, table, results_dir))


def describe_results(name: str, *, results_dir=None) -> str:
    """One sentence for the book: what is cached for ``name`` and where it came from."""
    path = _cache_path(name, "runs", results_dir)
    cols, prov = read_columns(path, key="run_id"), read_provenance(path)
    if cols is None:
        return f"No cached results for {name!r} ({path} is missing): run `attnlab reproduce {name}`."
    n = len(next(iter(cols.values()))) if cols else 0
    ds = ", ".join(str(v) for v in np.unique(cols["d"])) if "d" in cols else "?"
    seeds = ", ".join(str(v) for v in np.unique(cols["seed"])) if "seed" in cols else "?"
    txt = f"Loaded {n} cached runs (d = {ds}; seeds {seeds}) from {path.name}"
    if prov:
        commit = str(prov.get("git_commit", "unknown"))[:10]
        txt += (f", computed {prov.get('date', '?')[:10]} with attnlab {prov.get('attnlab_version', '?')} "
                f"(commit {commit}) in {prov.get('runtime_seconds_total', 0) / 60:.1f} min wall time")
    return txt + "."


# ----------------------------------------------------------------------------- CLI

def _parse_list(name: str, text: str | None, kind):
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ValueError(f"{name} must be a non-empty comma-separated list, got {text!r}")
    try:
        return [kind(p) for p in parts]
    except ValueError:
        raise ValueError(f"{name} must be a comma-separated list of {kind.__name__} values, got {text!r}") from None


def _cmd_reproduce(args) -> dict:
    if args.list:
        out = {}
        for f in FIGURES.values():
            cached = (Path(args.out or RESULTS_DIR) / f"{f.name}.csv").exists()
            out[f.name] = (f"{f.description} [{len(figure_specs(f.name))} runs; --quick "
                           f"{len(figure_specs(f.name, quick=True))}; {'cached' if cached else 'not cached'}]")
        return out
    if args.figure is None:
        raise ValueError("figure is missing: give a FIGURE to reproduce, or --list")
    get_figure(args.figure)
    overrides = dict(alpha=_parse_list("--alphas", args.alphas, float), seed=_parse_list("--seeds", args.seeds, int),
                     d=_parse_list("--ds", args.ds, int), omega=_parse_list("--omegas", args.omegas, float))
    workers = check_int("workers", args.workers, 1)
    from .cli import check_output

    check_output("--out", RESULTS_DIR if args.out is None else args.out, folder=True)
    # (SIGTERM unwinds like Ctrl-C, see attnlab.cli.main: pending runs cancelled, workers stopped, files consistent)
    executor, client, cluster = None, None, None
    if args.dask is not None and args.dask != "local" and "://" not in args.dask:
        raise ValueError(f"--dask must be 'local' or a scheduler address such as tcp://host:8786, got {args.dask!r}")
    if args.dask:
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ImportError("--dask needs the 'distributed' package: pip install distributed "
                              "(or run without --dask on local processes)") from None

        from .sweeps import limit_threads

        if args.dask == "local":
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
            client = Client(cluster)
        else:
            client = Client(args.dask)
        client.run(limit_threads)
        executor = client.get_executor()
    try:
        return reproduce(args.figure, workers=workers, out=args.out, quick=args.quick, theory=not args.no_theory,
                         plot=not args.no_plot, executor=executor,
                         progress=not (args.json or args.no_progress), overrides=overrides,
                         command="attnlab " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()


def add_cli(subparsers) -> None:
    """Register ``attnlab reproduce`` (called by :mod:`attnlab.cli`)."""
    p = subparsers.add_parser(
        "reproduce", help="reproduce a paper figure at full scale (cached, resumable, parallel)",
        description="Run a figure's simulation sweep and state evolution, write NAME.csv, NAME-theory.csv, "
                    "provenance NAME.json and NAME.png. Re-running resumes: finished runs are not redone.")
    p.add_argument("figure", nargs="?", default=None, help="figure name (see --list)")
    p.add_argument("--list", action="store_true", help="list the figures")
    p.add_argument("--workers", type=int, default=2, help="local worker processes (default 2)")
    p.add_argument("--out", default=None, help="output folder (default: the repository's results/)")
    p.add_argument("--quick", action="store_true",
                   help="small smoke-test version (d ~ 40, 1 seed) written to NAME-quick.*; not a result")
    p.add_argument("--alphas", default=None, help="override the alpha grid, e.g. 0.5,1,1.5")
    p.add_argument("--seeds", default=None, help="override the seeds, e.g. 3,4 (rows accumulate in the CSV)")
    p.add_argument("--ds", default=None, help="override the dimension(s) d, e.g. 100,200")
    p.add_argument("--omegas", default=None, help="override omega (phase diagram: the omega grid)")
    p.add_argument("--no-theory", action="store_true", help="skip the state-evolution tasks")
    p.add_argument("--no-plot", action="store_true", help="do not draw NAME.png")
    p.add_argument("--dask", default=None, metavar="ADDRESS",
                   help="run on a Dask cluster: scheduler address (tcp://host:8786) or 'local' "
                        "(a LocalCluster of --workers processes)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_reproduce)
