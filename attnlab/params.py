"""Validated parameters of the solvable attention model.

Source: Cui, Behrens, Krzakala, Zdeborova (2024), *A phase transition between
positional and semantic learning in a solvable model of dot-product attention*,
arXiv:2402.03902, Sec. 2 (data model) and Sec. 3 (empirical risk).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

__all__ = ["ModelParams", "DEFAULT_SIGMA", "DEFAULT_LAM", "DEFAULT_OMEGA", "DEFAULT_A", "DEFAULT_ALPHA_MAX",
           "DEFAULT_XTOL", "PAPER_A_ASYMMETRIC", "INITS", "METHODS", "TEACHERS", "BRANCHES", "MINIMIZERS",
           "DEFAULT_MINIMIZER", "COUNTING_ATTENTION", "COUNTING_DEFAULTS", "POSITIONAL_INIT_SCALE", "MAX_TOLERANCE",
           "MIN_XTOL", "DEFAULT_TOL", "FOLLOWED_TOL",
           "MAX_STEPS", "MAX_EPOCHS",
           "SIGMA_MAX", "LAM_MAX", "SIGMA_LIMIT", "SIGMA_MIN",
           "check_positive", "check_in_range", "check_choice", "check_int", "check_tolerance", "check_params",
           "check_finite_array", "check_memory", "memory_bytes", "check_path", "check_xy"]

#: Largest tolerance accepted for a fixed point (``tol``) or a root in ``alpha`` (``xtol``):
#: a looser one would return the starting point as "converged".
MAX_TOLERANCE = 1e-2
#: Smallest tolerance accepted for a root in ``alpha`` (``xtol``): six digits of ``alpha_c``,
#: already below what the followed minimiser's quasi-Monte Carlo noise lets one resolve.
MIN_XTOL = 1e-6
#: Largest step budget of an optimiser (``steps``) and number of epochs of the counting
#: task (``epochs``): beyond them a run would last days on a laptop, which looks like a hang.
MAX_STEPS = 1_000_000
MAX_EPOCHS = 1_000
#: Default tolerance of a state-evolution fixed point (``solve_state_evolution``'s ``tol``).
DEFAULT_TOL = 1e-7
#: Smallest residual tolerance used with the followed minimiser and the default
#: point set (``2**17`` points); it grows as ``1/sqrt(points)`` for other point sets.
#: The quasi-Monte Carlo map moves in steps (a node whose descent changes basin
#: moves the expectations by ~1/N), which puts a floor of 1e-5 to 1e-4 under the
#: residual; the integration error of the fixed point (about 1e-3) is larger still.
FOLLOWED_TOL = 3e-4
#: Largest ``sigma`` and ``lambda`` of :class:`ModelParams`: far beyond the model's regime
#: (order one and 0.01), and below where the data or the ridge update overflow (1e300 did).
SIGMA_MAX = 1e3
LAM_MAX = 1e3
#: Largest ``sigma`` of the state evolution (the split rule's scan and the quasi-Monte Carlo
#: points are built for ``sigma`` of order one: at 10 the fixed point is not reached).
SIGMA_LIMIT = 5.0
#: Smallest ``sigma`` of the state evolution (at 1e-3 the positional branch's iteration
#: underflows; at 0.01 and 0.02 it still converges).
SIGMA_MIN = 0.01

#: The paper's parameters (Sec. 4): token-content scale ``sigma``, ridge strength
#: ``lambda`` and positional weight ``omega`` of its figures; the defaults of
#: :class:`ModelParams`.
DEFAULT_SIGMA = 0.5
DEFAULT_LAM = 0.01
DEFAULT_OMEGA = 0.3
#: Default positional attention matrix of the teacher (paper, Sec. 4).
DEFAULT_A = ((0.6, 0.4), (0.4, 0.6))
#: Default search interval ``(0, alpha_max]`` and root tolerance in ``alpha`` of the
#: thresholds ``alpha_c``, ``alpha_l`` (the paper's figures span ``alpha <= 2``).
DEFAULT_ALPHA_MAX = 3.0
DEFAULT_XTOL = 1e-3
#: The asymmetric positional matrix also used in the paper's appendix.
PAPER_A_ASYMMETRIC = ((0.3, 0.7), (0.8, 0.2))

#: Initialisations and optimisers of :func:`attnlab.training.minimize_risk` (here so
#: that the CLI can offer them without importing torch).
INITS = ("semantic", "positional", "random")
METHODS = ("gd", "lbfgs", "adam")
#: The two branches of minima (and of the state evolution).
BRANCHES = ("semantic", "positional")
#: Per-sample proximal minimisers of the state evolution (:mod:`attnlab.theory.solver`):
#: ``"global"`` (the replica computation of the global minimum of the risk, the paper's
#: Result 4.2) and ``"followed"`` (the local minimiser reached by descent from the
#: preactivations of gradient descent's initialisation, see
#: :mod:`attnlab.theory.followed_rule`); the default describes the minimum gradient descent
#: reaches from the branch's init (book Chapter 5).
MINIMIZERS = ("global", "followed")
#: The default of :data:`MINIMIZERS`.
DEFAULT_MINIMIZER = "followed"
#: Scale ``c`` of the positional init ``Q0 = c 1_d`` of gradient descent (so ``m0 = c``).
POSITIONAL_INIT_SCALE = 0.5
#: The counting task (:mod:`attnlab.counting`, here so that the CLI can offer them without
#: importing torch): what the queries and keys of the attention layer may see, and the
#: default configuration of :func:`attnlab.counting.train_counting`. Sequence length,
#: alphabet size, widths and learning rate follow the paper (Sec. 1); the number of
#: sequences, epochs and the batch size are tuned so that one run takes about a minute on
#: 2 lightly loaded CPU cores (9384 Adam steps) and every restricted variant reaches
#: >= 99% test accuracy (``benchmarks/bench_counting.py``).
COUNTING_ATTENTION = ("positional", "semantic", "both")
#: The default configuration of :func:`attnlab.counting.train_counting` (see above).
COUNTING_DEFAULTS = dict(L=10, T=15, d_model=64, d_hidden=128, n_train=50_000, n_test=10_000,
                         epochs=12, batch_size=64, lr=1e-3)
#: Teacher draws of :func:`attnlab.data.sample_teacher`: ``Q* ~ N(0, I_d)``, or rescaled to ``|Q*|^2 = d``.
TEACHERS = ("gaussian", "exact-norm")


def _real(name: str, value, allowed: str) -> float:
    """``float(value)`` for a real number; ``TypeError`` for a bool, a string, a complex
    number or a non-number, naming ``name`` and the ``allowed`` range."""
    if isinstance(value, (bool, np.bool_, str, bytes, complex, np.complexfloating)) or value is None:
        raise TypeError(f"{name} must be a real number in {allowed}, got {value!r} ({type(value).__name__})")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number in {allowed}, got {value!r} ({type(value).__name__})") from None


def check_positive(name: str, value: float, *, strict: bool = True) -> float:
    """Return ``float(value)`` or raise ``ValueError`` naming ``name``.

    Parameters
    ----------
    name : str
        Parameter name used in the error message.
    value : float
        Value to check; must be finite and ``> 0`` (``>= 0`` if not strict).
    strict : bool
        Whether zero is excluded.

    Raises
    ------
    TypeError
        If ``value`` is not a real number (a bool, a string, a complex number).
    ValueError
        If ``value`` is not a finite number in the allowed range.
    """
    rng = "(0, inf)" if strict else "[0, inf)"
    v = _real(name, value, rng)
    ok = np.isfinite(v) and (v > 0 if strict else v >= 0)
    if not ok:
        raise ValueError(f"{name} must be finite and in {rng}, got {_shown(value)}")
    return v


def _shown(value) -> str:
    """``value`` as an error message shows it: a NumPy scalar as the plain number."""
    return repr(value.item()) if isinstance(value, np.generic) else repr(value)


def check_in_range(name: str, value: float, lo: float, hi: float, *, open_lo: bool = False) -> float:
    """Return ``float(value)`` if ``lo <= value <= hi`` (``lo < value`` with ``open_lo``),
    else raise ``ValueError`` (``TypeError`` if it is not a real number) naming ``name``
    and the interval."""
    rng = f"({lo:g}, {hi:g}]" if open_lo else f"[{lo:g}, {hi:g}]"
    v = _real(name, value, rng)
    if not (np.isfinite(v) and (lo < v if open_lo else lo <= v) and v <= hi):
        raise ValueError(f"{name} must be in {rng}, got {_shown(value)}")
    return v


def check_int(name: str, value: int, minimum: int, maximum: int | None = None) -> int:
    """Return ``int(value)`` if it is an integer ``>= minimum`` (and ``<= maximum``), else raise
    ``ValueError`` (a float counts if it holds an integer below ``2**53``, where floats are exact)."""
    allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, (float, np.floating)) and float(value).is_integer() and abs(value) < 2 ** 53:
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer {allowed}, got {_shown(value)}")
    if value < minimum or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an integer {allowed}, got {_shown(value)}")
    return int(value)


def check_tolerance(name: str, value: float, maximum: float = MAX_TOLERANCE, minimum: float | None = None) -> float:
    """Return ``float(value)`` if it is a tolerance in ``(0, maximum]`` (``[minimum, maximum]``
    if ``minimum`` is given), else raise ``ValueError`` (``TypeError`` if it is not a real
    number) naming ``name``. (A fixed point's ``tol`` has no lower bound: one below double
    precision is reported as not met.)"""
    if minimum is None:
        return check_in_range(name, value, 0.0, maximum, open_lo=True)
    return check_in_range(name, value, minimum, maximum)


def check_params(params, name: str = "params") -> "ModelParams":
    """Return ``params`` if it is a :class:`ModelParams`, else raise ``TypeError``."""
    if not isinstance(params, ModelParams):
        raise TypeError(f"{name} must be an attnlab.ModelParams (e.g. ModelParams(sigma=0.5, lam=0.01, omega=0.3)), "
                        f"got {type(params).__name__}")
    return params


def check_finite_array(name: str, value, *, shapes: Sequence[tuple] | None = None) -> np.ndarray:
    """``value`` as a float64 array, checked: real, finite and (if ``shapes`` is given,
    ``None`` a free size) of one of ``shapes``.

    Raises
    ------
    TypeError
        If ``value`` is complex or not numeric.
    ValueError
        If it has a non-finite entry or the wrong shape.
    """
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().numpy()
    if np.iscomplexobj(value):
        raise TypeError(f"{name} must be a real array, got a complex one")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real numeric array, got {type(value).__name__}") from None
    if shapes is not None and not any(len(s) == arr.ndim and all(a is None or a == b for a, b in zip(s, arr.shape))
                                      for s in shapes):
        want = " or ".join(str(tuple("n" if a is None else a for a in s)).replace("'", "") for s in shapes)
        raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf), got {np.size(arr) - np.isfinite(arr).sum()} "
                         "non-finite entries")
    return arr


def check_path(name: str, value):
    """``value`` if it is a path (``str`` or ``os.PathLike``), else ``TypeError`` naming ``name``."""
    import os

    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or pathlib.Path), got {value!r} ({type(value).__name__})")
    return value


def check_xy(x, y) -> tuple:
    """Inputs and targets ``x, y`` as float64 arrays of one shape ``(n, L, d)``, finite
    (``TypeError``/``ValueError`` naming them otherwise)."""
    x = check_finite_array("x", x, shapes=[(None, None, None)])
    y = check_finite_array("y", y)
    if y.shape != x.shape:
        raise ValueError(f"x and y must both have shape (n, L, d); got x {x.shape} and y {y.shape}")
    return x, y


def memory_bytes() -> int:
    """Physical memory of this machine in bytes (16 GiB if it cannot be read)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16 * 2 ** 30


def check_memory(name: str, size: float, bytes_per_unit: float, what: str) -> None:
    """Raise ``ValueError`` naming ``name`` if ``size`` units of ``bytes_per_unit`` bytes
    need more than half of this machine's memory (the limit is stated in the message).

    Parameters
    ----------
    name : str
        The parameter(s) that set ``size`` (e.g. ``"alpha * d"``).
    size : float
        Number of units (e.g. ``n * d``).
    bytes_per_unit : float
        Memory per unit.
    what : str
        What the memory holds, for the message.
    """
    budget = memory_bytes() / 2
    limit = int(budget // bytes_per_unit)
    if not size <= limit:
        raise ValueError(f"{name} = {size:.4g} is too large: {what} would need {size * bytes_per_unit / 2 ** 30:.3g} GiB; "
                         f"{name} must be <= {limit:.4g} (half of this machine's {memory_bytes() / 2 ** 30:.3g} GiB)")


def check_choice(name: str, value: str, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ``ValueError``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value


def _validate_A(A, L: int) -> tuple:
    if np.iscomplexobj(A):
        raise TypeError(f"A must be a real {L}x{L} row-stochastic matrix, got a complex one")
    try:
        arr = np.asarray(A, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"A must be a numeric {L}x{L} matrix, got {A!r}") from None
    if arr.shape != (L, L):
        raise ValueError(f"A must have shape ({L}, {L}) (L x L), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("A must have finite, non-negative entries (a row-stochastic matrix)")
    rows = arr.sum(axis=1)
    if not np.allclose(rows, 1.0, atol=1e-8):
        raise ValueError(f"A must be row-stochastic (each row sums to 1), got row sums {rows.tolist()}")
    return tuple(tuple(float(v) for v in row) for row in arr)


@dataclass(frozen=True)
class ModelParams:
    """Parameters of the teacher, the student and the ridge-regularised risk.

    Parameters
    ----------
    sigma : float
        Standard deviation of the token content, ``z_l ~ N(0, sigma^2 I_d)``;
        must be in ``(0, SIGMA_MAX]`` = ``(0, 1000]``. Paper: 0.5.
    lam : float
        Ridge strength ``lambda`` of the risk ``R(Q)`` (Sec. 3 of the paper);
        must be in ``[0, LAM_MAX]`` = ``[0, 1000]`` (from ``lambda`` of order one on, every
        minimum is ``Q = 0``). Paper: 0.01.
    omega : float
        Weight of the positional part of the teacher,
        ``T(h*) = (1 - omega) softmax(h* h*^T) + omega A``; in ``[0, 1]``.
    A : array_like, shape (L, L)
        Row-stochastic, non-negative positional attention matrix of the teacher.
        Default ``[[0.6, 0.4], [0.4, 0.6]]``.
    L : int
        Tokens per sequence, ``>= 2`` (the theory is for ``L = 2``).
    r : int
        Rank of the student's query/key matrix ``Q`` (shape ``(d, r)``), ``>= 1``.

    Raises
    ------
    TypeError
        If a number is given as a string, a bool or a complex number; the message names it.
    ValueError
        If any parameter is outside its allowed range; the message names it.
    """

    sigma: float = DEFAULT_SIGMA
    lam: float = DEFAULT_LAM
    omega: float = DEFAULT_OMEGA
    A: tuple = field(default=None)
    L: int = 2
    r: int = 1

    def __post_init__(self):
        L = check_int("L", self.L, 2)
        object.__setattr__(self, "L", L)
        object.__setattr__(self, "r", check_int("r (rank)", self.r, 1))
        object.__setattr__(self, "sigma", check_in_range("sigma", self.sigma, 0.0, SIGMA_MAX, open_lo=True))
        object.__setattr__(self, "lam", check_in_range("lambda (lam)", self.lam, 0.0, LAM_MAX))
        object.__setattr__(self, "omega", check_in_range("omega", self.omega, 0.0, 1.0))
        A = self.A
        if A is None:
            if L != 2:
                raise ValueError(f"A must be given explicitly when L != 2 (got L={L})")
            A = DEFAULT_A
        object.__setattr__(self, "A", _validate_A(A, L))

    @property
    def A_array(self) -> np.ndarray:
        """The positional matrix ``A`` as a float64 array of shape ``(L, L)``."""
        return np.array(self.A, dtype=float)

    def replace(self, **changes) -> "ModelParams":
        """Return a copy with some fields changed (validated again)."""
        kw = dict(sigma=self.sigma, lam=self.lam, omega=self.omega, A=self.A, L=self.L, r=self.r)
        kw.update(changes)
        return ModelParams(**kw)

    def to_record(self) -> dict:
        """The parameters as one flat record: the format of every results table, run id and JSON output.

        Keys ``omega, sigma, lambda`` (the field ``lam``), the entries of ``A``
        row by row as ``A11, A12, ..., ALL`` (1-based; ``A1_10`` style for
        ``L >= 10``), and ``rank`` (the field ``r``) only when it is not 1, so that
        the record of a rank-1 model, whose key set is hashed into the run ids of
        the cached tables, stays what it has always been. Values are plain floats
        and ints; :meth:`from_record` reads the record back.
        """
        record = dict(omega=self.omega, sigma=self.sigma, **{"lambda": self.lam})
        record.update({_A_key(i, j, self.L): self.A[i][j] for i in range(self.L) for j in range(self.L)})
        if self.r != 1:
            record["rank"] = self.r
        return record

    @classmethod
    def from_record(cls, record) -> "ModelParams":
        """The :class:`ModelParams` of a record of :meth:`to_record` (a results row, a run spec).

        Other keys of ``record`` (``d``, ``alpha``, results ...) are ignored; ``L``
        is read off the ``A`` entries, ``rank`` defaults to 1.

        Raises
        ------
        ValueError
            If a key is missing (the message names it) or a value is out of range.
        """
        missing = [k for k in ("omega", "sigma", "lambda") if k not in record]
        if missing:
            raise ValueError(f"a parameter record needs the keys omega, sigma, lambda, A11..A22; missing {missing}")
        entries = [k for k in record if re.fullmatch(r"A\d+(_\d+)?", str(k))]
        L = math.isqrt(len(entries))
        keys = [[_A_key(i, j, L) for j in range(L)] for i in range(L)]
        if L < 2 or not all(k in record for row in keys for k in row):
            raise ValueError(f"a parameter record needs the L x L entries of A (A11, A12, A21, A22 for L = 2), "
                             f"got {entries}")
        A = [[record[k] for k in row] for row in keys]
        return cls(sigma=record["sigma"], lam=record["lambda"], omega=record["omega"], A=A, L=L,
                   r=record.get("rank", 1))


def _A_key(i: int, j: int, L: int) -> str:
    """Record key of the entry ``A[i][j]`` (0-based ``i, j``): ``A12``, or ``A1_12`` when ``L >= 10``."""
    return f"A{i + 1}{j + 1}" if L < 10 else f"A{i + 1}_{j + 1}"
