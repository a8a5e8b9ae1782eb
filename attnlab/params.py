"""Validated parameters of the solvable attention model.

Source: Cui, Behrens, Krzakala, Zdeborova (2024), *A phase transition between
positional and semantic learning in a solvable model of dot-product attention*,
arXiv:2402.03902, Sec. 2 (data model) and Sec. 3 (empirical risk).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

__all__ = ["ModelParams", "DEFAULT_A", "PAPER_A_ASYMMETRIC", "INITS", "METHODS", "TEACHERS", "BRANCHES",
           "POSITIONAL_INIT_SCALE", "check_positive",
           "check_in_range", "check_choice", "check_int"]

#: Default positional attention matrix of the teacher (paper, Sec. 4).
DEFAULT_A = ((0.6, 0.4), (0.4, 0.6))
#: The asymmetric positional matrix also used in the paper's appendix.
PAPER_A_ASYMMETRIC = ((0.3, 0.7), (0.8, 0.2))

#: Initialisations and optimisers of :func:`attnlab.training.minimize_risk` (here so
#: that the CLI can offer them without importing torch).
INITS = ("semantic", "positional", "random")
METHODS = ("gd", "lbfgs", "adam")
#: The two branches of minima (and of the state evolution).
BRANCHES = ("semantic", "positional")
#: Scale ``c`` of the positional init ``Q0 = c 1_d`` of gradient descent (so ``m0 = c``).
POSITIONAL_INIT_SCALE = 0.5
#: Teacher draws of :func:`attnlab.data.sample_teacher`: ``Q* ~ N(0, I_d)``, or rescaled to ``|Q*|^2 = d``.
TEACHERS = ("gaussian", "exact-norm")


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
    ValueError
        If ``value`` is not a finite number in the allowed range.
    """
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    ok = np.isfinite(v) and (v > 0 if strict else v >= 0)
    if not ok:
        rng = "(0, inf)" if strict else "[0, inf)"
        raise ValueError(f"{name} must be finite and in {rng}, got {value!r}")
    return v


def check_in_range(name: str, value: float, lo: float, hi: float) -> float:
    """Return ``float(value)`` if ``lo <= value <= hi``, else raise ``ValueError``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {value!r}") from None
    if not (np.isfinite(v) and lo <= v <= hi):
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value!r}")
    return v


def check_int(name: str, value: int, minimum: int) -> int:
    """Return ``int(value)`` if it is an integer ``>= minimum``, else raise ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        else:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_choice(name: str, value: str, choices: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise ``ValueError``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value


def _validate_A(A, L: int) -> tuple:
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
        must be in ``(0, inf)``. Paper: 0.5.
    lam : float
        Ridge strength ``lambda`` of the risk ``R(Q)`` (Sec. 3 of the paper);
        must be in ``[0, inf)``. Paper: 0.01.
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
    ValueError
        If any parameter is outside its allowed range; the message names it.
    """

    sigma: float = 0.5
    lam: float = 0.01
    omega: float = 0.3
    A: tuple = field(default=None)
    L: int = 2
    r: int = 1

    def __post_init__(self):
        L = check_int("L", self.L, 2)
        object.__setattr__(self, "L", L)
        object.__setattr__(self, "r", check_int("r (rank)", self.r, 1))
        object.__setattr__(self, "sigma", check_positive("sigma", self.sigma))
        object.__setattr__(self, "lam", check_positive("lambda (lam)", self.lam, strict=False))
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

    @property
    def lambda_(self) -> float:
        """Alias of :attr:`lam` (the paper's ``lambda``)."""
        return self.lam

    def replace(self, **changes) -> "ModelParams":
        """Return a copy with some fields changed (validated again)."""
        kw = dict(sigma=self.sigma, lam=self.lam, omega=self.omega, A=self.A, L=self.L, r=self.r)
        kw.update(changes)
        return ModelParams(**kw)

    def to_dict(self) -> dict:
        """Plain-Python dictionary (JSON-serialisable) of the parameters."""
        return dict(sigma=self.sigma, lam=self.lam, omega=self.omega,
                    A=[list(r) for r in self.A], L=self.L, r=self.r)
