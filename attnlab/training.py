"""Empirical risk minimisation of the attention student: GD, L-BFGS and Adam.

Source: Cui et al. 2024 (arXiv:2402.03902), Sec. 3 and App. (numerics):
full-batch gradient descent on ``R(Q)`` (Eq. 6) with learning rate 0.15 on the
summed loss, 5000 steps, weight decay ``lambda``; from the informed init
``Q0 = Q*`` it lands in the semantic minimum, from a small random init in the
positional one.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
import torch
from tqdm.auto import tqdm

from .data import Dataset
from .objective import TORCH_DTYPES, AttentionRisk, resolve_device
from .params import (INITS, MAX_STEPS, METHODS, POSITIONAL_INIT_SCALE, check_choice, check_finite_array, check_int,
                     check_positive)

__all__ = ["TrainingDivergedError", "TrainResult", "initial_Q", "minimize_risk", "check_training_args"]

#: Default learning rates on the summed risk R (GD: the paper's 0.15).
DEFAULT_LR = {"gd": 0.15, "adam": 0.01}
#: Default maximal number of steps / iterations.
DEFAULT_STEPS = {"gd": 5000, "lbfgs": 2000, "adam": 5000}
#: Maximal number of gradient-descent warm-up steps before L-BFGS.
WARMUP_MAX_STEPS = 3000
#: Standard deviation of the random init ``Q0 ~ 0.1 N(0, 1)``.
RANDOM_INIT_SCALE = 0.1


class TrainingDivergedError(RuntimeError):
    """Raised when the risk becomes non-finite during training (lower the learning rate)."""


@dataclass
class TrainResult:
    """Outcome of one minimisation of ``R(Q)``.

    Attributes
    ----------
    Q : ndarray, shape (d, r)
        Final weights (not sign-canonicalised).
    risk : float
        Final ``R(Q)`` (regulariser included); ``eps_t = risk / d``.
    history : ndarray, shape (k,)
        ``R / d`` after each recorded step (every step for GD/Adam, every
        iteration for L-BFGS; index 0 is the initial value).
    steps : int
        Steps or iterations taken.
    grad_rms : float
        Root mean square of the final gradient ``dR/dQ``.
    converged : bool
        Whether ``grad_rms <= gtol`` at the end, for every method (L-BFGS-B may also
        stop on a small relative reduction of ``R``: that is not convergence).
    seconds : float
        Wall time of the minimisation.
    method, init : str
    """

    Q: np.ndarray
    risk: float
    history: np.ndarray
    steps: int
    grad_rms: float
    converged: bool
    seconds: float
    method: str
    init: str
    message: str = field(default="")

    @property
    def eps_t(self) -> float:
        """Training loss ``eps_t = R(Q) / d`` (regulariser included)."""
        return self.risk / self.Q.shape[0]


def initial_Q(init: str, data: Dataset, r: int = 1, seed: int = 0) -> np.ndarray:
    """Initial weights ``Q0`` of shape ``(d, r)``.

    * ``"semantic"``: ``Q0[:, 0] = Q*`` (informed init), other columns ``0.1 N(0, 1)``;
    * ``"positional"``: ``Q0[:, 0] = 0.5 sqrt(d) p_1`` (``= 0.5 * 1_d`` for ``L = 2``,
      so ``m0 = 0.5``), other columns ``0.1 N(0, 1)``;
    * ``"random"``: all entries ``0.1 N(0, 1)`` (seeded).

    Raises
    ------
    TypeError
        If ``data`` is not a :class:`~attnlab.data.Dataset`.
    ValueError
        If ``init`` is unknown, ``r < 1`` or ``seed`` is not an integer ``>= 0``.
    """
    check_choice("init", init, INITS)
    r = check_int("r (rank)", r, 1)
    seed = check_int("seed", seed, 0)
    _check_data(data)
    d = data.d
    Q0 = RANDOM_INIT_SCALE * np.random.default_rng([int(seed), 0x1A17]).standard_normal((d, r))
    if init == "semantic":
        Q0[:, 0] = data.Qstar
    elif init == "positional":
        Q0[:, 0] = POSITIONAL_INIT_SCALE * np.sqrt(d) * data.P[0]
    return Q0


def _check_finite(value: float, step: int, method: str, lr, lam=None) -> None:
    if step == 0 and not np.isfinite(value):  # nothing has moved yet: an input problem
        raise ValueError(f"the risk at the initial Q is {value} (float overflow): lambda (lam) = {lam} or the data "
                         "are too large")
    if not np.isfinite(value):
        hint = f" with lr={lr}, lambda (lam)={lam}; try a smaller --lr" if lr is not None else f" (lambda (lam)={lam})"
        raise TrainingDivergedError(f"{method} diverged at step {step}: the risk became {value}{hint}")


def _check_data(data) -> None:
    if not isinstance(data, Dataset):
        raise TypeError(f"data must be an attnlab.data.Dataset (see attnlab.make_problem), got {type(data).__name__}")


def check_training_args(*, method="gd", init="random", steps=None, lr=None, gtol=1e-9, seed=0, dtype="float64",
                        device="cpu") -> dict:
    """The validated optimiser arguments of :func:`minimize_risk` (method defaults filled in),
    checked before any data is drawn.

    Raises
    ------
    TypeError
        If a number is given as a string, a bool or a complex number.
    ValueError
        Unknown ``method``, ``init``, ``dtype`` or ``device``; ``steps`` not an integer
        in ``[1, 1e6]``; ``lr`` not in ``(0, inf)``; ``gtol`` not in ``[0, inf)``; ``seed`` not
        an integer ``>= 0``; the message names the parameter.
    """
    method = check_choice("method", method, METHODS)
    if not isinstance(dtype, torch.dtype):
        check_choice("dtype", str(dtype), tuple(TORCH_DTYPES))
    return dict(method=method, init=check_choice("init", init, INITS),
                steps=check_int("steps", DEFAULT_STEPS[method] if steps is None else steps, 1, MAX_STEPS),
                lr=check_positive("lr", DEFAULT_LR.get(method, DEFAULT_LR["gd"]) if lr is None else lr)
                if (method != "lbfgs" or lr is not None) else None,
                gtol=check_positive("gtol", gtol, strict=False), seed=check_int("seed", seed, 0),
                dtype=dtype if isinstance(dtype, torch.dtype) else str(dtype), device=resolve_device(device))


def minimize_risk(data: Dataset, lam: float, *, init: str = "random", method: str = "gd", r: int = 1,
                  steps: int | None = None, lr: float | None = None, gtol: float = 1e-9,
                  seed: int = 0, Q0=None, device="cpu", dtype="float64", progress: bool = True) -> TrainResult:
    """Minimise ``R(Q) = sum_mu (1/(2d)) ||y - f_Q(x)||^2 + (lam/2) ||Q||^2``.

    Parameters
    ----------
    data : Dataset
        Training set (``x``, ``y`` of shape ``(n, L, d)``).
    lam : float
        Ridge strength (weight decay), ``>= 0``.
    init : {"semantic", "positional", "random"}
        Initialisation, see :func:`initial_Q`; ignored if ``Q0`` is given.
    method : {"gd", "lbfgs", "adam"}
        ``"gd"``: full-batch gradient descent ``Q <- Q - lr dR/dQ`` (default lr
        0.15, 5000 steps: the paper's setting). ``"lbfgs"``: SciPy's L-BFGS-B on
        the same exact risk after a gradient-descent warm-up (lr 0.15) that runs
        until the gradient norm has fallen to half its peak, so that it polishes the
        minimum that gradient descent selects, much faster. ``"adam"``:
        torch Adam (default lr 0.01, 5000 steps).
    r : int
        Rank of ``Q``.
    steps : int, optional
        Step (iteration) budget, in ``[1, 1e6]``; method default if omitted.
    lr : float, optional
        Learning rate for ``"gd"``/``"adam"``; method default if omitted.
    gtol : float
        Stop when the root mean square of ``dR/dQ`` falls below ``gtol``.
    seed : int
        Seed of the random part of the init.
    Q0 : array_like, shape (d,) or (d, r), optional
        Explicit initial weights.
    device : str
        ``"cpu"`` (default) or ``"cuda"``.
    dtype : {"float64", "float32"}
    progress : bool
        Show a tqdm progress bar.

    Returns
    -------
    TrainResult

    Raises
    ------
    TypeError
        If ``data`` is not a :class:`~attnlab.data.Dataset`, or a number is given as a
        string, a bool or a complex number.
    ValueError
        On an unknown ``init``/``method``/``dtype``, a non-positive ``steps`` or ``lr``,
        a negative ``lam``, a negative or non-integer ``seed``, a ``Q0`` with
        non-finite entries or not of shape ``(d,)`` or ``(d, r)``, or an
        unavailable ``device``.
    TrainingDivergedError
        If the risk becomes NaN or infinite during training (``ValueError`` if it is
        already at the initial ``Q``, e.g. a huge ``lam``).
    """
    _check_data(data)
    kw = check_training_args(method=method, init=init, steps=steps, lr=lr, gtol=gtol, seed=seed, dtype=dtype,
                             device=device)
    method, init, steps, lr, gtol, seed = (kw[k] for k in ("method", "init", "steps", "lr", "gtol", "seed"))
    lam = check_positive("lambda (lam)", lam, strict=False)
    r = check_int("r (rank)", r, 1)
    if Q0 is not None:
        Q0 = check_finite_array("Q0", Q0, shapes=[(data.d,), (data.d, r)])
    risk = AttentionRisk(data.x, data.y, lam, device=device, dtype=dtype)
    Q = risk.as_tensor(initial_Q(init, data, r, seed) if Q0 is None else Q0).clone()
    size = Q.numel()
    t0 = time.perf_counter()
    runner = {"gd": _run_gd, "adam": _run_adam, "lbfgs": _run_lbfgs}[method]
    Q, R, history, taken, g_rms, converged, msg = runner(risk, Q, steps, lr, gtol, size, progress)
    seconds = time.perf_counter() - t0
    return TrainResult(Q=Q.detach().cpu().double().numpy(), risk=R, history=np.asarray(history) / risk.d,
                       steps=taken, grad_rms=g_rms, converged=converged, seconds=seconds,
                       method=method, init=init if Q0 is None else "custom", message=msg)


def _first_order_loop(risk, Q, steps, lr, gtol, size, progress, update, name, escaped=None):
    history = []
    bar = tqdm(total=steps, desc=name, disable=not progress, leave=False)
    converged = False
    taken = 0
    g_max = 0.0
    try:
        for step in range(steps + 1):
            R, g = risk.value_and_grad(Q)
            _check_finite(R, step, name, lr, risk.lam)
            history.append(R)
            g_rms = float(g.norm()) / np.sqrt(size)
            g_max = max(g_max, g_rms)
            if g_rms <= gtol:
                converged = True
                break
            if escaped is not None and escaped(g_rms, g_max):
                break
            if step == steps:
                break
            Q = update(Q, g)
            taken = step + 1
            if step % 50 == 0:
                bar.set_postfix(eps_t=f"{R / risk.d:.6g}")
            bar.update(1)
    finally:
        bar.close()
    msg = "gradient tolerance reached" if converged else "step budget exhausted"
    return Q, R, history, taken, g_rms, converged, msg


def _run_gd(risk, Q, steps, lr, gtol, size, progress):
    return _first_order_loop(risk, Q, steps, lr, gtol, size, progress, lambda Q, g: Q - lr * g, "gd")


def _run_adam(risk, Q, steps, lr, gtol, size, progress):
    param = torch.nn.Parameter(Q.clone())
    opt = torch.optim.Adam([param], lr=lr)

    def update(_, g):
        opt.zero_grad(set_to_none=True)
        param.grad = g
        opt.step()
        return param.detach().clone()

    return _first_order_loop(risk, param.detach().clone(), steps, lr, gtol, size, progress, update, "adam")


def _saddle_escaped(g_rms: float, g_max: float) -> bool:
    # Near the saddle at Q = 0 the gradient first grows as gradient flow
    # accelerates away from it, then decays inside a basin; once it has fallen
    # to half its peak the trajectory has chosen its basin.
    return g_rms <= 0.5 * g_max


def _run_lbfgs(risk, Q, steps, lr, gtol, size, progress):
    # Phase 1: gradient descent (lr 0.15) until the gradient has passed its peak,
    # so that L-BFGS starts in the basin that gradient flow selects. From a
    # small random init, L-BFGS alone takes long first steps and lands in one of
    # the many spurious finite-d local minima instead.
    Q, _, history, warm, _, converged, _ = _first_order_loop(
        risk, Q, WARMUP_MAX_STEPS, DEFAULT_LR["gd"], gtol, size, progress,
        lambda Q, g: Q - DEFAULT_LR["gd"] * g, "lbfgs warm-up", escaped=_saddle_escaped)
    shape = Q.shape
    history = history[:-1]

    def fun(v):
        Qt = torch.as_tensor(v, dtype=risk.dtype, device=risk.device).reshape(shape)
        R, g = risk.value_and_grad(Qt)
        _check_finite(R, len(history), "lbfgs", None, risk.lam)
        return R, g.double().cpu().numpy().ravel()

    bar = tqdm(total=steps, desc="lbfgs", disable=not progress, leave=False)
    x0 = Q.double().cpu().numpy().ravel()
    history.append(fun(x0)[0])

    def callback(intermediate_result):
        history.append(float(intermediate_result.fun))
        bar.update(1)

    try:
        # gtol of L-BFGS-B is on the max-norm of the gradient: convert from RMS.
        res = scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B", callback=callback,
                                      options=dict(maxiter=steps, gtol=gtol, ftol=1e-15, maxcor=20))
    finally:
        bar.close()
    Qf = torch.as_tensor(res.x, dtype=risk.dtype, device=risk.device).reshape(shape)
    R, g = risk.value_and_grad(Qf)
    g_rms = float(g.norm()) / np.sqrt(size)
    converged = g_rms <= gtol  # not res.success: L-BFGS-B also stops on a relative reduction of R (ftol)
    return Qf, R, history, warm + int(res.nit), g_rms, converged, str(res.message)
