"""book/_scripts/make_book_cache.py: a cached table names the code it was computed with.

A sweep of hours must not name a commit made while it ran, nor a commit whose files were
edited when it started; a wrong table name gets one line and exit status 2.
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnlab.experiments import sweeps

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "book" / "_scripts" / "make_book_cache.py"


@pytest.fixture
def script(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("make_book_cache", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "OUT", tmp_path)
    return mod


def test_an_unknown_table_is_one_line_and_exit_status_2():
    out = subprocess.run([sys.executable, str(SCRIPT), "spinodal"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1
    assert "unknown table 'spinodal'" in out.stderr and "spinodals_sigma_lambda" in out.stderr


def test_code_provenance_asks_git_about_the_paths_given(monkeypatch):
    calls = []

    def fake_git(*args):
        calls.append(args)
        return "abc123" if args[0] == "rev-parse" else " M book/_scripts/make_book_cache.py"
    monkeypatch.setattr(sweeps, "_git", fake_git)
    prov = sweeps.code_provenance(("attnlab", "book/_scripts"))
    assert prov["git_commit"] == "abc123" and prov["git_dirty"] is True
    assert calls[1][-3:] == ("--", "attnlab", "book/_scripts")
    monkeypatch.setattr(sweeps, "_git", lambda *a: "abc123" if a[0] == "rev-parse" else "")
    assert sweeps.code_provenance()["git_dirty"] is False


def test_a_dirty_tree_is_refused_before_anything_runs(script, monkeypatch, capsys):
    monkeypatch.setattr(script, "code_provenance", lambda paths: dict(git_commit="abc123", git_dirty=True))
    ran = []
    monkeypatch.setattr(script, "spinodals", lambda name: ran.append(name))
    with pytest.raises(SystemExit) as exc:
        script.main(["spinodals"])
    assert exc.value.code == 2 and ran == []
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "uncommitted changes" in err and "--allow-dirty" in err


def test_allow_dirty_runs_and_the_table_says_so(script, monkeypatch):
    monkeypatch.setattr(script, "code_provenance", lambda paths: dict(git_commit="abc123", git_dirty=True))
    monkeypatch.setattr(script, "spinodals", lambda name: script._write(name, [dict(a=1.0)], "test", 1.0))
    script.main(["spinodals", "--allow-dirty"])
    meta = json.loads((script.OUT / "spinodals.json").read_text())
    assert meta["git_commit"] == "abc123" and meta["git_dirty"] is True


def test_a_table_names_the_commit_its_run_started_from(script, monkeypatch):
    """A commit made while a sweep runs (HEAD moves) is not the code that computed it."""
    heads = iter(["start0", "moved1", "moved2"])
    monkeypatch.setattr(script, "code_provenance", lambda paths: dict(git_commit=next(heads), git_dirty=False))
    monkeypatch.setattr(script, "spinodals", lambda name: script._write(name, [dict(a=1.0)], "test", 1.0))
    script.main(["spinodals"])
    meta = json.loads((script.OUT / "spinodals.json").read_text())
    assert meta["git_commit"] == "start0" and meta["git_dirty"] is False


def test_no_shipped_table_says_it_was_computed_from_uncommitted_code():
    metas = sorted((ROOT / "book" / "_data").glob("*.json"))
    assert metas
    dirty = [p.name for p in metas if json.loads(p.read_text()).get("git_dirty") is True]
    assert dirty == []


def test_a_fresh_table_resumes_and_its_first_run_is_the_sweeps_first_run(script, monkeypatch):
    """Chapter 6 "From a fresh start" compares fresh runs with the followed sweeps: at the sweep's
    first alpha the two must be one run (same training set, same start); a resumed table keeps
    the runs it has, digit for digit, and names the commit they came from."""
    import csv

    import attnlab
    from attnlab.hysteresis import follow_minimum
    monkeypatch.setitem(sys.modules, "make_book_cache", script)  # the worker processes unpickle its functions
    case = dict(omega=0.0)
    monkeypatch.setattr(script, "FRESH", {"fresh_positional": ("positional", [(case, (0.5, 0.8), {40: range(1)})])})
    script.fresh("fresh_positional")
    table = script.OUT / "fresh_positional.csv"
    first = table.read_text().splitlines()
    assert len(first) == 3
    sweep = follow_minimum(attnlab.ModelParams(**case), [0.5, 0.8], 40, start="positional", seed=0)
    with open(table, newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if float(r["alpha"]) == 0.5)
    for col in ("m", "theta", "qnorm", "eps_t"):
        assert float(row[col]) == pytest.approx(float(sweep[col][0]), rel=1e-8)
    assert row["outcome"] == str(sweep["outcome"][0])

    monkeypatch.setattr(script, "FRESH", {"fresh_positional": ("positional", [(case, (0.5, 0.8), {40: range(2)})])})
    script.fresh("fresh_positional")
    second = table.read_text().splitlines()
    assert len(second) == 5 and set(first) <= set(second)  # the two runs kept as written
    meta = json.loads((script.OUT / "fresh_positional.json").read_text())
    assert "2 runs kept from the table written at commit" in meta["description"]


def test_a_thresholds_table_brackets_each_training_set_and_resumes(script, monkeypatch):
    """Chapter 6 reads, per training set, the bracket in alpha where a fresh run from Q* stops
    ending on the semantic minimum (|theta| > |m|): its lower end's run must not, its upper end's must, the
    bracket must have halved at every step, and every run must be the fresh run of that alpha
    (the protocol of the fresh tables). No bracket (both ends semantic) is recorded as such; a
    resumed table keeps the training sets it has, as written."""
    import csv

    monkeypatch.setitem(sys.modules, "make_book_cache", script)  # the worker processes unpickle its functions
    case = dict(omega=0.0, sigma=0.4)
    monkeypatch.setattr(script, "THRESHOLDS", {"thresholds_semantic": (case, {300: ((1.0, 2.28), range(1), 3)})})
    script.thresholds("thresholds_semantic")
    table = script.OUT / "thresholds_semantic.csv"
    first = table.read_text().splitlines()
    with open(table, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == [0, 1, 2, 3, 4]
    lo, hi = float(rows[0]["alpha_lo"]), float(rows[0]["alpha_hi"])
    assert hi - lo == pytest.approx((2.28 - 1.0) / 2 ** 3)
    on_semantic = {float(r["alpha"]): abs(float(r["theta"])) > abs(float(r["m"])) for r in rows}
    assert not on_semantic[lo] and on_semantic[hi]
    assert [float(r["alpha"]) for r in rows[:3]] == [1.0, 2.28, 1.64]
    fresh = script._fresh_row((case, float(rows[2]["alpha"]), 300, 0, "semantic"))
    for col in ("m", "theta", "eps_t"):
        assert float(rows[2][col]) == pytest.approx(fresh[col], rel=1e-9)  # 10 digits written

    # 200: no bracket (lo semantic); 400 and 350 run first (largest d first, two workers), so the
    # first write of the resumed table comes before the kept training set is done again
    sizes = {300: ((1.0, 2.28), range(1), 3), 200: ((2.0, 2.28), range(1), 3), 400: ((2.0, 2.28), range(1), 1),
             350: ((2.0, 2.28), range(1), 1)}
    monkeypatch.setattr(script, "THRESHOLDS", {"thresholds_semantic": (case, sizes)})
    first_commit = json.loads((script.OUT / "thresholds_semantic.json").read_text())["git_commit"]
    monkeypatch.setattr(script, "PROVENANCE", {"git_commit": "a later commit", "git_dirty": False})
    written, write = [], script._write
    monkeypatch.setattr(script, "_write", lambda name, rows, *a, **k: (written.append(len(rows)), write(name, rows, *a, **k)))
    script.thresholds("thresholds_semantic")
    assert min(written) >= len(first) - 1  # every write of the resumed table holds the runs it kept
    second = table.read_text().splitlines()
    assert set(first) <= set(second)  # the first training set kept as written
    with open(table, newline="") as fh:
        none = [r for r in csv.DictReader(fh) if r["d"] == "200"]
    assert len(none) == 1 and abs(float(none[0]["theta"])) > abs(float(none[0]["m"]))
    assert none[0]["alpha_lo"] == none[0]["alpha_hi"] == ""
    meta = json.loads((script.OUT / "thresholds_semantic.json").read_text())
    assert f"resumed from the table written at commit {first_commit}" in meta["description"]
    assert meta["git_commit"] == "a later commit"


def test_verify_reproduces_a_followed_table_and_records_a_row_that_differs(script, monkeypatch):
    """``--verify`` runs the cheapest sweep of each case again and compares it with the table: a
    table the code reproduces is recorded as such (rows compared, none differing); a number or
    an outcome changed on disk before the sweep's first jump is caught (a message, so exit
    status 1, the row named) and recorded; an outcome changed where the table's run jumps is
    recorded, not a failure; m and theta of the other joint sign (Q and -Q: one attention) are
    the same row; an alpha missing from the table is caught; the table's rows are never rewritten."""
    monkeypatch.setitem(sys.modules, "make_book_cache", script)  # the worker processes unpickle its functions
    cases = [(dict(omega=0.0), (0.6, 0.5), {40: (0,), 60: (0,)}),
             (dict(omega=0.0, sigma=0.6), (0.6, 0.5), {40: (1, 0)})]
    monkeypatch.setattr(script, "EXITS", {"exits_positional_sigma_lambda": cases})
    monkeypatch.setattr(script, "EXITS_START", {"exits_positional_sigma_lambda": "positional"})
    monkeypatch.setattr(script, "PROVENANCE", {"git_commit": "made", "git_dirty": False})
    script.exits("exits_positional_sigma_lambda")
    table = script.OUT / "exits_positional_sigma_lambda.csv"
    written = table.read_text()

    monkeypatch.setattr(script, "code_provenance", lambda paths: dict(git_commit="later", git_dirty=False))
    script.main(["--verify", "exits_positional_sigma_lambda"])
    meta = json.loads((script.OUT / "exits_positional_sigma_lambda.json").read_text())
    check = meta["verified"]
    assert meta["git_commit"] == "made" and check["git_commit"] == "later" and check["git_dirty"] is False
    # the cheapest sweep of each case: the smallest d, its first seed (seed 1 for sigma 0.6)
    assert check["sweeps"] == ["{'omega': 0.0} d = 40 seed 0", "{'omega': 0.0, 'sigma': 0.6} d = 40 seed 1"]
    assert check["rows_before_first_jump"] + check["rows_from_first_jump"] == 4 and check["rows_differing"] == 0
    assert check["max_relative_difference_before_jump"] < 1e-8
    assert table.read_text() == written

    header = written.splitlines()[0].split(",")
    col = {c: header.index(c) for c in ("sigma", "seed", "alpha", "theta", "outcome")}

    def tampered(alpha, column, value):
        """The table as written, one cell of the sigma 0.6, seed 1 sweep at ``alpha`` changed."""
        lines = written.splitlines()
        k = next(k for k, line in enumerate(lines[1:], 1) if line.split(",")[col["sigma"]] == "0.6"
                 and line.split(",")[col["seed"]] == "1" and float(line.split(",")[col["alpha"]]) == alpha)
        cells = lines[k].split(",")
        cells[col[column]] = value(cells[col[column]])
        lines[k] = ",".join(cells)
        table.write_text("\n".join(lines) + "\n")

    def check():
        return json.loads((script.OUT / "exits_positional_sigma_lambda.json").read_text())["verified"]

    # before the first jump (the sweep's first alpha, 0.6): a number moved by 1e-3, an outcome changed
    for column, value in (("theta", lambda v: repr(float(v) * 1.001)), ("outcome", lambda v: "collapsed")):
        tampered(0.6, column, value)
        with pytest.raises(SystemExit) as err:
            script.main(["--verify", "exits_positional_sigma_lambda"])
        assert isinstance(err.value.code, str)  # a message: exit status 1
        assert "1 rows differ" in str(err.value) and "'sigma': 0.6} d = 40 seed 1 alpha 0.6: outcome" in str(err.value)
        assert check()["rows_differing"] == 1 and check()["differing"][0]["alpha"] == 0.6
        if column == "theta":
            assert 5e-4 < check()["max_relative_difference_before_jump"] < 2e-3
            assert check()["differing"][0]["column"] == "theta"
    # m and theta of the first row with the other sign: the same attention, no difference
    flipped = written.splitlines()
    k = next(k for k, line in enumerate(flipped[1:], 1) if line.split(",")[col["sigma"]] == "0.6"
             and line.split(",")[col["seed"]] == "1" and float(line.split(",")[col["alpha"]]) == 0.6)
    cells = flipped[k].split(",")
    for c in ("m", "theta"):
        cells[header.index(c)] = repr(-float(cells[header.index(c)]))
    flipped[k] = ",".join(cells)
    table.write_text("\n".join(flipped) + "\n")
    script.main(["--verify", "exits_positional_sigma_lambda"])
    assert check()["rows_differing"] == 0 and check()["max_abs_difference_before_jump"] < 1e-9
    # an alpha of the cheapest sigma 0.6 sweep missing from the table
    table.write_text("\n".join(flipped[:k] + flipped[k + 1:]) + "\n")
    with pytest.raises(SystemExit) as err:
        script.main(["--verify", "exits_positional_sigma_lambda"])
    assert "seed 1: alpha 0.6 not in the table" in str(err.value)
    assert check()["first_jump"][1] is None and check()["differing"][0]["column"] == "not in the table"
    # the last alpha's outcome changed: in the table the run jumps there, so the re-run's other
    # outcome is recorded, not a failure
    tampered(0.5, "outcome", lambda v: "collapsed")
    script.main(["--verify", "exits_positional_sigma_lambda"])
    assert check()["rows_differing"] == 0 and check()["differing"] == [] and check()["first_jump"][1] == 0.5
    assert check()["max_abs_difference_agreeing"] < 1e-9
    assert check()["outcome_differs_after_jump"] == [dict(sweep="{'omega': 0.0, 'sigma': 0.6} d = 40 seed 1", alpha=0.5,
                                                          outcome=check()["outcome_differs_after_jump"][0]["outcome"],
                                                          table="collapsed")]


def test_a_sweep_jumps_where_its_outcome_changes_not_where_its_canonical_sign_flips():
    spec = importlib.util.spec_from_file_location("make_book_cache", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod._first_jump(["mixed"] * 4) == 4  # (m, theta) flipping sign as |theta| overtakes |m| is no jump
    assert mod._first_jump(["positional", "positional", "semantic", "semantic"]) == 2
    assert mod._first_jump(["semantic"]) == 1


def test_verify_is_for_the_followed_tables_only():
    out = subprocess.run([sys.executable, str(SCRIPT), "--verify", "spinodals"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "exits_positional" in out.stderr
