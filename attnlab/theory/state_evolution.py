"""State-evolution equations of the attention GLM (L = 2, rank one): the channel
("hat") update, the ridge-prior (overlap) update, the errors and the free entropy.

Source: Cui et al. 2024 (arXiv:2402.03902), Result 4.2 and App. B; notation of
attnlab's SCIENCE.md Sec. 5. Overlaps ``(q, m, V, theta)`` are the SE variables:
``q = sigma^2 |Q|^2 / d``, ``m = 1_d . Q / d``, ``theta = sigma^2 Q . Q* / d``,
``rho = sigma^2``; conjugates ``(qhat, mhat, Vhat, thetahat)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..params import ModelParams
from .channel import loss, proximal, teacher_diagonal
from .quadrature import tensor_rule

__all__ = ["Overlaps", "Hats", "Quadrature", "fields", "update_hats", "update_overlaps",
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
    """Gauss-Hermite orders for the channel expectations.

    Attributes
    ----------
    order_xi : int
        Points per dimension for the student noise ``xi = (xi_1, xi_2)``.
    order_eta : int
        Points per dimension for the teacher noise ``eta = (eta_1, eta_2)``.
    order_error : int
        Points per dimension for ``eps_g`` (smooth integrand: converges fast).
    """

    order_xi: int = 24
    order_eta: int = 12
    order_error: int = 24

    def refined(self, factor: float = 1.5) -> "Quadrature":
        """A finer rule (orders multiplied by ``factor``), to estimate the quadrature error."""
        up = lambda o: int(np.ceil(o * factor))
        return Quadrature(up(self.order_xi), up(self.order_eta), up(self.order_error))


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
    sq = np.sqrt(ov.q)
    c2 = rho - ov.theta ** 2 / ov.q
    if c2 <= 0:
        raise FloatingPointError(f"overlaps left the allowed set: theta^2 = {ov.theta ** 2:.3g} >= q rho = {ov.q * rho:.3g}")
    c = np.sqrt(c2)
    w1 = sq * xi1 + SIGNS[0] * ov.m
    w2 = sq * xi2 + SIGNS[1] * ov.m
    hs1 = ov.theta / sq * xi1 + c * eta1
    hs2 = ov.theta / sq * xi2 + c * eta2
    return w1, w2, hs1, hs2, c


def update_hats(ov: Overlaps, params: ModelParams, alpha: float, quad: Quadrature):
    """Channel update: conjugates from overlaps (SCIENCE.md Sec. 5, "channel side").

    ``mhat = alpha E[sum_l s_l f_l]``, ``qhat = alpha E[sum_l f_l^2]``,
    ``thetahat = alpha E[sum_l f_l eta_l] / c``,
    ``Vhat = -alpha E[sum_l f_l xi_l] / sqrt(q) + theta thetahat / q``,
    with ``f = (h_prox - w) / V``.

    Returns
    -------
    hats : Hats
    EM : float
        ``E[M]``, the expected Moreau envelope (for the free entropy).
    """
    rho = params.sigma ** 2
    nodes, weights = tensor_rule((quad.order_xi, quad.order_xi, quad.order_eta, quad.order_eta))
    w1, w2, hs1, hs2, c = fields(ov, rho, nodes)
    T11, T22 = teacher_diagonal(hs1, hs2, params.omega, params.A_array)
    h1, h2, M = proximal(w1, w2, T11, T22, ov.V, params.sigma)
    f1, f2 = (h1 - w1) / ov.V, (h2 - w2) / ov.V
    E = lambda g: float(weights @ g)
    xi1, xi2, eta1, eta2 = nodes
    mhat = alpha * E(SIGNS[0] * f1 + SIGNS[1] * f2)
    qhat = alpha * E(f1 ** 2 + f2 ** 2)
    thetahat = alpha * E(f1 * eta1 + f2 * eta2) / c
    Vhat = -alpha * E(f1 * xi1 + f2 * xi2) / np.sqrt(ov.q) + ov.theta * thetahat / ov.q
    return Hats(qhat=qhat, mhat=mhat, Vhat=Vhat, thetahat=thetahat), E(M)


def update_overlaps(hats: Hats, params: ModelParams) -> Overlaps:
    """Ridge-prior update: overlaps from conjugates (SCIENCE.md Sec. 5, "regulariser side").

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
    """``eps_g = (sigma^2/2) E ||S(h) - T(h*)||_F^2`` with ``h_l = sqrt(q) xi_l + s_l m``."""
    rho = params.sigma ** 2
    nodes, weights = tensor_rule((quad.order_error,) * 4)
    w1, w2, hs1, hs2, _ = fields(ov, rho, nodes)
    T11, T22 = teacher_diagonal(hs1, hs2, params.omega, params.A_array)
    return float(weights @ loss(w1, w2, T11, T22, params.sigma))


def free_entropy(ov: Overlaps, hats: Hats, EM: float, params: ModelParams, alpha: float) -> float:
    """``Phi`` at a fixed point; the training loss is ``eps_t = -Phi``.

    ``Phi = (Vhat q - qhat V)/2 - m mhat - theta thetahat
    + (sigma^2 qhat + mhat^2 + sigma^2 rho thetahat^2) / (2D) - alpha E[M]``.
    """
    s2 = params.sigma ** 2
    D = params.lam + s2 * hats.Vhat
    return ((hats.Vhat * ov.q - hats.qhat * ov.V) / 2 - ov.m * hats.mhat - ov.theta * hats.thetahat
            + (s2 * hats.qhat + hats.mhat ** 2 + s2 * s2 * hats.thetahat ** 2) / (2 * D) - alpha * EM)
