"""Parameter sweeps on any ``concurrent.futures.Executor``, kept as tidy, resumable CSVs.

A *sweep* is a list of run specifications ("specs": flat dictionaries of
parameters, e.g. ``{"d": 1000, "alpha": 1.5, "omega": 0.3, ..., "seed": 0}``)
and a *runner*, a picklable function ``runner(spec) -> row`` (a dict, or a list
of dicts for tasks that produce several rows, e.g. one state-evolution curve).
:func:`run_sweeps` submits every spec that is not finished yet to an executor,
and as runs complete it writes their rows to a CSV (one row per run, every
parameter a column, plus a ``run_id`` column: a hash of the spec).

Executors
---------
Any ``concurrent.futures.Executor`` works: the default is a local process pool
(:func:`make_executor`, ``workers`` processes started with ``spawn``, each with
one torch/BLAS thread so that ``workers`` runs use ``workers`` cores, and each
exits when the process that started it dies, so a killed sweep leaves no
orphaned workers). To run
the same sweep on a Dask cluster, hand over the executor of a
``distributed.Client``::

    from distributed import Client
    from attnlab.sweeps import limit_threads, run_sweep

    client = Client("tcp://scheduler:8786")       # or Client(LocalCluster(...))
    client.run(limit_threads)                     # one torch thread per worker process
    run_sweep(specs, "results/my-sweep.csv", executor=client.get_executor())

``attnlab reproduce FIGURE --dask tcp://scheduler:8786`` does exactly this.
Give each Dask worker process one thread (``--nthreads 1``) and as many worker
processes as cores: a run is pure Python/torch and holds the GIL part of the time.

Resume and atomic writes
------------------------
A sweep resumes from its CSV: specs whose ``run_id`` is already in the file
are not run again, so an interrupted sweep (Ctrl-C, a crash, a killed job) is
restarted by running the same command. Rows already in the file that are not
part of the current sweep are kept (finished work is never discarded; every
row carries its parameters). The CSV is rewritten *whole* after every finished
run, to a temporary file in the same directory that then replaces the CSV with
``os.replace`` (atomic on POSIX and Windows): a reader, or a crash at any
moment, sees either the previous or the next complete file, never a half
written one. Rewriting costs ``O(rows)`` per run, negligible next to a run
for the sweeps here (hundreds to thousands of rows).

A process running a sweep holds an exclusive lock, ``NAME.csv.lock`` next to
the CSV (``filelock``; the same lock for every process, whatever its
temporary directory): a second process that tries to run a sweep on the same
CSV meanwhile stops at once with a :class:`SweepError` naming the lock. Each
rewrite also re-reads the rows in the file and merges them (by ``run_id``)
with this session's, so a row in the file is never dropped, even one added
since by a writer that did not take the lock.

Reading is strict (:func:`read_columns`, :func:`read_rows`): a file that is
not UTF-8, is cut off, has lost its header, has a row with too few or too many
fields, or a value that does not parse, raises :class:`CorruptResultsError`
(a ``ValueError``) naming the file and the line. A damaged row is never
counted as finished work, nor silently dropped.

Provenance
----------
Next to each ``NAME.csv`` a sidecar ``NAME.json`` records the attnlab version,
the git commit (and whether the work tree had uncommitted changes), library
versions, and one entry per session (command line, executor, host and process
id, start and end date in ISO 8601 UTC, wall time, runs completed, status),
the seeds present and free-form notes (e.g. the scale of a figure). The CSV
stays tidy. A session killed outright (``SIGKILL``, out of memory) cannot
record its end; the next session on the CSV finds it still ``"running"`` with
its process gone, and marks it ``"interrupted"``.
"""
from __future__ import annotations

import concurrent.futures as cf
import contextlib
import csv
import hashlib
import io
import itertools
import json
import math
import multiprocessing
import os
import platform
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np
from filelock import FileLock
from filelock import Timeout as LockTimeout

from .params import TEACHERS, ModelParams, check_choice, check_int, check_positive

__all__ = ["Sweep", "SweepReport", "SweepError", "CorruptResultsError", "grid", "spec_key", "make_executor",
           "limit_threads", "run_sweep", "run_sweeps", "read_rows", "read_columns", "write_csv_atomic",
           "write_json_atomic", "provenance_path", "read_provenance", "code_provenance", "simulation_spec",
           "run_simulation_spec", "SIMULATION_RESULT_COLUMNS"]

#: Columns of a simulation row after the spec's parameters (see :func:`run_simulation_spec`).
SIMULATION_RESULT_COLUMNS = ("n", "m", "theta", "qnorm", "eps_t", "eps_g", "eps_g_sem", "eps_g_linear",
                             "eps_g_linear_sem", "converged", "steps_taken", "grad_rms", "seconds",
                             "cpu_seconds")


class SweepError(RuntimeError):
    """Some runs of a sweep raised; the finished rows are saved, the failures listed."""


# ----------------------------------------------------------------------------- specs

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
        values.append([_plain(v) for v in axis])
    fixed = {k: _plain(v) for k, v in fixed.items()}
    return [dict(fixed, **dict(zip(axes, combo))) for combo in itertools.product(*values)]


def _plain(v):
    """Plain Python scalar (JSON- and CSV-friendly) from numpy scalars; floats rounded to 12 digits."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(f"{float(v):.12g}")
    if isinstance(v, (list, tuple, np.ndarray)):
        return [_plain(x) for x in v]
    return v


def _key_value(v):
    v = _plain(v)
    if isinstance(v, float) and v.is_integer():
        return int(v)  # 1.0 and 1 are the same parameter value (a CSV round trip may turn one into the other)
    if isinstance(v, list):
        return [_key_value(x) for x in v]
    return v


def spec_key(spec: Mapping) -> str:
    """Stable identifier of a spec: first 16 hex digits of the SHA-1 of its sorted JSON.

    Numbers are compared by value (``1.0`` and ``1`` give the same key), so the
    key can be recomputed from a CSV row.
    """
    text = json.dumps({k: _key_value(v) for k, v in spec.items()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(text.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- simulations

def simulation_spec(*, d: int, alpha: float, omega: float = 0.3, sigma: float = 0.5, lam: float = 0.01,
                    A=((0.6, 0.4), (0.4, 0.6)), rank: int = 1, init: str = "random", method: str = "lbfgs",
                    seed: int = 0, steps: int | None = None, lr: float | None = None,
                    n_test: int = 20_000, teacher: str = "gaussian") -> dict:
    """A validated, flat spec for :func:`run_simulation_spec` (method defaults made explicit).

    Every parameter becomes a CSV column: ``d, alpha, omega, sigma, lambda,
    A11, A12, A21, A22, rank, init, method, seed, steps, lr, n_test`` and, for a
    teacher other than the default Gaussian draw, ``teacher`` (``"exact-norm"``:
    ``|Q*|^2 = d``; the column is left out for the default so that the run ids of
    existing sweeps do not change).
    ``steps`` is the step budget (L-BFGS: iterations after the warm-up) and
    ``lr`` the learning rate (L-BFGS: that of its gradient-descent warm-up).

    Raises
    ------
    ValueError
        On any invalid parameter; the message names it.
    """
    from .params import INITS, METHODS
    from .training import DEFAULT_LR, DEFAULT_STEPS

    params = ModelParams(sigma=sigma, lam=lam, omega=omega, A=A, r=rank)
    if params.L != 2:
        raise ValueError("A must be 2x2: sweeps are for L = 2 tokens")
    method = check_choice("method", method, METHODS)
    spec = dict(d=check_int("d", d, 2), alpha=check_positive("alpha", alpha), omega=params.omega,
                sigma=params.sigma, **{"lambda": params.lam},
                A11=params.A[0][0], A12=params.A[0][1], A21=params.A[1][0], A22=params.A[1][1],
                rank=params.r, init=check_choice("init", init, INITS), method=method,
                seed=check_int("seed", seed, 0),
                steps=check_int("steps", DEFAULT_STEPS[method] if steps is None else steps, 1),
                lr=check_positive("lr", DEFAULT_LR.get(method, DEFAULT_LR["gd"]) if lr is None else lr),
                n_test=check_int("n_test", n_test, 2))
    if check_choice("teacher", teacher, TEACHERS) != "gaussian":
        spec["teacher"] = teacher
    return {k: _plain(v) for k, v in spec.items()}


def _norm(v) -> float:
    return float(np.linalg.norm(np.atleast_1d(np.asarray(v, dtype=float))))


def run_simulation_spec(spec: Mapping) -> dict:
    """Run one spec of :func:`simulation_spec` with :func:`attnlab.run_simulation` (no progress bar).

    Returns
    -------
    dict
        The spec followed by :data:`SIMULATION_RESULT_COLUMNS` (``seconds``: wall
        time of the run; ``cpu_seconds``: CPU time of this process, which on a
        busy machine is the better measure of the run's cost). For ``rank > 1``
        the overlaps are reported as the Euclidean norms of the overlap vectors
        ``|(m_1, .., m_r)|`` and ``|(theta_1, .., theta_r)|``, which do not
        depend on the arbitrary rotation of ``Q``'s columns (the risk is
        invariant under ``Q -> Q O`` for orthogonal ``O``); for ``rank = 1``
        they are the signed, sign-canonicalised overlaps.
    """
    from .simulation import run_simulation

    cpu0 = time.process_time()
    params = ModelParams(sigma=spec["sigma"], lam=spec["lambda"], omega=spec["omega"],
                         A=((spec["A11"], spec["A12"]), (spec["A21"], spec["A22"])), r=spec["rank"])
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


# ----------------------------------------------------------------------------- executors

def limit_threads(n: int = 1) -> None:
    """Use ``n`` torch/BLAS threads in this process (worker initializer; also ``client.run(limit_threads)``).

    Sets the variables that torch, numba and BLAS read when they are imported
    (``OMP_NUM_THREADS``, ...), and the thread counts of torch and numba if they
    are imported already; it does not import them, so a worker whose runs never
    need torch does not spend a second or two importing it.
    """
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(n)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    if "numba" in sys.modules:
        sys.modules["numba"].set_num_threads(n)


def _exit_when_orphaned(parent_pid: int, interval: float = 0.5) -> None:
    """Poll the parent process id; exit this process at once when it changes (the parent died)."""
    while os.getppid() == parent_pid:
        time.sleep(interval)
    os._exit(1)


def _init_worker(parent_pid: int, threads: int = 1) -> None:
    """Initializer of :func:`make_executor`'s workers: exit when the parent dies, ``threads`` torch threads."""
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), name="attnlab-orphan-watchdog",
                     daemon=True).start()
    limit_threads(threads)


def make_executor(workers: int = 1) -> cf.ProcessPoolExecutor:
    """A local process pool of ``workers`` processes with one torch thread each.

    Processes are started with ``spawn`` (forking a process whose torch/OpenMP
    thread pool is already running is not safe). Each worker runs a watchdog
    thread that exits the worker within half a second of its parent's death
    (its parent process id changes, POSIX), so a killed sweep (``SIGKILL``,
    out of memory) leaves no orphaned workers computing runs nobody saves.

    Raises
    ------
    ValueError
        If ``workers`` is not an integer >= 1.
    """
    workers = check_int("workers", workers, 1)
    return cf.ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                                  initializer=_init_worker, initargs=(os.getpid(),))


# ----------------------------------------------------------------------------- files

def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "True" if v else "False"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return "nan" if math.isnan(v) else f"{float(v):.10g}"
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v)
    return str(v)


def _file_mode() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def _atomic_write_text(path: Path, write: Callable) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, _file_mode())  # mkstemp creates 0600; give the file the usual permissions
        with os.fdopen(fd, "w", newline="", encoding="utf-8") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_csv_atomic(path, rows: Sequence[Mapping], columns: Sequence[str] | None = None) -> None:
    """Write ``rows`` as a CSV via a temporary file and ``os.replace`` (never half written).

    ``columns`` fixes the column order (default: keys in order of first appearance).
    """
    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))

    def write(fh):
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(columns)
        for r in rows:
            w.writerow([_fmt(r.get(c)) for c in columns])

    _atomic_write_text(Path(path), write)


def write_json_atomic(path, obj) -> None:
    """Write ``obj`` as indented JSON via a temporary file and ``os.replace``."""
    _atomic_write_text(Path(path), lambda fh: (json.dump(obj, fh, indent=1, default=_plain), fh.write("\n")))


class CorruptResultsError(ValueError):
    """A results file that cannot be read safely: damaged, cut off, or not a sweep's file.

    Raised instead of guessing: a row that cannot be read is never counted as a
    finished run, and no data is silently dropped. The message names the file and
    the line (``path``, ``line``: 1-based, ``None`` if the whole file is at fault).
    """

    def __init__(self, path, line: int | None, problem: str):
        self.path, self.line, self.problem = Path(path), line, problem
        where = f"{self.path}" if line is None else f"{self.path}, line {line}"
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):
        return type(self), (self.path, self.line, self.problem)


#: Column kinds of the files attnlab writes (other columns: the kind of most of their values).
_TEXT_COLUMNS = frozenset({"run_id", "init", "method", "teacher", "kind", "branch", "minimizer"})
_BOOL_COLUMNS = frozenset({"converged"})
_NUMERIC_COLUMNS = frozenset({"d", "alpha", "omega", "sigma", "lambda", "A11", "A12", "A21", "A22", "rank", "seed",
                              "steps", "lr", "n_test", *SIMULATION_RESULT_COLUMNS}) - _BOOL_COLUMNS
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_INT = re.compile(r"[+-]?\d+")
_FIX = "fix or delete that line (its run is then redone), or move the file away"


@dataclass
class _Table:
    header: list
    rows: list       # lists of str, len(header) each
    lines: list      # line number of each row (where it ends)
    kinds: dict      # column -> "text", "bool" or "number"


def _column_kind(name: str, values: list) -> str:
    if name in _TEXT_COLUMNS:
        return "text"
    if name in _BOOL_COLUMNS:
        return "bool"
    if name in _NUMERIC_COLUMNS:
        return "number"
    filled = [v for v in values if v != ""]
    if not filled:
        return "number"  # empty or all missing: NaN
    if 2 * sum(v in ("True", "False") for v in filled) > len(filled):
        return "bool"
    if 2 * sum(_NUMBER.fullmatch(v) is not None for v in filled) > len(filled):
        return "number"
    return "text"


def _read_table(path: Path, key: str | None) -> _Table:
    """Parse a CSV strictly (see :func:`read_columns`); raises :class:`CorruptResultsError`."""
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptResultsError(path, data.count(b"\n", 0, exc.start) + 1,
                                  f"not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}): not a "
                                  f"results CSV, or a damaged one; {_FIX}") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark (a spreadsheet's "CSV UTF-8")
    if not text:
        raise CorruptResultsError(path, None, "the file is empty (no header line); delete it")
    if not text.endswith("\n"):  # attnlab ends every row with a line break: the file was cut off
        raise CorruptResultsError(path, text.count("\n") + 1,
                                  f"the last line has no line break: the file was cut off in this row; {_FIX}")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader)
        if key is not None and key not in header:
            raise CorruptResultsError(path, reader.line_num, f"the header has no {key!r} column (the header line "
                                      f"is missing or damaged? it reads {','.join(header)[:80]!r})")
        if any(_NUMBER.fullmatch(name) for name in header):
            raise CorruptResultsError(path, reader.line_num, f"the header has numbers for column names (the header "
                                      f"line is missing? it reads {','.join(header)[:80]!r})")
        if len(set(header)) != len(header) or "" in header:
            raise CorruptResultsError(path, reader.line_num, f"the header has empty or repeated column names: "
                                      f"{','.join(header)[:80]!r}")
        rows, lines = [], []
        for fields in reader:
            if len(fields) != len(header):
                raise CorruptResultsError(path, reader.line_num, f"{len(fields)} fields where the header has "
                                          f"{len(header)}: the row is damaged or cut off; {_FIX}")
            rows.append(fields)
            lines.append(reader.line_num)
    except csv.Error as exc:
        raise CorruptResultsError(path, reader.line_num, f"not valid CSV ({exc}); {_FIX}") from None
    kinds = {}
    for j, name in enumerate(header):
        values = [r[j] for r in rows]
        kinds[name] = kind = _column_kind(name, values)
        for v, line in zip(values, lines):
            if name == key and v == "":
                raise CorruptResultsError(path, line, f"empty {key}; {_FIX}")
            if v == "" or kind == "text":
                continue
            if kind == "bool" and v not in ("True", "False"):
                raise CorruptResultsError(path, line, f"column {name!r} holds True/False, not {v!r}; {_FIX}")
            if kind == "number" and _NUMBER.fullmatch(v) is None:
                raise CorruptResultsError(path, line, f"column {name!r} holds numbers, not {v!r}; {_FIX}")
    return _Table(header, rows, lines, kinds)


def _read_results(path: Path, key: str | None = "run_id") -> tuple[list, list]:
    """Header and rows (dicts of str) of a CSV read strictly; ``([], [])`` if it does not exist."""
    if not path.exists():
        return [], []
    t = _read_table(path, key)
    return t.header, [dict(zip(t.header, r)) for r in t.rows]


def read_rows(path, *, key: str | None = None) -> list[dict]:
    """Rows of a CSV as dicts of strings (``[]`` if the file does not exist), read strictly.

    Parameters
    ----------
    path : str or Path
        The CSV (e.g. a sweep's results).
    key : str, optional
        A column the header must contain and no row may leave empty, e.g.
        ``"run_id"`` for a sweep's results.

    Raises
    ------
    CorruptResultsError
        (a ``ValueError``) If the file cannot be read safely; see :func:`read_columns`.
    """
    return _read_results(Path(path), key)[1]


def _column_array(values: list[str], kind: str) -> np.ndarray:
    if kind == "text":
        return np.array(values, dtype=str)
    if kind == "bool":
        if values and "" not in values:
            return np.array([v == "True" for v in values])
        return np.array(values, dtype=str)  # missing values: "True", "False" or ""
    if values and all(_INT.fullmatch(v) for v in values):
        return np.array([int(v) for v in values], dtype=np.int64)
    return np.array([float(v) if v != "" else math.nan for v in values], dtype=float)


def read_columns(path, *, key: str | None = None) -> dict[str, np.ndarray] | None:
    """A CSV as a dict of numpy column arrays (bool, int64, float64 or str), or ``None`` if missing.

    The file is read strictly, so that damage is reported rather than silently
    dropped or misread: it must be UTF-8 and end with a line break (attnlab
    ends every row with one: a file that does not was cut off); its header
    must name distinct columns, none of them a number (a header line that
    reads like data was lost), including ``key`` if given; every row must have
    exactly as many fields as the header, and the values must parse: numbers
    in numeric columns (an empty field is NaN), ``True``/``False`` in boolean
    ones. A column's kind is known for the columns attnlab writes (``run_id``,
    ``init``, ``method``, ``kind``, ``branch``... are text, ``converged`` is
    boolean, the parameters and results of :func:`run_simulation_spec` are
    numbers); any other column is of the kind of most of its values. Integer
    columns without missing values are int64, other numeric columns float64;
    a boolean column with missing values is returned as str (``"True"``,
    ``"False"``, ``""``).

    Parameters
    ----------
    path : str or Path
        The CSV.
    key : str, optional
        A column the header must contain, non-empty in every row: ``"run_id"``
        for a sweep's results (as :func:`attnlab.reproduce.load_results` reads them).

    Returns
    -------
    dict of str to ndarray or None
        One array per column, all rows of the file; ``None`` if the file does not exist.

    Raises
    ------
    CorruptResultsError
        (a ``ValueError``) If the file is not UTF-8, is empty or cut off, has
        lost its header line (or has no ``key`` column), has a row with too few
        or too many fields, or a value that does not parse; the message names
        the file and the line.
    """
    path = Path(path)
    if not path.exists():
        return None
    t = _read_table(path, key)
    return {name: _column_array([r[j] for r in t.rows], t.kinds[name]) for j, name in enumerate(t.header)}


def provenance_path(csv_path) -> Path:
    """The provenance sidecar ``NAME.json`` of ``NAME.csv``."""
    return Path(csv_path).with_suffix(".json")


def read_provenance(csv_path) -> dict | None:
    """The provenance sidecar of a CSV as a dict, or ``None`` if missing.

    Raises
    ------
    CorruptResultsError
        (a ``ValueError``) If the sidecar is not UTF-8 JSON holding an object; the
        message names the file and the line.
    """
    p = provenance_path(csv_path)
    if not p.exists():
        return None
    data = p.read_bytes()
    try:
        prov = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise CorruptResultsError(p, data.count(b"\n", 0, exc.start) + 1, "not UTF-8 text: a damaged provenance "
                                  "file; fix it or move it away") from None
    except json.JSONDecodeError as exc:
        raise CorruptResultsError(p, exc.lineno, f"not valid JSON ({exc.msg}, column {exc.colno}): a damaged "
                                  "provenance file; fix it or move it away") from None
    if not isinstance(prov, dict):
        raise CorruptResultsError(p, None, "not a provenance record (a JSON object); fix it or move it away")
    return prov


def _utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _git(*args) -> str | None:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_provenance() -> dict:
    """Versions of attnlab and its main dependencies, git commit (``"unknown"`` outside a repository)."""
    import torch

    from . import __version__

    commit = _git("rev-parse", "HEAD") or "unknown"
    status = _git("status", "--porcelain", "--untracked-files=no", "--", "attnlab") if commit != "unknown" else None
    return dict(attnlab_version=__version__, git_commit=commit,
                git_dirty=None if status is None else bool(status),
                python=platform.python_version(), numpy=np.__version__, torch=torch.__version__,
                platform=platform.platform(), cpu_count=os.cpu_count())


# ----------------------------------------------------------------------------- sweeps

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
        Specs that raised (see :class:`SweepError`).
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

    def to_dict(self) -> dict:
        return dict(path=self.path, provenance=self.provenance, total=self.total, skipped=self.skipped,
                    completed=self.completed, failed=self.failed, seconds=round(self.seconds, 2))


def run_sweep(specs: Sequence[Mapping], path, *, runner: Callable = run_simulation_spec,
              executor: cf.Executor | None = None, workers: int = 1, progress: bool = True,
              description: str = "", notes: str = "", command: str | None = None) -> SweepReport:
    """Run the specs not yet in ``path`` on ``executor``, saving rows as runs finish.

    Parameters
    ----------
    specs : sequence of dict
        Run specifications (e.g. from :func:`grid` of :func:`simulation_spec`).
    path : str or Path
        The CSV; resumed from if it exists. Provenance in ``path.with_suffix(".json")``.
    runner : callable
        ``runner(spec) -> dict | list[dict]``, picklable for process pools.
    executor : concurrent.futures.Executor, optional
        Where to run: default a fresh :func:`make_executor` of ``workers``
        processes (shut down afterwards); a given executor (a process or thread
        pool, ``distributed.Client.get_executor()``) is used and left running.
    workers : int
        Size of the default process pool.
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
        If ``specs`` is empty or ``workers < 1``.
    SweepError
        If runs raised. Runs not yet started are cancelled, runs in flight
        are awaited and saved, then the error lists the failures; run the
        sweep again to retry only what is missing. Also if another process
        is running a sweep on ``path`` (the message names the lock file).
    CorruptResultsError
        (a ``ValueError``) If ``path`` or its provenance is damaged (see
        :func:`read_columns`); nothing is run and the files are left as they are.
    """
    return run_sweeps([Sweep(list(specs), path, runner, description, notes)], executor=executor,
                      workers=workers, progress=progress, command=command)[0]


def run_sweeps(sweeps: Sequence[Sweep], *, executor: cf.Executor | None = None, workers: int = 1,
               progress: bool = True, command: str | None = None) -> list[SweepReport]:
    """Run several sweeps (each its own CSV) on one executor, under one progress bar.

    Tasks are submitted in the order of ``sweeps`` then of their specs, so put
    long tasks first. See :func:`run_sweep` for the parameters and errors.

    Returns
    -------
    list of SweepReport, one per sweep
    """
    if not sweeps:
        raise ValueError("sweeps must contain at least one sweep")
    workers = check_int("workers", workers, 1)
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
    started = _utc_now()
    with contextlib.ExitStack() as locks:
        for sw in sweeps:  # lock before reading, so that the rows read are the rows we extend
            locks.enter_context(_sweep_lock(sw.path))
        todo, skipped = [], []
        for sw, ks in zip(sweeps, keys):
            sw.columns, sw.rows = _read_results(sw.path)
            _reap_sessions(sw)
            done = {r.get("run_id") for r in sw.rows}
            pending = [(sw, k, s) for k, s in zip(ks, sw.specs) if k not in done]
            todo += pending
            skipped.append(len(sw.specs) - len(pending))
        total = sum(len(sw.specs) for sw in sweeps)
        return _run_pending(sweeps, todo, skipped, total, executor, workers, progress, command, started, t0)


def _lock_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".lock")


@contextlib.contextmanager
def _sweep_lock(path: Path):
    """Exclusive lock on a sweep's CSV, held while a process runs the sweep.

    A ``filelock.FileLock`` on ``NAME.csv.lock`` next to the CSV (so every
    process that writes the CSV meets the same lock, whatever its temporary
    directory; across machines too where the file system supports locks).
    The lock file is left in place: deleting it on release would let two
    processes each hold "the" lock, on two different files.

    Raises
    ------
    SweepError
        If another process holds the lock (the message names the lock file).
    """
    lock_file = _lock_path(path)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(lock_file, timeout=0)
    try:
        lock.acquire()
    except LockTimeout:
        raise SweepError(f"another process is running the sweep of {path} (lock {lock_file}); wait for it to "
                         "finish, or write elsewhere (--out)") from None
    try:
        yield
    finally:
        lock.release()


def _save_rows(sw: Sweep) -> None:
    """Rewrite the CSV with the rows on disk plus this session's rows (merged by ``run_id``).

    Called with the sweep's lock held. Re-reading the file first means a row in
    the file is never dropped, even if some other writer (one that did not take
    the lock) added rows since this session read it.
    """
    header, on_disk = _read_results(sw.path)
    have = {r["run_id"] for r in on_disk}
    rows = on_disk + [r for r in sw.rows if r["run_id"] not in have]
    columns = header + [c for c in sw.columns if c not in header]
    write_csv_atomic(sw.path, rows, columns)
    sw.rows, sw.columns = rows, columns


def _run_pending(sweeps, todo, skipped, total, executor, workers, progress, command, started, t0):
    from tqdm.auto import tqdm

    sessions = [_start_session(sw, command, started, executor, workers, len(sw.specs), len(sw.specs) - k)
                for sw, k in zip(sweeps, skipped)]
    completed = [0] * len(sweeps)
    failures: list[tuple[Sweep, dict, BaseException]] = []
    index = {id(sw): i for i, sw in enumerate(sweeps)}
    status = "complete"

    def save(i):
        sw = sweeps[i]
        _save_rows(sw)
        _update_session(sw, sessions[i], completed[i], "running", t0)

    own = executor is None and bool(todo)
    if own:
        executor = make_executor(workers)
    bar = tqdm(total=total, initial=total - len(todo), disable=not progress, unit="run",
               desc=", ".join(Path(sw.path).stem for sw in sweeps)[:40])
    futures = {}
    try:
        for sw, key, spec in todo:
            futures[executor.submit(sw.runner, spec)] = (sw, key, spec)
        for fut in cf.as_completed(futures):
            if fut.cancelled():
                continue
            sw, key, spec = futures[fut]
            i = index[id(sw)]
            exc = fut.exception()
            if exc is not None:
                if not failures:
                    for other in futures:  # stop what has not started; in-flight runs finish and are saved
                        other.cancel()
                failures.append((sw, spec, exc))
                continue
            out = fut.result()
            for row in (out if isinstance(out, list) else [out]):
                row = {"run_id": key, **row}
                sw.columns += [c for c in row if c not in sw.columns]
                sw.rows.append(row)
            completed[i] += 1
            save(i)
            bar.update(1)
    except BaseException:
        status = "interrupted"
        for fut in futures:
            fut.cancel()
        raise
    finally:
        bar.close()
        if own:
            if status == "interrupted":  # do not leave worker processes computing orphaned runs
                for proc in list(getattr(executor, "_processes", {}).values()):
                    proc.terminate()
            executor.shutdown(wait=status != "interrupted", cancel_futures=True)
        if failures and status != "interrupted":
            status = "failed"
        for i, sw in enumerate(sweeps):
            st = status if (status != "failed" or any(f[0] is sw for f in failures)) else "complete"
            _update_session(sw, sessions[i], completed[i], st, t0)
    seconds = time.perf_counter() - t0
    reports = [SweepReport(path=str(sw.path), provenance=str(provenance_path(sw.path)), total=len(sw.specs),
                           skipped=skipped[i], completed=completed[i],
                           failed=sum(f[0] is sw for f in failures), seconds=seconds)
               for i, sw in enumerate(sweeps)]
    if failures:
        sw, spec, exc = failures[0]
        raise SweepError(f"{len(failures)} run(s) failed; finished runs are saved, run the sweep again to retry "
                         f"the rest. First failure in {sw.path.name}, spec {json.dumps(spec)}: "
                         f"{type(exc).__name__}: {exc}") from exc
    return reports


def _executor_name(executor, workers) -> str:
    if executor is None:
        return f"ProcessPoolExecutor(max_workers={workers})"
    return type(executor).__module__ + "." + type(executor).__name__


#: Code-provenance keys, recorded per session; the file's top level repeats those of the last
#: session that computed rows.
CODE_KEYS = ("attnlab_version", "git_commit", "git_dirty", "python", "numpy", "torch", "platform", "cpu_count")


def _start_session(sw: Sweep, command, started, executor, workers, n_specs, n_pending) -> dict | None:
    """Append a session to the provenance, or ``None`` if nothing is to be run (the files stay untouched)."""
    if n_pending == 0:
        return None
    session = dict(session_id=uuid.uuid4().hex[:12], command=command, started_utc=started, finished_utc=None,
                   runtime_seconds=0.0, executor=_executor_name(executor, workers), runs_in_sweep=n_specs,
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
    """Start time of process ``pid`` (seconds since the epoch; ``None`` if unknown: no psutil, or no such process)."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _session_alive(session: Mapping) -> bool | None:
    """Whether the process that recorded ``session`` still runs: ``None`` if that cannot be checked
    (another host, or a session recorded before pids were)."""
    pid, host = session.get("pid"), session.get("host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return None
    if pid == os.getpid():
        return False  # this process is here, not running that session (a pid reused since)
    try:
        import psutil
    except ImportError:
        psutil = None
    if psutil is not None:
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
    if os.name != "posix":
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
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


def _summarise_provenance(prov: dict, rows: list, specs: list | None = None) -> dict:
    """Fill the top-level summary of a provenance dict from its sessions and the CSV rows."""
    sessions = prov.get("sessions", [])
    producing = [s for s in sessions if s.get("runs_completed")] or sessions
    if producing:
        prov.update({k: producing[-1][k] for k in CODE_KEYS if k in producing[-1]})
        last = producing[-1]
        prov["date"] = last.get("finished_utc") or last.get("started_utc")
    prov["n_rows"] = len(rows)
    prov["seeds"] = sorted({int(float(r["seed"])) for r in rows if r.get("seed") not in (None, "")})
    if specs is not None:
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
