"""Hysteresis: gradient descent that follows one minimum while ``alpha`` changes.

Inside the coexistence region of a first-order transition both minima exist (book
Chapter 6, "Where each minimum exists"). Gradient descent started in one of them stays
there, so a sweep of ``alpha`` that warm-starts every run from the previous minimum
follows that minimum until it ceases to exist (its spinodal) and then falls into the
other one. Swept up from the positional start and down from the informed start, the two
sweeps disagree inside the region: a hysteresis loop.

The sweep draws one training set of ``n_max = round(max(alphas) d)`` samples and trains at
each ``alpha`` on its first ``round(alpha d)`` samples (nested training sets), so that the
data change only by the samples added or removed, not by a fresh draw. Source of the
model: Cui et al. 2024 (arXiv:2402.03902), Sec. 2; the hysteresis protocol is attnlab's.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from .data import make_problem, n_samples
from .metrics import canonical_sign, check_n_test, classify_outcome, generalization_error, overlaps
from .params import BRANCHES, check_choice, check_finite_array, check_int, check_params
from .training import check_training_args, minimize_risk

__all__ = ["follow_minimum"]

#: Columns of :func:`follow_minimum`'s result.
FIELDS = ("alpha", "m", "theta", "qnorm", "eps_t", "eps_g", "converged", "grad_rms", "outcome")


def follow_minimum(params, alphas, d: int, *, start: str, seed: int = 0, method: str = "lbfgs",
                   n_test: int = 2000, susceptibility: bool = False) -> dict:
    """Follow one gradient-descent minimum along ``alphas``, warm-starting each run.

    Parameters
    ----------
    params : ModelParams
        ``sigma``, ``lam``, ``omega``, ``A`` (rank ``r = 1``).
    alphas : sequence of float, length >= 2
        Sample complexities ``n / d`` in the order of the sweep (e.g. increasing from the
        positional start, decreasing from the informed start), each ``> 0``.
    d : int
        Embedding dimension, ``>= 2``.
    start : {"semantic", "positional"}
        Initialisation of the first run (:func:`attnlab.training.initial_Q`: ``Q*`` or
        the positional direction); every later run starts from the previous minimum.
    seed : int
        Seeds the teacher, the training set and the test set.
    method : {"lbfgs", "gd", "adam"}
        Optimiser of :func:`attnlab.training.minimize_risk` (default L-BFGS after the
        gradient-descent warm-up: the minimum that gradient descent selects, polished).
    n_test : int
        Fresh test samples for ``eps_g`` at each ``alpha``.
    susceptibility : bool
        Also measure, at each point the sweep reaches (whatever its ``outcome`` and
        ``converged``), the response to a field of the overlap that ``start``'s branch pins to
        zero: ``chi_m`` from the informed start (:func:`attnlab.curvature.positional_susceptibility`),
        ``chi_theta`` from the positional start (:func:`attnlab.curvature.semantic_susceptibility`);
        and ``lam_min``, the lowest eigenvalue of the risk's Hessian
        (:func:`attnlab.curvature.lowest_eigenvalue`): a few hundred Hessian-vector products
        each. NaN, with a ``RuntimeWarning`` that says why, where one cannot be measured
        (conjugate gradients or Lanczos do not converge; the risk curves down along the
        overlap's direction).

    Returns
    -------
    dict of str to ndarray, shape (len(alphas),)
        ``alpha``; the sign-canonicalised overlaps ``m``, ``theta`` and ``qnorm = |Q|^2/d``;
        the training loss ``eps_t`` and the test error ``eps_g``; ``converged``; and
        ``grad_rms`` (the root mean square of the gradient where the optimiser stopped);
        ``outcome`` (:func:`attnlab.metrics.classify_outcome`); with ``susceptibility``,
        ``chi_m`` (informed start) or ``chi_theta`` (positional start), and ``lam_min``.

    Raises
    ------
    TypeError
        If ``params`` is not a :class:`~attnlab.params.ModelParams`, or ``susceptibility`` is
        not a bool.
    ValueError
        Fewer than 2 ``alphas``, one not finite or ``<= 0``; ``params.r != 1``; invalid
        ``d``, ``start``, ``seed``, ``method`` or ``n_test``; the largest training set too
        large for this machine's memory. All before any data are drawn.
    """
    check_params(params)
    alphas = check_finite_array("alphas", alphas, shapes=[(None,)])
    if alphas.size < 2 or not np.all(alphas > 0):
        raise ValueError(f"alphas must hold at least 2 values, each > 0, got {alphas.tolist()!r}")
    if params.r != 1:
        raise ValueError(f"params.r must be 1 for follow_minimum, got {params.r}")
    d = check_int("d", d, 2)
    check_choice("start", start, BRANCHES)
    check_training_args(method=method, init=start, seed=seed)
    n_test = check_n_test(n_test)
    if not isinstance(susceptibility, (bool, np.bool_)):
        raise TypeError(f"susceptibility must be True or False, got {susceptibility!r}")
    for a in alphas:
        n_samples(float(a), d, params.L)
    full = make_problem(params, float(alphas.max()), d, seed=seed)
    pulled = "chi_m" if start == "semantic" else "chi_theta"
    fields = FIELDS + ((pulled, "lam_min") if susceptibility else ())
    out = {k: [] for k in fields}
    Q = None
    for a in alphas:
        n = n_samples(float(a), d, params.L)
        data = replace(full, x=full.x[:n], y=full.y[:n])
        res = minimize_risk(data, params.lam, init=start, method=method, seed=seed, Q0=Q, progress=False)
        Q = res.Q
        Qc = canonical_sign(Q, data.Qstar, data.P)
        ov = overlaps(Qc, data.Qstar, data.P)
        eg, _ = generalization_error(Qc, params, data.Qstar, n_test=n_test, seed=seed)
        m, theta = float(ov.m[0]), float(ov.theta[0])
        row = [float(a), m, theta, ov.qnorm, res.eps_t, float(eg), bool(res.converged), float(res.grad_rms),
               str(classify_outcome(m, theta))]
        if susceptibility:
            row += _curvature(data, params.lam, Q, float(a), pulled)
        for k, v in zip(fields, row):
            out[k].append(v)
    return {k: np.asarray(v) for k, v in out.items()}


def _curvature(data, lam, Q, alpha, pulled: str) -> list:
    """``[chi, lam_min]`` at a point of the sweep (``pulled``: ``"chi_m"`` or ``"chi_theta"``); NaN
    and a warning for one that fails."""
    import warnings

    from . import curvature
    response = curvature.positional_susceptibility if pulled == "chi_m" else curvature.semantic_susceptibility
    out = []
    for name, measure in ((pulled, lambda: response(data, lam, Q).chi),
                          ("lam_min", lambda: curvature.lowest_eigenvalue(data, lam, Q))):
        try:
            out.append(float(measure()))
        except RuntimeError as e:
            warnings.warn(f"{name} at alpha = {alpha:g} not measured: {e}", RuntimeWarning, stacklevel=3)
            out.append(float("nan"))
    return out
