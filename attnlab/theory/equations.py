"""State-evolution equations of the attention GLM (L = 2, rank one).

Two units answer the same verbs, as the channels and priors of the SE literature
(GCMProject's ``_update_hatoverlaps`` / ``_update_overlaps``, tramp's channels and
priors):

* :class:`AttentionChannel` (the loss side): ``update(ov, moments)`` gives the
  conjugates (the "hat" update) from the :class:`~attnlab.theory.channel.ChannelMoments`
  at the overlaps, ``free_entropy(moments)`` its term of the free entropy;
* :class:`RidgePrior` (the regulariser side): ``update(hats)`` gives the
  overlaps, ``free_entropy(ov, hats)`` its term.

:class:`StateEvolution` composes them into the fixed-point map ``G(x)`` on the
overlaps; :func:`generalization_error` and :func:`free_entropy` are the errors at
a fixed point.

Source: Cui et al. 2024 (arXiv:2402.03902), Result 4.2 and App. B; notation of
the book's Chapters 4-5 (book/md/04_glm_mapping.md,
book/md/05_state_evolution.md). Overlaps ``(q, m, V, theta)`` are the SE variables:
``q = sigma^2 |Q|^2 / d``, ``m = 1_d . Q / d``, ``theta = sigma^2 Q . Q* / d``,
``rho = sigma^2``; conjugates ``(qhat, mhat, Vhat, thetahat)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..params import DEFAULT_MINIMIZER, MINIMIZERS, SIGMA_LIMIT, SIGMA_MIN, ModelParams, check_params
from .channel import ChannelMoments, field_scales, gauss_hermite_expectations
from .followed_rule import followed_expectations
from .kernels import mean_loss
from .quadrature import QMCRule, Quadrature, Symmetry, tensor_rule
from .split_rule import split_expectations, start_compile_helper

__all__ = ["Overlaps", "Hats", "ALPHA_LIMIT", "SIGMA_LIMIT", "SIGMA_MIN", "AttentionChannel",
           "RidgePrior", "StateEvolution", "channel_update", "ridge_update", "generalization_error", "free_entropy",
           "check_se_params", "check_quadrature"]

#: Largest ``alpha`` of the state evolution (at 1e6 the iteration leaves its domain).
ALPHA_LIMIT = 1e4


@dataclass(frozen=True)
class Overlaps:
    """SE overlaps: ``q`` (student self-overlap), ``m`` (positional), ``V`` (variance), ``theta`` (semantic)."""

    q: float
    m: float
    V: float
    theta: float

    def as_array(self) -> np.ndarray:
        """``[q, m, V, theta]``."""
        return np.array([self.q, self.m, self.V, self.theta])


@dataclass(frozen=True)
class Hats:
    """Conjugate overlaps ``qhat``, ``mhat``, ``Vhat``, ``thetahat``."""

    qhat: float
    mhat: float
    Vhat: float
    thetahat: float


def check_se_params(params) -> ModelParams:
    """``params`` if the state evolution is implemented for it, else an error naming
    the parameter: ``TypeError`` for no :class:`~attnlab.params.ModelParams`,
    ``ValueError`` for ``L != 2``, rank ``!= 1``, ``lambda = 0`` or ``sigma`` outside
    ``[SIGMA_MIN, SIGMA_LIMIT]`` = ``[0.01, 5]``."""
    check_params(params)
    if params.L != 2 or params.r != 1:
        raise ValueError(f"the state evolution is implemented for L = 2 and rank r = 1 (got L={params.L}, r={params.r})")
    if not params.lam > 0:
        raise ValueError(f"the state evolution needs lambda > 0 (got lambda={params.lam}); "
                         "without the ridge the proximal scale V is unbounded")
    if not SIGMA_MIN <= params.sigma <= SIGMA_LIMIT:
        raise ValueError(f"sigma must be in [{SIGMA_MIN:g}, {SIGMA_LIMIT:g}] for the state evolution (its quadrature "
                         f"is built for sigma of order one), got {params.sigma!r}")
    return params


def check_quadrature(quad) -> Quadrature:
    """``quad``, or the default :class:`~attnlab.theory.quadrature.Quadrature` for ``None``;
    ``TypeError`` naming ``quad`` otherwise."""
    if quad is None:
        return Quadrature()
    if not isinstance(quad, Quadrature):
        raise TypeError(f"quad must be an attnlab.theory.Quadrature (e.g. Quadrature.fast()) or None, got {quad!r}")
    return quad


# ----------------------------------------------------------------------------- channel (loss) side

def channel_update(moments: ChannelMoments, ov: Overlaps, params: ModelParams, alpha: float) -> Hats:
    """Channel update (paper Result 4.2, "channel side"; book Chapter 5):

    ``mhat = alpha E[sum_l s_l f_l]``, ``qhat = alpha E[sum_l f_l^2]``,
    ``thetahat = alpha E[sum_l f_l eta_l] / c``,
    ``Vhat = -alpha E[sum_l f_l xi_l] / sqrt(q) + theta thetahat / q``,
    with ``c = sqrt(rho - theta^2 / q)`` and the moments at the overlaps ``ov``.
    """
    c = np.sqrt(params.sigma ** 2 - ov.theta ** 2 / ov.q)
    thetahat = alpha * moments.f_eta / c
    return Hats(qhat=alpha * moments.f_sq, mhat=alpha * moments.f_s,
                Vhat=-alpha * moments.f_xi / np.sqrt(ov.q) + ov.theta * thetahat / ov.q, thetahat=thetahat)


class AttentionChannel:
    """The output channel at sample complexity ``alpha``: moments, hat update, free-entropy term.

    Parameters
    ----------
    params : ModelParams
    alpha : float
    quad : Quadrature
    fine : bool
        Which rule of ``quad``: the final one (``True``: the split rule, or the
        followed minimiser's ``quad.qmc``) or the coarse one (``False``: tensor
        Gauss-Hermite, or :meth:`~attnlab.theory.quadrature.QMCRule.fast`).
    symmetry : Symmetry
        Fixes the folded node set and the expectations that vanish (kept fixed, so
        that the node set and the warm starts of the coarse rule stay fixed).
    minimizer : {"global", "followed"}
    branch : {"semantic", "positional"}
        Where the followed minimiser's descent starts (:func:`~attnlab.theory.followed_rule.initial_fields`).

    Attributes
    ----------
    calls : int
        Evaluations of :meth:`moments`.
    """

    def __init__(self, params: ModelParams, alpha: float, quad: Quadrature, *, fine: bool, symmetry: Symmetry,
                 minimizer: str = "global", branch: str = "semantic"):
        self.params, self.alpha, self.quad, self.fine = params, alpha, quad, fine
        self.symmetry, self.minimizer, self.branch = symmetry, minimizer, branch
        self.calls = 0
        self._warm = None  # the coarse rule's minimisers at its fixed nodes

    def moments(self, ov: Overlaps) -> ChannelMoments:
        """:class:`~attnlab.theory.channel.ChannelMoments` at the overlaps ``ov``.

        The coarse Gauss-Hermite rule searches every proximal problem globally at its
        first call; later calls start Newton from that minimiser, its mirror image and
        ``w`` (a deterministic map, as root finding needs)."""
        self.calls += 1
        if self.minimizer == "followed":
            rule = self.quad.qmc if self.fine else QMCRule.fast()
            return followed_expectations(ov, self.params, rule, self.branch, self.symmetry)
        if self.quad.method == "split":
            start_compile_helper()  # the split rule's last kernels, on the other core (cold cache only)
            if self.fine:
                return split_expectations(ov, self.params, self.quad.split, self.symmetry)
        warm = None if self.fine else self._warm
        moments, minimiser = gauss_hermite_expectations(ov, self.params, self.quad, warm=warm, symmetry=self.symmetry)
        if not self.fine and self._warm is None:
            self._warm = minimiser
        return moments

    def update(self, ov: Overlaps, moments: ChannelMoments) -> Hats:
        """The hat update (:func:`channel_update`)."""
        return channel_update(moments, ov, self.params, self.alpha)

    def free_entropy(self, moments: ChannelMoments) -> float:
        """The channel's term of the free entropy, ``-alpha E[M]``."""
        return -(self.alpha * moments.M)


# ----------------------------------------------------------------------------- prior (regulariser) side

def ridge_update(hats: Hats, params: ModelParams) -> Overlaps:
    """Ridge-prior update: overlaps from conjugates (paper Result 4.2, "regulariser side"; book Chapter 5).

    ``D = lambda + sigma^2 Vhat``; ``q = sigma^2 (sigma^2 qhat + mhat^2 + sigma^2 rho thetahat^2) / D^2``,
    ``m = mhat / D``, ``theta = sigma^2 rho thetahat / D``, ``V = sigma^2 / D``.

    Raises
    ------
    FloatingPointError
        If ``D <= 0`` (outside the domain of the equations).
    """
    s2 = params.sigma ** 2
    rho = s2
    D = params.lam + s2 * hats.Vhat
    if not D > 0:
        raise FloatingPointError(f"lambda + sigma^2 Vhat = {D:.3g} is not positive")
    q = s2 * (s2 * hats.qhat + hats.mhat ** 2 + s2 * rho * hats.thetahat ** 2) / D ** 2
    return Overlaps(q=q, m=hats.mhat / D, V=s2 / D, theta=s2 * rho * hats.thetahat / D)


class RidgePrior:
    """The ridge regulariser ``(lambda / 2) |Q|^2`` with Gaussian tokens: overlap update, free-entropy term."""

    def __init__(self, params: ModelParams):
        self.params = params

    def update(self, hats: Hats) -> Overlaps:
        """The overlap update (:func:`ridge_update`)."""
        return ridge_update(hats, self.params)

    def free_entropy(self, ov: Overlaps, hats: Hats) -> float:
        """The prior's term of the free entropy with the overlap-conjugate couplings,
        ``(Vhat q - qhat V)/2 - m mhat - theta thetahat + (sigma^2 qhat + mhat^2 + sigma^2 rho thetahat^2) / (2D)``."""
        s2 = self.params.sigma ** 2
        D = self.params.lam + s2 * hats.Vhat
        return ((hats.Vhat * ov.q - hats.qhat * ov.V) / 2 - ov.m * hats.mhat - ov.theta * hats.thetahat
                + (s2 * hats.qhat + hats.mhat ** 2 + s2 * s2 * hats.thetahat ** 2) / (2 * D))


def free_entropy(ov: Overlaps, hats: Hats, EM: float, params: ModelParams, alpha: float) -> float:
    """``Phi`` at a fixed point; the training loss is ``eps_t = -Phi``.

    ``Phi = (Vhat q - qhat V)/2 - m mhat - theta thetahat
    + (sigma^2 qhat + mhat^2 + sigma^2 rho thetahat^2) / (2D) - alpha E[M]``
    (:meth:`RidgePrior.free_entropy` plus the channel's ``-alpha E[M]``).
    """
    return RidgePrior(params).free_entropy(ov, hats) + -(alpha * EM)


# ----------------------------------------------------------------------------- the map and the errors

class StateEvolution:
    """The fixed-point map ``G``: the channel update, then the prior update.

    Parameters
    ----------
    channel : AttentionChannel
    prior : RidgePrior

    Attributes
    ----------
    calls : int
        Evaluations of the channel moments.
    """

    def __init__(self, channel: AttentionChannel, prior: RidgePrior):
        self.channel, self.prior = channel, prior
        self.params, self.alpha, self.minimizer = channel.params, channel.alpha, channel.minimizer
        self._last = None

    @classmethod
    def of(cls, params: ModelParams, alpha: float, quad: Quadrature, *, fine: bool, symmetry: Symmetry,
           minimizer: str = "global", branch: str = "semantic") -> "StateEvolution":
        """The map for the attention channel (:class:`AttentionChannel`'s arguments) and the ridge prior."""
        return cls(AttentionChannel(params, alpha, quad, fine=fine, symmetry=symmetry, minimizer=minimizer,
                                    branch=branch), RidgePrior(params))

    @property
    def calls(self) -> int:
        return self.channel.calls

    def hats(self, ov: Overlaps) -> tuple[Hats, ChannelMoments]:
        """The conjugates at ``ov`` and the moments they came from (cached for the last ``ov``)."""
        if self._last is None or self._last[0] != ov:
            moments = self.channel.moments(ov)
            self._last = (ov, self.channel.update(ov, moments), moments)
        return self._last[1], self._last[2]

    def __call__(self, ov: Overlaps) -> Overlaps:
        return self.prior.update(self.hats(ov)[0])

    def free_entropy(self, ov: Overlaps) -> float:
        """``Phi`` at ``ov`` (a fixed point): the prior's and the channel's terms."""
        hats, moments = self.hats(ov)
        return self.prior.free_entropy(ov, hats) + self.channel.free_entropy(moments)


def generalization_error(ov: Overlaps, params: ModelParams, quad: Quadrature) -> float:
    """``eps_g = (sigma^2/2) E ||S(h) - T(h*)||_F^2`` with ``h_l = sqrt(q) xi_l + s_l m``
    (tensor Gauss-Hermite, ``quad.order_error`` points per dimension, one compiled loop).

    Raises
    ------
    FloatingPointError
        If the overlaps are outside the domain of the equations.
    """
    nodes, weights = tensor_rule((quad.order_error,) * 4)
    sq, kappa, c = field_scales(ov, params.sigma ** 2)
    A = params.A_array
    # the kernel puts w = (sqrt(q) xi_1 + m, sqrt(q) xi_2 - m): the signs SIGNS = (1, -1)
    return float(mean_loss(*nodes, weights, sq, ov.m, kappa, c, params.omega, A[0, 0], A[1, 1], params.sigma ** 2))
