"""The paper's figures at full scale (``attnlab reproduce``) and the book's loaders of their cached tables.

Source of the figures: Cui, Behrens, Krzakala, Zdeborova 2024 (arXiv:2402.03902),
Fig. 2 (overlaps and errors against ``alpha`` at ``omega = 0.3``, simulations at
``d = 1000``), Fig. 3 (the ``(alpha, omega)`` phase diagram) and the appendix
(another positional matrix ``A``, a rank-2 student, Adam against GD).

Each figure of :data:`FIGURES` is data (a :class:`Figure`): a grid of
finite-``d`` runs, the name of its state-evolution task builder, and the name
of its plot in :mod:`attnlab.plots`. ``reproduce(name)`` runs (or resumes) the
sweeps and writes, in ``out`` (default
:data:`~attnlab.experiments.store.RESULTS_DIR`):

* ``NAME.csv``: one row per run, every parameter a column (``d, alpha, omega,
  sigma, lambda, A11..A22, rank, init, method, seed, steps, lr, n_test``),
  then ``n, m, theta, qnorm, eps_t, eps_g, eps_g_sem, eps_g_linear, ...``;
* ``NAME-theory.csv``: the state-evolution points (``kind, branch, alpha, ...``)
  or thresholds (``kind = transition``: ``omega, alpha_c, alpha_l``);
* ``NAME.json`` and ``NAME-theory.json``: provenance (attnlab version, git
  commit, command line, seeds, dates, runtime, notes on the scale);
* ``NAME.png``: the figure.

``quick=True`` (``--quick``) runs a small version of the same figure (small
``d``, few ``alpha``, one seed) into ``NAME-quick.*``; it is a smoke test of the
whole pipeline, not a result.

The book loads cached tables with :func:`load_results` and
:func:`load_book_data` (``None`` when the file is absent, so a chapter can fall
back to computing a small version), from the repository or from the installed
package (:func:`~attnlab.experiments.store.cached_path`), and says where they
came from with :func:`describe_results`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..explorer_grid import ALPHAS, LAMS, OMEGAS, SIGMAS, explorer_tasks
from ..params import (BRANCHES, DEFAULT_LAM, DEFAULT_OMEGA, DEFAULT_SIGMA, MINIMIZERS, PAPER_A_ASYMMETRIC,
                      ModelParams, check_choice, check_int, check_path)
from .runners import grid, run_theory_spec, se_curve_spec, simulation_spec, spec_key, transition_spec
from .store import RESULTS_DIR, book_data_path, cached_path, read_columns, read_provenance, read_rows
from .sweeps import Sweep, run_sweeps

__all__ = ["Figure", "FIGURES", "THEORY_TASKS", "get_figure", "figure_specs", "theory_specs", "figure_status",
           "reproduce", "load_results", "load_provenance", "describe_results", "load_book_data", "load_book_provenance"]

#: The paper's 25 sample complexities in (0, 2]: 0.08, 0.16, ..., 2.0.
ALPHAS_25 = tuple(float(f"{a:.4g}") for a in np.linspace(0.08, 2.0, 25))
#: alpha grid of the arbiter (``se-vs-gd``): the semantic branch's disputed range and beyond.
ARBITER_ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.4, 1.7, 2.0)
#: The paper's model at its Fig. 2 (sigma, lambda and omega).
PAPER = dict(sigma=DEFAULT_SIGMA, lam=DEFAULT_LAM)
PAPER_FIG2 = dict(omega=DEFAULT_OMEGA, **PAPER)


# ----------------------------------------------------------------------------- state-evolution tasks

def _params(fixed: dict, omega=None) -> ModelParams:
    """The model of a figure's grid (``sigma, lam, A`` fixed) at ``omega``."""
    model = {k: fixed[k] for k in ("sigma", "lam", "A") if k in fixed}
    return ModelParams(omega=fixed.get("omega", DEFAULT_OMEGA) if omega is None else omega, **model)


def _alphas(fixed: dict, axes: dict) -> list:
    return axes["alpha"] if "alpha" in axes else [fixed["alpha"]]


def _omegas(fixed: dict, axes: dict) -> list:
    return sorted(set(axes.get("omega", [fixed.get("omega", DEFAULT_OMEGA)])))


def _curve_tasks(fixed: dict, axes: dict) -> list[dict]:
    """Both SE branches along the grid's alphas, at each of its omegas."""
    alphas = sorted(set(_alphas(fixed, axes)))
    return [se_curve_spec(_params(fixed, w), b, alphas) for w in _omegas(fixed, axes) for b in BRANCHES]


def _arbiter_tasks(fixed: dict, axes: dict) -> list[dict]:
    """At every ``omega`` of the grid and for both proximal minimisers: both branches on a
    fine ``alpha`` grid over the sweep's range, and ``find_transition``."""
    alphas = _alphas(fixed, axes)
    # a fine grid for smooth lines (not for a grid of three or fewer alphas, e.g. --quick)
    fine = sorted(set(np.round(np.linspace(min(alphas), max(alphas), 35 if len(alphas) > 3 else 0), 4).tolist())
                  | set(alphas))
    tasks = []
    for w in _omegas(fixed, axes):
        for m in MINIMIZERS:
            tasks += [se_curve_spec(_params(fixed, w), b, fine, minimizer=m) for b in BRANCHES]
            tasks.append(transition_spec(_params(fixed, w), minimizer=m))
    return tasks


def _transition_tasks(fixed: dict, axes: dict) -> list[dict]:
    """``find_transition`` at every ``omega`` of the grid (the default search interval and tolerance)."""
    return [transition_spec(_params(fixed, w)) for w in _omegas(fixed, axes)]


#: The state-evolution task builders a :class:`Figure` names: ``builder(fixed, axes) -> specs``
#: for :func:`attnlab.experiments.runners.run_theory_spec`.
THEORY_TASKS = {"curves": _curve_tasks, "arbiter": _arbiter_tasks, "transitions": _transition_tasks,
                "explorer-grid": explorer_tasks}


# ----------------------------------------------------------------------------- registry

@dataclass(frozen=True)
class Figure:
    """A reproducible figure.

    Attributes
    ----------
    name, description : str
    fixed : dict
        Keyword arguments of :func:`~attnlab.experiments.runners.simulation_spec` shared by every run.
    axes : dict
        The base grid: ``{"alpha": [...], "init": [...], "seed": [...], ...}``: the full
        scale where ``blocks`` is empty; the grid that ``quick``, overrides and the
        state-evolution tasks change or use.
    quick : dict
        Replacements (of ``fixed`` or ``axes`` entries) for ``--quick``.
    theory : str
        Its state-evolution tasks: a key of :data:`THEORY_TASKS`.
    plot : str
        A function of :mod:`attnlab.plots`, called as ``plot(runs, theory, path, **plot_options)``
        with column dicts (``theory`` may be ``None``; ``runs`` is ``None`` for a
        theory-only figure, whose plot then takes only ``theory`` and ``path``).
    plot_options : dict
    notes : str
        Scale and method, saved in the provenance.
    simulations : bool
        ``False``: a theory-only figure (``fixed`` and ``axes`` then describe the
        state-evolution grid, and there is no ``NAME.csv`` of runs).
    blocks : tuple of dict
        The full-scale runs as a union of grids, where a figure was run on more than one:
        each block replaces entries of ``axes`` (e.g. more seeds at some ``alpha``), and
        the figure's runs are those of every block (its cached table holds exactly them).
        Empty: the one grid ``axes``. ``--quick`` and overrides give one grid, as without
        blocks; the state-evolution tasks always come from ``axes``.
    """

    name: str
    description: str
    fixed: dict
    axes: dict
    quick: dict
    theory: str
    plot: str
    plot_options: dict = field(default_factory=dict)
    notes: str = ""
    simulations: bool = True
    blocks: tuple = ()


_QUICK_ALPHA = dict(d=40, alpha=[0.5, 1.0, 2.0], seed=[0])
_ALPHAS_10 = [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0]

#: The registered figures, by name (``attnlab reproduce --list``).
FIGURES: dict[str, Figure] = {f.name: f for f in [
    Figure(
        "phase-diagram",
        "(alpha, omega) phase diagram: SE alpha_c(omega), alpha_l(omega) over the map of "
        "eps_t(informed init) - eps_t(random init) from GD",
        fixed=dict(d=200, method="lbfgs", **PAPER),
        axes=dict(omega=[0.0, 0.1, 0.2, 0.3, 0.4, 0.5], alpha=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0],
                  init=["semantic", "random"], seed=[0, 1]),
        quick=dict(d=30, omega=[0.2, 0.4], alpha=[0.5, 1.5], seed=[0]),
        theory="transitions", plot="plot_phase_map",
        notes="Map at d = 200 (coarser than the paper's d = 1000): 6 omega x 8 alpha x 2 inits x 2 seeds, "
              "GD warm-up then L-BFGS (method 'lbfgs', the minimum GD selects). Thresholds from the SE "
              "(find_transition, alpha in (0, 3], xtol 1e-3) at omega = 0..0.5."),
    Figure(
        "overlaps-vs-alpha",
        "omega = 0.3: m, theta, eps_t, eps_g against alpha; SE branches, d = 1000 GD from the informed and "
        "the random init (25 alpha x 3 seeds), linear baseline",
        fixed=dict(d=1000, method="lbfgs", **PAPER_FIG2),
        axes=dict(alpha=list(ALPHAS_25), init=["semantic", "random"], seed=[0, 1, 2]),
        quick=_QUICK_ALPHA, theory="curves", plot="plot_sweep",
        notes="Paper scale (Fig. 2): d = 1000, 25 alpha in (0, 2], 2 inits, 3 seeds; GD warm-up (lr 0.15) then "
              "L-BFGS to gradient rms 1e-9 (method 'lbfgs'); eps_g on 20,000 fresh samples."),
    Figure(
        "finite-size",
        "finite size: m, theta, eps_t, eps_g against d = 10..1000 at alpha = 1.5, omega = 0.3, both inits, "
        "SE values",
        fixed=dict(alpha=1.5, method="lbfgs", **PAPER_FIG2),
        axes=dict(d=[10, 20, 50, 100, 200, 500, 1000], init=["semantic", "random"], seed=[0, 1, 2, 3, 4]),
        quick=dict(d=[10, 20, 40], seed=[0]), theory="curves", plot="plot_sweep", plot_options=dict(x="d"),
        notes="d in {10, 20, 50, 100, 200, 500, 1000}, 2 inits, 5 seeds, alpha = 1.5; method 'lbfgs'."),
    Figure(
        "asymmetric-A",
        "another positional matrix A = [[0.3, 0.7], [0.8, 0.2]] at omega = 0.3: SE branches and GD against alpha",
        fixed=dict(d=500, method="lbfgs", A=PAPER_A_ASYMMETRIC, **PAPER_FIG2),
        axes=dict(alpha=_ALPHAS_10, init=["semantic", "random"], seed=[0, 1]),
        quick=_QUICK_ALPHA, theory="curves", plot="plot_sweep",
        notes="Reduced scale: d = 500, 10 alpha, 2 inits, 2 seeds; method 'lbfgs'."),
    Figure(
        "rank-2",
        "rank-2 student (Q of shape (d, 2)) at omega = 0.3 against alpha, with the rank-1 SE branches",
        fixed=dict(d=500, method="lbfgs", rank=2, **PAPER_FIG2),
        axes=dict(alpha=_ALPHAS_10, init=["semantic", "random"], seed=[0, 1]),
        quick=_QUICK_ALPHA, theory="curves", plot="plot_sweep",
        plot_options=dict(note="; rank-2 student (overlaps: norms over columns); SE lines: the rank-1 theory"),
        notes="Reduced scale: d = 500, 10 alpha, 2 inits, 2 seeds; method 'lbfgs'. The SE lines are the "
              "rank-1 theory (no rank-2 SE here); overlaps m, theta are norms over Q's two columns."),
    Figure(
        "adam-vs-gd",
        "Adam (lr 0.01) against plain GD (lr 0.15), 5000 steps each, at omega = 0.3 against alpha",
        fixed=dict(d=300, **PAPER_FIG2),
        axes=dict(alpha=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0], init=["semantic", "random"],
                  method=["gd", "adam"], seed=[0, 1]),
        quick=dict(d=40, alpha=[0.5, 1.5], seed=[0]), theory="curves", plot="plot_sweep",
        notes="Reduced scale: d = 300, 8 alpha, 2 inits, 2 seeds; plain full-batch GD (lr 0.15) and Adam "
              "(lr 0.01), 5000 steps each or until gradient rms 1e-9."),
    Figure(
        "se-vs-gd",
        "the arbiter: GD from Q* and from the positional init at d = 1000 to 8000, extrapolated in 1/d, "
        "against both SE descriptions of the semantic branch; training-loss crossing alpha_c(omega)",
        fixed=dict(method="lbfgs", n_test=10_000, **PAPER),
        axes=dict(omega=[0.0, 0.1, 0.2, 0.3], alpha=list(ARBITER_ALPHAS), d=[1000, 2000, 4000],
                  init=["semantic", "positional"], seed=[0, 1, 2]),
        quick=dict(omega=[0.3], alpha=[0.6, 1.2], d=[40, 80], seed=[0]), theory="arbiter", plot="plot_arbiter",
        notes="Teacher Q* ~ N(0, I_d) (|Q*|^2/d = 1 + O(d^-1/2) per seed, zero on average: scatter, and an "
              "O(1/d) mean effect that the extrapolation absorbs); GD warm-up (lr 0.15) then L-BFGS to gradient "
              "rms 1e-9 (method 'lbfgs'); eps_g on 10,000 fresh samples; extrapolation y(d) = y_inf + b/d by "
              "weighted least squares over the seed means at each d. The runs are the blocks of the figure "
              "(the ones the book uses): seeds 0-2 at d = 1000-4000 on omega = 0.3's 13 alpha and on "
              "alpha 0.3-1.0 (omega = 0, 0.1) or 0.5-1.2 (omega = 0.2); seeds 3-5 at d = 2000, 4000 near each "
              "crossing; near the low-omega crossings omega = 0 seeds 6-11 (d = 2000, 4000) and 3-5 "
              "(d = 1000) at alpha 0.4-0.7, omega = 0.1 seeds 6-27 (d = 2000, 4000) and 3-13 (d = 1000) at "
              "alpha 0.5-0.9; d = 8000 at omega = 0 (alpha 0.5-0.7, seeds 0-1) and omega = 0.3 (from Q*).",
        blocks=(
            dict(omega=[0.3]),
            dict(omega=[0.0, 0.1], alpha=[0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]),
            dict(omega=[0.2], alpha=[0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2]),
            dict(omega=[0.3], alpha=[1.1, 1.2, 1.4], d=[2000, 4000], seed=[3, 4, 5]),
            dict(omega=[0.2], alpha=[0.8, 0.9, 1.0, 1.1], d=[2000, 4000], seed=[3, 4, 5]),
            dict(omega=[0.0, 0.1], alpha=[0.5, 0.6, 0.7, 0.8], d=[2000, 4000], seed=[3, 4, 5]),
            dict(omega=[0.0], alpha=[0.4, 0.5, 0.6, 0.7], d=[1000], seed=[3, 4, 5]),
            dict(omega=[0.0], alpha=[0.4, 0.5, 0.6, 0.7], d=[2000, 4000], seed=list(range(6, 12))),
            dict(omega=[0.1], alpha=[0.5, 0.6, 0.7, 0.8, 0.9], d=[1000], seed=list(range(3, 14))),
            dict(omega=[0.1], alpha=[0.5, 0.6, 0.7, 0.8, 0.9], d=[2000, 4000], seed=list(range(6, 28))),
            dict(omega=[0.0], alpha=[0.5, 0.6, 0.7], d=[8000], seed=[0, 1]),
            dict(omega=[0.3], alpha=[0.5, 0.8, 1.0, 1.1, 1.2, 1.4], d=[8000], init=["semantic"], seed=[0, 1]),
            dict(omega=[0.3], alpha=[1.0, 1.1, 1.4], d=[8000], init=["semantic"], seed=[2]),
        )),
    Figure(
        "random-start",
        "GD from a random start (Q0 = 0.1 N(0, I)): fraction of seeds ending semantic, positional, mixed or "
        "collapsed against alpha at omega = 0.1, 0.3, 0.5, with the SE alpha_c",
        fixed=dict(method="lbfgs", init="random", **PAPER),
        axes=dict(omega=[0.1, 0.3, 0.5], alpha=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0], d=[200, 500],
                  seed=[0, 1, 2, 3, 4, 5]),
        quick=dict(d=[30], omega=[0.3], alpha=[0.5, 1.5], seed=[0, 1]),
        theory="transitions", plot="plot_random_start",
        notes="d = 200 to 4000, 6 seeds per point; at omega = 0.1 also alpha = 2.25-3.0 at every d, up to the "
              "positional spinodal (the blocks of the figure). GD warm-up then L-BFGS (method 'lbfgs'); outcome by "
              "attnlab.metrics.classify_outcome (|m|, |theta| >= 0.05).",
        blocks=(
            dict(d=[200, 500, 1000, 2000]),
            dict(omega=[0.1], alpha=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0],
                 d=[200, 500, 1000, 2000, 4000]),
            dict(omega=[0.3, 0.5], d=[4000]),
        )),
    Figure(
        "explorer-grid",
        "the kernel-free explorers' grid: both SE branches along alpha at every (omega, sigma, lambda), and "
        "alpha_c, alpha_l on a denser omega grid",
        fixed=dict(), axes=dict(omega=list(OMEGAS), sigma=list(SIGMAS), lam=list(LAMS), alpha=list(ALPHAS)),
        quick=dict(omega=[0.2, 0.3], sigma=[0.5], lam=[0.01], alpha=[0.6, 1.2, 1.8]),
        theory="explorer-grid", plot="plot_explorer_overview", simulations=False,
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


def _given(overrides: dict | None) -> dict:
    """The overrides that change something (``None`` values, e.g. CLI options not given, do not)."""
    return {k: v for k, v in (overrides or {}).items() if v is not None}


def _grid_for(fig: Figure, quick: bool, overrides: dict | None) -> tuple[dict, dict]:
    fixed, axes = dict(fig.fixed), {k: list(v) for k, v in fig.axes.items()}
    changes = dict(fig.quick) if quick else {}
    if overrides is not None and not isinstance(overrides, dict):
        raise TypeError(f"overrides must be a dict of grid replacements (e.g. {{'seed': [3, 4]}}) or None, "
                        f"got {type(overrides).__name__}")
    changes.update(_given(overrides))
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
    """Validated simulation specs of a figure (``[]`` for a theory-only figure).

    Parameters
    ----------
    name : str
        A key of :data:`FIGURES`.
    quick : bool
        The small ``--quick`` version.
    overrides : dict, optional
        Replace grid axes or fixed parameters, e.g. ``{"seed": [3, 4], "d": [200]}``.

    Returns
    -------
    list of dict
        One spec per run: the grid ``axes`` (with ``quick`` or ``overrides`` applied), or,
        for the full scale of a figure with ``blocks``, the union of its blocks.

    Raises
    ------
    ValueError
        Unknown figure, empty grid or invalid values (message names the parameter).
    """
    fig = get_figure(name)
    fixed, axes = _grid_for(fig, quick, overrides)  # validates the overrides of every figure
    if not fig.simulations:
        return []
    if quick or _given(overrides) or not fig.blocks:
        return [simulation_spec(**g) for g in grid(fixed, axes)]
    specs = {}  # the union of the blocks, in block order, each run once
    for block in fig.blocks:
        for g in grid(fixed, {**axes, **{k: list(v) for k, v in block.items()}}):
            spec = simulation_spec(**g)
            specs.setdefault(spec_key(spec), spec)
    return list(specs.values())


def theory_specs(name: str, *, quick: bool = False, overrides: dict | None = None) -> list[dict]:
    """State-evolution tasks of a figure (see :func:`~attnlab.experiments.runners.run_theory_spec`)."""
    fig = get_figure(name)
    return THEORY_TASKS[fig.theory](*_grid_for(fig, quick, overrides))


def figure_status(name: str, *, results_dir=None) -> str:
    """What ``attnlab reproduce --list`` says of a figure: its size and how much of it is cached.

    Parameters
    ----------
    name : str
        A key of :data:`FIGURES`.
    results_dir : str or Path, optional
        Folder of the cached tables (default: :func:`~attnlab.experiments.store.cached_path`'s).

    Returns
    -------
    str
        E.g. ``"192 runs; --quick 8; cached"``: the runs of the full scale (every block) and of the
        ``--quick`` one, and ``"cached"``, ``"k of n runs cached"`` (the rows of ``NAME.csv``
        that belong to the grid) or ``"not cached"``. A theory-only figure has no runs: the
        points of its state-evolution grid instead (``"2520 grid points (7 omega x 3 sigma x
        4 lam x 30 alpha); --quick 6; cached"``), and the share of its state-evolution tasks
        that ``NAME-theory.csv`` holds (``"k of n SE tasks cached"``).
    """
    fig = get_figure(name)

    def size(quick: bool) -> int:
        if fig.simulations:
            return len(figure_specs(name, quick=quick))
        return int(np.prod([len(v) for v in _grid_for(fig, quick, None)[1].values()]))

    if fig.simulations:
        unit, tasks, kind = "runs", figure_specs(name), "runs"
    else:
        axes = _grid_for(fig, False, None)[1]
        unit = f"grid points ({' x '.join(f'{len(v)} {k}' for k, v in axes.items())})"
        tasks, kind = theory_specs(name), "SE tasks"
    path = cached_path(_stem(fig, False) + ("" if fig.simulations else "-theory") + ".csv", results_dir)
    if not path.exists():
        state = "not cached"
    else:  # how many of the grid's runs (or tasks) the cached table holds
        done = {spec_key(t) for t in tasks} & {r["run_id"] for r in read_rows(path, key="run_id")}
        state = "cached" if len(done) == len(tasks) else f"{len(done)} of {len(tasks)} {kind} cached"
    return f"{size(False)} {unit}; --quick {size(True)}; {state}"


def _stem(fig: Figure, quick: bool) -> str:
    return fig.name + ("-quick" if quick else "")


def _select(cols: dict | None, keys: set) -> dict | None:
    if cols is None or "run_id" not in cols:
        return None
    sel = np.isin(cols["run_id"], list(keys))
    return {k: v[sel] for k, v in cols.items()}


def reproduce(name: str, *, workers: int = 2, out=None, quick: bool = False, theory: bool = True,
              plot: bool = True, backend: str = "loky", progress: bool = True, overrides: dict | None = None,
              command: str | None = None, simulations: bool = True) -> dict:
    """Run (or resume) a figure's sweeps, save tidy CSVs with provenance, draw the figure.

    Parameters
    ----------
    name : str
        Figure name (:data:`FIGURES`, ``attnlab reproduce --list``).
    workers : int
        Worker processes (see :func:`~attnlab.experiments.sweeps.run_sweeps`).
    out : str or Path, optional
        Output folder (default :data:`~attnlab.experiments.store.RESULTS_DIR`).
    quick : bool
        Small smoke-test version, written to ``NAME-quick.*``.
    theory, plot : bool
        Run the state-evolution tasks; draw ``NAME.png``.
    simulations : bool
        Run the simulation sweep (``False``: the state-evolution tasks only, e.g. to
        solve the theory again with the current solver after moving ``NAME-theory.csv``
        aside; the figure is drawn with the runs already in ``NAME.csv``).
    backend : str
        joblib backend: ``"loky"`` (local processes), ``"threading"``, ``"dask"``
        (an active ``distributed.Client``).
    progress : bool
        tqdm bar over all runs.
    overrides : dict, optional
        Grid replacements, see :func:`figure_specs`. Rows accumulate in the same
        CSV (each row carries its parameters); the figure shows the requested grid
        (without overrides: the full-scale runs, every block of the figure).
    command : str, optional
        The command line recorded in the provenance (default ``sys.argv``).

    Returns
    -------
    dict
        Paths and counts (``runs_total``, ``runs_skipped`` = resumed,
        ``runs_completed``, the same for ``theory_*``), ``seconds``. With
        ``simulations=False`` no ``csv``/``runs_*`` keys; ``figure_path`` is ``None``
        where none of the figure's runs is cached.

    Raises
    ------
    ValueError
        Bad figure name, grid or ``workers``; ``theory`` and ``simulations`` both ``False``.
    attnlab.experiments.store.SweepError
        If runs failed (the rest are saved).
    """
    fig = get_figure(name)
    workers = check_int("workers", workers, 1)
    if not (theory or simulations):
        raise ValueError("theory and simulations are both off: nothing to run")
    specs = figure_specs(fig.name, quick=quick, overrides=overrides)  # the runs the figure shows
    to_run = specs if simulations else []
    tspecs = theory_specs(fig.name, quick=quick, overrides=overrides) if theory else []
    out = Path(RESULTS_DIR if out is None else check_path("out", out))
    stem = _stem(fig, quick)
    scale = ("QUICK smoke-test scale (not a result): " if quick else "") + fig.notes
    sweeps = []
    if tspecs:  # few long tasks: submit first
        sweeps.append(Sweep(tspecs, out / f"{stem}-theory.csv", run_theory_spec,
                            description=f"State evolution for: {fig.description}", notes=scale))
    if to_run:
        sweeps.append(Sweep(to_run, out / f"{stem}.csv", description=fig.description, notes=scale))
    if not sweeps:
        raise ValueError(f"figure {fig.name!r} is theory-only: leave out --no-theory")
    t0 = time.perf_counter()
    reports = run_sweeps(sweeps, workers=workers, backend=backend, progress=progress, command=command)
    result = dict(figure=fig.name, quick=quick, out=str(out))
    if to_run:
        rep = reports[-1]
        result.update(csv=rep.path, provenance=rep.provenance, runs_total=rep.total, runs_skipped=rep.skipped,
                      runs_completed=rep.completed)
    theory_cols = None
    if tspecs:
        trep = reports[0]
        result.update(theory_csv=trep.path, theory_total=trep.total, theory_skipped=trep.skipped,
                      theory_completed=trep.completed)
        theory_cols = _select(read_columns(trep.path, key="run_id"), {spec_key(s) for s in tspecs})
    runs = None
    if plot and specs:
        runs = _select(read_columns(out / f"{stem}.csv", key="run_id"), {spec_key(s) for s in specs})
        runs = runs if runs is not None and len(runs["run_id"]) else None
    if plot and specs and runs is None:
        result["figure_path"] = None  # theory only, and none of the figure's runs to draw it with
    elif plot:
        from .. import plots

        png = out / f"{stem}.png"
        draw = getattr(plots, fig.plot)
        if specs:
            draw(runs, theory_cols, png, **fig.plot_options)
        else:
            draw(theory_cols, png, **fig.plot_options)
        result["figure_path"] = str(png)
    result["seconds"] = round(time.perf_counter() - t0, 2)
    return result


# ----------------------------------------------------------------------------- cached results for the book

def _cache_path(name: str, table: str, results_dir) -> Path:
    check_choice("table", table, ("runs", "theory"))
    quick = isinstance(name, str) and name.lower().endswith("-quick")
    fig = get_figure(name[: -len("-quick")] if quick else name)
    folder = None if results_dir is None else check_path("results_dir", results_dir)
    return cached_path(_stem(fig, quick) + ("-theory" if table == "theory" else "") + ".csv", folder)


def load_results(name: str, *, table: str = "runs", results_dir=None) -> dict | None:
    """Cached results of a figure as numpy columns, or ``None`` if the CSV is missing.

    Parameters
    ----------
    name : str
        Figure name (e.g. ``"overlaps-vs-alpha"``; ``"NAME-quick"`` for quick runs).
    table : {"runs", "theory"}
        The simulation runs (one row per run) or the state-evolution table.
    results_dir : str or Path, optional
        Read from this folder only; default: :data:`~attnlab.experiments.store.RESULTS_DIR`,
        then the tables installed with attnlab (:func:`~attnlab.experiments.store.cached_path`).

    Returns
    -------
    dict of str to ndarray or None
        One array per column (bool, int64, float64 or str); all rows of the file.

    Raises
    ------
    ValueError
        Unknown figure name or ``table``.
    attnlab.experiments.store.CorruptResultsError
        (a ``ValueError``) If the CSV is damaged (cut off, no header, a value
        that does not parse, not UTF-8); the message names the file and line.
    """
    return read_columns(_cache_path(name, table, results_dir), key="run_id")


def load_provenance(name: str, *, table: str = "runs", results_dir=None) -> dict | None:
    """The provenance sidecar of a figure's cached CSV (``None`` if missing); parameters as :func:`load_results`."""
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


def _book_table(name: str) -> Path:
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"name must be the name of a table of book/_data (e.g. 'se_curves'), got {name!r}")
    return book_data_path(name + ".csv")


def load_book_data(name: str) -> dict | None:
    """A small table of ``book/_data/`` (``book/_scripts/make_book_cache.py``) as numpy columns, or ``None``.

    Read from the repository in a source checkout, else from the copy installed
    with attnlab (:func:`~attnlab.experiments.store.book_data_path`), strictly
    like :func:`load_results`.

    Parameters
    ----------
    name : str
        The table, e.g. ``"se_curves"``, ``"se_curves_asymmetric_A"``, ``"phase_diagram"``.

    Raises
    ------
    ValueError
        If ``name`` is not a plain table name; :class:`~attnlab.experiments.store.CorruptResultsError`
        if the file is damaged.
    """
    return read_columns(_book_table(name))


def load_book_provenance(name: str) -> dict | None:
    """The description sidecar ``book/_data/NAME.json`` of :func:`load_book_data`'s table (``None`` if missing)."""
    return read_provenance(_book_table(name))
