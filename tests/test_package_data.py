"""The cached tables the chapters load come with an installed attnlab (issue: Colab got reduced recomputations).

A wheel is built from a copy of the sources and installed into a fresh virtual environment
(the ``installed_attnlab`` fixture, ``tests/installed.py``), and the book's loaders run there from a folder outside the repository, without PYTHONPATH:
every table of ``results/`` and ``book/_data/`` must load, with its provenance, byte for
byte the repository's file. About 10-20 s.
"""
import hashlib
import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS, BOOK_DATA = ROOT / "results", ROOT / "book" / "_data"

LOADERS = r"""
import hashlib, json, sys
import attnlab
from attnlab.experiments import store
from attnlab.experiments.figures import (describe_results, load_book_data, load_book_provenance, load_provenance,
                                        load_results)
from attnlab.explorer_grid import load_explorer_grid

out = dict(attnlab=attnlab.__file__, source_root=str(store.SOURCE_ROOT), tables={})
for name, table in json.loads(sys.argv[1]):
    cols = load_results(name, table=table)
    prov = load_provenance(name, table=table)
    path = store.cached_path(name + ("-theory" if table == "theory" else "") + ".csv")
    out["tables"][f"{name}:{table}"] = dict(rows=len(cols["run_id"]), sha1=hashlib.sha1(path.read_bytes()).hexdigest(),
                                            provenance=prov is not None and "sessions" in prov, path=str(path))
    if table == "runs":
        out["tables"][f"{name}:{table}"]["describe"] = describe_results(name)
for name in json.loads(sys.argv[2]):
    cols, path = load_book_data(name), store.book_data_path(name + ".csv")
    out["tables"][f"book:{name}"] = dict(rows=len(next(iter(cols.values()))), sha1=hashlib.sha1(path.read_bytes()).hexdigest(),
                                         provenance=bool(load_book_provenance(name)), path=str(path))
out["explorer_grid"] = load_explorer_grid().source
print(json.dumps(out))
"""


def _sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes()).hexdigest()


def _figure_tables() -> list:
    """``(figure, table)`` of every CSV in results/ (``NAME.csv`` runs, ``NAME-theory.csv`` theory)."""
    out = []
    for p in sorted(RESULTS.glob("*.csv")):
        name = p.stem
        out.append([name[: -len("-theory")], "theory"] if name.endswith("-theory") else [name, "runs"])
    return out


def test_chapters_load_only_shipped_tables():
    """Every table a chapter names (literally) is one of the shipped ones."""
    shipped = {f"{n}:{t}" for n, t in _figure_tables()} | {f"book:{p.stem}" for p in BOOK_DATA.glob("*.csv")}
    named = set()
    for md in sorted((ROOT / "book" / "md").glob("*.md")):
        text = md.read_text()
        for m in re.finditer(r"load_(results|provenance)\(\s*\"([\w-]+)\"(?:,\s*table=\"(\w+)\")?", text):
            named.add(f"{m.group(2)}:{m.group(3) or 'runs'}")
        for m in re.finditer(r"describe_results\(\s*\"([\w-]+)\"", text):
            named.add(f"{m.group(1)}:runs")
        for m in re.finditer(r"load_book_data\(\s*\"(\w+)\"", text):
            named.add(f"book:{m.group(1)}")
        assert not re.search(r"read_columns\(\s*\"_data/", text), f"{md.name} reads book/_data by a relative path"
    assert named and named <= shipped, sorted(named - shipped)


def test_cached_tables_load_from_an_installed_wheel(installed_attnlab, tmp_path):
    python, wheel = installed_attnlab.python, installed_attnlab.wheel
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith(".png")] and wheel.stat().st_size < 2 * 2 ** 20, wheel.stat().st_size
    run = dict(capture_output=True, text=True, env=installed_attnlab.env, check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    books = sorted(p.stem for p in BOOK_DATA.glob("*.csv"))
    out = subprocess.run([str(python), "-c", LOADERS, json.dumps(_figure_tables()), json.dumps(books)], cwd=elsewhere,
                         **run).stdout
    got = json.loads(out)
    site = str(installed_attnlab.venv)
    assert got["attnlab"].startswith(site) and got["source_root"] == "None"
    assert got["explorer_grid"].startswith(site)
    for name, table in _figure_tables():
        entry = got["tables"][f"{name}:{table}"]
        csv = RESULTS / f"{name}{'-theory' if table == 'theory' else ''}.csv"
        assert entry["path"].startswith(site) and entry["sha1"] == _sha1(csv) and entry["provenance"], (name, table)
        if table == "runs":
            assert entry["describe"].startswith(f"Loaded {entry['rows']} cached runs"), entry["describe"]
    for name in books:
        entry = got["tables"][f"book:{name}"]
        assert entry["path"].startswith(site) and entry["sha1"] == _sha1(BOOK_DATA / f"{name}.csv")
        assert entry["provenance"]
