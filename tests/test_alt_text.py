"""Every figure's alternative text says the point it makes, with the numbers of the data drawn.

The figure functions of :mod:`attnlab.plots` attach their point themselves
(:func:`attnlab.alt_text.describe`); each test draws one from small inputs whose answer is
known in closed form (a crossing placed by construction, a fraction counted by hand) and
reads it back from the ``alt`` of :func:`attnlab.responsive.figure_html`, where the point
comes first, before :data:`attnlab.alt_text.SHOWS`.
"""
from __future__ import annotations

import html
import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attnlab import plots  # noqa: E402
from attnlab.alt_text import SHOWS, alt_text, describe, point  # noqa: E402
from attnlab.responsive import figure_html  # noqa: E402

NUMBER = r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def said(fig) -> str:
    """The point of ``fig`` as its ``<img alt>`` says it: what comes before :data:`SHOWS`."""
    alt = html.unescape(re.search(r'alt="([^"]*)"', figure_html(fig)).group(1))
    assert alt.startswith("Figure. ") and f" {SHOWS} " in alt, alt
    return alt[len("Figure. "):alt.index(f" {SHOWS} ")]


def test_the_point_comes_first_and_the_description_after_the_marker():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0], label="a")
    ax.set(xlabel="x", ylabel="y")
    ax.legend()
    assert alt_text(fig).startswith(f"Figure. {SHOWS} y against x")  # no point yet
    describe(fig, "The line falls by 1.")
    assert point(fig) == "The line falls by 1."
    assert alt_text(fig).startswith(f"Figure. The line falls by 1. {SHOWS} y against x (x from 0 to 1)")
    assert said(fig) == "The line falls by 1."


def test_branch_crossing_interpolates_where_the_semantic_loss_drops_below():
    alpha = np.linspace(0.2, 2.0, 10)
    theory = dict(branch=np.array(["positional"] * 10 + ["semantic"] * 10), alpha=np.r_[alpha, alpha],
                  eps_t=np.r_[np.full(10, 1.0), 1.0 + 0.3 * (1.37 - alpha)])  # semantic lower above 1.37
    assert plots.branch_crossing(theory) == pytest.approx(1.37)
    # a point that did not converge is left out, as plot_se_table leaves it out
    theory["converged"] = np.where(np.arange(20) == 15, "False", "True")
    assert plots.branch_crossing(theory) == pytest.approx(1.37)
    theory["eps_t"][10:] = 2.0  # never lower: no crossing
    assert np.isnan(plots.branch_crossing(theory))


def test_phase_diagram_point_states_the_range_of_alpha_c():
    rows = [dict(omega=w, alpha_c=0.5 + 3 * w ** 2, alpha_l=0.8 + 3 * w ** 2) for w in (0.0, 0.2, 0.45)]
    text = said(plots.plot_phase_diagram(rows).figure)
    assert f"α_c goes from {0.5:.2f} at ω = 0 to {0.5 + 3 * 0.45 ** 2:.2f} at ω = 0.45" in text
    assert "is 0.80 at ω = 0" in text
    ax = plots.plot_phase_diagram(rows, point="Given by hand: 1.")
    assert said(ax.figure) == "Given by hand: 1."


def test_random_start_point_counts_the_runs_that_end_semantic():
    rng = np.random.default_rng(0)
    rows = []
    for w in (0.1, 0.5):
        for a in (0.5, 2.0):
            for d in (50, 200):
                for seed in range(6):
                    # at the largest d and alpha, seeds 0..k-1 end semantic: k = 4 at omega 0.1, 1 at 0.5
                    semantic = d == 200 and a == 2.0 and seed < (4 if w == 0.1 else 1)
                    m, theta = (0.0, 0.6) if semantic else (0.3, 0.0)
                    rows.append((w, a, d, m + 1e-4 * rng.random(), theta))
    runs = {k: np.array(v) for k, v in zip(("omega", "alpha", "d", "m", "theta"), zip(*rows))}
    text = said(plots.plot_random_start(runs))
    assert text.startswith("At d = 200, the fraction of random starts that end semantic")
    assert f"{4 / 6:.2f} at ω = 0.1 (α = 2.00)" in text and f"{1 / 6:.2f} at ω = 0.5 (α = 2.00)" in text
    assert f"most runs end positional ({19 / 24:.2f} of them)" in text


def _sweep(gap, inits=("random", "semantic"), alphas=(0.5, 1.0, 1.5, 2.0), seeds=(0, 1)):
    """A sweep whose seed-mean training loss is 1 + a/10 from the random start and that plus
    ``gap(alpha)`` from the informed start (the seeds scatter symmetrically about the mean)."""
    rows = []
    for a in alphas:
        for init in inits:
            for s in seeds:
                eps = 1 + a / 10 + (gap(a) if init == "semantic" else 0.0) + (0.01 if s else -0.01)
                rows.append(dict(omega=0.3, sigma=0.5, **{"lambda": 0.01}, A11=0.6, A12=0.4, A21=0.4, A22=0.6,
                                 d=100, seed=s, method="lbfgs", alpha=a, init=init, m=0.1, theta=0.2, eps_t=eps,
                                 eps_g=eps, eps_g_linear=1.0))
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def test_sweep_point_says_where_the_informed_start_becomes_the_lower():
    runs = _sweep(lambda a: 0.02 * (1.2 - a))  # the informed start's mean is lower above alpha = 1.2
    text = said(plots.plot_sweep(runs))
    assert "from the random start it goes from 1.05 at α = 0.5 to 1.2 at α = 2" in text
    assert "The informed start's is the lower one from α ≈ 1.20 on" in text
    text = said(plots.plot_sweep(_sweep(lambda a: 0.01)))
    assert "not lower at any α" in text
    text = said(plots.plot_sweep(_sweep(lambda a: 0.0, inits=("random",)), x="d"))
    assert text.startswith("Mean training loss over seeds: from the random start") and "informed" not in text


def test_phase_map_point_counts_the_cells_where_the_informed_start_wins():
    rows = []
    for w in (0.0, 0.2, 0.4):
        for a in (0.5, 1.0, 1.5, 2.0):
            for init in ("random", "semantic"):
                for seed in (0, 1):
                    # the informed start is lower where alpha > 1 + 2 omega, higher elsewhere
                    gap = -0.01 if (init == "semantic" and a > 1 + 2 * w + 1e-9) else (0.01 if init == "semantic" else 0)
                    rows.append(dict(omega=w, alpha=a, init=init, seed=seed, eps_t=1.0 + gap, d=50, method="lbfgs",
                                     sigma=0.5, **{"lambda": 0.01}))
    runs = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    lower = sum(a > 1 + 2 * w + 1e-9 for w in (0.0, 0.2, 0.4) for a in (0.5, 1.0, 1.5, 2.0))
    theory = dict(omega=np.array([0.0, 0.2, 0.4]), alpha_c=np.array([1.0, 1.4, 1.8]), alpha_l=np.full(3, np.nan))
    text = said(plots.plot_phase_map(runs, theory))
    assert text.startswith(f"The informed start reaches the lower training loss (red) in {lower} of 12 cells")
    assert "the SE α_c goes from 1.00 at ω = 0 to 1.80 at ω = 0.4" in text


def test_explorer_overview_point_names_the_smallest_and_largest_alpha_c():
    grid = [(s, lam, w) for s in (0.4, 0.6) for lam in (0.01, 0.1) for w in (0.0, 0.2)]
    alpha_c = np.array([0.5 + s + lam + w for s, lam, w in grid])
    theory = dict(kind=np.array(["transition"] * len(grid)), sigma=np.array([g[0] for g in grid]),
                  **{"lambda": np.array([g[1] for g in grid])}, omega=np.array([g[2] for g in grid]), alpha_c=alpha_c)
    text = said(plots.plot_explorer_overview(theory))
    assert text == (f"Over the grid α_c goes from {alpha_c.min():.2f} (σ = 0.4, λ = 0.01, ω = 0) "
                    f"to {alpha_c.max():.2f} (σ = 0.6, λ = 0.1, ω = 0.2).")


def test_arbiter_point_gives_the_crossings_of_gradient_descent_and_of_the_state_evolution():
    # paired gaps eps_t(semantic) - eps_t(positional) = 0.01 (alpha - 1.3) at every d: the
    # extrapolation to d -> infinity keeps them, and they cross at alpha = 1.3
    rows = []
    for a in (1.0, 1.2, 1.4, 1.6):
        for d in (100, 200):
            for seed in (0, 1):
                for init in ("positional", "semantic"):
                    eps = 1.0 + (0.01 * (a - 1.3) if init == "semantic" else 0.0) + 0.001 * seed
                    rows.append(dict(omega=0.3, alpha=a, d=d, seed=seed, init=init, eps_t=eps, eps_g=eps,
                                     m=0.3 if init == "positional" else 0.0, theta=0.6 if init == "semantic" else 0.0))
    runs = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    theory = dict(kind=np.array(["transition", "transition"]), minimizer=np.array(["followed", "global"]),
                  omega=np.array([0.3, 0.3]), alpha_c=np.array([1.31, 1.36]), alpha=np.full(2, np.nan),
                  branch=np.array(["", ""]), converged=np.array(["True", "True"]), m=np.zeros(2), theta=np.zeros(2),
                  eps_t=np.zeros(2), eps_g=np.zeros(2))
    text = said(plots.plot_arbiter(runs, theory, ncols=2))
    assert "cross at α_c = 1.30" in text
    assert "the state evolution's α_c is 1.31 with the followed prox and 1.36 with the global one" in text


# --------------------------------------------------------------------------- the built book

def test_every_figure_of_the_book_says_its_point_first(book_html):
    """Every figure of the chapters (an ``<img>`` drawn by ``attnlab.responsive``) has an
    ``alt`` whose point, before "What it shows:", holds a number (the numbers of the data
    drawn: a crossing, a slope, a final loss)."""
    pages = sorted((book_html / "book").glob("0*.html"))
    assert len(pages) == 8
    figures = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for img in re.findall(r'<picture class="attnlab-figure"[^>]*>.*?<img ([^>]*)>', text, re.S):
            figures += 1
            alt = html.unescape(re.search(r'alt="([^"]*)"', img).group(1))
            assert alt.startswith("Figure. ") and f" {SHOWS} " in alt, (page.name, alt[:200])
            said_ = alt[len("Figure. "):alt.index(f" {SHOWS} ")]
            assert not said_.startswith(SHOWS) and len(said_.split()) >= 8, (page.name, said_)
            assert re.search(NUMBER, said_), (page.name, said_)
    assert figures >= 25  # (26 when this test was written)
