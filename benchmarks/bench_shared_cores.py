"""The state evolution on a shared 2-core machine: idle and beside a competing process.

Each task runs in a fresh Python process (warm numba cache: a warm-up solve comes
first and is not timed), once with no competitor of ours and once beside one
CPU-bound competitor that this script starts (``python -c "while True: pass"``),
alternately, ``--repeats`` times; the table shows medians and the ratio
loaded / idle measured side by side. The machine's load average is printed
before and after: other users' processes count too.

Tasks (paper parameters, omega = 0.3):

* one fixed point (semantic branch, alpha = 1, cold start, default followed
  minimiser; and the global minimiser's split rule);
* alpha_c and alpha_l (``find_transition``, default arguments);
* a continuation along 40 alphas on both branches (``se_curve``), the two branches
  side by side in two threads, in fixed points per second: alpha in [1, 2]
  (both branches exist) and alpha in [0.1, 3] (the explorers' range, where the
  semantic branch is missing below alpha ~ 0.7 and each such point tries every
  start);
* ``attnlab transition --omega 0.3 --json`` end to end (a new process each time,
  imports included).

``--competitor solver`` replaces the busy loop by a process that solves fixed points in
a loop with the code under test (a sweep worker beside the user's session).
``--against DIR`` also times another checkout (e.g. the previous commit,
``git worktree add /tmp/old HEAD~3``) in the same run, with the same competitor.

Run: ``python benchmarks/bench_shared_cores.py [--repeats 3] [--quick] [--against DIR]``.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_times, describe, steal

ROOT = Path(__file__).resolve().parents[1]

TASK = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
import numpy as np
from attnlab import ModelParams
import attnlab.theory as th
task, repeats = sys.argv[1], int(sys.argv[2])
P = ModelParams()

def side_by_side(f, g):
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(1) as pool:
        later = pool.submit(g)
        a = f()
        return a, later.result()

def curves(lo, hi):
    alphas = np.linspace(lo, hi, 40)
    run = lambda b: th.se_curve(P, alphas, b, quiet=True)
    side_by_side(lambda: run("semantic"), lambda: run("positional"))
    return 80

if task == "fixed-point":
    job = lambda: th.solve_state_evolution(P, 1.0, "semantic")
elif task == "fixed-point-global":
    job = lambda: th.solve_state_evolution(P, 1.0, "semantic", minimizer="global")
elif task == "transition":
    job = lambda: th.find_transition(P)
elif task == "continuation-1-2":
    job = lambda: curves(1.0, 2.0)
elif task == "continuation-0.1-3":
    job = lambda: curves(0.1, 3.0)
th.solve_state_evolution(P, 1.0, "semantic")  # compile / load the kernels
th.solve_state_evolution(P, 1.0, "semantic", minimizer="global")
times = []
for _ in range(repeats):
    t = time.perf_counter()
    out = job()
    times.append(time.perf_counter() - t)
print(json.dumps(dict(seconds=min(times), points=out if isinstance(out, int) else None)))
"""

CLI = [sys.executable, "-m", "attnlab.cli", "transition", "--omega", "0.3", "--json"]


def timed_task(task: str, code: Path, inner: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(code))
    if task == "cli-transition":
        t = time.perf_counter()
        subprocess.run(CLI, env=env, capture_output=True, check=True, cwd=tempfile.gettempdir())
        return dict(seconds=time.perf_counter() - t, points=None)
    out = subprocess.run([sys.executable, "-c", TASK, task, str(inner)], env=env, capture_output=True, text=True,
                         check=True, cwd=tempfile.gettempdir())  # (not this folder: it would come first on sys.path)
    return json.loads(out.stdout.strip().splitlines()[-1])


COMPETITORS = {
    "busy-loop": "while True: pass",
    # another state-evolution process (e.g. a sweep worker), of the same code
    "solver": ("import warnings; warnings.simplefilter('ignore'); from attnlab import ModelParams; "
               "from attnlab.theory import solve_state_evolution as s\nwhile True: s(ModelParams(), 1.0, 'positional')"),
}


def measure(task, code, repeats, inner, competitor_code):
    idle, loaded = [], []
    for _ in range(repeats):
        idle.append(timed_task(task, code, inner))
        competitor = subprocess.Popen([sys.executable, "-c", competitor_code], env=dict(os.environ, PYTHONPATH=str(code)),
                                      cwd=tempfile.gettempdir())
        try:
            time.sleep(3.0)  # (its imports and first solve)
            loaded.append(timed_task(task, code, inner))
        finally:
            competitor.kill()
            competitor.wait()
    med = lambda rows: statistics.median(r["seconds"] for r in rows)
    return med(idle), med(loaded), idle[0]["points"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="skip the alpha in [0.1, 3] continuation")
    ap.add_argument("--against", type=Path, default=None, help="another checkout to time in the same run")
    ap.add_argument("--competitor", choices=sorted(COMPETITORS), default="busy-loop",
                    help="busy-loop: one CPU-bound python process; solver: a process solving fixed points in a loop "
                         "with the code under test")
    ap.add_argument("--tasks", default=None, help="comma-separated subset of the tasks")
    args = ap.parse_args()
    tasks = [("fixed-point", 3), ("fixed-point-global", 3), ("transition", 1), ("continuation-1-2", 1),
             ("continuation-0.1-3", 1), ("cli-transition", 1)]
    if args.quick:
        tasks = [t for t in tasks if t[0] != "continuation-0.1-3"]
    if args.tasks:
        tasks = [t for t in tasks if t[0] in args.tasks.split(",")]
    codes = [("this tree", ROOT)] + ([("against", args.against.resolve())] if args.against else [])
    print(describe())
    times = cpu_times()
    print(f"load average before: {os.getloadavg()} ({os.cpu_count()} cores); {args.repeats} rounds, medians; "
          f"'loaded' = beside one competing process started here ({args.competitor})")
    print(f"{'task':24s} {'code':10s} {'idle':>9s} {'loaded':>9s} {'ratio':>6s}")
    for task, inner in tasks:
        for name, code in codes:
            idle, loaded, points = measure(task, code, args.repeats, inner, COMPETITORS[args.competitor])
            extra = f"   {points / idle:5.1f} / {points / loaded:5.1f} fixed points per s" if points else ""
            print(f"{task:24s} {name:10s} {idle:8.2f}s {loaded:8.2f}s {loaded / idle:6.2f}{extra}", flush=True)
    print(f"load average after: {os.getloadavg()}; {steal(times)} (the competitor's included)")


if __name__ == "__main__":
    main()
