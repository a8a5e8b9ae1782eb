"""Finite-size extrapolation and the arbiter sweep (se-vs-gd)."""
import numpy as np
import pytest

from attnlab.extrapolation import crossing, extrapolate, extrapolate_runs


def test_extrapolation_recovers_a_known_limit_within_its_error_bar():
    """Synthetic runs y = 0.3 + 40/d + noise (sd 0.01/sqrt(d/1000)), 5 seeds at 3 sizes:
    over 200 draws the limit lies within 2 standard errors in about 90% of them (the
    standard errors are themselves estimated from 5 seeds), and the reported error
    matches the spread of the estimates (within 30%)."""
    rng = np.random.default_rng(0)
    d = np.repeat([1000, 2000, 4000], 5)
    est, err = [], []
    for _ in range(200):
        y = 0.3 + 40 / d + rng.normal(0, 0.01 / np.sqrt(d / 1000))
        ex = extrapolate(d, y)
        est.append(ex.value)
        err.append(ex.error)
    est, err = np.array(est), np.array(err)
    assert 0.85 < np.mean(np.abs(est - 0.3) < 2 * err) <= 1.0
    assert np.std(est) == pytest.approx(np.median(err), rel=0.3)
    two = extrapolate([1000, 1000, 4000, 4000], [0.34, 0.34, 0.31, 0.31])  # exact line through two sizes
    assert two.value == pytest.approx(0.3) and two.slope == pytest.approx(40)


def test_extrapolation_rejects_bad_input():
    with pytest.raises(ValueError, match="d and y"):
        extrapolate([1000, 2000], [0.1])
    with pytest.raises(ValueError, match="finite"):
        extrapolate([1000, 2000], [0.1, np.nan])


def test_crossing_of_paired_gaps():
    """Two inits whose paired gap is 0.01 (1 - alpha) + 5/d: the extrapolated crossing is alpha = 1."""
    rng = np.random.default_rng(1)
    cols = {k: [] for k in ("omega", "alpha", "d", "seed", "init", "eps_t")}
    for a in (0.6, 0.8, 0.9, 1.1, 1.3):
        for d in (1000, 2000, 4000):
            for seed in range(3):
                base = rng.normal(1.0, 0.1)  # shared by the pair: cancels in the paired gap
                for init, y in (("semantic", base + 0.01 * (1 - a) + 5 / d), ("positional", base)):
                    for k, v in zip(cols, (0.3, a, d, seed, init, y)):
                        cols[k].append(v)
    runs = {k: np.array(v) for k, v in cols.items()}
    c = crossing(runs, 0.3)
    assert c["alpha_c"] == pytest.approx(1.0, abs=1e-9) and len(c["gaps"]) == 5
    rows = extrapolate_runs(runs, "eps_t")
    assert len(rows) == 10 and {r["runs"] for r in rows} == {9}


def test_exact_norm_teacher():
    from attnlab.data import sample_teacher
    g, e = sample_teacher(1000, 3), sample_teacher(1000, 3, "exact-norm")
    assert e @ e == pytest.approx(1000) and np.allclose(e / np.linalg.norm(e), g / np.linalg.norm(g))
    with pytest.raises(ValueError, match="teacher"):
        sample_teacher(1000, 3, "uniform")


def test_arbiter_registry_and_quick_run(tmp_path):
    """se-vs-gd: the Gaussian teacher (what its cached runs drew), both inits, four sizes;
    the quick version runs end to end (simulations, both SE minimisers, figure) and its rows
    carry no teacher column (the default teacher, as in the cached table)."""
    from attnlab.experiments.figures import figure_specs, load_results, reproduce, theory_specs
    specs = figure_specs("se-vs-gd")
    assert not any("teacher" in s for s in specs) and {s["d"] for s in specs} == {1000, 2000, 4000, 8000}
    assert {s["init"] for s in specs} == {"semantic", "positional"}
    kinds = {(t["kind"], t.get("branch"), t["minimizer"]) for t in theory_specs("se-vs-gd", quick=True)}
    assert ("transition", None, "global") in kinds and ("se-curve", "positional", "followed") in kinds
    out = reproduce("se-vs-gd", quick=True, out=tmp_path, progress=False, workers=1,
                    overrides={"n_test": 400, "alpha": [0.8, 1.6]})
    assert out["runs_completed"] == 8 and (tmp_path / "se-vs-gd-quick.png").stat().st_size > 10_000
    runs = load_results("se-vs-gd-quick", results_dir=tmp_path)
    assert "teacher" not in runs and "teacher" not in load_results("se-vs-gd")
    theory = load_results("se-vs-gd-quick", table="theory", results_dir=tmp_path)
    assert set(theory["minimizer"]) == {"followed", "global"}
