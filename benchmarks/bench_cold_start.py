"""Cold start: the first fixed point in a fresh process with an empty numba cache.

Every measurement starts a new Python process (``sys.executable``) with
``NUMBA_CACHE_DIR`` and ``ATTNLAB_CACHE_DIR`` (the quasi-Monte Carlo points) set to a
new empty folder (what a fresh Colab or Binder session has), imports ``attnlab.theory`` and solves one fixed point
(``alpha = 1``, semantic branch, paper parameters; the default followed minimiser,
then the global one in the same process). A second process with the now filled
cache solves the same points (the warm path); the two results must agree to
1e-9 relative. A third and a fourth process do the same for the global minimiser
alone, as the first solve of a fresh process (where the split rule's late kernels
compile in a helper process, :mod:`attnlab.theory.precompile`, whose compilation
the per-kernel times below do not count). Reported per process: wall time from its start (interpreter and
imports included), the imports, each solve, and the numba compilation time per
top-level kernel (numba's compile events), median over ``--repeats`` rounds, with
the load average before and after (the machine may be shared).

``--against DIR`` measures another checkout (e.g. the previous commit) in the same run.

Run: ``python benchmarks/bench_cold_start.py [--repeats 3] [--against DIR]``.
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

CHILD = r"""
import json, sys, time
t0, order = float(sys.argv[1]), sys.argv[2].split(",")
from numba.core import event
stack, compiled = [], {}
class Timer(event.Listener):
    def on_start(self, ev):
        stack.append(time.perf_counter())
    def on_end(self, ev):
        t = time.perf_counter() - stack.pop()
        if not stack:  # a top-level compilation (callees included)
            name = ev.data["dispatcher"].py_func.__qualname__
            compiled[name] = compiled.get(name, 0.0) + t
event.register("numba:compile", Timer())
t_numba = time.time()
import attnlab.theory as th
from attnlab import ModelParams
t_import = time.time()
out = dict(imports=t_import - t0, solves={}, results={})
for minimizer in order:
    t = time.time()
    r = th.solve_state_evolution(ModelParams(), 1.0, "semantic", minimizer=minimizer)
    out["solves"][minimizer] = time.time() - t
    out["results"][minimizer] = [r.m, r.theta, r.qnorm, r.eps_g, r.eps_t]
    out["since_start_" + minimizer] = time.time() - t0
out["compiled"] = compiled
print(json.dumps(out))
"""


def run_child(cache_dir: str, code: Path, order: str = "followed,global") -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, ATTNLAB_CACHE_DIR=cache_dir, PYTHONPATH=str(code))
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-c", CHILD, repr(t0), order], env=env, capture_output=True, text=True,
                          check=True, cwd=tempfile.gettempdir())  # (not this folder: it would come first on sys.path)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process"] = time.time() - t0
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--against", type=Path, default=None, help="another checkout, measured in the same run")
    args = ap.parse_args()
    codes = [("this tree", ROOT)] + ([("against " + str(args.against), args.against.resolve())] if args.against else [])
    load, times = os.getloadavg(), cpu_times()
    rows = {key: [] for name, _ in codes for key in (name, name + " (global first)")}
    for _ in range(args.repeats):
        for name, code in codes:
            with tempfile.TemporaryDirectory(prefix="attnlab-numba-") as cache:
                cold = run_child(cache, code)
                warm = run_child(cache, code)
            with tempfile.TemporaryDirectory(prefix="attnlab-numba-") as cache:
                cold_global = run_child(cache, code, "global")
                warm_global = run_child(cache, code, "global")
            rows[name].append((cold, warm))
            rows[name + " (global first)"].append((cold_global, warm_global))
    print(describe())
    print(f"load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores); "
          f"{steal(times)}; median of {args.repeats} rounds; every process started fresh")
    for name in rows:
        print(f"== {name}")
        report(rows[name])


def report(rows):
    med = lambda f: statistics.median(f(c, w) for c, w in rows)
    print(f"{'':32s} {'empty cache':>12s} {'warm cache':>12s}")
    print(f"{'imports (from process start)':32s} {med(lambda c, w: c['imports']):11.2f}s "
          f"{med(lambda c, w: w['imports']):11.2f}s")
    for mz in rows[0][0]["solves"]:
        print(f"{'first fixed point, ' + mz:32s} {med(lambda c, w: c['solves'][mz]):11.2f}s "
              f"{med(lambda c, w: w['solves'][mz]):11.2f}s")
        print(f"{'  start to result (' + mz + ')':32s} {med(lambda c, w: c['since_start_' + mz]):11.2f}s "
              f"{med(lambda c, w: w['since_start_' + mz]):11.2f}s")
    print(f"{'whole process':32s} {med(lambda c, w: c['process']):11.2f}s {med(lambda c, w: w['process']):11.2f}s")
    names = sorted({n for c, _ in rows for n in c["compiled"]}, key=lambda n: -rows[0][0]["compiled"].get(n, 0.0))
    print("numba compilation in the empty-cache process (median s, callees included):")
    for n in names:
        print(f"  {n:40s} {med(lambda c, w: c['compiled'].get(n, 0.0)):6.2f}")
    print(f"  {'total':40s} {med(lambda c, w: sum(c['compiled'].values())):6.2f}")
    worst = max(abs(a - b) / max(abs(b), 1e-300) for c, w in rows for mz in c["results"]
                for a, b in zip(c["results"][mz], w["results"][mz]))
    print(f"cold vs warm results: largest relative difference {worst:.1e} (must be <= 1e-9)")
    assert worst <= 1e-9


if __name__ == "__main__":
    main()
