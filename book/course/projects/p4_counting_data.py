"""Project 4 starter: counting task, how often does the unrestricted model go semantic?

Run:  python p4_counting_data.py                 (seconds per training run)
"""
from attnlab.counting import train_counting

for n_train in (2_000,):                   # TODO: n_train from 500 to 50,000
    scores = []
    for seed in range(2):                  # TODO: >= 10 seeds
        res = train_counting("both", seed=seed, n_train=n_train, progress=False)
        scores.append(res.semantic_score)
    print(n_train, [round(s, 2) for s in scores])
# TODO: plot the fraction of semantic solutions (semantic_score above a threshold you
# justify from the "positional" and "semantic" reference models) against n_train.
