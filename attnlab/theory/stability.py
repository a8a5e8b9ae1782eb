"""Is a fixed point of a pinned branch a minimum? Its stability in the pinned direction.

Source: Cui et al. 2024 (arXiv:2402.03902), Result 4.2 (the map) and Sec. 4 (the two
branches); the test is attnlab's (book Chapter 6, "Where each minimum exists").

A branch is solved with one overlap pinned to zero by symmetry (:func:`~attnlab.theory.solver.pinning`):
``m = 0`` on the semantic branch, ``theta = 0`` on the positional one. A fixed point of
that pinned map need not be a minimum of the risk: the risk may curve *down* along the
pinned overlap, and gradient descent, which starts with that overlap at ``O(1/sqrt(d))``,
then leaves along it (from ``Q*`` to the positional minimum, say).

The unpinned map ``G`` is odd in the pinned overlap ``p`` (swapping the two positions flips
``m``; ``Q* -> -Q*`` flips ``theta``), so at a pinned fixed point its Jacobian is block
diagonal and ``lambda_p = dG_p / dp`` is the eigenvalue of the pinned direction. The
regulariser is quadratic in ``p`` and its conjugate (``m = mhat / D``, ``theta = sigma^2 rho
thetahat / D``, book Chapter 5), so eliminating the conjugate gives a training loss whose
curvature along ``p`` is a positive multiple of ``1 - lambda_p`` (``D = lambda + sigma^2 Vhat > 0``
for ``m``, ``D / (sigma^2 rho)`` for ``theta``; from the free entropy, i.e. derived for the
global prox and carried over to the followed one by analogy): the fixed point is a minimum
along ``p`` if and only if ``lambda_p < 1`` (:data:`STABLE_BELOW`); at ``lambda_p = 1`` the
branch ends (a spinodal).

``lambda_p`` is taken by a central difference of the unpinned map, with ``STEP * sqrt(q)``
in ``m`` (the positional shift of the student field ``w_l = sqrt(q) xi_l + s_l m``) or
``STEP * sqrt(q rho)`` in ``theta`` (a teacher-student correlation of ``STEP``): with the
branch's final rule and minimiser (two evaluations of its map) by default, with three descents
over the quasi-Monte Carlo points of ``result.quadrature.qmc`` for ``basins="held"``.

What a probe does with a training sample whose proximal point sits near the edge of its
basin decides part of ``lambda_p`` (``basins`` of :func:`pinned_eigenvalue`). By default
(``"redescend"``) the map at the probe is the branch's own: each sample's proximal point is
found afresh by the branch's minimiser (the followed one descends again from the
initialisation's field ``h0``), as the fixed point itself was. With ``"held"`` each sample
starts from its proximal point at the fixed point, so it keeps its basin unless the probe
removes that basin. On the semantic branch at omega 0.5, alpha 2 and 3 the two agree with
each other and with the closed-form response of proximal points that all stay in their basin,
``dh/dw = (1 + V H)^-1`` (``H`` the loss's Hessian in ``h``; ``tests/test_stability.py``).
Elsewhere they can differ: at omega 0.5, alpha 1.0 ``"redescend"`` gives 1.17, ``"held"``
0.82, the closed form 0.50, and the semantic minimum's start moves from alpha 1.12 to 0.76
(linear interpolation on a grid 0.1 apart, default rule); on the positional branch at omega
0.1, ``"held"`` is 0.15-0.2 *higher* over alpha 2-2.6 and the positional minimum's end moves
from 2.45 to 2.25. The state evolution here does not say which response gradient descent at
large ``d`` has (book Chapter 6, "How sure is a spinodal?"); ``SEResult.stability_held`` and
``SEResult.probes_agree`` report the held probe beside the default one, and ``attnlab theory``
says where the two disagree that the state evolution cannot tell whether the point is a minimum.

:func:`pinned_susceptibility` turns ``lambda_p`` into the response of the pinned overlap to a
field, which :mod:`attnlab.curvature` measures at a gradient-descent minimum; book Chapter 6
("Asking gradient descent: the response of m", and "... of theta") compares the two on the
semantic branch at omega 0.5 and on the positional branch at omega 0.1.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..params import check_choice
from .channel import ChannelMoments, descend, fields, loss, moments_from_samples, proximal, teacher_diagonal
from .equations import StateEvolution, channel_update, ridge_update
from .followed_rule import initial_fields
from .quadrature import Symmetry, gaussian_points

__all__ = ["STEP", "STABLE_BELOW", "BASINS", "pinned_direction", "pinned_eigenvalue", "pinned_susceptibility"]

#: Relative step of the central difference (measured: moving it from 0.02 to 0.1 changes
#: ``lambda_p`` by less than 1e-2 at omega 0.3; the quasi-Monte Carlo map moves in steps of
#: about 1e-5, i.e. 1e-3 of the response at this step).
STEP = 0.05
#: A pinned fixed point is a minimum along its pinned overlap if ``lambda_p`` is below this.
STABLE_BELOW = 1.0
#: What a probe of :func:`pinned_eigenvalue` does with each sample's proximal point.
BASINS = ("redescend", "held", "linear")


def pinned_direction(branch: str) -> str:
    """The overlap pinned to zero on ``branch``: ``"m"`` (semantic) or ``"theta"`` (positional)."""
    return "m" if branch == "semantic" else "theta"


def pinned_eigenvalue(result, *, basins: str = "redescend") -> float:
    """``lambda_p``: the eigenvalue of the unpinned map's Jacobian in the pinned direction.

    Parameters
    ----------
    result : SEResult
        A converged fixed point, not collapsed, of a pinned branch (``m = 0`` semantic,
        ``theta = 0`` positional); not checked to be converged (a result that is not gives
        the slope of the map there).
    basins : {"redescend", "held", "linear"}
        ``"redescend"`` (default; the value of ``SEResult.stability``): at the probes,
        find each sample's proximal point afresh with the branch's minimiser, as the fixed
        point itself was. ``"held"``: start it from its proximal point at the fixed point (by
        descent, with the quasi-Monte Carlo points of ``result.quadrature.qmc``), so that it
        keeps its basin unless the probe removes that basin (module docstring). ``"linear"``
        (semantic branch only): the infinitesimal response of proximal points that all stay
        in their basin, in closed form, ``dh/dw = (1 + V H)^-1`` (``H`` the loss's 2x2 Hessian
        in ``h`` at each sample's proximal point, by central differences of the loss, step
        1e-4), ``lambda_m = alpha E[s.((1 + V H)^-1 - 1) s] / (V D)`` with ``s = (1, -1)``: no
        finite step, so no sample changes basin.

    Returns
    -------
    float
        The ``p`` component of one step of the unpinned map from the fixed point's overlaps
        with ``p`` set to ``+e``, minus that with ``p = -e``, divided by ``2 e`` (``e`` the step
        of the module docstring); below :data:`STABLE_BELOW` the fixed point is a minimum along
        ``p``. NaN where the result has no overlaps to probe (NaN, collapsed ``q = 0``), where
        ``p`` was not pinned (``pin=False``, or the semantic branch with ``A_11 != A_22``) or
        where the map leaves its domain at the probes.

    Raises
    ------
    ValueError
        If ``basins`` is not one of :data:`BASINS`, or is ``"linear"`` for a positional result.

    Notes
    -----
    ``lambda_p = dG_p / dp`` at ``p = 0``, ``G`` the map of Cui et al. 2024, Result 4.2 (channel
    update, then the ridge update ``m = mhat / D``, ``theta = sigma^2 rho thetahat / D``); the
    fixed point is a minimum along ``p`` iff ``lambda_p < 1`` (module docstring). The spinodals
    (``attnlab.theory.spinodals.find_spinodals``) are where the default one crosses 1.
    """
    check_choice("basins", basins, BASINS)
    ov = result.overlaps
    p = pinned_direction(result.branch)
    if not (np.isfinite(ov.q) and ov.q > 0 and not result.collapsed and getattr(ov, p) == 0.0):
        return float("nan")  # nothing to probe, or not pinned (pin=False; semantic with A_11 != A_22)
    rho = result.params.sigma ** 2
    step = STEP * np.sqrt(ov.q) if p == "m" else STEP * np.sqrt(ov.q * rho)
    if basins == "linear":
        if p != "m":
            raise ValueError("basins='linear' is implemented for the semantic branch (the response of m) only, "
                             f"got a {result.branch!r} result")
        return _linear_eigenvalue(result)
    if basins == "held":
        return _held_eigenvalue(result, p, step)
    A = result.params.A_array
    free_symmetry = Symmetry(False, bool(A[0, 0] == A[1, 1]), ())  # nothing pinned (solver.pinning with pin=False)
    G = StateEvolution.of(result.params, result.alpha, result.quadrature, fine=True, symmetry=free_symmetry,
                          minimizer=result.minimizer, branch=result.branch)
    try:
        with np.errstate(all="raise"):
            plus, minus = (getattr(G(replace(ov, **{p: s * step})), p) for s in (1.0, -1.0))
    except (FloatingPointError, ZeroDivisionError):
        return float("nan")
    return float((plus - minus) / (2 * step))


def pinned_susceptibility(result, *, basins: str = "redescend") -> float:
    """``chi_p = 1 / (D (1 - lambda_p))``: the state evolution's response of the pinned overlap.

    ``p`` is ``m`` on the semantic branch and ``theta`` on the positional one
    (:func:`pinned_direction`). The field term ``-d h p`` added to the risk adds ``h Q*`` (for
    ``theta``) or ``h sqrt(d) p_1`` (for ``m``) to the linear term of the ridge problem, whose
    quadratic term is ``D |Q|^2 / 2`` with ``D = lambda + sigma^2 Vhat``
    (:func:`~attnlab.theory.equations.ridge_update`), so the update becomes ``m = (mhat + h) / D``
    and, for the SE variable ``theta_SE = sigma^2 theta`` (``theta = Q* . Q / d``, ``|Q*|^2 / d = 1``),
    ``theta_SE = sigma^2 (rho thetahat + h) / D``, i.e. ``theta = (rho thetahat + h) / D``. With the
    map's ``lambda_p p`` in place of ``mhat / D`` (or ``rho thetahat / D``; ``lambda_theta`` is a
    ratio, the same for ``theta`` and ``theta_SE``) near ``p = 0`` the fixed point moves by
    ``dp = chi_p h`` (with no data, ``Vhat = lambda_p = 0``, it is ``1 / lambda``).
    Its counterpart at a gradient-descent minimum of finite ``d`` is ``d a^T H^-1 a``
    (:func:`attnlab.curvature.positional_susceptibility` for ``m``,
    :func:`attnlab.curvature.semantic_susceptibility` for ``theta``), the response to an
    infinitesimal field, which moves no sample across a basin edge: on the semantic branch
    ``basins="linear"`` is the like-for-like probe; whether gradient descent at large ``d`` has
    that response is what the comparison tests.

    Parameters
    ----------
    result : SEResult
        A fixed point of a pinned branch (``m = 0`` semantic, ``theta = 0`` positional).
    basins : {"redescend", "held", "linear"}
        The probe of :func:`pinned_eigenvalue` (``"linear"``: semantic branch only).

    Returns
    -------
    float
        ``chi_m`` (semantic) or ``chi_theta`` (positional); ``inf`` where ``lambda_p >= 1`` (no
        minimum along ``p``: the response has no finite linear part); NaN where
        :func:`pinned_eigenvalue` is NaN.

    Raises
    ------
    ValueError
        If ``basins`` is not one of :data:`BASINS`, or is ``"linear"`` for a positional result.

    Notes
    -----
    ``lambda_p`` is one eigenvalue of the map's Jacobian only because the Jacobian is block
    diagonal at ``p = 0`` (the map is odd in ``p``); where it is not, the result is NaN
    (:func:`pinned_eigenvalue`). Cui et al. 2024, Result 4.2 (the map).
    """
    lam_p = pinned_eigenvalue(result, basins=basins)
    if not np.isfinite(lam_p):
        return float("nan")
    if lam_p >= STABLE_BELOW:
        return float("inf")
    D = result.params.lam + result.params.sigma ** 2 * result.hats.Vhat
    return float(1.0 / (D * (1.0 - lam_p)))


def _held_eigenvalue(result, p: str, step: float) -> float:
    """:func:`pinned_eigenvalue` with ``basins="held"``."""
    ov, params = result.overlaps, result.params
    nodes = np.asarray(gaussian_points(result.quadrature.qmc, 6))
    try:
        with np.errstate(over="raise", divide="raise", invalid="raise"):
            base = _base_proximal(result, nodes)
            plus, minus = (_map_from(replace(ov, **{p: s * step}), params, result.alpha, nodes, base, p)
                           for s in (1.0, -1.0))
    except (FloatingPointError, ZeroDivisionError):
        return float("nan")
    return float((plus - minus) / (2 * step))


def _base_proximal(result, nodes):
    """Each node's proximal point at the fixed point, by the result's minimiser: ``h1, h2``."""
    ov, params = result.overlaps, result.params
    w1, w2, T11, T22 = _channel_at(ov, params, nodes)
    if result.minimizer == "global":
        return proximal(w1, w2, T11, T22, ov.V, params.sigma)[:2]
    return descend(w1, w2, T11, T22, ov.V, params.sigma, start=initial_fields(ov, params, result.branch, nodes))[:2]


def _linear_eigenvalue(result) -> float:
    """:func:`pinned_eigenvalue` with ``basins="linear"`` (semantic branch)."""
    ov, params = result.overlaps, result.params
    nodes = np.asarray(gaussian_points(result.quadrature.qmc, 6))
    _, _, T11, T22 = _channel_at(ov, params, nodes)
    h1, h2 = _base_proximal(result, nodes)
    e = 1e-4

    def ell(a, b):
        return loss(h1 + a, h2 + b, T11, T22, params.sigma)

    H11 = (ell(e, 0) - 2 * ell(0, 0) + ell(-e, 0)) / e ** 2
    H22 = (ell(0, e) - 2 * ell(0, 0) + ell(0, -e)) / e ** 2
    H12 = (ell(e, e) - ell(e, -e) - ell(-e, e) + ell(-e, -e)) / (4 * e ** 2)
    a, b, c = 1 + ov.V * H11, ov.V * H12, 1 + ov.V * H22  # 1 + V H = [[a, b], [b, c]]
    s_inv_s = (a + c + 2 * b) / (a * c - b * b)  # s.(1 + V H)^-1 s, s = (1, -1)
    D = params.lam + params.sigma ** 2 * result.hats.Vhat
    return float(result.alpha * np.mean(s_inv_s - 2.0) / (ov.V * D))


def _channel_at(ov, params, nodes):
    """Student fields and teacher diagonal ``w1, w2, T11, T22`` at the nodes."""
    w1, w2, hs1, hs2, _ = fields(ov, params.sigma ** 2, nodes[:4])
    return (w1, w2) + tuple(teacher_diagonal(hs1, hs2, params.omega, params.A_array))


def _map_from(ov, params, alpha, nodes, start, p: str) -> float:
    """Overlap ``p`` after one step of the unpinned map at ``ov``, each node's proximal point
    found by descent from ``start``."""
    w1, w2, T11, T22 = _channel_at(ov, params, nodes)
    h1, h2, F = descend(w1, w2, T11, T22, ov.V, params.sigma, start=start)
    sums = moments_from_samples(h1, h2, F, w1, w2, nodes[0:2], nodes[2:4], ov.V)
    moments = ChannelMoments.from_sums({k: float(np.mean(v)) for k, v in sums.items()}, nodes=int(nodes.shape[1]))
    return getattr(ridge_update(channel_update(moments, ov, params, alpha), params), p)
