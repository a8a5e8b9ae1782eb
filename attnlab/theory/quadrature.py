"""Gaussian expectations for the state evolution: tensor Gauss-Hermite rules.

``E[g(xi)]`` for ``xi ~ N(0, I_k)`` is approximated by ``sum_i w_i g(x_i)``
with the probabilists' Gauss-Hermite rule of a given order in each dimension
(``numpy.polynomial.hermite_e.hermegauss``), weights normalised to sum to one.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.polynomial.hermite_e import hermegauss

from ..params import check_int

__all__ = ["gauss_hermite", "tensor_rule"]


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


def tensor_rule(orders: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Tensor-product rule for ``E[g(x)]``, ``x ~ N(0, I_k)``, ``k = len(orders)``.

    Returns
    -------
    nodes : ndarray, shape (k, N)
        ``N = prod(orders)``; row ``j`` holds coordinate ``j`` of every node.
    weights : ndarray, shape (N,)
    """
    rules = [gauss_hermite(o) for o in orders]
    grids = np.meshgrid(*[r[0] for r in rules], indexing="ij")
    wgrids = np.meshgrid(*[r[1] for r in rules], indexing="ij")
    nodes = np.stack([g.ravel() for g in grids])
    weights = np.prod(np.stack([g.ravel() for g in wgrids]), axis=0)
    return nodes, weights
