#!/usr/bin/env python
"""Write the wrong submissions of a problem set (``book/course/grading/wrong_submissions.yml``)
as notebooks, from the solution notebook that ``build_course.py`` made.

    python book/_scripts/wrong_submissions.py ps3 _build/course/assignments/ps3/solutions/ps3.ipynb OUT_DIR

writes ``OUT_DIR/NAME.ipynb`` for every wrong submission of ``ps3`` and prints, per
submission, the question it gets wrong and the most that question may score.
"""
from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat
import yaml

SPEC = Path(__file__).resolve().parents[1] / "course" / "grading" / "wrong_submissions.yml"


def wrong_set(ps: str) -> list[dict]:
    return yaml.safe_load(SPEC.read_text())[ps]


def question_of_cell(nb, index: int) -> str:
    """The question whose ``grader.check("qN")`` cell comes first after cell ``index``."""
    for cell in nb.cells[index + 1:]:
        if cell.cell_type == "code" and "grader.check(" in cell.source:
            return cell.source.split('grader.check("')[1].split('"')[0]
    raise ValueError(f"cell {index}: no grader.check after it")


def make_wrong(solution, entry: dict):
    """``(notebook, {question: max score})`` of one wrong submission."""
    nb = copy.deepcopy(solution)
    wrong = {}
    for old, new in entry["replace"]:
        hits = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and old in c.source]
        if len(hits) != 1:
            raise ValueError(f"{entry['name']}: {old!r} is in {len(hits)} code cells, not 1")
        nb.cells[hits[0]].source = nb.cells[hits[0]].source.replace(old, new)
        q = question_of_cell(nb, hits[0])
        wrong[q] = entry.get("max", {}).get(q, 0)
    for cell in nb.cells:  # a submission as graded: no stored outputs
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb, wrong


def write_wrong_set(ps: str, solution_path: Path, out: Path) -> dict[str, dict]:
    """Write every wrong submission of ``ps``; ``{file name: {"max": {question: max score},
    "feedback": text the grading feedback must show, or None}}``."""
    solution = nbformat.read(solution_path, as_version=4)
    out.mkdir(parents=True, exist_ok=True)
    made = {}
    for entry in wrong_set(ps):
        nb, wrong = make_wrong(solution, entry)
        nbformat.write(nb, out / f"{entry['name']}.ipynb")
        made[f"{entry['name']}.ipynb"] = {"max": wrong, "feedback": entry.get("feedback")}
    return made


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ps")
    ap.add_argument("solution", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    for name, wrong in write_wrong_set(args.ps, args.solution, args.out).items():
        print(name, wrong)
    return 0


if __name__ == "__main__":
    sys.exit(main())
