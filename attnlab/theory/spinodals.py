"""Spinodal lines: where each branch's minimum appears or disappears along ``alpha``.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 4 (the two branches and the first-order
transition between them); the spinodals are attnlab's (book Chapter 6, "Where each minimum
exists"), from the stability test of :mod:`attnlab.theory.stability`.

A branch's fixed point is a minimum where it exists (converged, on the branch, not the
collapsed ``Q = 0``) and is stable along its pinned overlap (``lambda_p < 1``). The
indicator ``g(alpha) = lambda_p - 1`` (``+1`` where the branch does not exist) is evaluated
on a geometric grid of ``alpha``, the branch followed by continuation
(:class:`~attnlab.theory.branches.BranchFollower`), and each sign change is bisected to
``xtol``. Between the semantic spinodal ``alpha_s_semantic`` (above it the semantic minimum
exists up to the end of the search) and the positional spinodal ``alpha_s_positional``
(below it the positional minimum exists) both minima exist: the coexistence region, where
the minimum gradient descent reaches depends on where it starts.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..params import DEFAULT_MINIMIZER, ModelParams, check_choice, check_in_range, check_int
from .branches import BranchFollower
from .equations import Quadrature, check_quadrature, check_se_params

__all__ = ["SPINODAL_ALPHA_MIN", "SPINODAL_ALPHA_MAX", "SPINODAL_BASINS", "Spinodals", "minimum_indicator", "minimum_intervals",
           "find_spinodals"]

#: The search interval of :func:`find_spinodals`: the positional branch of the default model
#: ends near alpha 2.3 at omega = 0.1 but near 16 at omega = 0.3.
SPINODAL_ALPHA_MIN, SPINODAL_ALPHA_MAX = 0.05, 20.0


#: The stability probes a spinodal can be found with (:func:`~attnlab.theory.stability.pinned_eigenvalue`).
SPINODAL_BASINS = ("redescend", "held")


def minimum_indicator(result, basins: str = "redescend") -> float:
    """``lambda_p - 1`` where ``result`` is on its branch (negative: a minimum), ``+1`` where the
    branch does not exist there (collapsed, off the branch, not converged, NaN eigenvalue);
    ``lambda_p`` by the probe ``basins`` (``SEResult.stability`` or ``.stability_held``)."""
    check_choice("basins", basins, SPINODAL_BASINS)
    if not (result.converged and result.on_branch and not result.collapsed):
        return 1.0
    lam = result.stability if basins == "redescend" else result.stability_held
    return 1.0 if np.isnan(lam) else float(lam - 1.0)


def minimum_intervals(params: ModelParams, branch: str, *, alpha_min: float = SPINODAL_ALPHA_MIN,
                      alpha_max: float = SPINODAL_ALPHA_MAX, grid_points: int = 16, xtol: float = 1e-2,
                      quad: Quadrature | None = None, minimizer: str | None = None,
                      basins: str = "redescend") -> list[tuple[float, float]]:
    """The intervals of ``alpha`` in ``[alpha_min, alpha_max]`` where ``branch`` is a minimum.

    Parameters
    ----------
    params : ModelParams
    branch : {"semantic", "positional"}
    alpha_min, alpha_max : float
        The search interval, ``0 < alpha_min < alpha_max <= 1e4``.
    grid_points : int
        Points of the geometric grid (at least 3); a minimum that exists on less than one
        grid step is missed.
    xtol : float
        Relative width to which each end is bisected, in ``(0, 0.5]``.
    quad : Quadrature, optional
    minimizer : {"followed", "global"}, optional
    basins : {"redescend", "held"}
        The stability probe (:func:`~attnlab.theory.stability.pinned_eigenvalue`): the default
        one, or the one that keeps each sample's proximal point in its basin. Between the two
        probes' ends the state evolution cannot tell whether the minimum exists (book Chapter 6,
        "How sure is a spinodal?").

    Returns
    -------
    list of (float, float)
        ``(start, end)``; an interval that reaches an end of the search has that end.
    """
    check_se_params(params)
    check_choice("branch", branch, ("semantic", "positional"))
    check_choice("basins", basins, SPINODAL_BASINS)
    alpha_min = check_in_range("alpha_min", alpha_min, 0.0, 1e4, open_lo=True)
    alpha_max = check_in_range("alpha_max", alpha_max, alpha_min, 1e4, open_lo=True)
    grid_points = check_int("grid_points", grid_points, 3)
    xtol = check_in_range("xtol", xtol, 0.0, 0.5, open_lo=True)
    follow = BranchFollower(params, branch, check_quadrature(quad), 1e-7, minimizer=minimizer, quiet=True)
    grid = np.geomspace(alpha_min, alpha_max, grid_points)
    # the semantic branch is found from above (it is the attractor at large alpha), the positional from below
    order = grid[::-1] if branch == "semantic" else grid
    g = {float(a): minimum_indicator(follow(float(a)), basins) for a in order}
    ends = []
    for lo, hi in zip(grid[:-1], grid[1:]):
        lo, hi = float(lo), float(hi)
        if (g[lo] < 0) == (g[hi] < 0):
            continue
        inside_lo = g[lo] < 0
        while hi / lo - 1 > xtol:
            mid = float(np.sqrt(lo * hi))
            if (minimum_indicator(follow(mid), basins) < 0) == inside_lo:
                lo = mid
            else:
                hi = mid
        ends.append(float(np.sqrt(lo * hi)))
    marks = ([float(grid[0])] if g[float(grid[0])] < 0 else []) + ends + (
        [float(grid[-1])] if g[float(grid[-1])] < 0 else [])
    return [(marks[i], marks[i + 1]) for i in range(0, len(marks) - 1, 2)]


@dataclass(frozen=True)
class Spinodals:
    """The spinodals of both branches at one ``params``.

    Attributes
    ----------
    omega, sigma, lam : float
    alpha_s_semantic : float
        Above it (to ``alpha_max``) the semantic minimum exists; NaN if it exists nowhere at
        ``alpha_max``; ``alpha_min`` if everywhere in the search.
    alpha_s_positional : float
        The end of the positional minimum's first interval; NaN if it never ends in the search
        (``> alpha_max``) or does not exist at all.
    semantic, positional : list of (float, float)
        :func:`minimum_intervals` of each branch.
    alpha_min, alpha_max, xtol : float
    minimizer : str
    basins : str
        The stability probe (:data:`SPINODAL_BASINS`).
    """

    omega: float
    sigma: float
    lam: float
    alpha_s_semantic: float
    alpha_s_positional: float
    semantic: list = field(default_factory=list)
    positional: list = field(default_factory=list)
    alpha_min: float = SPINODAL_ALPHA_MIN
    alpha_max: float = SPINODAL_ALPHA_MAX
    xtol: float = 1e-2
    minimizer: str = DEFAULT_MINIMIZER
    basins: str = "redescend"

    def to_dict(self) -> dict:
        """JSON-serialisable (intervals as lists of pairs)."""
        return {k: ([list(p) for p in v] if isinstance(v, list) else v) for k, v in asdict(self).items()}


def find_spinodals(params: ModelParams, *, alpha_min: float = SPINODAL_ALPHA_MIN,
                   alpha_max: float = SPINODAL_ALPHA_MAX, grid_points: int = 16, xtol: float = 1e-2,
                   quad: Quadrature | None = None, minimizer: str | None = None,
                   basins: str = "redescend") -> Spinodals:
    """Both branches' spinodals (:func:`minimum_intervals`; arguments as there).

    Returns
    -------
    Spinodals
    """
    kw = dict(alpha_min=alpha_min, alpha_max=alpha_max, grid_points=grid_points, xtol=xtol, quad=quad,
              minimizer=minimizer, basins=basins)
    sem, pos = (minimum_intervals(params, b, **kw) for b in ("semantic", "positional"))
    top = sem[-1] if sem and sem[-1][1] >= alpha_max else None
    return Spinodals(omega=params.omega, sigma=params.sigma, lam=params.lam,
                     alpha_s_semantic=top[0] if top else float("nan"),
                     alpha_s_positional=pos[0][1] if pos and pos[0][1] < alpha_max else float("nan"),
                     semantic=sem, positional=pos, alpha_min=alpha_min, alpha_max=alpha_max, xtol=xtol,
                     minimizer=minimizer or DEFAULT_MINIMIZER, basins=basins)
