"""The explorers' grid: the state evolution solved ahead of time, for explorers without a kernel.

The book's explorers move sliders over ``omega``, ``sigma``, ``lambda`` and ``alpha``
in the static HTML page, where no Python runs. ``attnlab reproduce explorer-grid``
solves the state evolution (Cui et al. 2024, Result 4.2; the default *followed*
minimiser) on a grid once, resumably and in parallel like every other figure:

* both branches along :data:`ALPHAS` (continuation with warm starts,
  :func:`attnlab.theory.se_curve`) at every ``(omega, sigma, lambda)`` of
  :data:`OMEGAS` x :data:`SIGMAS` x :data:`LAMS`;
* ``alpha_c`` and ``alpha_l`` (:func:`attnlab.theory.find_transition`, the default
  search interval ``(0, 3]`` and ``xtol = 1e-3``) on the denser ``omega`` grid
  :data:`OMEGAS_DENSE`.

The rows go to ``results/explorer-grid-theory.csv`` (one row per fixed point or
threshold, with its ``converged`` flag); :func:`load_explorer_grid` reads them
back as arrays, and :mod:`attnlab.explorers` draws the figures.
"""
from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from .experiments.runners import se_curve_spec, transition_spec
from .experiments.store import cached_path, read_columns
from .params import BRANCHES, DEFAULT_A, ModelParams

__all__ = ["OMEGAS", "OMEGAS_DENSE", "SIGMAS", "LAMS", "ALPHAS", "explorer_tasks", "ExplorerGrid", "grid_spinodals", "minimum_runs",
           "IncompleteGridError", "load_explorer_grid"]

#: ``omega`` of the curves (the transition explorer's slider).
OMEGAS = tuple(round(0.1 * i, 2) for i in range(7))
#: ``omega`` of the thresholds (the phase diagram): the curves' grid and its midpoints.
OMEGAS_DENSE = tuple(round(0.05 * i, 2) for i in range(13))
#: Token standard deviations ``sigma``.
SIGMAS = (0.4, 0.5, 0.6)
#: Ridge strengths ``lambda`` (a factor 2 apart).
LAMS = (0.005, 0.01, 0.02, 0.04)
#: Sample complexities ``alpha = n/d`` of the curves.
ALPHAS = tuple(round(0.1 * i, 2) for i in range(1, 31))


def _dense(omegas) -> list:
    """The omegas and the midpoints between neighbours."""
    w = sorted(set(float(x) for x in omegas))
    return sorted(set(w) | {round((a + b) / 2, 4) for a, b in zip(w, w[1:])})


def explorer_tasks(fixed: dict, axes: dict) -> list[dict]:
    """State-evolution tasks of the grid (for :func:`attnlab.experiments.runners.run_theory_spec`).

    Parameters
    ----------
    fixed, axes : dict
        Grid of :data:`attnlab.experiments.figures.FIGURES` ``["explorer-grid"]``: ``omega``,
        ``sigma``, ``lam`` and ``alpha`` given as axes (lists) or fixed values (and ``A``, fixed).

    Returns
    -------
    list of dict
        One ``se-curve`` task per ``(omega, sigma, lambda, branch)``, then one
        ``transition`` task per ``(omega, sigma, lambda)`` on the denser omega grid.
    """
    def get(k):
        return list(axes[k]) if k in axes else [fixed[k]]

    alphas = sorted(set(float(a) for a in get("alpha")))
    def models(omegas):
        return [ModelParams(omega=w, sigma=s, lam=lam, A=fixed.get("A", DEFAULT_A))
                for w in omegas for s in get("sigma") for lam in get("lam")]

    curves = [se_curve_spec(p, b, alphas) for p in models(get("omega")) for b in BRANCHES]
    return curves + [transition_spec(p) for p in models(_dense(get("omega")))]


class IncompleteGridError(ValueError):
    """The cached grid lacks points of the requested axes (run ``attnlab reproduce explorer-grid``)."""


@dataclass(frozen=True)
class ExplorerGrid:
    """State-evolution values on the explorers' grid, as arrays.

    Attributes
    ----------
    omegas, sigmas, lams, alphas : ndarray
        Axes of the curves (sorted).
    omegas_dense : ndarray
        ``omega`` axis of the thresholds.
    curves : dict of str to ndarray, shape (n_omega, n_sigma, n_lam, 2, n_alpha)
        ``m, theta, qnorm, eps_t, eps_g`` (NaN where the solver failed) and the
        booleans ``converged`` and ``on_branch`` (converged with lead overlap
        ``m`` resp. ``theta`` above ``1e-6`` and not unstable, ``stability < 1`` or unknown:
        the branch's minimum exists there), ``stability`` and ``stability_held``
        (``SEResult.stability``, ``.stability_held``; NaN in rows written before they were
        recorded) and the boolean ``undecided`` (a fixed point on its branch where the two
        probes disagree: the state evolution cannot tell whether it is a minimum; such a point
        is drawn or not by the default probe). Branch axis in the order of
        :data:`attnlab.params.BRANCHES`.
    eps_g_linear : ndarray, shape (n_omega, n_sigma, n_lam)
        Test error of the linear positional baseline.
    alpha_c, alpha_l : ndarray, shape (n_omega_dense, n_sigma, n_lam)
        Thresholds (NaN: not in ``(0, 3]``).
    source : str
        The CSV read.
    """

    omegas: np.ndarray
    sigmas: np.ndarray
    lams: np.ndarray
    alphas: np.ndarray
    omegas_dense: np.ndarray
    curves: dict
    eps_g_linear: np.ndarray
    alpha_c: np.ndarray
    alpha_l: np.ndarray
    source: str = ""

    def index(self, omega: float, sigma: float, lam: float) -> tuple[int, int, int]:
        """Indices of the grid point ``(omega, sigma, lam)`` of the curves.

        Raises
        ------
        ValueError
            A value not on the grid (the message names it and lists the grid).
        """
        return tuple(_at(name, axis, v) for name, axis, v in
                     (("omega", self.omegas, omega), ("sigma", self.sigmas, sigma), ("lam", self.lams, lam)))

    def value(self, name: str, omega: float, sigma: float, lam: float, branch: str, alpha: float) -> float:
        """One cached value, e.g. ``value("eps_t", 0.3, 0.5, 0.01, "semantic", 1.2)``."""
        i, j, k = self.index(omega, sigma, lam)
        b = BRANCHES.index(branch)
        return float(self.curves[name][i, j, k, b, _at("alpha", self.alphas, alpha)])


def _at(name, axis, value) -> int:
    hits = np.flatnonzero(np.isclose(axis, value, rtol=0, atol=1e-9))
    if hits.size == 0:
        raise ValueError(f"{name} = {value!r} is not on the explorer grid {[float(a) for a in axis]}")
    return int(hits[0])


CURVE_FIELDS = ("m", "theta", "qnorm", "eps_t", "eps_g")


def load_explorer_grid(path=None) -> ExplorerGrid:
    """Read the explorers' grid from ``results/explorer-grid-theory.csv``.

    Parameters
    ----------
    path : str or Path, optional
        The CSV (default: ``explorer-grid-theory.csv`` of :data:`attnlab.experiments.store.RESULTS_DIR`,
        else the copy installed with attnlab, :func:`attnlab.experiments.store.cached_path`).

    Returns
    -------
    ExplorerGrid
        Axes are the values found in the file.

    Raises
    ------
    FileNotFoundError
        No such file (``attnlab reproduce explorer-grid`` writes it).
    IncompleteGridError
        A curve point or a threshold of the product grid is missing.
    attnlab.experiments.store.CorruptResultsError
        The CSV is damaged.
    """
    if path is None:
        path = cached_path("explorer-grid-theory.csv")
    cols = read_columns(path, key="run_id")
    if cols is None:
        raise FileNotFoundError(f"{path} does not exist: run `attnlab reproduce explorer-grid` to compute it")
    curve = cols["kind"] == "se-curve"
    axes = [np.unique(cols[k][curve]) for k in ("omega", "sigma", "lambda", "alpha")]
    omegas, sigmas, lams, alphas = axes
    shape = tuple(len(a) for a in axes[:3]) + (len(BRANCHES), len(alphas))
    filled = np.zeros(shape, bool)
    curves = {k: np.full(shape, np.nan) for k in CURVE_FIELDS + ("stability", "stability_held")}
    curves["converged"] = np.zeros(shape, bool)
    eps_lin = np.full(shape[:3], np.nan)
    for r in np.flatnonzero(curve):
        i, j, k = (_at(n, a, cols[c][r]) for n, a, c in (("omega", omegas, "omega"), ("sigma", sigmas, "sigma"),
                                                        ("lam", lams, "lambda")))
        at = (i, j, k, BRANCHES.index(cols["branch"][r]), _at("alpha", alphas, cols["alpha"][r]))
        filled[at] = True
        for f in CURVE_FIELDS:
            curves[f][at] = cols[f][r]
        for probe in ("stability", "stability_held"):  # (rows written since issue 39; NaN before)
            if probe in cols:
                curves[probe][at] = cols[probe][r]
        curves["converged"][at] = str(cols["converged"][r]) == "True"  # a text column where thresholds leave it empty
        eps_lin[i, j, k] = cols["eps_g_linear"][r]
    if not filled.all():
        raise IncompleteGridError(f"{path}: {int((~filled).sum())} of {filled.size} curve points of the grid are "
                                  "missing; run `attnlab reproduce explorer-grid` to finish it")
    lead = np.stack([curves["theta" if b == "semantic" else "m"][..., i, :] for i, b in enumerate(BRANCHES)], axis=-2)
    curves["on_branch"] = curves["converged"] & (np.nan_to_num(lead) > 1e-6)
    stab, held = curves["stability"], curves["stability_held"]
    curves["undecided"] = (curves["on_branch"] & np.isfinite(stab) & np.isfinite(held)
                           & ((stab < 1.0) != (held < 1.0)))
    # a fixed point unstable along its pinned overlap (stability >= 1) is no minimum there: not shown
    curves["on_branch"] &= ~(curves["stability"] >= 1.0)
    tr = cols["kind"] == "transition"
    dense = np.unique(cols["omega"][tr])
    alpha_c = np.full((len(dense), len(sigmas), len(lams)), np.nan)
    alpha_l = alpha_c.copy()
    seen = np.zeros(alpha_c.shape, bool)
    for r in np.flatnonzero(tr):
        try:
            at = (_at("omega", dense, cols["omega"][r]), _at("sigma", sigmas, cols["sigma"][r]),
                  _at("lam", lams, cols["lambda"][r]))
        except ValueError:
            continue  # a threshold at a sigma or lambda without curves: not part of this grid
        alpha_c[at], alpha_l[at], seen[at] = cols["alpha_c"][r], cols["alpha_l"][r], True
    if not seen.all() or not np.isin(omegas, dense).all():
        raise IncompleteGridError(f"{path}: {int((~seen).sum())} of {seen.size} thresholds of the grid are missing; "
                                  "run `attnlab reproduce explorer-grid` to finish it")
    return ExplorerGrid(omegas, sigmas, lams, alphas, dense, curves, eps_lin, alpha_c, alpha_l, str(path))


def _crossing(alphas, stability, lo: int, hi: int, fallback: float) -> float:
    """``alpha`` between grid points ``lo`` and ``hi = lo + 1`` where ``stability`` crosses 1
    (linear interpolation); ``fallback`` where either value is unknown (the minimum ends
    for another reason there: the branch collapses, or stability was not recorded)."""
    s_lo, s_hi = stability[lo], stability[hi]
    if not (np.isfinite(s_lo) and np.isfinite(s_hi)) or s_lo == s_hi or not min(s_lo, s_hi) < 1 <= max(s_lo, s_hi):
        return float(fallback)
    t = (1.0 - s_lo) / (s_hi - s_lo)
    return float(alphas[lo] + t * (alphas[hi] - alphas[lo]))


def minimum_runs(alphas, on_branch, stability) -> list[tuple[float, float]]:
    """The ``alpha`` intervals where one branch's minimum exists along one grid curve.

    Parameters
    ----------
    alphas : ndarray, shape (n_alpha,)
    on_branch, stability : ndarray, shape (n_alpha,)
        ``ExplorerGrid.curves["on_branch"]`` and ``["stability"]`` of the curve.

    Returns
    -------
    list of (float, float)
        ``(lo, hi)`` per run of grid points where the minimum exists; an end inside the
        grid lies where ``stability`` crosses 1 between the run's last point and the next
        (linear interpolation), else at the run's last point.
    """
    on = np.asarray(on_branch, bool)
    runs, n = [], len(alphas)
    i = 0
    while i < n:
        if not on[i]:
            i += 1
            continue
        j = i
        while j + 1 < n and on[j + 1]:
            j += 1
        lo = float(alphas[i]) if i == 0 else _crossing(alphas, stability, i - 1, i, alphas[i])
        hi = float(alphas[j]) if j == n - 1 else _crossing(alphas, stability, j, j + 1, alphas[j])
        runs.append((lo, hi))
        i = j + 1
    return runs


def grid_spinodals(grid: ExplorerGrid) -> dict:
    """Both branches' spinodals at every curve point ``(omega, sigma, lambda)`` of the grid.

    Read from the cached grid (:func:`minimum_runs`), so that the explorers draw them at every
    ``sigma`` and ``lambda``; :func:`attnlab.theory.spinodals.find_spinodals` bisects instead.
    The semantic minimum exists above ``alpha_s_semantic`` (the start of its last run), the
    positional one below ``alpha_s_positional`` (the end of its first run), as in
    :class:`attnlab.theory.spinodals.Spinodals`.

    Returns
    -------
    dict
        ``alpha_s_semantic``, ``alpha_s_positional``: ndarray, shape (n_omega, n_sigma, n_lam),
        NaN where the run reaches the end of the grid's range or where there is no run;
        ``runs``: ndarray of objects, shape (n_omega, n_sigma, n_lam, 2), each branch's
        :func:`minimum_runs` (branch axis in the order of :data:`attnlab.params.BRANCHES`).
    """
    on, stab, alphas = grid.curves["on_branch"], grid.curves["stability"], grid.alphas
    shape = on.shape[:3]
    out = {k: np.full(shape, np.nan) for k in ("alpha_s_semantic", "alpha_s_positional")}
    out["runs"] = np.empty(shape + (len(BRANCHES),), dtype=object)
    s, p = BRANCHES.index("semantic"), BRANCHES.index("positional")
    for at in np.ndindex(shape):
        for b in range(len(BRANCHES)):
            out["runs"][at + (b,)] = minimum_runs(alphas, on[at][b], stab[at][b])
        sem, pos = out["runs"][at + (s,)], out["runs"][at + (p,)]
        if sem and sem[-1][0] > alphas[0]:
            out["alpha_s_semantic"][at] = sem[-1][0]
        if pos and pos[0][1] < alphas[-1]:
            out["alpha_s_positional"][at] = pos[0][1]
    return out
