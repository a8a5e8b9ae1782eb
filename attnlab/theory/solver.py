"""The iterator: a fixed point of the state evolution from one starting point -> :class:`SEResult`.

Source: Cui et al. 2024 (arXiv:2402.03902), Result 4.2 (the fixed-point
equations, :mod:`attnlab.theory.equations`). Which starting points are tried,
and what happens when one fails, is :mod:`attnlab.theory.branches`.

The fixed point ``x = G(x)`` of overlaps ``x = (q, m, V, theta)`` is found in the
unconstrained coordinates ``(log q, m, log V, atanh(theta / sqrt(q rho)))``, in two stages:

1. *coarse*: MINPACK's hybrid Powell method (``scipy.optimize.root``) on the
   residual ``G(x) - x`` with the coarse rule (tensor Gauss-Hermite for the global
   minimiser, :meth:`~attnlab.theory.quadrature.QMCRule.fast` points for the
   followed one), to 1e-4 (1e-3) when a fine stage follows; if it fails, a
   damped iteration (damping 0.8) into a basin, then hybrid Powell again;
2. *fine*: Broyden steps ``x <- x - J^{-1} r(x)`` on the residual of the final
   rule (the split rule of :mod:`attnlab.theory.split_rule`, or ``quad.qmc``),
   after a stage with the cheap rule (:meth:`~attnlab.theory.quadrature.SplitRule.fast`)
   to a residual of 1e-4, ``J`` started from the finite-difference Jacobian of the
   coarse residual and renewed from that of the cheap rule before the final
   stage: the final rule is evaluated 3-4 times. A warm start goes to this stage
   directly, from the Jacobian of a neighbouring solve if one is given.

A continuation step of the followed minimiser (a warm start from a converged
neighbour with the same rule, e.g. the previous ``alpha`` of a curve) first tries
Broyden's method on the final rule alone, from the neighbour's fixed point
``x0``: the channel moments do not depend on ``alpha`` and the conjugates are
``alpha`` times them, so the residual at ``x0`` is known without an evaluation
(the neighbour's conjugates times ``alpha / alpha0``) and the neighbour's Jacobian
(scaled likewise) gives a Newton step, then Broyden steps: usually one or two
evaluations of the final rule in all (at most :data:`WARM_STEPS` before the staged path
above; a point accepted on the known residual alone is checked by one evaluation).

Convergence is judged on the undamped residual of the rule that produced the
result, at the reported (sign-fixed: ``m, theta >= 0``) overlaps. Where the
iteration leaves the domain and the trivial fixed point ``Q = 0`` (uniform
attention) attracts the map, that point is returned with ``collapsed=True``.
Symmetry pins the branch (:func:`pinning`): on the positional branch
``theta = 0`` exactly; on the semantic branch ``m = 0`` when ``A`` is symmetric
under swapping the two positions; the pins also fix the folded node set.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import scipy.optimize

from ..params import DEFAULT_MINIMIZER, ModelParams
from .equations import Hats, Overlaps, StateEvolution, generalization_error  # noqa: F401
from .quadrature import Quadrature, Symmetry

__all__ = ["ConvergenceWarning", "QuadratureWarning", "StateEvolutionError", "ON_BRANCH_MIN", "WARM_STEPS",
           "leading_overlap", "SEResult", "pinning", "Residual", "fixed_point"]


class ConvergenceWarning(RuntimeWarning):
    """The state-evolution iteration did not reach its tolerance."""


class QuadratureWarning(RuntimeWarning):
    """The quadrature error estimate (``error_estimate=True``) is large: more than
    :data:`~attnlab.theory.branches.QUADRATURE_WARN` of a value."""


class StateEvolutionError(RuntimeError):
    """The fixed-point iteration left the domain of the equations (e.g.
    ``lambda + sigma^2 Vhat <= 0`` or a non-finite update) and could not recover."""


#: A fixed point is on its branch if its leading overlap (:func:`leading_overlap`)
#: exceeds this (or it is the collapsed ``Q = 0``, flagged by ``collapsed``).
ON_BRANCH_MIN = 1e-6


def leading_overlap(branch: str) -> str:
    """The observable that is non-zero on ``branch``: ``"m"`` (positional) or ``"theta"`` (semantic)."""
    return "theta" if branch == "semantic" else "m"


class _WhenRead:
    """The field ``eps_g`` of :class:`SEResult`: a value given to the constructor, or (``None``,
    the default) :func:`~attnlab.theory.equations.generalization_error` at the result's overlaps,
    computed when first read and then kept."""

    def __set_name__(self, owner, name):
        self.slot = "_" + name

    def __get__(self, result, owner=None):
        if result is None:
            return None  # the dataclass default: compute when read
        value = result.__dict__.get(self.slot)
        if value is None:
            value = generalization_error(result.overlaps, result.params, result.quadrature)
            result.__dict__[self.slot] = value
        return value

    def __set__(self, result, value):
        result.__dict__[self.slot] = None if value is None else float(value)


@dataclass(frozen=True)
class SEResult:
    """A state-evolution fixed point and its observables.

    Attributes
    ----------
    alpha : float
    branch : str
        ``"semantic"`` or ``"positional"``.
    overlaps : Overlaps
        SE variables ``q = sigma^2 |Q|^2/d``, ``m = 1.Q/d``, ``V``,
        ``theta = sigma^2 Q.Q*/d`` (sign-fixed: ``m >= 0``, ``theta >= 0``).
    hats : Hats
        Conjugates ``qhat, mhat, Vhat, thetahat`` at ``overlaps``.
    m, theta, qnorm : float
        User-facing observables as reported by the trainers: ``|m|``,
        ``theta = Q*.Q/d = |theta_SE| / sigma^2`` and ``qnorm = |Q|^2/d = q / sigma^2``.
    eps_g : float
        Generalization error ``(sigma^2/2) E ||S(h) - T(h*)||_F^2``, at ``overlaps`` with
        ``quadrature``'s rule: computed when first read, unless given (a threshold search
        reads it at a few of its fixed points only).
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
        iteration there (e.g. strong regularisation or small ``sigma``): the
        branch does not exist there (``on_branch=False``, ``minimum=False``).
    on_branch : bool
        The leading overlap of ``branch`` (``m`` positional, ``theta``
        semantic) is above :data:`ON_BRANCH_MIN`. ``False``: the iteration reached
        a fixed point off the requested branch (e.g. ``m = theta = 0`` at very small
        ``alpha``), the collapsed ``Q = 0``, or none (NaN observables).
    stability : float
        ``lambda_p``, the eigenvalue of the unpinned map's Jacobian in the pinned direction
        (``m`` semantic, ``theta`` positional; :func:`~attnlab.theory.stability.pinned_eigenvalue`),
        computed when first read (two evaluations of the map). Below 1 the fixed point is a
        minimum along the pinned overlap; above 1 gradient descent leaves along it. NaN where
        there is nothing to probe (collapsed, not converged, or not pinned).
    stable : bool or None
        ``stability < 1``; ``None`` where ``stability`` is NaN.
    stability_held : float
        ``lambda_p`` by the other probe, ``basins="held"`` (each sample's proximal point kept in
        its basin; :func:`~attnlab.theory.stability.pinned_eigenvalue`), computed when first read
        (three descents over the quasi-Monte Carlo points, ~0.1 s); NaN where ``stability`` is.
    probes_agree : bool or None
        Both probes put the fixed point on the same side of 1. ``False``: the state evolution
        cannot tell whether the point is a minimum of its branch (it lies between the two probes'
        spinodals; book Chapter 6, "How sure is a spinodal?"): ``minimum`` is ``None`` and
        ``status`` ``"undecided"`` there (``stable`` is the default probe's). ``None`` where
        either is NaN.
    minimum : bool or None
        The fixed point is a minimum of the branch it claims: converged, on the branch (not
        collapsed) and stable by both probes (or by the default one where the held one has
        nothing to probe); ``None`` where the probes disagree (``probes_agree`` is ``False``).
    status : str
        ``"minimum"``, ``"unstable"`` (a saddle: the risk curves down along the pinned overlap, by
        the default probe and by the held one where it has something to probe), ``"undecided"``
        (the probes disagree), ``"collapsed"`` (only ``Q = 0``), ``"off-branch"`` or
        ``"not converged"``.
    jacobian : ndarray, shape (k, k), or None
        Broyden's approximation of the Jacobian of the residual ``G(x) - x`` at the
        fixed point, in the solver's coordinates of the ``k`` free overlaps;
        passing this result as ``init`` lets a neighbouring solve start from it.
    """

    alpha: float
    branch: str
    params: ModelParams
    overlaps: Overlaps
    hats: Hats
    m: float
    theta: float
    qnorm: float
    eps_t: float
    iterations: int
    residual: float
    converged: bool
    quadrature: Quadrature
    quadrature_error: dict | None = field(default=None)
    minimizer: str = DEFAULT_MINIMIZER
    collapsed: bool = False
    on_branch: bool = True
    jacobian: np.ndarray | None = field(default=None, repr=False, compare=False)
    eps_g: float = _WhenRead()

    @cached_property
    def stability(self) -> float:
        """``lambda_p`` (see the class docstring), computed when first read."""
        if not (self.converged and self.on_branch):
            return float("nan")
        from .stability import pinned_eigenvalue
        return pinned_eigenvalue(self)

    @property
    def stable(self) -> bool | None:
        """``stability < 1``, or ``None`` where it is NaN."""
        from .stability import STABLE_BELOW
        return None if np.isnan(self.stability) else bool(self.stability < STABLE_BELOW)

    @cached_property
    def stability_held(self) -> float:
        """``lambda_p`` with ``basins="held"`` (see the class docstring), computed when first read."""
        if np.isnan(self.stability):
            return float("nan")
        from .stability import pinned_eigenvalue
        return pinned_eigenvalue(self, basins="held")

    @property
    def probes_agree(self) -> bool | None:
        """Both probes on the same side of 1 (see the class docstring); ``None`` where either is NaN."""
        from .stability import STABLE_BELOW
        if np.isnan(self.stability) or np.isnan(self.stability_held):
            return None
        return bool((self.stability < STABLE_BELOW) == (self.stability_held < STABLE_BELOW))

    @property
    def minimum(self) -> bool | None:
        """A minimum of the branch it claims: converged, on the branch, stable; ``None`` where the
        two probes disagree."""
        if not (self.converged and self.on_branch and not self.collapsed):
            return False
        if self.probes_agree is False:
            return None
        return self.stable is not False

    @property
    def status(self) -> str:
        """``"minimum"``, ``"unstable"``, ``"undecided"``, ``"collapsed"``, ``"off-branch"`` or
        ``"not converged"``."""
        if not self.converged:
            return "not converged"
        if self.collapsed:
            return "collapsed"
        if not self.on_branch:
            return "off-branch"
        if self.probes_agree is False:
            return "undecided"
        return "unstable" if self.stable is False else "minimum"

    def to_dict(self) -> dict:
        """JSON-serialisable summary (SE ``q, V`` plus the user-facing observables, and whether
        the point is a minimum of its branch: ``stability``, ``stable``, ``minimum``, ``status``, and
        by the other probe: ``stability_held``, ``probes_agree``)."""
        stability, held = self.stability, self.stability_held
        return dict(alpha=self.alpha, branch=self.branch, q=self.overlaps.q, m=self.m, V=self.overlaps.V,
                    theta=self.theta, qnorm=self.qnorm, eps_g=self.eps_g, eps_t=self.eps_t,
                    converged=self.converged, iterations=self.iterations, residual=self.residual,
                    qhat=self.hats.qhat, mhat=self.hats.mhat, Vhat=self.hats.Vhat, thetahat=self.hats.thetahat,
                    quadrature_error=self.quadrature_error, minimizer=self.minimizer, collapsed=self.collapsed,
                    on_branch=self.on_branch, stability=None if np.isnan(stability) else stability,
                    stable=self.stable, minimum=self.minimum, status=self.status,
                    stability_held=None if np.isnan(held) else held, probes_agree=self.probes_agree)

    @classmethod
    def failed(cls, params: ModelParams, alpha: float, branch: str, quad: Quadrature, minimizer: str) -> "SEResult":
        """Stand-in where no fixed point was found: NaN observables, ``converged=False``,
        ``on_branch=False`` (nothing to continue from)."""
        nan = float("nan")
        return cls(alpha=alpha, branch=branch, params=params, overlaps=Overlaps(nan, nan, nan, nan),
                   hats=Hats(nan, nan, nan, nan), m=nan, theta=nan, qnorm=nan, eps_g=nan, eps_t=nan, iterations=0,
                   residual=nan, converged=False, quadrature=quad, minimizer=minimizer, on_branch=False)


def pinning(branch: str, params: ModelParams, pin: bool, start: Overlaps):
    """The pins of ``branch``: ``start`` with the pinned overlap set to zero, the free
    coordinates (indices into ``(q, m, V, theta)``) and the symmetry of the pinned
    problem (positional: ``theta = 0``; semantic: ``m = 0`` if ``A_11 = A_22``; none
    with ``pin=False``). Set from the pins, not read off the overlaps: a start or
    probe with both ``m`` and ``theta`` zero must not declare both expectations odd.

    Returns
    -------
    start : Overlaps
    free : tuple of int
    symmetry : Symmetry
    """
    swap = bool(params.A_array[0, 0] == params.A_array[1, 1])
    if pin and branch == "positional":
        return replace(start, theta=0.0), (0, 1, 2), Symmetry(True, swap, ("f_eta",))
    if pin and swap:
        return replace(start, m=0.0), (0, 2, 3), Symmetry(True, swap, ("f_s",))
    return start, (0, 1, 2, 3), Symmetry(False, swap, ())


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


class Residual:
    """The residual ``pack(G(unpack(x))) - x`` of a fixed-point map in the solver's coordinates.

    Parameters
    ----------
    G : StateEvolution
    free : tuple of int
        Free coordinates (:func:`pinning`).
    pinned : Overlaps
        Supplies the pinned coordinates.
    """

    def __init__(self, G: StateEvolution, free, pinned: Overlaps):
        self.G, self.free, self.pinned = G, free, pinned
        self.rho = G.params.sigma ** 2
        # finite-difference step of its Jacobian: the followed minimiser's quasi-Monte Carlo
        # map moves in steps of ~1e-5 (nodes changing basin), so it needs a coarser step
        self.fd_step = 1e-3 if G.minimizer == "followed" else 1e-6

    @classmethod
    def of(cls, params: ModelParams, alpha: float, branch: str, quad: Quadrature, start: Overlaps, *,
           fine: bool = True, minimizer: str = "global", pin: bool = True) -> "Residual":
        """The residual of ``branch``'s map (pinned as :func:`pinning`) with ``quad``'s
        final (``fine``) or coarse rule, around ``start``."""
        start, free, sym = pinning(branch, params, pin, start)
        return cls(StateEvolution.of(params, alpha, quad, fine=fine, symmetry=sym, minimizer=minimizer,
                                     branch=branch), free, start)

    def pack(self, ov: Overlaps) -> np.ndarray:
        """The free coordinates of ``ov``."""
        return _pack(ov, self.free, self.rho)

    def unpack(self, x: np.ndarray) -> Overlaps:
        """Overlaps from free coordinates (the pinned ones from ``pinned``)."""
        return _unpack(x, self.free, self.pinned, self.rho)

    def __call__(self, x):
        with np.errstate(over="raise", invalid="raise"):
            ov = self.unpack(x)
        with np.errstate(divide="ignore", invalid="ignore"):  # q = 0 (a collapse) is caught just below
            return _finite(self.pack(self.G(ov)) - x)

    def from_hats(self, x, hats: Hats):
        """The residual at ``x`` given the conjugates there (the prior update of the map only)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return _finite(self.pack(self.G.prior.update(hats)) - x)


def _finite(r):
    if not np.all(np.isfinite(r)):
        raise FloatingPointError("state evolution produced a non-finite update")
    return r


def fixed_point(params: ModelParams, alpha: float, branch: str, start: Overlaps, *, warm: bool, quad: Quadrature,
                tol: float, max_iter: int, pin: bool, minimizer: str, jacobian=None, anchor=None) -> SEResult:
    """One solve from ``start`` (validated arguments; see :func:`~attnlab.theory.solve_state_evolution`).

    Parameters
    ----------
    warm : bool
        ``start`` is a nearby fixed point: go to the fine stage directly (from
        ``jacobian``, if given and of the right shape), and to the coarse stage only
        if that does not reach ``tol``.
    anchor : tuple (float, Hats), optional
        Followed minimiser only, with a warm ``start`` and ``jacobian``: ``(alpha0, hats0)``, the ``alpha`` of
        the fixed point ``start`` and its conjugates. The channel moments do not depend
        on ``alpha`` (the hats are ``alpha`` times them), so the final rule's residual at
        ``start`` is known without evaluating it; a Newton step from there is tried
        first (:data:`WARM_STEPS` evaluations of the final rule at most).

    Returns
    -------
    SEResult
        Possibly ``converged=False``, or ``collapsed=True``.

    Raises
    ------
    StateEvolutionError
        If the iteration left the domain of the equations and ``Q = 0`` does not attract it.
    """
    start, free, sym = pinning(branch, params, pin, start)
    fixed_point_map = lambda q, fine: StateEvolution.of(params, alpha, q, fine=fine, symmetry=sym,
                                                        minimizer=minimizer, branch=branch)
    coarse = Residual(fixed_point_map(quad, False), free, start)
    final = coarse
    stages = []
    x = J = None
    if jacobian is not None and np.shape(jacobian) != (len(free), len(free)):
        jacobian = None
    if quad.method == "split" or minimizer == "followed":
        final = Residual(fixed_point_map(quad, True), free, start)
        stages = [final]
        cheap = quad.cheap()
        # first the cheap split rule (and, skipping the coarse stage after a warm start, the
        # cheap point set): the final rule then needs few steps
        if (quad.split != cheap.split if minimizer == "global" else warm and quad.qmc.points > cheap.qmc.points):
            stages.insert(0, Residual(fixed_point_map(cheap, True), free, start))
        if warm and anchor is not None and jacobian is not None and minimizer == "followed":
            x, J = _continue_from(final, coarse, start, anchor, alpha, jacobian, tol)
            if x is not None and not np.abs(final(x)).max() <= tol:  # (free: the map is cached at x)
                x = J = None  # the known residual was not the map's (e.g. an edited init): the staged path
        if warm and x is None:
            # a warm start (e.g. a fixed point at a neighbouring alpha) is usually
            # closer to the fine fixed point than the coarse rule's fixed point is
            x, J = _polish(stages, coarse, coarse.pack(start), tol, give_up=True, J=jacobian)
    try:
        if x is None:
            # the fine rule's fixed point is ~1e-2 from the coarse one: solve the coarse rule to 1e-4 only
            coarse_tol = (1e-3 if minimizer == "followed" else max(tol, 1e-4)) if stages else tol
            x = _solve_coarse(coarse, coarse.pack(start), coarse_tol, max_iter)
            if stages:
                x, J = _polish(stages, coarse, x, tol)
        res = float(np.abs(final(x)).max())
        ov = final.unpack(x)
        fixed = replace(ov, m=abs(ov.m), theta=abs(ov.theta))
        if ov.m < 0 or ov.theta < 0:
            # the result is reported sign-fixed (m, theta >= 0): its residual is checked there
            # (the followed minimiser's map is not symmetric under Q -> -Q: its descent starts
            # from the branch's init), and its conjugates and errors are taken there
            res = max(res, float(np.abs(final(final.pack(fixed))).max()))
        hats, _ = final.G.hats(fixed)
        eps_t = -final.G.free_entropy(fixed)
    except (FloatingPointError, np.linalg.LinAlgError, StateEvolutionError) as exc:  # e.g. a singular Jacobian
        collapsed = _collapsed(params, alpha, branch, quad, minimizer)
        if collapsed is not None:
            return collapsed
        if isinstance(exc, StateEvolutionError):
            raise
        raise StateEvolutionError(f"state evolution failed at alpha={alpha}, sigma={params.sigma}, lambda={params.lam}, "
                                  f"omega={params.omega}: {exc}") from None
    converged = res <= tol
    if not converged:
        collapsed = _collapsed(params, alpha, branch, quad, minimizer)
        if collapsed is not None:
            return collapsed
    s2 = params.sigma ** 2
    return SEResult(alpha=alpha, branch=branch, params=params, overlaps=fixed, hats=hats,
                    m=fixed.m, theta=fixed.theta / s2, qnorm=fixed.q / s2, eps_t=eps_t,
                    iterations=coarse.G.calls + sum(f.G.calls for f in stages if f is not coarse),
                    residual=res, converged=converged, quadrature=quad, minimizer=minimizer,
                    on_branch=(abs(ov.theta) / s2 if branch == "semantic" else abs(ov.m)) > ON_BRANCH_MIN,
                    jacobian=None if J is None else _sign_fixed(J, ov, free))


def _sign_fixed(J, ov, free):
    """The Jacobian in the coordinates of the sign-fixed overlaps (``m, theta >= 0``): the
    ``m`` and ``theta`` coordinates flipped. Exact where the map is symmetric under ``Q -> -Q``
    (the global minimiser); for the followed one (not symmetric) a starting matrix for Broyden."""
    s = np.array([1.0, -1.0 if ov.m < 0 else 1.0, 1.0, -1.0 if ov.theta < 0 else 1.0])[list(free)]
    return s[:, None] * J * s[None, :]


def _collapsed(params, alpha, branch, quad, minimizer, scale=1e-6):
    """The trivial fixed point ``Q = 0`` (uniform attention) if it attracts the iteration, else ``None``.

    ``Q = 0`` is a fixed point whenever ``h = 0`` is the global proximal point
    of ``w = 0`` (strong regularisation, small ``sigma``); it cannot be reached
    in the solver's coordinates (``log q -> -inf``). At ``Q = 0`` only ``V``
    is free: ``V = sigma^2 / (lambda + sigma^2 Vhat(V))`` is iterated to its fixed point with ``q``
    at ``scale^2 sigma^2`` (tensor Gauss-Hermite); the point attracts if one map step
    shrinks ``q``, ``|m|`` and ``|theta|`` (started at ``scale`` times their natural sizes).
    Then ``eps_g = eps_g(Q = 0)`` and ``eps_t = alpha E[l(0, T)]``.
    """
    s2 = params.sigma ** 2
    tiny = Overlaps(q=scale ** 2 * s2, m=0.0, V=s2 / params.lam, theta=0.0)
    G = StateEvolution.of(params, alpha, replace(quad, method="gauss-hermite"), fine=False,
                          symmetry=pinning(branch, params, True, tiny)[2])
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
                    quadrature=quad, minimizer=minimizer, collapsed=True, on_branch=False)


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
    """Forward-difference Jacobian of the residual ``f`` at ``x`` (relative step ``f.fd_step``)."""
    step = f.fd_step if step is None else step
    r0 = f(x)
    J = np.empty((x.size, x.size))
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = step * max(1.0, abs(x[j]))
        J[:, j] = (f(x + e) - r0) / e[j]
    return J


#: Evaluations of the final rule that a continuation step from an anchor (:func:`fixed_point`)
#: may take before the staged path is tried.
WARM_STEPS = 5


def _continue_from(final, coarse, start, anchor, alpha, J, tol):
    """Broyden's method on ``final`` from the neighbouring fixed point ``start`` at
    ``anchor = (alpha0, hats0)``: its residual at ``alpha`` is that of the conjugates
    ``hats0 * alpha / alpha0``. Returns ``(x, J)``, or ``(None, None)`` as :func:`_polish`."""
    alpha0, hats0 = anchor
    scale = alpha / alpha0
    x0 = final.pack(start)
    try:
        r0 = final.from_hats(x0, Hats(*(scale * h for h in (hats0.qhat, hats0.mhat, hats0.Vhat, hats0.thetahat))))
    except FloatingPointError:
        return None, None
    # G = P(alpha h(x)): at fixed P' the Jacobian of G scales with alpha
    J = scale * (np.asarray(J) + np.eye(len(x0))) - np.eye(len(x0))
    return _polish([final], coarse, x0, tol, max_steps=WARM_STEPS, give_up=True, J=J, r0=r0)


def _polish(stages, coarse, x, tol, max_steps=12, give_up=False, stage_tol=1e-4, J=None, r0=None):
    """Broyden's method on the fine residuals ``stages`` (a cheap preliminary rule,
    then the final rule), started from ``J`` (e.g. the Jacobian a neighbouring solve
    ended with) or else from the finite-difference Jacobian of the coarse residual.
    Before the final stage ``J`` is replaced by the finite-difference Jacobian of the
    cheap rule at its fixed point (closer to the final rule's than Broyden's carried
    matrix). Every stage but the last stops at ``max(stage_tol, tol)``. ``r0``: the first
    stage's residual at ``x``, if known.

    Returns ``(x, J)``; with ``give_up=True`` ``(None, None)`` instead of a point whose
    residual did not fall below ``tol`` within ``max_steps`` or that left the domain."""
    try:
        J = _jacobian(coarse, x) if J is None else np.array(J, dtype=float)
        for k, f in enumerate(stages):
            goal = tol if k == len(stages) - 1 else max(stage_tol, tol)
            if k == len(stages) - 1 and len(stages) > 1:
                J = _jacobian(stages[k - 1], x)
            r = r0 if k == 0 and r0 is not None else f(x)
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
