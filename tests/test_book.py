"""Consistency of the executable book: pairing, install cells, configuration, bibliography.

These tests read files only (no notebook is executed here; ``python -m pytest`` runs the
notebooks themselves under nbval, see ``[tool.pytest.ini_options]`` in pyproject.toml).
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext")
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
MD = BOOK / "md"
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
NOTEBOOKS = sorted(BOOK.glob("[0-9][0-9]_*.ipynb"))
SOURCES = sorted(MD.glob("*.md"))
REPO_URL = CONFIG["repository"]["url"]
RELEASE = CONFIG["repository"]["branch"]  # the release tag the install cells and launch buttons use


def _cells(path: Path) -> list[tuple]:
    """(cell type, stripped source, tags) of every cell, read with jupytext."""
    nb = jupytext.read(path)
    return [(c.cell_type, c.source.strip(), tuple(c.metadata.get("tags", ()))) for c in nb.cells]


def _first_code_cell(path: Path) -> str:
    nb = jupytext.read(path)
    return next(c for c in nb.cells if c.cell_type == "code")


def _toc_files(node) -> list[str]:
    out = []
    if isinstance(node, dict):
        if "file" in node:
            out.append(node["file"])
        for v in node.values():
            out += _toc_files(v)
    elif isinstance(node, list):
        for v in node:
            out += _toc_files(v)
    return out


# --------------------------------------------------------------------------- pairing

def test_there_are_chapters():
    assert len(NOTEBOOKS) >= 8, [p.name for p in NOTEBOOKS]


def test_every_md_has_its_ipynb_and_vice_versa():
    md = {p.stem for p in SOURCES}
    nb = {p.stem for p in NOTEBOOKS}
    assert md == nb, f"only .md: {sorted(md - nb)}; only .ipynb: {sorted(nb - md)}"


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_md_and_ipynb_have_identical_cells(nb_path):
    md_path = MD / (nb_path.stem + ".md")
    a, b = _cells(md_path), _cells(nb_path)
    assert len(a) == len(b), f"{nb_path.name}: {len(b)} cells, {md_path.name}: {len(a)} cells (run jupytext --sync)"
    for i, (ca, cb) in enumerate(zip(a, b)):
        assert ca == cb, f"cell {i} differs between {md_path.name} and {nb_path.name} (run jupytext --sync)"


def test_jupytext_pairing_config():
    text = (ROOT / "jupytext.toml").read_text()
    assert re.search(r'formats\s*=\s*"book///ipynb,book/md///md:myst"', text)


def test_md_sources_are_not_documents():
    # Only the notebooks are built: no duplicate-document warnings, launch buttons open .ipynb.
    assert "book/md/**" in CONFIG["exclude_patterns"]
    assert CONFIG.get("only_build_toc_files") is True
    toc = _toc_files(TOC) + [TOC["root"]]
    assert not any(f.startswith("book/md/") for f in toc)
    chapters = {f"book/{p.stem}" for p in NOTEBOOKS}
    assert chapters <= set(toc), sorted(chapters - set(toc))


# --------------------------------------------------------------------------- install cell / URL

def test_repository_url_is_set_once():
    assert REPO_URL.startswith("https://github.com/")
    # the install cells and launch buttons pin a release tag, not a moving branch
    assert re.fullmatch(r"v\d+\.\d+\.\d+", RELEASE), RELEASE
    lb = CONFIG["launch_buttons"]
    assert lb["colab_url"] and lb["binderhub_url"] and lb["thebe"]


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_code_cell_installs_attnlab_from_the_book_repository(nb_path):
    cell = _first_code_cell(nb_path)
    src = cell.source
    assert "import attnlab" in src and "except ImportError" in src, src
    urls = re.findall(r"git\+(https://[^\s\"']+)", src)
    expected = f"{REPO_URL}@{RELEASE}"
    assert urls == [expected], f"{nb_path.name} installs from {urls}, _config.yml says {expected}"
    assert re.search(r"%pip install", src)
    # it brings what the chapter's quiz needs too (the `notebook` extra), and the HTML book,
    # whose reader needs no install, does not show it
    assert "import jupyterquiz" in src and re.search(r'"attnlab\[notebook\] @ git\+', src), src
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "jupyterquiz" in " ".join(extras["notebook"])
    assert "remove-cell" in cell.metadata.get("tags", [])


# --------------------------------------------------------------------------- chapter structure

@pytest.mark.parametrize("md_path", SOURCES, ids=lambda p: p.stem)
def test_chapter_has_goals_exercises_and_folded_solutions(md_path):
    text = md_path.read_text()
    assert "Learning goals" in text
    exercises = re.findall(r"^:{3,}\{exercise\}", text, flags=re.M)
    solutions = re.findall(r"^:{3,}\{solution(?:-start)?\} (\S+)\n:class: dropdown", text, flags=re.M)
    labels = re.findall(r"^:{3,}\{exercise\}\n:label: (\S+)", text, flags=re.M)
    assert len(exercises) >= 3, f"{md_path.name}: {len(exercises)} exercises"
    assert sorted(solutions) == sorted(labels), f"{md_path.name}: every exercise needs a dropdown solution"


@pytest.mark.parametrize("md_path", SOURCES, ids=lambda p: p.stem)
def test_full_scale_switch_and_checked_numbers(md_path):
    if md_path.stem.startswith("00_"):
        return
    text = md_path.read_text()
    assert re.search(r"^FULL_SCALE = False", text, flags=re.M), md_path.name
    # checked cells carry the nbval tag (not a comment marker, which the HTML book would show)
    assert ":tags: [nbval-check-output]" in text and "NBVAL_" not in text, md_path.name


@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_solutions_are_tagged_cells(nb_path):
    """Solution code runs as cells inside a gated {solution-start} ... {solution-end} block;
    every cell of a solution (code and text) carries the tag `solution`, from which
    build_course.py makes the student edition. Outside a block only hidden helpers may."""
    nb = jupytext.read(nb_path)
    inside, n_code = False, 0
    for i, c in enumerate(nb.cells):
        tags = c.metadata.get("tags", [])
        src = c.source
        starts = "{solution-start}" in src or "{solution}" in src
        if starts or inside:
            assert "solution" in tags, f"{nb_path.name} cell {i}: solution cell without the tag"
        if "{solution-start}" in src:
            assert not inside, f"{nb_path.name} cell {i}: nested solution-start"
            inside = True
        if inside and c.cell_type == "code":
            n_code += 1
        if "{solution-end}" in src:
            assert inside, f"{nb_path.name} cell {i}: solution-end without start"
            inside = False
        if "solution" in tags and not (starts or inside or "{solution-end}" in src):
            assert "remove-cell" in tags, f"{nb_path.name} cell {i}: tagged solution outside a solution"
        if c.cell_type == "code" and not inside:
            assert "```python" not in src
    assert not inside, f"{nb_path.name}: unclosed solution-start"
    md = (MD / (nb_path.stem + ".md")).read_text()
    assert "```python" not in md.split("## Exercises")[-1], f"{nb_path.name}: solution code in a plain fence"


def test_exercise_labels_are_unique():
    labels = []
    for p in SOURCES:
        labels += re.findall(r"^:label: (\S+)", p.read_text(), flags=re.M)
    dup = {x for x in labels if labels.count(x) > 1}
    assert not dup, dup


# --------------------------------------------------------------------------- committed outputs

@pytest.mark.parametrize("nb_path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_is_executed_and_clean(nb_path):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(nb_path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"{nb_path.name} is not fully executed"
    checked = [c for c in code if "nbval-check-output" in c.metadata.get("tags", [])]
    assert checked or nb_path.stem.startswith("00_"), f"{nb_path.name}: no cell checked by nbval"
    assert all(c.outputs for c in checked), f"{nb_path.name}: a checked cell has no stored output"
    for c in code:
        for out in c.outputs:
            assert out.output_type != "error", f"{nb_path.name}: stored error output"
            assert not (out.output_type == "stream" and out.name == "stderr"), \
                f"{nb_path.name}: stderr output {out.text[:200]!r}"
            text = out.get("text", "") + str(out.get("data", {}).get("text/plain", ""))
            assert not re.search(r"0x[0-9a-f]{8,}", text), f"{nb_path.name}: memory address in an output"
    assert "widgets" not in nb.metadata, f"{nb_path.name}: stored widget state (use the refresh script)"


# --------------------------------------------------------------------------- config and bibliography

def test_execution_settings():
    ex = CONFIG["execute"]
    assert ex["execute_notebooks"] == "cache"
    assert ex["timeout"] >= 60 and ex["raise_on_error"] is True and ex["allow_errors"] is False
    overrides = CONFIG["sphinx"]["config"]["nb_mime_priority_overrides"]
    assert ["html", "application/vnd.jupyter.widget-view+json", 35] in overrides


def test_bibliography_parses_and_has_the_paper():
    pybtex = pytest.importorskip("pybtex.database")
    db = pybtex.parse_file(str(ROOT / "references.bib"))
    cui = db.entries["cui2024phase"]
    assert cui.fields["eprint"] == "2402.03902"
    assert "positional and semantic" in cui.fields["title"]
    assert [str(p) for p in cui.persons["author"]][0].startswith("Cui")


def test_every_citation_is_in_the_bibliography():
    pybtex = pytest.importorskip("pybtex.database")
    keys = set(pybtex.parse_file(str(ROOT / "references.bib")).entries)
    used = set()
    for p in list(SOURCES) + sorted((BOOK / "appendix").glob("*.md")):
        for group in re.findall(r"\{cite(?::[tp])?\}`([^`]+)`", p.read_text()):
            used |= {k.strip() for k in group.split(",")}
    assert used and used <= keys, sorted(used - keys)


# --------------------------------------------------------------------------- widgets

def test_widget_panel_has_static_html_and_png_figure():
    pytest.importorskip("ipywidgets")
    from attnlab.widgets import teacher_explorer

    live = teacher_explorer(show=False)
    bundle = live.panel._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "<input type=\"range\"" in bundle["text/html"] and "disabled" in bundle["text/html"]
    img = live.render()
    assert img.data[:8] == b"\x89PNG\r\n\x1a\n"
    live.sliders["omega"].value = 1.0  # redraw path (no display handle outside a kernel)
    assert live.values()["omega"] == 1.0


def test_live_explorer_switches_on_colabs_widget_manager(monkeypatch):
    """On Colab, ipywidgets 8 needs its custom widget manager: show() turns it on first."""
    pytest.importorskip("ipywidgets")
    import sys
    import types

    from attnlab.widgets import teacher_explorer

    calls = []
    colab = types.ModuleType("google.colab")
    colab.output = types.SimpleNamespace(enable_custom_widget_manager=lambda: calls.append("enabled"))
    google = types.ModuleType("google")
    google.colab = colab
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda *a, **k: shown.append(calls[:]))
    teacher_explorer(show=False).show()
    assert calls == ["enabled"] and shown and shown[0] == ["enabled"]  # before anything is displayed


# --------------------------------------------------------------------------- stale outputs

def test_cache_guard_reexecutes_when_library_or_cached_results_change(tmp_path):
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("cache_guard", BOOK / "_ext" / "cache_guard.py")
    guard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard)
    (tmp_path / "attnlab").mkdir()
    (tmp_path / "attnlab" / "core.py").write_text("x = 1\n")
    cache = tmp_path / "_build" / ".jupyter_cache"
    cache.mkdir(parents=True)
    docs = {"book/01_a": "book/01_a.ipynb", "book/appendix/api": "book/appendix/api.md"}
    app = SimpleNamespace(srcdir=str(tmp_path), outdir=str(tmp_path / "_build" / "html"),
                          config=SimpleNamespace(nb_execution_cache_path=str(cache)))
    env = SimpleNamespace(found_docs=set(docs), doc2path=lambda d: str(tmp_path / docs[d]))
    assert guard._outdated(app, env, set(), set(), set()) == ["book/01_a"]  # no hash recorded yet
    assert not cache.exists()
    cache.mkdir()
    assert guard._outdated(app, env, set(), set(), set()) == []              # nothing changed
    assert cache.exists()
    (tmp_path / "attnlab" / "core.py").write_text("x = 2\n")
    assert guard._outdated(app, env, set(), set(), set()) == ["book/01_a"]  # library edited
    assert not cache.exists()
    # the provenance of a cached table: printed by chapters (dates, sweep_complete), so a
    # change of the JSON alone must re-execute them too (results/ and book/_data/)
    for folder, name in (("results", "phase-diagram"), ("book/_data", "se_curves")):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / f"{name}.csv").write_text("alpha,m\n1.0,0.2\n")
        cache.mkdir(exist_ok=True)
        guard._outdated(app, env, set(), set(), set())                       # table added
        for complete in ("false", "true"):
            (tmp_path / folder / f"{name}.json").write_text(f'{{"sweep_complete": {complete}}}\n')
            cache.mkdir(exist_ok=True)
            assert guard._outdated(app, env, set(), set(), set()) == ["book/01_a"], (folder, complete)
            assert not cache.exists()
        cache.mkdir()
        assert guard._outdated(app, env, set(), set(), set()) == []          # JSON unchanged
        assert cache.exists()
    # `attnlab reproduce NAME --quick` output beside the tables: read by no chapter, keeps the cache
    for suffix in ("-quick", "-quick-theory"):
        for ext in ("csv", "json"):
            (tmp_path / "results" / f"rank-2{suffix}.{ext}").write_text("alpha,m\n1.0,0.2\n")
    assert guard._outdated(app, env, set(), set(), set()) == []
    assert cache.exists()


def test_book_build_starts_its_kernels_without_the_transport_warning(tmp_path):
    """The extension kernel_transport: a chapter executed the way the build executes it
    (nbclient, in the process that loaded the extension) runs, and its kernel prints no
    "running over TCP without encryption" warning into the build log."""
    import subprocess
    import sys

    script = tmp_path / "run.py"
    script.write_text(
        "import importlib.util, nbformat\n"
        f"spec = importlib.util.spec_from_file_location('kt', {str(BOOK / '_ext' / 'kernel_transport.py')!r})\n"
        "kt = importlib.util.module_from_spec(spec); spec.loader.exec_module(kt)\n"
        "print('changed', kt.prefer_encrypted_kernels())\n"
        "from nbclient import NotebookClient\n"
        "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('print(6 * 7)')])\n"
        "NotebookClient(nb, timeout=120).execute()\n"
        "print('output', nb.cells[0].outputs[0]['text'].strip())\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "output 42" in out.stdout
    if "changed True" in out.stdout:  # (jupyter_client with the setting, pyzmq with CurveZMQ)
        assert "without encryption" not in out.stderr, out.stderr


# --------------------------------------------------------------------------- Binder

def test_binder_environment_matches_pyproject_and_installs_the_project_in_postbuild():
    """environment.yml holds the dependencies (a layer Binder caches), postBuild the project."""
    tomllib = pytest.importorskip("tomllib")
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + sum((project["optional-dependencies"][k] for k in ("book", "notebook", "test")), [])
    wanted = {canonicalize_name(r.name): r for r in map(Requirement, wanted)}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    assert not [p for p in pip if p.startswith(("-e", "."))], "the project belongs in postBuild, not environment.yml"
    listed = {canonicalize_name(r.name): r for r in (Requirement(p) for p in pip if not p.startswith("-"))}
    assert set(listed) == set(wanted), (sorted(set(wanted) - set(listed)), sorted(set(listed) - set(wanted)))
    for name, req in wanted.items():
        got = listed[name].specifier
        if str(got).startswith("=="):  # a pin (torch, the CPU build) must satisfy pyproject's bounds
            assert req.specifier.contains(str(got)[2:]), (name, str(got), str(req.specifier))
        else:
            assert got == req.specifier, (name, str(got), str(req.specifier))
    post = ROOT / "postBuild"
    assert post.stat().st_mode & 0o111, "postBuild must be executable"
    assert re.search(r"^python -m pip install --no-deps -e \.$", post.read_text(), re.M)


# --------------------------------------------------------------------------- Thebe

def test_thebe_leaves_the_explorer_cells_alone():
    """Thebe 0.8's widget manager is ipywidgets 7; the kernel's is 8: explorer cells are
    tagged `no-thebe`, and the Thebe selector skips them (the text says to use Binder/Colab)."""
    selector = CONFIG["sphinx"]["config"]["thebe_config"]["selector"]
    assert ".cell:not(.tag_no-thebe)" in selector.split(","), selector
    tagged = 0
    for path in NOTEBOOKS:
        for kind, source, tags in _cells(path):
            if kind == "code" and re.search(r"\b(book_explorer|teacher_explorer|se_explorer|overlaps_explorer)\(", source) \
                    and not source.lstrip().startswith(("from ", "import ")):
                assert "no-thebe" in tags, f"{path.name}: explorer cell without the no-thebe tag: {source[:60]!r}"
                tagged += 1
    assert tagged >= 5


def test_chapter_3_names_each_start_one_way():
    """Chapter 3 called the start at Q* "informed init" in one panel and "semantic init" in the
    other: its labels, legends and printed lines take the names of ``attnlab.plots.START_NAMES``
    (``INIT_LABELS``), the notation appendix's "informed start" and "random start"."""
    code = "\n".join(src for kind, src, _ in _cells(MD / "03_gradient_descent.md") if kind == "code")
    # the text of the string literals, without f-strings' {fields} ("init" alone is a column's name)
    strings = [re.sub(r"\{[^{}]*\}", "", t) for t in re.findall(r"(\"[^\"\n]*\"|'[^'\n]*')", code)]
    named = [t for t in strings if re.search(r"\binit\b", t) and t.strip("\"'") != "init"]
    assert named == [], f"a start named in chapter 3 without START_NAMES / INIT_LABELS: {named}"
    assert "START_NAMES[" in code and "INIT_LABELS[" in code
