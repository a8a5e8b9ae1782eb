"""Curves over alpha, the thresholds alpha_c and alpha_l, and the phase diagram.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 4, Fig. 2 and Fig. 3:
``alpha_c`` is where the training losses of the semantic and the positional
branches cross (below it the lower of the two minima is positional, above it
semantic: with ``minimizer="global"`` the paper's global minimum of the risk,
with the default ``"followed"`` the minima that gradient descent reaches from
the informed and the positional start); ``alpha_l >= alpha_c`` is where the
generalization error of the lower minimum falls below that of the best linear
positional model.
"""
from __future__ import annotations

import concurrent.futures
import functools
from dataclasses import dataclass

import numpy as np
import scipy.optimize

from ..params import (BRANCHES, DEFAULT_ALPHA_MAX, DEFAULT_MINIMIZER, DEFAULT_XTOL, MIN_XTOL, MINIMIZERS, ModelParams,
                      check_choice, check_in_range, check_int, check_params, check_positive, check_tolerance)
from .branches import BranchFollower, continuable, solve_side_by_side
from .channel import teacher_diagonal
from .equations import check_quadrature, check_se_params
from .quadrature import Quadrature, gauss_hermite
from .solver import SEResult

__all__ = ["linear_baseline_error", "se_curve", "Transition", "find_transition", "phase_diagram", "map_transitions",
           "search_grid", "ALPHA_MAX_LIMIT", "GAP_RESOLUTION"]

#: Largest ``alpha_max`` of :func:`find_transition` (the grid grows as ``log(alpha_max)``).
ALPHA_MAX_LIMIT = 1000.0

#: Integration error of a training loss ``eps_t`` relative to its value, with the quasi-Monte
#: Carlo rules of :func:`find_transition` (measured against the independent ``refined()`` point
#: set: 3e-6 to 1.6e-4 with the default rule, 4e-5 to 2.5e-4 with the cheap one). A sign change
#: of the gap between the branches' training losses is a crossing only between two points of
#: the search grid where the gap exceeds this times ``eps_t``: near ``Q = 0`` both branches are
#: small perturbations of the trivial fixed point, and their gap shrinks to order 1e-8, where
#: its sign depends on the rule (e.g. ``sigma = 0.5, lambda = 0.04, omega = 0.2`` at
#: ``alpha = 0.15``: -4e-8 with the cheap rule, -4e-9 with the default one).
GAP_RESOLUTION = 1e-4


def linear_baseline_error(params: ModelParams, order: int = 60) -> float:
    """Theoretical test error of the best linear positional model.

    ``eps_g^lin = (sigma^2 / 2) E ||T(h*) - E T||_F^2 = sigma^2 [Var T11 + Var T22]``
    with ``h*_l ~ N(0, sigma^2)`` i.i.d. (``L = 2``), by a tensor Gauss-Hermite
    rule of ``order`` points per dimension (smooth integrand; order 60 is
    converged to machine precision for ``sigma <= 1``).

    Source: Cui et al. 2024, Sec. 4 (linear baseline).

    Raises
    ------
    TypeError
        If ``params`` is not a ``ModelParams``.
    ValueError
        If ``order`` is not an integer in ``[2, 1000]``.
    """
    check_params(params)
    order = check_int("order", order, 2)
    if order > 1000:
        raise ValueError(f"order must be an integer in [2, 1000], got {order!r}")
    x, w = gauss_hermite(order)
    h1, h2 = np.meshgrid(params.sigma * x, params.sigma * x, indexing="ij")
    W = np.outer(w, w)
    T11, T22 = teacher_diagonal(h1, h2, params.omega, params.A_array)
    var = lambda T: float((W * T ** 2).sum() - (W * T).sum() ** 2)
    return params.sigma ** 2 * (var(T11) + var(T22))


def se_curve(params: ModelParams, alphas, branch: str = "semantic", *, quad: Quadrature | None = None,
             tol: float = 1e-7, progress: bool = False, minimizer: str | None = None,
             quiet: bool = False) -> list[SEResult]:
    """Fixed points along ``alphas`` on one branch, by continuation.

    Each point is warm-started from the nearest ``alpha`` already solved whose
    fixed point lies on the branch (``theta > 0`` resp. ``m > 0``), by the policy
    of :mod:`attnlab.theory.branches` (:class:`~attnlab.theory.branches.BranchFollower`). The
    semantic branch is followed from large to small ``alpha`` (it branches off
    the trivial ``theta = 0`` solution near ``alpha ~ 0.7`` at ``omega = 0.3``
    and must not be continued from that solution), the positional one from
    small to large.

    Parameters
    ----------
    alphas : array_like, shape (k,)
        Positive sample complexities.
    branch : {"semantic", "positional"}
    minimizer : {"followed", "global"}, optional
        Per-sample proximal minimiser (default: the branch's, see
        :func:`~attnlab.theory.branches.solve_state_evolution`).
    quiet : bool
        No :class:`~attnlab.theory.solver.ConvergenceWarning`, and where every
        attempt raises :class:`~attnlab.theory.solver.StateEvolutionError` (e.g.
        where the branch ends) that point is returned with ``converged=False``
        and NaN observables instead of the error ending the whole curve.

    Returns
    -------
    list of SEResult, length k, in the order of ``alphas``.
        Points off the branch (e.g. the semantic one below where it appears) have
        ``on_branch=False`` (no warning here).

    Raises
    ------
    TypeError
        If ``params`` is not a ``ModelParams`` or ``quad`` not a ``Quadrature``.
    ValueError
        Empty or non-positive ``alphas``, unknown ``branch``, ``tol`` outside ``(0, 1e-2]``.
    StateEvolutionError
        Where the solver fails at a point (unless ``quiet``).
    """
    from tqdm.auto import tqdm

    check_se_params(params)
    alphas = [check_positive("alpha", a) for a in np.atleast_1d(alphas)]
    if not alphas:
        raise ValueError("alphas must contain at least one value")
    branch = check_choice("branch", branch, BRANCHES)
    tol = check_tolerance("tol", tol)
    quad = check_quadrature(quad)
    follow = BranchFollower(params, branch, quad, tol, minimizer=minimizer, quiet=quiet)
    order = sorted(set(alphas), reverse=(branch == "semantic"))
    for a in tqdm(order, desc=f"SE {branch}", disable=not progress, leave=False):
        follow(a)
    return [follow(a) for a in alphas]


@dataclass(frozen=True)
class Transition:
    """Thresholds for one parameter set.

    Attributes
    ----------
    alpha_c : float
        Crossing of the branches' training losses (``nan`` if none in range).
    alpha_l : float
        Where the lower minimum's ``eps_g`` drops below ``eps_g_linear`` (``nan`` if not in range).
    eps_g_linear : float
    xtol : float
        Absolute tolerance of both roots in ``alpha``.
    params : ModelParams
    minimizer : str
        The per-sample proximal minimiser of both branches (``"followed"`` or ``"global"``).
    alpha_min, alpha_max : float
        The interval searched (see :func:`search_grid`).
    """

    alpha_c: float
    alpha_l: float
    eps_g_linear: float
    xtol: float
    params: ModelParams
    minimizer: str = DEFAULT_MINIMIZER
    alpha_min: float = float("nan")
    alpha_max: float = float("nan")

    def to_dict(self) -> dict:
        """JSON-serialisable summary: the model's record (:meth:`attnlab.params.ModelParams.to_record`), the thresholds."""
        return dict(**self.params.to_record(), alpha_c=self.alpha_c, alpha_l=self.alpha_l,
                    eps_g_linear=self.eps_g_linear, xtol=self.xtol, minimizer=self.minimizer,
                    alpha_min=self.alpha_min, alpha_max=self.alpha_max)


def _bracketed_root(fun, grid, xtol, stop=None, resolution=None):
    """Brent's method on the first sign change of ``fun`` met walking along the
    increasing ``grid`` (from its top, until ``stop(alpha)``, if ``stop`` is
    given); points where ``fun`` is ``nan`` are skipped. ``nan`` if there is none,
    or if ``fun`` is ``nan`` inside the bracket. With ``resolution(alpha)``, the
    integration error of ``fun`` there, points where ``|fun|`` does not exceed it
    are skipped too: their sign is noise, so a sign change counts only between two
    resolved points (a root next to an unresolved point is bracketed by the
    resolved points on either side of it).

    With ``stop``, where ``fun`` ends (``nan``) between two grid points, e.g. a
    semantic branch that appears between them: where the walk stops, or where
    ``fun`` is ``nan`` inside the bracket of a sign change (the lower grid point was
    finite by accident, e.g. ``theta`` of the trivial fixed point just above
    :data:`~attnlab.theory.solver.ON_BRANCH_MIN`), the root is searched between the
    last resolved point and the lowest point above which ``fun`` is finite
    (:func:`_root_above_end`)."""
    points = grid[::-1] if stop is not None else grid
    resolved = lambda a, f: bool(np.isfinite(f) and (resolution is None or abs(f) > resolution(a)))
    prev = None
    for a in points:
        f = fun(a)
        if f == 0 and resolution is None:
            return a
        if resolved(a, f):
            if prev is not None and prev[1] * f < 0:
                root = _brent(fun, *sorted((prev[0], a)), xtol)
                if np.isnan(root) and stop is not None:
                    root = _root_above_end(fun, resolved, a, prev, xtol)
                return root
            prev = (a, f)
        if stop is not None and stop(a):
            return float("nan") if prev is None else _root_above_end(fun, resolved, a, prev, xtol)
    return float("nan")


def _root_above_end(fun, resolved, lo, top, xtol):
    """Where ``fun`` ends between ``lo`` (below its end) and ``top = (alpha, fun(alpha))``
    (finite): the lowest ``alpha`` above which it is finite, by bisection to ``xtol``
    (assuming one end); the root between there and ``top`` if ``fun`` changes sign, else ``nan``."""
    hi = top[0]
    while hi - lo > xtol:
        mid = 0.5 * (lo + hi)
        if np.isfinite(fun(mid)):
            hi = mid
        else:
            lo = mid
    f = fun(hi)
    if hi < top[0] and resolved(hi, f) and f * top[1] < 0:
        return _brent(fun, hi, top[0], xtol)
    return float("nan")


def _refine_root(fun, guess, xtol, lo, hi, max_steps=6):
    """Root of ``fun`` near ``guess`` (within ``[lo, hi]``) to ``xtol``.

    ``fun`` is evaluated at ``x - xtol/2`` and ``x + xtol/2``, from ``x = guess``:
    where it changes sign there, the root is bracketed by an interval of width
    ``xtol`` and the zero of the linear interpolant in it is returned;
    otherwise ``x`` moves to the secant root through the two values. Falls
    back to Brent's method on a bracket grown around ``guess`` if the steps wander.
    """
    clip = lambda a: min(hi, max(lo, a))
    x = clip(guess)
    for _ in range(max_steps):
        a, b = clip(x - xtol / 2), clip(x + xtol / 2)
        fa, fb = fun(a), fun(b)
        if not (np.isfinite(fa) and np.isfinite(fb)) or a == b:
            break
        if fa * fb <= 0:
            return a if fa == fb else a + (b - a) * fa / (fa - fb)
        if fa == fb:
            break
        x = clip(b - fb * (b - a) / (fb - fa))
    return _grown_bracket_root(fun, guess, xtol, lo, hi)


def _grown_bracket_root(fun, guess, xtol, lo, hi, step=0.05, max_grow=30):
    """Brent's method on a bracket grown around ``guess`` (within ``[lo, hi]``);
    ``nan`` if no sign change is found (or ``fun`` is ``nan`` at an end)."""
    a, b = max(lo, guess - step), min(hi, guess + step)
    fa, fb = fun(a), fun(b)
    for _ in range(max_grow):
        if not (np.isfinite(fa) and np.isfinite(fb)) or fa * fb <= 0 or (a <= lo and b >= hi):
            break
        step *= 2
        if b >= hi or (a > lo and abs(fa) < abs(fb)):
            a = max(lo, a - step)
            fa = fun(a)
        else:
            b = min(hi, b + step)
            fb = fun(b)
    if not (np.isfinite(fa) and np.isfinite(fb)) or fa * fb > 0:
        return float("nan")
    return _brent(fun, a, b, xtol)


def _brent(fun, a, b, xtol):
    """Brent's method on the bracket ``[a, b]``; ``nan`` if ``fun`` is ``nan`` inside it
    (no converged fixed point there)."""
    try:
        return scipy.optimize.brentq(fun, a, b, xtol=xtol)
    except ValueError:
        return float("nan")


def search_grid(alpha_max: float, grid_points: int = 7) -> list:
    """The bracketing grid of :func:`find_transition`: geometric from
    ``alpha_min = min(alpha_max, 3) / 20`` to ``alpha_max``, with ``grid_points``
    points up to ``alpha_max = 3`` (:data:`~attnlab.params.DEFAULT_ALPHA_MAX`) and more above it, so that the ratio of
    neighbouring points stays ``20 ** (1 / (grid_points - 1))`` (1.65 for 7 points).

    Raises
    ------
    ValueError
        If ``alpha_max`` is not in ``(0, ALPHA_MAX_LIMIT]`` or ``grid_points < 3``.
    """
    alpha_max = check_in_range("alpha_max", alpha_max, 0.0, ALPHA_MAX_LIMIT, open_lo=True)
    grid_points = check_int("grid_points", grid_points, 3)
    lo = min(alpha_max, DEFAULT_ALPHA_MAX) / 20
    points = max(grid_points, 1 + int(np.ceil(round((grid_points - 1) * np.log(alpha_max / lo) / np.log(20), 9))))
    return list(np.geomspace(lo, alpha_max, points))


def _transition_args(params, alpha_max=DEFAULT_ALPHA_MAX, grid_points=7, xtol=DEFAULT_XTOL, tol=1e-6, minimizer=None,
                     quad=None):
    """The validated arguments of :func:`find_transition` (its grid in place of ``alpha_max, grid_points``)."""
    check_se_params(params)
    return (search_grid(alpha_max, grid_points), check_tolerance("xtol", xtol, minimum=MIN_XTOL),
            check_tolerance("tol", tol),
            check_choice("minimizer", DEFAULT_MINIMIZER if minimizer is None else minimizer, MINIMIZERS),
            check_quadrature(quad))


def find_transition(params: ModelParams, *, alpha_max: float = DEFAULT_ALPHA_MAX, grid_points: int = 7,
                    xtol: float = DEFAULT_XTOL, quad: Quadrature | None = None, tol: float = 1e-6,
                    minimizer: str | None = None) -> Transition:
    """``alpha_c`` and ``alpha_l`` by bracketing on a grid of ``alpha`` and Brent's method.

    The roots are bracketed on the grid, from its top, with the cheap rules
    (:meth:`~attnlab.theory.quadrature.Quadrature.cheap`), then refined with ``quad``
    by pairs ``x +- xtol/2`` around them (warm-started from the cheap stage). The two
    branches are solved side by side in two threads (the same results as one after
    the other).

    Parameters
    ----------
    params : ModelParams
    alpha_max : float
        Upper end of the search interval ``[alpha_min, alpha_max]``, ``alpha_min =
        min(alpha_max, 3) / 20`` (0.15 for ``alpha_max >= 3``); at most ``ALPHA_MAX_LIMIT`` (1000).
    grid_points : int
        Points of the bracketing grid up to ``alpha_max = 3`` (more above, see :func:`search_grid`).
    xtol : float
        Absolute tolerance of the roots in ``alpha``, in ``[1e-6, 1e-2]``.
    quad : Quadrature, optional
    tol : float
        Tolerance of each fixed point (the roots need less than the 1e-7 of
        :func:`~attnlab.theory.branches.solve_state_evolution`: 1e-6 changes them by < 1e-8).
    minimizer : {"followed", "global"}, optional
        Per-sample proximal minimiser of both branches (default ``"followed"``:
        ``alpha_c`` is where the training losses of the minima gradient descent
        reaches from ``Q0 = Q*`` and from the positional init cross; ``"global"``:
        the replica-symmetric global minima, the paper's definition).

    Returns
    -------
    Transition
        Roots not found in the interval are ``nan``; the crossing is only
        searched where the semantic solution has ``theta > 0`` (so ``nan``
        also when the semantic branch is already the lower one where it
        appears, or when both branches collapse to ``Q = 0``), and a sign change
        of the gap smaller than its integration error (:data:`GAP_RESOLUTION`) is
        no crossing.

    Raises
    ------
    TypeError
        If ``params`` is not a ``ModelParams`` or ``quad`` not a ``Quadrature``.
    ValueError
        If ``alpha_max`` is not in ``(0, 1000]``, ``xtol`` not in ``[1e-6, 1e-2]`` or ``tol`` not in
        ``(0, 1e-2]``, or ``grid_points < 3``.
    """
    grid, xtol, tol, minimizer, quad = _transition_args(params, alpha_max, grid_points, xtol, tol, minimizer, quad)
    alpha_max = grid[-1]
    eps_lin = linear_baseline_error(params)
    # bracket with the cheap split rule (tensor Gauss-Hermite has spurious
    # positional fixed points, e.g. at omega = 0), then refine with ``quad``
    cheap = quad if quad.method == "gauss-hermite" else quad.cheap()
    stages = [quad] if cheap == quad else [cheap, quad]
    alpha_c = alpha_l = float("nan")
    sem = pos = None
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="attnlab-positional") as pool:
        for k, rule in enumerate(stages):
            sem = BranchFollower(params, "semantic", rule, tol, warm_from=sem, quiet=True, minimizer=minimizer)
            pos = BranchFollower(params, "positional", rule, tol, warm_from=pos, quiet=True, minimizer=minimizer)
            # only where both are converged fixed points and the semantic one has
            # theta > 0: below its appearance the "semantic" start returns theta = 0 or Q = 0
            exists = lambda a: continuable(sem(a))
            gap = functools.partial(_gap, sem, pos, pool)
            above_lin = lambda a: sem(a).eps_g - eps_lin if sem(a).converged else np.nan
            if k == 0:  # from the top: warm starts from the developed branches; stop where the semantic one ends
                alpha_c = _bracketed_root(gap, grid, xtol, stop=lambda a: not exists(a),
                                          resolution=lambda a: GAP_RESOLUTION * max(sem(a).eps_t, pos(a).eps_t))
            elif not np.isnan(alpha_c):
                alpha_c = _refine_root(gap, alpha_c, xtol, grid[0], alpha_max)
            if np.isnan(alpha_c):
                alpha_l = float("nan")
            elif sem(_solved_above(sem, alpha_c, xtol)).eps_g < eps_lin:
                alpha_l = alpha_c
            elif k == 0:
                alpha_l = _bracketed_root(above_lin, [alpha_c] + [a for a in grid if a > alpha_c], xtol)
            elif not np.isnan(alpha_l):
                alpha_l = _refine_root(above_lin, alpha_l, xtol, alpha_c, alpha_max)
    return Transition(alpha_c=float(alpha_c), alpha_l=float(alpha_l), eps_g_linear=eps_lin, xtol=xtol, params=params,
                      minimizer=minimizer, alpha_min=float(grid[0]), alpha_max=float(alpha_max))


def _solved_above(follow: BranchFollower, alpha: float, xtol: float) -> float:
    """The nearest ``alpha`` in ``[alpha, alpha + xtol]`` at which ``follow`` has a converged fixed
    point (e.g. the upper end of the bracket of a root), else ``alpha`` itself: where the
    lower minimum just above a root is read, to the root's tolerance."""
    return min((a for a, r in follow.solved.items() if alpha <= a <= alpha + xtol and r.converged), default=alpha)


def _gap(sem: BranchFollower, pos: BranchFollower, pool, alpha: float) -> float:
    """``eps_t`` of the semantic minus the positional branch at ``alpha`` (``nan`` unless the
    semantic fixed point is continuable and the positional one converged). The positional
    branch is solved in ``pool`` beside the semantic one, and remembered only where the
    gap needs it, so that both followers see the calls of a sequential evaluation."""
    if alpha in sem.solved:
        s = sem(alpha)
        p = pos(alpha) if continuable(s) else None
    else:
        s, p = solve_side_by_side(lambda: sem(alpha), lambda: pos.peek(alpha), pool)
        if continuable(s):
            pos.solved.setdefault(alpha, p)
    if not continuable(s):
        return np.nan
    return s.eps_t - p.eps_t if p.converged else np.nan


def phase_diagram(params: ModelParams, omegas, *, workers: int = 1, progress: bool = False,
                  **kwargs) -> list[Transition]:
    """``find_transition`` for each ``omega`` (other parameters from ``params``).

    Parameters
    ----------
    params : ModelParams
    omegas : array_like, shape (k,)
        Values in ``[0, 1]``.
    workers : int
        Processes solving different ``omega`` at once (``1``: in this process).
    progress : bool
        tqdm bar over ``omega``.
    **kwargs
        Passed to :func:`find_transition`.

    Returns
    -------
    list of Transition, one per omega

    Raises
    ------
    TypeError
        If ``params`` is not a ``ModelParams`` (or a keyword is unknown).
    ValueError
        Empty ``omegas``, ``omega`` outside ``[0, 1]``, ``workers < 1`` or an
        invalid keyword of :func:`find_transition`; before any solve.
    """
    check_params(params)
    workers = check_int("workers", workers, 1)
    omegas = [check_in_range("omega", w, 0.0, 1.0) for w in np.atleast_1d(omegas)]
    if not omegas:
        raise ValueError("omegas must contain at least one value in [0, 1]")
    cases = [params.replace(omega=float(w)) for w in omegas]
    _transition_args(cases[0], **kwargs)  # invalid arguments fail here, before any solve
    return map_transitions(cases, workers=workers, progress=progress, **kwargs)


def map_transitions(cases, *, workers: int = 1, progress: bool = False, **kwargs) -> list[Transition]:
    """:func:`find_transition` for each parameter set of ``cases``, in this process
    (``workers == 1``) or on :func:`attnlab.parallel.parallel_imap` with ``workers``
    processes, each with its share of the cores for the compiled kernels.

    Parameters
    ----------
    cases : sequence of ModelParams
    workers : int
    progress : bool
        tqdm bar over the cases.
    **kwargs
        Passed to :func:`find_transition`.

    Returns
    -------
    list of Transition, in the order of ``cases``

    Raises
    ------
    TypeError, ValueError
        As :func:`find_transition`, for any case, before any solve.
    """
    import os

    from tqdm.auto import tqdm

    from ..parallel import parallel_imap

    workers = check_int("workers", workers, 1)
    for case in cases:
        _transition_args(case, **kwargs)
    solve = functools.partial(find_transition, **kwargs)
    bar = dict(total=len(cases), desc="phase diagram", disable=not progress, leave=False)
    if workers == 1:
        return [solve(c) for c in tqdm(cases, **bar)]
    threads = max(1, (os.cpu_count() or 1) // workers)
    return list(tqdm(parallel_imap(solve, cases, workers=workers, threads=threads), **bar))
