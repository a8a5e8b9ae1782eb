"""Rules for the Gaussian expectations of the state evolution, and their symmetry folding.

* Node sets: ``E[g(xi)]`` for ``xi ~ N(0, I_k)`` by the probabilists'
  Gauss-Hermite rule (:func:`gauss_hermite`, :func:`tensor_rule`; weights
  normalised to sum to one), a composite Gauss-Legendre rule with the Gaussian
  density as weight for integrands that are continuous but not smooth
  (:func:`gaussian_panels`), and scrambled Sobol points mapped to Gaussians
  (:func:`gaussian_points`).
* Symmetry folding (:class:`Symmetry`, :func:`eta_rule`): the channel
  integrals over the teacher noise ``eta`` need only a half or a quarter of the nodes.
* The settings of the three ways the channel expectations are computed:
  :class:`SplitRule` (global proximal minimiser, :mod:`attnlab.theory.split_rule`),
  :class:`QMCRule` (followed minimiser, :mod:`attnlab.theory.followed_rule`) and
  :class:`Quadrature`, which holds both plus the tensor Gauss-Hermite orders.

Symmetries of the channel integrals (``L = 2``). In rotated coordinates
``x_s = (x_1 + x_2)/sqrt(2)``, ``x_d = (x_1 - x_2)/sqrt(2)`` (the standard
Gaussian is rotation invariant) three maps leave the integrands of the hat
updates unchanged or change their sign:

* ``flip`` on the positional branch (``theta = 0``): ``eta -> -eta``. The
  teacher attention depends on ``h*`` only through ``h*_l (h*_1 - h*_2)``, so it
  is unchanged; ``E[f . eta]`` is odd (it vanishes).
* ``flip`` on the semantic branch (``m = 0``): ``(xi, eta) -> -(xi, eta)``:
  ``w, h* -> -w, -h*`` and the proximal point changes sign; ``E[f_1 - f_2]``
  is odd.
* ``swap`` when ``A_11 = A_22`` (then ``A`` is symmetric): exchanging the two
  positions combined with ``h -> -h``, i.e. ``x_s -> -x_s`` for both ``xi``
  and ``eta``; every hat integrand is even.

Any of them maps ``eta_s -> -eta_s``, so the rule needs only ``eta_s >= 0``;
``flip`` and ``swap`` together also map ``eta_d -> -eta_d`` (keeping
``eta_s``), so then ``eta_d >= 0`` suffices: a 4x saving.
Source of the equations: Cui et al. 2024 (arXiv:2402.03902), Result 4.2.
"""
from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
from numpy.polynomial.hermite_e import hermegauss

from ..params import check_choice, check_int, check_positive

__all__ = ["gauss_hermite", "gauss_legendre", "tensor_rule", "folded", "gaussian_panels", "gaussian_points",
           "points_cache_dir", "POINTS_SUBFOLDER", "Symmetry", "symmetry_of", "rotate", "eta_rule", "SplitRule",
           "QMCRule", "Quadrature", "METHODS"]

#: Ways of computing the channel expectations with the global minimiser (:class:`Quadrature`).
METHODS = ("split", "gauss-hermite")


# ----------------------------------------------------------------------------- node sets

@lru_cache(maxsize=64)
def gauss_hermite(order: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the ``order``-point rule for ``E[g(x)]``, ``x ~ N(0, 1)``
    (``numpy.polynomial.hermite_e.hermegauss``, cached; read-only arrays).

    Returns
    -------
    nodes, weights : ndarray, shape (order,)
        ``weights.sum() == 1``; exact for polynomials of degree ``< 2 order``.

    Raises
    ------
    ValueError
        If ``order < 1``.
    """
    order = check_int("order", order, 1)
    x, w = hermegauss(order)
    x.flags.writeable = False
    w = w / w.sum()
    w.flags.writeable = False
    return x, w


@lru_cache(maxsize=64)
def gauss_legendre(order: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of the ``order``-point Gauss-Legendre rule on ``[-1, 1]``
    (``numpy.polynomial.legendre.leggauss``, cached; read-only arrays).

    Raises
    ------
    ValueError
        If ``order < 1``.
    """
    order = check_int("order", order, 1)
    x, w = np.polynomial.legendre.leggauss(order)
    x.flags.writeable = w.flags.writeable = False
    return x, w


@lru_cache(maxsize=16)
def tensor_rule(orders: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Tensor-product rule for ``E[g(x)]``, ``x ~ N(0, I_k)``, ``k = len(orders)``.

    Returns
    -------
    nodes : ndarray, shape (k, N)
        ``N = prod(orders)``; row ``j`` holds coordinate ``j`` of every node
        (read-only: the arrays are cached).
    weights : ndarray, shape (N,)
    """
    rules = [gauss_hermite(o) for o in orders]
    grids = np.meshgrid(*[r[0] for r in rules], indexing="ij")
    wgrids = np.meshgrid(*[r[1] for r in rules], indexing="ij")
    nodes = np.stack([g.ravel() for g in grids])
    weights = np.prod(np.stack([g.ravel() for g in wgrids]), axis=0)
    nodes.flags.writeable = weights.flags.writeable = False
    return nodes, weights


def folded(nodes: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The half ``x >= 0`` of a rule symmetric under ``x -> -x``, for even integrands.

    Nodes ``x > 0`` get twice their weight, a node at ``0`` keeps its weight,
    so ``sum w g(x)`` is unchanged for every even ``g`` (at half the cost).

    Parameters
    ----------
    nodes, weights : ndarray, shape (n,)
        A rule whose nodes and weights are symmetric about zero.

    Returns
    -------
    nodes, weights : ndarray, shape (ceil(n / 2),)
    """
    nodes, weights = np.asarray(nodes, dtype=float), np.asarray(weights, dtype=float)
    keep = nodes >= -1e-14
    return np.abs(nodes[keep]), np.where(nodes[keep] > 1e-14, 2.0, 1.0) * weights[keep]


def gaussian_panels(lo: float, hi: float, panel: float, order: int) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss-Legendre rule for ``int_lo^hi g(x) phi(x) dx``, ``phi`` the N(0, 1) density.

    ``[lo, hi]`` is cut into equal panels of length ``<= panel``, each with
    ``order`` Gauss-Legendre points (:func:`gauss_legendre`).

    Returns
    -------
    nodes, weights : ndarray, shape (panels * order,)

    Raises
    ------
    ValueError
        If ``hi <= lo``, ``panel <= 0`` or ``order < 1``.
    """
    order = check_int("order", order, 1)
    if not hi > lo:
        raise ValueError(f"hi must be > lo (got lo={lo}, hi={hi})")
    if not panel > 0:
        raise ValueError(f"panel must be > 0 (got {panel})")
    edges = np.linspace(lo, hi, int(np.ceil((hi - lo) / panel - 1e-12)) + 1)
    x, w = gauss_legendre(order)
    half = np.diff(edges)[:, None] / 2
    nodes = edges[:-1, None] + (x + 1) * half
    weights = w * half * np.exp(-0.5 * nodes ** 2) / np.sqrt(2 * np.pi)
    return nodes.ravel(), weights.ravel()


# ----------------------------------------------------------------------------- symmetry folding

@dataclass(frozen=True)
class Symmetry:
    """Which symmetries hold at given overlaps.

    Attributes
    ----------
    flip : bool
        ``theta = 0`` or ``m = 0`` exactly (a pinned branch).
    swap : bool
        ``A_11 = A_22``.
    odd : tuple of str
        Expectations that vanish by symmetry (``"f_eta"`` if ``theta = 0``,
        ``"f_s"`` if ``m = 0``).
    """

    flip: bool
    swap: bool
    odd: tuple

    @property
    def fold_s(self) -> bool:
        """Only ``eta_s >= 0`` is needed."""
        return self.flip or self.swap

    @property
    def fold_d(self) -> bool:
        """Only ``eta_d >= 0`` is needed (given ``eta_s >= 0``)."""
        return self.flip and self.swap


def symmetry_of(ov, params) -> Symmetry:
    """The symmetries of the channel integrals at overlaps ``ov`` (see the module docstring)."""
    odd = tuple(name for name, zero in (("f_eta", ov.theta == 0.0), ("f_s", ov.m == 0.0)) if zero)
    A = params.A_array
    return Symmetry(flip=bool(odd), swap=bool(A[0, 0] == A[1, 1]), odd=odd)


def rotate(x_s, x_d):
    """Components ``(x_1, x_2)`` from rotated coordinates ``(x_s, x_d)``."""
    return (x_s + x_d) / np.sqrt(2.0), (x_s - x_d) / np.sqrt(2.0)


@lru_cache(maxsize=64)
def eta_rule(sym: Symmetry, order_s: int, order_d: int, panel: float | None = None, limit: float = 6.0):
    """Nodes and weights for ``E_eta[J(eta)]``, ``eta ~ N(0, I_2)``, folded by ``sym``.

    Gauss-Hermite (``order_s`` points) in ``eta_s``. In ``eta_d``: with
    ``panel=None`` Gauss-Hermite (``order_d`` points); otherwise composite
    Gauss-Legendre (``order_d`` points per panel of length ``<= panel`` on
    ``|eta_d| <= limit``; the Gaussian mass beyond ``6`` is ``2e-9``), for the
    kinks of the integrand in ``eta_d`` (where the proximal problem changes from
    one minimiser to two mirror minima), on which Gauss-Hermite converges
    erratically.

    Returns
    -------
    eta1, eta2, weights : ndarray, shape (N,)
        Read-only (the rules are cached).
    """
    xs, ws = gauss_hermite(order_s)
    if sym.fold_s:
        xs, ws = folded(xs, ws)
    if panel is None:
        xd, wd = gauss_hermite(order_d)
        if sym.fold_d:
            xd, wd = folded(xd, wd)
    else:
        xd, wd = gaussian_panels(0.0 if sym.fold_d else -limit, limit, panel, order_d)
        if sym.fold_d:
            wd = 2.0 * wd
    S, D = np.meshgrid(xs, xd, indexing="ij")
    e1, e2 = rotate(S.ravel(), D.ravel())
    out = e1, e2, np.outer(ws, wd).ravel()
    for a in out:
        a.flags.writeable = False
    return out


# ----------------------------------------------------------------------------- rule settings

@dataclass(frozen=True)
class SplitRule:
    """Orders of the split rule (:mod:`attnlab.theory.split_rule`).

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

    Raises
    ------
    ValueError
        If an order, ``scan`` (>= 3), ``max_jumps`` or ``bisections`` is not a
        positive integer, or a panel length or ``u_max`` is not positive.

    Notes
    -----
    The defaults keep the expectations within 4e-5 relative of a rule with all
    orders doubled at omega = 0.3, lambda = 0.01. The weakest direction is
    ``order_v``, across the lines: doubling it alone changes ``E[f1 xi1 + f2 xi2]``
    by 2e-3 at omega = 0 (positional, alpha = 0.7) and by 7e-3 at lambda = 0.001
    (every other order doubled: <= 4e-4, ``order_u`` and ``panel`` at lambda = 0.001).
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
    bisections: int = 10

    def __post_init__(self):
        for name, low in (("order_eta", 1), ("order_eta_d", 1), ("order_v", 1), ("order_u", 1), ("scan", 3),
                          ("max_jumps", 1), ("bisections", 1)):
            check_int(name, getattr(self, name), low)
        for name in ("eta_panel", "panel", "u_max"):
            check_positive(name, getattr(self, name))

    @classmethod
    def fast(cls) -> "SplitRule":
        """A cheap rule: 1/14 of the nodes of the default, errors of order 1e-3 on
        the fixed-point map (for interactive use, and as the solver's first stage)."""
        return cls(order_eta=4, order_eta_d=4, eta_panel=2.0, order_v=6, order_u=4, panel=3.0, scan=13,
                   bisections=12)

    def refined(self, factor: float = 1.5) -> "SplitRule":
        """Orders multiplied by ``factor`` (rounded up) and a scan about twice as fine."""
        up = lambda o: int(np.ceil(o * factor))
        return SplitRule(up(self.order_eta), up(self.order_eta_d), self.eta_panel, up(self.order_v), up(self.order_u),
                         self.panel, 2 * self.scan - 1, self.u_max, self.max_jumps, self.bisections)


@dataclass(frozen=True)
class QMCRule:
    """Point set of the randomised quasi-Monte Carlo rule (:mod:`attnlab.theory.followed_rule`).

    Attributes
    ----------
    log2_points : int
        ``2**log2_points`` Sobol points per scramble.
    scrambles : int
        Independent scrambles (their spread is the integration error's scale).
    seed : int
        Seed of the scrambles; a different seed gives an independent point set.

    Raises
    ------
    ValueError
        If ``log2_points`` is not in ``[4, 22]``, ``scrambles < 1`` or ``seed < 0``.
    """

    log2_points: int = 15
    scrambles: int = 4
    seed: int = 0

    def __post_init__(self):
        check_int("log2_points", self.log2_points, 4)
        if self.log2_points > 22:
            raise ValueError(f"log2_points must be an integer in [4, 22], got {self.log2_points!r}")
        check_int("scrambles", self.scrambles, 1)
        check_int("seed", self.seed, 0)

    @property
    def points(self) -> int:
        """Total number of points, ``scrambles * 2**log2_points``."""
        return self.scrambles * 2 ** self.log2_points

    @classmethod
    def fast(cls) -> "QMCRule":
        """``2**13`` points, 2 scrambles: the coarse stage of a solve."""
        return cls(log2_points=13, scrambles=2)

    def refined(self, factor: float = 1.5) -> "QMCRule":
        """About ``factor**2`` times more points and an independent seed (for error estimates)."""
        extra = max(1, int(np.ceil(2 * np.log2(factor))))
        return QMCRule(min(22, self.log2_points + extra), self.scrambles, self.seed + 1)


def points_cache_dir() -> Path | None:
    """Where :func:`gaussian_points` keeps its point sets between sessions: ``$ATTNLAB_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/attnlab``, else ``~/.cache/attnlab``; ``None`` (no disk cache) if
    ``ATTNLAB_CACHE_DIR`` is set to the empty string or the folder neither exists nor can be
    created. A folder this user cannot write (one an administrator prepared with
    ``attnlab warm-up``) is read, never written; one that other users can write is ignored
    (:func:`attnlab.safe_cache.trusted`). The entries are in its sub-folder
    :data:`POINTS_SUBFOLDER`; anything else there (e.g. the pickles of attnlab before 0.9
    in ``joblib/``) is never read."""
    env = os.environ.get("ATTNLAB_CACHE_DIR")
    if env == "":
        return None
    try:
        folder = Path(env) if env else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "attnlab"
    except RuntimeError:  # no home directory
        return None
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:  # (a read-only file system: a folder prepared there is still read)
        pass
    return folder if folder.is_dir() else None


#: Sub-folder of :func:`points_cache_dir` holding the point sets as ``.npy`` arrays with their
#: manifests (:mod:`attnlab.safe_cache`).
POINTS_SUBFOLDER = "points-npy-v1"


def _sobol_gaussians(log2_points: int, scrambles: int, seed: int, dim: int, versions: str) -> np.ndarray:
    """The point set of :func:`gaussian_points` (``versions``, of numpy and scipy, only keys the
    disk cache: another numpy may draw other scrambles, another scipy scramble differently)."""
    from scipy.special import ndtri
    from scipy.stats import qmc

    blocks = [qmc.Sobol(dim, scramble=True, seed=np.random.default_rng([seed, k])).random_base2(log2_points)
              for k in range(scrambles)]
    u = np.clip(np.concatenate(blocks), 1e-16, 1 - 1e-16)
    return np.ascontiguousarray(ndtri(u).T)


#: One thread at a time reads or writes the point sets' disk cache (the branches of
#: :func:`~attnlab.theory.thresholds.find_transition` are solved in two threads and ask for
#: the same points at once): each set is made once, and no entry is written twice at once.
_points_lock = threading.Lock()


def _new_points_lock() -> None:  # a forked child has none of the parent's threads, which may hold the lock
    global _points_lock
    _points_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_points_lock)


@lru_cache(maxsize=8)
def gaussian_points(rule: QMCRule, dim: int = 6) -> np.ndarray:
    """Standard Gaussian points of ``rule``, shape ``(dim, rule.points)``, read-only.

    ``rule.scrambles`` blocks of ``2**rule.log2_points`` scrambled Sobol points
    (``scipy.stats.qmc.Sobol``, seeded by ``(rule.seed, block)``) mapped by the
    inverse normal CDF. Rows ``0..3`` are ``xi_1, xi_2, eta_1, eta_2``; rows 4 and 5
    are ``nu_1, nu_2`` of the positional branch's initial fields.

    Kept on disk as plain ``.npy`` arrays (:mod:`attnlab.safe_cache`: never a pickle, a
    SHA-256, shape and dtype check on load, folders writable by other users ignored) in
    :data:`POINTS_SUBFOLDER` of :func:`points_cache_dir`, keyed by the rule, ``dim`` and the
    numpy and scipy versions: a new session reads them instead of importing ``scipy.stats``
    (0.8-1.2 s on two cores) and generating them. An entry that fails a check is generated
    again (one :class:`~attnlab.safe_cache.CacheWarning`); where the cache cannot be written
    (permissions, a full disk) the points are generated (one warning for a failed write).
    The process's warning filters are left alone (they are shared by all threads).
    """
    import scipy

    from ..safe_cache import load_array, save_array

    versions = f"numpy {np.__version__}, scipy {scipy.__version__}"
    args = (rule.log2_points, rule.scrambles, rule.seed, dim, versions)
    tag = hashlib.sha256(versions.encode()).hexdigest()[:12]
    name = f"sobol-{rule.log2_points}-{rule.scrambles}-{rule.seed}-{dim}-{tag}"
    root = points_cache_dir()
    folder = None if root is None else root / POINTS_SUBFOLDER
    with _points_lock:
        pts = load_array(folder, name, shape=(dim, rule.scrambles * 2 ** rule.log2_points))
        if pts is None:
            pts = _sobol_gaussians(*args)
            if folder is not None:
                with contextlib.suppress(OSError):
                    folder.mkdir(exist_ok=True)
                if folder.is_dir():
                    save_array(folder, name, pts)
    pts = np.ascontiguousarray(pts)
    pts.setflags(write=False)
    return pts


@dataclass(frozen=True)
class Quadrature:
    """How the channel expectations are computed.

    Attributes
    ----------
    order_xi, order_eta : int
        Gauss-Hermite points per dimension of the student noise ``xi`` and the
        teacher noise ``eta`` (the coarse stage of ``"split"``).
    order_error : int
        Points per dimension for ``eps_g`` (smooth integrand; at 20 within 1e-9
        relative of order 40 on both branches at omega = 0.3).
    method : {"split", "gauss-hermite"}
        With the global minimiser: ``"split"`` (default), the discontinuity-aware
        rule of :mod:`attnlab.theory.split_rule` for the final fixed point, after a
        coarse tensor Gauss-Hermite solve; ``"gauss-hermite"``, tensor
        Gauss-Hermite only (errors of order 1e-2 on the positional branch at the
        default orders, and spurious fixed points there).
    split : SplitRule
        Orders of the split rule (default: error < 1e-4 relative at omega = 0.3,
        lambda = 0.01; up to 5e-4 at omega = 0 and 2e-2 on ``eps_g`` at
        lambda = 0.001, as ``error_estimate=True`` reports;
        :meth:`SplitRule.fast`: ~1e-3). Used with the global proximal minimiser.
    qmc : QMCRule
        Point set for the followed minimiser (:mod:`attnlab.theory.followed_rule`;
        default ``2**15`` scrambled Sobol points x 4 scrambles: 3e-4 to 3e-3
        relative on the overlaps at omega = 0.3, as ``error_estimate=True`` reports).

    Raises
    ------
    ValueError
        Unknown ``method``, an order below 2, ``split`` not a :class:`SplitRule`
        or ``qmc`` not a :class:`QMCRule`.
    """

    order_xi: int = 8
    order_eta: int = 6
    order_error: int = 20
    method: str = "split"
    split: SplitRule = field(default_factory=SplitRule)
    qmc: QMCRule = field(default_factory=QMCRule)

    def __post_init__(self):
        check_choice("method", self.method, METHODS)
        for name in ("order_xi", "order_eta", "order_error"):
            check_int(name, getattr(self, name), 2)
        if not isinstance(self.split, SplitRule):
            raise ValueError(f"split must be a SplitRule, got {self.split!r}")
        if not isinstance(self.qmc, QMCRule):
            raise ValueError(f"qmc must be a QMCRule, got {self.qmc!r}")

    @classmethod
    def fast(cls) -> "Quadrature":
        """The cheap rules for interactive use (the default's :meth:`cheap`): about 3x
        faster per fixed point than the default, with errors of order 1e-3 on the overlaps."""
        return cls().cheap()

    def cheap(self) -> "Quadrature":
        """This rule with the cheap split rule (:meth:`SplitRule.fast`) and ``2**14 x 2``
        quasi-Monte Carlo points: the first stage of a solve or a threshold search."""
        return replace(self, split=SplitRule.fast(), qmc=QMCRule(log2_points=14, scrambles=2))

    def refined(self, factor: float = 1.5) -> "Quadrature":
        """A finer rule (orders multiplied by ``factor``), to estimate the quadrature error."""
        up = lambda o: int(np.ceil(o * factor))
        return Quadrature(up(self.order_xi), up(self.order_eta), up(self.order_error), self.method,
                          self.split.refined(factor), self.qmc.refined(factor))
