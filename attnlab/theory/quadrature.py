"""Gaussian expectations for the state evolution.

``E[g(xi)]`` for ``xi ~ N(0, I_k)`` is approximated by ``sum_i w_i g(x_i)``
with the probabilists' Gauss-Hermite rule of a given order in each dimension
(``numpy.polynomial.hermite_e.hermegauss``), weights normalised to sum to one;
:func:`folded` halves a rule for integrands that are even in a coordinate, and
:func:`gaussian_panels` is a composite Gauss-Legendre rule with the Gaussian
density as weight (for integrands that are continuous but not smooth, where
Gauss-Hermite converges erratically).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.polynomial.hermite_e import hermegauss

from ..params import check_int

__all__ = ["gauss_hermite", "gauss_legendre", "tensor_rule", "folded", "gaussian_panels"]


@lru_cache(maxsize=64)
def gauss_hermite(order: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the ``order``-point rule for ``E[g(x)]``, ``x ~ N(0, 1)``.

    Returns
    -------
    nodes, weights : ndarray, shape (order,)
        ``weights.sum() == 1``; exact for polynomials of degree ``< 2 order``.

    Raises
    ------
    ValueError
        If ``order < 1``.
    """
    order = check_int("order", order, 1)
    x, w = hermegauss(order)
    x.flags.writeable = False
    w = w / w.sum()
    w.flags.writeable = False
    return x, w


@lru_cache(maxsize=64)
def gauss_legendre(order: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the ``order``-point Gauss-Legendre rule on ``[-1, 1]``
    (``numpy.polynomial.legendre.leggauss``, cached; read-only arrays).

    Raises
    ------
    ValueError
        If ``order < 1``.
    """
    order = check_int("order", order, 1)
    x, w = np.polynomial.legendre.leggauss(order)
    x.flags.writeable = w.flags.writeable = False
    return x, w

@lru_cache(maxsize=16)
def tensor_rule(orders: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Tensor-product rule for ``E[g(x)]``, ``x ~ N(0, I_k)``, ``k = len(orders)``.

    Returns
    -------
    nodes : ndarray, shape (k, N)
        ``N = prod(orders)``; row ``j`` holds coordinate ``j`` of every node
        (read-only: the arrays are cached).
    weights : ndarray, shape (N,)
    """
    rules = [gauss_hermite(o) for o in orders]
    grids = np.meshgrid(*[r[0] for r in rules], indexing="ij")
    wgrids = np.meshgrid(*[r[1] for r in rules], indexing="ij")
    nodes = np.stack([g.ravel() for g in grids])
    weights = np.prod(np.stack([g.ravel() for g in wgrids]), axis=0)
    nodes.flags.writeable = weights.flags.writeable = False
    return nodes, weights


def folded(nodes: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The half ``x >= 0`` of a rule symmetric under ``x -> -x``, for even integrands.

    Nodes ``x > 0`` get twice their weight, a node at ``0`` keeps its weight,
    so ``sum w g(x)`` is unchanged for every even ``g`` (at half the cost).

    Parameters
    ----------
    nodes, weights : ndarray, shape (n,)
        A rule whose nodes and weights are symmetric about zero.

    Returns
    -------
    nodes, weights : ndarray, shape (ceil(n / 2),)
    """
    nodes, weights = np.asarray(nodes, dtype=float), np.asarray(weights, dtype=float)
    keep = nodes >= -1e-14
    return np.abs(nodes[keep]), np.where(nodes[keep] > 1e-14, 2.0, 1.0) * weights[keep]


def gaussian_panels(lo: float, hi: float, panel: float, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss-Legendre rule for ``int_lo^hi g(x) phi(x) dx``, ``phi`` the N(0, 1) density.

    ``[lo, hi]`` is cut into equal panels of length ``<= panel``, each with
    ``order`` Gauss-Legendre points (:func:`gauss_legendre`).

    Returns
    -------
    nodes, weights : ndarray, shape (panels * order,)

    Raises
    ------
    ValueError
        If ``hi <= lo``, ``panel <= 0`` or ``order < 1``.
    """
    order = check_int("order", order, 1)
    if not hi > lo:
        raise ValueError(f"hi must be > lo (got lo={lo}, hi={hi})")
    if not panel > 0:
        raise ValueError(f"panel must be > 0 (got {panel})")
    edges = np.linspace(lo, hi, int(np.ceil((hi - lo) / panel - 1e-12)) + 1)
    x, w = gauss_legendre(order)
    half = np.diff(edges)[:, None] / 2
    nodes = edges[:-1, None] + (x + 1) * half
    weights = w * half * np.exp(-0.5 * nodes ** 2) / np.sqrt(2 * np.pi)
    return nodes.ravel(), weights.ravel()
