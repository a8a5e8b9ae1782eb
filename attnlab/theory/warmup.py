"""Filling the caches of a first solve ahead of time: numba's compiled kernels and the point sets.

A fresh process with an empty numba cache spends seconds compiling before its first
state-evolution result (``benchmarks/bench_cold_start.py``). Where many sessions start
from one prepared image, that work can be done once, when the image is built:
Binder (``postBuild`` runs ``attnlab warm-up``), a course's JupyterHub image, a shared
lab machine. :func:`warm_caches` compiles every kernel the state evolution, its
thresholds and the proximal operators call, with the argument types they call them
with, into numba's cache, and writes the point sets of the default rules to their disk
cache (:func:`attnlab.theory.quadrature.points_cache_dir`). A later process then loads
them instead: 0.7-1.8 s from its start to a first followed result in place of 2.3-5.3 s,
measured on two of the project's machines (``benchmarks/bench_warm_up.py``).

Numba keys its cache on the contents of the source files and on the CPU model: a process
on a machine with another CPU model, or after attnlab's sources changed, compiles again, as
without a warm-up. Results are the same either way (the same source, signatures and
flags). The point sets are plain arrays (:mod:`attnlab.safe_cache`): an administrator may
prepare them in a folder the sessions read but cannot write (``ATTNLAB_CACHE_DIR``). Numba's
cache holds pickles and numba only uses a folder it can write, so it is never shared between
users (:mod:`attnlab.theory.numba_cache`): each user warms their own (README, "Teaching the
module").
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numba
import numpy as np

from ..params import ModelParams
from . import followed_rule, kernels, split_rule
from .precompile import compile_all, in_cache
from .quadrature import points_cache_dir

__all__ = ["WarmUp", "warm_caches", "cached_kernels", "cached_dispatchers"]


@dataclass(frozen=True)
class WarmUp:
    """What :func:`warm_caches` did.

    Attributes
    ----------
    seconds : float
        Wall time.
    kernels : list of str
        attnlab's kernels that numba's cache now holds (:func:`cached_kernels`).
    numba_cache : str or None
        The folder where numba keeps the kernels of :mod:`~attnlab.theory.kernels` (below
        ``NUMBA_CACHE_DIR`` if set, else next to the sources, else in the user's cache
        folder); ``None`` with ``NUMBA_DISABLE_JIT`` (nothing is compiled).
    points_cache : str or None
        Where the point sets were written (absolute); ``None`` where there is no disk cache
        (``ATTNLAB_CACHE_DIR`` empty, or a folder that cannot be written).
    """

    seconds: float
    kernels: list
    numba_cache: str | None
    points_cache: str | None

    def to_dict(self) -> dict:
        """JSON-serialisable summary (the number of kernels in the cache)."""
        return dict(seconds=round(self.seconds, 2), kernels=len(self.kernels), numba_cache=self.numba_cache,
                    points_cache=self.points_cache)


def cached_dispatchers() -> list:
    """attnlab's numba dispatchers with an on-disk cache (those of :mod:`~attnlab.theory.kernels` and
    :mod:`~attnlab.theory.split_rule`), e.g. for :func:`attnlab.theory.numba_cache.guard_loads`."""
    found = []
    for module in (kernels, split_rule):
        for value in vars(module).values():
            if isinstance(value, numba.core.registry.CPUDispatcher) and value.__module__ == module.__name__ \
                    and not isinstance(getattr(value, "_cache", None), (type(None), numba.core.caching.NullCache)):
                found.append(value)
    return found


def cached_kernels() -> list:
    """attnlab's kernels that numba's cache holds for the present sources.

    Returns
    -------
    list of str
        Qualified names (``"attnlab.theory.kernels.newton"``), sorted; empty with
        ``NUMBA_DISABLE_JIT``. Read from numba's cache index through its private API
        (:func:`~attnlab.theory.precompile.in_cache`).
    """
    if numba.config.DISABLE_JIT:
        return []
    return sorted(f"{d.__module__}.{d.__name__}" for d in cached_dispatchers() if in_cache(d))


def warm_caches() -> WarmUp:
    """Compile attnlab's kernels into numba's cache and write the default point sets to theirs.

    The kernels are compiled by calling what users call, in this process, one after
    the other (no helper process): a fixed point of each minimiser on each branch
    (:func:`~attnlab.theory.branches.solve_state_evolution` at the paper's parameters,
    ``alpha = 1``, with the default rule and :meth:`~attnlab.theory.quadrature.Quadrature.fast`), and the proximal operators of
    :mod:`~attnlab.theory.channel` on a few points. 7-16 s on two cores, depending on the
    machine; after another warm-up about 1-2 s (loading). With ``NUMBA_DISABLE_JIT`` only the point sets are written.

    Returns
    -------
    WarmUp

    Raises
    ------
    RuntimeError
        If a fixed point of the warm-up does not converge (the solver is broken, not the
        caches: nothing a user could change).
    OSError
        If numba could not write its cache (e.g. attnlab installed in a read-only folder:
        set ``NUMBA_CACHE_DIR`` to a writable one).
    """
    from . import channel
    from .branches import solve_state_evolution
    from .quadrature import Quadrature

    start = time.perf_counter()
    followed_rule.default_point_sets()
    folder = points_cache_dir()
    folder = None if folder is None else str(folder.resolve())
    if numba.config.DISABLE_JIT:  # nothing to compile (and the solves would run in Python)
        return WarmUp(seconds=time.perf_counter() - start, kernels=[], numba_cache=None, points_cache=folder)
    compile_all(followed_rule.lane_kernels())  # (what a first solve hands to helper processes)
    compile_all(split_rule.late_kernels())
    params = ModelParams()
    for minimizer in ("followed", "global"):
        for branch in ("semantic", "positional"):
            for quad in (Quadrature(), Quadrature.fast()):
                result = solve_state_evolution(params, 1.0, branch, quad=quad, tol=1e-6, minimizer=minimizer,
                                               warn=False)
                if not result.converged:
                    raise RuntimeError(f"warm-up: the {minimizer} fixed point of the {branch} branch at alpha = 1 "
                                       f"did not converge (residual {result.residual:.1e})")
    w1, w2, T11, T22 = np.array([0.3, 1.0]), np.array([-0.2, 0.5]), np.array([0.6, 0.9]), np.array([0.4, 0.1])
    channel.proximal(w1, w2, T11, T22, 0.5, params.sigma)
    channel.descend(w1, w2, T11, T22, 0.5, params.sigma, start=(w1, w2))
    numba_cache = os.path.abspath(kernels.followed_sums.stats.cache_path)  # (the folder numba chose)
    missing = sorted(d.__name__ for d in cached_dispatchers() if d.signatures and not in_cache(d))
    if missing:
        raise OSError(f"numba could not write its cache in {numba_cache!r} (not cached: {', '.join(missing)}); "
                      "set NUMBA_CACHE_DIR to a writable folder")
    return WarmUp(seconds=time.perf_counter() - start, kernels=cached_kernels(), numba_cache=numba_cache,
                  points_cache=folder)
