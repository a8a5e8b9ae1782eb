"""The empirical risk ``R(Q)`` of the attention student, evaluated fast and exactly.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 3, Eq. (6):
``R(Q) = sum_mu (1 / (2d)) || y^mu - f_Q(x^mu) ||_F^2 + (lambda / 2) ||Q||_F^2``.

Speed comes from an exact finite-``d`` identity: for one sample
``|| S X - Y ||_F^2 = tr(S G S^T) - 2 tr(S C) + ||Y||_F^2`` with the ``L x L``
matrices ``G = X X^T`` and ``C = X Y^T``. They are computed once, so an
evaluation touches the ``(n, L, d)`` inputs only through ``h = X Q / sqrt(d)``
and, for the gradient, ``X^T (dR/dh) / sqrt(d)``.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .attention import softmax_attention
from .params import check_choice, check_positive, check_xy

__all__ = ["AttentionRisk", "resolve_device", "TORCH_DTYPES"]

TORCH_DTYPES = {"float64": torch.float64, "float32": torch.float32}


def resolve_device(device) -> torch.device:
    """Return a ``torch.device``; raise ``ValueError`` if CUDA is asked for but absent."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but no CUDA device is available; use device='cpu'")
    return dev


class AttentionRisk:
    """Exact empirical risk ``R(Q)`` and its gradient for one dataset.

    Parameters
    ----------
    x : ndarray, shape (n, L, d)
        Input tokens.
    y : ndarray, shape (n, L, d)
        Targets.
    lam : float
        Ridge strength ``lambda >= 0``.
    device : str or torch.device
        ``"cpu"`` (default) or a CUDA device.
    dtype : {"float64", "float32"}
        Precision of the computation.

    Raises
    ------
    ValueError
        If ``x`` or ``y`` has a non-finite entry, ``x`` is not of shape ``(n, L, d)``
        or ``y`` not of the shape of ``x``, ``lam < 0``, or ``dtype``/``device`` is unknown.

    Notes
    -----
    The per-sample sufficient statistics ``G = X X^T``, ``C^T = Y X^T`` (shape
    ``(n, L, L)``) and ``||Y||^2`` (shape ``(n,)``) are computed in float64.
    """

    def __init__(self, x, y, lam: float, device="cpu", dtype="float64"):
        self.device = resolve_device(device)
        self.dtype = TORCH_DTYPES[check_choice("dtype", dtype, tuple(TORCH_DTYPES))] if not isinstance(
            dtype, torch.dtype) else dtype
        lam = check_positive("lambda (lam)", lam, strict=False)
        x64, y64 = (torch.as_tensor(a, dtype=torch.float64) for a in check_xy(x, y))
        self.n, self.L, self.d = x64.shape
        self.lam = float(lam)
        kw = dict(device=self.device, dtype=self.dtype)
        self.X = x64.reshape(self.n * self.L, self.d).to(**kw).contiguous()
        self.G = (x64 @ x64.transpose(1, 2)).to(**kw)
        self.Ct = (y64 @ x64.transpose(1, 2)).to(**kw)  # Ct[n, l, k] = y_l . x_k
        self.yy = (y64 ** 2).sum((1, 2)).to(**kw)
        self._sqrt_d = math.sqrt(self.d)

    def per_sample_loss(self, Q: torch.Tensor) -> torch.Tensor:
        """``(1 / (2d)) ||Y - S X||_F^2`` for each sample, shape ``(n,)``; ``Q`` has shape ``(d, r)``."""
        h = (self.X @ Q).reshape(self.n, self.L, -1) / self._sqrt_d
        return self.loss_of_attention(softmax_attention(h))

    def loss_of_attention(self, S: torch.Tensor) -> torch.Tensor:
        """``(1 / (2d)) ||Y - S X||_F^2`` per sample for attention matrices ``S``.

        ``S`` has shape ``(n, L, L)`` or ``(L, L)`` (one matrix for all samples,
        e.g. the linear baseline ``B``); returns shape ``(n,)``.
        """
        sq = ((S @ self.G) * S).sum((-2, -1)) - 2.0 * (S * self.Ct).sum((-2, -1)) + self.yy
        return sq / (2.0 * self.d)

    def risk(self, Q: torch.Tensor) -> torch.Tensor:
        """``R(Q)`` as a differentiable torch scalar; ``Q`` has shape ``(d, r)``."""
        return self.per_sample_loss(Q).sum() + 0.5 * self.lam * (Q * Q).sum()

    def value_and_grad(self, Q: torch.Tensor) -> tuple[float, torch.Tensor]:
        """Return ``(R(Q), dR/dQ)``; the gradient has the shape of ``Q``, ``(d, r)``.

        The gradient is written out by hand for speed (checked against autograd
        of the dense formula and finite differences in the tests):
        ``dR/dS = (S G - C^T) / d``; the softmax backward
        ``dR/dA = S * (dR/dS - rowsum(S * dR/dS))`` for the scores ``A = h h^T``;
        ``dR/dh = (dR/dA + dR/dA^T) h``; ``dR/dQ = X^T dR/dh / sqrt(d) + lam Q``.
        """
        with torch.no_grad():
            h = (self.X @ Q).reshape(self.n, self.L, -1) / self._sqrt_d
            S = softmax_attention(h)
            SG = S @ self.G
            R = (((SG * S).sum() - 2.0 * (S * self.Ct).sum() + self.yy.sum()) / (2.0 * self.d)
                 + 0.5 * self.lam * (Q * Q).sum())
            dS = (SG - self.Ct) / self.d
            dA = S * (dS - (S * dS).sum(-1, keepdim=True))
            dh = (dA + dA.transpose(1, 2)) @ h
            g = self.X.T @ dh.reshape(self.n * self.L, -1) / self._sqrt_d + self.lam * Q
        return float(R), g

    def as_tensor(self, Q) -> torch.Tensor:
        """Convert ``Q`` (shape ``(d,)`` or ``(d, r)``) to a ``(d, r)`` tensor on this device."""
        Qt = torch.as_tensor(np.asarray(Q) if not isinstance(Q, torch.Tensor) else Q,
                             dtype=self.dtype, device=self.device)
        if Qt.ndim == 1:
            Qt = Qt[:, None]
        if Qt.ndim != 2 or Qt.shape[0] != self.d:
            raise ValueError(f"Q must have shape ({self.d},) or ({self.d}, r), got {tuple(Qt.shape)}")
        return Qt
