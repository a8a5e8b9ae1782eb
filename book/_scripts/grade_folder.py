#!/usr/bin/env python
"""Grade a folder of problem-set submissions with otter, one ``otter run`` each.

    python book/_scripts/grade_folder.py AUTOGRADER_ZIP SUBMISSIONS_DIR -o OUT_DIR

Every ``*.ipynb`` and ``*.zip`` (a notebook exported by ``grader.export()``) directly in
``SUBMISSIONS_DIR`` is graded by ``otter run -a AUTOGRADER_ZIP`` in a folder of its own,
``OUT_DIR/NAME/`` (``results.json`` and otter's log: the hidden tests' messages, for the
instructor). ``OUT_DIR`` is created. ``OUT_DIR/scores.csv`` gets one row per submission:
its file name, the points of each question, the total and the maximum; a submission that
otter cannot grade (not a notebook, a broken file) gets an ``error`` column instead of
points and the others are still graded. Exit code 0 when every submission was graded, 1
when some could not be, 2 for bad arguments (one line).

``-j N`` grades N submissions at a time (each runs the whole notebook in its own kernel).
"""
from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def submissions(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".ipynb", ".zip"))


def grade_one(autograder: Path, submission: Path, out: Path, timeout: float | None = None) -> dict:
    """``otter run`` of one submission into ``out`` (created); ``{question: (score, max)}``
    plus ``"_error"`` when otter fails."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    # otter runs the notebook in the submission's folder: a copy of its own, so that files
    # written by one submission are not seen by another
    work = out / "submission"
    work.mkdir()
    shutil.copy2(submission, work / submission.name)
    try:
        res = subprocess.run([sys.executable, "-m", "otter", "run", "-a", str(autograder.resolve()),
                              "-o", str(out.resolve()), str((work / submission.name).resolve())],
                             capture_output=True, text=True, cwd=work, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"_error": f"timed out after {timeout} s"}
    (out / "otter.log").write_text(res.stdout + res.stderr)
    results = out / "results.json"
    if res.returncode != 0 or not results.exists():
        last = (res.stderr.strip().splitlines() or [f"otter exited with {res.returncode}"])[-1]
        return {"_error": last}
    tests = json.loads(results.read_text())["tests"]
    return {t["name"]: (t["score"], t["max_score"]) for t in tests if t["name"] != "Public Tests"}


def grade_folder(autograder: Path, folder: Path, out: Path, jobs: int = 1,
                 timeout: float | None = None) -> dict[str, dict]:
    """Grade every submission of ``folder``; write ``out/scores.csv``; ``{file name: scores}``."""
    out.mkdir(parents=True, exist_ok=True)
    subs = submissions(folder)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        scores = dict(zip((p.name for p in subs),
                          pool.map(lambda p: grade_one(autograder, p, out / p.stem, timeout), subs)))
    questions = sorted({q for s in scores.values() for q in s if q != "_error"})
    with open(out / "scores.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["submission", *questions, "total", "max", "error"])
        for name, s in scores.items():
            if "_error" in s:
                w.writerow([name, *[""] * len(questions), "", "", s["_error"]])
            else:
                w.writerow([name, *[s.get(q, (0, 0))[0] for q in questions],
                            sum(v[0] for v in s.values()), sum(v[1] for v in s.values()), ""])
    return scores


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("autograder", type=Path, help="the problem set's autograder.zip")
    ap.add_argument("folder", type=Path, help="folder of submissions (.ipynb or exported .zip)")
    ap.add_argument("-o", "--out", type=Path, required=True, help="output folder (created)")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="submissions graded at a time")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per submission")
    args = ap.parse_args(argv)
    if not args.autograder.is_file():
        ap.error(f"autograder: no file {args.autograder}")
    if not args.folder.is_dir():
        ap.error(f"folder: no folder {args.folder}")
    if not submissions(args.folder):
        ap.error(f"folder: no .ipynb or .zip in {args.folder}")
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1, not {args.jobs}")
    scores = grade_folder(args.autograder, args.folder, args.out, args.jobs, args.timeout)
    for name, s in scores.items():
        if "_error" in s:
            print(f"{name}: not graded: {s['_error']}")
        else:
            print(f"{name}: {sum(v[0] for v in s.values()):g}/{sum(v[1] for v in s.values()):g} "
                  + " ".join(f"{q}={v[0]:g}/{v[1]:g}" for q, v in sorted(s.items())))
    print(f"scores: {args.out / 'scores.csv'}")
    return 1 if any("_error" in s for s in scores.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
