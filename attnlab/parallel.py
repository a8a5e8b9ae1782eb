"""Worker processes and thread limits: the one process pool of attnlab.

Sweeps (:func:`attnlab.experiments.sweeps.run_sweeps`) and the phase diagram
(:func:`attnlab.theory.phase_diagram`) run their tasks through
:func:`parallel_imap`, on joblib's ``loky`` process pool by default. Its
workers start with ``threads`` BLAS/OpenMP/torch/numba threads each (the
variables of :data:`THREAD_VARIABLES` are set before the worker imports
anything, so ``workers * threads`` cores are busy, not more), and each runs a
watchdog that exits the worker within half a second of its parent's death, so
a killed sweep (``SIGKILL``, out of memory) leaves no orphaned workers. With
``workers = 1`` the tasks run in this process, under :func:`limited_threads`.

Any other joblib backend works too: ``"threading"``, or ``"dask"`` for a Dask
cluster (a ``distributed.Client`` must be active; give each Dask worker one
thread per process and call ``client.run(limit_threads)`` once).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from typing import Callable, Iterable, Iterator

from .params import check_int

__all__ = ["THREAD_VARIABLES", "check_numba_threads", "check_backend", "limit_threads", "limited_threads",
           "parallel_imap"]

#: Environment variables that BLAS, OpenMP (torch), numba and numexpr read when they are loaded.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMBA_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def check_numba_threads() -> None:
    """``ValueError`` naming ``NUMBA_NUM_THREADS`` where it is set but not an integer >= 1 (numba's
    import fails on it with "Number of threads specified must be > 0", which names no variable).
    Called before numba is imported (:mod:`attnlab.theory`)."""
    value = os.environ.get("NUMBA_NUM_THREADS")
    if value is None or value.strip() == "":
        return
    try:
        ok = int(value) >= 1
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"NUMBA_NUM_THREADS must be an integer >= 1 (unset: every core), got {value!r}")


def _set_library_threads(n: int) -> tuple:
    """Set torch's and numba's thread counts if they are loaded; return the previous ones."""
    old = (None, None)
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        old = (torch.get_num_threads(), old[1])
        torch.set_num_threads(n)
    if "numba" in sys.modules:
        numba = sys.modules["numba"]
        old = (old[0], numba.get_num_threads())
        numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
    return old


def limit_threads(n: int = 1) -> None:
    """Use ``n`` threads in this process from now on, for every numerical library.

    BLAS and OpenMP libraries already loaded (numpy's OpenBLAS, ...) are limited
    with ``threadpoolctl.threadpool_limits``; torch and numba, if imported,
    with their own ``set_num_threads``; the variables of :data:`THREAD_VARIABLES`
    are set for libraries loaded later. Nothing is imported that is not already.
    For the workers of a Dask cluster: ``client.run(limit_threads)``.

    Raises
    ------
    ValueError
        If ``n`` is not an integer >= 1.
    """
    import threadpoolctl

    n = check_int("n (threads)", n, 1)
    for var in THREAD_VARIABLES:
        os.environ[var] = str(n)
    threadpoolctl.threadpool_limits(n)
    _set_library_threads(n)


@contextlib.contextmanager
def limited_threads(n: int):
    """Context manager: ``n`` threads for BLAS/OpenMP, torch and numba in this process, restored on exit."""
    import threadpoolctl

    n = check_int("n (threads)", n, 1)
    with threadpoolctl.threadpool_limits(n):
        torch_threads, numba_threads = _set_library_threads(n)
        try:
            yield
        finally:
            if torch_threads is not None:
                sys.modules["torch"].set_num_threads(torch_threads)
            if numba_threads is not None:
                sys.modules["numba"].set_num_threads(numba_threads)


def check_backend(backend) -> str:
    """``backend`` if it names a joblib backend (``"loky"``, ``"threading"``, ``"dask"``, or one registered
    with ``joblib.register_parallel_backend``), else ``ValueError`` naming ``backend``."""
    from joblib.parallel import BACKENDS, EXTERNAL_BACKENDS

    known = sorted(set(BACKENDS) | set(EXTERNAL_BACKENDS))
    if not isinstance(backend, str) or backend not in known:
        raise ValueError(f"backend must be one of joblib's backends {known}, got {backend!r}")
    return backend


def _exit_when_orphaned(parent_pid: int, interval: float = 0.5) -> None:
    while os.getppid() == parent_pid:
        time.sleep(interval)
    os._exit(1)


def _init_worker(parent_pid: int) -> None:
    """Initializer of the pool's workers: a daemon thread that exits the worker when its parent dies (POSIX)."""
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), name="attnlab-orphan-watchdog",
                     daemon=True).start()


def parallel_imap(function: Callable, items: Iterable, *, workers: int = 1, backend: str = "loky",
                  threads: int = 1, ordered: bool = True) -> Iterator:
    """Yield ``function(item)`` for each of ``items``, computed by ``workers`` workers.

    Parameters
    ----------
    function : callable
        Picklable (a top-level function of an importable module, or a closure
        cloudpickle can send) for process backends.
    items : iterable
        Consumed lazily, one item per free worker: a generator that stops early
        stops the work (runs already started finish).
    workers : int
        Worker processes (threads for ``backend="threading"``); ``1``: in this process.
    backend : str
        A joblib backend: ``"loky"`` (default, the process pool described in the
        module docstring), ``"threading"``, ``"dask"``, ...
    threads : int
        Threads of each worker (``loky``, and this process when ``workers == 1``).
    ordered : bool
        Yield in the order of ``items`` (else as the results arrive).

    Yields
    ------
    object
        The results. An exception raised by ``function`` is raised here and the
        remaining work is cancelled (loky: its workers are stopped); so is an
        interrupt (Ctrl-C, SIGTERM turned into ``KeyboardInterrupt``).

    Raises
    ------
    ValueError
        If ``workers`` or ``threads`` is not an integer >= 1, or ``backend`` is unknown.
    """
    from joblib import Parallel, delayed, parallel_config

    backend = check_backend(backend)
    workers = check_int("workers", workers, 1)
    threads = check_int("threads", threads, 1)
    calls = (delayed(function)(item) for item in items)
    mode = "generator" if ordered else "generator_unordered"
    if workers == 1 and backend in ("loky", "threading"):
        with limited_threads(threads):
            yield from Parallel(n_jobs=1, return_as=mode)(calls)
        return
    config = dict(backend=backend, n_jobs=-1 if backend == "dask" else workers)  # dask: the cluster's workers
    if backend == "loky":
        config.update(inner_max_num_threads=threads, initializer=_init_worker, initargs=(os.getpid(),))
    with parallel_config(**config):  # (read when the work is dispatched, here)
        results = Parallel(return_as=mode, batch_size=1, pre_dispatch="n_jobs")(calls)
    yield from results
