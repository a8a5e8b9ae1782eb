"""Solve the state evolution: a fixed point on the positional or semantic branch.

Source: Cui et al. 2024 (arXiv:2402.03902), Result 4.2 (the fixed-point
equations) and Sec. 4 (the two branches: positional ``theta = 0``, semantic
``m = 0``).

Which per-sample proximal minimiser enters the channel update is chosen by
``minimizer`` (:data:`~attnlab.params.MINIMIZERS`): ``"followed"`` (default), the local
minimiser reached by descent from the preactivations of gradient descent's
initialisation (:mod:`attnlab.theory.followed_rule`, quasi-Monte Carlo), which
describes the minima gradient descent reaches; or ``"global"``, the global
minimiser of the paper's Result 4.2 (the split rule below).

With the global minimiser the fixed point ``x = G(x)`` of overlaps
``x = (q, m, V, theta)`` is found in two stages, in the unconstrained coordinates
``(log q, m, log V, atanh(theta / sqrt(q rho)))``:

1. *coarse*: MINPACK's hybrid Powell method (``scipy.optimize.root``) on the
   residual ``G(x) - x`` with tensor Gauss-Hermite expectations (to 1e-4 when a
   split-rule stage follows); if it fails, a damped iteration (damping 0.8)
   into a basin, then hybrid Powell again;
2. *fine* (``Quadrature.method == "split"``): Broyden steps
   ``x <- x - J^{-1} r(x)`` on the residual computed with the split rule of
   :mod:`attnlab.theory.split_rule`: first with the cheap
   :meth:`~attnlab.theory.split_rule.SplitRule.fast` rule (to a residual of
   1e-4, ``J`` started from the finite-difference Jacobian of the coarse
   residual), then with the requested rule, ``J`` started from the
   finite-difference Jacobian of the cheap rule, so that the expensive rule is
   evaluated only 3-4 times. A warm start (``init=``, e.g. a fixed point at a
   neighbouring ``alpha``) goes to this stage directly; an ``SEResult`` passed
   as ``init`` also brings its Jacobian for the cheap rule (no finite
   differences of the coarse one).

With the followed minimiser the coarse stage uses :meth:`~attnlab.theory.followed_rule.QMCRule.fast` points
(to 1e-3) and the fine stage Broyden steps with ``quad.qmc`` (to
:func:`followed_tolerance`).

Without ``init`` several starting points are tried until one reaches a fixed
point on the branch. Where none does and the trivial fixed point ``Q = 0``
(uniform attention) attracts the map, that point is returned with
``collapsed=True``. Convergence is judged on the undamped residual of the rule
that produced the result. Symmetry
pins the branch: on the positional branch ``theta = 0`` exactly; on the
semantic branch ``m = 0`` when ``A`` is symmetric under swapping the two
positions; the pins also fix the folded node set (:mod:`attnlab.theory.symmetry`).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.optimize

from ..params import (BRANCHES, DEFAULT_MINIMIZER, MINIMIZERS, ModelParams, check_choice, check_in_range,
                      check_int, check_params, check_tolerance)
from .state_evolution import (Hats, Overlaps, Quadrature, channel_expectations, free_entropy,
                              gauss_hermite_expectations, generalization_error, hats_from_expectations,
                              update_overlaps)
from .followed_rule import QMCRule, followed_expectations
from .split_rule import SplitRule
from .symmetry import Symmetry

__all__ = ["BRANCHES", "MINIMIZERS", "DEFAULT_MINIMIZER", "FOLLOWED_TOL", "followed_tolerance", "SEResult",
           "ConvergenceWarning", "OffBranchWarning", "QuadratureWarning", "StateEvolutionError", "solve_state_evolution",
           "initial_overlaps", "check_quadrature", "check_se_params", "ON_BRANCH_MIN", "QUADRATURE_WARN", "ALPHA_LIMIT",
           "SIGMA_LIMIT"]


#: Smallest residual tolerance used with the followed minimiser and the default
#: point set (``2**17`` points); it grows as ``1/sqrt(points)`` for other point sets.
#: The quasi-Monte Carlo map moves in steps (a node whose descent changes basin
#: moves the expectations by ~1/N), which puts a floor of 1e-5 to 1e-4 under the
#: residual; the integration error of the fixed point (about 1e-3) is larger still.
FOLLOWED_TOL = 3e-4


def followed_tolerance(rule: QMCRule) -> float:
    """The residual floor of the followed minimiser's map with ``rule``: :data:`FOLLOWED_TOL`
    at ``2**17`` points, growing as ``1 / sqrt(points)``."""
    return FOLLOWED_TOL * float(np.sqrt(2 ** 17 / rule.points))


class ConvergenceWarning(RuntimeWarning):
    """The state-evolution iteration did not reach its tolerance."""


class OffBranchWarning(ConvergenceWarning):
    """The fixed point found is not on the requested branch (its leading overlap,
    ``m`` on the positional branch, ``theta`` on the semantic one, is zero): the
    result has ``on_branch=False``."""


class QuadratureWarning(RuntimeWarning):
    """The quadrature error estimate (``error_estimate=True``) is large: more than
    :data:`QUADRATURE_WARN` of a value."""


#: Largest ``alpha`` of the state evolution (at 1e6 the iteration leaves its domain).
ALPHA_LIMIT = 1e4
#: Largest ``sigma`` of the state evolution (the split rule's scan and the quasi-Monte Carlo
#: points are built for ``sigma`` of order one: at 10 the fixed point is not reached).
SIGMA_LIMIT = 5.0

#: A fixed point is on its branch if its leading overlap (``m`` positional, ``theta``
#: semantic) exceeds this (or it is the collapsed ``Q = 0``, flagged by ``collapsed``).
ON_BRANCH_MIN = 1e-6
#: Relative quadrature error (of ``eps_g``, ``eps_t``, ``qnorm``) above which
#: ``error_estimate=True`` warns.
QUADRATURE_WARN = 0.01


class StateEvolutionError(RuntimeError):
    """The fixed-point iteration left the domain of the equations (e.g.
    ``lambda + sigma^2 Vhat <= 0`` or a non-finite update) and could not recover."""


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
    minimizer : str
        The per-sample proximal minimiser (:data:`~attnlab.params.MINIMIZERS`).
    collapsed : bool
        The branch has collapsed onto the trivial fixed point ``Q = 0``
        (uniform attention: ``q = m = theta = 0``), which attracts the
        iteration there (e.g. strong regularisation or small ``sigma``).
    on_branch : bool
        The leading overlap of ``branch`` (``m`` positional, ``theta``
        semantic) is above :data:`ON_BRANCH_MIN`, or the result is ``collapsed``.
        ``False``: the iteration reached a fixed point off the requested branch
        (e.g. ``m = theta = 0`` at very small ``alpha``); an
        :class:`OffBranchWarning` is issued.
    jacobian : ndarray, shape (k, k), or None
        Broyden's approximation of the Jacobian of the residual ``G(x) - x`` at the
        fixed point, in the solver's coordinates of the ``k`` free overlaps (split
        rule only); passing this result as ``init`` lets a neighbouring solve start from it.
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
    minimizer: str = "global"
    collapsed: bool = False
    on_branch: bool = True
    jacobian: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        """JSON-serialisable summary (SE ``q, V`` plus the user-facing observables)."""
        return dict(alpha=self.alpha, branch=self.branch, q=self.overlaps.q, m=self.m, V=self.overlaps.V,
                    theta=self.theta, qnorm=self.qnorm, eps_g=self.eps_g, eps_t=self.eps_t,
                    converged=self.converged, iterations=self.iterations, residual=self.residual,
                    qhat=self.hats.qhat, mhat=self.hats.mhat, Vhat=self.hats.Vhat, thetahat=self.hats.thetahat,
                    quadrature_error=self.quadrature_error, minimizer=self.minimizer, collapsed=self.collapsed,
                    on_branch=self.on_branch)


def initial_overlaps(branch: str, params: ModelParams) -> Overlaps:
    """Starting overlaps near a branch: positional ``m = 0.3, theta = 0``; semantic ``theta = 0.7 rho, m = 0``;
    ``V = sigma^2 / lambda`` (its small-``alpha`` limit) on both."""
    check_choice("branch", branch, BRANCHES)
    s2 = params.sigma ** 2
    if branch == "positional":
        return Overlaps(q=0.1 * s2, m=0.3, V=s2 / params.lam if params.lam > 0 else 1.0, theta=0.0)
    return Overlaps(q=s2 * 0.8, m=0.0, V=s2 / params.lam if params.lam > 0 else 1.0, theta=0.7 * s2)


class _FixedPointMap:
    """``G(x)``: channel update then ridge update on a fixed rule."""

    def __init__(self, params: ModelParams, alpha: float, quad: Quadrature, fine: bool, symmetry: Symmetry,
                 minimizer: str = "global", branch: str = "semantic"):
        self.params, self.alpha, self.quad, self.fine = params, alpha, quad, fine
        self.minimizer, self.branch = minimizer, branch
        self.symmetry = symmetry  # fixed, so that the node set (and its warm starts) stay fixed
        self.calls = 0
        self.warm = None
        self._last = None

    def hats(self, ov: Overlaps):
        if self._last is not None and self._last[0] == ov:
            return self._last[1]
        self._last = (ov, self._hats(ov))
        return self._last[1]

    def _hats(self, ov: Overlaps):
        self.calls += 1
        if self.minimizer == "followed":
            rule = self.quad.qmc if self.fine else QMCRule.fast()
            ex = followed_expectations(ov, self.params, rule, self.branch, self.symmetry)
        elif self.fine:
            ex = channel_expectations(ov, self.params, self.quad, fine=True, symmetry=self.symmetry)
        else:
            # Gauss-Hermite nodes are fixed: the first call searches every proximal
            # problem globally; later calls start Newton from that minimiser, its
            # mirror image and w (a deterministic map, as hybr needs).
            ex, sol = gauss_hermite_expectations(ov, self.params, self.quad, warm=self.warm, symmetry=self.symmetry)
            if self.warm is None:
                self.warm = sol
        return hats_from_expectations(ex, ov, self.params, self.alpha), ex["M"]

    def __call__(self, ov: Overlaps) -> Overlaps:
        return update_overlaps(self.hats(ov)[0], self.params)


def _pack(ov: Overlaps, free: tuple, rho: float) -> np.ndarray:
    """Unconstrained coordinates ``(log q, m, log V, atanh(theta / sqrt(q rho)))``."""
    kappa = np.clip(ov.theta / np.sqrt(ov.q * rho), -1 + 1e-15, 1 - 1e-15)
    full = np.array([np.log(ov.q), ov.m, np.log(ov.V), np.arctanh(kappa)])
    return full[list(free)]


def _unpack(x: np.ndarray, free: tuple, pinned: Overlaps, rho: float) -> Overlaps:
    full = _pack(pinned, (0, 1, 2, 3), rho)
    full[list(free)] = x
    q = float(np.exp(full[0]))
    return Overlaps(q=q, m=float(full[1]), V=float(np.exp(full[2])), theta=float(np.tanh(full[3]) * np.sqrt(q * rho)))


class _Residual:
    def __init__(self, G, free, pinned):
        self.G, self.free, self.pinned = G, free, pinned
        self.rho = G.params.sigma ** 2
        # finite-difference step of its Jacobian: the followed minimiser's quasi-Monte Carlo
        # map moves in steps of ~1e-5 (nodes changing basin), so it needs a coarser step
        self.fd_step = 1e-3 if G.minimizer == "followed" else 1e-6

    def pack(self, ov):
        return _pack(ov, self.free, self.rho)

    def unpack(self, x):
        return _unpack(x, self.free, self.pinned, self.rho)

    def __call__(self, x):
        with np.errstate(over="raise", invalid="raise"):
            ov = self.unpack(x)
        with np.errstate(divide="ignore", invalid="ignore"):  # q = 0 (a collapse) is caught just below
            r = self.pack(self.G(ov)) - x
        if not np.all(np.isfinite(r)):
            raise FloatingPointError("state evolution produced a non-finite update")
        return r


def solve_state_evolution(params: ModelParams, alpha: float, branch: str = "semantic", *,
                          init: "Overlaps | SEResult | None" = None,
                          quad: Quadrature | None = None, tol: float = 1e-7, max_iter: int = 300,
                          error_estimate: bool = False, pin: bool = True,
                          minimizer: str | None = None) -> SEResult:
    """Fixed point of the state evolution on a branch (paper Result 4.2; book Chapter 5).

    Parameters
    ----------
    params : ModelParams
        ``sigma``, ``lam``, ``omega``, ``A`` (``L = 2``, rank 1 only).
    alpha : float
        Sample complexity ``n/d`` in ``(0, inf)``.
    branch : {"semantic", "positional"}
        Branch to follow (pins ``theta = 0`` or, for symmetric ``A``, ``m = 0``).
    init : Overlaps or SEResult, optional
        Initial SE overlaps (e.g. a warm start from a neighbouring ``alpha``). An
        ``SEResult`` on the same branch with the same parameters also passes its
        ``jacobian`` (no finite differences for the cheap stage). A warm start
        skips the coarse stage: about 10-25% of a cold solve.
    quad : Quadrature, optional
        Expectation rule (default ``Quadrature()``: split rule).
    tol : float
        Tolerance on the max-norm of the undamped residual (with the followed
        minimiser at least :func:`~attnlab.theory.solver.followed_tolerance`, 3e-4 with the default points).
    max_iter : int
        Budget of coarse fixed-point-map evaluations (the fine stage takes at most 12).
    error_estimate : bool
        Also solve with ``quad.refined()`` and report the differences.
    pin : bool
        Pin the branch by symmetry (default). With ``pin=False`` all four
        overlaps are free: started from the semantic branch with a small ``m``
        this finds *mixed* fixed points (``m, theta > 0``), e.g. the one that
        gradient descent from ``Q*`` reaches at ``alpha = 0.8``, ``omega = 0.3``.
    minimizer : {"followed", "global"}, optional
        The per-sample proximal minimiser. ``"global"``: the global minimiser,
        as the replica computation of the global minimum of the risk asks
        (the paper's Result 4.2). ``"followed"`` (default, :data:`~attnlab.params.DEFAULT_MINIMIZER`):
        the local minimiser reached by descent from the preactivations of gradient
        descent's initialisation (semantic: ``h*``, from ``Q0 = Q*``; positional:
        from ``Q0 = 0.5 * 1_d``), which describes the minimum gradient descent
        reaches from that init. On the semantic branch the two differ below
        ``alpha ~ 1.1`` (omega = 0.3), on the positional one at small ``omega``;
        there only the followed one agrees with large-``d`` gradient descent
        (book Chapter 5). Its expectations are taken by randomised quasi-Monte
        Carlo (``quad.qmc``).

    Returns
    -------
    SEResult

    Raises
    ------
    TypeError
        If ``params`` is not a :class:`~attnlab.params.ModelParams`, ``quad`` not a
        :class:`Quadrature` or ``init`` not an ``Overlaps``/``SEResult``.
    ValueError
        Invalid ``alpha`` (in ``(0, 1e4]``), ``branch``, ``minimizer``, ``tol`` (in ``(0, 1e-2]``),
        ``init`` (needs ``q > 0``, ``V > 0``, ``theta^2 < q sigma^2``), ``lambda = 0``,
        ``sigma > 5``, ``L != 2`` or rank ``!= 1``.
    StateEvolutionError
        If the iteration leaves the domain of the equations and cannot recover.

    Warns
    -----
    ConvergenceWarning
        If the residual, evaluated at the reported (sign-fixed) overlaps, is above
        ``tol`` after the budget (the result then has ``converged=False``).
    OffBranchWarning
        If the converged fixed point is not on ``branch`` (``on_branch=False``).
    QuadratureWarning
        With ``error_estimate``, if the error of ``qnorm``, ``eps_g`` or ``eps_t``
        exceeds :data:`QUADRATURE_WARN` (1%) of its value.
    """
    check_se_params(params)
    alpha = check_in_range("alpha", alpha, 0.0, ALPHA_LIMIT)
    if not alpha > 0:
        raise ValueError(f"alpha must be in (0, {ALPHA_LIMIT:g}], got {alpha!r}")
    branch = check_choice("branch", branch, BRANCHES)
    minimizer = check_choice("minimizer", DEFAULT_MINIMIZER if minimizer is None else minimizer, MINIMIZERS)
    tol = check_tolerance("tol", tol)
    quad = check_quadrature(quad)
    if init is not None and not isinstance(init, (Overlaps, SEResult)):
        raise TypeError(f"init must be an Overlaps, an SEResult or None, got {type(init).__name__}")
    if minimizer == "followed":
        tol = max(tol, followed_tolerance(quad.qmc))
    max_iter = check_int("max_iter", max_iter, 1)
    jacobian = None
    if isinstance(init, SEResult):
        if init.branch == branch and init.params == params and pin and init.minimizer == minimizer:
            jacobian = init.jacobian
        init = init.overlaps
    if init is not None:
        if not (init.q > 0 and init.V > 0 and init.theta ** 2 < init.q * params.sigma ** 2):
            raise ValueError(f"init must have q > 0, V > 0 and theta^2 < q sigma^2 (got {init}); "
                             "a collapsed result (q = 0) is not a valid warm start")
        result = _solve(params, alpha, branch, init, True, quad, tol, max_iter, pin, jacobian, minimizer)
    else:
        lead = "theta" if branch == "semantic" else "m"
        result = error = None
        for start in _starts(branch, params):
            try:
                result = _solve(params, alpha, branch, start, False, quad, tol, max_iter, pin, minimizer=minimizer)
            except StateEvolutionError as exc:  # this start left the domain: try the next one
                error = exc
                continue
            if result.converged and (getattr(result, lead) > 1e-6 or result.collapsed):
                break
        if result is None:
            raise error
    if not result.converged:
        warnings.warn(f"state evolution did not converge at alpha={alpha}, branch={branch}: "
                      f"residual {result.residual:.2e} > tol={tol:.0e}", ConvergenceWarning, stacklevel=2)
    elif not result.on_branch:
        lead = "theta" if branch == "semantic" else "m"
        warnings.warn(f"the fixed point at alpha={alpha} is not on the {branch} branch ({lead} = "
                      f"{getattr(result, lead):.1e}; on_branch=False)", OffBranchWarning, stacklevel=2)
    if error_estimate:
        fine = solve_state_evolution(params, alpha, branch, init=result.overlaps, quad=quad.refined(), tol=tol,
                                     max_iter=max_iter, pin=pin, minimizer=minimizer)
        keys = ("m", "theta", "qnorm", "eps_g", "eps_t")
        result = replace(result, quadrature_error={k: abs(getattr(fine, k) - getattr(result, k)) for k in keys})
        large = {k: e / abs(getattr(result, k)) for k, e in result.quadrature_error.items()
                 if k in ("qnorm", "eps_g", "eps_t") and e > QUADRATURE_WARN * abs(getattr(result, k))}
        if large:
            warnings.warn("large quadrature error: " + ", ".join(f"{k} {v:.1%}" for k, v in large.items())
                          + f" (> {QUADRATURE_WARN:.0%}) at alpha={alpha}, sigma={params.sigma}: use a finer "
                          "Quadrature (e.g. quad.refined())", QuadratureWarning, stacklevel=2)
    return result


def check_se_params(params) -> ModelParams:
    """``params`` if the state evolution is implemented for it, else an error naming
    the parameter: ``TypeError`` for no :class:`~attnlab.params.ModelParams`,
    ``ValueError`` for ``L != 2``, rank ``!= 1``, ``lambda = 0`` or ``sigma >`` :data:`SIGMA_LIMIT`."""
    check_params(params)
    if params.L != 2 or params.r != 1:
        raise ValueError(f"the state evolution is implemented for L = 2 and rank r = 1 (got L={params.L}, r={params.r})")
    if not params.lam > 0:
        raise ValueError(f"the state evolution needs lambda > 0 (got lambda={params.lam}); "
                         "without the ridge the proximal scale V is unbounded")
    if params.sigma > SIGMA_LIMIT:
        raise ValueError(f"sigma must be in (0, {SIGMA_LIMIT:g}] for the state evolution (its quadrature is built for "
                         f"sigma of order one), got {params.sigma!r}")
    return params


def check_quadrature(quad) -> Quadrature:
    """``quad``, or the default :class:`Quadrature` for ``None``; ``TypeError`` naming ``quad`` otherwise."""
    if quad is None:
        return Quadrature()
    if not isinstance(quad, Quadrature):
        raise TypeError(f"quad must be an attnlab.theory.Quadrature (e.g. Quadrature.fast()) or None, got {quad!r}")
    return quad


def _starts(branch, params):
    """Default starting points, tried in turn until one reaches a fixed point on the branch."""
    s2 = params.sigma ** 2
    V = s2 / params.lam
    if branch == "positional":
        return [initial_overlaps(branch, params), Overlaps(q=0.1 * s2, m=0.1, V=0.4 * V, theta=0.0)]
    return [Overlaps(q=0.5 * s2, m=0.0, V=0.4 * V, theta=0.45 * s2), initial_overlaps(branch, params),
            Overlaps(q=0.8 * s2, m=0.0, V=1.0, theta=0.7 * s2)]


def _pinned(branch, params, pin, start):
    """Start with the branch's pinned overlap set to zero, the free coordinates and the symmetry
    of the pinned problem (positional: ``theta = 0``; semantic: ``m = 0`` if ``A_11 = A_22``).
    Set from the pins, not read off the overlaps: a start or probe with both
    ``m`` and ``theta`` zero must not declare both expectations odd."""
    swap = bool(params.A_array[0, 0] == params.A_array[1, 1])
    if pin and branch == "positional":
        return replace(start, theta=0.0), (0, 1, 2), Symmetry(True, swap, ("f_eta",))
    if pin and swap:
        return replace(start, m=0.0), (0, 2, 3), Symmetry(True, swap, ("f_s",))
    return start, (0, 1, 2, 3), Symmetry(False, swap, ())


def _solve(params, alpha, branch, start, warm, quad, tol, max_iter, pin, jacobian=None,
           minimizer="global") -> SEResult:
    """One solve from ``start`` (``warm``: a nearby fixed point, polish it directly,
    from ``jacobian`` if given). With the followed minimiser the coarse stage uses
    :meth:`QMCRule.fast` and the final stage ``quad.qmc``."""
    start, free, sym = _pinned(branch, params, pin, start)
    fixed_point_map = lambda q, fine: _FixedPointMap(params, alpha, q, fine, sym, minimizer, branch)
    coarse = _Residual(fixed_point_map(quad, False), free, start)
    final = coarse
    stages = []
    x = J = None
    if jacobian is not None and np.shape(jacobian) != (len(free), len(free)):
        jacobian = None
    if quad.method == "split" or minimizer == "followed":
        final = _Residual(fixed_point_map(quad, True), free, start)
        stages = [final]
        if minimizer == "global" and quad.split != SplitRule.fast():
            # first the cheap split rule: the final one then needs few steps
            stages.insert(0, _Residual(fixed_point_map(replace(quad, split=SplitRule.fast()), True), free, start))
        cheap_qmc = Quadrature.fast().qmc
        if minimizer == "followed" and warm and quad.qmc.points > cheap_qmc.points:
            # a warm start skips the coarse stage: a cheap point set first, then few final steps
            stages.insert(0, _Residual(fixed_point_map(replace(quad, qmc=cheap_qmc), True), free, start))
        if warm:
            # a warm start (e.g. a fixed point at a neighbouring alpha) is usually
            # closer to the fine fixed point than the coarse rule's fixed point is
            x, J = _polish(stages, coarse, coarse.pack(start), tol, give_up=True, J=jacobian)
    try:
        if x is None:
            # the split rule's fixed point is ~1e-2 from the coarse one: solve the coarse rule to 1e-4 only
            coarse_tol = (1e-3 if minimizer == "followed" else max(tol, 1e-4)) if stages else tol
            x = _solve_coarse(coarse, coarse.pack(start), coarse_tol, max_iter)
            if stages:
                x, J = _polish(stages, coarse, x, tol)
        r = final(x)
    except (FloatingPointError, np.linalg.LinAlgError, StateEvolutionError) as exc:  # e.g. a singular Jacobian
        collapsed = _collapsed(params, alpha, branch, quad, tol, minimizer)
        if collapsed is not None:
            return collapsed
        if isinstance(exc, StateEvolutionError):
            raise
        raise StateEvolutionError(f"state evolution failed at alpha={alpha}, sigma={params.sigma}, lambda={params.lam}, "
                                  f"omega={params.omega}: {exc}") from None
    res = float(np.abs(r).max())
    ov = final.unpack(x)
    if ov.m < 0 or ov.theta < 0:
        # the result is reported sign-fixed (m, theta >= 0): its residual is checked there
        # (the followed minimiser's map is not symmetric under Q -> -Q: its descent starts
        # from the branch's init)
        res = max(res, float(np.abs(final(final.pack(replace(ov, m=abs(ov.m), theta=abs(ov.theta))))).max()))
    converged = res <= tol
    if not converged:
        collapsed = _collapsed(params, alpha, branch, quad, tol, minimizer)
        if collapsed is not None:
            return collapsed
    hats, EM = final.G.hats(ov)
    s2 = params.sigma ** 2
    result = SEResult(alpha=alpha, branch=branch, params=params,
                      overlaps=replace(ov, m=abs(ov.m), theta=abs(ov.theta)), hats=hats,
                      m=abs(ov.m), theta=abs(ov.theta) / s2, qnorm=ov.q / s2,
                      eps_g=generalization_error(ov, params, quad), eps_t=-free_entropy(ov, hats, EM, params, alpha),
                      iterations=coarse.G.calls + sum(f.G.calls for f in stages if f is not coarse),
                      residual=res, converged=converged, quadrature=quad, minimizer=minimizer,
                      on_branch=(abs(ov.theta) / s2 if branch == "semantic" else abs(ov.m)) > ON_BRANCH_MIN,
                      jacobian=None if J is None else _sign_fixed(J, ov, free))
    return result


def _sign_fixed(J, ov, free):
    """The Jacobian in the coordinates of the sign-fixed overlaps (``m, theta >= 0``;
    the map is symmetric under ``Q -> -Q``, which flips the ``m`` and ``theta`` coordinates)."""
    s = np.array([1.0, -1.0 if ov.m < 0 else 1.0, 1.0, -1.0 if ov.theta < 0 else 1.0])[list(free)]
    return s[:, None] * J * s[None, :]


def _collapsed(params, alpha, branch, quad, tol, minimizer, scale=1e-6):
    """The trivial fixed point ``Q = 0`` (uniform attention) if it attracts the iteration, else ``None``.

    ``Q = 0`` is a fixed point whenever ``h = 0`` is the global proximal point
    of ``w = 0`` (strong regularisation, small ``sigma``); it cannot be reached
    in the solver's coordinates (``log q -> -inf``). At ``Q = 0`` only ``V``
    is free: ``V = sigma^2 / (lambda + sigma^2 Vhat(V))`` is iterated to its fixed point with ``q``
    at ``scale^2 sigma^2``; the point attracts if one map step shrinks ``q``,
    ``|m|`` and ``|theta|`` (started at ``scale`` times their natural sizes).
    Then ``eps_g = eps_g(Q = 0)`` and ``eps_t = alpha E[l(0, T)]``.
    """
    s2 = params.sigma ** 2
    tiny = Overlaps(q=scale ** 2 * s2, m=0.0, V=s2 / params.lam, theta=0.0)
    G = _FixedPointMap(params, alpha, replace(quad, method="gauss-hermite"), False, _pinned(branch, params, True, tiny)[2])
    try:
        logV = float(scipy.optimize.fixed_point(lambda lv: np.log(G(replace(tiny, V=float(np.exp(lv)))).V),
                                                np.log(tiny.V), xtol=1e-12, maxiter=100))
        at = replace(tiny, V=float(np.exp(logV)))
        probe = replace(at, m=0.1 * scale if branch == "positional" else 0.0,
                        theta=0.5 * scale * s2 if branch == "semantic" else 0.0)
        step = G(probe)
    except (RuntimeError, ValueError, FloatingPointError):
        return None
    if not (step.q < probe.q and abs(step.m) <= abs(probe.m) and abs(step.theta) <= abs(probe.theta)):
        return None
    zero = replace(at, q=0.0)
    hats = Hats(qhat=0.0, mhat=0.0, Vhat=(s2 / at.V - params.lam) / s2, thetahat=0.0)
    eps_g = generalization_error(replace(at, q=1e-300), params, quad)
    return SEResult(alpha=alpha, branch=branch, params=params, overlaps=zero, hats=hats, m=0.0, theta=0.0, qnorm=0.0,
                    eps_g=eps_g, eps_t=alpha * eps_g, iterations=G.calls, residual=0.0, converged=True,
                    quadrature=quad, minimizer=minimizer, collapsed=True)


def _solve_coarse(f, x0, tol, max_iter):
    """Hybrid Powell from ``x0``; if it fails, a damped iteration (damping 0.8)
    into the basin of a fixed point, then hybrid Powell again from there."""
    def hybr(x, budget):
        try:
            with np.errstate(all="ignore"):
                sol = scipy.optimize.root(f, x, method="hybr", options=dict(xtol=tol * 1e-2, maxfev=max(budget, 1)))
        except FloatingPointError:
            return None
        ok = np.all(np.isfinite(sol.x)) and np.abs(sol.fun).max() <= tol
        return sol.x if ok else None

    x = hybr(x0, max_iter // 3)
    if x is not None:
        return x
    x = x0.copy()
    try:
        for _ in range(max(0, max_iter - f.G.calls)):
            r = f(x)
            if np.abs(r).max() <= tol:
                return x
            if np.abs(r).max() <= 1e-3 and f.G.calls < max_iter - 10:
                polished = hybr(x, max_iter - f.G.calls)
                if polished is not None:
                    return polished
            x = x + 0.2 * r
    except FloatingPointError as exc:
        p = f.G.params
        raise StateEvolutionError(
            f"state evolution failed at alpha={f.G.alpha}, sigma={p.sigma}, lambda={p.lam}, omega={p.omega}: "
            f"{exc}; try another initial point (init=) or a neighbouring alpha") from None
    return x


def _jacobian(f, x, step=None):
    step = f.fd_step if step is None else step
    r0 = f(x)
    J = np.empty((x.size, x.size))
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = step * max(1.0, abs(x[j]))
        J[:, j] = (f(x + e) - r0) / e[j]
    return J


def _polish(stages, coarse, x, tol, max_steps=12, give_up=False, stage_tol=1e-4, J=None):
    """Broyden's method on the split-rule residuals ``stages`` (a cheap
    preliminary rule, then the final rule), started from ``J`` (e.g. the
    Jacobian a neighbouring solve ended with) or else from the finite-difference
    Jacobian of the coarse residual. Before the final stage ``J`` is replaced by
    the finite-difference Jacobian of the cheap rule at its fixed point (it
    differs from the final rule's by 1-25% where Broyden's carried matrix was off
    by up to 250%: 3-4 instead of 4-6 final evaluations). Every stage but the
    last stops at ``max(stage_tol, tol)``.

    Returns ``(x, J)``; with ``give_up=True`` ``(None, None)`` instead of a point whose
    residual did not fall below ``tol`` within ``max_steps`` or that left the domain."""
    try:
        J = _jacobian(coarse, x) if J is None else np.array(J, dtype=float)
        for k, f in enumerate(stages):
            goal = tol if k == len(stages) - 1 else max(stage_tol, tol)
            if k == len(stages) - 1 and len(stages) > 1:
                J = _jacobian(stages[k - 1], x)
            r = f(x)
            for _ in range(max_steps):
                if np.abs(r).max() <= goal:
                    break
                dx = -np.linalg.solve(J, r)
                x = x + dx
                r_new = f(x)
                J = J + np.outer(r_new - r - J @ dx, dx) / (dx @ dx)
                r = r_new
    except (FloatingPointError, np.linalg.LinAlgError):
        if give_up:
            return None, None
        raise
    if give_up and not np.abs(r).max() <= tol:
        return None, None
    return x, J
