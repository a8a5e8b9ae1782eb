"""Project 2 starter: how often does Adam from a random start reach the semantic minimum?

Run:  python p2_adam_random_start.py             (about a minute at the default sizes)
"""
import attnlab

params = attnlab.ModelParams()
d, alpha = 100, 1.5                        # TODO: alpha from 1 to 5, d = 100 and 300
for lr in (0.01,):                         # TODO: lr in (0.003, 0.01, 0.03, 0.1)
    outcomes = []
    for seed in range(3):                  # TODO: >= 20 seeds for a frequency
        data = attnlab.sample_dataset(params, int(alpha * d), d, seed=seed)
        res = attnlab.minimize_risk(data, params.lam, init="random", method="adam",
                                    lr=lr, steps=500, seed=seed, progress=False)
        ov = attnlab.overlaps(res.Q, data.Qstar, data.P)
        outcomes.append(abs(ov.theta[0]) > abs(ov.m[0]))
    print(lr, f"semantic in {sum(outcomes)} of {len(outcomes)} runs")
# TODO: the same with method="gd"; plot the frequency against alpha for each lr.
