"""The linear positional baseline ``f_B(x) = B x`` and its ridge solution.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 4 ("linear baseline"): a
model that mixes tokens with a fixed ``L x L`` matrix ``B`` cannot see token
content; its best value is ``B* = E[T(h*)]`` up to ``O(1/d)``, with test error
``eps_g^lin = (sigma^2 / 2) E ||T(h*) - E T||_F^2``.
"""
from __future__ import annotations

import numpy as np

from .params import check_positive, check_xy

__all__ = ["fit_linear_baseline"]


def fit_linear_baseline(x, y, lam: float = 0.0) -> np.ndarray:
    """Closed-form ridge solution of the linear positional baseline.

    Minimises ``sum_mu (1/(2d)) ||y^mu - B x^mu||_F^2 + (lam/2) ||B||_F^2`` over
    ``L x L`` matrices ``B``; the normal equations give
    ``B = (sum_mu y x^T / d) (sum_mu x x^T / d + lam I)^{-1}``.

    Parameters
    ----------
    x : ndarray, shape (n, L, d)
        Input tokens.
    y : ndarray, shape (n, L, d)
        Targets.
    lam : float
        Ridge strength, ``>= 0``.

    Returns
    -------
    B : ndarray, shape (L, L)

    Raises
    ------
    ValueError
        If ``x`` is not of shape ``(n, L, d)``, ``y`` not of the shape of ``x``,
        either has a non-finite entry, or ``lam < 0``.
    """
    lam = check_positive("lam", lam, strict=False)
    x, y = check_xy(x, y)
    d = x.shape[2]
    G = np.einsum("nld,nkd->lk", x, x) / d
    C = np.einsum("nld,nkd->lk", y, x) / d
    try:
        return np.linalg.solve((G + lam * np.eye(G.shape[0])).T, C.T).T
    except np.linalg.LinAlgError:
        raise ValueError(f"the Gram matrix of x is singular with lam={lam}: lam must be > 0 for these data") from None
