"""The training loss split into its data term and its ridge penalty.

The training loss that decides which minimum is the lower one is the *regularised*
risk per dimension (Cui et al. 2024, Sec. 3; ``SCIENCE.md`` Sec. 3),

``eps_t = R(Q) / d = (1/d) sum_mu (1/(2d)) ||y^mu - f_Q(x^mu)||^2 + (lam/2) |Q|^2 / d``,

so ``eps_t = data + penalty`` with ``penalty = (lam/2) |Q|^2/d``. At a fixed point of
the state evolution ``|Q|^2/d = q / sigma^2`` (``SEResult.qnorm``), hence
``penalty = lam * qnorm / 2`` and ``data = eps_t - penalty``; at a trained ``Q``
both parts are measured directly. Comparing the two parts across branches says
*why* one minimum has the lower regularised risk: a better fit of the data, or a
smaller norm.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["RiskSplit", "se_risk_split", "se_sample_losses", "trained_risk_split", "risk_split_table"]


@dataclass(frozen=True)
class RiskSplit:
    """``eps_t = data + penalty`` (all per dimension ``d``).

    Attributes
    ----------
    data : float
        Data term ``(1/d) sum_mu (1/(2d)) ||y^mu - f_Q(x^mu)||_F^2``.
    penalty : float
        Ridge term ``(lam/2) |Q|_F^2 / d``.
    total : float
        ``eps_t = data + penalty``.
    """

    data: float
    penalty: float
    total: float


def _penalty(lam, qnorm):
    lam = np.asarray(lam, dtype=float)
    qnorm = np.asarray(qnorm, dtype=float)
    if np.any(~np.isfinite(lam)) or np.any(lam < 0):
        raise ValueError(f"lam must be finite and >= 0, got {lam}")
    if np.any(~np.isfinite(qnorm)) or np.any(qnorm < 0):
        raise ValueError(f"qnorm (|Q|^2/d) must be finite and >= 0, got {qnorm}")
    return 0.5 * lam * qnorm


def se_risk_split(result) -> RiskSplit:
    """Split the training loss of a state-evolution fixed point.

    Parameters
    ----------
    result : SEResult
        A fixed point from :func:`attnlab.theory.solve_state_evolution` (uses its
        ``eps_t = -Phi``, ``qnorm = |Q|^2/d = q/sigma^2`` and ``params.lam``).

    Returns
    -------
    RiskSplit
        ``penalty = lam * qnorm / 2`` and ``data = eps_t - penalty``.

    Raises
    ------
    ValueError
        If ``eps_t`` or ``qnorm`` is not finite (an unconverged result).

    Notes
    -----
    Source: the risk of Cui et al. 2024, Sec. 3, and ``eps_t = -Phi`` at the fixed point
    (their Result 4.2); the split is checked against gradient descent at large ``d`` in
    ``tests/test_risk_split.py``.
    """
    eps_t = float(result.eps_t)
    if not np.isfinite(eps_t):
        raise ValueError(f"result.eps_t must be finite, got {eps_t}")
    penalty = float(_penalty(result.params.lam, result.qnorm))
    return RiskSplit(data=eps_t - penalty, penalty=penalty, total=eps_t)


def se_sample_losses(result, *, n_samples: int = 100_000, seed: int = 0) -> dict:
    """Mean loss of a training sample and of a fresh sample at a fixed point, by Monte Carlo.

    A training sample sits at the proximal point ``h = prox(w, h*)`` of its leave-one-out
    field ``w`` (book Chapter 5); a fresh sample's preactivation has the law of ``w``
    itself. So the mean training loss per sample is ``E[l(prox(w), h*)]`` and the test
    error ``E[l(w, h*)] = eps_g``. The proximal point is the one of the result's
    minimiser (``"followed"``: descent from the start's preactivations ``h0``;
    ``"global"``: the global minimiser).

    Parameters
    ----------
    result : SEResult
        A converged fixed point (its ``overlaps``, ``branch``, ``params``, ``minimizer``).
    n_samples : int
        Monte Carlo draws of ``(xi, eta, nu)``, ``>= 1000``.
    seed : int
        Seed of the draws.

    Returns
    -------
    dict
        ``train``: ``E[l(prox(w), h*)]``; ``test``: ``E[l(w, h*)]``; ``data``:
        ``alpha * train``, the SE's data term, which must equal
        ``se_risk_split(result).data`` up to the Monte Carlo error; ``stderr_train``,
        ``stderr_test``: their standard errors.

    Raises
    ------
    ValueError
        If ``n_samples < 1000``.
    """
    from ..params import check_choice
    from .channel import descend, fields, loss, proximal, teacher_diagonal
    from .followed_rule import initial_fields

    if int(n_samples) != n_samples or n_samples < 1000:
        raise ValueError(f"n_samples must be an integer >= 1000, got {n_samples}")
    p, ov = result.params, result.overlaps
    minimizer = check_choice("minimizer", result.minimizer, ("followed", "global"))
    nodes = np.random.default_rng(seed).standard_normal((6, int(n_samples)))
    w1, w2, hs1, hs2, _ = fields(ov, p.sigma ** 2, nodes[:4])
    T11, T22 = teacher_diagonal(hs1, hs2, p.omega, p.A)
    if minimizer == "followed":
        h01, h02 = initial_fields(ov, p, result.branch, nodes)
        h1, h2, _ = descend(w1, w2, T11, T22, ov.V, p.sigma, start=(h01, h02))
    else:
        h1, h2, _ = proximal(w1, w2, T11, T22, ov.V, p.sigma)
    train = loss(h1, h2, T11, T22, p.sigma)
    test = loss(w1, w2, T11, T22, p.sigma)
    n = float(n_samples)
    return dict(train=float(train.mean()), test=float(test.mean()), data=float(result.alpha * train.mean()),
                stderr_train=float(train.std() / np.sqrt(n)), stderr_test=float(test.std() / np.sqrt(n)))


def trained_risk_split(Q, data, lam: float) -> RiskSplit:
    """Split the regularised risk of trained weights, both parts measured directly.

    Parameters
    ----------
    Q : array_like, shape (d,) or (d, r)
        Weights (e.g. ``TrainResult.Q``).
    data : Dataset
        The training set ``Q`` was fitted on (``x``, ``y`` of shape ``(n, L, d)``).
    lam : float
        Ridge strength ``>= 0``.

    Returns
    -------
    RiskSplit
        ``data = (1/d) sum_mu (1/(2d)) ||y - S(h) x||^2`` with ``h = x Q / sqrt(d)``,
        ``penalty = (lam/2) |Q|^2/d``.

    Raises
    ------
    ValueError
        If the shapes of ``Q`` and ``data`` disagree, or ``lam`` is negative.
    """
    x, y = np.asarray(data.x, dtype=float), np.asarray(data.y, dtype=float)
    d = x.shape[-1]
    Q = np.asarray(Q, dtype=float)
    Q = Q[:, None] if Q.ndim == 1 else Q
    if Q.ndim != 2 or Q.shape[0] != d:
        raise ValueError(f"Q must have shape (d,) or (d, r) with d = {d}, got {Q.shape}")
    h = x @ Q / np.sqrt(d)  # (n, L, r)
    logits = h @ np.swapaxes(h, 1, 2)  # (n, L, L)
    logits -= logits.max(axis=-1, keepdims=True)
    S = np.exp(logits)
    S /= S.sum(axis=-1, keepdims=True)
    residual = y - S @ x
    data_term = float(np.sum(residual**2) / (2 * d) / d)
    penalty = float(_penalty(lam, np.sum(Q**2) / d))
    return RiskSplit(data=data_term, penalty=penalty, total=data_term + penalty)


def risk_split_table(table: dict) -> dict:
    """Add the split to a table of SE curves or of simulation runs.

    Parameters
    ----------
    table : dict of array_like
        Columns ``eps_t``, ``qnorm`` and ``lambda`` (or ``lam``), as in
        ``book/_data/se_curves.csv`` and the ``results/*.csv`` runs.

    Returns
    -------
    dict of ndarray
        A copy of ``table`` with the columns ``data`` and ``penalty`` added.

    Raises
    ------
    KeyError
        If a needed column is missing.
    """
    lam_key = "lambda" if "lambda" in table else "lam"
    for key in ("eps_t", "qnorm", lam_key):
        if key not in table:
            raise KeyError(f"risk_split_table needs the column {key!r}")
    out = dict(table)
    penalty = _penalty(table[lam_key], table["qnorm"])
    out["penalty"] = penalty
    out["data"] = np.asarray(table["eps_t"], dtype=float) - penalty
    return out
