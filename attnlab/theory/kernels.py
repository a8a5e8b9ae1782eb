"""Compiled primitives of the attention channel (numba), ``L = 2``, rank one.

Per point (scalars in, scalars out; called from the compiled loops here and in
:mod:`attnlab.theory.split_rule`):

* :func:`sigmoid`, :func:`teacher` (the diagonal of ``T(h*)``), :func:`objective`
  (the proximal objective ``F(h) = |h - w|^2 / (2V) + l(h, T)``),
  :func:`direction` (one Newton direction of ``F``),
  :func:`newton` (damped, Levenberg-shifted Newton on ``F``: never increases it;
  :func:`newton_default` with the default budget),
  :func:`branch_label` (which mirror minimum a point is near).

Loops over quadrature nodes (arrays of shape (N,) in):

* :func:`mean_loss` (the weighted loss at ``h = w``: ``eps_g``),
  :func:`followed_sums` (the followed minimiser's integrands: :func:`newton` from each
  node's start, :data:`LANES` descents side by side),
  :func:`multistart_newton` (the lowest local minimum from several starts per node),
  :func:`global_search` (the global minimiser: a polar grid, then Newton).

Every kernel is serial and releases the GIL (``nogil``). :func:`over_nodes` runs
a loop over nodes on all cores: the nodes are cut into chunks that a pool of
threads takes in turn, so a core lost to another process slows the loop by its
share only (numba's parallel loops wait for their slowest thread), and no
parallel loop has to be compiled (in a fresh process with an empty numba cache
the followed minimiser's kernels compile in about 2 s, its lane kernel
:func:`followed_sums` in a helper process, the split rule's in 4 s more, the longest of them in a helper process on the other core,
:mod:`attnlab.theory.precompile`; ``benchmarks/bench_cold_start.py``). Every node
is computed as by one serial call, so results do not depend on the number of cores. Only
:func:`direction` is inlined by numba (``inline="always"``), and only into
:func:`lane_directions`, so that LLVM vectorises that loop; LLVM inlines the other small
functions at less compilation cost. The per-point functions and the followed minimiser's
loops (:func:`sigmoid`, :func:`objective`, :func:`teacher`, :func:`direction`, :func:`newton`,
:func:`followed_start`, :func:`followed_row`, :func:`followed_sums_serial`, :func:`followed_sums`)
have numba's ``error_model="numpy"``: no test for a division by zero, which compiles about 0.3 s
faster and gives the same results bit for bit. Their divisors are ``V``, ``scale > 0``, sums of 1
and absolute values, and a shifted Hessian's determinant (:func:`direction`); ``V > 0`` is the
callers' to check (:func:`attnlab.theory.channel.proximal` and ``descend`` raise ``ValueError``,
the solver's overlaps have ``V > 0``): with ``V = 0`` the kernels return NaN.

Notation: ``h`` the student preactivations, ``w`` the student field, ``T11, T22``
the diagonal of the teacher attention, ``V`` the proximal scale, ``s2 = sigma^2``;
the loss is ``l(h, T) = sigma^2 [(sig(a) - T11)^2 + (sig(b) - T22)^2]`` with
``a = h1 (h1 - h2)``, ``b = h2 (h2 - h1)`` (Cui et al. 2024, arXiv:2402.03902, Sec. 4).
The NumPy versions for users are in :mod:`attnlab.theory.channel`.
"""
from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

__all__ = ["NEWTON_ITERATIONS", "DESCENT_ITERATIONS", "NEWTON_TOL", "EXACT_STEP", "LANES", "sigmoid", "objective",
           "teacher", "direction", "newton", "newton_default", "branch_label", "mean_loss", "lane_directions",
           "followed_start", "followed_row", "followed_sums_serial", "followed_sums", "multistart_newton",
           "global_search", "global_search_at", "key_cache_on_kernels", "threads", "over_nodes", "over_blocks"]

#: Newton's default iteration budget (:func:`newton_default`).
NEWTON_ITERATIONS = 40
#: Newton iterations of the followed minimiser's descent (:func:`attnlab.theory.channel.descend`,
#: :func:`followed_sums`).
DESCENT_ITERATIONS = 60
#: Newton's default relative step tolerance (:func:`newton_default`).
NEWTON_TOL = 1e-10
#: Newton steps (relative, at a positive definite Hessian) taken without the descent test
#: (:func:`newton`): at the end of a descent the objective cannot resolve their decrease.
EXACT_STEP = 1e-6


@numba.njit(cache=True, nogil=True, error_model="numpy")
def sigmoid(x):
    """The logistic function ``1 / (1 + exp(-x))``, without a branch on the sign of ``x``
    (about 5% of :func:`followed_sums`: half the calls took each side). Below
    ``x = -log(DBL_MAX) = -709.78`` ``exp(-x)`` overflows (to ``inf`` in compiled code, an
    ``OverflowError`` in Python with ``NUMBA_DISABLE_JIT``): the result is its limit 0 there."""
    if x < -709.782712893384:  # (rarely taken: predicted)
        return 0.0
    return 1.0 / (1.0 + math.exp(-x))


@numba.njit(cache=True, nogil=True, error_model="numpy")
def objective(h1, h2, w1, w2, T11, T22, V, s2):
    """The proximal objective ``F(h) = |h - w|^2 / (2V) + l(h, T)`` at one point, and the
    two attention weights ``sig(a), sig(b)``; at ``h = w`` with ``V = 1`` its value is the loss."""
    delta = h1 - h2
    sa, sb = sigmoid(h1 * delta), sigmoid(-h2 * delta)
    return ((h1 - w1) ** 2 + (h2 - w2) ** 2) * (0.5 / V) + s2 * ((sa - T11) ** 2 + (sb - T22) ** 2), sa, sb


@numba.njit(cache=True, nogil=True, error_model="numpy")
def teacher(hs1, hs2, omega, A11, A22):
    """``T11, T22`` of ``T(h*) = (1 - omega) softmax(h* h*^T) + omega A`` at one point
    (:func:`attnlab.theory.channel.teacher_diagonal` for arrays)."""
    delta = hs1 - hs2
    return (1.0 - omega) * sigmoid(hs1 * delta) + omega * A11, (1.0 - omega) * sigmoid(-hs2 * delta) + omega * A22


_LADDER = (0.5, 0.25, 0.1, 0.03)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def direction(h1, h2, w1, w2, T11, T22, sa, sb, iV, c):
    """The (shifted) Newton direction of the proximal objective at ``h`` (one iteration of
    :func:`newton`), from the attention weights ``sa, sb`` there, ``iV = 1 / V``, ``c = 2 sigma^2``.

    Where the Hessian ``H`` is positive definite with both eigenvalues above ``1e-8 scale``
    (``scale = |H11| + |H22|``) the direction is ``-H^-1 g`` and ``mu = 0``; otherwise ``H`` is
    shifted by ``mu I``, ``mu = 0.1 scale - lambda_min(H)`` (the square root only there).
    ``error_model="numpy"``: no test for a division by zero (a test that may raise would keep
    :func:`lane_directions`, where numba inlines this function, from being vectorised by
    LLVM). The shifted determinant is zero only where ``|H12|`` exceeds ``|H11| + |H22|`` by
    about 1e16 (a Hessian far from any at the model's parameters): the direction is then
    infinite or NaN, and :func:`newton` takes no Newton step there (its steepest-descent
    fall-back decides), where the default error model raised ``ZeroDivisionError``.

    Returns
    -------
    n1, n2, mu, g1, g2, scale : float
        The direction, the shift, the gradient and ``scale`` (with ``1e-300`` added).
    """
    da, db = sa * (1.0 - sa), sb * (1.0 - sb)
    ga, gb = c * (sa - T11) * da, c * (sb - T22) * db  # d l / d a, d l / d b
    gaa = c * (da * da + (sa - T11) * da * (1.0 - 2.0 * sa))
    gbb = c * (db * db + (sb - T22) * db * (1.0 - 2.0 * sb))
    # a = h1^2 - h1 h2: grad (2h1 - h2, -h1), Hess [[2, -1], [-1, 0]]
    # b = h2^2 - h1 h2: grad (-h2, 2h2 - h1), Hess [[0, -1], [-1, 2]]
    a1, a2, b1, b2 = 2.0 * h1 - h2, -h1, -h2, 2.0 * h2 - h1
    g1 = (h1 - w1) * iV + ga * a1 + gb * b1
    g2 = (h2 - w2) * iV + ga * a2 + gb * b2
    H11 = iV + gaa * a1 * a1 + gbb * b1 * b1 + 2.0 * ga
    H22 = iV + gaa * a2 * a2 + gbb * b2 * b2 + 2.0 * gb
    H12 = gaa * a1 * a2 + gbb * b1 * b2 - ga - gb
    scale = abs(H11) + abs(H22) + 1e-300
    # positive definite with both eigenvalues above 1e-8 scale: H - floor I has a positive
    # diagonal and determinant (no square root where it is, about 17% of the scalar kernel)
    floor = 1e-8 * scale
    definite = (H11 > floor) & (H22 > floor) & ((H11 - floor) * (H22 - floor) > H12 * H12)
    mu = 0.0 if definite else 0.1 * scale - (0.5 * (H11 + H22) - math.sqrt(0.25 * (H11 - H22) ** 2 + H12 * H12))
    H11, H22 = H11 + mu, H22 + mu  # (unchanged where definite: H11, H22 > 0 there)
    inv_det = 1.0 / (H11 * H22 - H12 * H12)
    return -(H22 * g1 - H12 * g2) * inv_det, -(H11 * g2 - H12 * g1) * inv_det, mu, g1, g2, scale


@numba.njit(cache=True, nogil=True, error_model="numpy")
def newton(h1, h2, w1, w2, T11, T22, V, s2, iterations, tol):
    """Damped, Levenberg-shifted Newton on the proximal objective from ``(h1, h2)``.

    Where the Hessian is not positive definite it is shifted by ``mu I``
    (``mu`` from its smallest eigenvalue). The full step is taken where it
    lowers ``F``; otherwise the best step of the ladder ``0.5, 0.25, 0.1, 0.03``
    (or none), so ``F`` never increases beyond its rounding; where no Newton step
    lowers ``F``, a backtracking steepest-descent step. A full step at a positive
    definite Hessian shorter than :data:`EXACT_STEP` (relative) is taken without
    comparing ``F``: the quadratic model is accurate there to ``O(|n|^3)``, so the step
    lowers ``F`` by ``n.H.n / 2``, which at the end of a descent (steps of 1e-8 and
    less) is below ``F``'s rounding: the comparison was decided by rounding, and its
    fall-backs cost up to 34 more evaluations of ``F``. ``F`` may therefore rise by
    its rounding (at most 1e-14 relative over 22 000 random problems). Stops once a step is below
    ``tol`` (relative; such a last step at a positive definite Hessian is taken
    without evaluating ``F`` there), or after ``iterations`` (defaults
    :data:`NEWTON_TOL`, :data:`NEWTON_ITERATIONS`).

    Returns
    -------
    h1, h2, F : float
        The point reached (a local minimiser when converged) and ``F`` there (after a
        last step below ``tol``: ``F`` at the point before it, which differs by
        ``n.H.n / 2``, at most about 1e-13 relative).
    """
    F, sa, sb = objective(h1, h2, w1, w2, T11, T22, V, s2)
    c, iV = 2.0 * s2, 1.0 / V
    for _ in range(iterations):
        n1, n2, mu, g1, g2, scale = direction(h1, h2, w1, w2, T11, T22, sa, sb, iV, c)
        size = (abs(n1) + abs(n2)) / (1.0 + abs(h1) + abs(h2))
        if mu == 0.0 and size <= tol:  # converged: the last step, F changes by n.H.n / 2 (below its rounding)
            return h1 + n1, h2 + n2, F
        step = 1.0
        Fnew, sa_new, sb_new = objective(h1 + n1, h2 + n2, w1, w2, T11, T22, V, s2)
        if not Fnew <= F and not (mu == 0.0 and size <= EXACT_STEP):  # the ladder of shorter steps, and no step at all
            step, Fnew, sa_new, sb_new = 0.0, F, sa, sb
            for t in _LADDER:
                Ft, sat, sbt = objective(h1 + t * n1, h2 + t * n2, w1, w2, T11, T22, V, s2)
                if Ft < Fnew:
                    step, Fnew, sa_new, sb_new = t, Ft, sat, sbt
        if step == 0.0:  # no Newton step lowers F: steepest descent with backtracking
            n1, n2 = -g1 / scale, -g2 / scale
            t = 1.0
            for _ in range(30):
                Ft, sat, sbt = objective(h1 + t * n1, h2 + t * n2, w1, w2, T11, T22, V, s2)
                if Ft < F:
                    step, Fnew, sa_new, sb_new = t, Ft, sat, sbt
                    break
                t *= 0.5
        done = step * (abs(n1) + abs(n2)) <= tol * (1.0 + abs(h1) + abs(h2))
        h1, h2, F, sa, sb = h1 + step * n1, h2 + step * n2, Fnew, sa_new, sb_new
        if done:
            break
    return h1, h2, F


@numba.njit(cache=True, nogil=True)
def newton_default(h1, h2, w1, w2, T11, T22, V, s2):
    """:func:`newton` with :data:`NEWTON_ITERATIONS` and :data:`NEWTON_TOL`."""
    # (np.int64: a constant would be passed as a literal, and numba would compile newton again for it)
    return newton(h1, h2, w1, w2, T11, T22, V, s2, np.int64(NEWTON_ITERATIONS), NEWTON_TOL)


@numba.njit(cache=True, nogil=True)
def branch_label(h1, h2):
    """+1 / -1 for the two mirror minima (the sign of ``h1 - h2``), 0 on the diagonal
    ``h1 = h2`` (relative to ``1e-7``), where attention is uniform and the loss is flat."""
    delta = h1 - h2
    if abs(delta) <= 1e-7 * (1.0 + abs(h1) + abs(h2)):
        return 0.0
    return 1.0 if delta > 0 else -1.0


@numba.njit(cache=True, nogil=True)
def mean_loss(x1, x2, e1, e2, weights, sq, m, kappa, c, omega, A11, A22, s2):
    """``sum_i weights_i l(w_i, T(h*_i))`` with ``w = (sq x1 + m, sq x2 - m)`` and
    ``h* = kappa xi + c eta`` at nodes ``xi = (x1, x2)``, ``eta = (e1, e2)`` (shape (N,)):
    the generalization error when ``sq = sqrt(q)``, ``kappa = theta / sqrt(q)``,
    ``c = sqrt(rho - theta^2 / q)``.

    Summed in two halves (the first ``ceil(N / 2)`` nodes, then the rest), the order
    of the two-thread loop that computed the cached tables of ``results/``; the sum
    does not depend on the machine's core count."""
    total = 0.0
    half = (x1.size + 1) // 2
    for lo, hi in ((0, half), (half, x1.size)):
        part = 0.0
        for i in range(lo, hi):
            w1, w2 = sq * x1[i] + m, sq * x2[i] - m
            T11, T22 = teacher(kappa * x1[i] + c * e1[i], kappa * x2[i] + c * e2[i], omega, A11, A22)
            part += weights[i] * objective(w1, w2, w1, w2, T11, T22, 1.0, s2)[0]  # at h = w: the loss
        total += part
    return total


@numba.njit(cache=True, nogil=True)
def multistart_newton(s1, s2, w1, w2, T11, T22, V, sigma, iterations, tol):
    """:func:`newton` from each of ``k`` starts ``s1, s2`` (shape (k, N)) for every node
    (fields ``w1, w2``, teacher ``T11, T22``, shape (N,)); the lowest local minimum per node.

    Returns
    -------
    h1, h2, F : ndarray, shape (N,)
        NaN, NaN, ``inf`` at a node where no start reached a finite objective (NaN input).
    """
    k, N = s1.shape
    h1, h2, F = np.full(N, np.nan), np.full(N, np.nan), np.empty(N)
    sq = sigma * sigma
    for i in range(N):
        F[i] = np.inf
        for j in range(k):
            a, b, f = newton(s1[j, i], s2[j, i], w1[i], w2[i], T11[i], T22[i], V, sq, iterations, tol)
            if f < F[i]:
                h1[i], h2[i], F[i] = a, b, f
    return h1, h2, F


@numba.njit(cache=True, nogil=True, error_model="numpy")
def followed_start(nodes, i, sq, m, kappa, c, omega, A11, A22, sigma, semantic, r, sr, c0):
    """Node ``i``'s field ``w``, teacher diagonal and descent start for :func:`followed_sums`
    (``sr = sqrt(1 - r^2)``): ``w1, w2, T11, T22, h1, h2``."""
    x1, x2, e1, e2 = nodes[0, i], nodes[1, i], nodes[2, i], nodes[3, i]
    hs1, hs2 = kappa * x1 + c * e1, kappa * x2 + c * e2
    T11, T22 = teacher(hs1, hs2, omega, A11, A22)
    if semantic:
        return sq * x1 + m, sq * x2 - m, T11, T22, hs1, hs2
    return (sq * x1 + m, sq * x2 - m, T11, T22, c0 * (1.0 + sigma * (r * x1 + sr * nodes[4, i])),
            c0 * (-1.0 + sigma * (r * x2 + sr * nodes[5, i])))


@numba.njit(cache=True, nogil=True, error_model="numpy")
def followed_row(nodes, i, h1, h2, w1, w2, V):
    """Node ``i``'s integrands ``f_1 - f_2``, ``f_1^2 + f_2^2``, ``f . xi``, ``f . eta`` with
    ``f = (h - w) / V`` (:func:`followed_sums`)."""
    f1, f2 = (h1 - w1) / V, (h2 - w2) / V
    return f1 - f2, f1 * f1 + f2 * f2, f1 * nodes[0, i] + f2 * nodes[1, i], f1 * nodes[2, i] + f2 * nodes[3, i]


@numba.njit(cache=True, nogil=True, error_model="numpy")
def followed_sums_serial(nodes, lo, hi, block, sq, m, kappa, c, omega, A11, A22, V, sigma, semantic, r, c0,
                         iterations):
    """:func:`followed_sums` by one :func:`newton` call per node, in node order: the same sums bit
    for bit, in about 1.4 times the time, but compiled in about half the time. The first solves
    of a process whose numba cache lacks :func:`followed_sums` use it while a helper process
    compiles that (:func:`attnlab.theory.followed_rule.lane_kernels`)."""
    s2 = sigma * sigma
    sr = math.sqrt(max(0.0, 1.0 - r * r))
    out = np.zeros(((hi - lo) // block, 5))
    for k in range(out.shape[0]):
        for i in range(lo + k * block, lo + (k + 1) * block):
            w1, w2, T11, T22, h1, h2 = followed_start(nodes, i, sq, m, kappa, c, omega, A11, A22, sigma, semantic, r,
                                                      sr, c0)
            h1, h2, F = newton(h1, h2, w1, w2, T11, T22, V, s2, iterations, NEWTON_TOL)
            a, b, d, e = followed_row(nodes, i, h1, h2, w1, w2, V)
            out[k, 0] += a
            out[k, 1] += b
            out[k, 2] += d
            out[k, 3] += e
            out[k, 4] += F
    return out


# direction inlined by numba where it is called in a loop that LLVM is to vectorise (a call
# would keep the loop scalar); newton calls the compiled one (inlining it there, at every
# kernel that calls newton, made the followed kernels compile 1 s longer). Never compiled
# on its own, so without a cache of its own (it would share direction's index, whose key
# does not hold the inline flag). With NUMBA_DISABLE_JIT, direction is the Python function.
_direction_inline = numba.njit(nogil=True, error_model="numpy", inline="always")(getattr(direction, "py_func",
                                                                                         direction))

#: Points that :func:`followed_sums` descends side by side (its lanes).
LANES = 16


@numba.njit(cache=True, nogil=True, error_model="numpy")
def lane_directions(h1, h2, w1, w2, T11, T22, sa, sb, iV, c, n1, n2, mu):
    """:func:`direction` for every lane (arrays of shape (LANES,)): ``n1, n2, mu`` filled in.
    LLVM vectorises this loop (the shift's condition becomes a select): the part of
    :func:`followed_sums` that runs several lanes per instruction (four with AVX2)."""
    for j in range(h1.size):
        n1[j], n2[j], mu[j], _, _, _ = _direction_inline(h1[j], h2[j], w1[j], w2[j], T11[j], T22[j], sa[j], sb[j], iV, c)


@numba.njit(cache=True, nogil=True, error_model="numpy")
def followed_sums(nodes, lo, hi, block, sq, m, kappa, c, omega, A11, A22, V, sigma, semantic, r, c0, iterations):
    """Per-block sums of the followed minimiser's integrands over nodes ``lo..hi``.

    For every node ``(xi_1, xi_2, eta_1, eta_2, nu_1, nu_2)`` (the columns of
    ``nodes``, shape (6, N)): the fields ``w = (sq xi_1 + m, sq xi_2 - m)``,
    ``h* = kappa xi + c eta``, the teacher diagonal, the descent's start (semantic:
    ``h*``; positional: ``c0 (s_l + sigma (r xi_l + sqrt(1 - r^2) nu_l))``), :func:`newton`
    from there (``iterations``, :data:`NEWTON_TOL`) and, with ``f = (h - w) / V``, the
    integrands ``f_1 - f_2``, ``f_1^2 + f_2^2``, ``f . xi``, ``f . eta`` and ``F`` (the
    local Moreau envelope): the same numbers as
    :func:`attnlab.theory.followed_rule.initial_fields`,
    :func:`attnlab.theory.channel.descend` and
    :func:`attnlab.theory.channel.moments_from_samples` composed, without their
    arrays. ``lo`` and ``hi`` are multiples of ``block``; each block is summed in
    node order, so a sum does not depend on how the blocks are shared among threads.

    The descents run in :data:`LANES` lanes side by side: each iteration computes the
    Newton directions of all lanes in one vectorised loop (:func:`lane_directions`),
    then for each lane the objective at the full step and the step's acceptance as
    :func:`newton` does; a lane whose full step :func:`newton` would not take finishes
    its descent by a call of :func:`newton` from there (the ladder of shorter steps);
    a lane whose descent ends takes the block's next node. Every descent is therefore
    :func:`newton`'s, bit for bit, in about 0.7 of the time (the scalar iteration is a
    chain of dependent operations; ``benchmarks/theory_speed.md``). ``error_model="numpy"``
    (no test for a division by zero: ``V > 0``; compiles faster). It compiles in about 2.5 s
    more than :func:`followed_sums_serial`, which the first solves of a process with an empty
    numba cache use while a helper process compiles this one
    (:func:`attnlab.theory.followed_rule.lane_kernels`).

    Returns
    -------
    sums : ndarray, shape ((hi - lo) / block, 5)
    """
    s2 = sigma * sigma
    sr = math.sqrt(max(0.0, 1.0 - r * r))
    cc, iV = 2.0 * s2, 1.0 / V
    out = np.zeros(((hi - lo) // block, 5))
    rows = np.empty((block, 5))
    # the lanes: the node each descends (-1: none), its point, field, teacher, F and attention
    # weights there, its iterations so far, and the direction of the current iteration
    node, it = np.empty(LANES, np.int64), np.zeros(LANES, np.int64)
    h1, h2, w1, w2 = np.zeros(LANES), np.zeros(LANES), np.zeros(LANES), np.zeros(LANES)
    T11, T22, F, sa, sb = np.zeros(LANES), np.zeros(LANES), np.zeros(LANES), np.zeros(LANES), np.zeros(LANES)
    n1, n2, mu = np.zeros(LANES), np.zeros(LANES), np.zeros(LANES)
    for k in range(out.shape[0]):
        first = lo + k * block
        following, live = first, 0
        node[:] = -1
        while True:
            for j in range(LANES):  # free lanes take the block's next nodes
                if node[j] < 0 and following < first + block:
                    i = following
                    following += 1
                    w1[j], w2[j], T11[j], T22[j], h1[j], h2[j] = followed_start(nodes, i, sq, m, kappa, c, omega, A11,
                                                                                A22, sigma, semantic, r, sr, c0)
                    F[j], sa[j], sb[j] = objective(h1[j], h2[j], w1[j], w2[j], T11[j], T22[j], V, s2)
                    node[j], it[j] = i, 0
                    live += 1
            if live == 0:
                break
            lane_directions(h1, h2, w1, w2, T11, T22, sa, sb, iV, cc, n1, n2, mu)
            for j in range(LANES):  # one iteration of newton in each lane
                i = node[j]
                if i < 0:
                    continue
                ended = it[j] >= iterations
                if not ended:
                    size = (abs(n1[j]) + abs(n2[j])) / (1.0 + abs(h1[j]) + abs(h2[j]))
                    if mu[j] == 0.0 and size <= NEWTON_TOL:  # converged: the last step
                        h1[j], h2[j] = h1[j] + n1[j], h2[j] + n2[j]
                        ended = True
                    else:
                        t1, t2 = h1[j] + n1[j], h2[j] + n2[j]
                        Ft, sat, sbt = objective(t1, t2, w1[j], w2[j], T11[j], T22[j], V, s2)
                        if not Ft <= F[j] and not (mu[j] == 0.0 and size <= EXACT_STEP):
                            # newton would try shorter steps: the rest of the descent by newton itself
                            h1[j], h2[j], F[j] = newton(h1[j], h2[j], w1[j], w2[j], T11[j], T22[j], V, s2,
                                                        iterations - it[j], NEWTON_TOL)
                            ended = True
                        else:
                            ended = abs(n1[j]) + abs(n2[j]) <= NEWTON_TOL * (1.0 + abs(h1[j]) + abs(h2[j]))
                            h1[j], h2[j], F[j], sa[j], sb[j] = t1, t2, Ft, sat, sbt
                            it[j] += 1
                            ended = ended or it[j] >= iterations
                if ended:
                    row = i - first
                    rows[row, 0], rows[row, 1], rows[row, 2], rows[row, 3] = followed_row(nodes, i, h1[j], h2[j], w1[j],
                                                                                          w2[j], V)
                    rows[row, 4] = F[j]
                    node[j] = -1
                    live -= 1
        for row in range(block):
            for t in range(5):
                out[k, t] += rows[row, t]
    return out


@numba.njit(cache=True, nogil=True)
def global_search(gx, gy, w1, w2, T11, T22, V, sigma, starts, iterations):
    """The global minimiser of the proximal objective for every node (:func:`global_search_at`).

    Returns
    -------
    h1, h2, F : ndarray, shape (N,)
    """
    N = w1.size
    h1, h2, F = np.empty(N), np.empty(N), np.empty(N)
    best, at = np.empty(starts), np.empty(starts, np.int64)
    for i in range(N):
        h1[i], h2[i], F[i] = global_search_at(gx, gy, w1[i], w2[i], T11[i], T22[i], V, sigma * sigma, iterations,
                                              best, at)
    return h1, h2, F


@numba.njit(cache=True, nogil=True)
def global_search_at(gx, gy, w1, w2, T11, T22, V, s2, iterations, best, at):
    """Global search for one node: the objective on the polar grid ``gx, gy`` (unit disc)
    scaled to the disc ``|h - w| <= sqrt(2 V l(w, T))``, which holds every minimiser
    (``F(h) >= |h - w|^2 / 2V`` and ``F(w) = l(w, T)``), then :func:`newton` from ``w``
    and from the ``starts = best.size`` best grid points; the lowest local minimum
    ``h1, h2, F``. ``best``, ``at`` (float and int arrays, shape (starts,)) are work space."""
    starts = best.size
    radius = math.sqrt(2.0 * V * objective(w1, w2, w1, w2, T11, T22, V, s2)[0])
    best[:] = np.inf
    at[:] = 0
    for g in range(gx.size):
        f = objective(w1 + radius * gx[g], w2 + radius * gy[g], w1, w2, T11, T22, V, s2)[0]
        j = starts - 1
        if f < best[j]:  # insert into the sorted list of the best grid points
            while j > 0 and f < best[j - 1]:
                best[j], at[j] = best[j - 1], at[j - 1]
                j -= 1
            best[j], at[j] = f, g
    h1, h2, F = newton(w1, w2, w1, w2, T11, T22, V, s2, iterations, NEWTON_TOL)
    for j in range(starts):
        if best[j] < np.inf:
            a, b, f = newton(w1 + radius * gx[at[j]], w2 + radius * gy[at[j]], w1, w2, T11, T22, V, s2, iterations,
                             NEWTON_TOL)
            if f < F:
                h1, h2, F = a, b, f
    return h1, h2, F


def key_cache_on_kernels(dispatcher) -> None:
    """Key ``dispatcher``'s numba cache on this file as well as on its own.

    numba checks a cached kernel against its own source file only (a hash of its content;
    ``(mtime, size)`` in older numba). A kernel of another module that calls (and LLVM
    inlines) the functions here, e.g. those of :mod:`attnlab.theory.split_rule`, would after
    a change of this file (an editable install after ``git pull``) still be loaded from the
    cache with the old code. With this, a change of either file recompiles it. Best effort:
    a dispatcher without a cache (``cache=False``), a numba whose cache lacks these private
    attributes, or a source that cannot be stamped (e.g. a zip) is left as it is, and
    nothing is raised.
    """
    try:
        cache_file = dispatcher._cache._cache_file
        own = dispatcher._cache._impl.locator.get_source_stamp()
        here = newton._cache._impl.locator.get_source_stamp()  # numba's own stamp of this file
        if hasattr(cache_file, "_source_stamp"):
            cache_file._source_stamp = (own, here)
    except Exception:  # noqa: BLE001 (an optional refinement of numba's private cache)
        return


# ----------------------------------------------------------------------------- all cores

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def threads() -> int:
    """Threads of :func:`over_nodes`: ``NUMBA_NUM_THREADS`` (its default: the cores) or
    ``numba.set_num_threads`` in the calling thread, at most the cores this process may
    run on (so a sweep worker with ``NUMBA_NUM_THREADS=1`` stays on one core)."""
    n = min(numba.config.NUMBA_NUM_THREADS, numba.get_num_threads())
    if hasattr(os, "sched_getaffinity"):
        n = min(n, len(os.sched_getaffinity(0)))
    return max(1, n)


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None or _pool._max_workers != workers:
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="attnlab-kernels")
        return _pool


def _forget_pool() -> None:  # a forked child has none of the parent's threads
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _cut(a, axis, lo, hi):
    index = [slice(None)] * a.ndim
    index[axis] = slice(lo, hi)
    return np.ascontiguousarray(a[tuple(index)])


def over_nodes(kernel, args, axes, out_axes, n: int, min_chunk: int):
    """``kernel(*args)`` computed on chunks of the ``n`` nodes in :func:`threads` threads.

    Parameters
    ----------
    kernel : numba function
        A loop over nodes whose outputs at a node depend only on its inputs at that node.
    args : sequence
        Its arguments.
    axes : sequence of int or None
        For each argument, its node axis (``None``: the same for every node).
    out_axes : sequence of int
        For each output array, its node axis.
    n : int
        Number of nodes.
    min_chunk : int
        Fewest nodes per chunk (below ``2 min_chunk`` nodes, one serial call).

    Returns
    -------
    tuple of ndarray
        As ``kernel(*args)``: the chunks' outputs concatenated along ``out_axes``.
    """
    workers = threads()
    chunks = min(4 * workers, n // max(1, min_chunk)) if workers > 1 else 1
    if chunks <= 1:
        return kernel(*args)
    edges = np.linspace(0, n, chunks + 1).astype(np.int64)

    def run(lo, hi):
        return kernel(*(a if ax is None else _cut(a, ax, lo, hi) for a, ax in zip(args, axes)))

    parts = list(_executor(workers).map(run, edges[:-1], edges[1:]))
    return tuple(np.concatenate([p[i] for p in parts], axis=ax) for i, ax in enumerate(out_axes))


def over_blocks(run, blocks: int, block: int) -> np.ndarray:
    """``run(lo, hi)`` over ``blocks`` blocks of ``block`` nodes, shared among :func:`threads` threads.

    Parameters
    ----------
    run : callable
        ``run(lo, hi)`` returns one row per block of the nodes ``lo..hi`` (multiples
        of ``block``), e.g. :func:`followed_sums`.
    blocks, block : int

    Returns
    -------
    ndarray, shape (blocks, ...)
        The rows in the order of the blocks: the same for any number of threads.
    """
    workers = threads()
    chunks = min(4 * workers, blocks) if workers > 1 else 1
    if chunks <= 1:
        return run(0, blocks * block)
    edges = np.linspace(0, blocks, chunks + 1).astype(np.int64) * block
    return np.concatenate(list(_executor(workers).map(run, edges[:-1], edges[1:])))
