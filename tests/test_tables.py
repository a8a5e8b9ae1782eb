"""Tables that cannot lie: every loader checks each table against its declared schema.

A copy of a shipped table with one field changed (a value no run produces, a run_id of
other parameters, one run twice) must fail every loader with an error naming the file, the
line and the column, and a resume must not count the row as finished work.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from attnlab.experiments import figures
from attnlab.experiments.figures import describe_results, load_book_data, load_results
from attnlab.experiments.runners import spec_key
from attnlab.experiments.store import CorruptResultsError, read_columns, read_rows
from attnlab.experiments.sweeps import run_sweep
from attnlab.explorer_grid import load_explorer_grid

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"


def _edit(src: Path, dst: Path, line: int, column: str, value: str) -> Path:
    """``src`` copied to ``dst`` with the field ``column`` of line ``line`` (1-based) set to ``value``."""
    lines = src.read_text().splitlines()
    header = lines[0].split(",")
    fields = lines[line - 1].split(",")
    fields[header.index(column)] = value
    lines[line - 1] = ",".join(fields)
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text("\n".join(lines) + "\n")
    return dst


# (column, value, what the message says) for a simulation table
SIMULATION_CASES = [
    ("theta", "1e9", "outside"), ("theta", "nan", "NaN"), ("alpha", "-1.5", "outside"), ("alpha", "inf", "finite"),
    ("d", "40.5", "not an integer"), ("seed", "-7", "outside"), ("init", "nonsense", "not one of"),
    ("converged", "maybe", "True/False"), ("d", "1" * 30, "out of range"), ("m", "", "empty"),
]


@pytest.mark.parametrize("column,value,says", SIMULATION_CASES)
def test_a_simulation_table_with_a_wrong_value_fails_every_loader(tmp_path, column, value, says):
    path = _edit(RESULTS / "finite-size.csv", tmp_path / "finite-size.csv", 5, column, value)
    pattern = rf"finite-size\.csv, line 5: column '{column}':? .*{re.escape(says)}"
    for load in (lambda: read_rows(path), lambda: read_rows(path, key="run_id"), lambda: read_columns(path),
                 lambda: load_results("finite-size", results_dir=tmp_path),
                 lambda: describe_results("finite-size", results_dir=tmp_path)):
        with pytest.raises(CorruptResultsError, match=pattern):
            load()


def test_a_run_id_of_other_parameters_or_twice_fails(tmp_path):
    src = (RESULTS / "finite-size.csv").read_text().splitlines()
    # the run_id of line 3 on line 5 (the parameters of another run under its id)
    other = src[2].split(",")[0]
    path = _edit(RESULTS / "finite-size.csv", tmp_path / "a" / "finite-size.csv", 5, "run_id", other)
    with pytest.raises(CorruptResultsError, match=r"line 5: column 'run_id': .* also on line 3"):
        read_rows(path)
    # a row whose parameters were edited (alpha) keeps its old id: not the id of its parameters
    path = _edit(RESULTS / "finite-size.csv", tmp_path / "b" / "finite-size.csv", 4, "alpha", "1.25")
    with pytest.raises(CorruptResultsError, match=r"line 4: column 'run_id': .* not the id of this row's"):
        load_results("finite-size", results_dir=path.parent)
    # one run twice, with different values
    dup = src[3].split(",")
    dup[dup.index(dup[src[0].split(",").index("theta")])] = "0.5"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "finite-size.csv").write_text("\n".join(src + [",".join(dup)]) + "\n")
    with pytest.raises(CorruptResultsError, match=rf"line {len(src) + 1}: column 'run_id': .* also on line 4"):
        read_columns(tmp_path / "c" / "finite-size.csv")


@pytest.mark.parametrize("column,value,line", [("branch", "nonsense", 2), ("theta", "1e9", 3), ("alpha", "-1.5", 2),
                                               ("kind", "curve", 2), ("minimizer", "best", 4), ("alpha", "0.5", 3)])
def test_a_state_evolution_table_with_a_wrong_value_fails(tmp_path, column, value, line):
    """(alpha 0.5 on line 3 of a curve whose line 2 has alpha 0.5 too: one alpha twice.)"""
    src = RESULTS / "overlaps-vs-alpha-theory.csv"
    header = src.read_text().splitlines()[0].split(",")
    if (column, value) == ("alpha", "0.5"):
        value = src.read_text().splitlines()[1].split(",")[header.index("alpha")]
    path = _edit(src, tmp_path / "overlaps-vs-alpha-theory.csv", line, column, value)
    with pytest.raises(CorruptResultsError, match=rf"overlaps-vs-alpha-theory\.csv, line \d+: column '"):
        load_results("overlaps-vs-alpha", table="theory", results_dir=tmp_path)
    with pytest.raises(CorruptResultsError, match=rf"line {line}: column '{column}'"):
        read_rows(path)


def test_the_explorer_grid_loader_checks_the_schema(tmp_path):
    path = _edit(RESULTS / "explorer-grid-theory.csv", tmp_path / "grid.csv", 7, "theta", "nan")
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    assert lines[6].split(",")[header.index("converged")] == "True"
    with pytest.raises(CorruptResultsError, match=r"grid\.csv, line 7: column 'theta': NaN in a converged row"):
        load_explorer_grid(path)
    path = _edit(RESULTS / "explorer-grid-theory.csv", tmp_path / "grid2.csv", 9, "omega", "1.5")
    with pytest.raises(CorruptResultsError, match=r"grid2\.csv, line 9: column 'omega': 1.5 is outside \[0, 1\]"):
        load_explorer_grid(path)


def test_the_book_tables_are_checked(tmp_path, monkeypatch):
    for name, column in (("se_curves", "branch"), ("phase_diagram", "alpha_c")):
        value = "nonsense" if column == "branch" else "-2"
        path = _edit(ROOT / "book" / "_data" / f"{name}.csv", tmp_path / f"{name}.csv", 3, column, value)
        monkeypatch.setattr(figures, "book_data_path", lambda filename: tmp_path / filename)
        with pytest.raises(CorruptResultsError, match=rf"{name}\.csv, line 3: column '{column}'"):
            load_book_data(name)
        assert path.exists()


def _fake_run(spec):
    return dict(spec, n=10, m=0.1, theta=0.2, qnorm=0.3, eps_t=0.01, eps_g=0.02, eps_g_sem=0.0, eps_g_linear=0.03,
                eps_g_linear_sem=0.0, converged=True, steps_taken=5, grad_rms=1e-9, seconds=0.1, cpu_seconds=0.1)


def test_a_resume_never_counts_a_row_that_fails_the_schema(tmp_path):
    """A row with theta = 1e9 was counted as finished (runs_skipped 6, runs_completed 0): the
    resume now stops with the file, line and column, and redoes the run once the row is deleted."""
    specs = figures.figure_specs("finite-size", quick=True)[:4]
    path = tmp_path / "t.csv"
    report = run_sweep(specs, path, runner=_fake_run, backend="threading", progress=False)
    assert report.completed == 4
    text = path.read_text().splitlines()
    header = text[0].split(",")
    bad = text[2].split(",")
    bad[header.index("theta")] = "1e9"
    path.write_text("\n".join([text[0], text[1], ",".join(bad), *text[3:]]) + "\n")
    with pytest.raises(CorruptResultsError, match=r"t\.csv, line 3: column 'theta'"):
        run_sweep(specs, path, runner=_fake_run, backend="threading", progress=False)
    path.write_text("\n".join([text[0], text[1], *text[3:]]) + "\n")  # the user deletes the line
    report = run_sweep(specs, path, runner=_fake_run, backend="threading", progress=False)
    assert (report.completed, report.skipped) == (1, 3)
    assert sorted(r["run_id"] for r in read_rows(path)) == sorted(spec_key(s) for s in specs)


def test_the_shipped_tables_pass_their_schema():
    for path in [*sorted(RESULTS.glob("*.csv")), *sorted((ROOT / "book" / "_data").glob("*.csv"))]:
        assert read_columns(path) is not None, path


def test_a_thirty_digit_integer_in_an_unknown_column_is_a_float_not_an_overflow(tmp_path):
    (tmp_path / "x.csv").write_text("label,count\na," + "9" * 30 + "\n")
    cols = read_columns(tmp_path / "x.csv")
    assert cols["count"].dtype == float and np.isclose(cols["count"][0], 1e30)
    shutil.rmtree(tmp_path)
