"""Fuzz of the results tables and the points cache (issue 37): one field, row or byte changed at a time.

Every column of a shipped simulation table, state-evolution table and book table gets each of
:data:`VALUES`; a few structural changes (rows swapped, repeated, a run_id moved) and damaged
cache entries follow. Each case is classified:

* ``clean``: :class:`~attnlab.experiments.store.CorruptResultsError` naming the file and line
  (the cache: the right points with one :class:`~attnlab.safe_cache.CacheWarning`);
* ``accepted``: loaded, and the independent oracle below finds the value plausible (a result
  changed within its range cannot be told from a real one by any schema);
* ``silent_wrong``: loaded though the oracle says no run writes it (a parameter that no longer
  matches its run_id, a non-finite or absurd result in a converged row, an unknown label);
* ``traceback``: any other exception.

The oracle is written apart from the schema (plain rules on what runs produce), so that the
two can disagree. :func:`test_fuzz_table_counts` asserts no traceback and no silent wrong result
and prints the counts (``pytest -s``).
"""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from attnlab.experiments.store import CorruptResultsError, read_columns

ROOT = Path(__file__).resolve().parents[1]
TABLES = [ROOT / "results" / "finite-size.csv", ROOT / "results" / "overlaps-vs-alpha-theory.csv",
          ROOT / "results" / "phase-diagram-theory.csv", ROOT / "book" / "_data" / "se_curves.csv",
          ROOT / "book" / "_data" / "phase_diagram.csv"]
VALUES = ["nan", "inf", "-inf", "-1", "1e9", "-1e9", "0", "1.5", "40.5", "abc", "", "1" * 30, "True", "nonsense",
          "1e-400", "0.3000000001", "2"]
#: Columns whose value is a parameter of the run (part of its run_id) or a label.
PARAMETERS = {"d", "alpha", "omega", "sigma", "lambda", "A11", "A12", "A21", "A22", "rank", "init", "method", "seed",
              "steps", "lr", "n_test", "kind", "branch", "minimizer", "xtol", "alpha_max"}
LABELS = {"init": ("semantic", "positional", "random"), "method": ("gd", "lbfgs", "adam"),
          "branch": ("semantic", "positional"), "minimizer": ("global", "followed"),
          "kind": ("se-curve", "transition"), "converged": ("True", "False")}


def _plausible(column: str, text: str, converged: bool) -> bool:
    """The oracle: could a run of attnlab have written ``text`` in ``column``?"""
    if column in LABELS:
        return text in LABELS[column]
    if text == "":
        return not converged and column in ("m", "theta", "qnorm", "eps_t", "eps_g", "residual", "iterations",
                                            "alpha_c", "alpha_l", "alpha_c_global", "alpha_l_global")
    try:
        value = float(text)
    except ValueError:
        return False
    if math.isnan(value):
        return not converged and column in ("m", "theta", "qnorm", "eps_t", "eps_g", "residual", "alpha_c",
                                            "alpha_l", "alpha_c_global", "alpha_l_global")
    if not math.isfinite(value):
        return False
    if column in ("d", "rank", "seed", "steps", "n_test", "n", "steps_taken", "iterations"):
        return value >= 0 and value == int(value) and value < 1e15
    if column in ("omega", "A11", "A12", "A21", "A22"):
        return 0 <= value <= 1
    if column in ("m", "theta"):  # (an overlap: below 1.3 in every shipped table; a run at extreme
        return abs(value) <= 10 ** 3  # parameters could go further, not to 1e9)
    if column.startswith("eps") or column in ("qnorm", "sigma", "lambda"):
        return 0 <= value <= 10 ** 3
    if column in ("residual", "grad_rms", "lr", "seconds", "cpu_seconds", "task_seconds"):
        return value >= 0
    if column.startswith("alpha") or column in ("xtol",):
        return 0 < value <= 1e6
    return True


def _mutated(src: Path, dst: Path, line: int, column: str, value: str):
    lines = src.read_text().splitlines()
    header = lines[0].split(",")
    fields = lines[line - 1].split(",")
    old = fields[header.index(column)]
    fields[header.index(column)] = value
    lines[line - 1] = ",".join(fields)
    dst.write_text("\n".join(lines) + "\n")
    converged = "converged" in header and fields[header.index("converged")] == "True"
    return old, converged


def _classify(load, column, old, value, converged, header) -> str:
    try:
        load()
    except CorruptResultsError:
        return "clean"
    except Exception as exc:  # noqa: BLE001 (counted)
        return f"traceback {type(exc).__name__}: {exc}"
    if value == old:
        return "accepted"
    same_number = False
    try:
        same_number = float(value) == float(old)
    except ValueError:
        pass
    if column in PARAMETERS and not same_number and "run_id" in header:
        return "silent_wrong"  # a parameter changed under the same run_id (a book table has no ids: a
    # plausible parameter there cannot be told from the real one)
    if column == "run_id" or not _plausible(column, value, converged):
        return "silent_wrong"
    return "accepted"


def _table_cases(tmp_path):
    out = []
    for src in TABLES:
        header = src.read_text().splitlines()[0].split(",")
        for column in header:
            for k, value in enumerate(VALUES):
                dst = tmp_path / f"{len(out)}-{src.name}"
                line = 2 + (k % 3)
                old, converged = _mutated(src, dst, line, column, value)
                out.append((f"{src.name}:{column}={value!r}", _classify(lambda: read_columns(dst), column, old,
                                                                         value, converged, header)))
                dst.unlink()
    return out


def _structural_cases(tmp_path):
    out = []
    for src in TABLES[:3]:
        lines = src.read_text().splitlines()
        ids = [line.split(",")[0] for line in lines]
        j = next(k for k in range(2, len(lines)) if ids[k] != ids[1])  # a row of another run
        swapped = list(lines)
        swapped[1], swapped[j] = (",".join([ids[j]] + lines[1].split(",")[1:]),
                                  ",".join([ids[1]] + lines[j].split(",")[1:]))
        variants = {
            "swap two run_ids": swapped,
            "a row twice": [*lines, lines[1]],
            "a row twice, other value": [*lines, lines[1][:-1] + ("1" if lines[1][-1] != "1" else "2")],
            "header lost": lines[1:],
            "columns swapped in the header": [",".join(reversed(lines[0].split(","))), *lines[1:]],
        }
        for name, content in variants.items():
            dst = tmp_path / src.name
            dst.write_text("\n".join(content) + "\n")
            try:
                read_columns(dst)
                verdict = "silent_wrong"
            except CorruptResultsError:
                verdict = "clean"
            except Exception as exc:  # noqa: BLE001
                verdict = f"traceback {type(exc).__name__}: {exc}"
            out.append((f"{src.name}: {name}", verdict))
    return out


def _cache_cases(tmp_path, monkeypatch):
    """Damaged entries of the points cache: cut off, random, scaled, transposed, pickled, NaN."""
    import pickle
    import warnings

    from attnlab.theory.quadrature import POINTS_SUBFOLDER, QMCRule, _sobol_gaussians, gaussian_points
    monkeypatch.setenv("ATTNLAB_CACHE_DIR", str(tmp_path / "c"))
    rule = QMCRule(log2_points=6, scrambles=1, seed=2)
    right = _sobol_gaussians(6, 1, 2, 6, "")
    gaussian_points.__wrapped__(rule)
    folder = tmp_path / "c" / POINTS_SUBFOLDER
    npy = next(folder.glob("*.npy"))
    good = npy.read_bytes()

    def save(array):
        import io
        buf = io.BytesIO()
        np.save(buf, array)
        return buf.getvalue()

    damages = {"cut off": good[: len(good) // 2], "empty": b"", "random": bytes(range(256)) * 4,
               "scaled 1.05": save(right * 1.05), "transposed": save(np.ascontiguousarray(right.T)),
               "float32": save(right.astype(np.float32)), "NaN": save(np.full_like(right, np.nan)),
               "pickle": pickle.dumps(right), "object array": save(np.array([1, "a"], dtype=object))
               if False else pickle.dumps({"a": 1}), "one bit": good[:-1] + bytes([good[-1] ^ 1])}
    out = []
    for name, content in damages.items():
        npy.write_bytes(content)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                got = gaussian_points.__wrapped__(rule)
                verdict = "clean" if np.array_equal(got, right) and len(caught) == 1 else "silent_wrong"
            except Exception as exc:  # noqa: BLE001
                verdict = f"traceback {type(exc).__name__}: {exc}"
        out.append((f"points cache: {name}", verdict))
        npy.write_bytes(good)
    return out


def test_fuzz_table_counts(tmp_path, monkeypatch, capsys):
    cases = _table_cases(tmp_path) + _structural_cases(tmp_path) + _cache_cases(tmp_path, monkeypatch)
    counts = Counter(v.split(" ")[0] for _, v in cases)
    bad = [f"{name}: {verdict}" for name, verdict in cases if verdict.split(" ")[0] in ("traceback", "silent_wrong")]
    with capsys.disabled():
        print(f"\nfuzz of tables and caches: {len(cases)} cases: {dict(counts)}")
    assert not bad, "\n".join(bad[:40]) + f"\n({len(bad)} in all)"
    assert counts["clean"] > 0.6 * len(cases)
