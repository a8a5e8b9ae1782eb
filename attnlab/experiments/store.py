"""The tidy results table on disk: strict reading, atomic writes, the lock, the provenance sidecar.

A sweep's results are one CSV, ``NAME.csv``: one row per run, every parameter
a column, plus a ``run_id`` column (:func:`attnlab.experiments.runners.spec_key`
of the run's spec). Next to it:

* ``NAME.json``, the provenance sidecar (:func:`read_provenance`; written by
  :mod:`attnlab.experiments.sweeps`): code versions, sessions, seeds, notes;
* ``NAME.csv.lock``, the lock (:func:`sweep_lock`) that a process running a
  sweep on the CSV holds (``filelock``; the same file for every process,
  whatever its temporary directory).

Writes are atomic (:func:`write_csv_atomic`, :func:`write_json_atomic`,
:func:`save_figure_atomic` for the figures): the
file is written to a temporary file in the same directory that then replaces
it with ``os.replace`` (atomic on POSIX and Windows), so a reader, or a crash
at any moment, sees either the previous or the next complete file.

Reading is strict (:func:`read_columns`, :func:`read_rows`): a file that is
not UTF-8, is cut off, has lost its header, has a row with too few or too many
fields, a value that does not parse, or a row that breaks its table's declared
schema (:mod:`attnlab.experiments.schema`: ranges, allowed values, run ids, no run
twice), or that is not a regular file (a FIFO would block), raises
:class:`CorruptResultsError` (a ``ValueError``) naming the file, the line and the
column. A damaged row is never counted as finished work, nor silently dropped.

Where the cached tables are
---------------------------
``attnlab reproduce`` writes to :data:`RESULTS_DIR`. The repository's
``results/`` and ``book/_data/`` tables (CSV and JSON) are also the package data
of attnlab (``pyproject.toml`` maps them into the wheel as ``attnlab/cached/``
and ``attnlab/cached/book/``: one copy, no second hand-kept one), so an
installed attnlab, e.g. on Colab, reads the same cached tables as the
repository: :func:`cached_path` looks in :data:`RESULTS_DIR` first, then in the
installed package.
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import re
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np
from filelock import FileLock
from filelock import Timeout as LockTimeout

from .runners import COLUMN_KINDS, plain
from .schema import TableError, check_table

__all__ = ["RESULTS_DIR", "SOURCE_ROOT", "cached_path", "book_data_path", "CorruptResultsError", "SweepError",
           "read_columns", "read_rows", "write_csv_atomic", "write_json_atomic", "save_figure_atomic",
           "provenance_path", "read_provenance", "lock_path", "sweep_lock"]



def _source_root() -> Path | None:
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "results").is_dir() else None


#: The repository root when attnlab is imported from a source checkout (an editable install, or
#: ``PYTHONPATH``), else ``None`` (an installed wheel).
SOURCE_ROOT = _source_root()

#: Where ``attnlab reproduce`` writes and the loaders look first: ``$ATTNLAB_RESULTS``, else the
#: repository's ``results/`` in a source checkout, else ``results/`` in the working directory.
RESULTS_DIR = Path(os.environ.get("ATTNLAB_RESULTS") or (SOURCE_ROOT / "results" if SOURCE_ROOT else "results"))


def _packaged(*parts: str) -> Path | None:
    """A file of the cached tables installed with attnlab (``attnlab/cached/...``), or ``None``."""
    with contextlib.suppress(ModuleNotFoundError, FileNotFoundError, NotADirectoryError):
        entry = resources.files("attnlab").joinpath("cached", *parts)
        if entry.is_file():
            return Path(str(entry))  # pip installs unpacked: a file on disk
    return None


def cached_path(filename: str, results_dir=None) -> Path:
    """Where the cached table ``filename`` (e.g. ``"overlaps-vs-alpha.csv"``) is read from.

    ``results_dir / filename`` if a folder is given; else :data:`RESULTS_DIR` ``/ filename``
    if that exists, else the copy installed with attnlab if there is one, else
    :data:`RESULTS_DIR` ``/ filename`` (which does not exist: the loaders return ``None``).
    """
    if results_dir is not None:
        return Path(results_dir) / filename
    local = RESULTS_DIR / filename
    return local if local.exists() else (_packaged(filename) or local)


def book_data_path(filename: str) -> Path:
    """Where the book's small table ``filename`` (``book/_data/``, e.g. ``"se_curves.csv"``) is read from:
    the repository's ``book/_data/`` in a source checkout, else the copy installed with attnlab."""
    local = SOURCE_ROOT / "book" / "_data" / filename if SOURCE_ROOT else None
    if local is not None and local.exists():
        return local
    return _packaged("book", filename) or Path("book", "_data", filename)


class SweepError(RuntimeError):
    """A sweep could not run or some of its runs raised (the finished rows are saved, the failures listed)."""


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


def _atomic_write_text(path: Path, write: Callable, binary: bool = False) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, _file_mode())  # mkstemp creates 0600; give the file the usual permissions
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", newline="", encoding="utf-8")) as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and str(path) not in str(exc):  # e.g. a full disk: name the file
            raise type(exc)(exc.errno, f"could not write {path}: {exc.strerror or exc}") from None
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


def save_figure_atomic(fig, path, **savefig_kwargs) -> None:
    """``fig.savefig(path, ...)`` through a temporary file and ``os.replace``: an interrupt (Ctrl-C,
    SIGTERM) or a full disk while the figure is drawn leaves the previous file as it was (never a
    truncated image), and no temporary file. The format is the suffix of ``path`` (else PNG); a
    ``path`` that is not a file name (a file object) is passed to ``savefig`` as it is."""
    if not isinstance(path, (str, os.PathLike)):
        fig.savefig(path, **savefig_kwargs)
        return
    fmt = savefig_kwargs.pop("format", None) or (Path(path).suffix.lstrip(".").lower() or "png")
    _atomic_write_text(Path(path), lambda fh: fig.savefig(fh, format=fmt, **savefig_kwargs), binary=True)


def write_json_atomic(path, obj) -> None:
    """Write ``obj`` as indented JSON via a temporary file and ``os.replace``."""
    _atomic_write_text(Path(path), lambda fh: (json.dump(obj, fh, indent=1, default=plain), fh.write("\n")))


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


_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_INT = re.compile(r"[+-]?\d+")
#: The advice that ends a message about a damaged row (its parsing, or its schema).
FIX_ADVICE = "fix or delete that line (its run is then redone), or move the file away"


@dataclass
class _Table:
    header: list
    rows: list       # lists of str, len(header) each
    lines: list      # line number of each row (where it ends)
    kinds: dict      # column -> "text", "bool" or "number"


def _column_kind(name: str, values: list) -> str:
    if name in COLUMN_KINDS:
        return COLUMN_KINDS[name]
    filled = [v for v in values if v != ""]
    if not filled:
        return "number"  # empty or all missing: NaN
    if 2 * sum(v in ("True", "False") for v in filled) > len(filled):
        return "bool"
    if 2 * sum(_NUMBER.fullmatch(v) is not None for v in filled) > len(filled):
        return "number"
    return "text"


def _read_bytes(path: Path) -> bytes:
    """The bytes of ``path``, which must be a regular file (a FIFO would block the read forever,
    a device could be endless): else :class:`CorruptResultsError`."""
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # (opening a FIFO does not wait)
    except IsADirectoryError:
        raise CorruptResultsError(path, None, "a folder, not a file; move it away") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            what = "a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else "a device or socket"
            raise CorruptResultsError(path, None, f"{what}, not a regular file; move it away")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def _read_table(path: Path, key: str | None) -> _Table:
    """Parse a CSV strictly (see :func:`read_columns`); raises :class:`CorruptResultsError`."""
    data = _read_bytes(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptResultsError(path, data.count(b"\n", 0, exc.start) + 1,
                                  f"not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}): not a "
                                  f"results CSV, or a damaged one; {FIX_ADVICE}") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark (a spreadsheet's "CSV UTF-8")
    if not text:
        raise CorruptResultsError(path, None, "the file is empty (no header line); delete it")
    if not text.endswith("\n"):  # attnlab ends every row with a line break: the file was cut off
        raise CorruptResultsError(path, text.count("\n") + 1,
                                  f"the last line has no line break: the file was cut off in this row; {FIX_ADVICE}")
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
                                          f"{len(header)}: the row is damaged or cut off; {FIX_ADVICE}")
            rows.append(fields)
            lines.append(reader.line_num)
    except csv.Error as exc:
        raise CorruptResultsError(path, reader.line_num, f"not valid CSV ({exc}); {FIX_ADVICE}") from None
    kinds = {}
    for j, name in enumerate(header):
        values = [r[j] for r in rows]
        kinds[name] = kind = _column_kind(name, values)
        for v, line in zip(values, lines):
            if name == key and v == "":
                raise CorruptResultsError(path, line, f"empty {key}; {FIX_ADVICE}")
            if v == "" or kind == "text":
                continue
            if kind == "bool" and v not in ("True", "False"):
                raise CorruptResultsError(path, line, f"column {name!r} holds True/False, not {v!r}; {FIX_ADVICE}")
            if kind == "number" and _NUMBER.fullmatch(v) is None:
                raise CorruptResultsError(path, line, f"column {name!r} holds numbers, not {v!r}; {FIX_ADVICE}")
    try:
        check_table(header, rows, lines)  # the table's declared schema (experiments.schema)
    except TableError as exc:
        raise CorruptResultsError(path, exc.line, exc.problem + (f"; {FIX_ADVICE}" if exc.row else "")) from None
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
    if values and all(_INT.fullmatch(v) and len(v.lstrip("+-")) <= 18 for v in values):
        return np.array([int(v) for v in values], dtype=np.int64)  # (a longer integer: float64, not OverflowError)
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
    boolean, the parameters and results of :func:`attnlab.experiments.runners.run_simulation_spec` are
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
        for a sweep's results (as :func:`attnlab.experiments.figures.load_results` reads them).

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
        (a ``ValueError``) If the sidecar is not a regular file of UTF-8 JSON holding an
        object whose ``sessions`` (if any) is a list of objects; the message names the
        file and the line.
    """
    p = provenance_path(csv_path)
    if not p.exists():
        return None
    data = _read_bytes(p)
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
    sessions = prov.get("sessions", [])
    if not isinstance(sessions, list) or not all(isinstance(x, dict) for x in sessions):
        raise CorruptResultsError(p, None, "'sessions' is not a list of JSON objects: a damaged provenance file; "
                                  "fix it or move it away")
    return prov


def lock_path(path) -> Path:
    """The lock file ``NAME.csv.lock`` of a sweep's CSV ``NAME.csv``."""
    return Path(path).with_name(Path(path).name + ".lock")


@contextlib.contextmanager
def sweep_lock(path):
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
    lock_file = lock_path(path)
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
