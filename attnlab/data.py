"""Seeded sampling of the positional/semantic teacher-student data.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 2: tokens ``x_l = p_l + z_l``
with ``z_l ~ N(0, sigma^2 I_d)``, positional encodings ``p_1 = -p_2 = 1_d / sqrt(d)``
(unit norm) for ``L = 2``, and targets ``y = T(h*) z``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .attention import teacher_output
from .params import (TEACHERS, ModelParams, check_choice, check_finite_array, check_int, check_memory, check_params,
                     check_positive)

__all__ = ["positional_encodings", "sample_teacher", "Dataset", "sample_dataset",
           "make_problem", "n_samples"]

_DTYPES = {"float64": np.float64, "float32": np.float32}


def _dtype_name(dtype) -> str:
    """``"float64"`` for ``np.float64``, ``"float64"``, ...; the repr of anything that is no dtype."""
    try:
        return np.dtype(dtype).name
    except TypeError:
        return repr(dtype)


def positional_encodings(L: int, d: int, dtype="float64") -> np.ndarray:
    """Fixed unit-norm positional encodings ``p_l``.

    For ``L = 2`` these are the paper's ``p_1 = +1_d / sqrt(d)``,
    ``p_2 = -1_d / sqrt(d)``. For ``L > 2`` (outside the paper) they are the
    first ``L`` Walsh sign patterns ``p_l[k] = (-1)^{popcount(l & k)} / sqrt(d)``,
    which are orthonormal when ``d`` is a multiple of the next power of two >= L.

    Parameters
    ----------
    L : int
        Number of positions, ``>= 2``.
    d : int
        Embedding dimension, ``>= 2``.
    dtype : {"float64", "float32"}

    Returns
    -------
    P : ndarray, shape (L, d)
        Row ``l`` is ``p_l``; every row has unit Euclidean norm.
    """
    L = check_int("L", L, 2)
    d = check_int("d", d, 2)
    dt = _DTYPES[check_choice("dtype", _dtype_name(dtype), list(_DTYPES))]
    if L == 2:
        P = np.ones((2, d)) / np.sqrt(d)
        P[1] *= -1.0
    else:
        k = np.arange(d)
        P = np.array([[(-1.0) ** bin(l & kk).count("1") for kk in k] for l in range(L)]) / np.sqrt(d)
    return P.astype(dt)


def sample_teacher(d: int, seed: int, teacher: str = "gaussian") -> np.ndarray:
    """Teacher weights ``Q*``, shape ``(d,)``, float64, from ``seed``.

    Parameters
    ----------
    d : int
        Embedding dimension, ``>= 2``.
    seed : int
        Seed of the draw.
    teacher : {"gaussian", "exact-norm"}
        ``"gaussian"``: ``Q* ~ N(0, I_d)`` (the paper's teacher). ``"exact-norm"``:
        the same draw rescaled to ``|Q*|^2 = d`` exactly, so that the teacher
        field has variance ``rho = sigma^2`` as the state evolution assumes
        (at ``d = 1000`` the Gaussian draw's ``|Q*|^2 / d`` fluctuates by about 4%).

    Raises
    ------
    ValueError
        If ``d < 2`` or ``teacher`` is unknown.
    """
    d = check_int("d", d, 2)
    teacher = check_choice("teacher", teacher, TEACHERS)
    Qstar = np.random.default_rng([check_int("seed", seed, 0), 0x7EAC]).standard_normal(d)
    if teacher == "exact-norm":
        Qstar *= np.sqrt(d) / np.linalg.norm(Qstar)
    return Qstar


@dataclass(frozen=True)
class Dataset:
    """A sampled dataset of the attention teacher-student model.

    Attributes
    ----------
    x : ndarray, shape (n, L, d)
        Input tokens ``x_l = p_l + z_l``.
    y : ndarray, shape (n, L, d)
        Targets ``y = T(h*) z``.
    Qstar : ndarray, shape (d,)
        Teacher weights (shared by the training and the test set).
    P : ndarray, shape (L, d)
        Positional encodings.
    params : ModelParams
        The parameters used.
    seed : int
        Seed of the token draw.
    """

    x: np.ndarray
    y: np.ndarray
    Qstar: np.ndarray
    P: np.ndarray
    params: ModelParams
    seed: int

    @property
    def z(self) -> np.ndarray:
        """Token contents ``z = x - p``, shape (n, L, d), ``N(0, sigma^2)`` entries."""
        return self.x - self.P[None]

    @property
    def n(self) -> int:
        """Number of samples."""
        return self.x.shape[0]

    @property
    def d(self) -> int:
        """Embedding dimension."""
        return self.x.shape[2]

    @property
    def alpha(self) -> float:
        """Sample complexity ``n / d``."""
        return self.n / self.d


def sample_dataset(params: ModelParams, n: int, d: int, *, Qstar=None, seed: int = 0,
                   stream: int = 0, dtype="float64") -> Dataset:
    """Draw ``n`` sequences of the model with a seeded generator.

    Parameters
    ----------
    params : ModelParams
        ``sigma``, ``omega``, ``A``, ``L``.
    n : int
        Number of samples, ``>= 1``.
    d : int
        Embedding dimension, ``>= 2``.
    Qstar : ndarray, shape (d,), optional
        Teacher weights; drawn with :func:`sample_teacher` from ``seed`` if omitted.
    seed : int
        Seed of the token contents (and of ``Q*`` when it is drawn here).
    stream : int
        Independent sub-stream of ``seed`` (0: training set; test chunks use 1, 2, ...).
    dtype : {"float64", "float32"}
        Floating type of ``x``, ``z``, ``y`` (sampling itself is in float64).

    Returns
    -------
    Dataset

    Raises
    ------
    ValueError
        If ``n < 1``, ``d < 2``, ``seed`` or ``stream`` is not an integer ``>= 0``,
        ``Qstar`` has the wrong shape or a non-finite entry, ``dtype`` is unknown, or
        the data would need more than half of this machine's memory.
    TypeError
        If ``params`` is not a :class:`~attnlab.params.ModelParams`.
    """
    check_params(params)
    n = check_int("n", n, 1)
    d = check_int("d", d, 2)
    check_memory("d", d, params.L * BYTES_PER_ENTRY, f"one sequence of {params.L} tokens")
    check_memory("n", n, params.L * d * BYTES_PER_ENTRY, f"{n} sequences of {params.L} tokens in dimension d = {d}")
    seed, stream = check_int("seed", seed, 0), check_int("stream", stream, 0)
    dt = _DTYPES[check_choice("dtype", _dtype_name(dtype), list(_DTYPES))]
    if Qstar is None:
        Qstar = sample_teacher(d, seed)
    Qstar = check_finite_array("Qstar", Qstar, shapes=[(d,)])
    rng = np.random.default_rng([int(seed), 0xDA7A, int(stream)])
    z = params.sigma * rng.standard_normal((n, params.L, d))
    P = positional_encodings(params.L, d)
    x = z + P[None]
    y = teacher_output(z, Qstar, params.omega, params.A_array)
    return Dataset(x=x.astype(dt), y=y.astype(dt), Qstar=Qstar.astype(dt),
                   P=P.astype(dt), params=params, seed=int(seed))


#: Bytes per entry ``(sample, token, dimension)`` of a training set and its risk: ``z, x, y``
#: in float64 and their copies (in the dtype asked for, and in :class:`~attnlab.objective.AttentionRisk`).
BYTES_PER_ENTRY = 6 * 8


def n_samples(alpha: float, d: int, L: int = 2) -> int:
    """Number of samples ``n = round(alpha * d)`` for sample complexity ``alpha``.

    Raises
    ------
    ValueError
        If ``alpha <= 0``, ``d < 2``, ``round(alpha * d) < 1`` (no training sample: the
        run would silently use another ``alpha``) or the training set of ``L``-token sequences
        would need more than half of this machine's memory (``alpha * d`` too large;
        the limit is in the message).
    """
    alpha = check_positive("alpha", alpha)
    d = check_int("d", d, 2)
    check_memory("d", d, L * BYTES_PER_ENTRY, f"one sequence of {L} tokens")
    check_memory("alpha * d (the number of samples n)", alpha * d, L * d * BYTES_PER_ENTRY,
                 f"the training set (alpha = {alpha:g}, d = {d}: n sequences of {L} tokens in dimension d)")
    n = int(round(alpha * d))
    if n < 1:
        raise ValueError(f"alpha * d = {alpha * d:.3g} gives no training sample (n = round(alpha * d) = 0): "
                         f"alpha must be > {0.5 / d:.3g} at d = {d}")
    return n


def make_problem(params: ModelParams, alpha: float, d: int, *, seed: int = 0,
                 dtype="float64", teacher: str = "gaussian") -> Dataset:
    """Training set of ``n = round(alpha d)`` samples with a teacher drawn from ``seed``.

    Fresh test samples for the same teacher come from
    :func:`attnlab.metrics.generalization_error`, which draws them in chunks.

    Parameters
    ----------
    params : ModelParams
    alpha : float
        Sample complexity ``n / d``, in ``(0, inf)``.
    d : int
        Embedding dimension, ``>= 2``.
    seed : int
        Seeds the teacher and the training draw.
    dtype : {"float64", "float32"}

    Returns
    -------
    Dataset

    Raises
    ------
    ValueError
        If ``alpha <= 0``, ``d < 2``, ``alpha * d`` too large for the memory, or
        another argument invalid (see :func:`sample_dataset`).
    """
    check_params(params)
    check_choice("teacher", teacher, TEACHERS)
    n = n_samples(alpha, d, params.L)
    return sample_dataset(params, n, d, Qstar=sample_teacher(d, seed, teacher), seed=seed, dtype=dtype)
