"""The channel of the attention GLM: loss, proximal operator and Moreau envelope.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 4 and Result 4.2 (the output
channel of the state evolution). For ``L = 2`` and rank one, with ``h`` the
student preactivations and ``T = T(h*)`` the teacher attention, the per-sample
loss is ``l(h, T) = (sigma^2 / 2) ||S(h) - T||_F^2 = sigma^2 [(sig(a) - T11)^2 + (sig(b) - T22)^2]``,
with ``a = h1 (h1 - h2)``, ``b = h2 (h2 - h1)`` and ``sig`` the logistic function
(each row of a 2x2 row-stochastic matrix has one free entry). The proximal
problem ``min_h |h - w|^2 / (2V) + l(h, T)`` is non-convex; :func:`proximal`
returns its *global* minimiser for every node at once: a polar grid over the
disc that must contain the minimiser, then Levenberg-shifted Newton steps from
the best grid points and from ``w`` (:func:`_global`, :func:`_newton`: loops
over nodes compiled by numba and run on all cores, no Python loop).
"""
from __future__ import annotations

import math

import numba
import numpy as np
from scipy.special import expit

__all__ = ["loss", "teacher_diagonal", "proximal", "descend", "moreau_envelope", "attention_error"]


def teacher_diagonal(hstar1, hstar2, omega: float, A) -> tuple[np.ndarray, np.ndarray]:
    """Diagonal ``(T11, T22)`` of ``T(h*) = (1 - omega) softmax(h* h*^T) + omega A`` for ``L = 2``.

    Parameters
    ----------
    hstar1, hstar2 : ndarray, shape (N,)
        Teacher preactivations.
    omega : float
    A : array_like, shape (2, 2)

    Returns
    -------
    T11, T22 : ndarray, shape (N,)
    """
    A = np.asarray(A, dtype=float)
    delta = hstar1 - hstar2
    T11 = (1.0 - omega) * expit(hstar1 * delta) + omega * A[0, 0]
    T22 = (1.0 - omega) * expit(-hstar2 * delta) + omega * A[1, 1]
    return T11, T22


def loss(h1, h2, T11, T22, sigma: float):
    """``l(h, T) = (sigma^2/2) ||S(h) - T||_F^2`` for ``L = 2``, rank one; arrays broadcast."""
    delta = h1 - h2
    return sigma ** 2 * ((expit(h1 * delta) - T11) ** 2 + (expit(-h2 * delta) - T22) ** 2)


def attention_error(h1, h2, T11, T22, sigma: float):
    """Alias of :func:`loss`: the per-sample test error ``(sigma^2/2)||S(h) - T(h*)||_F^2``."""
    return loss(h1, h2, T11, T22, sigma)


@numba.njit(cache=True, inline="always")
def _sigmoid(x):
    if x >= 0.0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


@numba.njit(cache=True, inline="always")
def _objective_at(h1, h2, w1, w2, T11, T22, V, s2):
    """The proximal objective at one point (``s2 = sigma^2``) and the two
    attention weights ``sig(a), sig(b)``."""
    delta = h1 - h2
    sa, sb = _sigmoid(h1 * delta), _sigmoid(-h2 * delta)
    return ((h1 - w1) ** 2 + (h2 - w2) ** 2) / (2.0 * V) + s2 * ((sa - T11) ** 2 + (sb - T22) ** 2), sa, sb


@numba.njit(cache=True)
def _teacher_at(hs1, hs2, omega, A11, A22):
    """``T11, T22`` for one node: compiled twin of :func:`teacher_diagonal`."""
    delta = hs1 - hs2
    return (1.0 - omega) * _sigmoid(hs1 * delta) + omega * A11, (1.0 - omega) * _sigmoid(-hs2 * delta) + omega * A22


@numba.njit(cache=True, parallel=True)
def _mean_loss(x1, x2, e1, e2, weights, sq, m, kappa, c, omega, A11, A22, s2):
    """``sum_i weights_i l(w_i, T(h*_i))`` with ``w = sqrt(q) xi + s m``,
    ``h* = kappa xi + c eta`` at nodes ``xi = (x1, x2)``, ``eta = (e1, e2)``;
    compiled twin of ``weights @ loss(w1, w2, *teacher_diagonal(h*), sigma)``."""
    total = 0.0
    for i in numba.prange(x1.size):
        w1, w2 = sq * x1[i] + m, sq * x2[i] - m
        T11, T22 = _teacher_at(kappa * x1[i] + c * e1[i], kappa * x2[i] + c * e2[i], omega, A11, A22)
        total += weights[i] * _objective_at(w1, w2, w1, w2, T11, T22, 1.0, s2)[0]  # at h = w: the loss
    return total

_LADDER = (0.5, 0.25, 0.1, 0.03)


@numba.njit(cache=True)
def _newton_at(h1, h2, w1, w2, T11, T22, V, s2, iterations=40, tol=1e-10):
    """Damped, Levenberg-shifted Newton from ``(h1, h2)`` for one node.

    Where the Hessian is not positive definite it is shifted by ``mu I``
    (``mu`` from its smallest eigenvalue). The full step is taken where it
    lowers F; otherwise the best step of a fixed ladder (or none), so F never
    increases; where no Newton step lowers F, a backtracking steepest-descent step.
    Stops once a step is below ``tol`` (relative), or after ``iterations``."""
    F, sa, sb = _objective_at(h1, h2, w1, w2, T11, T22, V, s2)
    c = 2.0 * s2
    for _ in range(iterations):
        da, db = sa * (1.0 - sa), sb * (1.0 - sb)
        ga, gb = c * (sa - T11) * da, c * (sb - T22) * db  # d l / d a, d l / d b
        gaa = c * (da * da + (sa - T11) * da * (1.0 - 2.0 * sa))
        gbb = c * (db * db + (sb - T22) * db * (1.0 - 2.0 * sb))
        # a = h1^2 - h1 h2: grad (2h1 - h2, -h1), Hess [[2, -1], [-1, 0]]
        # b = h2^2 - h1 h2: grad (-h2, 2h2 - h1), Hess [[0, -1], [-1, 2]]
        a1, a2, b1, b2 = 2.0 * h1 - h2, -h1, -h2, 2.0 * h2 - h1
        g1 = (h1 - w1) / V + ga * a1 + gb * b1
        g2 = (h2 - w2) / V + ga * a2 + gb * b2
        H11 = 1.0 / V + gaa * a1 * a1 + gbb * b1 * b1 + 2.0 * ga
        H22 = 1.0 / V + gaa * a2 * a2 + gbb * b2 * b2 + 2.0 * gb
        H12 = gaa * a1 * a2 + gbb * b1 * b2 - ga - gb
        scale = abs(H11) + abs(H22) + 1e-300
        lam_min = 0.5 * (H11 + H22) - math.sqrt(0.25 * (H11 - H22) ** 2 + H12 * H12)
        mu = 0.0 if lam_min > 1e-8 * scale else 0.1 * scale - lam_min
        H11, H22 = H11 + mu, H22 + mu
        det = H11 * H22 - H12 * H12
        n1, n2 = -(H22 * g1 - H12 * g2) / det, -(H11 * g2 - H12 * g1) / det
        step = 1.0
        Fnew, sa_new, sb_new = _objective_at(h1 + n1, h2 + n2, w1, w2, T11, T22, V, s2)
        if not Fnew <= F:  # the ladder of shorter steps, and no step at all
            step, Fnew, sa_new, sb_new = 0.0, F, sa, sb
            for t in _LADDER:
                Ft, sat, sbt = _objective_at(h1 + t * n1, h2 + t * n2, w1, w2, T11, T22, V, s2)
                if Ft < Fnew:
                    step, Fnew, sa_new, sb_new = t, Ft, sat, sbt
        if step == 0.0:  # no Newton step lowers F: steepest descent with backtracking
            n1, n2 = -g1 / scale, -g2 / scale
            t = 1.0
            for _ in range(30):
                Ft, sat, sbt = _objective_at(h1 + t * n1, h2 + t * n2, w1, w2, T11, T22, V, s2)
                if Ft < F:
                    step, Fnew, sa_new, sb_new = t, Ft, sat, sbt
                    break
                t *= 0.5
        done = step * (abs(n1) + abs(n2)) <= tol * (1.0 + abs(h1) + abs(h2))
        h1, h2, F, sa, sb = h1 + step * n1, h2 + step * n2, Fnew, sa_new, sb_new
        if done:
            break
    return h1, h2, F


@numba.njit(cache=True, parallel=True)
def _newton(s1, s2, w1, w2, T11, T22, V, sigma, iterations, tol=1e-10):
    """Newton (:func:`_newton_at`) from each of ``k`` starts ``s1, s2`` (shape (k, N))
    for every node; returns the lowest local minimum per node: h1, h2, F, shape (N,)."""
    k, N = s1.shape
    h1, h2, F = np.empty(N), np.empty(N), np.empty(N)
    sq = sigma * sigma
    for i in numba.prange(N):
        F[i] = np.inf
        for j in range(k):
            a, b, f = _newton_at(s1[j, i], s2[j, i], w1[i], w2[i], T11[i], T22[i], V, sq, iterations, tol)
            if f < F[i]:
                h1[i], h2[i], F[i] = a, b, f
    return h1, h2, F


@numba.njit(cache=True, parallel=True)
def _global(gx, gy, w1, w2, T11, T22, V, sigma, starts, iterations):
    """Global search for every node: the objective on the polar grid ``gx, gy``
    (unit disc) scaled to the disc ``|h - w| <= sqrt(2 V l(w, T))``, then Newton
    from ``w`` and the ``starts`` best grid points; the lowest local minimum,
    h1, h2, F, shape (N,)."""
    N = w1.size
    h1, h2, F = np.empty(N), np.empty(N), np.empty(N)
    for i in numba.prange(N):  # the body is a function: numba compiles a small parallel loop much faster
        h1[i], h2[i], F[i] = _global_at(gx, gy, w1[i], w2[i], T11[i], T22[i], V, sigma * sigma, starts, iterations)
    return h1, h2, F


@numba.njit(cache=True)
def _global_at(gx, gy, w1, w2, T11, T22, V, s2, starts, iterations):
    """:func:`_global` for one node (``s2 = sigma^2``)."""
    radius = math.sqrt(2.0 * V * _objective_at(w1, w2, w1, w2, T11, T22, V, s2)[0])
    best = np.full(starts, np.inf)
    at = np.zeros(starts, np.int64)
    for g in range(gx.size):
        f = _objective_at(w1 + radius * gx[g], w2 + radius * gy[g], w1, w2, T11, T22, V, s2)[0]
        j = starts - 1
        if f < best[j]:  # insert into the sorted list of the best grid points
            while j > 0 and f < best[j - 1]:
                best[j], at[j] = best[j - 1], at[j - 1]
                j -= 1
            best[j], at[j] = f, g
    h1, h2, F = _newton_at(w1, w2, w1, w2, T11, T22, V, s2, iterations)
    for j in range(starts):
        if best[j] < np.inf:
            a, b, f = _newton_at(w1 + radius * gx[at[j]], w2 + radius * gy[at[j]], w1, w2, T11, T22, V, s2,
                                 iterations)
            if f < F:
                h1, h2, F = a, b, f
    return h1, h2, F


def _polar_grid(n_radius: int, n_angle: int) -> tuple[np.ndarray, np.ndarray]:
    r = (np.arange(1, n_radius + 1) / n_radius)[:, None]
    phi = (2 * np.pi * (np.arange(n_angle) + 0.5 * (np.arange(n_radius)[:, None] % 2)) / n_angle)
    return (r * np.cos(phi)).ravel(), (r * np.sin(phi)).ravel()


def proximal(w1, w2, T11, T22, V: float, sigma: float, *, grid=(6, 16), starts: int = 3,
             iterations: int = 40, warm=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Global minimiser ``h_prox`` and Moreau envelope ``M`` of the proximal problem.

    ``h_prox = argmin_h [ |h - w|^2 / (2V) + l(h, T) ]``, ``M`` its minimum value.

    Parameters
    ----------
    w1, w2 : ndarray, shape (N,)
        Student fields (the quadratic term's centre).
    T11, T22 : ndarray, shape (N,)
        Diagonal of the teacher attention ``T(h*)``.
    V : float
        Proximal scale, ``> 0``.
    sigma : float
        Token-content standard deviation.
    grid : (int, int)
        Radii and angles of the polar search grid over the disc
        ``|h - w| <= sqrt(2 V l(w, T))`` that contains every minimiser (since
        ``F(h) >= |h - w|^2 / 2V`` and ``F(w) = l(w, T)``).
    starts : int
        Number of best grid points refined by Newton (plus ``w`` itself).
    iterations : int
        Maximal Newton iterations per start.
    warm : (ndarray, ndarray), optional
        A previous minimiser ``(h1, h2)`` (same shape as ``w1``). If given, the
        grid search is skipped and Newton starts from ``w``, ``warm`` and its
        mirror image ``-warm`` (the loss is invariant under ``h -> -h``): fast
        when the fields moved little, but only a local search; callers verify
        the final answer with a full (``warm=None``) call.

    Returns
    -------
    h1, h2 : ndarray, shape (N,)
        The global minimiser.
    M : ndarray, shape (N,)
        The Moreau envelope ``min_h [...]``.
    """
    w1, w2, T11, T22 = (np.asarray(v, dtype=float) for v in np.broadcast_arrays(w1, w2, T11, T22))
    shape = w1.shape
    w1, w2, T11, T22 = (v.ravel() for v in (w1, w2, T11, T22))
    if warm is None:
        gx, gy = _polar_grid(*grid)
        h1, h2, F = _global(gx, gy, w1, w2, T11, T22, float(V), float(sigma), int(starts), int(iterations))
    else:
        p1, p2 = (np.asarray(v, dtype=float).ravel() for v in warm)
        s1, s2 = np.stack([w1, p1, -p1]), np.stack([w2, p2, -p2])
        h1, h2, F = _newton(s1, s2, w1, w2, T11, T22, float(V), float(sigma), int(iterations))
    return h1.reshape(shape), h2.reshape(shape), F.reshape(shape)


def descend(w1, w2, T11, T22, V: float, sigma: float, *, start, iterations: int = 60):
    """Local minimiser of the proximal problem reached by descent from ``start``.

    Damped, Levenberg-shifted Newton (it never increases the objective
    ``|h - w|^2 / (2V) + l(h, T)``) from ``start`` for every node: the minimum
    in whose basin ``start`` lies, not necessarily the global one
    (:func:`proximal`). Started at the teacher's field ``h*`` it is the
    minimiser that gradient descent from ``Q0 = Q*`` keeps (book Chapter 5).

    Parameters
    ----------
    w1, w2, T11, T22 : ndarray, shape (N,)
        Student fields and the diagonal of the teacher attention, as in :func:`proximal`.
    V : float
        Proximal scale, ``> 0``.
    sigma : float
        Token-content standard deviation.
    start : (ndarray, ndarray)
        Starting points ``(h1, h2)``, shape (N,) each.
    iterations : int
        Maximal Newton iterations.

    Returns
    -------
    h1, h2, F : ndarray, shape (N,)
        The local minimiser and the objective there (the local Moreau envelope).
    """
    w1, w2, T11, T22, s1, s2 = (np.ascontiguousarray(v, dtype=float).ravel()
                                for v in np.broadcast_arrays(w1, w2, T11, T22, *start))
    return _newton(s1[None], s2[None], w1, w2, T11, T22, float(V), float(sigma), int(iterations))


def moreau_envelope(w1, w2, T11, T22, V: float, sigma: float, **kw) -> np.ndarray:
    """Moreau envelope ``M(w) = min_h [ |h - w|^2 / (2V) + l(h, T) ]``, shape of ``w1``."""
    return proximal(w1, w2, T11, T22, V, sigma, **kw)[2]
