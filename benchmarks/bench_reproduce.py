"""Time a slice of the omega = 0.3, d = 1000 figure and extrapolate to the full sweep.

The full figure (``attnlab reproduce overlaps-vs-alpha``) is 25 alpha x 2 inits
x 3 seeds = 150 independent runs. This script runs a stratified slice of it
(every ``--stride``-th alpha of the 25, both inits, seed 0) on a local process
pool of ``--workers`` processes and extrapolates:

* ``wall_estimate_s = mean(run wall time) * 150 / workers``: what the sweep
  takes under the current machine load (runs are independent and many more
  than the workers, so the pool stays busy until the last few runs);
* ``cpu_estimate_s = mean(run CPU time) * 150 / workers``: the same on an
  otherwise idle machine with ``workers`` free cores (CPU time is not
  inflated by other processes competing for the cores);
* ``slice_wall_s * 150 / len(slice)``: the naive extrapolation of the slice's
  own wall clock (includes process start-up, pessimistic for small slices).

The per-alpha slice is uniform over the grid, so the mean run cost is that of
the grid (the cost grows with ``n = alpha d``). Optionally (``--theory``) the
SE points are timed too: one point per branch, times the 25 points per branch.

Usage: ``python benchmarks/bench_reproduce.py [--workers 2] [--stride 6] [--theory]``;
prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from attnlab.experiments.figures import figure_specs
from attnlab.experiments.store import read_columns
from attnlab.experiments.sweeps import run_sweep


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--stride", type=int, default=6, help="take every stride-th alpha of the 25 (default 6: 5 alphas)")
    ap.add_argument("--theory", action="store_true", help="also time one SE fixed point per branch")
    args = ap.parse_args(argv)

    full = figure_specs("overlaps-vs-alpha")
    alphas = sorted({s["alpha"] for s in full})[:: args.stride]
    sl = [s for s in full if s["alpha"] in alphas and s["seed"] == 0]
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        run_sweep(sl, Path(tmp) / "slice.csv", workers=args.workers, progress=True, command="bench_reproduce")
        slice_wall = time.perf_counter() - t0
        cols = read_columns(Path(tmp) / "slice.csv")
    n_full = len(full)
    out = dict(figure="overlaps-vs-alpha", runs_full=n_full, runs_slice=len(sl), alphas_slice=alphas,
               workers=args.workers, cpu_count=os.cpu_count(), loadavg_start=load0, loadavg_end=os.getloadavg(),
               slice_wall_s=round(slice_wall, 1),
               run_wall_mean_s=round(float(cols["seconds"].mean()), 2),
               run_cpu_mean_s=round(float(cols["cpu_seconds"].mean()), 2),
               wall_estimate_s=round(float(cols["seconds"].mean()) * n_full / args.workers, 1),
               cpu_estimate_s=round(float(cols["cpu_seconds"].mean()) * n_full / args.workers, 1),
               naive_slice_extrapolation_s=round(slice_wall * n_full / len(sl), 1))
    if args.theory:
        import warnings

        from attnlab import ModelParams
        from attnlab.params import BRANCHES
        from attnlab.theory import solve_state_evolution

        p = ModelParams(omega=0.3)
        per = {}
        for branch in BRANCHES:
            t, c = time.perf_counter(), time.process_time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                solve_state_evolution(p, 1.04, branch)
            per[branch] = dict(wall_s=round(time.perf_counter() - t, 1), cpu_s=round(time.process_time() - c, 1))
        out["se_point"] = per
        out["se_curves_cpu_estimate_s"] = round(25 * sum(v["cpu_s"] for v in per.values()) / min(2, args.workers), 1)
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
