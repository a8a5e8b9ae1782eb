"""Fixed points on a branch: where the solver starts, and what it does when a start fails.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 4 (the two branches:
positional ``theta = 0``, semantic ``m = 0``) and Result 4.2.

One policy, used by :func:`solve_state_evolution`, by the curves and thresholds
(:class:`BranchFollower`, :mod:`attnlab.theory.thresholds`) and by the sliders
(:func:`attnlab.widgets.solve_both_branches`, through :func:`solve_on_branch`):

* the attempts, in order: a warm start from a nearby fixed point (if there is
  one), the default starting points of the branch (:func:`start_points`), then
  the same with a fallback rule (if one is given);
* the first attempt that reaches a fixed point *on the branch* is kept:
  converged, with the branch's leading overlap (``m`` or ``theta``) above
  :data:`~attnlab.theory.solver.ON_BRANCH_MIN`, or the collapsed ``Q = 0`` where
  that attracts the iteration (not from a warm start: a collapse there is tried
  again from the default starts). If none is kept: the warm start's result if it
  converged (the branch continued to where it ends), else the last converged
  result, else the last result, flagged by ``converged`` and ``on_branch``. An attempt
  that raises :class:`~attnlab.theory.solver.StateEvolutionError` is skipped; if
  all do, the last error is raised;
* warm starts come only from results that can be continued from
  (:func:`continuable`: on the branch and not collapsed);
* a cold :func:`solve_state_evolution` of the semantic branch whose default starts all
  end off the branch (the trivial ``theta = 0`` point also attracts the iteration
  where the branch exists, e.g. the global minimiser at ``alpha = 0.8``, omega 0.3)
  follows the branch down from :data:`FROM_ABOVE` times ``alpha``, where it is the
  attractor, in steps of about 5% (:func:`from_above`), as a curve does.
"""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np

from ..params import (BRANCHES, DEFAULT_MINIMIZER, DEFAULT_TOL, MINIMIZERS, ModelParams, check_choice, check_in_range,
                      check_int, check_tolerance)
from .channel import in_domain
from .equations import (ALPHA_LIMIT, Overlaps, Quadrature, check_quadrature,
                        check_se_params)
from .followed_rule import followed_tolerance
from .solver import ConvergenceWarning, QuadratureWarning, SEResult, StateEvolutionError, fixed_point, leading_overlap

__all__ = ["OffBranchWarning", "QUADRATURE_WARN", "SAME_RULE_SPAN", "FROM_ABOVE", "initial_overlaps", "start_points",
           "continuable", "solve_state_evolution", "solve_on_branch", "from_above", "BranchFollower",
           "solve_side_by_side"]

#: Relative quadrature error (of ``eps_g``, ``eps_t``, ``qnorm``) above which
#: ``error_estimate=True`` warns.
QUADRATURE_WARN = 0.01
#: Where a cold solve of the semantic branch finds it only from above: the branch is
#: followed down from ``FROM_ABOVE * alpha`` (:func:`from_above`).
FROM_ABOVE = 1.5


class OffBranchWarning(ConvergenceWarning):
    """The fixed point found is not on the requested branch (its leading overlap,
    ``m`` on the positional branch, ``theta`` on the semantic one, is zero): the
    result has ``on_branch=False``."""


def initial_overlaps(branch: str, params: ModelParams) -> Overlaps:
    """Starting overlaps near a branch: positional ``m = 0.3, theta = 0``; semantic ``theta = 0.7 rho, m = 0``;
    ``V = sigma^2 / lambda`` (its small-``alpha`` limit) on both."""
    check_choice("branch", branch, BRANCHES)
    s2 = params.sigma ** 2
    if branch == "positional":
        return Overlaps(q=0.1 * s2, m=0.3, V=s2 / params.lam if params.lam > 0 else 1.0, theta=0.0)
    return Overlaps(q=s2 * 0.8, m=0.0, V=s2 / params.lam if params.lam > 0 else 1.0, theta=0.7 * s2)


def start_points(branch: str, params: ModelParams) -> list[Overlaps]:
    """The default starting points of ``branch``, tried in turn (:func:`solve_state_evolution`)."""
    s2 = params.sigma ** 2
    V = s2 / params.lam
    if branch == "positional":
        return [initial_overlaps(branch, params), Overlaps(q=0.1 * s2, m=0.1, V=0.4 * V, theta=0.0)]
    return [Overlaps(q=0.5 * s2, m=0.0, V=0.4 * V, theta=0.45 * s2), initial_overlaps(branch, params),
            Overlaps(q=0.8 * s2, m=0.0, V=1.0, theta=0.7 * s2)]


def continuable(result) -> bool:
    """A converged fixed point on its branch, not collapsed: one to warm-start from."""
    return bool(result.converged and result.on_branch and not result.collapsed)


def _first_on_branch(attempts, warm=None) -> SEResult:
    """The policy of the module docstring: the ``warm`` attempt (if any), then ``attempts``
    (callables returning an :class:`SEResult`), in order, until one is kept."""
    results, error, warm_result = [], None, None
    for attempt in ([warm] if warm is not None else []) + list(attempts):
        try:
            result = attempt()
        except StateEvolutionError as exc:  # this attempt left the domain: try the next one
            error = exc
            continue
        if attempt is warm:
            warm_result = result
        if result.converged and (result.on_branch or (result.collapsed and attempt is not warm)):
            return result
        results.append(result)
    if not results:
        raise error
    if warm_result is not None and warm_result.converged:
        return warm_result  # the branch continued to where it ends
    return next((r for r in reversed(results) if r.converged), results[-1])


def solve_state_evolution(params: ModelParams, alpha: float, branch: str = "semantic", *,
                          init: "Overlaps | SEResult | None" = None,
                          quad: Quadrature | None = None, tol: float = DEFAULT_TOL, max_iter: int = 300,
                          error_estimate: bool = False, pin: bool = True,
                          minimizer: str | None = None, warn: bool = True, follow: bool = True) -> SEResult:
    """Fixed point of the state evolution on a branch (paper Result 4.2; book Chapter 5).

    Without ``init`` the default starting points (:func:`start_points`) are tried
    in turn until one reaches a fixed point on the branch (or ``Q = 0`` where that
    attracts the iteration: ``collapsed=True``); on the semantic branch, if none
    does (and not every start left the domain), the branch is followed down from
    ``FROM_ABOVE * alpha`` (:func:`from_above`; ``max_iter`` does not apply there).
    With ``init`` that point alone is used (:func:`solve_on_branch` falls back to the
    default starts).

    Parameters
    ----------
    params : ModelParams
        ``sigma``, ``lam``, ``omega``, ``A`` (``L = 2``, rank 1 only).
    alpha : float
        Sample complexity ``n/d`` in ``(0, 1e4]``.
    branch : {"semantic", "positional"}
        Branch to follow (pins ``theta = 0`` or, for symmetric ``A``, ``m = 0``).
    init : Overlaps or SEResult, optional
        Initial SE overlaps (e.g. a warm start from a neighbouring ``alpha``). An
        ``SEResult`` on the same branch with the same parameters also passes its
        ``jacobian`` (no finite differences for the cheap stage). A warm start
        skips the coarse stage: about 10-25% of a cold solve. With the followed
        minimiser, an ``SEResult`` that converged with the same ``quad`` (not collapsed)
        also passes its conjugates: its residual at the new ``alpha`` is then known
        without evaluating the map (:func:`~attnlab.theory.solver.fixed_point`'s ``anchor``),
        and a step along a curve usually takes one or two evaluations.
    quad : Quadrature, optional
        Expectation rule (default ``Quadrature()``).
    tol : float
        Tolerance on the max-norm of the undamped residual, in ``(0, 1e-2]`` (with the followed
        minimiser at least :func:`~attnlab.theory.followed_rule.followed_tolerance`,
        3e-4 with the default points).
    max_iter : int
        Budget of coarse fixed-point-map evaluations (the fine stage takes at most 12).
    error_estimate : bool
        Also solve with ``quad.refined()`` and report the differences.
    pin : bool
        Pin the branch by symmetry (default). With ``pin=False`` all four
        overlaps are free, e.g. to test a branch's stability against the other
        overlap: at ``alpha = 0.8``, ``omega = 0.3`` the followed semantic fixed
        point started with ``m = 0.1`` returns to ``m ~ 1e-3`` (the quasi-Monte
        Carlo floor) and the same ``theta``, so there is no mixed fixed point
        there; gradient descent from ``Q*`` ends near the pure semantic branch,
        its ``|m|`` shrinking as ``d`` grows (book Chapter 5).
    minimizer : {"followed", "global"}, optional
        The per-sample proximal minimiser. ``"global"``: the global minimiser,
        as the replica computation of the global minimum of the risk asks
        (the paper's Result 4.2; split rule). ``"followed"`` (default,
        :data:`~attnlab.params.DEFAULT_MINIMIZER`): the local minimiser
        reached by descent from the preactivations of gradient descent's
        initialisation (semantic: ``h*``, from ``Q0 = Q*``; positional: from
        ``Q0 = 0.5 * 1_d``), which describes the minimum gradient descent reaches
        from that init. On the semantic branch the two differ below ``alpha ~ 1.1``
        (omega = 0.3), on the positional one at small ``omega``; there only the
        followed one agrees with large-``d`` gradient descent (book Chapter 5).
        Its expectations are taken by randomised quasi-Monte Carlo (``quad.qmc``).
    warn : bool
        Issue the warnings below (``False``: the result's ``converged`` and
        ``on_branch`` say it; no warning filter is touched, so solves in several
        threads stay independent).
    follow : bool
        Without ``init``, on the semantic branch (pinned): where no default start reaches
        the branch, follow it down from above (:func:`from_above`; ``False``: return the
        off-branch result, as a curve's own continuation does).

    Returns
    -------
    SEResult

    Raises
    ------
    TypeError
        If ``params`` is not a :class:`~attnlab.params.ModelParams`, ``quad`` not a
        :class:`~attnlab.theory.quadrature.Quadrature` or ``init`` not an ``Overlaps``/``SEResult``.
    ValueError
        Invalid ``alpha`` (in ``(0, 1e4]``), ``branch``, ``minimizer``, ``tol`` (in ``(0, 1e-2]``),
        ``init`` (needs ``q > 0``, ``V > 0``, ``theta^2 < q sigma^2``), ``lambda = 0``,
        ``sigma`` outside ``[0.01, 5]``, ``L != 2`` or rank ``!= 1``.
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
    alpha = check_in_range("alpha", alpha, 0.0, ALPHA_LIMIT, open_lo=True)
    branch = check_choice("branch", branch, BRANCHES)
    minimizer = check_choice("minimizer", DEFAULT_MINIMIZER if minimizer is None else minimizer, MINIMIZERS)
    tol = check_tolerance("tol", tol)
    quad = check_quadrature(quad)
    if init is not None and not isinstance(init, (Overlaps, SEResult)):
        raise TypeError(f"init must be an Overlaps, an SEResult or None, got {type(init).__name__}")
    if minimizer == "followed":
        tol = max(tol, followed_tolerance(quad.qmc))
    max_iter = check_int("max_iter", max_iter, 1)
    jacobian = anchor = None
    if isinstance(init, SEResult):
        if init.branch == branch and init.params == params and pin and init.minimizer == minimizer:
            jacobian = init.jacobian
            if init.quadrature == quad and init.converged and not init.collapsed:
                anchor = (init.alpha, init.hats)
        init = init.overlaps
    solve = lambda start, warm, J=None: fixed_point(params, alpha, branch, start, warm=warm, quad=quad, tol=tol,
                                                    max_iter=max_iter, pin=pin, minimizer=minimizer, jacobian=J,
                                                    anchor=anchor if warm else None)
    if init is not None:
        if not in_domain(init, params.sigma ** 2):
            raise ValueError(f"init must have q > 0, V > 0 and theta^2 < q sigma^2 (got {init}); "
                             "a collapsed result (q = 0) is not a valid warm start")
        result = solve(init, True, jacobian)
    else:
        result = _first_on_branch([lambda s=s: solve(s, False) for s in start_points(branch, params)])
        if follow and pin and branch == "semantic" and not (result.on_branch or result.collapsed):
            above = from_above(params, alpha, branch, quad=quad, tol=tol, minimizer=minimizer)
            result = result if above is None else above
    if warn and not result.converged:
        _warn_not_converged(result, tol)
    elif warn and not (result.on_branch or result.collapsed):
        lead = "theta" if branch == "semantic" else "m"
        warnings.warn(f"the fixed point at alpha={alpha} is not on the {branch} branch ({lead} = "
                      f"{getattr(result, lead):.1e}; on_branch=False)", OffBranchWarning, stacklevel=2)
    if error_estimate:
        fine = solve_state_evolution(params, alpha, branch, init=result.overlaps, quad=quad.refined(), tol=tol,
                                     max_iter=max_iter, pin=pin, minimizer=minimizer, warn=warn)
        keys = ("m", "theta", "qnorm", "eps_g", "eps_t")
        result = replace(result, quadrature_error={k: abs(getattr(fine, k) - getattr(result, k)) for k in keys})
        large = {k: e / abs(getattr(result, k)) for k, e in result.quadrature_error.items()
                 if k in ("qnorm", "eps_g", "eps_t") and e > QUADRATURE_WARN * abs(getattr(result, k))}
        if large and warn:
            warnings.warn("large quadrature error: " + ", ".join(f"{k} {v:.1%}" for k, v in large.items())
                          + f" (> {QUADRATURE_WARN:.0%}) at alpha={alpha}, sigma={params.sigma}: use a finer "
                          "Quadrature (e.g. quad.refined())", QuadratureWarning, stacklevel=2)
    return result


def solve_on_branch(params: ModelParams, alpha: float, branch: str, *, near: SEResult | None = None,
                    quad: Quadrature | None = None, fallback: Quadrature | None = None, tol: float = 1e-7,
                    minimizer: str | None = None, quiet: bool = False) -> SEResult:
    """A fixed point on ``branch`` by the module's policy: warm start from ``near``, then
    the default starts, then the default starts with the ``fallback`` rule.

    Parameters
    ----------
    params, alpha, branch, quad, tol, minimizer
        As :func:`solve_state_evolution`.
    near : SEResult, optional
        A nearby fixed point (another ``alpha``, or other parameters) to warm-start
        from; ignored unless :func:`continuable`.
    fallback : Quadrature, optional
        A rule for a last attempt (e.g. the accurate default where ``quad`` is the
        cheap one); ignored if equal to ``quad``.
    quiet : bool
        No :class:`~attnlab.theory.solver.ConvergenceWarning` for a result that did
        not converge (its ``converged`` says so).

    Returns
    -------
    SEResult
        Never warns :class:`OffBranchWarning` (``on_branch`` says it).

    Raises
    ------
    StateEvolutionError
        If every attempt raised it (the last one's message).
    """
    quad = check_quadrature(quad)
    solve = lambda **kw: solve_state_evolution(params, alpha, branch, tol=tol, minimizer=minimizer, warn=False,
                                               follow=False, **kw)
    warm = (lambda: solve(init=near, quad=quad)) if near is not None and continuable(near) else None
    attempts = [lambda: solve(quad=quad)]
    if fallback is not None and fallback != quad:
        attempts.append(lambda: solve(quad=fallback))
    result = _first_on_branch(attempts, warm)
    if not result.converged and not quiet:
        _warn_not_converged(result, tol)
    return result


def from_above(params: ModelParams, alpha: float, branch: str = "semantic", *, quad: Quadrature | None = None,
               tol: float = 1e-7, minimizer: str | None = None, steps: int = 10) -> SEResult | None:
    """The fixed point at ``alpha`` reached by following ``branch`` down from
    ``FROM_ABOVE * alpha`` (at most ``ALPHA_LIMIT``) in ``steps`` geometric steps (a
    :class:`BranchFollower`: each warm-started from the one before, with its own
    iteration budget), or ``None`` if the branch is not found at the top or is left on
    the way (it ends above ``alpha``).

    Parameters
    ----------
    params, alpha, branch, quad, tol, minimizer
        As :func:`solve_state_evolution`.
    steps : int
        Points from the top to ``alpha``, at least 2 (10: steps of 4.6% with
        :data:`FROM_ABOVE` = 1.5).

    Returns
    -------
    SEResult or None
        ``None`` also where one step loses 90% of the leading overlap (it fell onto the
        trivial fixed point, whose ``theta`` may exceed :data:`~attnlab.theory.solver.ON_BRANCH_MIN`
        by rounding).

    Raises
    ------
    ValueError
        If ``steps < 2``.
    """
    steps = check_int("steps", steps, 2)
    top = min(FROM_ABOVE * alpha, ALPHA_LIMIT)
    if top <= alpha:
        return None
    follow = BranchFollower(params, branch, check_quadrature(quad), tol, minimizer=minimizer, quiet=True)
    lead = leading_overlap(branch)
    result = None
    for a in np.geomspace(top, alpha, steps):
        previous, result = result, follow(float(a))
        if not continuable(result) or (previous is not None and getattr(result, lead) < 0.1 * getattr(previous, lead)):
            return None  # not found, or left: a 5% step that loses 90% of the overlap fell off the branch
    return result


def _warn_not_converged(result: SEResult, tol: float) -> None:
    warnings.warn(f"state evolution did not converge at alpha={result.alpha}, branch={result.branch}: "
                  f"residual {result.residual:.2e} > tol={tol:.0e}", ConvergenceWarning, stacklevel=3)


#: A :class:`BranchFollower` warm-starts from its own results (same rule: the continuation
#: of :func:`~attnlab.theory.solver.fixed_point` from the neighbour's conjugates) rather than
#: from a nearer result of ``warm_from`` when they lie within this fraction of ``alpha``.
SAME_RULE_SPAN = 0.05


class BranchFollower:
    """Fixed points on one branch, each warm-started from the nearest ``alpha`` already
    solved that can be continued from: here if one lies within :data:`SAME_RULE_SPAN`
    of ``alpha``, else the nearest here or in ``warm_from``.

    Parameters
    ----------
    params : ModelParams
    branch : {"semantic", "positional"}
    quad : Quadrature
    tol : float
    minimizer : {"followed", "global"}, optional
    quiet : bool
        No :class:`~attnlab.theory.solver.ConvergenceWarning`, and where every
        attempt raises :class:`~attnlab.theory.solver.StateEvolutionError` (e.g.
        where the branch ends) the point is :meth:`~attnlab.theory.solver.SEResult.failed` (NaN
        observables, ``converged=False``) instead of the error.
    warm_from : BranchFollower, optional
        Another follower (e.g. with a cheaper rule) whose results also serve as warm starts.

    Attributes
    ----------
    solved : dict of float to SEResult
        The results so far, by ``alpha``.
    """

    def __init__(self, params: ModelParams, branch: str, quad: Quadrature, tol: float, *,
                 minimizer: str | None = None, quiet: bool = False, warm_from: "BranchFollower | None" = None):
        self.params, self.branch, self.quad, self.tol = params, branch, quad, tol
        self.minimizer, self.quiet, self.warm_from = minimizer, quiet, warm_from
        self.solved: dict[float, SEResult] = {}

    def __call__(self, alpha: float) -> SEResult:
        """The fixed point at ``alpha`` (solved once, then remembered)."""
        if alpha not in self.solved:
            self.solved[alpha] = self.peek(alpha)
        return self.solved[alpha]

    def peek(self, alpha: float) -> SEResult:
        """The fixed point that ``self(alpha)`` would return now, without remembering it
        (so that it changes no later warm start): for solving ahead in another thread.
        Remembered results are returned as they are."""
        if alpha in self.solved:
            return self.solved[alpha]
        known = dict(self.warm_from.solved) if self.warm_from is not None else {}
        known.update(self.solved)
        distance = lambda a: abs(a - alpha)
        own = min((a for a, r in self.solved.items() if continuable(r)), key=distance, default=None)
        near = min((a for a, r in known.items() if continuable(r)), key=distance, default=None)
        if own is not None and distance(own) <= SAME_RULE_SPAN * alpha:
            near = own
        try:
            return solve_on_branch(self.params, alpha, self.branch, near=known.get(near), quad=self.quad,
                                   tol=self.tol, minimizer=self.minimizer, quiet=self.quiet)
        except StateEvolutionError:
            if not self.quiet:
                raise
            return SEResult.failed(self.params, alpha, self.branch, self.quad, self.minimizer or DEFAULT_MINIMIZER)


def solve_side_by_side(first, second, pool=None):
    """``first()`` in this thread and ``second()`` in ``pool`` (a thread pool), at the same
    time: the kernels release the GIL, so two solves take about the time of one on two
    free cores. Without ``pool``, one after the other. Returns ``(first(), second())``;
    an error of either is raised after both have ended."""
    if pool is None:
        return first(), second()
    later = pool.submit(second)
    try:
        a = first()
    finally:
        b = later.result()
    return a, b
