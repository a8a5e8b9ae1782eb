"""The kernel-free explorers: what the grid costs to solve, what the pages weigh, how fast a slider redraws.

* Grid cost, from the cached sweep (``results/explorer-grid-theory.csv`` and its
  provenance): the tasks' own run times (``task_seconds``, one per curve or
  threshold task) summed per kind, the wall time of the sweep's sessions, and the
  estimate for ``W`` workers of a Dask cluster, ``max(sum / W, longest task)``
  (independent tasks, many more than the workers).
* Page weight and slider latency: runs ``tests/test_explorers_browser.py`` on a
  built book (``--html _build/html``; without it the test builds one) and prints
  its report: bytes of the HTML and of every file the page loaded, and the time
  from a slider's new value to the second animation frame after it (median and
  maximum over every slider move).

Usage: ``python benchmarks/bench_explorers.py [--html _build/html] [--workers 8 32]``;
prints one JSON object. Say what else ran on the machine when you quote it.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def grid_cost(workers) -> dict:
    from attnlab.experiments.store import cached_path, read_columns, read_provenance

    path = cached_path("explorer-grid-theory.csv")
    cols = read_columns(path, key="run_id")
    prov = read_provenance(path) or {}
    out = {"rows": int(len(cols["run_id"]))}
    _, first = np.unique(cols["run_id"], return_index=True)
    secs = cols["task_seconds"][first].astype(float)
    kinds = cols["kind"][first]
    for kind in np.unique(kinds):
        s = secs[kinds == kind]
        out[f"{kind}_tasks"] = int(s.size)
        out[f"{kind}_task_seconds_sum"] = round(float(s.sum()), 1)
        out[f"{kind}_task_seconds_max"] = round(float(s.max()), 1)
    out["task_seconds_sum"] = round(float(secs.sum()), 1)
    out["sweep_wall_seconds"] = round(sum(float(s.get("runtime_seconds", 0)) for s in prov.get("sessions", [])), 1)
    out["sweep_executors"] = sorted({s.get("executor", "") for s in prov.get("sessions", [])})
    for w in workers:
        out[f"estimate_wall_seconds_{w}_workers"] = round(max(secs.sum() / w, secs.max()), 1)
    return out


def pages(html) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, ATTNLAB_EXPLORER_REPORT=str(Path(tmp) / "report.json"))
        if html:
            env["ATTNLAB_BOOK_HTML"] = str(Path(html).resolve())
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               str(ROOT / "tests" / "test_explorers_browser.py")], env=env, cwd=ROOT,
                              capture_output=True, text=True)
        report = Path(env["ATTNLAB_EXPLORER_REPORT"])
        if proc.returncode != 0 or not report.exists():
            raise SystemExit(f"the browser test failed:\n{proc.stdout[-3000:]}")
        return json.loads(report.read_text())


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--html", default=None, help="a built book's _build/html (default: build one)")
    ap.add_argument("--workers", type=int, nargs="+", default=[2, 8, 32])
    ap.add_argument("--no-pages", action="store_true", help="only the grid cost")
    args = ap.parse_args(argv)
    result = {"grid": grid_cost(args.workers), "cpu_count": os.cpu_count(),
              "load_average_1min": round(os.getloadavg()[0], 2)}
    if not args.no_pages:
        result["pages"] = pages(args.html)
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
