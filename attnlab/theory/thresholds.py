"""Curves over alpha, the thresholds alpha_c and alpha_l, and the phase diagram.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 4, Fig. 2 and Fig. 3:
``alpha_c`` is where the training losses of the semantic and the positional
branches cross (below it the global minimum of the risk is positional, above
it semantic); ``alpha_l >= alpha_c`` is where the generalization error of the
global minimum falls below that of the best linear positional model.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.optimize
from numpy.polynomial.hermite_e import hermegauss

from ..params import ModelParams, check_int, check_positive
from .channel import teacher_diagonal
from .solver import SEResult, solve_state_evolution
from .state_evolution import Quadrature

__all__ = ["linear_baseline_error", "se_curve", "Transition", "find_transition", "phase_diagram"]


def linear_baseline_error(params: ModelParams, order: int = 60) -> float:
    """Theoretical test error of the best linear positional model.

    ``eps_g^lin = (sigma^2 / 2) E ||T(h*) - E T||_F^2 = sigma^2 [Var T11 + Var T22]``
    with ``h*_l ~ N(0, sigma^2)`` i.i.d. (``L = 2``), by a tensor Gauss-Hermite
    rule of ``order`` points per dimension (smooth integrand; order 60 is
    converged to machine precision for ``sigma <= 1``).

    Source: Cui et al. 2024, Sec. 4 (linear baseline).
    """
    x, w = hermegauss(order)
    w = w / w.sum()
    h1, h2 = np.meshgrid(params.sigma * x, params.sigma * x, indexing="ij")
    W = np.outer(w, w)
    T11, T22 = teacher_diagonal(h1, h2, params.omega, params.A_array)
    var = lambda T: float((W * T ** 2).sum() - (W * T).sum() ** 2)
    return params.sigma ** 2 * (var(T11) + var(T22))


class _BranchCache:
    """Solves on a branch, warm-started from the nearest alpha already solved."""

    def __init__(self, params, branch, quad, tol):
        self.params, self.branch, self.quad, self.tol = params, branch, quad, tol
        self.solved: dict[float, SEResult] = {}

    def __call__(self, alpha: float) -> SEResult:
        if alpha not in self.solved:
            # warm start from the nearest solution that is on the branch (below
            # alpha ~ 0.65 the semantic branch collapses onto theta = 0, which is
            # a fixed point for every alpha and must not be continued from)
            lead = "theta" if self.branch == "semantic" else "m"
            good = [a for a, r in self.solved.items() if r.converged and getattr(r, lead) > 1e-6]
            near = min(good, key=lambda a: abs(a - alpha), default=None)
            init = self.solved[near].overlaps if near is not None else None
            self.solved[alpha] = solve_state_evolution(self.params, alpha, self.branch, init=init,
                                                       quad=self.quad, tol=self.tol)
        return self.solved[alpha]


def se_curve(params: ModelParams, alphas, branch: str = "semantic", *, quad: Quadrature | None = None,
             tol: float = 1e-7, progress: bool = False) -> list[SEResult]:
    """Fixed points along ``alphas`` on one branch, by continuation.

    Each point is warm-started from the nearest ``alpha`` already solved whose
    fixed point lies on the branch (``theta > 0`` resp. ``m > 0``). The
    semantic branch is followed from large to small ``alpha`` (it branches off
    the trivial ``theta = 0`` solution near ``alpha ~ 0.7`` at ``omega = 0.3``
    and must not be continued from that solution), the positional one from
    small to large.

    Parameters
    ----------
    alphas : array_like, shape (k,)
        Positive sample complexities.
    branch : {"semantic", "positional"}

    Returns
    -------
    list of SEResult, length k, in the order of ``alphas``.
    """
    from tqdm.auto import tqdm

    alphas = [check_positive("alpha", a) for a in np.atleast_1d(alphas)]
    if not alphas:
        raise ValueError("alphas must contain at least one value")
    cache = _BranchCache(params, branch, quad, tol)
    order = sorted(set(alphas), reverse=(branch == "semantic"))
    for a in tqdm(order, desc=f"SE {branch}", disable=not progress, leave=False):
        cache(a)
    return [cache(a) for a in alphas]


@dataclass(frozen=True)
class Transition:
    """Thresholds for one parameter set.

    Attributes
    ----------
    alpha_c : float
        Crossing of the branches' training losses (``nan`` if none in range).
    alpha_l : float
        Where the global minimum's ``eps_g`` drops below ``eps_g_linear`` (``nan`` if not in range).
    eps_g_linear : float
    xtol : float
        Absolute tolerance of both roots in ``alpha``.
    params : ModelParams
    """

    alpha_c: float
    alpha_l: float
    eps_g_linear: float
    xtol: float
    params: ModelParams

    def to_dict(self) -> dict:
        return dict(omega=self.params.omega, sigma=self.params.sigma, lam=self.params.lam,
                    alpha_c=self.alpha_c, alpha_l=self.alpha_l, eps_g_linear=self.eps_g_linear, xtol=self.xtol)


def _bracketed_root(fun, grid, xtol):
    vals = [fun(a) for a in grid[::-1]][::-1]  # from large alpha down: warm starts from the developed branches
    for (a0, f0), (a1, f1) in zip(zip(grid, vals), zip(grid[1:], vals[1:])):
        if f0 == 0:
            return a0
        if f0 * f1 < 0:
            return scipy.optimize.brentq(fun, a0, a1, xtol=xtol)
    return float("nan")


def _refine_root(fun, guess, xtol, lo, hi, step=0.02, max_steps=8):
    """Root of ``fun`` near ``guess`` (within ``[lo, hi]``) to ``xtol``.

    Secant steps from ``guess`` and ``guess + step``; the root is accepted
    once ``fun`` changes sign across ``[x - xtol/2, x + xtol/2]`` (so the
    returned midpoint is within ``xtol/2`` of a root). Falls back to Brent's
    method on a bracket grown around ``guess`` if the secant steps wander.
    """
    clip = lambda a: min(hi, max(lo, a))
    a, b = clip(guess), clip(guess + step)
    fa, fb = fun(a), fun(b)
    for _ in range(max_steps):
        if fb == fa or not (np.isfinite(fa) and np.isfinite(fb)):
            break
        x = clip(b - fb * (b - a) / (fb - fa))
        left, right = clip(x - xtol / 2), clip(x + xtol / 2)
        fl, fr = fun(left), fun(right)
        if not (np.isfinite(fl) and np.isfinite(fr)):
            break
        if fl * fr <= 0:
            return 0.5 * (left + right)
        a, fa, b, fb = (left, fl, right, fr) if abs(x - b) > xtol else (b, fb, x, 0.5 * (fl + fr))
        if fa * fb < 0 and abs(b - a) < 8 * xtol:
            lo_, hi_ = sorted((a, b))
            return scipy.optimize.brentq(fun, lo_, hi_, xtol=xtol)
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
    return scipy.optimize.brentq(fun, a, b, xtol=xtol)


def find_transition(params: ModelParams, *, alpha_max: float = 3.0, grid_points: int = 7, xtol: float = 1e-3,
                    quad: Quadrature | None = None, tol: float = 1e-6) -> Transition:
    """``alpha_c`` and ``alpha_l`` by bracketing on a grid of ``alpha`` and Brent's method.

    With the split rule (the default ``Quadrature``) the roots are first
    bracketed with the fast Gauss-Hermite rule, then refined with the split
    rule on a small bracket around them.

    Parameters
    ----------
    params : ModelParams
    alpha_max : float
        Upper end of the search interval ``(0, alpha_max]``.
    grid_points : int
        Points of the bracketing grid (geometric from ``alpha_max / 20``).
    xtol : float
        Absolute tolerance of the roots in ``alpha``.
    quad : Quadrature, optional
    tol : float
        Tolerance of each fixed point (the roots need less than the 1e-7 of
        :func:`~attnlab.theory.solver.solve_state_evolution`: 1e-6 changes them by < 1e-8).

    Returns
    -------
    Transition
        Roots not found in the interval are ``nan``; the crossing is only
        searched where the semantic solution has ``theta > 0`` (so ``nan``
        also when the semantic branch is already the lower one where it
        appears, or when both branches collapse to ``Q = 0``).

    Raises
    ------
    ValueError
        If ``alpha_max <= 0``, ``xtol <= 0`` or ``grid_points < 3``.
    """
    alpha_max = check_positive("alpha_max", alpha_max)
    xtol = check_positive("xtol", xtol)
    grid_points = check_int("grid_points", grid_points, 3)
    quad = quad or Quadrature()
    eps_lin = linear_baseline_error(params)
    grid = list(np.geomspace(alpha_max / 20, alpha_max, grid_points))
    fast = Quadrature(method="gauss-hermite", order_xi=quad.order_xi, order_eta=quad.order_eta,
                      order_error=quad.order_error)
    stages = [fast] if quad.method == "gauss-hermite" else [fast, quad]
    alpha_c = alpha_l = float("nan")
    for k, rule in enumerate(stages):
        sem = _BranchCache(params, "semantic", rule, tol)
        pos = _BranchCache(params, "positional", rule, tol)
        # only where the semantic solution is a semantic fixed point (theta > 0):
        # below its appearance the "semantic" start returns theta = 0 or Q = 0
        gap = lambda a: (sem(a).eps_t - pos(a).eps_t) if sem(a).theta > 1e-6 and not sem(a).collapsed else np.nan
        above_lin = lambda a: sem(a).eps_g - eps_lin
        if k == 0:
            alpha_c = _bracketed_root(gap, grid, xtol)
        elif not np.isnan(alpha_c):
            alpha_c = _refine_root(gap, alpha_c, xtol, grid[0], alpha_max)
        if np.isnan(alpha_c):
            alpha_l = float("nan")
        elif sem(alpha_c).eps_g < eps_lin:
            alpha_l = alpha_c
        elif k == 0:
            alpha_l = _bracketed_root(above_lin, [alpha_c] + [a for a in grid if a > alpha_c], xtol)
        elif not np.isnan(alpha_l):
            alpha_l = _refine_root(above_lin, alpha_l, xtol, alpha_c, alpha_max)
    return Transition(alpha_c=float(alpha_c), alpha_l=float(alpha_l), eps_g_linear=eps_lin, xtol=xtol, params=params)


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
    ValueError
        Empty ``omegas``, ``omega`` outside ``[0, 1]`` or ``workers < 1``.
    """
    import concurrent.futures
    import functools
    import multiprocessing

    from tqdm.auto import tqdm

    workers = check_int("workers", workers, 1)
    omegas = list(np.atleast_1d(omegas))
    if not omegas:
        raise ValueError("omegas must contain at least one value in [0, 1]")
    cases = [params.replace(omega=float(w)) for w in omegas]
    solve = functools.partial(find_transition, **kwargs)
    bar = dict(total=len(cases), desc="phase diagram", disable=not progress, leave=False)
    if workers == 1:
        return [solve(c) for c in tqdm(cases, **bar)]
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(tqdm(pool.map(solve, cases), **bar))
