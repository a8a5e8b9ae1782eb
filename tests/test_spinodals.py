"""Spinodal lines (issue 39): where each branch's minimum appears or ends, against the
stability of the fixed points on either side, and drawn on the phase diagram."""
import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnlab import ModelParams  # noqa: E402
from attnlab.params import BRANCHES  # noqa: E402
from attnlab.plots import plot_spinodals  # noqa: E402
from attnlab.theory import solve_state_evolution  # noqa: E402
from attnlab.theory.spinodals import find_spinodals, minimum_intervals  # noqa: E402

SEARCH = dict(alpha_min=0.5, alpha_max=4.0, grid_points=6, xtol=0.01)


def test_semantic_spinodal_at_omega_one_half():
    """omega 0.5: the semantic minimum appears at alpha_s ~ 1.11 (default rule; GD from Q* at
    d = 1000 leaves m ~ 0 below it). Just below, the fixed point is unstable along m; just above, stable."""
    P = ModelParams(omega=0.5)
    (start, end), = minimum_intervals(P, "semantic", **SEARCH)
    assert 1.0 < start < 1.25 and end == SEARCH["alpha_max"]
    below, above = (solve_state_evolution(P, a, "semantic", warn=False) for a in (0.97 * start, 1.03 * start))
    assert below.stability > 1 > above.stability


def test_positional_spinodal_at_omega_zero():
    """omega 0: the positional minimum ends at alpha_s ~ 2.23; the semantic one exists in the whole search."""
    s = find_spinodals(ModelParams(omega=0.0), **SEARCH)
    assert 2.0 < s.alpha_s_positional < 2.5 and s.positional == [(SEARCH["alpha_min"], s.alpha_s_positional)]
    assert s.alpha_s_semantic == SEARCH["alpha_min"]
    below, above = (solve_state_evolution(ModelParams(omega=0.0), a, "positional", warn=False)
                    for a in (0.97 * s.alpha_s_positional, 1.03 * s.alpha_s_positional))
    assert below.stable and above.minimum is False and above.status == "unstable"
    assert below.status == "undecided"  # the held probe's end is at 2.0: below the default one, the probes disagree


@pytest.mark.parametrize("branch, omega, default, held", [("semantic", 0.5, (1.0, 1.25), (0.7, 0.9)),
                                                         ("positional", 0.1, (2.3, 2.6), (2.1, 2.4))])
def test_held_probe_spinodal_where_its_eigenvalue_crosses_one(branch, omega, default, held):
    """The held probe's spinodal (bisection along the followed branch) against a separate path:
    fresh solves on a grid 0.05 apart around it and the held eigenvalue interpolated linearly
    where it crosses 1 (book Chapter 6, "How sure is a spinodal?": semantic at omega 0.5 held
    0.76 against 1.12, positional at omega 0.1 held 2.25 against 2.45, default rule)."""
    P = ModelParams(omega=omega)
    (s_default,), (s_held,) = ([e for iv in minimum_intervals(P, branch, **SEARCH, basins=b) for e in iv
                                if SEARCH["alpha_min"] < e < SEARCH["alpha_max"]] for b in ("redescend", "held"))
    assert default[0] < s_default < default[1] and held[0] < s_held < held[1]
    grid = np.round(np.arange(held[0], held[1] + 1e-9, 0.05), 2)
    lam = np.array([solve_state_evolution(P, float(a), branch, warn=False).stability_held for a in grid])
    i = int(np.flatnonzero(np.diff(np.sign(lam - 1.0)))[0])
    crossing = grid[i] + (1 - lam[i]) * (grid[i + 1] - grid[i]) / (lam[i + 1] - lam[i])
    assert s_held == pytest.approx(crossing, rel=0.02)
    assert find_spinodals(P, **SEARCH, basins="held").basins == "held"


def test_spinodal_probe_must_be_named():
    with pytest.raises(ValueError, match="basins"):
        find_spinodals(ModelParams(), **SEARCH, basins="linear")


@pytest.mark.parametrize("kw,name", [(dict(alpha_min=0.0), "alpha_min"), (dict(alpha_min=2.0, alpha_max=1.0), "alpha_max"),
                                     (dict(grid_points=2), "grid_points"), (dict(xtol=0.0), "xtol")])
def test_bad_search_arguments_name_the_parameter(kw, name):
    with pytest.raises(ValueError, match=name):
        minimum_intervals(ModelParams(), "semantic", **kw)


def test_plot_spinodals_shades_the_coexistence_region():
    rows = [dict(omega=0.0, alpha_s_semantic=0.05, alpha_s_positional=2.2, alpha_min=0.05),
            dict(omega=0.5, alpha_s_semantic=1.1, alpha_s_positional=float("nan"), alpha_min=0.05)]
    ax = plot_spinodals(rows, alpha_max=3.0)
    labels = [line.get_label() for line in ax.get_lines()]
    assert any("semantic" in s for s in labels) and any("positional" in s for s in labels)
    band = [c for c in ax.collections if "coexistence" in c.get_label()]
    assert len(band) == 1 and band[0].get_hatch() == "//"
    xs = np.concatenate([p.vertices[:, 0] for p in band[0].get_paths()])
    assert xs.min() == 0.0 and xs.max() == 3.0  # from 0 (semantic everywhere) to the edge (positional beyond)


def test_plot_spinodal_probes_shades_only_where_the_probes_differ():
    """The band between the two probes' lines: at omega 0 from the held probe's positional end to
    the default one's; at omega 0.4 from 0 (held: semantic everywhere) to the default start; none
    where they coincide (omega 0.3)."""
    from attnlab.plots import plot_spinodal_probes
    default = dict(omega=[0.0, 0.3, 0.4], alpha_s_semantic=[0.05, 0.05, 0.6], alpha_s_positional=[2.2, 2.8, np.nan],
                   alpha_min=[0.05] * 3)
    held = dict(default, alpha_s_semantic=[0.05, 0.05, 0.05], alpha_s_positional=[2.0, 2.8, np.nan])
    ax = plot_spinodal_probes(default, held, alpha_max=3.0)
    bands = {c.get_label().split(":")[0]: c for c in ax.collections if "disagree" in c.get_label()}
    assert set(bands) == {"semantic", "positional"}
    pos = np.concatenate([p.vertices for p in bands["positional"].get_paths()])
    assert np.isclose(pos[:, 0].min(), 2.0) and np.isclose(pos[:, 0].max(), 2.2) and pos[:, 1].max() < 0.3 + 1e-9
    sem = np.concatenate([p.vertices for p in bands["semantic"].get_paths()])
    assert np.isclose(sem[:, 0].min(), 0.0) and np.isclose(sem[:, 0].max(), 0.6) and sem[:, 1].min() >= 0.3 - 1e-9
    held_lines = [ln for ln in ax.get_lines() if "held probe" in ln.get_label()]
    assert len(held_lines) == 2 and all(ln.get_linestyle() == ":" for ln in held_lines)
    with pytest.raises(ValueError, match="same omega"):
        plot_spinodal_probes(default, dict(held, omega=[0.0, 0.3, 0.5]))


def test_explorer_grid_hides_points_that_are_no_minimum(tmp_path):
    """A grid row with stability >= 1 (written since issue 39) is not drawn (on_branch False:
    the explorers show NaN there, not a curve through a saddle); rows without the column are kept."""
    from attnlab.experiments.store import read_columns, write_csv_atomic
    from attnlab.explorer_grid import load_explorer_grid
    from test_explorers import _synthetic_grid

    path = _synthetic_grid(tmp_path / "g.csv")
    assert load_explorer_grid(path).curves["on_branch"].all()  # no stability column: as before
    cols = read_columns(path)
    rows = [{k: cols[k][i] for k in cols} for i in range(len(cols["kind"]))]
    for r in rows:
        if r["kind"] == "se-curve":
            r["stability"] = 1.4 if (r["branch"] == "semantic" and r["alpha"] == 0.5) else 0.3
    write_csv_atomic(path, rows)
    g = load_explorer_grid(path)
    b = BRANCHES.index("semantic")
    assert not g.curves["on_branch"][..., b, 0].any() and g.curves["on_branch"][..., b, 1:].all()
    assert g.curves["on_branch"][..., 1 - b, :].all()
    assert g.curves["stability"][0, 0, 0, b, 0] == 1.4


@pytest.mark.parametrize("omega,sigma,lam,branch", [(0.5, 0.5, 0.01, "semantic"), (0.0, 0.5, 0.01, "positional"),
                                                    (0.5, 0.6, 0.04, "semantic"), (0.2, 0.6, 0.02, "positional")])
def test_grid_spinodals_agree_with_the_bisection(omega, sigma, lam, branch):
    """The explorers' spinodals, read from the cached grid (stability interpolated between grid
    points 0.1 apart in alpha), agree with the bisection of fresh state-evolution solves
    (``find_spinodals``) to 3%, also at a sigma and lambda other than the book's."""
    from attnlab.explorer_grid import grid_spinodals, load_explorer_grid

    grid = load_explorer_grid()
    assert np.isfinite(grid.curves["stability"]).mean() > 0.9, "the cached grid predates the stability column"
    i, j, k = grid.index(omega, sigma, lam)
    key = f"alpha_s_{branch}"
    cached = grid_spinodals(grid)[key][i, j, k]
    fresh = getattr(find_spinodals(ModelParams(omega=omega, sigma=sigma, lam=lam), alpha_min=0.1,
                                   alpha_max=float(grid.alphas[-1]), grid_points=8, xtol=1e-3), key)
    assert np.isfinite(fresh) and abs(cached - fresh) < 0.03 * fresh, (cached, fresh)
