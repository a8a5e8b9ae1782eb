"""A first solve after ``attnlab warm-up``, against one with an empty cache.

What a Binder image (``postBuild`` runs ``attnlab warm-up``) or a course's prepared
image gives its sessions. Each round, with ``NUMBA_CACHE_DIR`` and ``ATTNLAB_CACHE_DIR``
set to a new empty folder: one process runs ``attnlab warm-up`` (timed: what the
image build pays), then a fresh process solves the first fixed point of each
minimiser (the child of ``bench_cold_start.py``: ``alpha = 1``, semantic branch, the
paper's parameters; the followed minimiser, then the global one). In the same round,
a fresh process does the same with another empty folder (a session without the
warm-up). Reported: medians over ``--repeats`` rounds of the wall time from process
start to each result, and the largest relative difference between the results of the
two (must be <= 1e-9; they are the same machine code).

Run: ``python benchmarks/bench_warm_up.py [--repeats 3]``.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from machine import cpu_times, describe, steal

from bench_cold_start import ROOT, run_child


def warm_up(cache_dir: str) -> float:
    """Wall time of ``attnlab warm-up`` into ``cache_dir`` (a fresh process)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, ATTNLAB_CACHE_DIR=cache_dir, PYTHONPATH=str(ROOT))
    t0 = time.time()
    proc = subprocess.run([sys.executable, "-m", "attnlab.cli", "warm-up", "--json"], env=env, capture_output=True,
                          text=True, check=True, cwd=tempfile.gettempdir())
    report = json.loads(proc.stdout)
    assert report["kernels"] > 0, report
    return time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    load, times = os.getloadavg(), cpu_times()
    rounds = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="attnlab-warm-") as warm, \
                tempfile.TemporaryDirectory(prefix="attnlab-cold-") as cold:
            seconds = warm_up(warm)
            rounds.append((seconds, run_child(warm, ROOT), run_child(cold, ROOT)))
    print(describe())
    print(f"load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores); "
          f"{steal(times)}; median of {args.repeats} rounds; every process started fresh")
    med = lambda f: statistics.median(f(*r) for r in rounds)
    print(f"{'attnlab warm-up (image build)':36s} {med(lambda s, w, c: s):8.2f}s")
    print(f"{'':36s} {'after warm-up':>14s} {'empty cache':>12s}")
    for mz in rounds[0][1]["solves"]:
        print(f"{'start to result (' + mz + ')':36s} {med(lambda s, w, c: w['since_start_' + mz]):13.2f}s "
              f"{med(lambda s, w, c: c['since_start_' + mz]):11.2f}s")
    print(f"{'numba compilation in the process':36s} {med(lambda s, w, c: sum(w['compiled'].values())):13.2f}s "
          f"{med(lambda s, w, c: sum(c['compiled'].values())):11.2f}s")
    worst = max(abs(a - b) / max(abs(b), 1e-300) for _, w, c in rounds for mz in w["results"]
                for a, b in zip(w["results"][mz], c["results"][mz]))
    print(f"after warm-up vs empty cache: largest relative difference of the results {worst:.1e} (must be <= 1e-9)")
    assert worst <= 1e-9


if __name__ == "__main__":
    main()
