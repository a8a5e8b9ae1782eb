"""State-evolution equations of the attention GLM (L = 2, rank one): the channel
("hat") update, the ridge-prior (overlap) update, the errors and the free entropy.

Source: Cui et al. 2024 (arXiv:2402.03902), Result 4.2 and App. B; notation of
the book's Chapters 4-5 (book/md/04_glm_mapping.md,
book/md/05_state_evolution.md). Overlaps ``(q, m, V, theta)`` are the SE variables:
``q = sigma^2 |Q|^2 / d``, ``m = 1_d . Q / d``, ``theta = sigma^2 Q . Q* / d``,
``rho = sigma^2``; conjugates ``(qhat, mhat, Vhat, thetahat)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..params import ModelParams, check_choice, check_int
from .channel import _mean_loss, proximal, teacher_diagonal
from .quadrature import tensor_rule
from .followed_rule import QMCRule
from .split_rule import SplitRule, split_expectations
from .symmetry import eta_rule, symmetry_of

__all__ = ["Overlaps", "Hats", "Quadrature", "fields", "channel_expectations", "gauss_hermite_expectations",
           "hats_from_expectations", "update_overlaps",
           "generalization_error", "free_entropy", "SIGNS"]

#: Signs ``s_l`` of the positional encodings ``p_l = s_l 1_d / sqrt(d)``.
SIGNS = (1.0, -1.0)


@dataclass(frozen=True)
class Overlaps:
    """SE overlaps: ``q`` (student self-overlap), ``m`` (positional), ``V`` (variance), ``theta`` (semantic)."""

    q: float
    m: float
    V: float
    theta: float

    def as_array(self) -> np.ndarray:
        return np.array([self.q, self.m, self.V, self.theta])


@dataclass(frozen=True)
class Hats:
    """Conjugate overlaps ``qhat``, ``mhat``, ``Vhat``, ``thetahat``."""

    qhat: float
    mhat: float
    Vhat: float
    thetahat: float


@dataclass(frozen=True)
class Quadrature:
    """How the channel expectations are computed.

    Attributes
    ----------
    order_xi, order_eta : int
        Gauss-Hermite points per dimension of the student noise ``xi`` and the
        teacher noise ``eta`` (the coarse stage of ``"split"``).
    order_error : int
        Points per dimension for ``eps_g`` (smooth integrand: converges fast;
        at 20 within 1e-9 relative of order 40 on both branches at omega = 0.3).
    method : {"split", "gauss-hermite"}
        ``"split"`` (default): the discontinuity-aware rule of
        :mod:`attnlab.theory.split_rule` for the final fixed point, after a
        coarse tensor Gauss-Hermite solve. ``"gauss-hermite"``: tensor
        Gauss-Hermite only (its error on the positional branch is of order
        1e-2 at the default orders, and its fixed point there can jump
        between nearby solutions); for interactive use see :meth:`fast`.
    split : SplitRule
        Orders of the split rule (default: error < 1e-4 relative at omega = 0.3,
        lambda = 0.01; up to 5e-4 at omega = 0 and 2e-2 on ``eps_g`` at
        lambda = 0.001, as ``error_estimate=True`` reports;
        :meth:`~attnlab.theory.split_rule.SplitRule.fast`: ~1e-3).
        Used with the global proximal minimiser.
    qmc : QMCRule
        Point set for the followed minimiser (:mod:`attnlab.theory.followed_rule`;
        default ``2**15`` scrambled Sobol points x 4 scrambles: 3e-4 to 3e-3
        relative on the overlaps at omega = 0.3, as ``error_estimate=True`` reports).

    Raises
    ------
    ValueError
        Unknown ``method``, an order below 2, ``split`` not a :class:`SplitRule`
        or ``qmc`` not a :class:`QMCRule`.
    """

    order_xi: int = 8
    order_eta: int = 6
    order_error: int = 20
    method: str = "split"
    split: SplitRule = field(default_factory=SplitRule)
    qmc: QMCRule = field(default_factory=QMCRule)

    def __post_init__(self):
        check_choice("method", self.method, ("split", "gauss-hermite"))
        for name in ("order_xi", "order_eta", "order_error"):
            check_int(name, getattr(self, name), 2)
        if not isinstance(self.split, SplitRule):
            raise ValueError(f"split must be a SplitRule, got {self.split!r}")
        if not isinstance(self.qmc, QMCRule):
            raise ValueError(f"qmc must be a QMCRule, got {self.qmc!r}")

    @classmethod
    def fast(cls) -> "Quadrature":
        """The split rule at low orders (:meth:`~attnlab.theory.split_rule.SplitRule.fast`): for
        interactive use, about 3x faster per fixed point than the default (5x per map
        evaluation) with errors of order 1e-3 on the overlaps (tensor Gauss-Hermite,
        ``method="gauss-hermite"``, is faster still but its errors reach 1e-2 on the
        positional branch, and it has spurious fixed points)."""
        return cls(split=SplitRule.fast(), qmc=QMCRule(log2_points=14, scrambles=2))

    def refined(self, factor: float = 1.5) -> "Quadrature":
        """A finer rule (orders multiplied by ``factor``), to estimate the quadrature error."""
        up = lambda o: int(np.ceil(o * factor))
        return Quadrature(up(self.order_xi), up(self.order_eta), up(self.order_error), self.method,
                          self.split.refined(factor), self.qmc.refined(factor))


def fields(ov: Overlaps, rho: float, nodes: np.ndarray):
    """Student and teacher fields at quadrature nodes ``(xi1, xi2, eta1, eta2)``.

    ``w_l = sqrt(q) xi_l + s_l m``; ``h*_l = (theta / sqrt(q)) xi_l + sqrt(rho - theta^2/q) eta_l``.

    Returns
    -------
    w1, w2, hs1, hs2 : ndarray, shape (N,)
    c : float
        ``sqrt(rho - theta^2 / q)``.
    """
    xi1, xi2, eta1, eta2 = nodes
    sq, kappa, c = _geometry(ov, rho)
    w1 = sq * xi1 + SIGNS[0] * ov.m
    w2 = sq * xi2 + SIGNS[1] * ov.m
    hs1 = kappa * xi1 + c * eta1
    hs2 = kappa * xi2 + c * eta2
    return w1, w2, hs1, hs2, c


def _geometry(ov: Overlaps, rho: float):
    """``sqrt(q)``, ``theta / sqrt(q)`` and ``c = sqrt(rho - theta^2 / q)``; FloatingPointError
    if the overlaps left the allowed set (``q > 0``, ``V > 0``, ``theta^2 < q rho``)."""
    if not (ov.q > 0 and ov.V > 0):
        raise FloatingPointError(f"overlaps left the allowed set: q = {ov.q:.3g} and V = {ov.V:.3g} must be > 0")
    sq = np.sqrt(ov.q)
    c2 = rho - ov.theta ** 2 / ov.q
    if c2 <= 0:
        raise FloatingPointError(f"overlaps left the allowed set: theta^2 = {ov.theta ** 2:.3g} >= q rho = {ov.q * rho:.3g}")
    return sq, ov.theta / sq, np.sqrt(c2)


def gauss_hermite_expectations(ov: Overlaps, params: ModelParams, quad: Quadrature, warm=None, symmetry=None):
    """Channel expectations by tensor Gauss-Hermite (see :func:`channel_expectations`).

    ``warm`` is an optional previous minimiser at the same nodes (local search
    only); the second return value is this call's minimiser, for the next warm start.
    ``symmetry`` fixes the folded node set (default: read off ``ov``); a
    caller that warm-starts must keep it fixed.
    """
    sym = symmetry_of(ov, params) if symmetry is None else symmetry
    (x1, x2), wx = tensor_rule((quad.order_xi, quad.order_xi))
    e1, e2, we = eta_rule(sym, quad.order_eta, quad.order_eta)
    nodes = (np.repeat(x1, e1.size), np.repeat(x2, e1.size), np.tile(e1, x1.size), np.tile(e2, x1.size))
    weights = np.outer(wx, we).ravel()
    w1, w2, hs1, hs2, _ = fields(ov, params.sigma ** 2, nodes)
    T11, T22 = teacher_diagonal(hs1, hs2, params.omega, params.A_array)
    h1, h2, M = proximal(w1, w2, T11, T22, ov.V, params.sigma, warm=warm)
    f1, f2 = (h1 - w1) / ov.V, (h2 - w2) / ov.V
    xi1, xi2, eta1, eta2 = nodes
    E = lambda g: float(weights @ g)
    out = dict(f_s=E(SIGNS[0] * f1 + SIGNS[1] * f2), f_sq=E(f1 ** 2 + f2 ** 2), f_xi=E(f1 * xi1 + f2 * xi2),
               f_eta=E(f1 * eta1 + f2 * eta2), M=E(M), nodes=int(weights.size))
    out.update({name: 0.0 for name in sym.odd})  # exact zeros; the folded rule does not see them
    return out, (h1, h2)


def channel_expectations(ov: Overlaps, params: ModelParams, quad: Quadrature, fine: bool = True,
                         symmetry=None) -> dict:
    """Expectations over ``xi, eta`` of the proximal quantities, ``f = (h_prox - w) / V``.

    Returns
    -------
    dict
        ``f_s = E[sum_l s_l f_l]``, ``f_sq = E[sum_l f_l^2]``, ``f_xi = E[sum_l f_l xi_l]``,
        ``f_eta = E[sum_l f_l eta_l]``, ``M = E[M]`` (Moreau envelope) and ``nodes``.
        With ``fine=False`` or ``quad.method == "gauss-hermite"`` by tensor
        Gauss-Hermite, otherwise by the split rule. ``symmetry`` fixes the
        folded node set (default: read off ``ov``).
    """
    if fine and quad.method == "split":
        return split_expectations(ov, params, quad.split, symmetry)
    return gauss_hermite_expectations(ov, params, quad, symmetry=symmetry)[0]


def hats_from_expectations(ex: dict, ov: Overlaps, params: ModelParams, alpha: float) -> Hats:
    """Channel update (paper Result 4.2, "channel side"; book Chapter 5):

    ``mhat = alpha E[sum_l s_l f_l]``, ``qhat = alpha E[sum_l f_l^2]``,
    ``thetahat = alpha E[sum_l f_l eta_l] / c``,
    ``Vhat = -alpha E[sum_l f_l xi_l] / sqrt(q) + theta thetahat / q``,
    with ``c = sqrt(rho - theta^2 / q)``.
    """
    c = np.sqrt(params.sigma ** 2 - ov.theta ** 2 / ov.q)
    thetahat = alpha * ex["f_eta"] / c
    return Hats(qhat=alpha * ex["f_sq"], mhat=alpha * ex["f_s"],
                Vhat=-alpha * ex["f_xi"] / np.sqrt(ov.q) + ov.theta * thetahat / ov.q, thetahat=thetahat)


def update_overlaps(hats: Hats, params: ModelParams) -> Overlaps:
    """Ridge-prior update: overlaps from conjugates (paper Result 4.2, "regulariser side"; book Chapter 5).

    ``D = lambda + sigma^2 Vhat``; ``q = sigma^2 (sigma^2 qhat + mhat^2 + sigma^2 rho thetahat^2) / D^2``,
    ``m = mhat / D``, ``theta = sigma^2 rho thetahat / D``, ``V = sigma^2 / D``.
    """
    s2 = params.sigma ** 2
    rho = s2
    D = params.lam + s2 * hats.Vhat
    if not D > 0:
        raise FloatingPointError(f"lambda + sigma^2 Vhat = {D:.3g} is not positive")
    q = s2 * (s2 * hats.qhat + hats.mhat ** 2 + s2 * rho * hats.thetahat ** 2) / D ** 2
    return Overlaps(q=q, m=hats.mhat / D, V=s2 / D, theta=s2 * rho * hats.thetahat / D)


def generalization_error(ov: Overlaps, params: ModelParams, quad: Quadrature) -> float:
    """``eps_g = (sigma^2/2) E ||S(h) - T(h*)||_F^2`` with ``h_l = sqrt(q) xi_l + s_l m``
    (tensor Gauss-Hermite, ``quad.order_error`` points per dimension, one compiled loop)."""
    nodes, weights = tensor_rule((quad.order_error,) * 4)
    sq, kappa, c = _geometry(ov, params.sigma ** 2)
    A = params.A_array
    # the kernel puts w = (sqrt(q) xi_1 + m, sqrt(q) xi_2 - m): the signs SIGNS = (1, -1)
    return float(_mean_loss(*nodes, weights, sq, ov.m, kappa, c, params.omega, A[0, 0], A[1, 1], params.sigma ** 2))


def free_entropy(ov: Overlaps, hats: Hats, EM: float, params: ModelParams, alpha: float) -> float:
    """``Phi`` at a fixed point; the training loss is ``eps_t = -Phi``.

    ``Phi = (Vhat q - qhat V)/2 - m mhat - theta thetahat
    + (sigma^2 qhat + mhat^2 + sigma^2 rho thetahat^2) / (2D) - alpha E[M]``.
    """
    s2 = params.sigma ** 2
    D = params.lam + s2 * hats.Vhat
    return ((hats.Vhat * ov.q - hats.qhat * ov.V) / 2 - ov.m * hats.mhat - ov.theta * hats.thetahat
            + (s2 * hats.qhat + hats.mhat ** 2 + s2 * s2 * hats.thetahat ** 2) / (2 * D) - alpha * EM)
