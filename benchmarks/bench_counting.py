"""Benchmark: the counting (histogram) experiment at its default configuration.

Trains the one-layer transformer of Cui et al. 2024 (Sec. 1, Fig. 1) with
positional-only, semantic-only and unrestricted ("both") queries/keys for
several seeds and prints, per run, the per-token test accuracy, the semantic
score of the attention layer (~0 positional, 1 fully same-symbol) and the wall
time, followed by a per-variant summary.

Run: ``python benchmarks/bench_counting.py [--seeds 0 1 2 3 4] [--attention both ...]``.
"""
import argparse
import os
import platform

import numpy as np
import torch

from attnlab.counting import ATTENTION_MODES, DEFAULTS, train_counting


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attention", nargs="+", default=list(ATTENTION_MODES))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    args = ap.parse_args(argv)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, defaults {DEFAULTS}")
    print(f"{'attention':<11} {'seed':>4} {'test_acc':>9} {'sem_score':>9} {'seconds':>8} "
          f"{'ep>=98%':>8} {'load':>5}")
    rows = {}
    for att in args.attention:
        for seed in args.seeds:
            r = train_counting(att, seed=seed, progress=False)
            rows.setdefault(att, []).append((r.test_accuracy, r.semantic_score, r.seconds))
            hit = np.flatnonzero(r.test_accuracy_history >= 0.98)
            ep98 = str(hit[0] + 1) if hit.size else "-"
            load = os.getloadavg()[0]  # other processes on the machine inflate `seconds`
            print(f"{att:<11} {seed:>4} {r.test_accuracy:>9.4f} {r.semantic_score:>9.3f} "
                  f"{r.seconds:>8.1f} {ep98:>8} {load:>5.1f}", flush=True)
    print("\nsummary (mean +- std over seeds; min accuracy; max seconds)")
    for att, vals in rows.items():
        a = np.array(vals)
        print(f"{att:<11} acc {a[:, 0].mean():.4f} +- {a[:, 0].std():.4f} (min {a[:, 0].min():.4f})  "
              f"sem {a[:, 1].mean():.3f} +- {a[:, 1].std():.3f} "
              f"[{', '.join(f'{v:.2f}' for v in a[:, 1])}]  "
              f"time {a[:, 2].mean():.1f} s (max {a[:, 2].max():.1f})")


if __name__ == "__main__":
    main()
