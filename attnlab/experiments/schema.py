"""The declared schema of each results table: what every loader checks before a row is trusted.

A table with valid CSV syntax can still hold a value no run produces (``theta = 1e9``,
``alpha = -1.5``, ``d = 40.5``, ``branch = nonsense``), a ``run_id`` of other parameters,
or one run twice. :func:`check_table` is called by the strict reader of
:mod:`attnlab.experiments.store` (so by ``read_rows``, ``read_columns``, ``load_results``,
``describe_results``, ``load_book_data``, the explorer grid's loader and a sweep's resume):
a row that fails raises :class:`~attnlab.experiments.store.CorruptResultsError` naming the
file, the line and the column (from the :class:`TableError` raised here), and a resume never
counts it as a finished run.

Tables (chosen by their header):

* a **simulation** table (``run_id`` and ``d``): :data:`SIMULATION`; the ``run_id`` is
  recomputed from the row's parameters (every column but the results,
  :data:`~attnlab.experiments.runners.SIMULATION_RESULT_COLUMNS`), one row per ``run_id``;
* a **state-evolution** table (``run_id`` and ``kind``): :data:`THEORY`; a ``se-curve`` task
  is one row per ``alpha`` (its ``run_id`` recomputed from its rows' ``alpha`` values in
  order and the model's record; no ``alpha`` twice), a ``transition`` task one row;
* the book's small tables (``book/_data/se_curves*.csv``, ``phase_diagram.csv``; no
  ``run_id``): the columns they share with the above, by the same rules.

A column missing from the schema is accepted as the generic reader types it (a newer
attnlab's extra output); a declared column missing from the header is an error only where
the table needs it (:data:`REQUIRED`). Bounds are sanity bounds, not physics: they are far
outside any value attnlab writes (the largest ``|m|``, ``|theta|``, ``qnorm`` in the shipped
tables are below 1.3) and reject what cannot be a result. The schema is a small table of
declarations rather than a pandera or pydantic model: the checks are per column on the
strings the strict reader has already parsed (with their line numbers), plus two cross-row
rules (the ``run_id`` and duplicate keys) that those libraries would need custom code for.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..params import BRANCHES, INITS, LAM_MAX, MAX_STEPS, MAX_TOLERANCE, METHODS, MINIMIZERS, SIGMA_MAX, TEACHERS
from .runners import SIMULATION_RESULT_COLUMNS, spec_key

__all__ = ["Column", "TableError", "SIMULATION", "THEORY", "BOOK", "REQUIRED", "schema_of", "check_table"]

#: Largest ``|value|`` of an overlap (``m``, ``theta``, ``qnorm``) or an error (``eps_*``) accepted.
OVERLAP_BOUND = 1e3


class TableError(ValueError):
    """A row (``line``, 1-based) or the header (``line`` 1, ``row`` false) breaks the schema;
    :mod:`attnlab.experiments.store` turns it into a ``CorruptResultsError`` naming the file."""

    def __init__(self, line: int, problem: str, row: bool = True):
        self.line, self.problem, self.row = line, problem, row
        super().__init__(f"line {line}: {problem}")


@dataclass(frozen=True)
class Column:
    """One column's rule.

    Attributes
    ----------
    kind : {"number", "int", "bool", "text"}
    lo, hi : float or None
        Inclusive bounds of a number (``None``: unbounded on that side); a number must be
        finite unless ``nan`` is true.
    allowed : tuple of str or None
        The values a text column may hold.
    nan : bool
        Whether NaN (or an empty field) is accepted, e.g. a state-evolution point that did not
        converge.
    """

    kind: str = "number"
    lo: float | None = None
    hi: float | None = None
    allowed: tuple | None = None
    nan: bool = False

    def problem(self, text: str) -> str | None:
        """What is wrong with the field ``text`` (``None`` if it is valid)."""
        if self.kind == "text":
            if self.allowed is not None and text not in self.allowed:
                return f"{text!r} is not one of {', '.join(self.allowed)}"
            return None
        if text == "":
            return None if self.nan else "empty"
        if self.kind == "bool":
            return None if text in ("True", "False") else f"{text!r} is not True or False"
        if self.kind == "int":
            stripped = text.lstrip("+-")
            if not stripped.isdigit():
                return f"{text!r} is not an integer"
            if len(stripped) > 18:
                return f"{text!r} is out of range"
            value = float(int(text))
        else:
            try:
                value = float(text)
            except ValueError:
                return f"{text!r} is not a number"
            if math.isnan(value):
                return None if self.nan else "NaN"
            if math.isinf(value):
                return f"{text!r} is not finite"
        if (self.lo is not None and value < self.lo) or (self.hi is not None and value > self.hi):
            lo = "-inf" if self.lo is None else f"{self.lo:g}"
            hi = "inf" if self.hi is None else f"{self.hi:g}"
            return f"{text} is outside [{lo}, {hi}]"
        return None


_POS = Column(lo=1e-300)
_OVERLAP = Column(lo=-OVERLAP_BOUND, hi=OVERLAP_BOUND)
_ERROR = Column(lo=0.0, hi=OVERLAP_BOUND)
_SECONDS = Column(lo=0.0)
_MODEL = {"omega": Column(lo=0.0, hi=1.0), "sigma": Column(lo=1e-300, hi=SIGMA_MAX),
          "lambda": Column(lo=0.0, hi=LAM_MAX),
          **dict.fromkeys(("A11", "A12", "A21", "A22"), Column(lo=0.0, hi=1.0))}

#: The columns of a simulation table (:func:`attnlab.experiments.runners.run_simulation_spec`).
SIMULATION = {
    "run_id": Column("text"), "d": Column("int", 2, 10 ** 7), "alpha": Column(lo=1e-300, hi=1e6), **_MODEL,
    "rank": Column("int", 1, 100), "init": Column("text", allowed=INITS), "method": Column("text", allowed=METHODS),
    "seed": Column("int", 0, 2 ** 63 - 1), "steps": Column("int", 1, MAX_STEPS), "lr": _POS,
    "n_test": Column("int", 2, 10 ** 9), "teacher": Column("text", allowed=TEACHERS),
    "n": Column("int", 1, 10 ** 12), "m": _OVERLAP, "theta": _OVERLAP, "qnorm": Column(lo=0.0, hi=OVERLAP_BOUND),
    "eps_t": _ERROR, "eps_g": _ERROR, "eps_g_sem": _ERROR,
    "eps_g_linear": _ERROR, "eps_g_linear_sem": _ERROR,
    "converged": Column("bool"), "steps_taken": Column("int", 0, MAX_STEPS + 10 ** 6),
    "grad_rms": Column(lo=0.0), "seconds": _SECONDS, "cpu_seconds": _SECONDS,
}

_MAYBE = dict(nan=True)
#: The columns of a state-evolution table (:func:`attnlab.experiments.runners.run_theory_spec`); the
#: results of a point that did not converge may be NaN.
THEORY = {
    "run_id": Column("text"), "kind": Column("text", allowed=("se-curve", "transition")), **_MODEL,
    "minimizer": Column("text", allowed=MINIMIZERS), "branch": Column("text", allowed=BRANCHES + ("",)),
    "alpha": Column(lo=1e-300, hi=1e6, nan=True),
    **{k: Column(lo=-OVERLAP_BOUND, hi=OVERLAP_BOUND, nan=True) for k in ("m", "theta")},
    **{k: Column(lo=0.0, hi=OVERLAP_BOUND, nan=True) for k in ("qnorm", "eps_t", "eps_g")},
    "eps_g_linear": Column(lo=0.0, hi=OVERLAP_BOUND), "converged": Column("bool", nan=True),
    "residual": Column(lo=0.0, nan=True), "iterations": Column("int", 0, 10 ** 9, nan=True),
    "task_seconds": _SECONDS, "alpha_c": Column(lo=1e-300, hi=1e6, **_MAYBE),
    "alpha_l": Column(lo=1e-300, hi=1e6, **_MAYBE), "xtol": Column(lo=1e-300, hi=MAX_TOLERANCE, **_MAYBE),
    "alpha_max": Column(lo=1e-300, hi=1e6, **_MAYBE),
}

#: The book's small tables (``book/_data``): curves (a branch and an alpha in every row) and thresholds.
BOOK = {**{k: v for k, v in THEORY.items() if k not in ("run_id", "kind")},
        "branch": Column("text", allowed=BRANCHES), "alpha": Column(lo=1e-300, hi=1e6), "converged": Column("bool"),
        "xtol": Column(lo=1e-300, hi=MAX_TOLERANCE),
        "alpha_c_global": Column(lo=1e-300, hi=1e6, nan=True), "alpha_l_global": Column(lo=1e-300, hi=1e6, nan=True)}

#: Columns that hold a number in every converged row of a curve (NaN only where a point failed).
CONVERGED_FINITE = ("alpha", "m", "theta", "qnorm", "eps_t", "eps_g", "residual", "iterations")

#: Columns a table must have (by its kind of rows).
REQUIRED = {"simulation": ("run_id", "d", "alpha", "init", "method", "seed", "m", "theta", "converged"),
            "se-curve": ("run_id", "kind", "branch", "alpha", "m", "theta", "converged"),
            "transition": ("run_id", "kind", "alpha_c", "alpha_l", "xtol", "alpha_max")}

_RECORD = ("omega", "sigma", "lambda", "A11", "A12", "A21", "A22")


def schema_of(header) -> tuple[str, dict] | None:
    """``(name, columns)`` of the table with ``header``, or ``None`` for a table attnlab does not know."""
    if "run_id" in header and "kind" in header:
        return "theory", THEORY
    if "run_id" in header and "d" in header:
        return "simulation", SIMULATION
    if "alpha_c" in header or ("branch" in header and "alpha" in header):
        return "book", BOOK
    return None


def _value(text: str):
    """A field as the spec held it (``spec_key`` compares numbers by value)."""
    try:
        number = float(text)
    except ValueError:
        return text
    return int(text) if text.lstrip("+-").isdigit() else number


def check_table(header: list, rows: list, lines: list) -> None:
    """Check a parsed table against its schema (see the module docstring).

    Parameters
    ----------
    header : list of str
    rows : list of list of str
        The fields of each row.
    lines : list of int
        The line of each row.

    Raises
    ------
    TableError
        At the first row that fails: its line, the column and the rule.
    """
    found = schema_of(header)
    if found is None:
        return
    name, columns = found
    col = {c: j for j, c in enumerate(header)}
    needed = REQUIRED.get(name, ())
    if name == "theory":
        kinds = {r[col["kind"]] for r in rows}
        needed = tuple(dict.fromkeys(c for k in ("se-curve", "transition") if k in kinds for c in REQUIRED[k]))
    missing = [c for c in needed if c not in col]
    if missing:
        raise TableError(1, f"the header lacks the column{'s' * (len(missing) > 1)} "
                         f"{', '.join(map(repr, missing))} of a {name} table", row=False)
    checks = [(j, c, columns[c]) for j, c in enumerate(header) if c in columns]
    for fields, line in zip(rows, lines):
        for j, c, rule in checks:
            problem = rule.problem(fields[j])
            if problem is not None:
                raise TableError(line, f"column {c!r}: {problem}")
        if name == "theory":
            kind = fields[col["kind"]]
            for c in REQUIRED[kind]:
                if fields[col[c]] == "" and c not in ("alpha_c", "alpha_l"):
                    raise TableError(line, f"column {c!r}: empty in a {kind} row")
        if "converged" in col and fields[col["converged"]] == "True":
            for c in CONVERGED_FINITE:
                if c in col and fields[col[c]].lower() in ("", "nan"):
                    raise TableError(line, f"column {c!r}: NaN in a converged row")
    if name == "simulation":
        _check_simulation_ids(header, rows, lines)
    elif name == "theory":
        _check_theory_ids(col, rows, lines)


def _check_simulation_ids(header, rows, lines) -> None:
    spec_columns = [(j, c) for j, c in enumerate(header) if c != "run_id" and c not in SIMULATION_RESULT_COLUMNS]
    at = header.index("run_id")
    seen = {}
    for fields, line in zip(rows, lines):
        rid = fields[at]
        if rid in seen:
            raise TableError(line, f"column 'run_id': {rid} is also on line {seen[rid]} (one run "
                                      f"twice)")
        seen[rid] = line
        if spec_key({c: _value(fields[j]) for j, c in spec_columns}) != rid:
            raise TableError(line, f"column 'run_id': {rid} is not the id of this row's parameters "
                                      f"(a row of another run, or edited)")


def _check_theory_ids(col, rows, lines) -> None:
    tasks: dict = {}
    for fields, line in zip(rows, lines):
        tasks.setdefault(fields[col["run_id"]], []).append((fields, line))
    for rid, members in tasks.items():
        first, line = members[0]
        kind = first[col["kind"]]
        base = {c: _value(first[col[c]]) for c in _RECORD if c in col}
        for fields, other in members[1:]:
            for c in ("kind", "branch", "minimizer", *_RECORD):
                if c in col and fields[col[c]] != first[col[c]]:
                    raise TableError(other, f"column {c!r}: {fields[col[c]]!r} differs from line "
                                              f"{line} of the same run_id {rid}")
        if kind == "se-curve":
            alphas = [f[col["alpha"]] for f, _ in members]
            if len(set(map(float, alphas))) != len(alphas):
                dup = next(ln for (f, ln), a in zip(members, alphas) if alphas.count(a) > 1 and ln != line)
                raise TableError(dup, f"column 'alpha': one alpha twice in the task {rid}")
            spec = dict(kind=kind, branch=first[col["branch"]], alphas=[float(a) for a in alphas], **base)
        else:
            if len(members) > 1:
                raise TableError(members[1][1], f"column 'run_id': {rid} is also on line {line} "
                                          f"(one transition twice)")
            spec = dict(kind=kind, alpha_max=_value(first[col["alpha_max"]]), xtol=_value(first[col["xtol"]]), **base)
        minimizer = first[col["minimizer"]] if "minimizer" in col else None
        if rid not in (spec_key(spec), spec_key(dict(spec, minimizer=minimizer))):
            raise TableError(line, f"column 'run_id': {rid} is not the id of this task's parameters "
                                      f"(a row missing, rows of another task, or edited)")
