"""Resumable parameter sweeps: run the specs not yet in a table, save each run's rows as it finishes.

A *sweep* (:class:`Sweep`) is a list of run specifications, a *runner*
(``runner(spec) -> row``, a dict, or a list of dicts for tasks that produce
several rows, e.g. one state-evolution curve; see
:mod:`attnlab.experiments.runners`) and the CSV that keeps the rows
(:mod:`attnlab.experiments.store`). :func:`run_sweeps` runs every spec whose
``run_id`` is not in the CSV yet, on the workers of
:func:`attnlab.parallel.parallel_imap` (joblib: local processes by default,
``backend="dask"`` for a Dask cluster), and rewrites the CSV after every
finished run.

Resume, no lost rows
--------------------
An interrupted sweep (Ctrl-C, a crash, a killed job) is restarted by running
the same command: finished runs are not run again. Rows in the file that are
not part of the current sweep are kept (every row carries its parameters).
The process running a sweep holds the CSV's lock
(:func:`attnlab.experiments.store.sweep_lock`): a second process that tries to
run a sweep on the same CSV meanwhile stops at once with a
:class:`~attnlab.experiments.store.SweepError` naming the lock. Each rewrite
re-reads the rows in the file and merges them (by ``run_id``) with this
session's, so a row in the file is never dropped, even one added since by a
writer that did not take the lock. Rewriting costs ``O(rows)`` per run,
negligible next to a run for the sweeps here.

Provenance
----------
Next to each ``NAME.csv`` the sidecar ``NAME.json`` records the attnlab
version, the git commit (and whether the work tree had uncommitted changes),
library versions, and one entry per session (command line, workers, host and
process id, start and end date in ISO 8601 UTC, wall time, runs completed,
status), the seeds present and free-form notes (e.g. the scale of a figure).
A session killed outright (``SIGKILL``, out of memory) cannot record its end;
the next session on the CSV finds it still ``"running"`` with its process
gone, and marks it ``"interrupted"``.

Dask
----
``attnlab reproduce FIGURE --dask tcp://scheduler:8786`` runs a figure on a
Dask cluster; from Python::

    from distributed import Client
    from attnlab.parallel import limit_threads
    from attnlab.experiments import run_sweep

    client = Client("tcp://scheduler:8786")       # or Client(LocalCluster(...))
    client.run(limit_threads)                     # one BLAS/torch thread per worker process
    run_sweep(specs, "results/my-sweep.csv", backend="dask")

Give each Dask worker process one thread (``--nthreads 1``) and as many worker
processes as cores: a run is pure Python/torch and holds the GIL part of the time.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

from ..params import check_int
from ..parallel import check_backend, parallel_imap
from .runners import run_simulation_spec, spec_key
from .store import (SweepError, provenance_path, read_provenance, read_rows, sweep_lock, write_csv_atomic,
                    write_json_atomic)

__all__ = ["Sweep", "SweepReport", "run_sweep", "run_sweeps", "code_provenance", "CODE_KEYS"]


@dataclass
class Sweep:
    """One sweep: specs, the runner that turns a spec into row(s), and the CSV that keeps them.

    Attributes
    ----------
    specs : list of dict
        Run specifications (JSON-serialisable values).
    path : str or Path
        CSV file (created, or resumed from); the provenance goes to ``path`` with suffix ``.json``.
    runner : callable
        Picklable ``runner(spec) -> dict | list[dict]`` (top-level function of an importable module).
    description, notes : str
        Saved in the provenance (``notes``: scale, method, anything a reader needs).
    """

    specs: list
    path: str | Path
    runner: Callable = run_simulation_spec
    description: str = ""
    notes: str = ""
    # filled by run_sweeps
    rows: list = field(default_factory=list, repr=False)
    columns: list = field(default_factory=list, repr=False)
    provenance: dict = field(default_factory=dict, repr=False)


@dataclass
class SweepReport:
    """Outcome of :func:`run_sweep` for one CSV.

    Attributes
    ----------
    path, provenance : str
    total : int
        Specs in the sweep.
    skipped : int
        Specs already in the CSV (resumed, not run).
    completed : int
        Specs run and saved in this call.
    failed : int
        Specs that raised (see :class:`~attnlab.experiments.store.SweepError`).
    seconds : float
        Wall time of this call.
    """

    path: str
    provenance: str
    total: int
    skipped: int
    completed: int
    failed: int
    seconds: float


def run_sweep(specs: Sequence[Mapping], path, *, runner: Callable = run_simulation_spec, workers: int = 1,
              backend: str = "loky", progress: bool = True, description: str = "", notes: str = "",
              command: str | None = None) -> SweepReport:
    """Run the specs not yet in ``path``, saving rows as runs finish.

    Parameters
    ----------
    specs : sequence of dict
        Run specifications (e.g. from :func:`~attnlab.experiments.runners.grid` of
        :func:`~attnlab.experiments.runners.simulation_spec`).
    path : str or Path
        The CSV; resumed from if it exists. Provenance in ``path.with_suffix(".json")``.
    runner : callable
        ``runner(spec) -> dict | list[dict]``, picklable for process backends.
    workers : int
        Worker processes (``backend="loky"``, one BLAS/torch thread each; ``1``:
        runs in this process) or threads (``"threading"``).
    backend : str
        A joblib backend (:func:`attnlab.parallel.parallel_imap`): ``"loky"``,
        ``"threading"``, ``"dask"`` (an active ``distributed.Client``; ``workers``
        is then the cluster's).
    progress : bool
        Show a tqdm bar over the sweep (finished runs count from the start).
    description, notes, command : str
        Recorded in the provenance (``command`` default: ``sys.argv``).

    Returns
    -------
    SweepReport

    Raises
    ------
    ValueError
        If ``specs`` is empty, ``workers < 1`` or ``backend`` is not a joblib backend.
    SweepError
        If runs raised. Runs not yet started are not started, runs in flight
        are awaited and saved, then the error lists the failures; run the
        sweep again to retry only what is missing. Also if another process
        is running a sweep on ``path`` (the message names the lock file).
    CorruptResultsError
        (a ``ValueError``) If ``path`` or its provenance is damaged (see
        :func:`~attnlab.experiments.store.read_columns`); nothing is run and the
        files are left as they are.
    """
    return run_sweeps([Sweep(list(specs), path, runner, description, notes)], workers=workers, backend=backend,
                      progress=progress, command=command)[0]


def run_sweeps(sweeps: Sequence[Sweep], *, workers: int = 1, backend: str = "loky", progress: bool = True,
               command: str | None = None) -> list[SweepReport]:
    """Run several sweeps (each its own CSV) on one set of workers, under one progress bar.

    Tasks are dispatched in the order of ``sweeps`` then of their specs, so put
    long tasks first. See :func:`run_sweep` for the parameters and errors.

    Returns
    -------
    list of SweepReport, one per sweep
    """
    if not sweeps:
        raise ValueError("sweeps must contain at least one sweep")
    workers = check_int("workers", workers, 1)
    backend = check_backend(backend)
    command = " ".join(sys.argv) if command is None else command
    keys = []
    for sw in sweeps:
        sw.specs = list(sw.specs)
        if not sw.specs:
            raise ValueError(f"specs of {sw.path} is empty: a sweep needs at least one run")
        sw.path = Path(sw.path)
        keys.append([spec_key(s) for s in sw.specs])
        if len(set(keys[-1])) != len(keys[-1]):
            raise ValueError(f"specs of {sw.path} contain duplicates")
    t0 = time.perf_counter()
    with contextlib.ExitStack() as locks:
        for sw in sweeps:  # lock before reading, so that the rows read are the rows we extend
            locks.enter_context(sweep_lock(sw.path))
        todo = []
        for i, (sw, ks) in enumerate(zip(sweeps, keys)):
            sw.rows = read_rows(sw.path, key="run_id")
            sw.columns = list(dict.fromkeys(c for r in sw.rows for c in r))
            _reap_sessions(sw)
            done = {r["run_id"] for r in sw.rows}
            todo += [(i, k, s) for k, s in zip(ks, sw.specs) if k not in done]
        return _run_pending(sweeps, todo, workers, backend, progress, command, t0)


def _call(task):
    """Run one task ``(sweep index, run_id, runner, spec)`` in a worker; a runner's exception is returned,
    not raised, so that the other runs in flight finish and are saved."""
    i, key, runner, spec = task
    try:
        out = runner(spec)
    except Exception as exc:
        return i, key, spec, None, exc
    return i, key, spec, out if isinstance(out, list) else [out], None


def _save_rows(sw: Sweep) -> None:
    """Rewrite the CSV with the rows on disk plus this session's rows (merged by ``run_id``).

    Called with the sweep's lock held. Re-reading the file first means a row in
    the file is never dropped, even if some other writer (one that did not take
    the lock) added rows since this session read it.
    """
    on_disk = read_rows(sw.path, key="run_id")
    have = {r["run_id"] for r in on_disk}
    rows = on_disk + [r for r in sw.rows if r["run_id"] not in have]
    header = list(dict.fromkeys(c for r in on_disk for c in r))
    columns = header + [c for c in sw.columns if c not in header]
    write_csv_atomic(sw.path, rows, columns)
    sw.rows, sw.columns = rows, columns


def _run_pending(sweeps, todo, workers, backend, progress, command, t0):
    from tqdm.auto import tqdm

    n_pending = [sum(t[0] == i for t in todo) for i in range(len(sweeps))]
    where = "the Dask cluster" if backend == "dask" else f"{workers} worker(s)"
    sessions = [_start_session(sw, command, f"joblib {backend}, {where}", n) for sw, n in zip(sweeps, n_pending)]
    completed = [0] * len(sweeps)
    failures: list[tuple[Sweep, dict, BaseException]] = []
    status = "complete"
    total = sum(len(sw.specs) for sw in sweeps)
    bar = tqdm(total=total, initial=total - len(todo), disable=not progress, unit="run",
               desc=", ".join(Path(sw.path).stem for sw in sweeps)[:40])

    def tasks():  # stops dispatching at the first failure; runs in flight finish and are saved
        for i, key, spec in todo:
            if failures:
                return
            yield i, key, sweeps[i].runner, spec

    results = parallel_imap(_call, tasks(), workers=workers, backend=backend, ordered=False) if todo else None
    try:
        for i, key, spec, rows, exc in results or ():
            sw = sweeps[i]
            if exc is not None:
                failures.append((sw, spec, exc))
                continue
            for row in rows:
                row = {"run_id": key, **row}
                sw.columns += [c for c in row if c not in sw.columns]
                sw.rows.append(row)
            completed[i] += 1
            _save_rows(sw)
            _update_session(sw, sessions[i], completed[i], "running", t0)
            bar.update(1)
    except BaseException:
        status = "interrupted"
        raise
    finally:
        if results is not None:
            results.close()  # (after an interrupt: stops the work in flight and the workers)
        bar.close()
        if failures and status != "interrupted":
            status = "failed"
        for i, sw in enumerate(sweeps):
            st = status if (status != "failed" or any(f[0] is sw for f in failures)) else "complete"
            if st == "interrupted" and completed[i] == n_pending[i]:
                st = "complete"  # every run of this table had finished before the interrupt
            _update_session(sw, sessions[i], completed[i], st, t0)
    seconds = time.perf_counter() - t0
    reports = [SweepReport(path=str(sw.path), provenance=str(provenance_path(sw.path)), total=len(sw.specs),
                           skipped=len(sw.specs) - n_pending[i], completed=completed[i],
                           failed=sum(f[0] is sw for f in failures), seconds=seconds)
               for i, sw in enumerate(sweeps)]
    if failures:
        sw, spec, exc = failures[0]
        raise SweepError(f"{len(failures)} run(s) failed; finished runs are saved, run the sweep again to retry "
                         f"the rest. First failure in {sw.path.name}, spec {json.dumps(spec)}: "
                         f"{type(exc).__name__}: {exc}") from exc
    return reports


# ----------------------------------------------------------------------------- provenance

#: Code-provenance keys, recorded per session; the file's top level repeats those of the last
#: session that computed rows.
CODE_KEYS = ("attnlab_version", "git_commit", "git_dirty", "python", "numpy", "torch", "platform", "cpu_count")


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _git(*args) -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_provenance(paths: tuple[str, ...] = ("attnlab",)) -> dict:
    """Versions of attnlab and its main dependencies, git commit (``"unknown"`` outside a repository).

    Parameters
    ----------
    paths : tuple of str
        Folders of the repository (relative to its root) whose code the result depends on:
        ``git_dirty`` is true when a tracked file under one of them differs from the commit,
        ``None`` outside a repository.
    """
    from importlib.metadata import PackageNotFoundError, version

    from .. import __version__

    commit = _git("rev-parse", "HEAD") or "unknown"
    status = (_git("status", "--porcelain", "--untracked-files=no", "--", *paths)
              if commit != "unknown" else None)
    try:
        torch = version("torch")
    except PackageNotFoundError:
        torch = None
    return dict(attnlab_version=__version__, git_commit=commit,
                git_dirty=None if status is None else bool(status),
                python=platform.python_version(), numpy=np.__version__, torch=torch,
                platform=platform.platform(), cpu_count=os.cpu_count())


def _start_session(sw: Sweep, command, executor: str, n_pending: int) -> dict | None:
    """Append a session to the provenance, or ``None`` if nothing is to be run (the files stay untouched)."""
    if n_pending == 0:
        return None
    session = dict(session_id=uuid.uuid4().hex[:12], command=command, started_utc=_utc_now(), finished_utc=None,
                   runtime_seconds=0.0, executor=executor, runs_in_sweep=len(sw.specs),
                   runs_pending=n_pending, runs_completed=0, status="running", host=socket.gethostname(),
                   pid=os.getpid(), pid_started=_process_started(os.getpid()), **code_provenance())
    _write_provenance(sw, session)
    return session


def _update_session(sw: Sweep, session: dict | None, completed: int, status: str, t0: float) -> None:
    if session is None:
        return
    session.update(runs_completed=completed, status=status, runtime_seconds=round(time.perf_counter() - t0, 2),
                   finished_utc=_utc_now())
    _write_provenance(sw, session)


def _process_started(pid: int) -> float | None:
    """Start time of process ``pid`` (seconds since the epoch; ``None`` if there is no such process)."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _session_alive(session: Mapping) -> bool | None:
    """Whether the process that recorded ``session`` still runs: ``None`` if that cannot be checked
    (another host, or a session recorded before pids were)."""
    import psutil

    pid, host = session.get("pid"), session.get("host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return None
    if pid == os.getpid():
        return False  # this process is here, not running that session (a pid reused since)
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = session.get("pid_started")
        return started is None or abs(proc.create_time() - started) < 1.0  # else: a reused pid
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def _reap_sessions(sw: Sweep) -> None:
    """Mark as ``"interrupted"`` the sessions left ``"running"`` by a process that is gone (a killed run).

    Called with the sweep's lock held, so no process that takes the lock is
    running this sweep: a session still ``"running"`` is interrupted unless
    its process demonstrably runs on this host (one that ignored the lock).
    A session of another host, or one recorded without a pid, cannot be
    checked and is marked too (were it running after all, its next write of
    the provenance puts its own status back). Writes the provenance only if
    a session changed.
    """
    prov = read_provenance(sw.path)
    changed = False
    for s in (prov or {}).get("sessions", []):
        if s.get("status") != "running":
            continue
        alive = _session_alive(s)
        if alive:
            continue
        s["status"] = "interrupted"
        s["status_note"] = (f"process {s.get('pid')} on {s.get('host')} had ended" if alive is False else
                            "its process could not be checked from here; the sweep's lock was free") + \
            f" when a later session started ({_utc_now()})"
        changed = True
    if changed:
        write_json_atomic(provenance_path(sw.path), prov)


def _summarise_provenance(prov: dict, rows: list, specs: list) -> dict:
    """Fill the top-level summary of a provenance dict from its sessions and the CSV rows."""
    sessions = prov.get("sessions", [])
    producing = [s for s in sessions if s.get("runs_completed")] or sessions
    if producing:
        prov.update({k: producing[-1][k] for k in CODE_KEYS if k in producing[-1]})
        last = producing[-1]
        prov["date"] = last.get("finished_utc") or last.get("started_utc")
    prov["n_rows"] = len(rows)
    prov["seeds"] = sorted({int(float(r["seed"])) for r in rows if r.get("seed") not in (None, "")})
    prov["sweep_complete"] = {spec_key(s) for s in specs} <= {r.get("run_id") for r in rows}
    prov["runtime_seconds_total"] = round(sum(s.get("runtime_seconds") or 0 for s in sessions), 2)
    for col, key in (("seconds", "run_seconds_total"), ("cpu_seconds", "run_cpu_seconds_total")):
        vals = [float(r[col]) for r in rows if r.get(col) not in (None, "")]
        if vals:
            prov[key] = round(sum(vals), 2)
    return prov


def _write_provenance(sw: Sweep, session: dict) -> None:
    """Put ``session`` into the provenance on disk (replacing its earlier copy), summarise, write.

    The file is re-read each time (with the sweep's lock held), so that the
    sessions recorded by other processes are kept as they wrote them: a stale
    copy never overwrites another session's status.
    """
    prov = read_provenance(sw.path) or {}
    prov["csv"] = sw.path.name
    if sw.description:
        prov["description"] = sw.description
    if sw.notes:
        prov["notes"] = sw.notes
    sessions = prov.setdefault("sessions", [])
    ids = [s.get("session_id") for s in sessions]
    if session["session_id"] in ids:
        sessions[ids.index(session["session_id"])] = session
    else:
        sessions.append(session)
    sw.provenance = _summarise_provenance(prov, sw.rows, sw.specs)
    write_json_atomic(provenance_path(sw.path), sw.provenance)
