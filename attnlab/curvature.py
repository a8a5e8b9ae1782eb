"""How the empirical risk curves at a minimum: its Hessian and the susceptibility of an overlap.

At a minimum ``Q`` of ``R(Q) = sum_mu (1/(2d)) ||y^mu - f_Q(x^mu)||^2 + (lambda/2) ||Q||^2``
(Cui et al. 2024, arXiv:2402.03902, Sec. 3, Eq. (6)) add a field that pulls on one overlap
``o(Q) = a . Q``, linear in ``Q``: ``R(Q) - d h o(Q)``. The minimum moves by
``dQ = d h H^-1 a`` (``H`` the Hessian of ``R``), so the overlap moves by ``do = chi h`` with the
*susceptibility*

    ``chi = d a^T H^-1 a``.

(The field carries a factor ``d`` because ``R`` is extensive.) For the positional overlap
``m = p_1 . Q / sqrt(d)`` (``a = p_1 / sqrt(d)``, ``p_1`` of unit norm) this is
``chi_m = p_1^T H^-1 p_1``; for the semantic overlap ``theta = Q* . Q / d`` (``a = Q* / d``) it
is ``chi_theta = Q*^T H^-1 Q* / d`` (:func:`attnlab.metrics.overlaps`). ``chi`` is finite and
positive at a strict minimum and grows without bound where the minimum ends along that
overlap (a spinodal). The state evolution gives its ``d -> infinity`` value on the branch
that pins the overlap to zero (``m`` on the semantic branch, ``theta`` on the positional
one) from the stability eigenvalue, ``chi = 1 / (D (1 - lambda_p))`` with
``D = lambda + sigma^2 Vhat`` (:func:`attnlab.theory.stability.pinned_susceptibility`), so
gradient descent at finite ``d`` tests that prediction without waiting for the minimum to
disappear (book Chapter 6, "Asking gradient descent: the response of m" and "... of theta").

Hessian-vector products are exact (double back-propagation through
:meth:`attnlab.objective.AttentionRisk.risk`); ``H^-1 a`` is found by conjugate gradients
and the lowest eigenvalue by Lanczos (SciPy's ``cg`` and ``eigsh``), so ``H`` is never formed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from scipy.sparse.linalg import LinearOperator, cg, eigsh

from .objective import AttentionRisk
from .params import check_finite_array, check_positive

__all__ = ["CG_RTOL", "Susceptibility", "risk_hessian", "positional_susceptibility", "semantic_susceptibility",
           "lowest_eigenvalue"]

#: Relative residual at which conjugate gradients stop.
CG_RTOL = 1e-8


@dataclass(frozen=True)
class Susceptibility:
    """Result of :func:`positional_susceptibility` and :func:`semantic_susceptibility`.

    Attributes
    ----------
    overlap : {"m", "theta"}
        The overlap pulled on.
    chi : float
        ``d a^T H^-1 a``: ``do/dh`` for the field term ``-d h o`` (module docstring).
    bare : float
        ``d |a|^4 / (a^T H a)``: the response if nothing but ``Q``'s component along ``a``
        could move (``chi >= bare`` at a minimum).
    iterations : int
        Hessian-vector products that conjugate gradients used.
    """

    overlap: str
    chi: float
    bare: float
    iterations: int

    @property
    def chi_m(self) -> float:
        """``chi`` of the positional overlap; ``AttributeError`` for a response of ``theta``."""
        if self.overlap != "m":
            raise AttributeError(f"chi_m: this is the response of {self.overlap}, read .chi")
        return self.chi


def _check_data(data):
    from .data import Dataset
    if not isinstance(data, Dataset):
        raise TypeError(f"data must be an attnlab.data.Dataset, got {type(data).__name__}")


def risk_hessian(data, lam: float, Q) -> LinearOperator:
    """The Hessian of ``R`` at ``Q`` as a SciPy ``LinearOperator`` (exact products, never formed).

    Parameters
    ----------
    data : Dataset
        The training set (``x``, ``y`` of shape ``(n, L, d)``).
    lam : float
        Ridge strength ``lambda >= 0`` of ``R``.
    Q : array_like, shape (d,) or (d, 1)
        The point (rank 1).

    Returns
    -------
    LinearOperator, shape (d, d)
        ``v -> H v`` in float64.

    Raises
    ------
    TypeError
        If ``data`` is not a Dataset.
    ValueError
        If ``lam < 0`` or ``Q`` is not finite or not of shape ``(d,)`` or ``(d, 1)``.
    """
    _check_data(data)
    lam = check_positive("lambda (lam)", lam, strict=False)
    Q = check_finite_array("Q", Q, shapes=[(data.d,), (data.d, 1)])
    risk = AttentionRisk(data.x, data.y, lam)
    Qt = risk.as_tensor(Q)

    def matvec(v):
        Qv = Qt.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(risk.risk(Qv), Qv, create_graph=True)
        vt = torch.as_tensor(np.asarray(v, dtype=np.float64).reshape(-1, 1))
        (Hv,) = torch.autograd.grad((g * vt).sum(), Qv)
        return Hv.detach().numpy().ravel()

    return LinearOperator((data.d, data.d), matvec=matvec, rmatvec=matvec, dtype=np.float64)


def positional_susceptibility(data, lam: float, Q, *, maxiter: int = 5000) -> Susceptibility:
    """``chi_m = p_1^T H^-1 p_1``, the response of the positional overlap ``m`` at a minimum.

    Parameters
    ----------
    data, lam, Q
        As in :func:`risk_hessian`; ``Q`` should be a minimum (e.g. ``TrainResult.Q``).
    maxiter : int
        Most conjugate-gradient iterations (Hessian-vector products), ``>= 1``.

    Returns
    -------
    Susceptibility
        With ``overlap = "m"``.

    Raises
    ------
    RuntimeError
        If conjugate gradients do not reach the relative residual :data:`CG_RTOL` within
        ``maxiter`` iterations, or ``p_1^T H p_1 <= 0`` or ``p_1^T H^-1 p_1 <= 0`` (``Q`` is then
        not a minimum). These are necessary conditions only: an ``H`` that curves down in a
        direction orthogonal to them passes; :func:`lowest_eigenvalue` decides.
    TypeError, ValueError
        As :func:`risk_hessian`; ``maxiter`` not a positive integer.

    Notes
    -----
    The field ``-d h m`` and ``m = p_1 . Q / sqrt(d)`` give ``dm = h p_1^T H^-1 p_1`` (module
    docstring). The state evolution's prediction on the semantic branch,
    ``1 / (D (1 - lambda_m))``, uses the map of Cui et al. 2024, Result 4.2
    (:func:`attnlab.theory.stability.pinned_susceptibility`).
    """
    _check_data(data)
    return _response(data, lam, Q, "m", np.asarray(data.P[0], dtype=np.float64) / np.sqrt(data.d), maxiter)


def semantic_susceptibility(data, lam: float, Q, *, maxiter: int = 5000) -> Susceptibility:
    """``chi_theta = Q*^T H^-1 Q* / d``, the response of the semantic overlap ``theta`` at a minimum.

    Parameters
    ----------
    data : Dataset
        The training set (``x``, ``y`` of shape ``(n, L, d)``); the teacher is ``data.Qstar``,
        shape ``(d,)``.
    lam : float
        Ridge strength ``lambda >= 0`` of ``R``.
    Q : array_like, shape (d,) or (d, 1)
        The point, a minimum (e.g. ``TrainResult.Q`` from the positional start).
    maxiter : int
        Most conjugate-gradient iterations (Hessian-vector products), ``>= 1``.

    Returns
    -------
    Susceptibility
        With ``overlap = "theta"``.

    Raises
    ------
    RuntimeError, TypeError, ValueError
        As :func:`positional_susceptibility`, with ``Q*`` in place of ``p_1``.

    Notes
    -----
    The field ``-d h theta`` and ``theta = Q* . Q / d`` give ``dtheta = h Q*^T H^-1 Q* / d``
    (module docstring). The state evolution's prediction on the positional branch,
    ``1 / (D (1 - lambda_theta))`` (:func:`attnlab.theory.stability.pinned_susceptibility`),
    takes ``|Q*|^2 / d = 1``; a drawn teacher has ``1 + O(d^-1/2)``, and ``chi_theta`` carries
    that factor.
    """
    _check_data(data)
    return _response(data, lam, Q, "theta", np.asarray(data.Qstar, dtype=np.float64) / data.d, maxiter)


def _response(data, lam, Q, overlap: str, a: np.ndarray, maxiter) -> Susceptibility:
    """``d a^T H^-1 a`` by conjugate gradients on the unit vector ``a / |a|`` (module docstring)."""
    from .params import check_int
    maxiter = check_int("maxiter", maxiter, 1)
    H = risk_hessian(data, lam, Q)
    scale = data.d * float(a @ a)  # chi = scale * u^T H^-1 u with u = a / |a|
    u = a / np.linalg.norm(a)
    along = "p_1" if overlap == "m" else "Q*"
    calls = [0]

    def counted(v):
        calls[0] += 1
        return H.matvec(v)

    op = LinearOperator(H.shape, matvec=counted, dtype=np.float64)
    curvature = float(u @ H.matvec(u))
    if not curvature > 0:
        raise RuntimeError(f"the risk curves down along {along} ({along}^T H {along} = {curvature:.3g} "
                           f"after normalising): Q is not a minimum")
    x, info = cg(op, u, rtol=CG_RTOL, maxiter=maxiter)
    chi = scale * float(u @ x)
    if info != 0:
        raise RuntimeError(f"conjugate gradients did not converge in maxiter = {maxiter} iterations "
                           f"(relative residual {CG_RTOL:g} not reached; chi_{overlap} so far {chi:.4g})")
    if not chi > 0:
        raise RuntimeError(f"{along}^T H^-1 {along} = {chi:.3g} is not positive: Q is not a minimum")
    return Susceptibility(overlap=overlap, chi=chi, bare=scale / curvature, iterations=calls[0])


def lowest_eigenvalue(data, lam: float, Q, *, tol: float = 1e-6, maxiter: int = 10_000) -> float:
    """The lowest eigenvalue of the Hessian of ``R`` at ``Q`` (Lanczos, SciPy ``eigsh``).

    Parameters
    ----------
    data, lam, Q
        As in :func:`risk_hessian`.
    tol : float
        Relative accuracy of the eigenvalue, ``> 0``.
    maxiter : int
        Most Lanczos restarts' iterations, ``>= 1``.

    Returns
    -------
    float
        Positive at a strict minimum.

    Raises
    ------
    RuntimeError
        If Lanczos does not converge within ``maxiter``.
    TypeError, ValueError
        As :func:`risk_hessian`; ``tol`` not positive or ``maxiter`` not a positive integer.
    """
    from scipy.sparse.linalg import ArpackNoConvergence

    from .params import check_int
    tol = check_positive("tol", tol)
    maxiter = check_int("maxiter", maxiter, 1)
    H = risk_hessian(data, lam, Q)
    try:
        return float(eigsh(H, k=1, which="SA", tol=tol, maxiter=maxiter, return_eigenvectors=False)[0])
    except ArpackNoConvergence as e:
        raise RuntimeError(f"Lanczos did not converge in maxiter = {maxiter} iterations") from e
