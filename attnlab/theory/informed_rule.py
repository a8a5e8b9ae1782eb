"""Channel expectations for the *informed* proximal minimiser, by randomised quasi-Monte Carlo.

Gradient descent started from the teacher (``Q0 = Q*``) starts every training
sample at ``h = h*``. The loss is invariant under ``h -> -h``; its two mirror
minima lie on either side of the line ``h1 = h2``, where the attention is
uniform and the loss is high. A sample therefore stays in the basin it started
in unless the pull of the other samples removes that basin. The state
evolution of that minimum replaces the global proximal minimiser by the local
minimiser reached by descent from the teacher's field,

``h_prox = local argmin_h [ |h - w|^2 / (2V) + l(h, T(h*)) ]``, descent started at ``h = h*``

(damped Newton, :func:`attnlab.theory.channel.descend`); the hat and overlap
updates are unchanged (Cui et al. 2024, Result 4.2, with this minimiser in
place of the global one).

The minimiser jumps where ``h*`` crosses a basin boundary, a set that is not
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

from ..params import check_int
from .channel import descend, teacher_diagonal

__all__ = ["QMCRule", "informed_expectations"]


@dataclass(frozen=True)
class QMCRule:
    """Point set of the randomised quasi-Monte Carlo rule.

    Attributes
    ----------
    log2_points : int
        ``2**log2_points`` Sobol points per scramble (4-dimensional: ``xi_1, xi_2, eta_1, eta_2``).
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

    @classmethod
    def fast(cls) -> "QMCRule":
        """``2**13`` points, 2 scrambles: the coarse stage of a solve."""
        return cls(log2_points=13, scrambles=2)

    def refined(self, factor: float = 1.5) -> "QMCRule":
        """About ``factor**2`` times more points and an independent seed (for error estimates)."""
        extra = max(1, int(np.ceil(2 * np.log2(factor))))
        return QMCRule(min(22, self.log2_points + extra), self.scrambles, self.seed + 1)


@lru_cache(maxsize=8)
def gaussian_points(rule: QMCRule) -> np.ndarray:
    """Standard Gaussian points of ``rule``, shape ``(4, scrambles * 2**log2_points)``, read-only."""
    blocks = [scipy.stats.qmc.Sobol(4, scramble=True, seed=np.random.default_rng([rule.seed, k]))
              .random_base2(rule.log2_points) for k in range(rule.scrambles)]
    u = np.clip(np.concatenate(blocks), 1e-16, 1 - 1e-16)
    pts = np.ascontiguousarray(ndtri(u).T)
    pts.setflags(write=False)
    return pts


def informed_expectations(ov, params, rule: QMCRule, symmetry=None) -> dict:
    """Expectations over ``(xi, eta)`` of the hat updates with the informed minimiser.

    Parameters
    ----------
    ov : Overlaps
    params : ModelParams
    rule : QMCRule
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

    nodes = gaussian_points(rule)
    w1, w2, hs1, hs2, _ = fields(ov, params.sigma ** 2, nodes)
    T11, T22 = teacher_diagonal(hs1, hs2, params.omega, params.A_array)
    h1, h2, M = descend(w1, w2, T11, T22, ov.V, params.sigma, start=(hs1, hs2))
    f1, f2 = (h1 - w1) / ov.V, (h2 - w2) / ov.V
    xi1, xi2, eta1, eta2 = nodes
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
