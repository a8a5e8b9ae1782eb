"""Project 3 starter: Chapter 6 for the paper's asymmetric positional matrix A.

Run:  python p3_asymmetric_A.py                  (a few seconds per point)
"""
import numpy as np

import attnlab
from attnlab.theory import Quadrature, solve_state_evolution
from attnlab.theory import linear_baseline_error

params = attnlab.ModelParams(A=attnlab.PAPER_A_ASYMMETRIC)
quad = Quadrature.fast()
print("linear baseline eps_g:", linear_baseline_error(params))
for alpha in np.arange(0.5, 2.01, 0.5):
    r = {b: solve_state_evolution(params, alpha, b, quad=quad) for b in ("positional", "semantic")}
    print(alpha, {b: (round(x.eps_t, 5), round(x.eps_g, 5)) for b, x in r.items()})
# TODO (see "What is well defined" on the projects page): for omega in 0..0.5, the gap
# eps_t(semantic) - eps_t(positional) with its error (error_estimate=True ->
# quadrature_error), a crossing only where the gap changes sign by more than that error;
# m and theta of the branches; alpha_l where the semantic eps_g falls below the linear
# baseline, or a lower bound alpha_l > alpha_max; report non-converged or collapsed points
# (r.converged, r.collapsed). Compare with the symmetric A of the book, and explain the
# difference with what tied attention can represent (Chapter 2, exercise on the asymmetric A).
