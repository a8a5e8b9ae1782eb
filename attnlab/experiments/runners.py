"""Run specifications and the two tasks that turn one into table rows: a simulation, a state evolution.

A *spec* is a flat, JSON-serialisable dictionary of parameters (the model's
record :meth:`attnlab.params.ModelParams.to_record` plus the run's own
parameters); :func:`spec_key` hashes it into the ``run_id`` of its rows.

* :func:`simulation_spec` / :func:`run_simulation_spec`: one finite-``d``
  training run (:func:`attnlab.run_simulation`), one row;
* :func:`se_curve_spec`, :func:`transition_spec` / :func:`run_theory_spec`: one
  state-evolution task (:func:`attnlab.theory.se_curve`, one row per ``alpha``;
  :func:`attnlab.theory.find_transition`, one row).

Runners are top-level functions, so that worker processes can import them.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import time
import warnings
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..params import (BRANCHES, DEFAULT_A, DEFAULT_ALPHA_MAX, DEFAULT_LAM, DEFAULT_MINIMIZER, DEFAULT_OMEGA,
                      DEFAULT_SIGMA, DEFAULT_XTOL, INITS, METHODS, TEACHERS, ModelParams, check_choice, check_int,
                      check_positive)

__all__ = ["SIMULATION_RESULT_COLUMNS", "COLUMN_KINDS", "grid", "spec_key", "simulation_spec", "run_simulation_spec",
           "se_curve_spec", "transition_spec", "run_theory_spec"]

#: Columns of a simulation row after the spec's parameters (see :func:`run_simulation_spec`).
SIMULATION_RESULT_COLUMNS = ("n", "m", "theta", "qnorm", "eps_t", "eps_g", "eps_g_sem", "eps_g_linear",
                             "eps_g_linear_sem", "converged", "steps_taken", "grad_rms", "seconds",
                             "cpu_seconds")

#: Kind of each column the runners write (``"text"``, ``"bool"`` or ``"number"``), for strict reading.
COLUMN_KINDS = {
    **dict.fromkeys(("run_id", "init", "method", "teacher", "kind", "branch", "minimizer"), "text"),
    **dict.fromkeys(("d", "alpha", "omega", "sigma", "lambda", "A11", "A12", "A21", "A22", "rank", "seed", "steps",
                     "lr", "n_test", *SIMULATION_RESULT_COLUMNS), "number"),
    "converged": "bool",
}


# ----------------------------------------------------------------------------- specs

def plain(v):
    """Plain Python value (JSON- and CSV-friendly) of a numpy scalar or array; floats rounded to 12 digits."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(f"{float(v):.12g}")
    if isinstance(v, (list, tuple, np.ndarray)):
        return [plain(x) for x in v]
    return v


def _key_value(v):
    v = plain(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)  # 1.0 and 1 are the same parameter value (a CSV round trip may turn one into the other)
    if isinstance(v, list):
        return [_key_value(x) for x in v]
    return v


def spec_key(spec: Mapping) -> str:
    """Stable identifier of a spec (the ``run_id`` of its rows): first 16 hex digits of the SHA-1 of its sorted JSON.

    Numbers are compared by value (``1.0`` and ``1`` give the same key), so the
    key can be recomputed from a CSV row.
    """
    text = json.dumps({k: _key_value(v) for k, v in spec.items()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def grid(fixed: Mapping, axes: Mapping[str, Sequence]) -> list[dict]:
    """Cartesian product of parameter axes, each spec completed by the ``fixed`` parameters.

    Parameters
    ----------
    fixed : mapping
        Parameters shared by every run, e.g. ``{"omega": 0.3, "sigma": 0.5}``.
    axes : mapping of str to sequence
        Swept parameters, e.g. ``{"alpha": [0.5, 1.0], "seed": [0, 1, 2]}``; the
        last axis varies fastest.

    Returns
    -------
    list of dict
        ``prod(len(axis))`` specs, keys in the order of ``fixed`` then ``axes``.

    Raises
    ------
    ValueError
        If an axis is empty or not a sequence (the message names the axis), or
        if a parameter is both fixed and swept.
    """
    both = sorted(set(fixed) & set(axes))
    if both:
        raise ValueError(f"parameters {both} are both fixed and swept")
    values = []
    for name, axis in axes.items():
        if isinstance(axis, (str, bytes)) or not isinstance(axis, Iterable):
            raise ValueError(f"grid axis {name!r} must be a sequence of values, got {axis!r}")
        axis = list(axis)
        if not axis:
            raise ValueError(f"grid axis {name!r} is empty: give at least one value")
        values.append([plain(v) for v in axis])
    fixed = {k: plain(v) for k, v in fixed.items()}
    return [dict(fixed, **dict(zip(axes, combo))) for combo in itertools.product(*values)]


# ----------------------------------------------------------------------------- simulations

def simulation_spec(*, d: int, alpha: float, omega: float = DEFAULT_OMEGA, sigma: float = DEFAULT_SIGMA,
                    lam: float = DEFAULT_LAM, A=DEFAULT_A, rank: int = 1, init: str = "random", method: str = "lbfgs",
                    seed: int = 0, steps: int | None = None, lr: float | None = None,
                    n_test: int = 20_000, teacher: str = "gaussian") -> dict:
    """A validated, flat spec for :func:`run_simulation_spec` (method defaults made explicit).

    Every parameter becomes a CSV column: ``d, alpha``, the model's record
    (``omega, sigma, lambda, A11, A12, A21, A22``), ``rank, init, method, seed,
    steps, lr, n_test`` and, for a teacher other than the default Gaussian draw,
    ``teacher`` (``"exact-norm"``: ``|Q*|^2 = d``; the column is left out for the
    default so that the run ids of existing sweeps do not change).
    ``steps`` is the step budget (L-BFGS: iterations after the warm-up) and
    ``lr`` the learning rate (L-BFGS: that of its gradient-descent warm-up).

    Raises
    ------
    ValueError
        On any invalid parameter; the message names it.
    """
    from ..training import DEFAULT_LR, DEFAULT_STEPS

    params = ModelParams(sigma=sigma, lam=lam, omega=omega, A=A, r=rank)
    if params.L != 2:
        raise ValueError("A must be 2x2: sweeps are for L = 2 tokens")
    method = check_choice("method", method, METHODS)
    spec = dict(d=check_int("d", d, 2), alpha=check_positive("alpha", alpha), **params.to_record())
    spec.update(rank=params.r, init=check_choice("init", init, INITS), method=method, seed=check_int("seed", seed, 0),
                steps=check_int("steps", DEFAULT_STEPS[method] if steps is None else steps, 1),
                lr=check_positive("lr", DEFAULT_LR.get(method, DEFAULT_LR["gd"]) if lr is None else lr),
                n_test=check_int("n_test", n_test, 2))
    if check_choice("teacher", teacher, TEACHERS) != "gaussian":
        spec["teacher"] = teacher
    return {k: plain(v) for k, v in spec.items()}


def _norm(v) -> float:
    return float(np.linalg.norm(np.atleast_1d(np.asarray(v, dtype=float))))


def run_simulation_spec(spec: Mapping) -> dict:
    """Run one spec of :func:`~attnlab.experiments.runners.simulation_spec` with :func:`attnlab.run_simulation`
    (no progress bar).

    Returns
    -------
    dict
        The spec followed by :data:`~attnlab.experiments.runners.SIMULATION_RESULT_COLUMNS` (``seconds``: wall
        time of the run; ``cpu_seconds``: CPU time of this process, which on a
        busy machine is the better measure of the run's cost). For ``rank > 1``
        the overlaps are reported as the Euclidean norms of the overlap vectors
        ``|(m_1, .., m_r)|`` and ``|(theta_1, .., theta_r)|``, which do not
        depend on the arbitrary rotation of ``Q``'s columns (the risk is
        invariant under ``Q -> Q O`` for orthogonal ``O``); for ``rank = 1``
        they are the signed, sign-canonicalised overlaps.
    """
    from ..simulation import run_simulation

    cpu0 = time.process_time()
    params = ModelParams.from_record(spec)
    lr = None if spec["method"] == "lbfgs" else spec["lr"]
    res = run_simulation(params, spec["alpha"], spec["d"], init=spec["init"], seed=spec["seed"],
                         method=spec["method"], steps=spec["steps"], lr=lr, n_test=spec["n_test"],
                         progress=False, teacher=spec.get("teacher", "gaussian"))
    m = res.m if params.r == 1 else _norm(res.m)
    theta = res.theta if params.r == 1 else _norm(res.theta)
    out = dict(spec)
    out.update(n=res.n, m=m, theta=theta, qnorm=res.qnorm, eps_t=res.eps_t, eps_g=res.eps_g,
               eps_g_sem=res.eps_g_sem, eps_g_linear=res.eps_g_linear, eps_g_linear_sem=res.eps_g_linear_sem,
               converged=bool(res.converged), steps_taken=res.steps, grad_rms=res.grad_rms, seconds=res.seconds,
               cpu_seconds=time.process_time() - cpu0)
    return out


# ----------------------------------------------------------------------------- state evolution

def se_curve_spec(params: ModelParams, branch: str, alphas, minimizer: str | None = None) -> dict:
    """A state-evolution task: the fixed points on ``branch`` at ``alphas`` (for :func:`run_theory_spec`).

    ``minimizer`` (``"followed"`` or ``"global"``) is left out of the spec, and so
    out of its run id, when ``None`` (the solver's default).
    """
    spec = dict(kind="se-curve", branch=check_choice("branch", branch, BRANCHES),
                alphas=[float(a) for a in alphas], **params.to_record())
    return spec if minimizer is None else dict(spec, minimizer=minimizer)


def transition_spec(params: ModelParams, alpha_max: float = DEFAULT_ALPHA_MAX, xtol: float = DEFAULT_XTOL,
                    minimizer: str | None = None) -> dict:
    """A state-evolution task: ``alpha_c`` and ``alpha_l`` searched in ``(0, alpha_max]``
    (for :func:`run_theory_spec`)."""
    spec = dict(kind="transition", alpha_max=alpha_max, xtol=xtol, **params.to_record())
    return spec if minimizer is None else dict(spec, minimizer=minimizer)


def run_theory_spec(spec: Mapping) -> list[dict]:
    """Run one state-evolution task of :func:`se_curve_spec` or :func:`transition_spec`.

    ``spec["kind"]``:

    * ``"se-curve"``: fixed points on ``spec["branch"]`` at ``spec["alphas"]``
      (:func:`attnlab.theory.se_curve`, warm-started along the curve); one row
      per ``alpha`` with ``m, theta, qnorm, eps_t, eps_g, eps_g_linear,
      converged, residual, iterations, stability, stability_held`` (the eigenvalue of the pinned
      direction by the default and the held probe, ``SEResult.stability`` and ``.stability_held``:
      at 1 or above the point is no minimum by that probe; where they disagree the state evolution
      cannot tell; not counted in ``task_seconds``) (a point where the solver fails is a
      row with ``converged = False`` and NaN values, not a lost curve);
    * ``"transition"``: :func:`attnlab.theory.find_transition`; one row with
      ``alpha_c, alpha_l, eps_g_linear, xtol, alpha_max``.

    Every row starts with ``kind``, the model's record and ``minimizer`` (the
    semantic branch's proximal minimiser: the spec's, else the solver's
    default); ``task_seconds`` is the wall time of the whole task.

    Raises
    ------
    ValueError
        If ``spec["kind"]`` is neither.
    """
    from ..theory import ConvergenceWarning, find_transition, linear_baseline_error, se_curve

    params = ModelParams.from_record(spec)
    base = dict(kind=spec["kind"], **params.to_record(), minimizer=spec.get("minimizer") or DEFAULT_MINIMIZER)
    minimizer = spec.get("minimizer")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # recorded per row in `converged`
        if spec["kind"] == "se-curve":
            curve = se_curve(params, spec["alphas"], spec["branch"], minimizer=minimizer, quiet=True)
            lin = linear_baseline_error(params)
            secs = time.perf_counter() - t0
            return [dict(base, minimizer=r.minimizer, branch=spec["branch"], alpha=r.alpha, m=r.m, theta=r.theta,
                         qnorm=r.qnorm, eps_t=r.eps_t, eps_g=r.eps_g, eps_g_linear=lin, converged=bool(r.converged),
                         residual=r.residual, iterations=r.iterations, task_seconds=secs,
                         stability=r.stability, stability_held=r.stability_held) for r in curve]
        if spec["kind"] == "transition":
            tr = find_transition(params, alpha_max=spec["alpha_max"], xtol=spec["xtol"], minimizer=minimizer)
            return [dict(base, alpha_c=tr.alpha_c, alpha_l=tr.alpha_l, eps_g_linear=tr.eps_g_linear, xtol=tr.xtol,
                         alpha_max=spec["alpha_max"], task_seconds=time.perf_counter() - t0)]
    raise ValueError(f"theory spec kind must be 'se-curve' or 'transition', got {spec['kind']!r}")
