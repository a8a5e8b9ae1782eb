"""Compiling kernels in a helper process while the first solve runs (a cold numba cache).

With an empty numba cache (every new Colab or Binder session) the first fixed
point of the global minimiser spends most of its time compiling the split
rule's kernels, one after the other, on one core, in the order the rule calls
them. :func:`start` hands the kernels a computation calls last (for the split
rule :func:`attnlab.theory.split_rule.late_kernels`) to a second Python process,
which compiles them into numba's cache on the other core
(:func:`compile_all`) while this process compiles the first ones and starts
solving; :func:`wait` is called before their first use, after which they load
from the cache. The machine code is the one this process would have compiled
(same source, signatures and flags), so results are bitwise equal with or
without the helper (``tests/test_theory.py``); only the wall time of a first solve
changes (``benchmarks/bench_cold_start.py``).

The same is done for the followed minimiser: its lane kernel
(:func:`attnlab.theory.kernels.followed_sums`, about 2.5 s more to compile than a loop of one
descent per node) compiles in a helper while the first solves use that loop
(:func:`attnlab.theory.kernels.followed_sums_serial`, the same sums bit for bit;
:func:`attnlab.theory.followed_rule.lane_kernels`), which they stop using once the helper has
finished (:func:`running`). That helper first writes the point sets of a default solve to
their disk cache (``first`` of :func:`start`; :func:`attnlab.theory.followed_rule.default_point_sets`)
while this process compiles the serial loop, so that the first solve reads them instead of
importing ``scipy.stats`` (about 0.8 s) to generate them.

A helper is started at most once per process and ``source``, and only if it can help: numba's
cache on, this process allowed at least two cores
(:func:`~attnlab.theory.kernels.threads`: a sweep worker with
``NUMBA_NUM_THREADS=1`` leaves the other core to its siblings; and
``joblib.cpu_count``, which reads a container's CPU quota: on one core the
helper's work would only add to this process's), and one of the kernels
neither compiled here nor in the cache; not with ``NUMBA_DISABLE_JIT``.
``ATTNLAB_COMPILE_HELPER=0`` turns it off. If the helper fails or takes longer
than :data:`WAIT_SECONDS`, this process compiles the kernels itself: only
slower. A helper still running when this process exits is stopped.

Both processes write numba's cache index of the kernels' callees (``newton``
...): numba updates an index without a lock, which is safe as long as both add
the same signature (each kernel and callee has one, ``tests/test_theory.py``).
"""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
from pathlib import Path

import numba

from .kernels import threads

__all__ = ["WAIT_SECONDS", "in_cache", "wanted", "start", "running", "wait", "compile_all"]

#: Longest wait for the helper before compiling here instead (seconds).
WAIT_SECONDS = 60.0

_lock = threading.Lock()
_helpers: dict[str, subprocess.Popen | None] = {}  # by source; None: none started (not wanted, or no subprocess)


def _forget_helper() -> None:  # a forked child (a sweep worker) does not own the parent's helpers
    global _helpers, _lock
    _helpers, _lock = {}, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helper)


def in_cache(dispatcher) -> bool:
    """Whether numba's cache holds an index for ``dispatcher`` written by an earlier process
    for the present source files (not a stale one, which numba ignores:
    :func:`~attnlab.theory.kernels.key_cache_on_kernels`).

    Parameters
    ----------
    dispatcher : numba dispatcher

    Returns
    -------
    bool
        ``True`` also where the dispatcher has no cache (caching off: nothing to share);
        ``False`` where the index is missing, unreadable or of other sources or another numba.
    """
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    if not hasattr(cache_file, "_load_index"):
        return True  # caching is off: nothing to share
    try:
        return bool(cache_file._load_index())  # {} if missing, of another numba or of older sources
    except Exception:  # noqa: BLE001 (unreadable, or numba's private index changed): numba compiles again
        return False


def wanted(kernels) -> bool:
    """Whether a helper would help: see the module docstring.

    Parameters
    ----------
    kernels : iterable of numba dispatchers
    """
    if os.environ.get("ATTNLAB_COMPILE_HELPER", "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if numba.config.DISABLE_JIT or threads() < 2:  # (without the JIT the kernels are Python functions)
        return False
    if all(d.signatures or in_cache(d) for d in kernels):
        return False
    import joblib  # (only here, on a cold cache: its import takes 0.2-0.5 s)
    return joblib.cpu_count() >= 2  # a container's CPU quota too (Binder: often one core of many)


def _call(source: str) -> str:
    """Python code that calls ``source`` (``"module:function"``) and gives its result."""
    module, function = source.split(":")
    return f"importlib.import_module({module!r}).{function}()"


def start(source: str, kernels: dict, *, first: str | None = None) -> None:
    """Start a helper if one is :func:`wanted` for ``kernels``; at most once per process and ``source``.

    Parameters
    ----------
    source : str
        ``"module:function"``, where ``function()`` returns ``kernels`` in the helper.
    kernels : dict
        ``{numba dispatcher: tuple of argument types}``, as :func:`compile_all` takes.
    first : str, optional
        ``"module:function"`` that the helper calls before it compiles (work this process
        would otherwise do before its first solve, e.g. writing point sets to their disk
        cache: :func:`attnlab.theory.followed_rule.default_point_sets`).
    """
    with _lock:
        if source in _helpers:
            return
        _helpers[source] = None
        if not wanted(kernels):
            return
        code = ("import importlib; from attnlab.theory.precompile import compile_all; "
                + (f"{_call(first)}; " if first else "") + f"compile_all({_call(source)})")
        env = dict(os.environ)
        if numba.config.CACHE_DIR:  # the helper runs elsewhere: a relative cache folder must stay the same
            env["NUMBA_CACHE_DIR"] = os.path.abspath(numba.config.CACHE_DIR)
        if env.get("ATTNLAB_CACHE_DIR"):  # and so must the point sets' (quadrature.points_cache_dir)
            env["ATTNLAB_CACHE_DIR"] = os.path.abspath(env["ATTNLAB_CACHE_DIR"])
        try:  # run from the folder holding this attnlab, so that the helper imports this copy
            helper = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], env=env,
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:  # no subprocesses here (a sandbox): the kernels compile in this process
            return
        _helpers[source] = helper
        atexit.register(_stop, helper)


def _stop(helper: subprocess.Popen) -> None:
    """End ``helper`` if it still runs (this process exits, or gave up waiting): no stray process."""
    if helper.poll() is None:
        helper.kill()
        helper.wait()


def running(source: str) -> bool:
    """Whether the helper of ``source`` was started and has not finished."""
    helper = _helpers.get(source)
    return helper is not None and helper.poll() is None


def wait(source: str) -> None:
    """Wait for the helper of ``source``, if one was started, to finish (every caller, in any
    thread); after :data:`WAIT_SECONDS` it is stopped and the kernels compile in this process."""
    helper = _helpers.get(source)
    if helper is None or helper.returncode is not None:
        return
    try:
        helper.wait(timeout=WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        _stop(helper)


def compile_all(kernels: dict) -> None:
    """Compile ``{dispatcher: argument types}`` (numba saves each to its cache): the helper's work."""
    for dispatcher, argtypes in kernels.items():
        dispatcher.compile(argtypes)
