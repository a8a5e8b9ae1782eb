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

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.stats
from scipy.special import ndtri

from ..params import POSITIONAL_INIT_SCALE, check_choice, check_int
from .channel import descend, teacher_diagonal

__all__ = ["QMCRule", "gaussian_points", "initial_fields", "followed_expectations"]


@dataclass(frozen=True)
class QMCRule:
    """Point set of the randomised quasi-Monte Carlo rule.

    Attributes
    ----------
    log2_points : int
        ``2**log2_points`` Sobol points per scramble.
    scrambles : int
        Independent scrambles (their spread is the integration error's scale).
    seed : int
        Seed of the scrambles; a different seed gives an independent point set.

    Raises
    ------
    ValueError
        If ``log2_points`` is not in ``[4, 22]``, ``scrambles < 1`` or ``seed < 0``.
    """

    log2_points: int = 15
    scrambles: int = 4
    seed: int = 0

    def __post_init__(self):
        check_int("log2_points", self.log2_points, 4)
        if self.log2_points > 22:
            raise ValueError(f"log2_points must be an integer in [4, 22], got {self.log2_points!r}")
        check_int("scrambles", self.scrambles, 1)
        check_int("seed", self.seed, 0)

    @property
    def points(self) -> int:
        """Total number of points, ``scrambles * 2**log2_points``."""
        return self.scrambles * 2 ** self.log2_points

    @classmethod
    def fast(cls) -> "QMCRule":
        """``2**13`` points, 2 scrambles: the coarse stage of a solve."""
        return cls(log2_points=13, scrambles=2)

    def refined(self, factor: float = 1.5) -> "QMCRule":
        """About ``factor**2`` times more points and an independent seed (for error estimates)."""
        extra = max(1, int(np.ceil(2 * np.log2(factor))))
        return QMCRule(min(22, self.log2_points + extra), self.scrambles, self.seed + 1)


@lru_cache(maxsize=8)
def gaussian_points(rule: QMCRule, dim: int = 6) -> np.ndarray:
    """Standard Gaussian points of ``rule``, shape ``(dim, rule.points)``, read-only.

    Rows ``0..3`` are ``xi_1, xi_2, eta_1, eta_2``; rows 4 and 5 are ``nu_1, nu_2``
    of the positional branch's initial fields.
    """
    blocks = [scipy.stats.qmc.Sobol(dim, scramble=True, seed=np.random.default_rng([rule.seed, k]))
              .random_base2(rule.log2_points) for k in range(rule.scrambles)]
    u = np.clip(np.concatenate(blocks), 1e-16, 1 - 1e-16)
    pts = np.ascontiguousarray(ndtri(u).T)
    pts.setflags(write=False)
    return pts


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
    from .state_evolution import SIGNS, fields

    check_choice("branch", branch, ("semantic", "positional"))
    _, _, hs1, hs2, _ = fields(ov, params.sigma ** 2, nodes[:4])
    if branch == "semantic":
        return hs1, hs2
    r = float(np.clip(params.sigma * ov.m / np.sqrt(ov.q), -1.0, 1.0))
    c, sr = POSITIONAL_INIT_SCALE, np.sqrt(1.0 - r * r)
    zeta1, zeta2 = r * nodes[0] + sr * nodes[4], r * nodes[1] + sr * nodes[5]
    return c * (SIGNS[0] + params.sigma * zeta1), c * (SIGNS[1] + params.sigma * zeta2)


def followed_expectations(ov, params, rule: QMCRule, branch: str, symmetry=None) -> dict:
    """Expectations over the fields of the hat updates with the followed minimiser.

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
    dict
        ``f_s, f_sq, f_xi, f_eta, M`` as :func:`attnlab.theory.state_evolution.channel_expectations`,
        ``nodes`` (proximal problems solved) and ``spread``: for each
        expectation the standard error over the scrambles.
    """
    from .state_evolution import SIGNS, fields

    nodes = gaussian_points(rule, 6)
    w1, w2, hs1, hs2, _ = fields(ov, params.sigma ** 2, nodes[:4])
    T11, T22 = teacher_diagonal(hs1, hs2, params.omega, params.A_array)
    h1, h2, M = descend(w1, w2, T11, T22, ov.V, params.sigma, start=initial_fields(ov, params, branch, nodes))
    f1, f2 = (h1 - w1) / ov.V, (h2 - w2) / ov.V
    xi1, xi2, eta1, eta2 = nodes[:4]
    values = dict(f_s=SIGNS[0] * f1 + SIGNS[1] * f2, f_sq=f1 ** 2 + f2 ** 2, f_xi=f1 * xi1 + f2 * xi2,
                  f_eta=f1 * eta1 + f2 * eta2, M=M)
    out, spread = {}, {}
    for name, g in values.items():
        per = g.reshape(rule.scrambles, -1).mean(axis=1)
        out[name] = float(per.mean())
        spread[name] = float(per.std(ddof=1) / np.sqrt(rule.scrambles)) if rule.scrambles > 1 else float("nan")
    for name in (symmetry.odd if symmetry is not None else ()):
        out[name], spread[name] = 0.0, 0.0
    out.update(nodes=int(w1.size), spread=spread)
    return out
