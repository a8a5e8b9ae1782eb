"""Channel expectations with the proximal discontinuity handled by splitting.

The loss is invariant under ``h -> -h``, so the proximal problem has mirror
minima and its global minimiser jumps between them across a curve in the
student-field plane. Plain tensor Gauss-Hermite converges slowly and
erratically on such integrands. Here, for every teacher-noise node ``eta``
(Gauss-Hermite in ``eta_s``, composite Gauss-Legendre in ``eta_d``, folded by
the symmetries of :mod:`attnlab.theory.symmetry`), the student-noise plane
``xi`` is covered by parallel lines

``xi = u n + v n_perp``,  ``v``: Gauss-Hermite nodes,

with ``n`` the normal of the jump curve predicted from the loss' minimisers at
the centre of the field distribution. Along each line the jumps are located
(a scan of the branch label ``sign(h1 - h2)`` with warm-started proximal steps,
then bisection on that label) and
every piece between jumps is integrated with composite Gauss-Legendre in
``u`` (the Gaussian weight included), where the integrand is smooth.

Source of the equations: Cui et al. 2024 (arXiv:2402.03902), Result 4.2.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import logit

from .channel import _newton, proximal, teacher_diagonal
from .quadrature import gauss_hermite
from .symmetry import eta_rule, symmetry_of

__all__ = ["SplitRule", "split_expectations"]


@dataclass(frozen=True)
class SplitRule:
    """Orders of the split rule.

    Attributes
    ----------
    order_eta : int
        Gauss-Hermite points in the teacher-noise direction ``eta_s = (eta_1 + eta_2)/sqrt(2)``.
    order_eta_d : int
        Gauss-Legendre points per panel in ``eta_d = (eta_1 - eta_2)/sqrt(2)``.
    eta_panel : float
        Largest panel length in ``eta_d`` (on ``|eta_d| <= 6``).
    order_v : int
        Gauss-Hermite points across the lines (along the jump curve).
    order_u : int
        Gauss-Legendre points per panel of a line.
    panel : float
        Largest panel length along a line (panels also end at branch changes).
    scan : int
        Points of the jump scan along each line, over ``|u| <= u_max``.
    u_max : float
        Half-length of the lines (Gaussian mass beyond is ``2e-9``).
    max_jumps : int
        Branch changes per line that are resolved; more raise ``FloatingPointError``.
    bisections : int
        Bisection steps locating each branch change (precision ``2 u_max / scan / 2^bisections``).
    """

    order_eta: int = 8
    order_eta_d: int = 6
    eta_panel: float = 1.5
    order_v: int = 10
    order_u: int = 6
    panel: float = 2.0
    scan: int = 19
    u_max: float = 6.0
    max_jumps: int = 4
    bisections: int = 16

    def refined(self, factor: float = 1.5) -> "SplitRule":
        up = lambda o: int(np.ceil(o * factor))
        return SplitRule(up(self.order_eta), up(self.order_eta_d), self.eta_panel, up(self.order_v), up(self.order_u),
                         self.panel, 2 * self.scan - 1, self.u_max, self.max_jumps, self.bisections)


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
        rho = params.sigma ** 2
        if not (ov.q > 0 and ov.V > 0 and ov.theta ** 2 < ov.q * rho):
            raise FloatingPointError(f"overlaps left the allowed set (q > 0, V > 0, theta^2 < q rho): {ov}")
        self.c = np.sqrt(rho - ov.theta ** 2 / ov.q)
        self.symmetry = symmetry_of(ov, params) if symmetry is None else symmetry
        e1, e2, we = eta_rule(self.symmetry, rule.order_eta, rule.order_eta_d, rule.eta_panel)
        v, wv = gauss_hermite(rule.order_v)
        n = _line_directions(self.c, e1, e2, params)
        E, K = e1.size, v.size
        self.eta1, self.eta2 = np.repeat(e1, K), np.repeat(e2, K)
        self.n = np.repeat(n, K, axis=0)
        self.v = np.tile(v, E)
        self.weight = np.repeat(we, K) * np.tile(wv, E)

    def at(self, u, lines=None):
        """Fields at positions ``u`` (shape (P, ...) broadcast with the lines) -> xi, eta, w, T."""
        sel = slice(None) if lines is None else lines
        n, v = self.n[sel], self.v[sel]
        xi1 = u * n[:, 0] - v * n[:, 1]
        xi2 = u * n[:, 1] + v * n[:, 0]
        ov = self.ov
        sq = np.sqrt(ov.q)
        w1, w2 = sq * xi1 + ov.m, sq * xi2 - ov.m
        e1, e2 = self.eta1[sel], self.eta2[sel]
        T11, T22 = teacher_diagonal(ov.theta / sq * xi1 + self.c * e1, ov.theta / sq * xi2 + self.c * e2,
                                    self.params.omega, self.params.A_array)
        return (xi1, xi2), (e1, e2), (w1, w2), (T11, T22)


def _prox_at(lines, u, idx, warm, V, sigma):
    _, _, (w1, w2), (T11, T22) = lines.at(u, idx)
    return proximal(w1, w2, T11, T22, V, sigma, warm=warm)


def _scan(lines, rule, V, sigma):
    """Branch labels and minimisers on a grid of u along every line."""
    us = np.linspace(-rule.u_max, rule.u_max, rule.scan)
    N = lines.v.size
    idx = np.arange(N)
    H1, H2, lab = np.empty((rule.scan, N)), np.empty((rule.scan, N)), np.empty((rule.scan, N))
    warm = None
    for k, u in enumerate(us):
        h1, h2, _ = _prox_at(lines, np.full(N, u), idx, warm, V, sigma)
        H1[k], H2[k], lab[k] = h1, h2, _label(h1, h2)
        warm = (h1, h2)
    return us, H1, H2, lab


def _label(h1, h2):
    """Branch label: +1 / -1 for the mirror minima (sign of h1 - h2), 0 on the
    diagonal h1 = h2 where attention is uniform and the loss is flat."""
    delta = h1 - h2
    return np.where(np.abs(delta) <= 1e-7 * (1.0 + np.abs(h1) + np.abs(h2)), 0.0, np.sign(delta))


def _best_of(lines, u, idx, starts, V, sigma):
    """Best local minimiser reached by Newton from each of ``starts``."""
    _, _, (w1, w2), (T11, T22) = lines.at(u, idx)
    best = None
    for s1, s2 in starts:
        h1, h2, F = _newton(np.array(s1, dtype=float), np.array(s2, dtype=float), w1, w2, T11, T22, V, sigma, 40)
        if best is None:
            best = [h1, h2, F]
        else:
            better = F < best[2]
            best = [np.where(better, h1, best[0]), np.where(better, h2, best[1]), np.minimum(F, best[2])]
    return best


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
    a, b = us[k].copy(), us[k + 1].copy()
    la = lab[k, line]
    sa, sb = (H1[k, line], H2[k, line]), (H1[k + 1, line], H2[k + 1, line])
    for _ in range(rule.bisections):
        x = 0.5 * (a + b)
        h1, h2, _ = _best_of(lines, x, line, [sa, sb], V, sigma)
        left = _label(h1, h2) == la
        a = np.where(left, x, a)
        b = np.where(left, b, x)
        sa = (np.where(left, h1, sa[0]), np.where(left, h2, sa[1]))
        sb = (np.where(left, sb[0], h1), np.where(left, sb[1], h2))
    root = 0.5 * (a + b)
    order = np.lexsort((root, line))
    line, root = line[order], root[order]
    slot = np.arange(line.size) - np.searchsorted(line, line)
    jumps[line, slot] = root
    return jumps


def split_expectations(ov, params, rule: SplitRule, symmetry=None):
    """Expectations over ``(xi, eta)`` needed by the hat updates, by the split rule.

    ``symmetry`` (:class:`attnlab.theory.symmetry.Symmetry`) fixes the node
    set; by default it is read off ``ov`` (exact zeros of ``m`` or ``theta``).

    Returns
    -------
    dict
        ``f_s = E[f1 - f2]``, ``f_sq = E[f1^2 + f2^2]``, ``f_xi = E[f1 xi1 + f2 xi2]``,
        ``f_eta = E[f1 eta1 + f2 eta2]``, ``M = E[M]``, plus ``jumps``, the
        number of jumps resolved, and ``nodes``, the number of proximal problems solved.
    """
    V, sigma = ov.V, params.sigma
    lines = _Lines(ov, params, rule, symmetry)
    us, H1, H2, lab = _scan(lines, rule, V, sigma)
    jumps = _locate_jumps(lines, us, H1, H2, lab, rule, V, sigma)
    N = lines.v.size
    # Composite Gauss-Legendre in u on [-u_max, u_max]: fixed panels of length
    # <= panel plus the branch changes as extra breakpoints; the integrand
    # phi(u) g(u) is smooth on every panel.
    fixed = np.linspace(-rule.u_max, rule.u_max, int(np.ceil(2 * rule.u_max / rule.panel)) + 1)
    brk = np.concatenate([np.broadcast_to(fixed, (N, fixed.size)),
                          np.where(np.isfinite(jumps), jumps, rule.u_max)], axis=1)
    brk = np.sort(brk, axis=1)
    x, wl = np.polynomial.legendre.leggauss(rule.order_u)
    lo, hi = brk[:, :-1], brk[:, 1:]
    width = hi - lo
    u = lo[..., None] + (x + 1) / 2 * width[..., None]  # (N, P, Q)
    wt = (wl / 2) * width[..., None] * np.exp(-0.5 * u ** 2) / np.sqrt(2 * np.pi)
    live = np.broadcast_to(width[..., None] > 0, u.shape)
    line_idx = np.broadcast_to(np.arange(N)[:, None, None], u.shape)
    uu, li = u[live], line_idx[live]
    ww = (wt * lines.weight[:, None, None])[live]
    # Warm start from the global minimiser at the nearest scan point between the
    # same branch changes (every such segment holds a scan point, since the
    # changes are located between scan points with different labels), plus its
    # mirror image and w: Newton from that minimiser alone sometimes ends in
    # another local minimum, which made the map discontinuous (seen at 5e-4).
    k = np.clip(np.rint((uu + rule.u_max) / (2 * rule.u_max) * (rule.scan - 1)).astype(int), 0, rule.scan - 1)
    segment = lambda x: (jumps[li] < x[:, None]).sum(axis=1)
    across = segment(us[k]) != segment(uu)
    k = np.where(across, np.where(us[k] > uu, k - 1, k + 1), k)
    (xi1, xi2), (e1, e2), (w1, w2), (T11, T22) = lines.at(uu, li)
    h1, h2, M = proximal(w1, w2, T11, T22, V, sigma, warm=(H1[k, li], H2[k, li]))
    f1, f2 = (h1 - w1) / V, (h2 - w2) / V
    E = lambda g: float(ww @ g)
    out = dict(f_s=E(f1 - f2), f_sq=E(f1 ** 2 + f2 ** 2), f_xi=E(f1 * xi1 + f2 * xi2),
               f_eta=E(f1 * e1 + f2 * e2), M=E(M), jumps=int(np.isfinite(jumps).sum()), nodes=int(uu.size))
    out.update({name: 0.0 for name in lines.symmetry.odd})  # exact zeros; the folded rule does not see them
    return out
