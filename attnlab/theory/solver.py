"""Solve the state evolution: a fixed point on the positional or semantic branch.

Source: Cui et al. 2024 (arXiv:2402.03902), Result 4.2 (the fixed-point
equations) and Sec. 4 (the two branches: positional ``theta = 0``, semantic
``m = 0``, both fixed points for every ``alpha``).

The fixed point ``x = G(x)`` of overlaps ``x = (q, m, V, theta)`` is found with
MINPACK's hybrid Powell method (``scipy.optimize.root``) on the residual
``G(x) - x`` in the coordinates ``(log q, m, log V, theta)``; if that fails, a
damped iteration (damping 0.8) takes over. Convergence is judged on the
undamped residual. Symmetry pins the branch: on the positional branch
``theta = 0`` exactly; on the semantic branch ``m = 0`` when ``A`` is
symmetric under swapping the two positions. The proximal steps are warm-started
from the previous evaluation and the final fixed point is re-checked with a
full global search of every proximal problem.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.optimize

from ..params import ModelParams, check_choice, check_positive
from .channel import proximal, teacher_diagonal
from .quadrature import tensor_rule
from .state_evolution import (SIGNS, Hats, Overlaps, Quadrature, fields, free_entropy,
                              generalization_error, update_overlaps)

__all__ = ["BRANCHES", "SEResult", "ConvergenceWarning", "solve_state_evolution", "initial_overlaps"]

BRANCHES = ("semantic", "positional")


class ConvergenceWarning(RuntimeWarning):
    """The state-evolution iteration did not reach its tolerance."""


@dataclass(frozen=True)
class SEResult:
    """A state-evolution fixed point and its observables.

    Attributes
    ----------
    alpha : float
    branch : str
        ``"semantic"``, ``"positional"`` or ``"custom"`` (user initial overlaps).
    overlaps : Overlaps
        SE variables ``q = sigma^2 |Q|^2/d``, ``m = 1.Q/d``, ``V``,
        ``theta = sigma^2 Q.Q*/d`` (sign-fixed: ``m >= 0``, ``theta >= 0``).
    hats : Hats
        Conjugates ``qhat, mhat, Vhat, thetahat``.
    m, theta, qnorm : float
        User-facing observables as reported by the trainers: ``|m|``,
        ``theta = Q*.Q/d = |theta_SE| / sigma^2`` and ``qnorm = |Q|^2/d = q / sigma^2``.
    eps_g : float
        Generalization error ``(sigma^2/2) E ||S(h) - T(h*)||_F^2``.
    eps_t : float
        Training loss ``-Phi`` (regulariser included), comparable with ``R/d``.
    iterations : int
        Evaluations of the fixed-point map.
    residual : float
        Max-norm of the undamped residual ``G(x) - x`` at the returned point
        (relative for ``q`` and ``V``).
    converged : bool
    quadrature : Quadrature
    quadrature_error : dict or None
        If requested, ``|value(refined rule) - value|`` for ``m, theta, qnorm, eps_g, eps_t``.
    """

    alpha: float
    branch: str
    params: ModelParams
    overlaps: Overlaps
    hats: Hats
    m: float
    theta: float
    qnorm: float
    eps_g: float
    eps_t: float
    iterations: int
    residual: float
    converged: bool
    quadrature: Quadrature
    quadrature_error: dict | None = field(default=None)

    def to_dict(self) -> dict:
        """JSON-serialisable summary (SE ``q, V`` plus the user-facing observables)."""
        return dict(alpha=self.alpha, branch=self.branch, q=self.overlaps.q, m=self.m, V=self.overlaps.V,
                    theta=self.theta, qnorm=self.qnorm, eps_g=self.eps_g, eps_t=self.eps_t,
                    converged=self.converged, iterations=self.iterations, residual=self.residual,
                    qhat=self.hats.qhat, mhat=self.hats.mhat, Vhat=self.hats.Vhat, thetahat=self.hats.thetahat,
                    quadrature_error=self.quadrature_error)


def initial_overlaps(branch: str, params: ModelParams) -> Overlaps:
    """Starting overlaps near a branch: positional ``m = 0.3, theta = 0``; semantic ``theta = 0.8 rho, m = 0``."""
    check_choice("branch", branch, BRANCHES)
    s2 = params.sigma ** 2
    if branch == "positional":
        return Overlaps(q=0.1 * s2, m=0.3, V=s2 / params.lam if params.lam > 0 else 1.0, theta=0.0)
    return Overlaps(q=s2 * 0.8, m=0.0, V=1.0, theta=0.7 * s2)


class _FixedPointMap:
    """``G(x)``: channel update then ridge update, on fixed quadrature nodes,
    with warm-started proximal steps."""

    def __init__(self, params: ModelParams, alpha: float, quad: Quadrature):
        self.params, self.alpha = params, alpha
        self.nodes, self.weights = tensor_rule((quad.order_xi, quad.order_xi, quad.order_eta, quad.order_eta))
        self.warm = None
        self.calls = 0

    def hats(self, ov: Overlaps, global_search: bool = False):
        p, rho = self.params, self.params.sigma ** 2
        w1, w2, hs1, hs2, c = fields(ov, rho, self.nodes)
        T11, T22 = teacher_diagonal(hs1, hs2, p.omega, p.A_array)
        h1, h2, M = proximal(w1, w2, T11, T22, ov.V, p.sigma, warm=None if global_search else self.warm)
        self.warm = (h1, h2)
        self.calls += 1
        f1, f2 = (h1 - w1) / ov.V, (h2 - w2) / ov.V
        E = lambda g: float(self.weights @ g)
        xi1, xi2, eta1, eta2 = self.nodes
        a = self.alpha
        thetahat = a * E(f1 * eta1 + f2 * eta2) / c
        hats = Hats(qhat=a * E(f1 ** 2 + f2 ** 2), mhat=a * E(SIGNS[0] * f1 + SIGNS[1] * f2),
                    Vhat=-a * E(f1 * xi1 + f2 * xi2) / np.sqrt(ov.q) + ov.theta * thetahat / ov.q,
                    thetahat=thetahat)
        return hats, E(M)

    def __call__(self, ov: Overlaps, global_search: bool = False) -> Overlaps:
        return update_overlaps(self.hats(ov, global_search)[0], self.params)


def _pack(ov: Overlaps, free: tuple) -> np.ndarray:
    full = np.array([np.log(ov.q), ov.m, np.log(ov.V), ov.theta])
    return full[list(free)]


def _unpack(x: np.ndarray, free: tuple, pinned: Overlaps) -> Overlaps:
    full = np.array([np.log(pinned.q), pinned.m, np.log(pinned.V), pinned.theta])
    full[list(free)] = x
    return Overlaps(q=float(np.exp(full[0])), m=float(full[1]), V=float(np.exp(full[2])), theta=float(full[3]))


def _residual(G, ov: Overlaps, free: tuple, global_search=False) -> np.ndarray:
    return _pack(G(ov, global_search), free) - _pack(ov, free)


def solve_state_evolution(params: ModelParams, alpha: float, branch: str = "semantic", *, init: Overlaps | None = None,
                          quad: Quadrature | None = None, tol: float = 1e-8, max_iter: int = 300,
                          error_estimate: bool = False) -> SEResult:
    """Fixed point of the state evolution on a branch (SCIENCE.md Sec. 5; paper Result 4.2).

    Parameters
    ----------
    params : ModelParams
        ``sigma``, ``lam``, ``omega``, ``A`` (``L = 2``, rank 1 only).
    alpha : float
        Sample complexity ``n/d`` in ``(0, inf)``.
    branch : {"semantic", "positional"}
        Branch to follow (pins ``theta = 0`` or, for symmetric ``A``, ``m = 0``).
    init : Overlaps, optional
        Initial SE overlaps (e.g. a warm start from a neighbouring ``alpha``).
    quad : Quadrature, optional
        Gauss-Hermite orders (default ``Quadrature()``).
    tol : float
        Tolerance on the max-norm of the undamped residual.
    max_iter : int
        Budget of fixed-point-map evaluations.
    error_estimate : bool
        Also solve with ``quad.refined()`` and report the differences.

    Returns
    -------
    SEResult

    Raises
    ------
    ValueError
        Invalid ``alpha``, ``branch``, ``tol``, ``L != 2`` or rank ``!= 1``.

    Warns
    -----
    ConvergenceWarning
        If the residual is above ``tol`` after ``max_iter`` evaluations
        (the result then has ``converged=False``).
    """
    alpha = check_positive("alpha", alpha)
    branch = check_choice("branch", branch, BRANCHES)
    tol = check_positive("tol", tol)
    if params.L != 2 or params.r != 1:
        raise ValueError(f"the state evolution is implemented for L = 2 and rank r = 1 (got L={params.L}, r={params.r})")
    quad = quad or Quadrature()
    start = init if init is not None else initial_overlaps(branch, params)
    A = params.A_array
    free = (0, 1, 2, 3)
    if branch == "positional":
        start, free = replace(start, theta=0.0), (0, 1, 2)
    elif np.isclose(A[0, 0], A[1, 1]):
        start, free = replace(start, m=0.0), (0, 2, 3)
    G = _FixedPointMap(params, alpha, quad)
    ov = _find_fixed_point(G, start, free, tol, max_iter)
    ov = _polish_with_global_search(G, ov, free, tol, max_iter)
    res = float(np.abs(_residual(G, ov, free, global_search=True)).max())
    converged = res <= 10 * tol
    if not converged:
        warnings.warn(f"state evolution did not converge at alpha={alpha}, branch={branch}: residual {res:.2e} > tol",
                      ConvergenceWarning, stacklevel=2)
    hats, EM = G.hats(ov, global_search=True)
    s2 = params.sigma ** 2
    ov_signed = replace(ov, m=abs(ov.m), theta=abs(ov.theta))
    result = SEResult(alpha=alpha, branch=branch if init is None else branch, params=params, overlaps=ov_signed,
                      hats=hats, m=abs(ov.m), theta=abs(ov.theta) / s2, qnorm=ov.q / s2,
                      eps_g=generalization_error(ov, params, quad), eps_t=-free_entropy(ov, hats, EM, params, alpha),
                      iterations=G.calls, residual=res, converged=converged, quadrature=quad)
    if error_estimate:
        fine = solve_state_evolution(params, alpha, branch, init=ov, quad=quad.refined(), tol=tol, max_iter=max_iter)
        keys = ("m", "theta", "qnorm", "eps_g", "eps_t")
        result = replace(result, quadrature_error={k: abs(getattr(fine, k) - getattr(result, k)) for k in keys})
    return result


def _find_fixed_point(G, start: Overlaps, free: tuple, tol: float, max_iter: int) -> Overlaps:
    pinned = start
    f = lambda x: _residual(G, _unpack(x, free, pinned), free)
    x0 = _pack(start, free)
    try:
        with np.errstate(all="ignore"):
            sol = scipy.optimize.root(f, x0, method="hybr", options=dict(xtol=tol * 1e-2, maxfev=max_iter))
        if np.all(np.isfinite(sol.x)) and np.abs(sol.fun).max() <= tol:
            return _unpack(sol.x, free, pinned)
    except FloatingPointError:
        pass
    return _damped_iteration(G, start, free, tol, max(0, max_iter - G.calls))


def _damped_iteration(G, ov: Overlaps, free: tuple, tol: float, budget: int, damping: float = 0.8) -> Overlaps:
    x = _pack(ov, free)
    for _ in range(budget):
        r = _residual(G, _unpack(x, free, ov), free)
        if not np.all(np.isfinite(r)):
            raise FloatingPointError("state evolution produced a non-finite update")
        if np.abs(r).max() <= tol:
            break
        x = x + (1.0 - damping) * r
    return _unpack(x, free, ov)


def _polish_with_global_search(G, ov: Overlaps, free: tuple, tol: float, max_iter: int) -> Overlaps:
    """Re-solve from the fixed point with every proximal problem searched globally;
    warm starts only find local minima, so this catches a branch switch."""
    for _ in range(3):
        before = G.warm
        r = _residual(G, ov, free, global_search=True)
        if np.abs(r).max() <= tol:
            return ov
        ov = _find_fixed_point(G, ov, free, tol, G.calls + max_iter)
        if before is not None and G.warm is not None and np.array_equal(before[0], G.warm[0]):
            break
    return ov
