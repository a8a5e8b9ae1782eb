"""Channel expectations with the proximal discontinuity handled by splitting.

The loss is invariant under ``h -> -h``, so the proximal problem has mirror
minima and its global minimiser jumps between them across a curve in the
student-field plane. Plain tensor Gauss-Hermite converges slowly and
erratically on such integrands. Here, for every teacher-noise node ``eta``
(Gauss-Hermite in ``eta_s``, composite Gauss-Legendre in ``eta_d``, folded by
the symmetries of :mod:`attnlab.theory.quadrature`), the student-noise plane
``xi`` is covered by parallel lines

``xi = u n + v n_perp``,  ``v``: Gauss-Hermite nodes,

with ``n`` the normal of the jump curve predicted from the loss' minimisers at
the centre of the field distribution. Along each line the jumps are located
(a scan of the branch label ``sign(h1 - h2)`` with warm-started proximal steps,
then bisection on that label, finished by linear interpolation of the
difference of the two minima's values, so that the located jump, and with it
the whole rule, moves continuously with the overlaps) and every piece between
jumps is integrated with composite Gauss-Legendre in ``u`` (the Gaussian
weight included), where the integrand is smooth. The loops over lines (scan,
bisection, sums) are compiled with numba (serial, without the GIL), on the
primitives of :mod:`attnlab.theory.kernels`.

Source of the equations: Cui et al. 2024 (arXiv:2402.03902), Result 4.2.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from numba import types
from numba.core.dispatcher import Dispatcher
from scipy.special import logit

from . import precompile
from .channel import ChannelMoments, field_scales, proximal, teacher_diagonal
from .kernels import branch_label, key_cache_on_kernels, mean_loss, newton_default, over_nodes, teacher
from .quadrature import SplitRule, eta_rule, gauss_hermite, gauss_legendre, symmetry_of

__all__ = ["SplitRule", "split_expectations", "late_kernels", "start_compile_helper"]


def _line_directions(c, eta1, eta2, params):
    """Unit normal of the predicted jump curve for each eta node, shape (E, 2)."""
    # at the centre xi = 0 of the student-noise distribution, h* = c eta
    T11, T22 = teacher_diagonal(c * eta1, c * eta2, params.omega, params.A_array)
    a, b = logit(np.clip(T11, 1e-12, 1 - 1e-12)), logit(np.clip(T22, 1e-12, 1 - 1e-12))
    delta = np.sqrt(np.clip(a + b, 1e-12, None))
    n = np.stack([a / delta, -b / delta], axis=1)
    norm = np.linalg.norm(n, axis=1, keepdims=True)
    fallback = np.array([[1.0, -1.0]]) / np.sqrt(2.0)
    ok = (a + b > 1e-9)[:, None] & (norm > 1e-9)
    return np.where(ok, n / np.where(norm > 0, norm, 1.0), fallback)


class _Lines:
    """Fields along the lines: xi = u n + v n_perp for every (eta, v) pair."""

    def __init__(self, ov, params, rule, symmetry=None):
        self.ov, self.params = ov, params
        self.sq, self.kappa, self.c = field_scales(ov, params.sigma ** 2)
        self.symmetry = symmetry_of(ov, params) if symmetry is None else symmetry
        e1, e2, we = eta_rule(self.symmetry, rule.order_eta, rule.order_eta_d, rule.eta_panel)
        v, wv = gauss_hermite(rule.order_v)
        n = _line_directions(self.c, e1, e2, params)
        E, K = e1.size, v.size
        self.eta1, self.eta2 = np.repeat(e1, K), np.repeat(e2, K)
        self.n = np.repeat(n, K, axis=0)
        self.v = np.tile(v, E)
        self.weight = np.repeat(we, K) * np.tile(wv, E)

    def geometry(self):
        """Scalars of the field map: ``sqrt(q), m, theta / sqrt(q), c, omega, A_11, A_22``."""
        A = self.params.A_array
        return self.sq, self.ov.m, self.kappa, self.c, self.params.omega, A[0, 0], A[1, 1]

    def at(self, u):
        """Fields at positions ``u`` (shape (P, N), broadcast with the N lines) -> xi, eta, w, T."""
        u, n1, n2, v, e1, e2 = np.broadcast_arrays(u, self.n[:, 0], self.n[:, 1], self.v, self.eta1, self.eta2)
        out = _fields(*(np.ascontiguousarray(a, dtype=float).ravel() for a in (u, n1, n2, v, e1, e2)),
                      *self.geometry())
        xi1, xi2, w1, w2, T11, T22 = (a.reshape(u.shape) for a in out)
        return (xi1, xi2), (e1, e2), (w1, w2), (T11, T22)


@numba.njit(cache=True, nogil=True)
def _field_point(u, n1, n2, v, e1, e2, sq, m, kappa, c, omega, A11, A22):
    """Fields at ``xi = u n + v n_perp``, teacher noise ``eta``: ``xi1, xi2, w1, w2, T11, T22``
    (``w = sqrt(q) xi + s m``, ``h* = kappa xi + c eta``, ``T`` as in :func:`teacher_diagonal`)."""
    xi1, xi2 = u * n1 - v * n2, u * n2 + v * n1
    T11, T22 = teacher(kappa * xi1 + c * e1, kappa * xi2 + c * e2, omega, A11, A22)
    return xi1, xi2, sq * xi1 + m, sq * xi2 - m, T11, T22


@numba.njit(cache=True, nogil=True)
def _fields(u, n1, n2, v, e1, e2, sq, m, kappa, c, omega, A11, A22):
    N = u.size
    xi1, xi2, w1, w2, T11, T22 = np.empty(N), np.empty(N), np.empty(N), np.empty(N), np.empty(N), np.empty(N)
    for i in range(N):
        xi1[i], xi2[i], w1[i], w2[i], T11[i], T22[i] = _field_point(u[i], n1[i], n2[i], v[i], e1[i], e2[i],
                                                                    sq, m, kappa, c, omega, A11, A22)
    return xi1, xi2, w1, w2, T11, T22


def _scan(lines, rule, V, sigma):
    """Branch labels and minimisers on a grid of u along every line: a global
    search at the first point, then continuation along each line (Newton from
    the previous point's minimiser, its mirror image and ``w``)."""
    us = np.linspace(-rule.u_max, rule.u_max, rule.scan)
    N = lines.v.size
    _, _, (w1, w2), (T11, T22) = lines.at(np.broadcast_to(us[:, None], (rule.scan, N)))
    h1, h2, _ = proximal(w1[0], w2[0], T11[0], T22[0], V, sigma)
    args = (h1, h2, *(np.ascontiguousarray(a) for a in (w1, w2, T11, T22)), float(V), float(sigma))
    H1, H2, labels = over_nodes(_continue, args, (0, 0, 1, 1, 1, 1, None, None), (1, 1, 1), N, 64)
    return us, H1, H2, labels


@numba.njit(cache=True, nogil=True)
def _continue(h1, h2, w1, w2, T11, T22, V, sigma):
    """Minimisers along each line (axis 1) from those at the first point ``h1, h2``
    (shape (N,)); fields shape (S, N). Returns H1, H2 and their branch labels
    (:func:`~attnlab.theory.kernels.branch_label`), shape (S, N)."""
    S, N = w1.shape
    H1, H2, labels = np.empty((S, N)), np.empty((S, N)), np.empty((S, N))
    sq = sigma * sigma
    for i in range(N):
        H1[0, i], H2[0, i] = h1[i], h2[i]
        labels[0, i] = branch_label(h1[i], h2[i])
        for k in range(1, S):
            p1, p2 = H1[k - 1, i], H2[k - 1, i]
            best = np.inf
            for a0, b0 in ((w1[k, i], w2[k, i]), (p1, p2), (-p1, -p2)):
                a, b, f = newton_default(a0, b0, w1[k, i], w2[k, i], T11[k, i], T22[k, i], V, sq)
                if f < best:
                    best, H1[k, i], H2[k, i] = f, a, b
            labels[k, i] = branch_label(H1[k, i], H2[k, i])
    return H1, H2, labels


def _locate_jumps(lines, us, H1, H2, lab, rule, V, sigma):
    """Where the branch label of the global minimiser changes along each line:
    jumps between mirror minima and the pitchfork points where a minimiser
    leaves the diagonal. Bisection on the label (the integrand is smooth
    between these points). Returns shape (N, max_jumps), +inf where unused."""
    N = lines.v.size
    k, line = np.nonzero(lab[1:] != lab[:-1])
    jumps = np.full((N, rule.max_jumps), np.inf)
    if k.size == 0:
        return jumps
    counts = np.bincount(line, minlength=N)
    if counts.max() > rule.max_jumps:
        raise FloatingPointError(f"a line crosses {counts.max()} branch changes of the proximal minimiser "
                                 f"(> max_jumps={rule.max_jumps}); refine the scan")
    root = _bisect(us[k], us[k + 1], H1[k, line], H2[k, line], H1[k + 1, line], H2[k + 1, line], lab[k, line],
                   lines.n[line, 0], lines.n[line, 1], lines.v[line], lines.eta1[line], lines.eta2[line],
                   *lines.geometry(), float(V), float(sigma), rule.bisections)
    order = np.lexsort((root, line))
    line, root = line[order], root[order]
    slot = np.arange(line.size) - np.searchsorted(line, line)
    jumps[line, slot] = root
    return jumps


@numba.njit(cache=True, nogil=True)
def _bisect(a, b, a1, a2, b1, b2, label, n1, n2, v, e1, e2, sq, m, kappa, c, omega, A11, A22, V, sigma, steps):
    """Bisection on the branch label between ``a`` (label ``label``, minimiser
    ``a1, a2``) and ``b`` (minimiser ``b1, b2``), Newton from the minimisers
    at both ends of the bracket. Returns the roots, shape (J,): for a jump
    between mirror minima the zero of the linear interpolant of
    ``F_left - F_right`` (the two local minima's values) on the final bracket,
    which makes the root a continuous function of the overlaps (the midpoint
    would move in steps of the bracket width); else the midpoint."""
    root = np.empty(a.size)
    for j in range(a.size):
        root[j] = _bisect_at(a[j], b[j], a1[j], a2[j], b1[j], b2[j], label[j], n1[j], n2[j], v[j], e1[j], e2[j],
                             sq, m, kappa, c, omega, A11, A22, V, sigma * sigma, steps)
    return root


@numba.njit(cache=True, nogil=True)
def _bisect_at(lo, hi, l1, l2, r1, r2, label, n1, n2, v, e1, e2, sq, m, kappa, c, omega, A11, A22, V, s2, steps):
    """:func:`_bisect` for one bracket (``s2 = sigma^2``)."""
    for _ in range(steps):
        x = 0.5 * (lo + hi)
        _, _, w1, w2, T11, T22 = _field_point(x, n1, n2, v, e1, e2, sq, m, kappa, c, omega, A11, A22)
        h1, h2, F = newton_default(l1, l2, w1, w2, T11, T22, V, s2)
        g1, g2, G = newton_default(r1, r2, w1, w2, T11, T22, V, s2)
        if G < F:
            h1, h2 = g1, g2
        if branch_label(h1, h2) == label:
            lo, l1, l2 = x, h1, h2
        else:
            hi, r1, r2 = x, h1, h2
    root = 0.5 * (lo + hi)
    right = branch_label(r1, r2)
    if label != 0.0 and right == -label:  # a jump between mirror minima
        _, _, w1, w2, T11, T22 = _field_point(lo, n1, n2, v, e1, e2, sq, m, kappa, c, omega, A11, A22)
        _, _, Fl_lo = newton_default(l1, l2, w1, w2, T11, T22, V, s2)
        g1, g2, Fr_lo = newton_default(r1, r2, w1, w2, T11, T22, V, s2)
        _, _, w1, w2, T11, T22 = _field_point(hi, n1, n2, v, e1, e2, sq, m, kappa, c, omega, A11, A22)
        _, _, Fr_hi = newton_default(r1, r2, w1, w2, T11, T22, V, s2)
        k1, k2, Fl_hi = newton_default(l1, l2, w1, w2, T11, T22, V, s2)
        d_lo, d_hi = Fl_lo - Fr_lo, Fl_hi - Fr_hi
        if branch_label(g1, g2) == right and branch_label(k1, k2) == label and d_lo < 0.0 < d_hi:
            root = lo + (hi - lo) * d_lo / (d_lo - d_hi)
    return root


@numba.njit(cache=True, nogil=True)
def _integrate(fixed, jumps, x, wl, us, H1, H2, lab, n1, n2, v, e1, e2, weight, sq, m, kappa, c, omega, A11, A22,
               V, sigma):
    """The weighted sums of the hat updates along every line (one compiled loop:
    fields, proximal step, sums). Breakpoints of line ``i``: ``fixed`` and its
    jumps (``jumps[i]``, +inf where unused); Gauss-Legendre nodes ``x``, weights
    ``wl`` on every piece. Newton starts from the global minimiser at the
    nearest scan point between the same branch changes (every such segment holds
    a scan point, since the changes are located between scan points with
    different labels) and from ``w``; from the mirror image of that minimiser
    too if the result's branch label differs from the segment's (from the scan
    point's minimiser alone Newton can end in another local minimum with the same label).
    Returns, per line (shape (N, 5)), the contributions to ``E[f1 - f2],
    E[f1^2 + f2^2], E[f1 xi1 + f2 xi2], E[f1 eta1 + f2 eta2], E[M]``, and the
    number of nodes per line (shape (N,))."""
    N = v.size
    parts = np.zeros((N, 5))
    count = np.zeros(N, np.int64)
    H1, H2, lab = np.ascontiguousarray(H1.T), np.ascontiguousarray(H2.T), np.ascontiguousarray(lab.T)  # (N, S)
    for i in range(N):
        count[i] = _line_sums(parts[i], fixed, jumps[i], x, wl, us, H1[i], H2[i], lab[i], n1[i], n2[i], v[i], e1[i],
                              e2[i], weight[i], sq, m, kappa, c, omega, A11, A22, V, sigma)
    return parts, count


@numba.njit(cache=True, nogil=True)
def _line_sums(acc, fixed, jumps, x, wl, us, H1, H2, lab, n1, n2, v, e1, e2, weight, sq, m, kappa, c, omega, A11,
               A22, V, sigma):
    """Adds one line's weighted sums to ``acc`` (shape (5,)); returns its number of nodes.
    ``jumps``, ``H1``, ``H2``, ``lab``: that line's jumps, scan minimisers and labels."""
    S = us.size
    u_max = us[-1]
    s2 = sigma * sigma
    norm = 1.0 / math.sqrt(2.0 * math.pi)
    brk = np.empty(fixed.size + jumps.size)  # fixed and the jumps (unused: u_max), sorted by insertion
    for j in range(fixed.size):  # (not a slice assignment: numba compiles its error message for seconds)
        brk[j] = fixed[j]
    for j in range(jumps.size):
        t = jumps[j] if math.isfinite(jumps[j]) else u_max
        at = fixed.size + j
        while at > 0 and brk[at - 1] > t:
            brk[at] = brk[at - 1]
            at -= 1
        brk[at] = t
    nodes = 0
    for b in range(brk.size - 1):
        lo, hi = brk[b], brk[b + 1]
        if not hi > lo:
            continue
        # the scan point nearest to the piece between the same branch changes
        seg_lo, seg_hi = -np.inf, np.inf
        for t in jumps:
            if t <= lo:
                seg_lo = max(seg_lo, t)
            elif t >= hi:
                seg_hi = min(seg_hi, t)
        mid = 0.5 * (lo + hi)
        k = min(max(int(round((mid + u_max) / (2.0 * u_max) * (S - 1))), 0), S - 1)
        while k < S - 1 and us[k] < seg_lo:
            k += 1
        while k > 0 and us[k] > seg_hi:
            k -= 1
        p1, p2 = H1[k], H2[k]
        for q in range(x.size):
            u = lo + 0.5 * (x[q] + 1.0) * (hi - lo)
            wt = 0.5 * wl[q] * (hi - lo) * math.exp(-0.5 * u * u) * norm * weight
            xi1, xi2, w1, w2, T11, T22 = _field_point(u, n1, n2, v, e1, e2, sq, m, kappa, c, omega, A11, A22)
            h1, h2, F = newton_default(p1, p2, w1, w2, T11, T22, V, s2)
            a, bb, f = newton_default(w1, w2, w1, w2, T11, T22, V, s2)
            if f < F:
                h1, h2, F = a, bb, f
            if branch_label(h1, h2) != lab[k]:  # the mirror minimum, if the branch label says so
                a, bb, f = newton_default(-p1, -p2, w1, w2, T11, T22, V, s2)
                if f < F:
                    h1, h2, F = a, bb, f
            f1, f2 = (h1 - w1) / V, (h2 - w2) / V
            acc[0] += wt * (f1 - f2)
            acc[1] += wt * (f1 * f1 + f2 * f2)
            acc[2] += wt * (f1 * xi1 + f2 * xi2)
            acc[3] += wt * (f1 * e1 + f2 * e2)
            acc[4] += wt * F
            nodes += 1
    return nodes


def split_expectations(ov, params, rule: SplitRule, symmetry=None) -> ChannelMoments:
    """The channel moments with the global proximal minimiser, by the split rule.

    Parameters
    ----------
    ov : Overlaps
    params : ModelParams
    rule : SplitRule
    symmetry : Symmetry, optional
        Fixes the folded node set (:func:`~attnlab.theory.quadrature.eta_rule`);
        by default read off ``ov`` (exact zeros of ``m`` or ``theta``).

    Returns
    -------
    ChannelMoments
        With ``jumps``, the number of jumps resolved, and ``nodes``, the number
        of proximal problems solved.

    Raises
    ------
    FloatingPointError
        If the overlaps left the domain, or a line crosses more than
        ``rule.max_jumps`` branch changes.
    """
    V, sigma = ov.V, params.sigma
    lines = _Lines(ov, params, rule, symmetry)
    us, H1, H2, lab = _scan(lines, rule, V, sigma)
    jumps = _locate_jumps(lines, us, H1, H2, lab, rule, V, sigma)
    # Composite Gauss-Legendre in u on [-u_max, u_max]: fixed panels of length
    # <= panel plus the branch changes as extra breakpoints; the integrand
    # phi(u) g(u) is smooth on every panel.
    fixed = np.linspace(-rule.u_max, rule.u_max, int(np.ceil(2 * rule.u_max / rule.panel)) + 1)
    x, wl = gauss_legendre(rule.order_u)
    args = (fixed, jumps, x, wl, us, H1, H2, lab, lines.n[:, 0].copy(), lines.n[:, 1].copy(), lines.v, lines.eta1,
            lines.eta2, lines.weight, *lines.geometry(), float(V), float(sigma))
    axes = (None, 0, None, None, None, 1, 1, 1, 0, 0, 0, 0, 0, 0) + (None,) * 9
    precompile.wait(LATE_KERNELS)  # _integrate: from the helper, if one compiles it
    parts, count = over_nodes(_integrate, args, axes, (0, 0), lines.v.size, 32)
    sums = dict(zip(("f_s", "f_sq", "f_xi", "f_eta", "M"), parts.sum(axis=0)))
    return ChannelMoments.from_sums(sums, lines.symmetry.odd, nodes=int(count.sum()),
                                    jumps=int(np.isfinite(jumps).sum()))


def _key_caches_on_kernels() -> None:
    """Key the cache of every compiled function here on kernels.py too: they inline its newton and teacher."""
    for f in list(globals().values()):
        if isinstance(f, Dispatcher) and f.py_func.__module__ == __name__:
            key_cache_on_kernels(f)


_key_caches_on_kernels()

_F, _A1, _A2 = types.float64, types.Array(types.float64, 1, "C"), types.Array(types.float64, 2, "C")
_R1 = types.Array(types.float64, 1, "C", readonly=True)  # the cached Gauss-Legendre and tensor rules


#: The helper's source for :func:`late_kernels` (:func:`attnlab.theory.precompile.start`).
LATE_KERNELS = f"{__name__}:late_kernels"


def late_kernels() -> dict:
    """The kernels a first solve of the global minimiser compiles last, with the argument types
    it calls them with: ``_integrate`` (the sums along the lines: the longest to compile)
    and :func:`~attnlab.theory.kernels.mean_loss` (``eps_g``).

    Returns
    -------
    dict
        ``{numba dispatcher: tuple of numba types}``, for :func:`attnlab.theory.precompile.compile_all`.
    """
    return {_integrate: (_A1, _A2, _R1, _R1, _A1, _A2, _A2, _A2) + (_A1,) * 6 + (_F,) * 9,
            mean_loss: (_R1,) * 5 + (_F,) * 8}


def start_compile_helper() -> None:
    """Compile :func:`late_kernels` in a helper process if numba's cache lacks them
    (:func:`attnlab.theory.precompile.start`); :func:`split_expectations` waits for it."""
    precompile.start(LATE_KERNELS, late_kernels())

