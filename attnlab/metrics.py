"""Observables of a trained student: overlaps, generalization error.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 4: the positional overlap
``m = 1_d . Q / d``, the semantic overlap ``theta = Q* . Q / d``, the norm
``|Q|^2 / d`` and the test error ``eps_g = E[(1/(2d)) ||y - f_Q(x)||_F^2]``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .data import positional_encodings, sample_dataset
from .objective import AttentionRisk
from .params import ModelParams, check_finite_array, check_int, check_memory, check_params

__all__ = ["Overlaps", "overlaps", "canonical_sign", "generalization_error", "OUTCOMES", "OUTCOME_MIN",
           "classify_outcome"]

#: Where a trained student ends: the kinds of :func:`classify_outcome`.
OUTCOMES = ("semantic", "positional", "mixed", "collapsed")
#: Overlap below which ``|m|`` or ``|theta|`` counts as zero in :func:`classify_outcome` (the
#: random start's own ``|m|, |theta|`` are ``0.1 / sqrt(d)``: 0.007 at ``d = 200``).
OUTCOME_MIN = 0.05


def classify_outcome(m, theta, min_overlap: float = OUTCOME_MIN):
    """Which minimum a trained student reached, from its overlaps (arrays broadcast).

    ``"collapsed"``: ``|m|`` and ``|theta|`` both below ``min_overlap``; ``"semantic"``:
    ``|theta| >= min_overlap > |m|``; ``"positional"``: ``|m| >= min_overlap > |theta|``;
    ``"mixed"``: both at least ``min_overlap``.

    Parameters
    ----------
    m, theta : float or ndarray
        ``m = 1_d . Q / d`` and ``theta = Q* . Q / d`` (the trainers' normalisation).
    min_overlap : float
        Threshold, ``> 0``.

    Returns
    -------
    ndarray of str
        One of :data:`OUTCOMES` per element.

    Raises
    ------
    ValueError
        If ``min_overlap <= 0`` or an overlap is not finite.
    """
    if not min_overlap > 0:
        raise ValueError(f"min_overlap must be > 0, got {min_overlap!r}")
    m, theta = np.abs(np.asarray(m, dtype=float)), np.abs(np.asarray(theta, dtype=float))
    if not (np.all(np.isfinite(m)) and np.all(np.isfinite(theta))):
        raise ValueError("m and theta must be finite")
    big_m, big_t = m >= min_overlap, theta >= min_overlap
    return np.where(big_m & big_t, "mixed", np.where(big_t, "semantic", np.where(big_m, "positional", "collapsed")))


@dataclass(frozen=True)
class Overlaps:
    """Order parameters of a student ``Q`` of shape ``(d, r)``.

    Attributes
    ----------
    m : ndarray, shape (r,)
        Positional overlaps ``p_1 . Q_c / sqrt(d)`` (``= 1_d . Q_c / d`` for ``L = 2``).
    theta : ndarray, shape (r,)
        Semantic overlaps ``Q* . Q_c / d``.
    qnorm : float
        ``||Q||_F^2 / d``.
    """

    m: np.ndarray
    theta: np.ndarray
    qnorm: float


def _as_matrix(Q) -> np.ndarray:
    Q = check_finite_array("Q", Q, shapes=[(None,), (None, None)])
    return Q[:, None] if Q.ndim == 1 else Q


def overlaps(Q, Qstar, P=None) -> Overlaps:
    """Overlaps ``m``, ``theta`` and ``|Q|^2/d`` of ``Q`` (shape ``(d,)`` or ``(d, r)``).

    Parameters
    ----------
    Q : array_like, shape (d,) or (d, r)
    Qstar : array_like, shape (d,)
    P : array_like, shape (L, d), optional
        Positional encodings (default: the paper's ``L = 2`` ones).
    """
    Qm = _as_matrix(Q)
    d = Qm.shape[0]
    Qstar = check_finite_array("Qstar", Qstar, shapes=[(d,)])
    P = positional_encodings(2, d) if P is None else check_finite_array("P", P, shapes=[(None, d)])
    m = P[0] @ Qm / np.sqrt(d)
    theta = Qstar @ Qm / d
    return Overlaps(m=m, theta=theta, qnorm=float((Qm ** 2).sum() / d))


def canonical_sign(Q, Qstar, P=None) -> np.ndarray:
    """Flip the sign of each column of ``Q`` so that its larger overlap is positive.

    ``R(Q)`` and ``f_Q`` are invariant under ``Q_c -> -Q_c`` for every column
    (tied attention: ``h h^T`` is unchanged), so overlaps are defined up to
    these signs. The column's overlap of larger magnitude among ``m``, ``theta``
    is made non-negative.

    Returns
    -------
    Q : ndarray, shape (d, r)
    """
    Qm = _as_matrix(Q).copy()
    ov = overlaps(Qm, Qstar, P)
    lead = np.where(np.abs(ov.m) >= np.abs(ov.theta), ov.m, ov.theta)
    return Qm * np.where(lead < 0, -1.0, 1.0)[None, :]


#: Bytes per test sample of :func:`generalization_error` (its loss, and the copy concatenating them).
BYTES_PER_TEST_SAMPLE = 16


def check_n_test(n_test) -> int:
    """``n_test`` if it is an integer ``>= 2`` whose losses fit in half of this machine's
    memory, else ``ValueError`` naming ``n_test`` and the limit."""
    n_test = check_int("n_test", n_test, 2)
    check_memory("n_test", n_test, BYTES_PER_TEST_SAMPLE, "the test losses")
    return n_test


def generalization_error(Q, params: ModelParams, Qstar, *, n_test: int = 20_000, seed: int = 0,
                         chunk: int = 2_000, device="cpu", dtype="float64",
                         B=None) -> tuple[float, float]:
    """Test error on fresh samples of the same teacher, with its Monte Carlo error.

    ``eps_g = mean_mu (1/(2d)) ||y^mu - f_Q(x^mu)||_F^2`` (or, if ``B`` is given,
    of the linear baseline ``f_B(x) = B x``) over ``n_test`` fresh
    samples, drawn in chunks from seeded streams (``stream = 1, 2, ...`` of
    ``seed``; the training set is stream 0), so memory stays at ``chunk * L * d``.

    Parameters
    ----------
    Q : array_like, shape (d,) or (d, r)
        Student weights; only its first dimension ``d`` is used when ``B`` is given.
    params : ModelParams
    Qstar : array_like, shape (d,)
        The teacher of the training set.
    B : array_like, shape (L, L), optional
        Evaluate the linear baseline ``f_B`` instead of the student.
    n_test : int
        Number of fresh samples, ``>= 2``.
    seed : int
    chunk : int
        Samples drawn at once.

    Returns
    -------
    eps_g : float
    sem : float
        Standard error of the mean over the test samples.

    Raises
    ------
    TypeError
        If ``params`` is not a ``ModelParams`` or ``Q``, ``Qstar``, ``B`` are not real arrays.
    ValueError
        If ``Q``, ``Qstar`` or ``B`` has a non-finite entry or the wrong shape, ``n_test`` is
        not an integer ``>= 2`` or too large for the memory, or ``chunk < 1``.
    """
    check_params(params)
    n_test = check_n_test(n_test)
    chunk = check_int("chunk", chunk, 1)
    Qm = _as_matrix(Q)
    d = Qm.shape[0]
    if B is not None:
        B = check_finite_array("B", B, shapes=[(params.L, params.L)])
    losses = []
    for k, start in enumerate(range(0, n_test, chunk)):
        size = min(chunk, n_test - start)
        ds = sample_dataset(params, size, d, Qstar=Qstar, seed=seed, stream=k + 1)
        risk = AttentionRisk(ds.x, ds.y, 0.0, device=device, dtype=dtype)
        with torch.no_grad():
            if B is None:
                loss = risk.per_sample_loss(risk.as_tensor(Qm))
            else:
                loss = risk.loss_of_attention(torch.as_tensor(np.asarray(B), dtype=risk.dtype, device=risk.device))
            losses.append(loss.double().cpu().numpy())
    loss = np.concatenate(losses)
    return float(loss.mean()), float(loss.std(ddof=1) / np.sqrt(loss.size))
