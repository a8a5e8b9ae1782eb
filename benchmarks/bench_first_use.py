"""What a first session (e.g. Colab) waits for: numba compiling the state-evolution kernels.

Runs, in a fresh interpreter with an empty numba cache and quasi-Monte Carlo point cache
(``NUMBA_CACHE_DIR`` and ``ATTNLAB_CACHE_DIR`` in a temporary folder), the import of attnlab, a first solve with the default (followed)
minimiser, a first solve with ``minimizer="global"`` (the split rule's kernels), and
then the same two solves again; then repeats all of it in a second interpreter that
finds the cache filled by the first. The difference between the two is the compile time.

Usage: ``python benchmarks/bench_first_use.py``; prints one JSON object (seconds).
Say what else ran on the machine (``uptime``) when you quote it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import json, time
t0 = time.perf_counter()
import attnlab
from attnlab.theory import solve_state_evolution
t1 = time.perf_counter()
p = attnlab.ModelParams()
solve_state_evolution(p, 1.0, "semantic"); t2 = time.perf_counter()
solve_state_evolution(p, 1.0, "semantic", minimizer="global"); t3 = time.perf_counter()
solve_state_evolution(p, 1.2, "positional"); t4 = time.perf_counter()
solve_state_evolution(p, 1.2, "positional", minimizer="global"); t5 = time.perf_counter()
print(json.dumps(dict(import_s=t1 - t0, first_followed_s=t2 - t1, first_global_s=t3 - t2,
                      next_followed_s=t4 - t3, next_global_s=t5 - t4)))
"""


def run(cache: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, ATTNLAB_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        cold = run(cache)
        warm = run(cache)
    print(json.dumps(dict(empty_cache=cold, filled_cache=warm, load_average=os.getloadavg()), indent=1))


if __name__ == "__main__":
    main()
