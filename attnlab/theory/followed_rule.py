"""Channel expectations for the *followed* proximal minimiser, by randomised quasi-Monte Carlo.

The loss is invariant under ``h -> -h``; its two mirror minima lie on either
side of the line ``h1 = h2``, where the attention is uniform and the loss is
high. Gradient descent starts every training sample at the preactivations of
its initialisation ``h0 = x Q0 / sqrt(d)``, and a sample stays in the basin it
starts in unless the pull of the other samples removes that basin. The state
evolution of the minimum gradient descent reaches from ``Q0`` therefore replaces
the global proximal minimiser by the local minimiser reached by descent from ``h0``:

``h_prox = local argmin_h [ |h - w|^2 / (2V) + l(h, T(h*)) ]``, descent started at ``h = h0``

(damped Newton, :func:`attnlab.theory.channel.descend`); the hat and overlap
updates are unchanged (Cui et al. 2024, Result 4.2, with this minimiser in
place of the global one). In the state-evolution fields:

* semantic branch, ``Q0 = Q*`` (the informed init): ``h0 = h*``, the teacher's field;
* positional branch, ``Q0 = c 1_d`` (``c`` = :data:`attnlab.params.POSITIONAL_INIT_SCALE`):
  ``h0_l = c (s_l + sigma zeta_l)`` with ``zeta_l = z_l . 1_d / (sigma sqrt(d))``, a
  standard Gaussian correlated with the student noise, ``zeta = r xi + sqrt(1 - r^2) nu``,
  ``r = sigma m / sqrt(q)`` (the cosine between ``Q`` and ``1_d``), ``nu_1, nu_2`` two
  more independent standard Gaussians.

The minimiser jumps where ``h0`` crosses a basin boundary, a set that is not
known in closed form, so the expectations are taken by scrambled Sobol points
(``scipy.stats.qmc.Sobol``) mapped to Gaussians: ``scrambles`` independent
randomisations of ``2**log2_points`` points each, fixed by ``seed`` so that the
map is deterministic (as root finding needs). The integration error of a fixed
point is estimated by solving again with an independent, larger point set
(``error_estimate=True`` of :func:`attnlab.theory.solve_state_evolution`).
"""
from __future__ import annotations

import numpy as np
from numba import types

from ..params import BRANCHES, FOLLOWED_TOL, POSITIONAL_INIT_SCALE, check_choice
from . import kernels, precompile
from .channel import MOMENTS, SIGNS, ChannelMoments, field_scales, fields
from .quadrature import QMCRule, Quadrature, gaussian_points, points_cache_dir

__all__ = ["QMCRule", "gaussian_points", "initial_fields", "followed_expectations",
           "followed_tolerance", "LANE_KERNELS", "lane_kernels", "POINT_SETS", "default_point_sets"]


def followed_tolerance(rule: QMCRule) -> float:
    """The residual floor of the followed minimiser's map with ``rule``: :data:`~attnlab.params.FOLLOWED_TOL`
    at ``2**17`` points, growing as ``1 / sqrt(points)``."""
    return FOLLOWED_TOL * float(np.sqrt(2 ** 17 / rule.points))


#: The compile helper's source for :func:`lane_kernels` (:func:`attnlab.theory.precompile.start`).
LANE_KERNELS = f"{__name__}:lane_kernels"


def lane_kernels() -> dict:
    """:func:`attnlab.theory.kernels.followed_sums` with the argument types
    :func:`followed_expectations` calls it with (read-only point sets).

    Returns
    -------
    dict
        ``{numba dispatcher: tuple of numba types}``, for :func:`attnlab.theory.precompile.compile_all`.
    """
    F, I = types.float64, types.int64
    return {kernels.followed_sums: (types.Array(F, 2, "C", readonly=True), I, I, I) + (F,) * 9 + (types.boolean, F, F, I)}


#: What the lane kernel's compile helper does first (:func:`default_point_sets`).
POINT_SETS = f"{__name__}:default_point_sets"


def default_point_sets() -> None:
    """Write the point sets of a solve with the default rules to their disk cache
    (:func:`~attnlab.theory.quadrature.gaussian_points`): the coarse stage's
    (:meth:`~attnlab.theory.quadrature.QMCRule.fast`), the cheap rule's and the default's.
    The compile helper of a fresh process does this first, while that process compiles
    :func:`~attnlab.theory.kernels.followed_sums_serial`; the first solve then reads them
    from disk instead of importing ``scipy.stats`` (about 0.8 s) to generate them. Nothing
    where there is no disk cache (``ATTNLAB_CACHE_DIR`` empty, a folder that cannot be written)."""
    if points_cache_dir() is None:
        return
    for rule in (QMCRule.fast(), Quadrature().cheap().qmc, Quadrature().qmc):
        gaussian_points(rule, 6)


def _sums_kernel():
    """:func:`~attnlab.theory.kernels.followed_sums`, or while a helper process compiles it into an
    empty numba cache (started here, :mod:`attnlab.theory.precompile`; it first writes the
    default point sets, :data:`POINT_SETS`), :func:`~attnlab.theory.kernels.followed_sums_serial`
    (the same sums, compiled in half the time), compiled here before the caller reads its points."""
    lanes = kernels.followed_sums
    if not getattr(lanes, "signatures", ()):  # not yet compiled or loaded in this process
        precompile.start(LANE_KERNELS, lane_kernels(), first=POINT_SETS)
        if precompile.running(LANE_KERNELS):
            serial = kernels.followed_sums_serial
            if not serial.signatures:  # (compile takes numba's global lock even when it has nothing to do)
                precompile.compile_all({serial: argtypes for argtypes in lane_kernels().values()})
            return serial
    return lanes


def initial_fields(ov, params, branch: str, nodes: np.ndarray):
    """Preactivations ``h0`` of gradient descent's initialisation for ``branch`` at the nodes.

    Parameters
    ----------
    ov : Overlaps
    params : ModelParams
    branch : {"semantic", "positional"}
    nodes : ndarray, shape (6, N)
        ``xi_1, xi_2, eta_1, eta_2, nu_1, nu_2`` (standard Gaussians).

    Returns
    -------
    h01, h02 : ndarray, shape (N,)
        Semantic: ``h*``. Positional: ``c (s_l + sigma zeta_l)``, ``zeta_l = r xi_l + sqrt(1 - r^2) nu_l``.
    """
    check_choice("branch", branch, BRANCHES)
    _, _, hs1, hs2, _ = fields(ov, params.sigma ** 2, nodes[:4])
    if branch == "semantic":
        return hs1, hs2
    r = float(np.clip(params.sigma * ov.m / np.sqrt(ov.q), -1.0, 1.0))
    c, sr = POSITIONAL_INIT_SCALE, np.sqrt(1.0 - r * r)
    zeta1, zeta2 = r * nodes[0] + sr * nodes[4], r * nodes[1] + sr * nodes[5]
    return c * (SIGNS[0] + params.sigma * zeta1), c * (SIGNS[1] + params.sigma * zeta2)


def followed_expectations(ov, params, rule: QMCRule, branch: str, symmetry=None) -> ChannelMoments:
    """The channel moments with the followed minimiser, by randomised quasi-Monte Carlo.

    Parameters
    ----------
    ov : Overlaps
    params : ModelParams
    rule : QMCRule
    branch : {"semantic", "positional"}
        Which initialisation the descent starts from (:func:`initial_fields`).
    symmetry : Symmetry, optional
        Its ``odd`` expectations are set to exactly zero (e.g. ``f_s`` on the
        semantic branch with a symmetric ``A``).

    Returns
    -------
    ChannelMoments
        With ``nodes`` (proximal problems solved) and ``spread``: for each
        expectation the standard error over the scrambles.
    """
    check_choice("branch", branch, BRANCHES)
    kernel = _sums_kernel()  # (first: on a cold start its helper writes the points meanwhile)
    nodes = gaussian_points(rule, 6)
    sq, kappa, c = field_scales(ov, params.sigma ** 2)
    r = float(np.clip(params.sigma * ov.m / np.sqrt(ov.q), -1.0, 1.0))
    A = params.A_array
    per_scramble = 2 ** rule.log2_points
    block = min(1024, per_scramble)
    # one compiled pass over the nodes: initial_fields, descend and moments_from_samples composed
    run = lambda lo, hi: kernel(nodes, lo, hi, block, sq, ov.m, kappa, c, params.omega, A[0, 0], A[1, 1], ov.V,
                                params.sigma, branch == "semantic", r, POSITIONAL_INIT_SCALE,
                                kernels.DESCENT_ITERATIONS)
    sums = kernels.over_blocks(run, nodes.shape[1] // block, block)
    per = sums.reshape(rule.scrambles, per_scramble // block, len(MOMENTS)).sum(axis=1) / per_scramble
    means = dict(zip(MOMENTS, per.mean(axis=0)))
    with np.errstate(over="ignore"):  # far outside the branches (a solver's trial step) M can exceed 1e154
        spread = {name: float(per[:, j].std(ddof=1) / np.sqrt(rule.scrambles)) if rule.scrambles > 1 else float("nan")
                  for j, name in enumerate(MOMENTS)}
    odd = symmetry.odd if symmetry is not None else ()
    spread.update({name: 0.0 for name in odd})
    return ChannelMoments.from_sums(means, odd, nodes=int(nodes.shape[1]), spread=spread)
