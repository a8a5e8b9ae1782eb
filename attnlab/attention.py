"""Tied low-rank dot-product attention: the student ``f_Q`` and the teacher ``T``.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 2, Eqs. (2)-(4): the student
``f_Q(x) = softmax(x Q Q^T x^T / d) x`` and the target
``y = [(1 - omega) softmax(z Q* Q*^T z^T / d) + omega A] z``.

Every function accepts NumPy arrays or torch tensors and returns the same kind.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .params import ModelParams

__all__ = ["softmax_attention", "teacher_attention", "student_output", "teacher_output",
           "AttentionStudent", "AttentionTeacher"]


def _is_torch(a) -> bool:
    return isinstance(a, torch.Tensor)


def softmax_attention(h):
    """Row-wise softmax of the dot-product scores ``h h^T``.

    Parameters
    ----------
    h : ndarray or Tensor, shape (..., L, r)
        Projections ``h = x Q / sqrt(d)`` (student) or ``z Q* / sqrt(d)`` (teacher).

    Returns
    -------
    S : same type as ``h``, shape (..., L, L)
        ``S[..., l, k] = exp(h_l . h_k) / sum_k' exp(h_l . h_k')``; rows sum to 1.
    """
    if _is_torch(h):
        return torch.softmax(h @ h.transpose(-1, -2), dim=-1)
    scores = h @ np.swapaxes(h, -1, -2)
    scores = scores - scores.max(axis=-1, keepdims=True)
    e = np.exp(scores)
    return e / e.sum(axis=-1, keepdims=True)


def teacher_attention(hstar, omega: float, A):
    """Teacher attention matrix ``T(h*) = (1 - omega) softmax(h* h*^T) + omega A``.

    Parameters
    ----------
    hstar : ndarray or Tensor, shape (..., L)
        Teacher projections ``h* = z Q* / sqrt(d)`` (rank-one teacher).
    omega : float
        Positional weight in ``[0, 1]``.
    A : array_like, shape (L, L)
        Row-stochastic positional matrix.

    Returns
    -------
    T : same type as ``hstar``, shape (..., L, L)
    """
    S = softmax_attention(hstar[..., None])
    if _is_torch(S):
        A_t = torch.as_tensor(np.asarray(A, dtype=float), dtype=S.dtype, device=S.device)
        return (1.0 - omega) * S + omega * A_t
    return (1.0 - omega) * S + omega * np.asarray(A, dtype=float)


def student_output(x, Q):
    """Student output ``f_Q(x) = S(h) x`` with ``h = x Q / sqrt(d)``.

    Parameters
    ----------
    x : ndarray or Tensor, shape (n, L, d)
        Input tokens ``x_l = p_l + z_l``.
    Q : ndarray or Tensor, shape (d,) or (d, r)
        Tied query/key matrix.

    Returns
    -------
    out : same type as ``x``, shape (n, L, d)
    """
    d = x.shape[-1]
    Q2 = Q[:, None] if Q.ndim == 1 else Q
    h = (x @ Q2) / math.sqrt(d)
    return softmax_attention(h) @ x


def teacher_output(z, Qstar, omega: float, A):
    """Target ``y = T(h*) z`` with ``h* = z Q* / sqrt(d)`` (the teacher acts on ``z``).

    Parameters
    ----------
    z : ndarray or Tensor, shape (n, L, d)
        Token contents ``z_l ~ N(0, sigma^2 I_d)``.
    Qstar : ndarray or Tensor, shape (d,)
        Teacher weights ``Q* ~ N(0, I_d)``.
    omega, A
        See :func:`teacher_attention`.

    Returns
    -------
    y : same type as ``z``, shape (n, L, d)
    """
    d = z.shape[-1]
    hstar = (z @ Qstar) / math.sqrt(d)
    return teacher_attention(hstar, omega, A) @ z


class AttentionStudent(nn.Module):
    """Torch module of the student ``f_Q(x) = softmax(x Q Q^T x^T / d) x``.

    Parameters
    ----------
    d : int
        Embedding dimension.
    r : int
        Rank of ``Q`` (parameter of shape ``(d, r)``).
    Q0 : Tensor, shape (d, r), optional
        Initial value; zeros if omitted.
    """

    def __init__(self, d: int, r: int = 1, Q0=None, dtype=torch.float64):
        super().__init__()
        init = torch.zeros(d, r, dtype=dtype) if Q0 is None else torch.as_tensor(Q0, dtype=dtype).reshape(d, r).clone()
        self.Q = nn.Parameter(init)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the student to ``x`` of shape ``(n, L, d)``; returns shape ``(n, L, d)``."""
        return student_output(x, self.Q)


class AttentionTeacher(nn.Module):
    """Torch module of the teacher ``z -> T(h*) z`` (fixed weights, no gradient).

    Parameters
    ----------
    Qstar : array_like, shape (d,)
        Teacher weights.
    params : ModelParams
        Supplies ``omega`` and ``A``.
    """

    def __init__(self, Qstar, params: ModelParams, dtype=torch.float64):
        super().__init__()
        self.register_buffer("Qstar", torch.as_tensor(np.asarray(Qstar), dtype=dtype))
        self.omega = params.omega
        self.A = params.A

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Map contents ``z`` of shape ``(n, L, d)`` to targets of shape ``(n, L, d)``."""
        return teacher_output(z, self.Qstar, self.omega, self.A)
