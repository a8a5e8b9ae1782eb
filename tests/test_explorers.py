"""The kernel-free explorers: the grid, the Bokeh figures built from it, and the cached grid
against the library (the browser test of the built pages is tests/test_explorers_browser.py)."""
from __future__ import annotations

import numpy as np
import pytest

from attnlab import explorers as ex
from attnlab.attention import teacher_attention
from attnlab.extrapolation import gd_gap_map
from attnlab.explorer_grid import (ALPHAS, IncompleteGridError, explorer_tasks, load_explorer_grid)
from attnlab.params import BRANCHES, ModelParams
from attnlab.experiments.figures import get_figure, theory_specs
from attnlab.experiments.runners import run_theory_spec, spec_key
from attnlab.experiments.store import RESULTS_DIR, CorruptResultsError, write_csv_atomic

GRID_CSV = RESULTS_DIR / "explorer-grid-theory.csv"


def _synthetic_grid(path, drop=None):
    """A 2 x 1 x 2 x 3-alpha grid whose values encode their coordinates."""
    fig = get_figure("explorer-grid")
    tasks = explorer_tasks({}, dict(omega=[0.1, 0.2], sigma=[0.5], lam=[0.01, 0.02], alpha=[0.5, 1.0, 1.5]))
    rows = []
    for t in tasks:
        base = {k: v for k, v in t.items() if k != "alphas"}
        rid = spec_key(t)
        if t["kind"] == "se-curve":
            for a in t["alphas"]:
                code = t["omega"] * 1000 + t["lambda"] * 100 + a + (0.5 if t["branch"] == "semantic" else 0)
                rows.append(dict(base, run_id=rid, alpha=a, m=code, theta=code + 1, qnorm=code + 2, eps_t=code + 3,
                                 eps_g=code + 4, eps_g_linear=t["omega"], converged=True))
        else:
            rows.append(dict(base, run_id=rid, alpha_c=1 + t["omega"], alpha_l=2 + t["omega"], eps_g_linear=t["omega"]))
    if drop is not None:
        rows.pop(drop)
    write_csv_atomic(path, rows)
    assert fig.simulations is False
    return path


def test_grid_tasks_cover_the_grid():
    tasks = theory_specs("explorer-grid")
    curves = [t for t in tasks if t["kind"] == "se-curve"]
    thresholds = [t for t in tasks if t["kind"] == "transition"]
    assert len(curves) == 7 * 3 * 4 * 2 and all(t["alphas"] == list(ALPHAS) for t in curves)
    assert len(thresholds) == 13 * 3 * 4
    assert sorted({t["omega"] for t in thresholds}) == [round(0.05 * i, 2) for i in range(13)]


def test_load_explorer_grid_puts_every_value_at_its_point(tmp_path):
    g = load_explorer_grid(_synthetic_grid(tmp_path / "g.csv"))
    assert g.curves["eps_t"].shape == (2, 1, 2, len(BRANCHES), 3)
    for w in (0.1, 0.2):
        for lam in (0.01, 0.02):
            for b in BRANCHES:
                for a in (0.5, 1.0, 1.5):
                    code = w * 1000 + lam * 100 + a + (0.5 if b == "semantic" else 0)
                    assert g.value("m", w, 0.5, lam, b, a) == pytest.approx(code)
                    assert g.value("eps_g", w, 0.5, lam, b, a) == pytest.approx(code + 4)
    assert g.curves["on_branch"].all()
    np.testing.assert_allclose(g.omegas_dense, [0.1, 0.15, 0.2])
    np.testing.assert_allclose(g.alpha_c[:, 0, 1], [1.1, 1.15, 1.2])
    with pytest.raises(ValueError, match="omega = 0.3 is not on the explorer grid"):
        g.value("m", 0.3, 0.5, 0.01, "semantic", 1.0)


@pytest.mark.parametrize("drop", [0, -1])
def test_incomplete_grid_is_an_error_not_a_hole(tmp_path, drop):
    # (a curve without one of its rows no longer matches its run_id: the schema says so first)
    with pytest.raises((IncompleteGridError, CorruptResultsError), match="missing"):
        load_explorer_grid(_synthetic_grid(tmp_path / "g.csv", drop=drop))


def test_missing_grid_says_how_to_make_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="attnlab reproduce explorer-grid"):
        load_explorer_grid(tmp_path / "none.csv")


def _model(layout, name):
    return layout.select_one({"name": name})


def test_curve_explorers_start_on_the_requested_slice(tmp_path):
    g = load_explorer_grid(_synthetic_grid(tmp_path / "g.csv"))
    lay = ex.transition_explorer(g, omega=0.2, sigma=0.5, lam=0.02, alpha=1.0)
    for b in BRANCHES:
        np.testing.assert_allclose(_model(lay, b).data["eps_t"],
                                   [g.value("eps_t", 0.2, 0.5, 0.02, b, a) for a in (0.5, 1.0, 1.5)])
    assert _model(lay, "alpha_c").location == pytest.approx(1.2)
    assert _model(lay, "alpha_l").location == pytest.approx(2.2)
    assert _model(lay, "eps_g_linear").location == pytest.approx(0.2)
    assert _model(lay, "cursor").location == pytest.approx(1.0)
    over = ex.overlaps_explorer(g, omega=0.1, lam=0.01)
    np.testing.assert_allclose(_model(over, "semantic").data["theta"],
                               [g.value("theta", 0.1, 0.5, 0.01, "semantic", a) for a in (0.5, 1.0, 1.5)])
    html = ex.embed(lay).html
    assert 'class="attnlab-explorer"' in html and "transition-explorer" in html


def test_curve_explorers_have_one_legend_for_their_stacked_plots(tmp_path):
    """The overlap explorer's three plots share one legend (under the first): on a phone the
    plots are stacked and a legend under each took a line of its own. Each entry holds the
    branch's line in every plot (a click hides it in all three), and the plots below keep
    the first one's plot area. The transition explorer's two plots too (its thresholds and
    the linear baseline are named in its heading, not in a legend)."""
    from bokeh.models import Legend
    from bokeh.plotting import figure

    g = load_explorer_grid(_synthetic_grid(tmp_path / "g.csv"))
    over = ex.overlaps_explorer(g)
    figs = [m for m in over.references() if isinstance(m, figure)]
    legends = [m for m in over.references() if isinstance(m, Legend)]
    assert len(figs) == 3 and len(legends) == 1
    assert [len(item.renderers) for item in legends[0].items] == [3, 3]
    assert {r for item in legends[0].items for r in item.renderers} == {r for f in figs for r in f.renderers
                                                                         if r.glyph.__class__.__name__ == "Line"}
    assert sorted(f.height for f in figs) == [230 - ex._LEGEND_HEIGHT] * 2 + [230]
    trans = ex.transition_explorer(g)
    legends = [m for m in trans.references() if isinstance(m, Legend)]
    assert len(legends) == 1 and [len(item.renderers) for item in legends[0].items] == [2, 2]


def test_phase_explorer_and_gd_map(tmp_path):
    g = load_explorer_grid(_synthetic_grid(tmp_path / "g.csv"))
    runs = dict(omega=np.array([0.1, 0.1, 0.1, 0.1]), alpha=np.array([0.5] * 4), sigma=np.full(4, 0.5),
                **{"lambda": np.full(4, 0.01)}, init=np.array(["semantic", "semantic", "random", "random"]),
                eps_t=np.array([1.0, 3.0, 5.0, 7.0]))
    gd = gd_gap_map(runs)
    assert gd["gap"] == [2.0 - 6.0] and gd["sigma"] == 0.5
    lay = ex.phase_explorer(g, sigma=0.5, lam=0.02, gd_map=gd)
    np.testing.assert_allclose(_model(lay, "thresholds").data["alpha_c"], [1.1, 1.15, 1.2])
    with pytest.raises(ValueError, match="one sigma"):
        gd_gap_map(dict(runs, sigma=np.array([0.5, 0.6, 0.5, 0.5])))


def test_teacher_explorer_matches_the_library():
    lay = ex.teacher_explorer(omega=0.4, h1=1.3, h2=-0.7)
    expect = teacher_attention(np.array([1.3, -0.7]), 0.4, ModelParams().A_array)
    np.testing.assert_allclose(_model(lay, "teacher").data["value"], expect.ravel())


@pytest.mark.parametrize("call, name", [
    (lambda: ex.teacher_explorer(omega=1.5), "omega"),
    (lambda: ex.teacher_explorer(h1=float("nan")), "h1"),
    (lambda: ex.teacher_explorer(h2=3.0), "h2"),
    (lambda: ex.book_explorer("movie"), "kind"),
])
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_cached_grid_is_what_the_library_computes_now():
    """The cached grid comes from this solver: one (omega, sigma, lambda) point re-solved
    (both branches along alpha, and the thresholds) equals the cached rows to 1e-6."""
    g = load_explorer_grid(GRID_CSV)  # complete, or IncompleteGridError
    tasks = explorer_tasks({}, dict(omega=[0.3], sigma=[0.5], lam=[0.01], alpha=list(g.alphas)))
    assert {spec_key(t) for t in tasks} <= {spec_key(t) for t in theory_specs("explorer-grid")}
    for t in tasks:
        for row in run_theory_spec(t):
            if t["kind"] == "se-curve":
                for f in ("m", "theta", "qnorm", "eps_t", "eps_g"):
                    assert g.value(f, 0.3, 0.5, 0.01, t["branch"], row["alpha"]) == pytest.approx(
                        row[f], rel=1e-6, abs=1e-12, nan_ok=True), (t["branch"], row["alpha"], f)
            else:
                i = int(np.flatnonzero(np.isclose(g.omegas_dense, 0.3))[0])
                _, j, k = g.index(0.3, 0.5, 0.01)
                assert g.alpha_c[i, j, k] == pytest.approx(row["alpha_c"], rel=1e-6)
                assert g.alpha_l[i, j, k] == pytest.approx(row["alpha_l"], rel=1e-6)


def test_embedded_html_is_the_same_in_two_fresh_processes():
    """Bokeh draws random UUIDs for the embedded document; embed() replaces them by ids
    derived from the content, so a chapter executed twice stores the same output."""
    import subprocess
    import sys

    code = ("from attnlab.explorers import book_explorer\n"
            "import sys; sys.stdout.write(book_explorer('teacher', omega=0.4).html)")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)]
    assert runs[0] == runs[1] and 'class="attnlab-explorer"' in runs[0]
    html = runs[0]
    ids = set(ex._UUID.findall(html))
    assert len(ids) == 2 and all(html.count(u) >= 2 for u in ids)  # each id is defined and referenced


def test_curve_explorers_keep_the_grids_alpha_range():
    """The alpha axis is the grid's range, fixed: an auto-range followed the drawn data and
    jumped where a branch is absent (the semantic branch at sigma = 0.4, lambda = 0.04)."""
    from bokeh.models import Range1d
    from bokeh.plotting import figure

    g = load_explorer_grid(GRID_CSV)
    _, j, k = g.index(0.3, 0.4, 0.04)
    assert not g.curves["on_branch"][:, j, k, BRANCHES.index("semantic")].any()  # the case of the issue
    for make in (ex.overlaps_explorer, ex.transition_explorer):
        for kw in (dict(sigma=0.4, lam=0.04), dict(sigma=0.5, lam=0.01)):
            lay = make(g, omega=0.3, **kw)
            ranges = {f.x_range for f in lay.references() if isinstance(f, figure)}
            assert ranges == {_model(lay, "alpha_range")}
            (x_range,) = ranges
            assert isinstance(x_range, Range1d)
            assert (x_range.start, x_range.end) == (g.alphas[0], g.alphas[-1])


def _phase_named(text):
    import re

    match = re.search(r"phase <b style='color:([^']+)'>(positional|semantic)</b>", text)
    assert match, text
    assert match[1] == ex.COLORS[match[2]], text
    return match[2]


@pytest.mark.parametrize("point, phase, words", [
    ((0.3, 0.5, 0.01, 1.0), "positional", "(α < α_c = 1.2"),
    ((0.3, 0.5, 0.01, 2.0), "semantic", "(α ≥ α_c = 1.2"),
    ((0.0, 0.6, 0.005, 1.0), "semantic", "for all α in (0, 3] (no crossing"),
    ((0.3, 0.4, 0.04, 0.5), "positional", "below α = 0.9 neither branch exists"),
])
def test_transition_readout_names_the_phase_from_the_start(point, phase, words):
    """The readout is written in Python too (before any JavaScript runs), and names the
    phase where the training losses do not cross: it said `phase (no crossing in (0, 3]: ...)`."""
    g = load_explorer_grid(GRID_CSV)
    omega, sigma, lam, alpha = point
    text = _model(ex.transition_explorer(g, omega=omega, sigma=sigma, lam=lam, alpha=alpha), "readout").text
    assert text.startswith(f"At α = {alpha:.2f}: phase ") and _phase_named(text) == phase and words in text, text
    # the JavaScript has no phrase of its own for that case: it shows the one made here
    assert "no crossing" not in ex._PHASE_JS and "no_crossing[" in ex._PHASE_JS


def test_transition_readout_says_where_a_branch_has_no_minimum():
    """Where a branch's curve has a gap at the cursor (no fixed point, or one unstable along its
    pinned overlap: issue 39), the readout says so in words, not only "n/a"."""
    g = load_explorer_grid(GRID_CSV)
    absent = _model(ex.transition_explorer(g, omega=0.3, sigma=0.4, lam=0.04, alpha=0.5), "readout").text
    assert "finds no semantic minimum here" in absent and "finds no positional minimum here" in absent, absent
    present = _model(ex.transition_explorer(g, omega=0.3, sigma=0.5, lam=0.01, alpha=2.0), "readout").text
    assert "minimum here" not in present, present


@pytest.mark.parametrize("omega, alpha, branch", [(0.5, 1.0, "semantic"), (0.1, 2.4, "positional")])
def test_transition_readout_says_where_the_state_evolution_cannot_tell(omega, alpha, branch):
    """Between the two probes' spinodals (book Chapter 6: semantic at omega 0.5 from 0.76 to 1.12,
    positional at omega 0.1 from 2.25 to 2.45) the readout says that the state evolution cannot
    tell, not that there is no minimum (issue 39); outside the bands it does not."""
    g = load_explorer_grid(GRID_CSV)
    text = _model(ex.transition_explorer(g, omega=omega, sigma=0.5, lam=0.01, alpha=alpha), "readout").text
    assert f"cannot tell whether there is a {branch} minimum here" in text and "finds no " + branch not in text, text
    assert g.curves["undecided"].any()
    outside = _model(ex.transition_explorer(g, omega=0.5, sigma=0.5, lam=0.01, alpha=0.5), "readout").text
    assert "cannot tell" not in outside and "finds no semantic minimum here" in outside, outside


def test_transition_readout_in_javascript_is_the_one_of_python(tmp_path):
    """The slider callback, run in Node with plain objects for the Bokeh models, writes at
    every grid point (and three cursors) the readout that Python writes, naming the phase."""
    import json
    import shutil
    import subprocess

    from bokeh.models import ColumnDataSource, Div, Slider, Span

    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is needed to run the explorer's JavaScript")
    g = load_explorer_grid(GRID_CSV)
    lay = ex.transition_explorer(g)
    callback = _model(lay, "omega").js_property_callbacks["change:value"][0]

    def plain(v):
        if isinstance(v, ColumnDataSource):
            return {"data": {k: np.asarray(c, float).tolist() for k, c in v.data.items()}}
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, Div):
            return {"text": ""}
        if isinstance(v, Span):
            return {"location": v.location, "visible": v.visible}
        if isinstance(v, Slider):
            return {"value": v.value}
        return v

    states = [(i, j, k, a) for i, j, k in np.ndindex(g.eps_g_linear.shape) for a in (0, 9, len(g.alphas) - 1)]
    script = tmp_path / "readout.js"
    script.write_text(  # json writes NaN as NaN: a JavaScript literal, as Bokeh sends it
        f"const args = {json.dumps(plain(dict(callback.args)))};\n"
        f"const run = new Function(...Object.keys(args), {json.dumps(callback.code)});\n"
        f"const out = [];\n"
        f"for (const [i, j, k, a] of {json.dumps(states)}) {{\n"
        "  args.omega.value = i; args.sigma.value = j; args.lam.value = k; args.alpha.value = a;\n"
        "  run(...Object.values(args)); out.push(args.readout.text);\n"
        "}\n"
        "console.log(JSON.stringify(out));\n")
    texts = json.loads(subprocess.run([node, str(script)], capture_output=True, text=True, check=True).stdout)
    assert texts == [ex._transition_readout(g, *s) for s in states]
    phases = {_phase_named(t) for t in texts}
    assert phases == {"positional", "semantic"}
    assert sum("for all α in (0, 3]" in t for t in texts) >= 30  # points without a crossing are checked
