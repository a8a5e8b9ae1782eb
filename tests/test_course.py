"""The course module: course plan, student/instructor editions, slides, problem sets, retarget.

The tests that build course material share one build per session (the ``course`` fixture:
``build_course.py`` for every chapter, without the full student HTML book, which needs the
whole book executed; the student HTML is checked on the preface alone). They are marked
``course``: ``python -m pytest -m "not course"`` skips them.
"""
from __future__ import annotations

import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"
sys.path.insert(0, str(BOOK / "_scripts"))
import build_course  # noqa: E402

CHAPTERS = build_course.chapter_names()
PLAN = build_course.course_plan()


# --------------------------------------------------------------------------- course plan

def _table_minutes(text: str) -> dict[int, int]:
    """{lecture: minutes} of a markdown table whose first column is the lecture number."""
    rows = re.findall(r"^\| (\d+) \|.*\| (\d+)(?: min)? \|$", text, flags=re.M)
    return {int(a): int(b) for a, b in rows}


def test_every_chapter_is_in_exactly_one_lecture():
    listed = [c for lec in PLAN["lectures"] for c in lec["chapters"]]
    assert sorted(listed) == CHAPTERS


def test_course_plan_minutes_add_up_from_the_chapters():
    estimates = {c: build_course.chapter_minutes(c) for c in CHAPTERS}
    expected = {lec["number"]: sum(estimates[c] for c in lec["chapters"]) for lec in PLAN["lectures"]}
    page = (BOOK / "appendix" / "course_plan.md").read_text()
    assert _table_minutes(page) == expected
    total = re.search(r"\*\*total\*\* \| \*\*(\d+)\*\*", page)
    assert total and int(total.group(1)) == sum(estimates.values()) == PLAN["total_minutes"]
    preface = (BOOK / "md" / "00_preface.md").read_text()
    assert _table_minutes(preface) == expected


def test_schedule_names_every_lecture_and_problem_set():
    text = json.dumps(PLAN["weeks"])
    for lec in PLAN["lectures"]:
        assert f"lecture {lec['number']}" in text
        assert f"problem set {lec['number']} out" in text


def test_every_lecture_has_a_problem_set_source():
    for lec in PLAN["lectures"]:
        assert (BOOK / "course" / "assignments" / f"ps{lec['number']}.md").exists()


def test_project_starters_compile():
    starters = sorted((BOOK / "course" / "projects").glob("*.py"))
    assert len(starters) >= 4
    page = (BOOK / "appendix" / "projects.md").read_text()
    for p in starters:
        compile(p.read_text(), str(p), "exec")
        assert p.name in page, f"{p.name} not described on the projects page"
    assert "rubric" in page.lower() and "Scope" in page


@pytest.mark.parametrize("name", CHAPTERS)
def test_chapter_ends_with_a_kernel_free_quiz(name):
    """A jupyterquiz quiz before the exercises, stored as HTML + JavaScript outputs (so the
    static HTML page runs it without a kernel; the questions are in the page)."""
    nb = build_course.read_chapter(name)
    idx = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and "display_quiz(" in c.source]
    assert len(idx) == 1, name
    exercises = next(i for i, c in enumerate(nb.cells) if c.source.lstrip().startswith("## Exercises"))
    assert idx[0] < exercises
    outs = nb.cells[idx[0]].outputs
    data = {k: v for o in outs for k, v in o.get("data", {}).items()}
    assert "application/javascript" in data and "text/html" in data, sorted(data)
    assert '"correct": true' in data["application/javascript"].replace("True", "true")


@pytest.mark.parametrize("name", CHAPTERS)
def test_quiz_is_seeded_per_chapter(name):
    """jupyterquiz draws its element ids with python's `random`: each quiz cell seeds it."""
    nb = build_course.read_chapter(name)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and "display_quiz(" in c.source]
    seed = f'random.seed("quiz-{name[:2]}")'
    assert seed in cell.source and cell.source.index(seed) < cell.source.index("display_quiz(")


def test_quiz_cell_gives_the_same_output_twice():
    """Executed twice in fresh kernels, a chapter's quiz stores identical outputs."""
    pytest.importorskip("jupyterquiz")
    from nbclient import NotebookClient

    nb = build_course.read_chapter(CHAPTERS[4])
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and "display_quiz(" in c.source]
    outputs = []
    for _ in range(2):
        run = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell.source)])
        NotebookClient(run, timeout=120, kernel_name="python3").execute()
        outputs.append(json.dumps(run.cells[0].outputs, sort_keys=True))
    assert "application/javascript" in outputs[0] and outputs[0] == outputs[1]


# --------------------------------------------------------------------------- built material

@pytest.fixture(scope="session")
def course(tmp_path_factory):
    if shutil.which("npm") is None:
        pytest.skip("npm is needed once to fetch reveal.js and MathJax for the slides")
    out = tmp_path_factory.mktemp("course")
    build_course.main(["--out", str(out), "--no-html"])
    return out


@pytest.mark.course
def test_student_notebooks_have_no_solution(course):
    for name in CHAPTERS:
        full = build_course.read_chapter(name)
        student = nbformat.read(course / "student" / "notebooks" / f"{name}.ipynb", as_version=4)
        assert not any("solution" in c.metadata.get("tags", []) for c in student.cells)
        assert not any("{solution" in c.source for c in student.cells), name
        text = nbformat.writes(student)
        prints = build_course.solution_fingerprints(full)
        assert prints or name == "00_preface", name
        assert build_course.leaks(text, prints) == [], name
        # everything else is kept
        kept = [c.source for c in full.cells if "solution" not in c.metadata.get("tags", [])]
        assert [c.source for c in student.cells] == kept


@pytest.mark.course
def test_handout_folder_holds_only_handouts(course):
    """Zipping the --out folder must not ship the answers: the scratch files (otter's sources,
    the student build's tree and config, the slide template) live beside it, and answers
    appear only in the instructor edition and in the problem sets' autograder/solutions."""
    assert {p.name for p in course.iterdir()} == {"student", "instructor", "slides", "assignments",
                                                  "build_report.json"}
    assert not list((course / "student").rglob("*.yml"))
    for path in course.rglob("*"):
        rel = path.relative_to(course).parts
        if not path.is_file() or path.suffix not in (".ipynb", ".md", ".py", ".html", ".txt"):
            continue
        if rel[0] == "instructor" or (rel[0] == "assignments" and rel[2] in ("autograder", "solutions")):
            continue
        assert "BEGIN SOLUTION" not in path.read_text(errors="replace"), path


@pytest.mark.course
def test_instructor_edition_answers_every_exercise(course):
    answers = (course / "instructor" / "answers.md").read_text()
    labels = []
    for name in CHAPTERS:
        labels += re.findall(r"^:label: (ex-\S+)", (BOOK / "md" / f"{name}.md").read_text(), flags=re.M)
    assert labels
    for label in labels:
        assert f"### Exercise `{label}`" in answers
        block = answers.split(f"### Exercise `{label}`")[1].split("### Exercise")[0]
        assert "**Answer.**" in block or "```python" in block, label
    assert "ex-ch6-sliders" in labels  # the questions on the sliders of Chapter 6
    assert "{glue" not in answers  # numbers filled in
    for name in CHAPTERS:
        assert (course / "instructor" / "notebooks" / f"{name}.ipynb").exists()
    assert (course / "instructor" / "projects.md").exists()
    assert len(list((course / "instructor" / "projects").glob("*.py"))) >= 4


class _Deck(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.depth, self.leaves, self.refs, self._has_child = 0, 0, [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            if self._has_child:
                self._has_child[-1] = True
            self._has_child.append(False)
        for key in ("src", "href"):
            if attrs.get(key) and (tag in ("img", "script") or attrs.get("rel") == "stylesheet"):
                self.refs.append((tag, attrs[key]))

    def handle_endtag(self, tag):
        if tag == "section":
            if not self._has_child.pop():
                self.leaves += 1


@pytest.mark.parametrize("number", [lec["number"] for lec in PLAN["lectures"]])
def test_decks_hold_every_section_exercise_and_statement(number):
    """Every section heading of a lecture's chapters (wherever it sits in a cell), every exercise
    statement and every prf block (the equations) is on a slide; the slides read only cells a
    student may see (not solutions, not removed or skip-slide cells)."""
    lecture = next(lec for lec in PLAN["lectures"] if lec["number"] == number)
    cells = build_course.lecture_notebook(lecture).cells
    deck = "\n\n".join(c.source for c in cells if c.cell_type == "markdown")
    for name in lecture["chapters"]:
        shown = build_course.remove_tagged(build_course.read_chapter(name),
                                           tags=("solution", "remove-cell", "skip-slide"))
        visible = "\n".join(c.source for c in shown.cells if c.cell_type == "markdown")
        as_slide = lambda text: build_course.slide_markdown(text, build_course.glued(shown), {})
        headings = re.findall(r"^#{1,2} .+$", visible, flags=re.M)
        assert len(headings) > 3, name
        for heading in headings:
            assert as_slide(heading) in deck, (name, heading)
        statements = re.findall(r"^:{3,}\{exercise\}\n(?::\w+:.*\n)*\n?(.+)$", visible, flags=re.M)
        assert statements and len(statements) == visible.count("{exercise}"), name
        for first_line in statements:
            assert as_slide(first_line) in deck, (name, first_line)
        for kind, title in re.findall(r"^```\{prf:(\w+)\} (.+)$", visible, flags=re.M):
            assert f"**{kind.capitalize()}: {as_slide(title)}**" in deck, (name, title)
        assert build_course.leaks(deck, build_course.solution_fingerprints(build_course.read_chapter(name))) == []
    exercises = [c.source for c in cells if c.cell_type == "markdown" and c.source.startswith("**Exercise**")]
    assert exercises and all(len(e.strip()) > 40 for e in exercises), number
    _no_raw_roles(deck, f"lecture {number}")


def _no_raw_roles(text: str, where: str):
    """No MyST role and no bare label left: a reference reads as the book shows it."""
    labels = build_course.label_titles()
    assert len(labels) > 20 and labels["ex-ch2-asymmetric"] == "Exercise 2.4"
    assert not re.search(r"\{\w+(:\w+)?\}`", text), (where, re.search(r".{40}\{\w+(:\w+)?\}`.{40}", text))
    assert not [label for label in labels if re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text)], where


def test_answers_show_references_as_the_book_does():
    text = build_course.answers_markdown(CHAPTERS)
    text = re.sub(r"### Exercise `[\w-]+`", "", text)  # each answer's own heading names its label
    _no_raw_roles(text, "answers.md")


@pytest.mark.course
def test_slide_decks_work_offline(course):
    slides = course / "slides"
    for lec in PLAN["lectures"]:
        deck = slides / f"lecture{lec['number']:02d}.html"
        assert deck.exists(), deck
        parser = _Deck()
        parser.feed(deck.read_text())
        assert parser.leaves >= 8, (deck.name, parser.leaves)
        imgs = [src for tag, src in parser.refs if tag == "img"]
        assert imgs, f"{deck.name}: no figure"
        for tag, ref in parser.refs:
            assert not re.match(r"(https?:)?//", ref), f"{deck.name}: {tag} from the network: {ref}"
            if ref.startswith("data:"):
                continue
            assert (slides / ref.split("?")[0]).is_file(), f"{deck.name}: {ref} missing"
        # links to other book pages go to the student edition's HTML, not to .md/.ipynb sources
        links = re.findall(r'<a [^>]*href="([^"]+)"', deck.read_text())
        assert not [h for h in links if re.search(r"\.(md|ipynb)(#|$)", h)], deck.name
        assert all(h.startswith(("#", "https:", "http:", "mailto:", "../student/html/book/")) for h in links), \
            (deck.name, [h for h in links if not h.startswith(("#", "http", "mailto:", "../student/"))])
    assert (slides / "_vendor" / "reveal.js" / "dist" / "reveal.js").is_file()
    assert (slides / "_vendor" / "mathjax" / "MathJax.js").is_file()


def _otter_score(autograder: Path, notebook: Path, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "otter", "run", "-a", str(autograder), "-o", str(out), str(notebook)],
                   check=True, capture_output=True, text=True, cwd=notebook.parent)
    results = json.loads((out / "results.json").read_text())
    return {t["name"]: (t["score"], t["max_score"]) for t in results["tests"] if t["name"] != "Public Tests"}


@pytest.mark.course
@pytest.mark.parametrize("number", [lec["number"] for lec in PLAN["lectures"]])
def test_problem_set_solutions_pass_and_stubs_fail(course, number, tmp_path):
    pytest.importorskip("otter")
    ps = course / "assignments" / f"ps{number}"
    zip_ = ps / "autograder" / "autograder.zip"
    assert zip_.exists()
    # a grading service builds its environment from the bundle: it must install attnlab at the release
    import zipfile

    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    env = zipfile.ZipFile(zip_).read("environment.yml").decode()
    assert f"attnlab @ git+{repo['url']}@{repo['branch']}" in env
    student_nb = ps / "student" / f"ps{number}.ipynb"
    # the student notebook has stubs, no solution and no hidden test
    nb = nbformat.read(student_nb, as_version=4)
    assert not any("BEGIN SOLUTION" in c.source for c in nb.cells)
    assert "hidden: true" not in json.dumps(nb.metadata) and '"hidden": true' not in json.dumps(nb.metadata)
    solved = _otter_score(zip_, ps / "autograder" / f"ps{number}.ipynb", tmp_path / "solution")
    stub = _otter_score(zip_, student_nb, tmp_path / "stub")
    assert solved and set(solved) == set(stub)
    for q, (score, max_score) in solved.items():
        assert score == max_score > 0, f"ps{number} {q}: the solution scores {score}/{max_score}"
        assert stub[q][0] == 0, f"ps{number} {q}: the stub scores {stub[q][0]}"


@pytest.mark.course
def test_student_html_hides_solutions(tmp_path):
    """The student HTML build of one chapter (the preface: fast to execute) has no solution."""
    found = build_course.build_student_html(tmp_path, ["00_preface"])
    assert found == {}
    page = (tmp_path / "student" / "html" / "book" / "00_preface.html").read_text()
    assert "ex-ch0-params" in page or "Exercise" in page  # the exercises are there
    assert "solution-content" not in page and "Every parameter is validated" not in page
    # the page's download button serves the student notebook
    assert '_sources/book/00_preface.ipynb' in page
    served = nbformat.read(tmp_path / "student" / "html" / "_sources" / "book" / "00_preface.ipynb", as_version=4)
    assert not any("solution" in c.metadata.get("tags", []) for c in served.cells)
    assert "Every parameter is validated" not in nbformat.writes(served)


# --------------------------------------------------------------------------- retarget

def test_retarget_changes_every_url(tmp_path):
    """retarget.py on a copy of the book: every URL and the release change, and the URL
    agreement test of tests/test_book.py passes on the retargeted copy."""
    pytest.importorskip("jupytext")
    import retarget

    for name in ("_config.yml", "_toc.yml", "jupytext.toml", "pyproject.toml"):
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / "book" / "md").mkdir(parents=True)
    (tmp_path / "tests").mkdir()
    for p in (BOOK / "md").glob("*.md"):
        shutil.copy2(p, tmp_path / "book" / "md" / p.name)
    for p in BOOK.glob("[0-9][0-9]_*.ipynb"):
        shutil.copy2(p, tmp_path / "book" / p.name)
    shutil.copy2(ROOT / "tests" / "test_book.py", tmp_path / "tests" / "test_book.py")
    old = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]

    url, release = "https://github.com/some-teacher/attnlab-fork", "v9.8.7"
    changed = retarget.retarget(tmp_path, url=url, release=release)
    assert len(changed) == len(CHAPTERS)
    repo = yaml.safe_load((tmp_path / "_config.yml").read_text())["repository"]
    assert (repo["url"], repo["branch"]) == (url, release)
    files = [tmp_path / "_config.yml", *(tmp_path / "book" / "md").glob("*.md"), *(tmp_path / "book").glob("*.ipynb")]
    for f in files:
        text = f.read_text()
        assert old["url"] not in text, f"{f.name} still names {old['url']}"
        specs = re.findall(r"git\+(https://[^\s\"'\\]+)", text)
        assert all(s == f"{url}@{release}" for s in specs), (f.name, specs)
        if f.suffix in (".md", ".ipynb"):
            assert len(specs) == 1, f.name
    # outputs of the notebooks are kept by the sync
    nb = nbformat.read(tmp_path / "book" / "06_phase_transition.ipynb", as_version=4)
    assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code")
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                          "--rootdir", str(tmp_path), str(tmp_path / "tests" / "test_book.py"),
                          "-k", "installs_attnlab or repository_url or identical_cells"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:]
    assert " passed" in res.stdout and "failed" not in res.stdout


def test_unknown_chapter_is_one_line_not_a_traceback(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        build_course.main(["--out", str(tmp_path), "--chapters", "99_nope", "--parts", "student", "--no-html"])
    assert exit_.value.code == 2
    assert "unknown chapters ['99_nope']" in capsys.readouterr().err


def test_without_npm_the_slides_are_refused_before_any_part(monkeypatch, tmp_path, capsys):
    """No npm and no fetched reveal.js: an error naming the other parts (argparse's usage line,
    then the error line), exit 2, nothing built
    (the slides come third: the student and instructor parts must not be built first, then lost)."""
    real = shutil.which
    monkeypatch.setattr(build_course, "VENDOR_CACHE", tmp_path / "no-vendor")
    no_npm = lambda name, *a, **k: None if name == "npm" else real(name, *a, **k)
    monkeypatch.setattr(build_course.shutil, "which", no_npm)
    with pytest.raises(SystemExit) as exc:
        build_course.main(["--out", str(tmp_path / "out"), "--no-html"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and "need npm" in err and "--parts student,instructor,assignments" in err, err
    assert not (tmp_path / "out").exists()


def test_failing_npm_pack_refuses_the_slides_before_any_part(monkeypatch, tmp_path, capsys):
    """npm installed but ``npm pack`` failing (offline): one error line with npm's last line and the
    other parts, exit 2, nothing built, no traceback."""
    fake = tmp_path / "bin" / "npm"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'npm error network request to https://registry.npmjs.org failed' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(build_course, "VENDOR_CACHE", tmp_path / "no-vendor")
    with pytest.raises(SystemExit) as exc:
        build_course.main(["--out", str(tmp_path / "out"), "--no-html"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exc.value.code == 2 and "npm pack" in err and "registry.npmjs.org failed" in err, err
    assert "--parts student,instructor,assignments" in err, err
    assert not (tmp_path / "out").exists()
