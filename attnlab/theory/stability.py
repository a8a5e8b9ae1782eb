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
regulariser is quadratic in ``p`` and its conjugate, so eliminating the conjugate gives a
training loss whose curvature along ``p`` is ``D (1 - lambda_p)`` (``D = lambda + sigma^2 Vhat
> 0``, the same factor for ``theta`` up to ``sigma^2 rho``): the fixed point is a minimum along
``p`` if and only if ``lambda_p < 1`` (:data:`STABLE_BELOW`); at ``lambda_p = 1`` the branch
ends (a spinodal).

``lambda_p`` is taken by a central difference of the unpinned map with the branch's final
rule and minimiser (two evaluations), with step ``STEP * sqrt(q)`` in ``m`` (the
positional shift of the student field ``w_l = sqrt(q) xi_l + s_l m``) or
``STEP * sqrt(q rho)`` in ``theta`` (a teacher-student correlation of ``STEP``).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .equations import StateEvolution
from .quadrature import Symmetry

__all__ = ["STEP", "STABLE_BELOW", "pinned_direction", "pinned_eigenvalue"]

#: Relative step of the central difference (measured: moving it from 0.02 to 0.1 changes
#: ``lambda_p`` by less than 1e-2 at omega 0.3; the quasi-Monte Carlo map moves in steps of
#: about 1e-5, i.e. 1e-3 of the response at this step).
STEP = 0.05
#: A pinned fixed point is a minimum along its pinned overlap if ``lambda_p`` is below this.
STABLE_BELOW = 1.0


def pinned_direction(branch: str) -> str:
    """The overlap pinned to zero on ``branch``: ``"m"`` (semantic) or ``"theta"`` (positional)."""
    return "m" if branch == "semantic" else "theta"


def pinned_eigenvalue(result) -> float:
    """``lambda_p``: the eigenvalue of the unpinned map's Jacobian in the pinned direction.

    Parameters
    ----------
    result : SEResult
        A converged fixed point, not collapsed, of a pinned branch (``m = 0`` semantic,
        ``theta = 0`` positional).

    Returns
    -------
    float
        ``(G_p(x + e) - G_p(x - e)) / (2 e)`` with ``e`` the step of the module docstring;
        below :data:`STABLE_BELOW` the fixed point is a minimum along ``p``. NaN where the
        result has no overlaps to probe (NaN, collapsed ``q = 0``), where ``p`` was not pinned
        (``pin=False``, or the semantic branch with ``A_11 != A_22``) or where the map leaves
        its domain at the probes.
    """
    ov = result.overlaps
    p = pinned_direction(result.branch)
    if not (np.isfinite(ov.q) and ov.q > 0 and not result.collapsed and getattr(ov, p) == 0.0):
        return float("nan")  # nothing to probe, or not pinned (pin=False; semantic with A_11 != A_22)
    rho = result.params.sigma ** 2
    step = STEP * np.sqrt(ov.q) if p == "m" else STEP * np.sqrt(ov.q * rho)
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
