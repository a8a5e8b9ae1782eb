"""The channel of the attention GLM: loss, proximal operator and Moreau envelope.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 4 and Result 4.2 (the output
channel of the state evolution). For ``L = 2`` and rank one, with ``h`` the
student preactivations and ``T = T(h*)`` the teacher attention, the per-sample
loss is ``l(h, T) = (sigma^2 / 2) ||S(h) - T||_F^2 = sigma^2 [(sig(a) - T11)^2 + (sig(b) - T22)^2]``,
with ``a = h1 (h1 - h2)``, ``b = h2 (h2 - h1)`` and ``sig`` the logistic function
(each row of a 2x2 row-stochastic matrix has one free entry). The proximal
problem ``min_h |h - w|^2 / (2V) + l(h, T)`` is non-convex; :func:`proximal`
returns its *global* minimiser for every node at once (vectorised, no Python
loop over nodes): a polar grid over the disc that must contain the minimiser,
then Levenberg-shifted Newton steps from the best grid points and from ``w``.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit

__all__ = ["loss", "teacher_diagonal", "proximal", "moreau_envelope", "attention_error"]


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


def _objective(h1, h2, w1, w2, T11, T22, V, sigma):
    return ((h1 - w1) ** 2 + (h2 - w2) ** 2) / (2.0 * V) + loss(h1, h2, T11, T22, sigma)


def _grad_hess(h1, h2, w1, w2, T11, T22, V, sigma):
    """Gradient and Hessian of the proximal objective (closed form)."""
    delta = h1 - h2
    a, b = h1 * delta, -h2 * delta
    sa, sb = expit(a), expit(b)
    da, db = sa * (1 - sa), sb * (1 - sb)
    c = 2.0 * sigma ** 2
    ga, gb = c * (sa - T11) * da, c * (sb - T22) * db  # d l / d a, d l / d b
    gaa = c * (da * da + (sa - T11) * da * (1 - 2 * sa))
    gbb = c * (db * db + (sb - T22) * db * (1 - 2 * sb))
    # a = h1^2 - h1 h2: grad (2h1 - h2, -h1), Hess [[2, -1], [-1, 0]]
    # b = h2^2 - h1 h2: grad (-h2, 2h2 - h1), Hess [[0, -1], [-1, 2]]
    a1, a2 = 2 * h1 - h2, -h1
    b1, b2 = -h2, 2 * h2 - h1
    g1 = (h1 - w1) / V + ga * a1 + gb * b1
    g2 = (h2 - w2) / V + ga * a2 + gb * b2
    H11 = 1.0 / V + gaa * a1 * a1 + gbb * b1 * b1 + 2 * ga
    H22 = 1.0 / V + gaa * a2 * a2 + gbb * b2 * b2 + 2 * gb
    H12 = gaa * a1 * a2 + gbb * b1 * b2 - ga - gb
    return g1, g2, H11, H12, H22


_STEPS = np.array([1.0, 0.5, 0.25, 0.1, 0.03, 0.0])


def _newton(h1, h2, w1, w2, T11, T22, V, sigma, iterations, tol=1e-10):
    """Damped, Levenberg-shifted Newton: where the Hessian is not positive
    definite it is shifted by ``mu I`` (``mu`` from its smallest eigenvalue).
    The full step is taken where it lowers F; elsewhere the step length is the
    best of a fixed ladder, so F never increases; nodes whose step is below
    ``tol`` (relative) are frozen."""
    F = _objective(h1, h2, w1, w2, T11, T22, V, sigma)
    active = np.arange(h1.size)
    for _ in range(iterations):
        a1, a2, aw1, aw2, aT11, aT22 = (v[active] for v in (h1, h2, w1, w2, T11, T22))
        g1, g2, H11, H12, H22 = _grad_hess(a1, a2, aw1, aw2, aT11, aT22, V, sigma)
        scale = np.abs(H11) + np.abs(H22) + 1e-300
        lam_min = 0.5 * (H11 + H22) - np.sqrt(0.25 * (H11 - H22) ** 2 + H12 ** 2)
        mu = np.where(lam_min > 1e-8 * scale, 0.0, 0.1 * scale - lam_min)
        H11, H22 = H11 + mu, H22 + mu
        det = H11 * H22 - H12 * H12
        n1 = -(H22 * g1 - H12 * g2) / det
        n2 = -(H11 * g2 - H12 * g1) / det
        new1, new2 = a1 + n1, a2 + n2
        Fnew = _objective(new1, new2, aw1, aw2, aT11, aT22, V, sigma)
        bad = np.nonzero(~(Fnew <= F[active]))[0]
        if bad.size:  # the ladder of shorter steps (it contains 0: F never increases)
            c1 = a1[bad][None] + _STEPS[1:, None] * n1[bad][None]
            c2 = a2[bad][None] + _STEPS[1:, None] * n2[bad][None]
            Fc = _objective(c1, c2, aw1[bad][None], aw2[bad][None], aT11[bad][None], aT22[bad][None], V, sigma)
            best = np.argmin(Fc, axis=0)
            idx = np.arange(bad.size)
            new1[bad], new2[bad], Fnew[bad] = c1[best, idx], c2[best, idx], Fc[best, idx]
        moved = np.abs(new1 - a1) + np.abs(new2 - a2)
        h1[active], h2[active], F[active] = new1, new2, Fnew
        active = active[moved > tol * (1.0 + np.abs(a1) + np.abs(a2))]
        if active.size == 0:
            break
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
    idx = np.arange(w1.size)
    if warm is None:
        radius = np.sqrt(2.0 * V * loss(w1, w2, T11, T22, sigma))
        gx, gy = _polar_grid(*grid)
        c1 = w1[None] + radius[None] * gx[:, None]
        c2 = w2[None] + radius[None] * gy[:, None]
        Fg = _objective(c1, c2, w1[None], w2[None], T11[None], T22[None], V, sigma)
        order = np.argsort(Fg, axis=0)[:starts]
        s1 = np.concatenate([w1[None], c1[order, idx]])
        s2 = np.concatenate([w2[None], c2[order, idx]])
    else:
        p1, p2 = (np.asarray(v, dtype=float).ravel() for v in warm)
        s1, s2 = np.stack([w1, p1, -p1]), np.stack([w2, p2, -p2])
    k = s1.shape[0]
    rep = lambda v: np.broadcast_to(v, (k, v.size)).ravel()
    h1, h2, F = _newton(s1.ravel(), s2.ravel(), rep(w1), rep(w2), rep(T11), rep(T22), V, sigma, iterations)
    h1, h2, F = h1.reshape(k, -1), h2.reshape(k, -1), F.reshape(k, -1)
    best = np.argmin(F, axis=0)
    return h1[best, idx].reshape(shape), h2[best, idx].reshape(shape), F[best, idx].reshape(shape)


def moreau_envelope(w1, w2, T11, T22, V: float, sigma: float, **kw) -> np.ndarray:
    """Moreau envelope ``M(w) = min_h [ |h - w|^2 / (2V) + l(h, T) ]``, shape of ``w1``."""
    return proximal(w1, w2, T11, T22, V, sigma, **kw)[2]
