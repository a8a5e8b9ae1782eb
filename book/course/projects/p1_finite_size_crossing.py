"""Project 1 starter: the finite-d crossing of the training losses (the "finite-d alpha_c").

Run:  python p1_finite_size_crossing.py          (about a minute at the default sizes)
"""
import numpy as np

import attnlab
from attnlab.extrapolation import crossing

params = attnlab.ModelParams()            # omega = 0.3, sigma = 0.5, lambda = 0.01
alphas = np.array([0.8, 1.0, 1.2, 1.4, 1.6])
dims, seeds = (100,), range(2)            # TODO: d = 100, 200, 500, 1000 and >= 5 seeds

for d in dims:
    gap = np.zeros((len(seeds), len(alphas)))   # eps_t(informed start) - eps_t(random start)
    for i, seed in enumerate(seeds):
        for j, a in enumerate(alphas):
            e = {init: attnlab.run_simulation(params, a, d, init=init, method="lbfgs",
                                              seed=seed, progress=False).eps_t
                 for init in ("random", "semantic")}
            gap[i, j] = e["semantic"] - e["random"]
    print(d, np.round(gap.mean(axis=0) * 1e4, 2), "(1e-4)")
    # TODO: locate the zero of the mean gap (see attnlab.extrapolation.crossing), with an
    # error bar from the seeds, and extrapolate the crossing in 1/d to compare with the
    # state evolution's alpha_c (attnlab.theory.find_transition).
