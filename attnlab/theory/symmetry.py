"""Symmetries of the channel integrals, and the folded node sets they allow.

The channel expectations are integrals over the student noise ``xi`` and the
teacher noise ``eta`` (two components each, ``L = 2``). Written in rotated
coordinates ``x_s = (x_1 + x_2)/sqrt(2)``, ``x_d = (x_1 - x_2)/sqrt(2)`` (the
standard Gaussian is rotation invariant) three maps leave the integrands of
the hat updates unchanged or change their sign:

* ``flip`` on the positional branch (``theta = 0``): ``eta -> -eta``. The
  teacher attention depends on ``h*`` only through ``h*_l (h*_1 - h*_2)``, so it
  is unchanged; ``E[f . eta]`` is odd (it vanishes).
* ``flip`` on the semantic branch (``m = 0``): ``(xi, eta) -> -(xi, eta)``:
  ``w, h* -> -w, -h*`` and the proximal point changes sign; ``E[f_1 - f_2]``
  is odd.
* ``swap`` when ``A_11 = A_22`` (then ``A`` is symmetric): exchanging the two
  positions combined with ``h -> -h``, i.e. ``x_s -> -x_s`` for both ``xi``
  and ``eta``; every hat integrand is even.

Any of them maps ``eta_s -> -eta_s``, so the rule needs only ``eta_s >= 0``;
``flip`` and ``swap`` together also map ``eta_d -> -eta_d`` (keeping
``eta_s``), so then ``eta_d >= 0`` suffices: a 4x saving.
Source of the equations: Cui et al. 2024 (arXiv:2402.03902), Result 4.2.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .quadrature import folded, gauss_hermite, gaussian_panels

__all__ = ["Symmetry", "symmetry_of", "rotate", "eta_rule"]


@dataclass(frozen=True)
class Symmetry:
    """Which symmetries hold at given overlaps.

    Attributes
    ----------
    flip : bool
        ``theta = 0`` or ``m = 0`` exactly (a pinned branch).
    swap : bool
        ``A_11 = A_22``.
    odd : tuple of str
        Expectations that vanish by symmetry (``"f_eta"`` if ``theta = 0``,
        ``"f_s"`` if ``m = 0``).
    """

    flip: bool
    swap: bool
    odd: tuple

    @property
    def fold_s(self) -> bool:
        """Only ``eta_s >= 0`` is needed."""
        return self.flip or self.swap

    @property
    def fold_d(self) -> bool:
        """Only ``eta_d >= 0`` is needed (given ``eta_s >= 0``)."""
        return self.flip and self.swap


def symmetry_of(ov, params) -> Symmetry:
    """The symmetries of the channel integrals at overlaps ``ov`` (see the module docstring)."""
    odd = tuple(name for name, zero in (("f_eta", ov.theta == 0.0), ("f_s", ov.m == 0.0)) if zero)
    A = params.A_array
    return Symmetry(flip=bool(odd), swap=bool(A[0, 0] == A[1, 1]), odd=odd)


def rotate(x_s, x_d):
    """Components ``(x_1, x_2)`` from rotated coordinates ``(x_s, x_d)``."""
    return (x_s + x_d) / np.sqrt(2.0), (x_s - x_d) / np.sqrt(2.0)


@lru_cache(maxsize=64)
def eta_rule(sym: Symmetry, order_s: int, order_d: int, panel: float | None = None, limit: float = 6.0):
    """Nodes and weights for ``E_eta[J(eta)]``, ``eta ~ N(0, I_2)``, folded by ``sym``.

    Gauss-Hermite (``order_s`` points) in ``eta_s``. In ``eta_d``: with
    ``panel=None`` Gauss-Hermite (``order_d`` points); otherwise composite
    Gauss-Legendre (``order_d`` points per panel of length ``<= panel`` on
    ``|eta_d| <= limit``, Gaussian mass beyond ``6`` is ``2e-9``). The
    integrand has kinks in ``eta_d`` (the proximal problem changes from one
    minimiser to two mirror minima across curves of constant teacher
    attention), where Gauss-Hermite converges erratically (measured: 2e-4
    relative scatter of ``E[f_1 - f_2]`` between orders 16 and 48) and the
    panels converge (1e-5 between 6 and 10 points per panel).

    Returns
    -------
    eta1, eta2, weights : ndarray, shape (N,)
        Read-only (the rules are cached).
    """
    xs, ws = gauss_hermite(order_s)
    if sym.fold_s:
        xs, ws = folded(xs, ws)
    if panel is None:
        xd, wd = gauss_hermite(order_d)
        if sym.fold_d:
            xd, wd = folded(xd, wd)
    else:
        xd, wd = gaussian_panels(0.0 if sym.fold_d else -limit, limit, panel, order_d)
        if sym.fold_d:
            wd = 2.0 * wd
    S, D = np.meshgrid(xs, xd, indexing="ij")
    e1, e2 = rotate(S.ravel(), D.ravel())
    out = e1, e2, np.outer(ws, wd).ravel()
    for a in out:
        a.flags.writeable = False
    return out
