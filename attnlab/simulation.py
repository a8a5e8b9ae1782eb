"""One finite-``d`` experiment: sample, train, measure, compare with the baseline.

Returns the same user-facing observables as the state-evolution solver
(``m``, ``theta = Q* . Q / d``, ``qnorm = |Q|^2 / d``, ``eps_t``, ``eps_g``), so
theory and simulation compare directly. Source: Cui et al. 2024
(arXiv:2402.03902), Sec. 4 and Fig. 2 (simulations at ``d = 1000``).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .baseline import fit_linear_baseline
from .data import make_problem, n_samples
from .metrics import canonical_sign, check_n_test, generalization_error, overlaps
from .params import TEACHERS, ModelParams, check_choice, check_params
from .training import check_training_args, minimize_risk

__all__ = ["SimulationResult", "run_simulation"]


@dataclass
class SimulationResult:
    """Observables of one training run (overlaps sign-canonicalised, see
    :func:`attnlab.metrics.canonical_sign`).

    Attributes
    ----------
    m, theta : float or list of float
        Positional overlap ``1_d . Q / d`` and semantic overlap ``Q* . Q / d``
        (one per column of ``Q`` when ``r > 1``).
    qnorm : float
        ``||Q||_F^2 / d``.
    eps_t : float
        Training loss ``R(Q) / d`` (regulariser included).
    eps_g, eps_g_sem : float
        Test error on ``n_test`` fresh samples and its standard error.
    eps_g_linear, eps_g_linear_sem : float
        Same for the ridge-fitted linear baseline ``B``.
    B : list of list of float, shape (L, L)
        The fitted baseline matrix.
    converged : bool
        Whether the optimiser met its tolerance.
    steps : int
    seconds : float
        Wall time of the whole experiment (sampling, training, testing).
    params : dict
        The model's parameters, :meth:`attnlab.params.ModelParams.to_record`.
    history : list of float
        ``R / d`` along training.
    """

    d: int
    n: int
    alpha: float
    init: str
    method: str
    seed: int
    m: float | list
    theta: float | list
    qnorm: float
    eps_t: float
    eps_g: float
    eps_g_sem: float
    eps_g_linear: float
    eps_g_linear_sem: float
    B: list
    converged: bool
    steps: int
    grad_rms: float
    seconds: float
    params: dict
    history: list = field(repr=False, default_factory=list)
    Q: np.ndarray | None = field(repr=False, default=None)

    def to_dict(self, history: bool = False) -> dict:
        """JSON-serialisable dictionary (without ``Q``; ``history`` only if asked)."""
        out = asdict(self)
        out.pop("Q")
        if not history:
            out.pop("history")
        return out


def _scalar_or_list(a: np.ndarray):
    return float(a[0]) if a.size == 1 else [float(v) for v in a]


def run_simulation(params: ModelParams, alpha: float, d: int, *, init: str = "random", seed: int = 0,
                   method: str = "gd", steps: int | None = None, lr: float | None = None,
                   n_test: int = 20_000, device="cpu", dtype="float64", progress: bool = True,
                   teacher: str = "gaussian") -> SimulationResult:
    """Sample ``n = alpha d`` training sequences, minimise ``R(Q)``, measure everything.

    Parameters
    ----------
    params : ModelParams
        ``sigma``, ``lam``, ``omega``, ``A``, ``L``, rank ``r``.
    alpha : float
        Sample complexity ``n / d`` in ``(0, inf)``.
    d : int
        Embedding dimension, ``>= 2``.
    init : {"semantic", "positional", "random"}
    seed : int
        Seeds the teacher, the training set, the random init and the test set.
    method : {"gd", "lbfgs", "adam"}
    steps, lr : optional
        Optimiser budget and learning rate (method defaults if omitted).
    n_test : int
        Fresh test samples for ``eps_g`` (default 20,000).
    device, dtype, progress
        See :func:`attnlab.training.minimize_risk`.
    teacher : {"gaussian", "exact-norm"}
        ``Q* ~ N(0, I_d)``, or that draw rescaled to ``|Q*|^2 = d`` exactly
        (:func:`attnlab.data.sample_teacher`).

    Returns
    -------
    SimulationResult

    Raises
    ------
    TypeError
        If ``params`` is not a :class:`~attnlab.params.ModelParams` or a number is
        given as a string, a bool or a complex number.
    ValueError
        On invalid ``alpha``, ``d``, ``init``, ``method``, ``steps``, ``lr``, ``seed``,
        ``n_test``, ``dtype``, ``device`` or ``teacher``; on ``alpha * d`` or ``n_test``
        too large for this machine's memory (the limit is in the message). All before
        any data are drawn.
    attnlab.training.TrainingDivergedError
        If training diverges.
    """
    t0 = time.perf_counter()
    # everything is checked before the data are drawn
    check_params(params)
    check_training_args(method=method, init=init, steps=steps, lr=lr, seed=seed, dtype=dtype, device=device)
    n_test = check_n_test(n_test)
    check_choice("teacher", teacher, TEACHERS)
    n_samples(alpha, d, params.L)
    data = make_problem(params, alpha, d, seed=seed, teacher=teacher)
    res = minimize_risk(data, params.lam, init=init, method=method, r=params.r, steps=steps, lr=lr,
                        seed=seed, device=device, dtype=dtype, progress=progress)
    Q = canonical_sign(res.Q, data.Qstar, data.P)
    ov = overlaps(Q, data.Qstar, data.P)
    eg, eg_sem = generalization_error(Q, params, data.Qstar, n_test=n_test, seed=seed, device=device, dtype=dtype)
    B = fit_linear_baseline(data.x, data.y, params.lam)
    el, el_sem = generalization_error(Q, params, data.Qstar, n_test=n_test, seed=seed, device=device,
                                      dtype=dtype, B=B)
    return SimulationResult(
        d=data.d, n=data.n, alpha=data.alpha, init=init, method=method, seed=int(seed),
        m=_scalar_or_list(ov.m), theta=_scalar_or_list(ov.theta), qnorm=ov.qnorm,
        eps_t=res.eps_t, eps_g=eg, eps_g_sem=eg_sem, eps_g_linear=el, eps_g_linear_sem=el_sem,
        B=B.tolist(), converged=res.converged, steps=res.steps, grad_rms=res.grad_rms,
        seconds=time.perf_counter() - t0, params=params.to_record(), history=res.history.tolist(), Q=Q)
