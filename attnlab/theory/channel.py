"""The channel of the attention GLM: fields, loss, proximal operator, Moreau envelope, moments.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 4 and Result 4.2 (the output
channel of the state evolution). For ``L = 2`` and rank one, with ``h`` the
student preactivations and ``T = T(h*)`` the teacher attention, the per-sample
loss is ``l(h, T) = (sigma^2 / 2) ||S(h) - T||_F^2 = sigma^2 [(sig(a) - T11)^2 + (sig(b) - T22)^2]``,
with ``a = h1 (h1 - h2)``, ``b = h2 (h2 - h1)`` and ``sig`` the logistic function
(each row of a 2x2 row-stochastic matrix has one free entry).

The proximal problem ``min_h |h - w|^2 / (2V) + l(h, T)`` is non-convex:
:func:`proximal` returns its *global* minimiser for every node at once (a polar
grid over the disc that must contain it, then Newton from the best grid points
and from ``w``); :func:`descend` the local minimiser reached from a given start.
Both run the compiled loops of :mod:`attnlab.theory.kernels` on all cores.

The expectations the hat updates need are returned as :class:`ChannelMoments`;
:func:`gauss_hermite_expectations` computes them with a tensor Gauss-Hermite rule,
:mod:`attnlab.theory.split_rule` and :mod:`attnlab.theory.followed_rule` with
the rules that handle the proximal minimiser's jumps.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.special import expit

from ..params import check_positive
from . import kernels
from .quadrature import eta_rule, symmetry_of, tensor_rule

__all__ = ["SIGNS", "MOMENTS", "teacher_diagonal", "loss", "proximal", "descend", "moreau_envelope", "in_domain",
           "field_scales", "fields", "ChannelMoments", "moments_from_samples", "gauss_hermite_expectations"]

#: Signs ``s_l`` of the positional encodings ``p_l = s_l 1_d / sqrt(d)``.
SIGNS = (1.0, -1.0)

#: Names of the expectations in :class:`ChannelMoments`.
MOMENTS = ("f_s", "f_sq", "f_xi", "f_eta", "M")


def teacher_diagonal(hstar1, hstar2, omega: float, A) -> tuple[np.ndarray, np.ndarray]:
    """Diagonal ``(T11, T22)`` of ``T(h*) = (1 - omega) softmax(h* h*^T) + omega A`` for ``L = 2``.

    Parameters
    ----------
    hstar1, hstar2 : ndarray, shape (N,)
        Teacher preactivations.
    omega : float
    A : array_like, shape (2, 2)

    Returns
    -------
    T11, T22 : ndarray, shape (N,)
    """
    A = np.asarray(A, dtype=float)
    delta = hstar1 - hstar2
    T11 = (1.0 - omega) * expit(hstar1 * delta) + omega * A[0, 0]
    T22 = (1.0 - omega) * expit(-hstar2 * delta) + omega * A[1, 1]
    return T11, T22


def loss(h1, h2, T11, T22, sigma: float):
    """``l(h, T) = (sigma^2/2) ||S(h) - T||_F^2`` for ``L = 2``, rank one; arrays broadcast.

    At ``h`` the student's preactivations and ``T = T(h*)`` it is also the
    per-sample test error (averaged: ``eps_g``)."""
    delta = h1 - h2
    return sigma ** 2 * ((expit(h1 * delta) - T11) ** 2 + (expit(-h2 * delta) - T22) ** 2)


def _polar_grid(n_radius: int, n_angle: int) -> tuple[np.ndarray, np.ndarray]:
    r = (np.arange(1, n_radius + 1) / n_radius)[:, None]
    phi = (2 * np.pi * (np.arange(n_angle) + 0.5 * (np.arange(n_radius)[:, None] % 2)) / n_angle)
    return (r * np.cos(phi)).ravel(), (r * np.sin(phi)).ravel()


def proximal(w1, w2, T11, T22, V: float, sigma: float, *, grid=(6, 16), starts: int = 3,
             iterations: int = 40, warm=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Global minimiser ``h_prox`` and Moreau envelope ``M`` of the proximal problem.

    ``h_prox = argmin_h [ |h - w|^2 / (2V) + l(h, T) ]``, ``M`` its minimum value.

    Parameters
    ----------
    w1, w2 : ndarray, shape (N,)
        Student fields (the quadratic term's centre).
    T11, T22 : ndarray, shape (N,)
        Diagonal of the teacher attention ``T(h*)``.
    V : float
        Proximal scale, ``> 0``.
    sigma : float
        Token-content standard deviation.
    grid : (int, int)
        Radii and angles of the polar search grid over the disc
        ``|h - w| <= sqrt(2 V l(w, T))`` that contains every minimiser (since
        ``F(h) >= |h - w|^2 / 2V`` and ``F(w) = l(w, T)``).
    starts : int
        Number of best grid points refined by Newton (plus ``w`` itself).
    iterations : int
        Maximal Newton iterations per start.
    warm : (ndarray, ndarray), optional
        A previous minimiser ``(h1, h2)`` (same shape as ``w1``). If given, the
        grid search is skipped and Newton starts from ``w``, ``warm`` and its
        mirror image ``-warm`` (the loss is invariant under ``h -> -h``): fast
        when the fields moved little, but only a local search; callers verify
        the final answer with a full (``warm=None``) call.

    Returns
    -------
    h1, h2 : ndarray, shape (N,)
        The global minimiser.
    M : ndarray, shape (N,)
        The Moreau envelope ``min_h [...]``.

    Raises
    ------
    ValueError
        If ``V`` or ``sigma`` is not finite and positive.
    """
    V, sigma = check_positive("V", V), check_positive("sigma", sigma)
    shape = np.broadcast_shapes(*(np.shape(v) for v in (w1, w2, T11, T22)))
    w1, w2, T11, T22 = _flat_arrays(w1, w2, T11, T22)
    if warm is None:
        gx, gy = _polar_grid(*grid)
        h1, h2, F = kernels.over_nodes(kernels.global_search, (gx, gy, w1, w2, T11, T22, float(V), float(sigma),
                                                               int(starts), int(iterations)),
                                       (None, None, 0, 0, 0, 0, None, None, None, None), (0, 0, 0), w1.size, 256)
    else:
        p1, p2 = _flat_arrays(*warm)
        h1, h2, F = _multistart(np.stack([w1, p1, -p1]), np.stack([w2, p2, -p2]), w1, w2, T11, T22, V, sigma,
                                iterations)
    return h1.reshape(shape), h2.reshape(shape), F.reshape(shape)


def _flat_arrays(*arrays):
    """``arrays`` broadcast together, as new writable C-contiguous float64 vectors: the one
    argument type the kernels are compiled (and cached, ``attnlab warm-up``) for, whatever
    the input (read-only point sets, strided views, lists, float32)."""
    return [np.array(v, dtype=float, order="C").ravel() for v in np.broadcast_arrays(*arrays)]


def _multistart(s1, s2, w1, w2, T11, T22, V, sigma, iterations):
    """:func:`~attnlab.theory.kernels.multistart_newton` on all cores."""
    args = (s1, s2, w1, w2, T11, T22, float(V), float(sigma), int(iterations), kernels.NEWTON_TOL)
    return kernels.over_nodes(kernels.multistart_newton, args, (1, 1, 0, 0, 0, 0, None, None, None, None),
                              (0, 0, 0), w1.size, 4096)


def descend(w1, w2, T11, T22, V: float, sigma: float, *, start, iterations: int = kernels.DESCENT_ITERATIONS):
    """Local minimiser of the proximal problem reached by descent from ``start``.

    Damped, Levenberg-shifted Newton (:func:`attnlab.theory.kernels.newton`; it never
    increases the objective ``|h - w|^2 / (2V) + l(h, T)`` beyond its rounding) from ``start`` for every
    node: a local minimum, not necessarily the global one (:func:`proximal`). It is the
    minimum in whose basin ``start`` lies when the Newton steps stay in that basin; from a
    start far from every minimum (large ``V``) a long step can cross ``h1 = h2`` into the
    other basin, where the gradient flow would not go. Started at the teacher's field
    ``h*`` it is the minimiser that gradient descent from ``Q0 = Q*`` keeps (book Chapter 5).

    Parameters
    ----------
    w1, w2, T11, T22 : ndarray, shape (N,)
        Student fields and the diagonal of the teacher attention, as in :func:`proximal`.
    V : float
        Proximal scale, ``> 0``.
    sigma : float
        Token-content standard deviation.
    start : (ndarray, ndarray)
        Starting points ``(h1, h2)``, shape (N,) each.
    iterations : int
        Maximal Newton iterations.

    Returns
    -------
    h1, h2, F : ndarray, shape (N,)
        The local minimiser and the objective there (the local Moreau envelope).

    Raises
    ------
    ValueError
        If ``V`` or ``sigma`` is not finite and positive.
    """
    V, sigma = check_positive("V", V), check_positive("sigma", sigma)
    w1, w2, T11, T22, s1, s2 = _flat_arrays(w1, w2, T11, T22, *start)
    return _multistart(s1[None], s2[None], w1, w2, T11, T22, V, sigma, iterations)


def moreau_envelope(w1, w2, T11, T22, V: float, sigma: float, **kw) -> np.ndarray:
    """Moreau envelope ``M(w) = min_h [ |h - w|^2 / (2V) + l(h, T) ]``, shape of ``w1``
    (keywords as :func:`proximal`)."""
    return proximal(w1, w2, T11, T22, V, sigma, **kw)[2]


# ----------------------------------------------------------------------------- fields

def in_domain(ov, rho: float) -> bool:
    """Whether overlaps ``ov`` (``q, V, theta``) are in the domain of the equations:
    ``q > 0``, ``V > 0`` and ``rho - theta^2 / q > 0`` (the variance of the teacher
    field's own noise)."""
    return bool(ov.q > 0 and ov.V > 0 and rho - ov.theta ** 2 / ov.q > 0)


def field_scales(ov, rho: float) -> tuple[float, float, float]:
    """``sqrt(q)``, ``kappa = theta / sqrt(q)`` and ``c = sqrt(rho - theta^2 / q)``: the fields
    are ``w_l = sqrt(q) xi_l + s_l m``, ``h*_l = kappa xi_l + c eta_l``.

    Raises
    ------
    FloatingPointError
        If the overlaps left the domain (:func:`in_domain`).
    """
    if not in_domain(ov, rho):
        raise FloatingPointError(f"overlaps left the allowed set (q > 0, V > 0, theta^2 < q rho = {ov.q * rho:.3g}): "
                                 f"{ov}")
    sq = np.sqrt(ov.q)
    return sq, ov.theta / sq, np.sqrt(rho - ov.theta ** 2 / ov.q)


def fields(ov, rho: float, nodes):
    """Student and teacher fields at quadrature nodes ``(xi1, xi2, eta1, eta2)``.

    ``w_l = sqrt(q) xi_l + s_l m``; ``h*_l = (theta / sqrt(q)) xi_l + sqrt(rho - theta^2/q) eta_l``.

    Parameters
    ----------
    ov : Overlaps
    rho : float
        Teacher field variance ``sigma^2``.
    nodes : sequence of 4 ndarrays, shape (N,)

    Returns
    -------
    w1, w2, hs1, hs2 : ndarray, shape (N,)
    c : float
        ``sqrt(rho - theta^2 / q)``.

    Raises
    ------
    FloatingPointError
        If the overlaps left the domain (:func:`in_domain`).
    """
    xi1, xi2, eta1, eta2 = nodes
    sq, kappa, c = field_scales(ov, rho)
    w1 = sq * xi1 + SIGNS[0] * ov.m
    w2 = sq * xi2 + SIGNS[1] * ov.m
    hs1 = kappa * xi1 + c * eta1
    hs2 = kappa * xi2 + c * eta2
    return w1, w2, hs1, hs2, c


# ----------------------------------------------------------------------------- moments

@dataclass(frozen=True)
class ChannelMoments:
    """The expectations over ``xi, eta`` the hat updates need, ``f = (h_prox - w) / V``.

    Attributes
    ----------
    f_s, f_sq, f_xi, f_eta : float
        ``E[sum_l s_l f_l]``, ``E[sum_l f_l^2]``, ``E[sum_l f_l xi_l]``, ``E[sum_l f_l eta_l]``.
    M : float
        ``E[M]``, the mean Moreau envelope (the training loss's channel term).
    nodes : int
        Proximal problems solved.
    jumps : int
        Jumps of the minimiser resolved (split rule; 0 otherwise).
    spread : dict or None
        Standard error over the scrambles of each expectation (quasi-Monte Carlo rule).
    """

    f_s: float
    f_sq: float
    f_xi: float
    f_eta: float
    M: float
    nodes: int
    jumps: int = 0
    spread: dict | None = field(default=None, compare=False)

    @classmethod
    def from_sums(cls, sums: dict, odd=(), **extra) -> "ChannelMoments":
        """From the five expectations (:data:`MOMENTS`); those named in ``odd`` vanish by
        symmetry and are set to exactly zero (the folded rule does not see them)."""
        values = {name: float(sums[name]) for name in MOMENTS}
        values.update({name: 0.0 for name in odd})
        return cls(**values, **extra)


def moments_from_samples(h1, h2, M, w1, w2, xi, eta, V: float) -> dict:
    """The integrands of :class:`ChannelMoments` at nodes (shape (N,) each), with
    ``f = (h - w) / V``, ``xi = (xi1, xi2)``, ``eta = (eta1, eta2)``: a dict of arrays."""
    f1, f2 = (h1 - w1) / V, (h2 - w2) / V
    return dict(f_s=SIGNS[0] * f1 + SIGNS[1] * f2, f_sq=f1 ** 2 + f2 ** 2, f_xi=f1 * xi[0] + f2 * xi[1],
                f_eta=f1 * eta[0] + f2 * eta[1], M=M)


def gauss_hermite_expectations(ov, params, quad, warm=None, symmetry=None):
    """:class:`ChannelMoments` with the global minimiser by tensor Gauss-Hermite.

    ``quad.order_xi`` points per dimension of ``xi``, ``quad.order_eta`` of ``eta``
    (folded by ``symmetry``, default: read off ``ov``); a caller that warm-starts
    must keep ``symmetry`` fixed. Cheap, but the integrands jump where the global
    minimiser changes between mirror minima: errors of order 1e-2 on the
    positional branch (the coarse stage of the solver).

    Parameters
    ----------
    warm : (ndarray, ndarray), optional
        A previous minimiser at the same nodes (local search only, :func:`proximal`).

    Returns
    -------
    moments : ChannelMoments
    minimiser : (ndarray, ndarray)
        This call's minimiser, for the next warm start.
    """
    sym = symmetry_of(ov, params) if symmetry is None else symmetry
    (x1, x2), wx = tensor_rule((quad.order_xi, quad.order_xi))
    e1, e2, we = eta_rule(sym, quad.order_eta, quad.order_eta)
    nodes = (np.repeat(x1, e1.size), np.repeat(x2, e1.size), np.tile(e1, x1.size), np.tile(e2, x1.size))
    weights = np.outer(wx, we).ravel()
    w1, w2, hs1, hs2, _ = fields(ov, params.sigma ** 2, nodes)
    T11, T22 = teacher_diagonal(hs1, hs2, params.omega, params.A_array)
    h1, h2, M = proximal(w1, w2, T11, T22, ov.V, params.sigma, warm=warm)
    values = moments_from_samples(h1, h2, M, w1, w2, nodes[:2], nodes[2:], ov.V)
    sums = {name: weights @ g for name, g in values.items()}
    return ChannelMoments.from_sums(sums, sym.odd, nodes=int(weights.size)), (h1, h2)
