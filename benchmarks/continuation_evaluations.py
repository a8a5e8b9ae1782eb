"""Where a continuation spends its fixed-point map evaluations (issue 17; machine-independent).

Counts the evaluations of the followed minimiser's expectations (by point count) for
``se_curve`` over 40 alphas in [LO, HI] on each branch, and, for each warm step, how far the
first Newton iterate (from the neighbour's known residual) lies from the accepted fixed point,
and how much that error changes from one step to the next. A step takes one evaluation only
when that first iterate is within the tolerance (3e-4 with the default rule).

    python benchmarks/continuation_evaluations.py [LO HI]     # default 0.1 3
"""
import collections
import sys
import warnings

import numpy as np

import attnlab.theory as th
import attnlab.theory.equations as equations
import attnlab.theory.solver as solver
from attnlab import ModelParams


def main(lo=0.1, hi=3.0):
    warnings.simplefilter("ignore")
    calls, steps = [], []
    expectations, polish = equations.followed_expectations, solver._polish

    def counted(ov, params, rule, branch, symmetry):
        calls.append(rule.points)
        return expectations(ov, params, rule, branch, symmetry)

    def recorded(stages, coarse, x, tol, *args, J=None, r0=None, **kwargs):
        out = polish(stages, coarse, x, tol, *args, J=J, r0=r0, **kwargs)
        if r0 is not None and out[0] is not None:  # a continuation step that was kept
            first = x - np.linalg.solve(np.asarray(J, dtype=float), r0)
            steps.append(out[0] - first)
        return out

    equations.followed_expectations, solver._polish = counted, recorded
    try:
        for branch in ("semantic", "positional"):
            calls.clear(), steps.clear()
            th.se_curve(ModelParams(), np.linspace(lo, hi, 40), branch, quiet=True)
            errors = np.array([np.abs(c).max() for c in steps])
            changes = np.array([np.abs(b - a).max() for a, b in zip(steps, steps[1:])])
            print(f"{branch}: {len(calls)} evaluations {dict(sorted(collections.Counter(calls).items()))} "
                  f"(points: count); {len(steps)} warm steps, {int((errors == 0).sum())} accepted at the first "
                  f"iterate; first-iterate error median {np.median(errors[errors > 0]):.1e}, its change "
                  f"between steps median {np.median(changes[changes > 0]):.1e}")
    finally:
        equations.followed_expectations, solver._polish = expectations, polish


if __name__ == "__main__":
    main(*map(float, sys.argv[1:3]))
