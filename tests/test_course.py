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
sys.path.insert(0, str(ROOT / "tests"))
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
        # everything else is kept (the markdown as Jupyter shows it), with an answer cell after each exercise
        kept = [c for c in full.cells if "solution" not in c.metadata.get("tags", [])]
        shown = [c for c in student.cells if "answer" not in c.metadata.get("tags", [])]
        assert [c.source for c in shown if c.cell_type == "code"] == [c.source for c in kept if c.cell_type == "code"]
        assert len(shown) == len(kept), name


@pytest.mark.course
def test_student_notebooks_read_as_jupyter_shows_them(course):
    """No MyST markup in Jupyter (directives, roles, targets): exercises titled as in the book, each
    followed by an empty answer cell."""
    for name in CHAPTERS:
        student = nbformat.read(course / "student" / "notebooks" / f"{name}.ipynb", as_version=4)
        text = "\n".join(c.source for c in student.cells if c.cell_type == "markdown")
        assert not re.search(r"^(:{3,}|`{3,})\{", text, flags=re.M), name
        assert not re.search(r"\{\w+(:\w+)?\}`", text), (name, re.search(r".{30}\{\w+(:\w+)?\}`.{30}", text))
        assert not re.search(r"^\([\w-]+\)=", text, flags=re.M), name
        n_ex = len(re.findall(r"^:{3,}\{exercise\}", (BOOK / "md" / f"{name}.md").read_text(), flags=re.M))
        answers = [i for i, c in enumerate(student.cells) if "answer" in c.metadata.get("tags", [])]
        assert len(answers) == n_ex, name
        for i in answers:
            before = student.cells[i - 1]
            assert before.cell_type == "markdown" and "**Exercise" in before.source or \
                "answer" in before.metadata.get("tags", []), (name, i)
            assert student.cells[i].source.startswith("# Your answer to Exercise")


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


def test_tall_figure_is_cut_into_rows_and_a_square_one_is_not():
    """Chapter 5's six-panel figure (three rows of two) becomes two pieces, each at most about as
    tall as wide, the full width of the original; a
    square figure stays whole."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    nb = build_course.read_chapter("05_state_evolution")
    tall = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            png = o.get("data", {}).get("image/png")
            if png:
                img = Image.open(io.BytesIO(base64.b64decode(png)))
                if img.size[1] > 1.2 * img.size[0]:
                    tall.append(base64.b64decode(png))
    assert tall, "no tall figure in Chapter 5"
    pieces = build_course.split_tall_figure(tall[0])
    whole = Image.open(io.BytesIO(tall[0]))
    sizes = [Image.open(io.BytesIO(p)).size for p in pieces]
    assert len(pieces) >= 2 and sum(h for _, h in sizes) == whole.size[1]
    assert all(w == whole.size[0] and h <= 1.0 * w for w, h in sizes), sizes
    square = io.BytesIO()
    Image.fromarray(np.full((300, 320, 3), 255, np.uint8)).save(square, format="PNG")
    assert build_course.split_tall_figure(square.getvalue()) == [square.getvalue()]


def test_slide_points_name_existing_sections():
    """Every section of book/course/slides/points.yml is a heading of its chapter (a renamed heading
    would silently lose its slide text), and its slide shows the points, the book's text in the notes."""
    points = build_course.slide_points()
    assert len(points) == len(CHAPTERS)
    for name, sections in points.items():
        headings = {re.sub(r"^#+\s*", "", h).strip()
                    for h in re.findall(r"^##? .+$", (BOOK / "md" / f"{name}.md").read_text(), flags=re.M)}
        assert not set(sections) - headings, (name, sorted(set(sections) - headings))
    lecture = next(lec for lec in PLAN["lectures"] if "02_solvable_model" in lec["chapters"])
    cells = build_course.lecture_notebook(lecture).cells
    i = next(i for i, c in enumerate(cells) if c.source.startswith("## The teacher"))
    assert cells[i].source.count("\n* ") == len(points["02_solvable_model"]["The teacher"])
    assert cells[i + 1].metadata["slideshow"]["slide_type"] == "notes"
    assert "produced by a *teacher*" in cells[i + 1].source


_MEASURE_SLIDES = """
const R = window.Reveal, out = [];
for (const s of R.getSlides()) {
  const i = R.getIndices(s);
  R.slide(i.h, i.v);
  out.push([i.h, i.v || 0, s.scrollHeight, s.scrollWidth, (s.textContent || '').trim().slice(0, 50)]);
}
return out;"""


@pytest.mark.course
def test_no_slide_overflows_1280x720(course):
    """Every slide of every deck fits the 1280x720 slide in Chromium (no scrolling slide); deck
    titles name the lecture; citations read author-year; the slides carry speaker notes."""
    import time

    from browser import start_chromium

    for lec in PLAN["lectures"]:
        deck = course / "slides" / f"lecture{lec['number']:02d}.html"
        text = deck.read_text()
        assert f"<title>Lecture {lec['number']}: {lec['title']}</title>" in text
        assert "chapters 0" not in text and 'class="notes"' in text
        for key in build_course.bibliography():
            assert key not in text, (deck.name, key)
        drv = start_chromium(1280, 720)
        try:
            drv.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                {"width": 1280, "height": 720, "deviceScaleFactor": 1, "mobile": False})
            drv.get(deck.as_uri())
            for _ in range(150):
                if drv.execute_script("return !!(window.Reveal && window.Reveal.isReady && window.Reveal.isReady())"):
                    break
                time.sleep(0.2)
            drv.execute_script("return MathJax.Hub.Queue(['Typeset', MathJax.Hub])")
            time.sleep(2)  # MathJax typesets every slide (it changes their heights)
            slides = drv.execute_script(_MEASURE_SLIDES)
        finally:
            drv.quit()
        assert len(slides) >= 10, deck.name
        tall = [s for s in slides if s[2] > 720 or s[3] > 1280]
        assert not tall, f"{deck.name}: slides larger than 1280x720: {tall}"


import grade_folder  # noqa: E402
import wrong_submissions  # noqa: E402


@pytest.mark.course
@pytest.mark.parametrize("number", [lec["number"] for lec in PLAN["lectures"]])
def test_problem_set_bundle_and_student_notebook(course, number):
    """The bundle installs attnlab from its own wheel on Python 3.11 and holds the requirements.txt
    the course plan promises; the student notebook starts with the chapters' install cell (attnlab with
    otter-grader), has no solution and no hidden test, and carries its public tests for Colab."""
    import zipfile

    ps = course / "assignments" / f"ps{number}"
    bundle = zipfile.ZipFile(ps / "autograder" / "autograder.zip")
    env = yaml.safe_load(bundle.read("environment.yml"))
    assert "python=3.11" in env["dependencies"]
    # attnlab from the wheel of this checkout that the bundle carries, not from the repository
    (wheel,) = [n for n in bundle.namelist() if n.startswith("attnlab-") and n.endswith(".whl")]
    assert f"/autograder/source/{wheel}" in env["dependencies"][-1]["pip"]
    assert f"/autograder/source/{wheel}" in bundle.read("requirements.txt").decode()
    assert "git+" not in bundle.read("environment.yml").decode()
    assert json.loads(bundle.read("otter_config.json"))["show_hidden"] is True
    nb = nbformat.read(ps / "student" / f"ps{number}.ipynb", as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "remove-cell" in first.metadata["tags"]
    assert f'%pip install --quiet "attnlab[notebook] @ {build_course.release_spec()}"' in first.source
    assert "import otter" in first.source
    text = nbformat.writes(nb) + "".join(p.read_text() for p in (ps / "student" / "tests").glob("*.py"))
    assert "BEGIN SOLUTION" not in text and "'hidden': True" not in text and "hidden: true" not in text
    assert "_PUBLIC_TESTS" in text and "'hidden': False" in text
    # the export cell: students submit the zip it makes
    assert any("grader.export(" in c.source for c in nb.cells)


def _fresh_grading_env(source: Path, root: Path, where: Path) -> Path:
    """A new virtual environment built as the bundle's ``setup.sh`` builds Gradescope's: the Python
    of its ``environment.yml``, then that file's conda packages and its pip list (otter-grader, a CPU
    torch index, attnlab from the bundle's own wheel), with ``/autograder`` at ``root``. Only conda
    itself is replaced by a venv (setup.sh fetches Miniforge from GitHub). Returns its python."""
    env = yaml.safe_load((source / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    (version,) = [d.split("=", 1)[1] for d in conda if d.startswith("python=")]
    python = shutil.which(f"python{version}")
    assert python, f"the bundle's environment.yml asks for Python {version}; this machine has no python{version}"
    subprocess.run([python, "-m", "venv", str(where)], check=True)
    (pip_list,) = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    lines = [d for d in conda if d.split("=")[0] not in ("python", "pip")] + pip_list
    reqs = where / "requirements.txt"
    reqs.write_text("\n".join(line.replace("/autograder", str(root)) for line in lines) + "\n")
    res = subprocess.run([str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", "--retries", "0",
                          "-r", str(reqs)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return where / "bin" / "python"


def _gradescope_run(python: Path, root: Path, notebook: Path) -> dict:
    """Gradescope's run: the export zip of ``notebook`` unpacked into ``/autograder/submission``, then
    ``run_autograder``'s ``python /autograder/source/run_otter.py``; returns ``results.json``."""
    import zipfile

    for sub in ("submission", "results"):
        shutil.rmtree(root / sub, ignore_errors=True)
        (root / sub).mkdir()
    with zipfile.ZipFile(root / "export.zip", "w") as z:
        z.write(notebook, "ps1.ipynb")
    zipfile.ZipFile(root / "export.zip").extractall(root / "submission")
    script = (root / "source" / "run_otter.py").read_text().replace('"/autograder"', repr(str(root)))
    assert repr(str(root)) in script
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    res = subprocess.run([str(python), "-c", script], capture_output=True, text=True, cwd=root / "source", env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return json.loads((root / "results" / "results.json").read_text())


@pytest.mark.course
def test_bundle_sets_up_and_grades_in_a_fresh_environment(course, tmp_path):
    """The bundle as Gradescope runs it: unzipped into ``/autograder/source`` (here a temporary
    folder), its environment built afresh from its own ``environment.yml`` (Python 3.11, otter-grader,
    attnlab from the wheel inside the bundle: no repository access, no release tag), then
    ``run_autograder`` on two submissions: the solution scores full, a wrong one (1/d instead of
    1/(2d)) scores 0 on that question. Hidden results show once grades are published."""
    import zipfile

    ps = course / "assignments" / "ps1"
    root = tmp_path / "autograder"
    bundle = zipfile.ZipFile(ps / "autograder" / "autograder.zip")
    bundle.extractall(root / "source")
    source = root / "source"
    assert "mamba env create -f /autograder/source/environment.yml" in (source / "setup.sh").read_text()
    assert "python /autograder/source/run_otter.py" in (source / "run_autograder").read_text()
    (wheel,) = source.glob("attnlab-*.whl")
    assert f"/autograder/source/{wheel.name}" in (source / "requirements.txt").read_text()
    python = _fresh_grading_env(source, root, tmp_path / "env")
    # attnlab is the bundle's wheel, installed into the fresh environment (not this checkout)
    where = subprocess.run([str(python), "-c", "import attnlab; print(attnlab.__file__, attnlab.__version__)"],
                           capture_output=True, text=True, env={"PATH": os.environ["PATH"]}, cwd=tmp_path)
    assert where.returncode == 0 and where.stdout.startswith(str(tmp_path / "env")), where.stdout + where.stderr
    import attnlab

    assert where.stdout.split()[1] == attnlab.__version__

    results = _gradescope_run(python, root, ps / "solutions" / "ps1.ipynb")
    tests = [t for t in results["tests"] if t["name"] != "Public Tests"]
    assert tests and all(t["score"] == t["max_score"] > 0 for t in tests), tests
    assert all(t.get("visibility") in (None, "visible", "after_published") for t in results["tests"])

    # the first wrong submission of ps1 (a uniform constant for q1), made as the grading test makes it
    entry = wrong_submissions.wrong_set("ps1")[0]
    nb, wrong = wrong_submissions.make_wrong(nbformat.read(ps / "solutions" / "ps1.ipynb", as_version=4), entry)
    (question,) = wrong
    made = tmp_path / "wrong" / "ps1.ipynb"
    made.parent.mkdir()
    nbformat.write(nb, made)
    graded = _gradescope_run(python, root, made)["tests"]
    hit = [t for t in graded if t["name"].startswith(question)]
    assert hit and sum(t["score"] for t in hit) == wrong[question] == 0, (entry, hit)


def _scores(csv_path: Path) -> dict:
    import csv

    with open(csv_path) as f:
        return {row["submission"]: row for row in csv.DictReader(f)}


@pytest.mark.course
@pytest.mark.grading
@pytest.mark.parametrize("number", [lec["number"] for lec in PLAN["lectures"]])
def test_wrong_submissions_score_low(course, number, tmp_path):
    """Every problem set's wrong submissions (book/course/grading/wrong_submissions.yml: constants,
    factor-2 slips, a wrong softmax axis, swapped starts, sign errors), graded as the instructor
    grades a class (grade_folder.py over a folder, otter run each): the wrong question scores at most
    its declared partial credit (0 for all but partly right work); the solution scores full, the
    untouched student notebook 0; where a cell stops with the student's own error, the feedback
    shows it."""
    pytest.importorskip("otter")
    ps = course / "assignments" / f"ps{number}"
    folder = tmp_path / "submissions"
    wrong = wrong_submissions.write_wrong_set(f"ps{number}", ps / "solutions" / f"ps{number}.ipynb", folder)
    assert len(wrong) >= 4
    shutil.copy2(ps / "solutions" / f"ps{number}.ipynb", folder / "solution.ipynb")
    shutil.copy2(ps / "student" / f"ps{number}.ipynb", folder / "stub.ipynb")
    out = tmp_path / "graded" / "class"  # does not exist yet: the command creates it
    res = subprocess.run([sys.executable, str(BOOK / "_scripts" / "grade_folder.py"),
                          str(ps / "autograder" / "autograder.zip"), str(folder), "-o", str(out),
                          "-j", str(max(1, min(4, os.cpu_count() or 1)))], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = _scores(out / "scores.csv")
    assert set(rows) == set(wrong) | {"solution.ipynb", "stub.ipynb"}
    full = float(rows["solution.ipynb"]["max"])
    assert full > 0 and float(rows["solution.ipynb"]["total"]) == full, rows["solution.ipynb"]
    assert float(rows["stub.ipynb"]["total"]) == 0, rows["stub.ipynb"]
    for name, spec in wrong.items():
        for q, most in spec["max"].items():
            assert float(rows[name][q]) <= most, f"ps{number} {name}: {q} scores {rows[name][q]}, at most {most}"
        if spec["feedback"]:
            text = (out / Path(name).stem / "results.json").read_text()
            assert spec["feedback"] in text, f"ps{number} {name}: the feedback does not show {spec['feedback']!r}"
    print(res.stdout)


def test_grade_folder_refuses_bad_arguments(tmp_path, capsys):
    """One line and exit 2 for a missing bundle, a missing folder or a folder without submissions."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "bundle.zip").write_bytes(b"")
    for argv, words in ((["nope.zip", str(tmp_path), "-o", str(tmp_path / "o")], "no file"),
                        ([str(tmp_path / "bundle.zip"), str(tmp_path / "nope"), "-o", str(tmp_path / "o")], "no folder"),
                        ([str(tmp_path / "bundle.zip"), str(tmp_path / "empty"), "-o", str(tmp_path / "o")], "no .ipynb")):
        with pytest.raises(SystemExit) as exc:
            grade_folder.main(argv)
        assert exc.value.code == 2 and words in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.course
def test_student_html_hides_solutions(tmp_path):
    """The student HTML build of one chapter (the preface: fast to execute) has no solution, and its
    launch buttons open the student repository (``--student-repo``)."""
    found = build_course.build_student_html(tmp_path, ["00_preface"], "https://github.com/teacher/ps-students@2026")
    assert found == {}
    page = (tmp_path / "student" / "html" / "book" / "00_preface.html").read_text()
    assert "ex-ch0-params" in page or "Exercise" in page  # the exercises are there
    assert "solution-content" not in page and "Every parameter is validated" not in page
    # the page's download button serves the student notebook; the launch buttons open the student
    # repository's notebooks, not the release's full chapters; no "Notes for instructors" in the sidebar
    assert '_sources/book/00_preface.ipynb' in page
    main = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert main not in page and main.replace("https://github.com/", "") not in page
    assert "https://colab.research.google.com/github/teacher/ps-students/blob/2026/notebooks/00_preface.ipynb" in page
    assert "urlpath=lab/tree/notebooks/00_preface.ipynb" in page and "mybinder.org/v2/gh/teacher/ps-students/2026" in page
    assert "Notes for instructors" not in page and "instructor_notes" not in page
    served = nbformat.read(tmp_path / "student" / "html" / "_sources" / "book" / "00_preface.ipynb", as_version=4)
    assert not any("solution" in c.metadata.get("tags", []) for c in served.cells)
    assert "Every parameter is validated" not in nbformat.writes(served)


def test_student_edition_without_student_repo_has_no_launch_buttons(tmp_path):
    """The default student edition: no Colab, Binder or live-code button and no repository icon
    (they would open the release's full chapters); the full book's table of contents without the
    instructor notes."""
    cfg = yaml.safe_load(build_course.student_config(tmp_path / "out").read_text())
    assert "repository" not in cfg and cfg["html"]["use_repository_button"] is False
    assert cfg["launch_buttons"]["binderhub_url"] == cfg["launch_buttons"]["colab_url"] == ""
    assert cfg["launch_buttons"]["thebe"] is False
    toc = build_course.student_toc(tmp_path / "out", CHAPTERS).read_text()
    assert "instructor_notes" not in toc and "book/appendix/course_plan" in toc


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
