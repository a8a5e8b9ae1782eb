#!/usr/bin/env python
"""Build the course module of the attnlab book from the chapters' tags.

    python book/_scripts/build_course.py --out _build/course

writes, under ``--out``:

``student/``
    ``notebooks/``: every chapter with the cells tagged ``solution`` removed
    (nbconvert's ``TagRemovePreprocessor``; no hand-kept copy), and ``html/``: the HTML
    book built with sphinx-exercise's ``hide_solutions`` through a second configuration
    (``_config_student.yml``, made from ``_config.yml``) passed to ``jupyter-book build
    --config``. It reuses the main build's execution cache (``_build/.jupyter_cache``).
``instructor/``
    the full notebooks, ``answers.md`` (every exercise with its solution code, outputs and
    text, numbers filled in from the glued outputs), the project list and the course plan.
``slides/``
    one reveal.js deck per lecture of ``book/course/course_plan.yml``, made with nbconvert
    ``--to slides`` from the chapters' executed notebooks; reveal.js, MathJax, require.js
    and jQuery are copied next to the decks (from the npm registry's packages, fetched once
    with ``npm pack`` into ``_build/.course_vendor``), so the decks work offline.
``assignments/``
    one otter-grader problem set per lecture, from ``book/course/assignments/psN.md``:
    ``psN/student/`` (the notebook with stubs and public tests), ``psN/autograder/``
    (``autograder.zip`` with the hidden tests, for ``otter run``) and ``psN/solutions/``.

Scratch files (the student build's Sphinx tree and configuration, otter's sources with
the answers, the slides' template) go to ``.NAME-work`` beside ``--out``, never into the
hand-outs. Every part can be built alone (``--parts student,slides``) and for some chapters only
(``--chapters 01_positional_semantic``; ``--no-html`` skips the student HTML build).
The build fails when a student notebook or page still contains solution code or text.
"""
from __future__ import annotations

import argparse
import copy
import functools
import html
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
COURSE = BOOK / "course"
PARTS = ("student", "instructor", "slides", "assignments")

#: npm packages copied next to the slide decks (what nbconvert's reveal template loads).
VENDOR = {"reveal.js": "4.6.0", "mathjax": "2.7.9", "requirejs": "2.3.8", "jquery": "3.7.1"}
VENDOR_CACHE = ROOT / "_build" / ".course_vendor"


# --------------------------------------------------------------------------- course plan

def chapter_names() -> list[str]:
    return sorted(p.stem for p in BOOK.glob("[0-9][0-9]_*.ipynb"))


def chapter_minutes(name: str) -> int:
    """The chapter's own "Estimated time" (its MyST source), in minutes."""
    text = (BOOK / "md" / f"{name}.md").read_text()
    m = re.search(r"\*\*Estimated time[^*]*:\*\* (\d+) minutes", text)
    if not m:
        raise ValueError(f"{name}: no '**Estimated time:** N minutes'")
    return int(m.group(1))


def course_plan() -> dict:
    """course_plan.yml with each lecture's minutes = the sum of its chapters' estimates."""
    plan = yaml.safe_load((COURSE / "course_plan.yml").read_text())
    for i, lec in enumerate(plan["lectures"], 1):
        lec["number"] = i
        lec["minutes"] = sum(chapter_minutes(c) for c in lec["chapters"])
    plan["total_minutes"] = sum(lec["minutes"] for lec in plan["lectures"])
    return plan


# --------------------------------------------------------------------------- notebooks

def read_chapter(name: str):
    return nbformat.read(BOOK / f"{name}.ipynb", as_version=4)


def remove_tagged(nb, tags=("solution",), input_tags=()):
    """A copy of ``nb`` without the cells tagged ``tags`` (nbconvert TagRemovePreprocessor)."""
    from nbconvert.preprocessors import TagRemovePreprocessor

    pre = TagRemovePreprocessor(remove_cell_tags=set(tags), remove_input_tags=set(input_tags))
    pre.enabled = True
    out, _ = pre.preprocess(copy.deepcopy(nb), {})
    return out


def glued(nb) -> dict:
    """The values glued by the notebook's cells (MyST-NB ``glue``), as their text/plain."""
    values = {}
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook")
            if meta:
                prefix = meta.get("mime_prefix", "")
                text = out.get("data", {}).get(prefix + "text/plain")
                if text is not None:
                    values[meta["name"]] = text
    return values


def fill_glue(text: str, values: dict) -> str:
    """Replace ``{glue:text}`key:fmt` `` (and ``{glue}``) roles by the glued values."""
    from myst_nb.core.variables import format_plain_text

    def one(m):
        key, _, fmt = m.group(2).partition(":")
        if key not in values:
            return m.group(0)
        return format_plain_text(values[key], fmt)

    return re.sub(r"\{glue(:text|:any)?\}`([^`]+)`", one, text)


def solution_fingerprints(nb) -> list[str]:
    """Lines of the solution cells that must not appear in a student edition.

    Code: every line of at least 20 characters. Text: lines of at least 30 characters
    without markup that the HTML renders differently (math, roles, emphasis)."""
    prints = []
    public = " ".join(" ".join(c.source.split()) for c in nb.cells
                      if "solution" not in c.metadata.get("tags", []))
    for cell in nb.cells:
        if "solution" not in cell.metadata.get("tags", []):
            continue
        for line in cell.source.splitlines():
            s = " ".join(line.split())
            if cell.cell_type == "code":
                if len(s) >= 20 and not s.startswith("#"):
                    prints.append(s)
            elif len(s) >= 30 and not re.search(r"[$`{}*_:\\|]", s) and not s.startswith(("-", "1.", "2.", "3.", "4.")):
                prints.append(s)
    return [s for s in prints if s not in public]  # e.g. code quoted by the exercise itself


def html_text(page: str) -> str:
    """Visible text of an HTML page, whitespace-normalised."""
    page = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", page)).split())


def leaks(text: str, fingerprints: list[str]) -> list[str]:
    text = " ".join(text.split())
    return [f for f in fingerprints if f in text]


# --------------------------------------------------------------------------- student

_EXERCISE_LABEL = re.compile(r"^(:{3,})\{exercise\}[^\n]*\n:label: (\S+)$", re.M)


def student_markdown(src: str, values: dict) -> str:
    """A chapter's MyST markdown as Jupyter shows it: directives unwrapped under a bold title
    (an exercise titled as in the book, "Exercise 3.2"), roles and glued numbers as text,
    targets ``(label)=`` dropped."""
    titles = label_titles()
    src = _EXERCISE_LABEL.sub(lambda m: f"{m.group(1)}{{exercise}} {titles.get(m.group(2), 'Exercise')}", src)
    src = re.sub(r"^\([\w-]+\)=\s*$\n?", "", src, flags=re.M)
    return slide_markdown(src, values, BIB)


def student_notebook(full):
    """The student notebook of a chapter: no solution cells, no MyST markup in its markdown cells
    (:func:`student_markdown`), and an empty answer cell after every exercise."""
    nb = remove_tagged(full)
    values = glued(full)
    cells = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            cells.append(cell)
            continue
        titles = [label_titles().get(label, "the exercise") for label in
                  re.findall(r"^:{3,}\{exercise\}[^\n]*\n:label: (\S+)$", cell.source, flags=re.M)]
        cell.source = student_markdown(cell.source, values)
        cells.append(cell)
        for title in titles:
            answer = nbformat.v4.new_code_cell(f"# Your answer to {title} (code here; for a written answer,"
                                               " change this cell to Markdown)\n")
            answer.metadata["tags"] = ["answer"]
            cells.append(answer)
    nb.cells = cells
    return nb


def build_student(out: Path, chapters: list[str], html_build: bool, student_repo: str | None = None) -> dict:
    dest = out / "student" / "notebooks"
    dest.mkdir(parents=True, exist_ok=True)
    _copy_data(dest)
    found = {}
    for name in chapters:
        full = read_chapter(name)
        student = student_notebook(full)
        nbformat.write(student, dest / f"{name}.ipynb")
        bad = leaks(json.dumps([c.source for c in student.cells]), solution_fingerprints(full))
        bad += leaks(nbformat.writes(student), solution_fingerprints(full))
        if bad:
            found[f"student/notebooks/{name}.ipynb"] = bad
    if html_build:
        found.update(build_student_html(out, chapters, student_repo))
    if found:
        raise SystemExit(f"solution code or text in the student edition: {found}")
    return {"notebooks": len(chapters)}


#: Pages of the book that the student edition leaves out of its table of contents (and sidebar).
INSTRUCTOR_ONLY = ("book/appendix/instructor_notes",)


def student_config(out: Path, student_repo: str | None = None) -> Path:
    """_config.yml with hide_solutions, written next to the student edition.

    The launch buttons and the repository icon of the book open the release's full chapters
    (solutions and all). Without ``student_repo`` the student edition has neither (and no
    "live code", whose Binder session holds the full repository); a page's download button
    serves the student notebook. With ``student_repo`` (``URL@BRANCH``, a repository that holds
    only the student notebooks, in ``notebooks/``: :data:`STUDENT_REPO_LAYOUT`) they open that."""
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text())
    cfg["title"] = cfg["title"] + " (student edition)"
    sphinx_cfg = cfg.setdefault("sphinx", {}).setdefault("config", {})
    sphinx_cfg["hide_solutions"] = True
    # the preface's link to the instructor notes (a page the student edition does not have)
    # reads as plain text; the main build checks every link of the same sources
    sphinx_cfg["suppress_warnings"] = [*sphinx_cfg.get("suppress_warnings", []), "myst.xref_missing"]
    cfg.setdefault("execute", {})["cache"] = str(ROOT / "_build" / ".jupyter_cache")
    if student_repo:
        url, _, branch = student_repo.partition("@")
        cfg["repository"] = {"url": url, "path_to_book": "notebooks", "branch": branch or "main"}
        cfg["launch_buttons"]["thebe"] = False
    else:
        cfg.pop("repository", None)
        cfg["html"]["use_repository_button"] = False
        cfg["launch_buttons"] = {"notebook_interface": cfg["launch_buttons"]["notebook_interface"],
                                 "binderhub_url": "", "colab_url": "", "thebe": False}
    # jupyter-book resolves the local extensions' folders against the config file's folder
    local = cfg.get("sphinx", {}).get("local_extensions") or {}
    cfg["sphinx"]["local_extensions"] = {k: str(ROOT / v) for k, v in local.items()}
    path = work_dir(out) / "_config_student.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Made by book/_scripts/build_course.py from _config.yml: do not edit.\n"
                    + yaml.safe_dump(cfg, sort_keys=False))
    return path


#: Where the launch buttons of a student edition built with ``--student-repo URL@BRANCH`` look:
#: the ``student/notebooks/`` folder of the build, pushed as ``notebooks/`` of that repository.
STUDENT_REPO_LAYOUT = "notebooks/NN_name.ipynb (the build's student/notebooks/ folder)"


def student_toc(out: Path, chapters: list[str]) -> Path:
    """The table of contents of the student edition: ``_toc.yml`` without :data:`INSTRUCTOR_ONLY`
    (for some chapters only: those chapters)."""
    if sorted(chapters) == chapter_names():
        toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
        for part in toc["parts"]:
            part["chapters"] = [c for c in part["chapters"] if c["file"] not in INSTRUCTOR_ONLY]
    else:  # some chapters only: their own table of contents; links to the others warn
        toc = {"format": "jb-book", "root": f"book/{chapters[0]}"}
        if chapters[1:]:
            toc["chapters"] = [{"file": f"book/{c}"} for c in chapters[1:]]
    path = work_dir(out) / "_toc_student.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(toc, sort_keys=False))
    return path


def build_student_html(out: Path, chapters: list[str], student_repo: str | None = None) -> dict:
    cfg = student_config(out, student_repo)
    work = work_dir(out) / "student_build"
    cmd = ["jupyter-book", "build", str(ROOT), "--config", str(cfg), "--path-output", str(work),
           "--toc", str(student_toc(out, chapters)), "-n", "--keep-going"]
    if sorted(chapters) == chapter_names():
        cmd.append("-W")  # the whole book: warning-free, like the main build
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"student HTML build failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}")
    target = out / "student" / "html"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(work / "_build" / "html", target)
    found = {}
    for name in chapters:
        full = read_chapter(name)
        # the pages' download button serves _sources/: the student notebook, not the full one
        source = target / "_sources" / "book" / f"{name}.ipynb"
        if source.exists():
            nbformat.write(student_notebook(full), source)
        page = target / "book" / f"{name}.html"
        if page.exists() and student_repo:
            # the theme opens PATH_TO_BOOK/book/NAME.ipynb; the student repository holds notebooks/NAME.ipynb
            page.write_text(page.read_text().replace("/notebooks/book/", "/notebooks/"))
        prints = solution_fingerprints(full)
        for path in (page, source):
            if path.exists():
                text = path.read_text()
                bad = leaks(html_text(text) if path.suffix == ".html" else text, prints)
                if bad:
                    found[str(path.relative_to(out))] = bad
    return found


def _copy_data(dest: Path):
    if (dest / "_data").exists():
        shutil.rmtree(dest / "_data")
    shutil.copytree(BOOK / "_data", dest / "_data")


# --------------------------------------------------------------------------- instructor

def answers_markdown(chapters: list[str]) -> str:
    """Every exercise of the chapters with its solution: code, text outputs and text."""
    lines = ["# Answers to the exercises", "",
             "Made by `book/_scripts/build_course.py` from the executed chapter notebooks: the",
             "code is that of the solution cells, the outputs and the numbers are those of the",
             "committed run.", ""]
    for name in chapters:
        nb = read_chapter(name)
        values = glued(nb)
        title = next(c.source.splitlines()[0].lstrip("# ") for c in nb.cells if c.cell_type == "markdown")
        lines += [f"## {name[:2]}. {title}", ""]
        for cell in nb.cells:
            src = cell.source
            tags = cell.metadata.get("tags", [])
            if cell.cell_type == "markdown" and "{exercise}" in src:
                for block in re.findall(r":{3,}\{exercise\}.*?\n(.*?)\n:{3,}\s*$", src, flags=re.S | re.M):
                    label = re.search(r":label: (\S+)", block)
                    body = re.sub(r":label: \S+\n", "", block).strip()
                    lines += [f"### Exercise `{label.group(1) if label else ''}`", "",
                              plain_roles(fill_glue(body, values), BIB), ""]
            elif "solution" in tags and "remove-cell" not in tags:
                if cell.cell_type == "code":
                    lines += ["```python", src.rstrip(), "```", ""]
                    text = "".join(o.get("text", "") for o in cell.get("outputs", [])
                                   if o.get("output_type") == "stream")
                    text += "".join(o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", [])
                                    if o.get("output_type") == "execute_result")
                    if text.strip():
                        lines += ["Output:", "", "```text", text.rstrip(), "```", ""]
                else:
                    body = re.sub(r"^:{3,}\{solution(?:-start|-end)?\}.*\n(:class: \S+\n)?(:{3,}\n)?", "",
                                  src + "\n", flags=re.M)
                    body = re.sub(r"^:{3,}\s*$", "", body, flags=re.M).strip()
                    if body:
                        lines += ["**Answer.** " + plain_roles(fill_glue(body, values), BIB), ""]
    return "\n".join(lines) + "\n"


def build_instructor(out: Path, chapters: list[str]) -> dict:
    dest = out / "instructor"
    (dest / "notebooks").mkdir(parents=True, exist_ok=True)
    _copy_data(dest / "notebooks")
    for name in chapters:
        shutil.copy2(BOOK / f"{name}.ipynb", dest / "notebooks" / f"{name}.ipynb")
    (dest / "answers.md").write_text(answers_markdown(chapters))
    shutil.copy2(BOOK / "appendix" / "projects.md", dest / "projects.md")
    if (dest / "projects").exists():
        shutil.rmtree(dest / "projects")
    shutil.copytree(COURSE / "projects", dest / "projects")
    plan = course_plan()
    rows = ["# Course plan", "", "| Lecture | Title | Chapters | Minutes |", "|---|---|---|---|"]
    rows += [f"| {l['number']} | {l['title']} | {', '.join(l['chapters'])} | {l['minutes']} |"
             for l in plan["lectures"]]
    rows += ["", f"Total: {plan['total_minutes']} minutes.", ""]
    for w in plan["weeks"]:
        rows += [f"## Week {w['week']}", ""] + [f"* {' | '.join(d)}" for d in w["days"]] + [""]
    (dest / "course_plan.md").write_text("\n".join(rows))
    return {"answers": (dest / "answers.md").read_text().count("### Exercise")}


# --------------------------------------------------------------------------- slides

NO_NPM = "the slides need npm once, to fetch reveal.js and MathJax (npm pack)"


def vendor_cached() -> bool:
    """Whether :func:`vendor` has its packages without fetching them."""
    done = VENDOR_CACHE / "complete"
    return done.exists() and done.read_text() == json.dumps(VENDOR)


class VendorError(RuntimeError):
    """The slides' packages are not cached and cannot be fetched (no npm, or ``npm pack`` failed)."""


def vendor() -> Path:
    """reveal.js, MathJax 2, require.js and jQuery from the npm registry (npm pack), cached.
    Raises :class:`VendorError` (one line) without npm or when ``npm pack`` fails (offline)."""
    if vendor_cached():
        return VENDOR_CACHE
    if shutil.which("npm") is None:
        raise VendorError(f"{NO_NPM}: install Node.js")
    done = VENDOR_CACHE / "complete"
    if VENDOR_CACHE.exists():
        shutil.rmtree(VENDOR_CACHE)
    VENDOR_CACHE.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        specs = [f"{k}@{v}" for k, v in VENDOR.items()]
        run = subprocess.run(["npm", "pack", "--silent", *specs], cwd=tmp, capture_output=True, text=True)
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
            raise VendorError(f"{NO_NPM}, and `npm pack {' '.join(specs)}` failed (is the npm registry "
                              f"reachable?): {last}")
        for tgz in Path(tmp).glob("*.tgz"):
            with tarfile.open(tgz) as tar:
                tar.extractall(Path(tmp) / tgz.stem, filter="data")
        pkg = {k: next(Path(tmp).glob(f"{k}-{v}")) / "package" for k, v in VENDOR.items()}
        rv = VENDOR_CACHE / "reveal.js"
        for sub in ("dist", "plugin/notes"):
            shutil.copytree(pkg["reveal.js"] / sub, rv / sub)
        shutil.copy2(pkg["reveal.js"] / "LICENSE", rv / "LICENSE")
        mj = VENDOR_CACHE / "mathjax"
        for sub in ("MathJax.js", "LICENSE", "config/TeX-AMS_CHTML-full.js", "config/Safe.js", "extensions",
                    "jax/input/TeX", "jax/output/CommonHTML", "jax/element", "localization/en",
                    "fonts/HTML-CSS/TeX/woff"):
            src, dst = pkg["mathjax"] / sub, mj / sub
            dst.parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, dst)
        shutil.copy2(pkg["requirejs"] / "require.js", VENDOR_CACHE / "require.js")
        shutil.copy2(pkg["jquery"] / "dist" / "jquery.min.js", VENDOR_CACHE / "jquery.min.js")
    done.write_text(json.dumps(VENDOR))
    return VENDOR_CACHE


@functools.lru_cache(maxsize=1)
def bibliography() -> dict:
    """``{key: (authors, year)}`` of ``references.bib`` (pybtex, LaTeX accents decoded): authors as
    the book's author-year citations show them ("Cui et al.", "Kingma and Ba")."""
    from pybtex.database import parse_file
    from pybtex.richtext import Text

    plain = lambda latex: Text.from_latex(latex).render_as("text")
    bib = {}
    for key, entry in parse_file(str(ROOT / "references.bib")).entries.items():
        last = [plain(" ".join(person.last_names)) for person in entry.persons.get("author", [])]
        names = (last[0] if len(last) == 1 else f"{last[0]} and {last[1]}" if len(last) == 2
                 else f"{last[0]} et al.")
        bib[key] = (names, entry.fields.get("year", "n.d."))
    return bib


def cite_text(kind: str, keys: str, bib: dict | None = None) -> str:
    """A ``{cite:p}`` (parenthetical: "(Cui et al., 2024; Kingma and Ba, 2015)") or ``{cite:t}``
    (textual: "Cui et al. (2024)") role as author-year text."""
    bib = bib or bibliography()
    refs = [bib.get(k.strip(), (k.strip(), "")) for k in keys.split(",")]
    if kind == "t":
        return ", ".join(f"{a} ({y})" for a, y in refs)
    return "(" + "; ".join(f"{a}, {y}" for a, y in refs) + ")"


#: How ``{cite}`` roles read outside the book (slides, answers, student notebooks): from references.bib.
BIB = None
_ROLE = re.compile(r"\{(\w+)(?::(\w+))?\}`([^`]*)`")


@functools.lru_cache(maxsize=1)
def label_titles() -> dict:
    """The chapters' targets by label, as a ``{ref}`` or ``{prf:ref}`` role shows them in the
    book: ``(sec-x)=`` before a heading -> the heading in quotes, a prf block's ``:label:`` ->
    its title in quotes, an exercise's -> "Exercise C.K" (the K-th exercise of Chapter C)."""
    titles = {}
    for path in sorted((ROOT / "book" / "md").glob("*.md")):
        text = path.read_text()
        titles.update((label, f'"{title}"') for label, title in re.findall(r"^\((\S+)\)=\n#+ (.+)$", text, flags=re.M))
        titles.update((label, f'"{title}"') for title, label in
                      re.findall(r"^`{3,}\{prf:\w+\} (.+)\n:label: (\S+)$", text, flags=re.M))
        exercises = re.findall(r"^:{3,}\{exercise\}.*\n:label: (\S+)$", text, flags=re.M)
        titles.update((label, f"Exercise {int(path.name[:2])}.{k}") for k, label in enumerate(exercises, 1))
    return titles


def plain_roles(src: str, bib: dict) -> str:
    """MyST roles as plain text: ``{doc}`` -> "Chapter N", ``{ref}`` -> the target as the book
    shows it (:func:`label_titles`), ``{func}`` -> the name in code, ``{cite}`` -> the authors
    from ``bib``."""
    titles = label_titles()

    def role(m):
        kind, sub, text = m.group(1), m.group(2), m.group(3)
        if kind == "cite":
            return cite_text(sub or "p", text, bib)
        text = re.sub(r"^(.*)<(.*)>$", r"\1", text).strip()
        if kind in ("func", "class", "meth", "mod", "attr", "data", "obj"):
            return f"`{text.lstrip('~').split('.')[-1] if text.startswith('~') else text}`"
        if kind == "doc":
            return "Chapter " + text.split("/")[-1][:2].lstrip("0")
        if kind in ("ref", "prf") and text in titles:
            return titles[text]
        return text

    return _ROLE.sub(role, src).replace("Chapter Chapter ", "Chapter ")


def slide_markdown(src: str, values: dict, bib: dict) -> str:
    """MyST markdown -> plain markdown that nbconvert renders (directives unwrapped, roles as text)."""
    src = plain_roles(fill_glue(src, values), bib)
    out, fences = [], []  # fences: (fence, whether a directive: its closing line is dropped)
    for line in src.splitlines():
        m = re.match(r"^(:{3,}|`{3,})\{(\w[\w:-]*)\}\s*(.*)$", line)
        if m:
            fence, kind, arg = m.groups()
            fences.append((fence, True))
            if kind.startswith("prf:"):
                title = kind[4:].capitalize() + (f": {arg}" if arg else "")
            else:
                title = arg or {"exercise": "Exercise"}.get(kind, "")
            out.append(f"**{title}**" if title else "")
            continue
        if fences and _closes(line, fences[-1][0]):
            if not fences.pop()[1]:
                out.append(line)
            continue
        if re.match(r"^`{3,}", line):  # a code block, kept
            fences.append((re.match(r"^`{3,}", line).group(0), False))
        if re.match(r"^:(label|class|tags|nonumber):", line) or re.match(r"^\([\w-]+\)=\s*$", line):
            continue  # a directive's options, a target "(sec-x)=" before a heading
        out.append(line)
    return "\n".join(out).strip()


_HEADING = re.compile(r"^#{1,2} ")
_FENCE = re.compile(r"^(:{3,}|`{3,})(\{[\w:-]+\})?")
#: Directive blocks that become slides of their own, whole: exercises and prf's definitions,
#: conjectures, algorithms and remarks (the equations of a lecture).
_SLIDE_BLOCK = re.compile(r"^(:{3,}|`{3,})\{(exercise|prf:[\w-]+)\}")


def _closes(line: str, fence: str) -> bool:
    """Whether ``line`` closes a block opened by ``fence`` (``:::``, ```` ``` ````; at least as long)."""
    stripped = line.strip()
    return bool(stripped) and set(stripped) == {fence[0]} and len(stripped) >= len(fence)


def markdown_units(src: str) -> list[str]:
    """``src`` as paragraphs, headings and fenced blocks (``:::{exercise}``, ```` ```{prf:...} ````,
    code), a fenced block whole however many blank lines it holds."""
    units, current, fences = [], [], []

    def flush():
        if current:
            units.append("\n".join(current))
            current.clear()

    for line in src.splitlines():
        fence = _FENCE.match(line)
        if fences:
            current.append(line)
            if _closes(line, fences[-1]):
                fences.pop()
                if not fences:
                    flush()
            elif fence and fence.group(2):  # a directive nested in the block
                fences.append(fence.group(1))
            continue
        if not line.strip():
            flush()
            continue
        if fence and fence.group(1)[0] == ":" and not fence.group(2):
            fence = None  # a stray closing ":::" (its block removed with a solution cell): a plain line
        if fence or _HEADING.match(line):
            flush()
        current.append(line)
        if fence:
            fences.append(fence.group(1))
        elif _HEADING.match(line):
            flush()
    flush()
    return units


def chapter_slides(src: str) -> list[tuple[str, str]]:
    """The slides of one markdown cell of a chapter: ``("slide", text)`` for every ``#``/``##``
    heading (wherever it sits in the cell) with its first paragraph, and the paragraphs after
    it while the previous one ends in a colon (the equation it announces); a ``#`` title with
    everything up to the next heading (the chapter's learning goals); ``("subslide", text)``
    for every exercise and prf block, whole."""
    slides, section, growing = [], None, False
    for unit in markdown_units(src):
        if _SLIDE_BLOCK.match(unit):
            slides.append(("subslide", unit))
            growing = False  # the section's slide comes before its blocks: no text from after them
        elif _HEADING.match(unit):
            section, growing = [unit], True
            slides.append(("slide", section))
        elif growing:
            section.append(unit)
            # a lead that announces what follows (an equation after a colon, a list after "You can now")
            growing = section[0].startswith("# ") or unit.rstrip().endswith(":") or (
                len(unit) < 40 and not unit.rstrip().endswith((".", "?", "!")))
    return [(kind, "\n\n".join(body) if isinstance(body, list) else body) for kind, body in slides]


#: The slides' own text: per chapter, per section heading, the points a slide shows
#: (the section's paragraphs go to the speaker notes). Sections without points show the first
#: sentence of their first paragraph.
SLIDE_POINTS = COURSE / "slides" / "points.yml"
#: A prf block (definition, result, algorithm) longer than this is split over several slides.
BLOCK_CHARS = 520
#: Sections about the book's sliders: in a deck, a slide that sends to the book's page.
_EXPLORE = re.compile(r"^##\s+Explore\b")


@functools.lru_cache(maxsize=1)
def slide_points() -> dict:
    return yaml.safe_load(SLIDE_POINTS.read_text()) if SLIDE_POINTS.exists() else {}


def first_sentence(text: str) -> str:
    """``text`` up to the end of its first sentence (a full stop, outside ``$...$`` math)."""
    in_math = False
    for i, ch in enumerate(text):
        if ch == "$":
            in_math = not in_math
        elif ch in ".?!" and not in_math:
            end = i + 1
            while end < len(text) and text[end] in "*_)":  # the end of the emphasis it closes
                end += 1
            if end == len(text) or text[end] in " \n":
                return text[:end]
    return text


def chapter_names_text(chapters: list[str]) -> str:
    """"Preface and Chapter 1", "Chapter 5", "Chapters 2 and 3"."""
    numbers = [int(c[:2]) for c in chapters if int(c[:2]) > 0]
    parts = ["Preface"] if any(int(c[:2]) == 0 for c in chapters) else []
    if numbers:
        parts.append(("Chapter " if len(numbers) == 1 else "Chapters ")
                     + " and ".join(", ".join(map(str, numbers)).rsplit(", ", 1)))
    return " and ".join(parts)


def first_clause(text: str, shortest: int = 25) -> str:
    """``text`` up to its first ``,``, ``;`` or `` (`` outside ``$...$`` math that comes after at
    least ``shortest`` characters (a list item's point on a slide; the rest is in the notes)."""
    in_math = False
    for i, ch in enumerate(text):
        if ch == "$":
            in_math = not in_math
        elif not in_math and i >= shortest and (ch in ",;" or text.startswith(" (", i)):
            return text[:i]
    return text.rstrip(";.")


def section_slide(name: str, text: str) -> tuple[str, str]:
    """``(slide text, speaker notes)`` of a section: the heading with its points from
    :data:`SLIDE_POINTS` (or the first sentence of its first paragraph); the notes carry the
    section's paragraphs. A chapter's title keeps its learning goals."""
    heading, _, body = text.partition("\n\n")
    if heading.startswith("# ") and "**Learning goals" in body:
        before, _, goals = re.sub(r"\n*\*\*Estimated time[^\n]*", "", body).partition("**Learning goals")
        return f"{heading}\n\n**Learning goals{goals}".strip(), before.strip()
    points = slide_points().get(name, {}).get(re.sub(r"^#+\s*", "", heading).strip())
    if points:
        shown = "\n".join(f"* {p}" for p in points)
    else:
        shown = first_sentence(body.strip())
        lead, _, rest = body.strip().partition("\n\n")
        if shown.rstrip().endswith(":"):  # it announces an equation: show it too
            shown = body.strip()
        elif len(lead) < 40 and re.match(r"[*-] ", rest):  # "You can now" and a list: its items' first clauses
            items = [first_clause(" ".join(item.split()).lstrip("*- "))
                     for item in re.split(r"\n(?=[*-] )", rest.partition("\n\n")[0])]
            shown = lead.rstrip(":") + ":\n\n" + "\n".join(f"* {i}" for i in items)
    return f"{heading}\n\n{shown}".strip(), body.strip()


def split_block(text: str) -> list[str]:
    """A long prf block as slides of at most about :data:`BLOCK_CHARS` characters, cut between
    paragraphs (an equation stays with the paragraph before it); the first keeps the title."""
    paragraphs = []
    for par in text.split("\n\n"):  # a list: its items, so that a cut can fall between them
        paragraphs += re.split(r"\n(?=(?:\d+\.|[*-]) )", par) if re.match(r"(?:\d+\.|[*-]) ", par) else [par]
    chunks, current = [], []
    for par in paragraphs:
        title_only = len(current) == 1 and current[0].startswith("**")  # a title never stands alone
        if current and not title_only and len("\n\n".join(current + [par])) > BLOCK_CHARS \
                and not par.lstrip().startswith("$$"):
            chunks.append(current)
            current = []
        current.append(par)
    chunks.append(current)
    title = paragraphs[0] if paragraphs[0].startswith("**") else ""
    return ["\n\n".join(c) if i == 0 else f"{title.rstrip('*')} (continued)**\n\n" + "\n\n".join(c)
            for i, c in enumerate(chunks)]


def split_tall_figure(png: bytes, max_ratio: float = 0.85) -> list[bytes]:
    """A figure clearly taller than wide (rows of panels) cut at its blank horizontal bands into
    pieces at most about ``max_ratio`` times as tall as wide, so that each fills a slide's width
    legibly (a last piece of a legend alone stays with the row above it)."""
    import io

    import numpy as np
    from PIL import Image

    img = Image.open(io.BytesIO(png))
    width, height = img.size
    if height <= 1.1 * width:  # about square or wide: it fits a slide whole
        return [png]
    grey = np.asarray(img.convert("L"))
    blank = (grey >= 250).all(axis=1)
    cuts, start = [0], None
    for y, b in enumerate(blank):
        if b and start is None:
            start = y
        elif not b and start is not None:
            if y - start >= 6 and start > 0:
                cuts.append((start + y) // 2)
            start = None
    cuts.append(height)
    pieces, top = [], 0
    for a, b in zip(cuts[1:-1], cuts[2:]):
        if b - top > max_ratio * width:  # the next band would make the piece too tall: cut here
            pieces.append((top, a))
            top = a
    pieces.append((top, height))
    if len(pieces) > 1 and pieces[-1][1] - pieces[-1][0] < 0.15 * height:  # a legend alone: with the row above
        pieces[-2:] = [(pieces[-2][0], height)]
    out = []
    for a, b in pieces:
        buf = io.BytesIO()
        img.crop((0, a, width, b)).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


def figure_cells(cell, tags) -> list:
    """The slides of a code cell's figures (code hidden): one per piece of a tall figure."""
    import base64

    images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
    outputs = images if images else cell.outputs
    groups = [outputs]
    if len(images) == 1:
        pieces = split_tall_figure(base64.b64decode(images[0]["data"]["image/png"]))
        if len(pieces) > 1:
            groups = [[nbformat.v4.new_output("display_data", data={
                "image/png": base64.b64encode(p).decode(), "text/plain": "<Figure>"})] for p in pieces]
    cells = []
    for outs in groups:
        new = nbformat.v4.new_code_cell(cell.source)
        new.outputs = outs
        new.metadata["tags"] = ["remove-input"]
        cells.append(new)
    return cells


def lecture_notebook(lecture: dict):
    """The deck of one lecture: per chapter, the title and learning goals; every section heading
    (``#``/``##``, wherever it sits in a cell) with its points (:func:`section_slide`) and the
    section's text as speaker notes; every figure (code hidden; tall ones cut into rows); every
    cell tagged ``slide``; every exercise statement and prf block whole (long ones over several
    slides). A section about the book's sliders ("Explore") becomes a slide that links to its
    page, without its figures. Cells tagged ``solution``, ``remove-cell`` or ``skip-slide`` never."""
    title = nbformat.v4.new_markdown_cell(
        f"# Lecture {lecture['number']}: {lecture['title']}\n\n"
        f"{lecture['minutes']} minutes · {chapter_names_text(lecture['chapters'])} "
        "of *Positional and semantic attention: a solvable model* (attnlab)")
    slides = [("slide", title)]
    for name in lecture["chapters"]:
        nb = remove_tagged(read_chapter(name), tags=("solution", "remove-cell", "skip-slide"))
        values = glued(read_chapter(name))
        md = lambda text: nbformat.v4.new_markdown_cell(slide_markdown(text, values, BIB))
        exploring = False
        for cell in nb.cells:
            tags = cell.metadata.get("tags", [])
            if cell.cell_type == "markdown" and "slide" in tags:
                slides.append(("slide", md(cell.source)))
            elif cell.cell_type == "markdown":
                for kind, text in chapter_slides(cell.source):
                    if kind == "subslide" and text.lstrip("`").startswith("{prf:remark}"):
                        title, _, body = slide_markdown(text, values, BIB).partition("\n\n")
                        slides += [("subslide", nbformat.v4.new_markdown_cell(f"{title}\n\n{first_sentence(body)}")),
                                   ("notes", nbformat.v4.new_markdown_cell(body))]
                        continue
                    if kind == "subslide":
                        slides += [("subslide", nbformat.v4.new_markdown_cell(part))
                                   for part in split_block(slide_markdown(text, values, BIB))]
                        continue
                    exploring = bool(_EXPLORE.match(text))
                    heading = text.partition("\n\n")[0]
                    if exploring:
                        anchor = re.sub(r"[^\w]+", "-", re.sub(r"^#+\s*", "", heading).lower()).strip("-")
                        slides.append(("slide", md(f"{heading}\n\nThe explorer's sliders run in the book's page, "
                                                   f"without a kernel: [open it]({name}.ipynb#{anchor}).")))
                        continue
                    shown, notes = section_slide(name, text)
                    slides.append(("slide", md(shown)))
                    if notes:
                        slides.append(("notes", md(notes)))
            elif cell.cell_type == "code" and not exploring:
                images = [o for o in cell.get("outputs", []) if "image/png" in o.get("data", {})]
                if images or "slide" in tags:
                    slides += [("slide" if "slide" in tags else "subslide", c) for c in figure_cells(cell, tags)]
    for kind, cell in slides:
        cell.metadata["slideshow"] = {"slide_type": kind}
    nb = nbformat.v4.new_notebook(cells=[cell for _, cell in slides])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["title"] = f"Lecture {lecture['number']}: {lecture['title']}"
    return nb


_TEMPLATE = """{%- extends 'reveal/index.html.j2' -%}
{# offline: no mermaid module from a CDN (the chapters have no mermaid diagrams) #}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{# 1280x720 slides; a figure fits the slide's height (tall ones are cut into rows by build_course);
   links are underlined: their colour alone is 1.86:1 against the text (WCAG 1.4.1 wants 3:1 or a
   second cue); a long text cell is not a scroll box, which a keyboard could not scroll (WCAG 2.1.1) #}
{%- block html_head_css -%}
<style>
.reveal .jp-OutputArea-output img { max-height: 640px; width: auto; max-width: 100%; }
.reveal .slides { font-size: 30px; text-align: left; }
.reveal .slides h1 { font-size: 1.6em; } .reveal .slides h2 { font-size: 1.4em; }
.reveal .slides h1, .reveal .slides h2 { text-transform: none; }
.reveal .jp-RenderedHTMLCommon h1 { font-size: 52px; } .reveal .jp-RenderedHTMLCommon h2 { font-size: 42px; }
.reveal .jp-InputPrompt, .reveal .jp-OutputPrompt { display: none; }
.reveal .jp-OutputArea-output img { display: block; margin: 0 auto; }
.reveal .jp-RenderedHTMLCommon p { font-size: 30px; line-height: 1.35; }
.reveal .jp-RenderedHTMLCommon li { font-size: 27px; line-height: 1.3; }
.reveal .slides a { text-decoration: underline; }
.reveal .slides .jp-RenderedMarkdown { overflow: visible; }
.reveal .slide-number, .reveal .slide-number-pdf { color: #fff !important; background-color: #222 !important; }
</style>
{%- endblock html_head_css -%}
{%- block footer_js -%}
{{ super() }}
<script>require(["{{ resources.reveal.url_prefix }}/dist/reveal.js"], function (R) { window.Reveal = R; });</script>
{%- endblock footer_js -%}
"""

#: Links of the chapters to other pages of the book (``appendix/api.md``, ``02_solvable_model.ipynb#x``):
#: in a deck they point to the student edition's HTML book (``../student/html``).
_BOOK_LINK = re.compile(r'href="(?![a-z]+:|#|/)([^"#]+?)\.(?:md|ipynb)(#[^"]*)?"')


def link_to_student_book(body: str) -> str:
    """``body`` (a deck's HTML) with its links to book pages pointing into ``../student/html/book/``."""
    return _BOOK_LINK.sub(lambda m: f'href="../student/html/book/{m.group(1)}.html{m.group(2) or ""}"', body)


def build_slides(out: Path, lectures: list[dict]) -> dict:
    from nbconvert import SlidesExporter
    from nbconvert.preprocessors import ExtractOutputPreprocessor, TagRemovePreprocessor
    from traitlets.config import Config

    dest = out / "slides"
    dest.mkdir(parents=True, exist_ok=True)
    if (dest / "_vendor").exists():
        shutil.rmtree(dest / "_vendor")
    shutil.copytree(vendor(), dest / "_vendor", ignore=shutil.ignore_patterns("complete"))
    tpl = work_dir(out) / "slides_template" / "attnlab_reveal"
    tpl.mkdir(parents=True, exist_ok=True)
    (tpl / "index.html.j2").write_text(_TEMPLATE)
    (tpl / "conf.json").write_text(json.dumps({"base_template": "reveal", "mimetypes": {"text/html": True}}))
    c = Config()
    c.SlidesExporter.reveal_url_prefix = "_vendor/reveal.js"
    c.SlidesExporter.reveal_scroll = False  # a slide fits 1280x720 (tests/test_course_slides.py checks)
    c.SlidesExporter.reveal_width = "1280"
    c.SlidesExporter.reveal_height = "720"
    c.SlidesExporter.reveal_number = "c/t"
    c.SlidesExporter.reveal_theme = "white"
    c.SlidesExporter.require_js_url = "_vendor/require.js"
    c.SlidesExporter.jquery_url = "_vendor/jquery.min.js"
    c.SlidesExporter.mathjax_url = "_vendor/mathjax/MathJax.js?config=TeX-AMS_CHTML-full,Safe"
    c.SlidesExporter.extra_template_basedirs = [str(tpl.parent)]
    c.SlidesExporter.template_name = "attnlab_reveal"
    c.TagRemovePreprocessor.remove_input_tags = {"remove-input"}
    c.TagRemovePreprocessor.enabled = True
    counts = {}
    for lec in lectures:
        stem = f"lecture{lec['number']:02d}"
        nb = lecture_notebook(lec)
        exporter = SlidesExporter(config=c)
        exporter.register_preprocessor(TagRemovePreprocessor(config=c), enabled=True)
        exporter.register_preprocessor(ExtractOutputPreprocessor(config=c), enabled=True)
        body, res = exporter.from_notebook_node(nb, resources={"output_files_dir": f"{stem}_files"})
        body = body.replace(f"<title>{nb.metadata['title']} slides</title>", f"<title>{nb.metadata['title']}</title>")
        (dest / f"{stem}.html").write_text(link_to_student_book(body))
        for fname, data in res.get("outputs", {}).items():
            (dest / fname).parent.mkdir(parents=True, exist_ok=True)
            (dest / fname).write_bytes(data)
        counts[stem] = sum(1 for cell in nb.cells if cell.metadata["slideshow"]["slide_type"] in ("slide", "subslide"))
    return counts


# --------------------------------------------------------------------------- assignments

def release_spec() -> str:
    """``git+URL@TAG`` of the book's release (``repository`` in ``_config.yml``, as the chapters'
    install cells)."""
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
    return f"git+{repo['url']}@{repo['branch']}"


#: What the wheel of attnlab is built from (``pyproject.toml``: the package and its cached tables).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "attnlab", "results", "book/_data")

#: Where Gradescope unpacks the autograder bundle (``/autograder/source``); the bundle's wheel of
#: attnlab is installed from there.
BUNDLE_SOURCE = "/autograder/source"


def build_wheel(dest: Path) -> Path:
    """A wheel of this checkout's attnlab (``pip wheel --no-deps``) in ``dest``: the autograder
    bundles carry it, so that they grade with the library the course was built from, with no
    network access to the repository and no release tag needed.

    Raises
    ------
    SystemExit
        If pip cannot build the wheel (its output is shown).
    """
    import tempfile

    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("attnlab-*.whl"):
        old.unlink()
    with tempfile.TemporaryDirectory() as tmp:
        # from a copy of what the wheel is made of: setuptools' build/ folder in a checkout can
        # hold modules deleted since, which would be packed too
        src = Path(tmp) / "src"
        for rel in WHEEL_SOURCES:
            copy = shutil.copytree if (ROOT / rel).is_dir() else shutil.copy2
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            copy(ROOT / rel, src / rel, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                           if (ROOT / rel).is_dir() else {}))
        res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                              "--quiet", "-w", str(dest), str(src)], capture_output=True, text=True)
    wheels = sorted(dest.glob("attnlab-*.whl"))
    if res.returncode != 0 or len(wheels) != 1:
        raise SystemExit(f"pip wheel of attnlab failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    return wheels[0]


def grading_requirements(wheel_name: str) -> str:
    """The packages the autograder's environment needs besides otter: a CPU build of torch, and
    attnlab from the wheel ``wheel_name`` that the bundle carries (in :data:`BUNDLE_SOURCE`)."""
    return ("--extra-index-url https://download.pytorch.org/whl/cpu\n"
            f"{BUNDLE_SOURCE}/{wheel_name}\n")


def release_tag_exists() -> bool:
    """Whether the release tag of ``_config.yml`` is a tag of this repository (``git tag``)."""
    tag = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["branch"]
    res = subprocess.run(["git", "rev-parse", "-q", "--verify", f"refs/tags/{tag}"], cwd=ROOT,
                         capture_output=True, text=True)
    return res.returncode == 0


#: ``#: needs NAME, ...`` in a test cell of a problem set: replaced by a check that the names
#: are defined, which names them and shows the student's own last error (not the test's NameError).
_NEEDS = re.compile(r"^#: needs (.+)$", re.M)


def expand_needs(src: str) -> str:
    def one(m):
        names = tuple(n.strip() for n in m.group(1).split(","))
        return ("import sys as _sys\n"
                f"_missing = [_n for _n in {names!r} if _n not in globals()]\n"
                "assert not _missing, (', '.join(_missing) + ' is not defined: run the cell that defines it'\n"
                "    + (f'; your notebook stopped with {type(_sys.last_value).__name__}: {_sys.last_value}'\n"
                "       if getattr(_sys, 'last_value', None) is not None else ''))")
    return _NEEDS.sub(one, src)


def install_cell():
    """The problem set's first cells: the chapters' install cell (attnlab and otter-grader, from the
    release, where they do not import: Colab) and otter's set-up."""
    install = nbformat.v4.new_code_cell(
        "# Colab, or a kernel without attnlab and otter-grader: install them from the book's release.\n"
        "try:\n    import attnlab\n    import otter\nexcept ImportError:\n"
        f'    %pip install --quiet "attnlab[notebook] @ {release_spec()}"\n')
    install.metadata["tags"] = ["remove-cell"]
    # no notebook name: a renamed download ("ps3 (1).ipynb") or a graded copy still finds its tests
    setup = nbformat.v4.new_code_cell("import otter\n\ngrader = otter.Notebook()")
    return [install, setup]


def embed_public_tests(notebook: Path) -> None:
    """The student notebook's set-up cell writes its public tests (``tests/qN.py``, the files otter
    made next to it) where they are missing: a notebook opened alone (Colab) can check itself."""
    tests = {p.name: p.read_text() for p in sorted((notebook.parent / "tests").glob("*.py"))}
    nb = nbformat.read(notebook, as_version=4)
    (cell,) = [c for c in nb.cells if "grader = otter.Notebook(" in c.source]
    cell.source = ("# The public tests, written to tests/ where this notebook was opened without them (Colab)\n"
                   "import os\n\n"
                   f"_PUBLIC_TESTS = {json.dumps(tests, indent=1)}\n"
                   "os.makedirs(\"tests\", exist_ok=True)\n"
                   "for _name, _text in _PUBLIC_TESTS.items():\n"
                   "    if not os.path.exists(os.path.join(\"tests\", _name)):\n"
                   "        with open(os.path.join(\"tests\", _name), \"w\") as _f:\n"
                   "            _f.write(_text)\n\n" + cell.source)
    nbformat.write(nb, notebook)


def add_to_zip(path: Path, name: str, data: str | bytes) -> None:
    import zipfile

    with zipfile.ZipFile(path, "a") as z:
        z.writestr(name, data)


def build_assignments(out: Path, lectures: list[dict]) -> dict:
    import jupytext

    dest = out / "assignments"
    src_dir = work_dir(out) / "assignment_sources"
    src_dir.mkdir(parents=True, exist_ok=True)
    # every problem set's config names this file: otter puts its lines into the bundle's
    # environment.yml, so that a grading service (Gradescope, otter's Docker image) installs
    # attnlab too, from the wheel that each bundle carries; the file itself is added as well
    wheel = build_wheel(src_dir / "wheel")
    requirements = grading_requirements(wheel.name)
    (src_dir / "requirements.txt").write_text(requirements)
    if not release_tag_exists():
        print(f"warning: the student notebooks' install cell (Colab) installs attnlab @ {release_spec()}, "
              "and this repository has no such tag: create it (RELEASE.md) before students start",
              file=sys.stderr)
    n_tests = {}
    for lec in lectures:
        name = f"ps{lec['number']}"
        md = COURSE / "assignments" / f"{name}.md"
        nb = jupytext.read(md)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.source = expand_needs(cell.source)
        first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")  # after the title
        nb.cells[first:first] = install_cell()
        master = src_dir / f"{name}.ipynb"
        nbformat.write(nb, master)
        target = dest / name
        if target.exists():
            shutil.rmtree(target)
        res = subprocess.run(["otter", "assign", "--no-run-tests", str(master), str(target)],
                             cwd=src_dir, capture_output=True, text=True)
        if res.returncode != 0:
            raise SystemExit(f"otter assign {name} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
        zips = sorted((target / "autograder").glob(f"{name}-autograder_*.zip"))
        bundle = target / "autograder" / "autograder.zip"
        zips[-1].rename(bundle)
        add_to_zip(bundle, "requirements.txt", requirements)
        add_to_zip(bundle, wheel.name, wheel.read_bytes())
        embed_public_tests(target / "student" / f"{name}.ipynb")
        (target / "solutions").mkdir()
        shutil.copy2(target / "autograder" / f"{name}.ipynb", target / "solutions" / f"{name}.ipynb")
        n_tests[name] = len(list((target / "autograder" / "tests").glob("*.py")))
    return n_tests


# --------------------------------------------------------------------------- main

#: Scratch folders that builds before 2026-12 left inside the hand-outs (answers among them).
OLD_SCRATCH = ("_student_build", "_slides_template", "_assignment_sources", "student/_config_student.yml",
               "student/_toc_student.yml")


def work_dir(out: Path) -> Path:
    """The scratch folder of a build into ``out``: ``.NAME-work`` beside it, so that ``out``
    holds only what is handed out (zipping it never ships the answers)."""
    return out.parent / f".{out.name}-work"


def remove_old_scratch(out: Path) -> None:
    for name in OLD_SCRATCH:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="_build/course", type=Path)
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {PARTS}")
    ap.add_argument("--chapters", default="", help="comma-separated chapter names (default: all)")
    ap.add_argument("--no-html", action="store_true", help="skip the student HTML build")
    ap.add_argument("--student-repo", default=None, metavar="URL@BRANCH",
                    help="a repository holding only the student notebooks (in notebooks/), which the "
                         "student edition's launch buttons open (default: no launch buttons)")
    args = ap.parse_args(argv)
    out = args.out if args.out.is_absolute() else Path.cwd() / args.out
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        ap.error(f"unknown parts {sorted(unknown)}")
    chapters = [c for c in args.chapters.split(",") if c] or chapter_names()
    unknown = sorted(set(chapters) - set(chapter_names()))
    if unknown:
        ap.error(f"unknown chapters {unknown}: choose from {', '.join(chapter_names())}")
    if "slides" in parts:  # fetched first: a failure must not come after the other parts were built
        try:
            vendor()
        except VendorError as exc:
            others = ",".join(p for p in parts if p != "slides")
            ap.error(f"{exc}" + (f"; or leave the slides out with --parts {others}" if others else ""))
    plan = course_plan()
    lectures = [l for l in plan["lectures"] if set(l["chapters"]) & set(chapters)]
    out.mkdir(parents=True, exist_ok=True)
    work_dir(out).mkdir(parents=True, exist_ok=True)
    remove_old_scratch(out)
    report = {}
    for part in parts:
        start = time.perf_counter()
        if part == "student":
            report[part] = build_student(out, chapters, html_build=not args.no_html,
                                         student_repo=args.student_repo)
        elif part == "instructor":
            report[part] = build_instructor(out, chapters)
        elif part == "slides":
            report[part] = build_slides(out, lectures)
        elif part == "assignments":
            report[part] = build_assignments(out, lectures)
        report[part + "_seconds"] = round(time.perf_counter() - start, 1)
        print(f"{part}: {report[part]} ({report[part + '_seconds']} s)", flush=True)
    (out / "build_report.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
