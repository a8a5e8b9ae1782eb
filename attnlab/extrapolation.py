"""Finite-size extrapolation of simulation sweeps: ``d -> infinity`` limits and crossings.

The state evolution describes ``d -> infinity`` at fixed ``alpha``; finite-``d``
observables approach it with corrections of order ``1/d`` (and seed-to-seed
fluctuations of order ``1/sqrt(d)``). For each group of runs (same ``omega``,
``alpha``, ``init``) the seed means at each ``d`` are fitted by

``y(d) = y_inf + b / d``

by weighted least squares (weights ``1 / sem^2``; ``numpy.polynomial.polynomial.polyfit``),
and ``y_inf`` is reported with its standard error from the fit's covariance
(the standard errors of the seed means are themselves estimated from a few seeds:
with 5 seeds at 3 sizes, +- 2 standard errors cover the true limit in about 90%
of synthetic tests, ``tests/test_extrapolation.py``).
The training-loss crossing ``alpha_c`` (where gradient descent from the informed
init and from the positional init reach equal training losses) is computed from
*paired* differences (both inits share the seed, hence the data), extrapolated
the same way, and located by linear interpolation between the ``alpha`` of the grid
where the extrapolated gap changes sign; its error bar comes from the gap's ``+- 1``
standard error.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .params import check_finite_array

__all__ = ["Extrapolation", "extrapolate", "extrapolate_runs", "crossing", "first_sign_change", "gd_gap_map"]


@dataclass(frozen=True)
class Extrapolation:
    """``y(d) = value + slope / d`` fitted to seed means.

    Attributes
    ----------
    value, error : float
        ``y_inf`` and its standard error (``nan`` with fewer than two sizes).
    slope : float
        ``b``, the ``1/d`` coefficient.
    d : ndarray, shape (k,)
        The sizes used.
    mean, sem : ndarray, shape (k,)
        Seed mean and its standard error at each size.
    seeds : ndarray, shape (k,)
        Runs per size.
    """

    value: float
    error: float
    slope: float
    d: np.ndarray
    mean: np.ndarray
    sem: np.ndarray
    seeds: np.ndarray


def extrapolate(d, y) -> Extrapolation:
    """Fit ``y = y_inf + b/d`` to runs at several ``d``.

    Parameters
    ----------
    d : array_like, shape (n,)
        Dimension of each run (``>= 1``).
    y : array_like, shape (n,)
        The observable of each run (finite).

    Returns
    -------
    Extrapolation
        With one size only, ``value`` is its mean and ``error`` its standard error.

    Raises
    ------
    TypeError
        If ``d`` or ``y`` is not a real numeric array.
    ValueError
        If ``d`` and ``y`` differ in length, are empty, or hold non-finite values or ``d < 1``.
    """
    d = check_finite_array("d", d, shapes=[(None,)])
    y = check_finite_array("y", y, shapes=[(None,)])
    if y.shape != d.shape:
        raise ValueError(f"d and y must have one length, got {d.size} and {y.size}")
    if d.size == 0:
        raise ValueError(f"d and y must be 1-d arrays of one length >= 1, got shapes {d.shape} and {y.shape}")
    if not (np.all(np.isfinite(d)) and np.all(np.isfinite(y)) and np.all(d >= 1)):
        raise ValueError("d must be finite and >= 1 and y finite")
    sizes = np.unique(d)
    counts = np.array([np.sum(d == s) for s in sizes])
    mean = np.array([y[d == s].mean() for s in sizes])
    sem = np.array([y[d == s].std(ddof=1) / np.sqrt(c) if c > 1 else np.nan for s, c in zip(sizes, counts)])
    if sizes.size == 1:
        return Extrapolation(float(mean[0]), float(sem[0]), float("nan"), sizes, mean, sem, counts)
    # a size with a single run or zero spread gets the typical relative weight of the others
    ok = np.isfinite(sem) & (sem > 0)
    floor = np.median(sem[ok]) if ok.any() else max(1e-12, float(np.abs(mean).max()) * 1e-6)
    s = np.where(ok, sem, floor)
    x = 1.0 / sizes
    coef, cov = np.polyfit(x, mean, 1, w=1.0 / s, cov="unscaled") if sizes.size > 2 else _two_point(x, mean, s)
    slope, value = coef
    return Extrapolation(float(value), float(np.sqrt(cov[1, 1])), float(slope), sizes, mean, sem, counts)


def _two_point(x, y, s):
    """The line through two points and the covariance propagated from their errors."""
    slope = (y[1] - y[0]) / (x[1] - x[0])
    value = y[0] - slope * x[0]
    # value = (x1 y0 - x0 y1) / (x1 - x0)
    g = np.array([x[1], -x[0]]) / (x[1] - x[0])
    var = float(np.sum((g * s) ** 2))
    return np.array([slope, value]), np.array([[np.nan, np.nan], [np.nan, var]])


def extrapolate_runs(runs: dict, y: str, *, by=("omega", "init", "alpha"), absolute: bool = False) -> list[dict]:
    """:func:`extrapolate` for every group of a sweep's columns.

    Parameters
    ----------
    runs : dict of ndarray
        Columns of a sweep (``attnlab.experiments.figures.load_results``): ``d``, ``y`` and the ``by`` keys.
    y : str
        Observable column, e.g. ``"theta"``.
    by : tuple of str
        Columns that define a group.
    absolute : bool
        Extrapolate ``|y|`` (e.g. ``m``, defined up to the sign of ``Q``).

    Returns
    -------
    list of dict
        One per group: the ``by`` values, ``value``, ``error``, ``slope``, ``d_max``, ``mean_at_d_max``,
        ``sem_at_d_max``, ``runs``, sorted by the ``by`` values.
    """
    keys = sorted({tuple(runs[k][i] for k in by) for i in range(len(runs["d"]))})
    out = []
    for key in keys:
        sel = np.ones(len(runs["d"]), bool)
        for k, v in zip(by, key):
            sel &= runs[k] == v
        vals = np.asarray(runs[y][sel], dtype=float)
        ex = extrapolate(runs["d"][sel], np.abs(vals) if absolute else vals)
        out.append(dict(zip(by, key), value=ex.value, error=ex.error, slope=ex.slope, d_max=float(ex.d[-1]),
                        mean_at_d_max=float(ex.mean[-1]), sem_at_d_max=float(ex.sem[-1]), runs=int(sel.sum())))
    return out


def crossing(runs: dict, omega: float, *, y: str = "eps_t", first="semantic", second="positional") -> dict:
    """Where the extrapolated paired gap ``y(first) - y(second)`` changes sign along ``alpha``.

    Parameters
    ----------
    runs : dict of ndarray
        Sweep columns with ``omega, alpha, d, seed, init`` and ``y``.
    omega : float
    y : str
        Observable (default the training loss).
    first, second : str
        The two inits compared (runs are paired by ``d`` and ``seed``).

    Returns
    -------
    dict
        ``alpha_c`` (``nan`` if the gap does not change sign on the grid), ``low`` and
        ``high`` (the crossing of the gap shifted by ``-+`` one standard error: the
        error bar), and ``gaps``: per ``alpha`` the extrapolated gap and its error.
    """
    sel = np.isclose(runs["omega"], omega)
    gaps = []
    for a in sorted(set(runs["alpha"][sel])):
        at = sel & (runs["alpha"] == a)
        pairs = {}
        for i in np.flatnonzero(at):
            pairs.setdefault((runs["d"][i], runs["seed"][i]), {})[runs["init"][i]] = float(runs[y][i])
        ds, diffs = zip(*[(k[0], v[first] - v[second]) for k, v in pairs.items() if first in v and second in v]) \
            if any(first in v and second in v for v in pairs.values()) else ((), ())
        if not ds:
            continue
        ex = extrapolate(ds, diffs)
        gaps.append(dict(alpha=float(a), gap=ex.value, error=ex.error))
    alphas = np.array([g["alpha"] for g in gaps])
    value = np.array([g["gap"] for g in gaps])
    err = np.nan_to_num(np.array([g["error"] for g in gaps]))
    return dict(omega=float(omega), alpha_c=first_sign_change(alphas, value),
                low=first_sign_change(alphas, value - err), high=first_sign_change(alphas, value + err), gaps=gaps)


def first_sign_change(x, f) -> float:
    """The first root of the linear interpolant of ``f``, searched from the largest ``x`` down.

    Parameters
    ----------
    x : array_like, shape (k,)
        Increasing abscissae (e.g. ``alpha``).
    f : array_like, shape (k,)
        A gap whose sign changes (e.g. a training loss minus another).

    Returns
    -------
    float
        The root between the last two neighbours whose values differ in sign (or one is
        zero), linearly interpolated; ``nan`` where ``f`` keeps its sign.
    """
    for i in range(len(x) - 1, 0, -1):
        if f[i - 1] * f[i] <= 0 and f[i - 1] != f[i]:
            return float(x[i - 1] + (x[i] - x[i - 1]) * f[i - 1] / (f[i - 1] - f[i]))
    return float("nan")


def gd_gap_map(runs: dict) -> dict:
    """The gradient-descent map under the phase diagram, from the ``phase-diagram`` runs.

    Parameters
    ----------
    runs : dict of str to ndarray
        Columns of ``results/phase-diagram.csv`` (:func:`attnlab.experiments.figures.load_results`):
        ``omega, alpha, sigma, lambda, init, eps_t``; one ``sigma`` and ``lambda``.

    Returns
    -------
    dict
        ``sigma``, ``lam`` and arrays ``omega``, ``alpha``, ``gap`` for
        :func:`attnlab.explorers.phase_explorer` and
        :func:`attnlab.plots.plot_gd_gap_map`: the seed mean of ``eps_t`` from the informed
        init minus that from the random init, at each ``(omega, alpha)`` with both.

    Raises
    ------
    ValueError
        The runs mix several ``sigma`` or ``lambda``, or lack a column.
    """
    need = ("omega", "alpha", "sigma", "lambda", "init", "eps_t")
    missing = [k for k in need if k not in runs]
    if missing:
        raise ValueError(f"runs lack the columns {missing}")
    for k in ("sigma", "lambda"):
        if len(np.unique(runs[k])) != 1:
            raise ValueError(f"runs must have one {k}, got {sorted(set(runs[k].tolist()))}")
    out = dict(sigma=float(runs["sigma"][0]), lam=float(runs["lambda"][0]), omega=[], alpha=[], gap=[])
    for w in np.unique(runs["omega"]):
        for a in np.unique(runs["alpha"]):
            at = (runs["omega"] == w) & (runs["alpha"] == a)
            mean = {i: float(np.mean(runs["eps_t"][at & (runs["init"] == i)])) if np.any(at & (runs["init"] == i))
                    else np.nan for i in ("semantic", "random")}
            if np.isfinite(mean["semantic"]) and np.isfinite(mean["random"]):
                out["omega"].append(float(w))
                out["alpha"].append(float(a))
                out["gap"].append(mean["semantic"] - mean["random"])
    return out
