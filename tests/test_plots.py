"""The book's figure helpers keep its conventions: honest axes, markers where a line stops."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import numpy as np  # noqa: E402

from attnlab import plots  # noqa: E402


def test_bars_start_at_zero():
    # a 7% difference must look like 7%, not like a factor of several
    ax = plots.plot_branch_bars({"positional": 1.22e-3, "semantic": 1.31e-3})
    lo, hi = ax.get_ylim()
    assert lo == 0.0 and hi >= 1.31e-3
    heights = [b.get_height() for b in ax.patches]
    assert np.isclose(heights[1] / heights[0], 1.31 / 1.22)


def test_gd_gap_map_puts_each_gap_in_its_cell():
    gap_map = dict(omega=[0.0, 0.0, 0.1, 0.1], alpha=[0.5, 1.0, 0.5, 1.0], gap=[1e-4, -2e-4, 3e-4, -4e-4])
    mesh = plots.plot_gd_gap_map(gap_map)
    Z = np.asarray(mesh.get_array()).reshape(2, 2)  # rows: omega, columns: alpha
    np.testing.assert_allclose(Z, [[1e-4, -2e-4], [3e-4, -4e-4]])
    assert mesh.norm.vmin == -4e-4 and mesh.norm.vmax == 4e-4  # symmetric: white is zero
    x0, x1 = mesh.axes.get_xlim()
    assert x0 <= 0.25 and x1 >= 1.25  # cells centred on their alpha


def test_phase_diagram_marks_thresholds_beyond_the_search():
    rows = [dict(omega=0.0, alpha_c=0.5, alpha_l=0.7), dict(omega=0.4, alpha_c=1.8, alpha_l=2.3),
            dict(omega=0.5, alpha_c=2.9, alpha_l=np.nan)]
    ax = plots.plot_phase_diagram(rows, alpha_max=3.0)
    beyond = [line for line in ax.get_lines() if line.get_marker() == ">"]
    assert len(beyond) == 1
    np.testing.assert_allclose(beyond[0].get_xdata(), [3.0])
    np.testing.assert_allclose(beyond[0].get_ydata(), [0.5])
    assert "beyond" in beyond[0].get_label()
    # without alpha_max the line just stops (the old behaviour), no marker
    ax = plots.plot_phase_diagram(rows)
    assert not [line for line in ax.get_lines() if line.get_marker() == ">"]


def test_attention_maps_share_one_colour_map_and_scale():
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2)
    M = np.array([[0.7, 0.3], [0.2, 0.8]])
    plots.plot_attention_matrix(M, ax=axes[0], kind="positional", cmap="Purples", title="p")
    plots.plot_token_attention(M / 2, [0, 1], ax=axes[1], kind="semantic", cmap="Purples", vmax=1.0, title="s")
    ims = [ax.images[0] for ax in axes]
    assert [im.get_cmap().name for im in ims] == ["Purples", "Purples"]
    assert [im.get_clim() for im in ims] == [(0.0, 1.0), (0.0, 1.0)]
    # the titles keep the book's colour code
    assert matplotlib.colors.same_color(axes[0].title.get_color(), plots.COLORS["positional"])
    assert matplotlib.colors.same_color(axes[1].title.get_color(), plots.COLORS["semantic"])


def test_se_table_leaves_out_points_that_did_not_converge():
    """A state-evolution row with converged = False is a gap in its branch's line, not a point."""
    import matplotlib.pyplot as plt

    from attnlab.plots import plot_se_table

    theory = dict(branch=np.array(["semantic"] * 3), alpha=np.array([1.0, 0.5, 1.5]),
                  theta=np.array([0.2, 0.1, 0.3]), converged=np.array(["True", "False", "True"]))
    ax = plot_se_table(theory, "theta")
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [0.5, 1.0, 1.5]
    y = line.get_ydata()
    assert np.isnan(y[0]) and list(y[1:]) == [0.2, 0.3]
    plt.close(ax.figure)


def test_arbiter_draws_a_branch_only_where_it_exists():
    """Where a branch does not exist the theory table holds the trivial fixed point (leading
    overlap ~1e-6); the arbiter figure must not draw it as the branch (the global semantic line
    starts near alpha = 0.72 at omega = 0.3, not at theta = 0 below)."""
    from attnlab.experiments.figures import load_results

    runs, theory = load_results("se-vs-gd"), load_results("se-vs-gd", table="theory")
    fig = plots.plot_arbiter(runs, theory, ncols=2)
    theta_panel, lead_panel = fig.axes[0], fig.axes[4]
    line = next(l for l in theta_panel.get_lines() if l.get_label() == "SE semantic, global prox")
    assert min(line.get_xdata()) > 0.7 and min(line.get_ydata()) > plots.LEAD_MIN
    for l in lead_panel.get_lines():  # omega = 0: each branch's own overlap, never the trivial zero
        if l.get_label().startswith("SE "):
            assert min(l.get_ydata()) > plots.LEAD_MIN, l.get_label()
    gap = next(l for l in fig.axes[2].get_lines() if l.get_label() == "SE, global prox")
    assert min(gap.get_xdata()) > 0.7  # the gap only where both branches exist
    eps_g = next(l for l in fig.axes[3].get_lines() if l.get_label() == "SE semantic, global prox")
    assert min(eps_g.get_xdata()) > 0.7
    trivial = (theory["kind"] == "se-curve") & (theory["minimizer"] == "global") & ~(
        plots.on_branch_rows(theory, "semantic") | plots.on_branch_rows(theory, "positional"))
    assert trivial.sum() >= 20  # the table does hold such rows: the test checks something
    matplotlib.pyplot.close(fig)


def test_a_long_title_wraps_between_clauses():
    """rank-2's title ran off its figure: it wraps after "; ", never inside a clause."""
    clauses = [r"$\omega$=0.3, $\sigma$=0.5, $\lambda$=0.01, d=500, 2 seed(s)", "GD + L-BFGS",
               r"points: mean $\pm$ SEM over seeds", "rank-2 student (overlaps: norms over columns)",
               "SE lines: the rank-1 theory"]
    text = "; ".join(clauses)
    lines = plots._wrap_clauses(text).split("\n")
    assert len(lines) == 2 and all(len(line) <= 110 for line in lines)
    assert "\n".join(lines).replace(";\n", "; ") == text
    assert plots._wrap_clauses("a" * 150) == "a" * 150  # one clause: never cut


def test_each_attention_map_can_take_its_own_scale_with_a_uniform_mark():
    """Chapter 1's nearly uniform positional map was white on a scale shared with a sharp map:
    on its own scale (from 0 to its largest weight) its structure shows, and its colour bar
    marks 1/L, the weight of uniform attention, so that the bars compare."""
    import matplotlib.pyplot as plt

    L = 10
    flat = np.full((L, L), 1.1 / L) - 0.5 / L * np.eye(L)  # near uniform, lighter on the diagonal
    sharp = np.eye(L) * 0.9 + 0.1 / L
    fig, axes = plt.subplots(1, 2)
    for ax, M in zip(axes, (flat, sharp)):
        plots.plot_token_attention(M, np.arange(L), ax=ax, cmap="Purples")
        cbar = plots.attention_colorbar(ax)
        assert cbar.mappable is ax.images[0] and ax.images[0].get_clim() == (0.0, M.max())
        marks = [line.get_ydata()[0] for line in cbar.ax.get_lines()]
        assert marks and np.allclose(marks, 1 / L)
    # the flat map uses the range of its colours: the diagonal is lighter than the rest by a third
    image = axes[0].images[0]
    shades = image.norm(flat)
    assert shades.max() == 1.0 and shades.min() < 0.6
    plt.close(fig)


def test_the_starts_have_the_books_names():
    """One name per start, the notation appendix's: 'informed start' for Q0 = Q* (chapter 3
    called it 'informed init' in one panel and 'semantic init' in the other)."""
    from pathlib import Path

    notation = (Path(__file__).resolve().parent.parent / "book" / "appendix" / "notation.md").read_text()
    assert "informed start" in notation and "random start" in notation
    assert plots.START_NAMES == {"random": "random start", "positional": "positional start",
                                 "semantic": "informed start"}
    assert all(plots.INIT_LABELS[k].startswith(v) for k, v in plots.START_NAMES.items())
    runs = dict(alpha=np.array([1.0, 1.0, 1.0, 1.0]), init=np.array(["semantic", "semantic", "random", "random"]),
                eps_t=np.array([1.0, 2.0, 3.0, 4.0]))
    ax = plots.plot_simulation_runs(runs, "eps_t")
    assert sorted(ax.get_legend_handles_labels()[1]) == ["GD, informed start", "GD, random start"]
    matplotlib.pyplot.close(ax.figure)


# --------------------------------------------------------------------------- phone variants

def test_phone_variant_stacks_the_panels_and_fits_the_phone_column():
    import matplotlib.pyplot as plt

    from attnlab.responsive import NARROW_WIDTH_IN, narrow_variant

    fig, axes = plt.subplots(1, 3, figsize=(10, 3.2), sharey=True, constrained_layout=True)
    for k, ax in enumerate(axes):
        ax.plot([0, 1], [k, k + 1], label=f"curve {k}")
        ax.set_title(f"panel {k}")
    axes[0].set_ylabel("test error")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=3)
    narrow = narrow_variant(fig)
    try:
        rows = sorted(ax.get_subplotspec().rowspan.start for ax in narrow.axes)
        cols = {ax.get_subplotspec().colspan.start for ax in narrow.axes}
        assert rows == [0, 1, 2] and cols == {0}  # one column, in reading order
        assert [ax.get_title() for ax in sorted(narrow.axes, key=lambda a: a.get_subplotspec().rowspan.start)] \
            == ["panel 0", "panel 1", "panel 2"]
        # the tick labels that sharey hid are shown again
        assert all(ax.yaxis.get_tick_params()["labelleft"] for ax in narrow.axes)
        narrow.draw_without_rendering()
        assert narrow.get_tightbbox().width <= NARROW_WIDTH_IN + 0.05
        assert fig.get_size_inches()[0] == 10  # the original is untouched
        # a figure that fits already has no variant
        small = plt.figure(figsize=(3.0, 2.5))
        assert narrow_variant(small) is None
    finally:
        plt.close("all")


def test_phone_variant_keeps_the_markers_of_errorbars_in_a_figure_legend():
    """An errorbar's legend entry on the phone shows its marker (the drawn legend keeps only
    the line of the container), as on the desktop."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from attnlab.responsive import narrow_variant

    def markers(legend):  # label -> the markers drawn in its entry
        out = {}
        for column in legend._legend_handle_box.get_children():
            for entry in column.get_children():
                area, text = entry.get_children()
                out[text.get_text().replace("\n", " ")] = {a.get_marker() for a in area.get_children()
                                                            if isinstance(a, Line2D)} - {"None", "none", "", None}
        return out

    fig, axes = plt.subplots(1, 2, figsize=(8, 3), constrained_layout=True)
    for ax in axes:
        ax.plot([0, 1], [0, 1], "-", label="fit")
        ax.errorbar([0.5], [0.4], yerr=[0.1], fmt="s", label="mean of the runs")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=2)
    try:
        fig.draw_without_rendering()
        assert markers(fig.legends[0])["mean of the runs"] == {"s"}
        narrow = narrow_variant(fig)
        narrow.draw_without_rendering()
        assert markers(narrow.legends[0])["mean of the runs"] == {"s"}
        assert markers(narrow.legends[0])["fit"] == set()
    finally:
        plt.close("all")


def test_figure_html_serves_the_phone_variant_below_600_px_with_alt_text():
    import re

    import matplotlib.pyplot as plt

    from attnlab.responsive import PHONE_MEDIA, figure_html

    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    axes[0].set(title="training loss", xlabel="alpha", ylabel="eps_t")
    fig.suptitle("two panels")
    html = figure_html(fig)
    small = plt.figure(figsize=(3, 2))
    small.add_subplot().plot([0, 1])
    try:
        assert html.count("data:image/png;base64,") == 2 and f'media="{PHONE_MEDIA}"' in html
        assert 'alt="Figure. What it shows: two panels. training loss: eps_t against alpha (alpha from 0 to 1)' in html
        wide_px, narrow_px = (float(x) for x in re.findall(r'min-font-px="([\d.]+)"', html))
        # the smallest text is a tick label (rc size "medium"), in pixels of the PNG
        from matplotlib.font_manager import FontProperties

        tick_pt = FontProperties(size=plt.rcParams["xtick.labelsize"]).get_size_in_points()
        assert wide_px == narrow_px == round(tick_pt / 72 * fig.dpi, 2)
        plain = figure_html(small)
        assert plain.count("data:image/png;base64,") == 1 and "<source" not in plain
        assert figure_html(plt.figure()) is None  # no axes: nothing drawn, as IPython does
        from attnlab.responsive import figure_png
        assert figure_png(plt.figure()) is None
    finally:
        plt.close("all")


def test_compact_png_keeps_the_figure_and_its_colours_in_a_third_of_the_bytes():
    """The palette PNG of a figure in the book's colours: the same size in pixels, each of the
    palette's colours kept exactly where the figure drew it, all but a few anti-aliased edge
    pixels within 8 levels of matplotlib's, and much smaller; a PNG that already has at most
    256 colours comes back pixel for pixel, one with transparency unchanged."""
    import io

    import matplotlib.pyplot as plt
    from PIL import Image

    from attnlab.plots import COLORS
    from attnlab.responsive import _png, compact_png

    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    x = np.linspace(0, 3, 200)
    for i, colour in enumerate(COLORS.values()):
        axes[0].plot(x, np.sin(x + i), color=colour, label=f"curve {i}")
        axes[1].fill_between(x, i, i + 0.3 * np.cos(x), color=colour, alpha=0.3)
    axes[0].legend(fontsize=7)
    axes[1].set_title("shaded bands")
    try:
        raw = _png(fig)
        fig.patch.set_alpha(0.0)
        transparent = _png(fig)
    finally:
        plt.close(fig)
    small = compact_png(raw)
    before = Image.open(io.BytesIO(raw))
    after = Image.open(io.BytesIO(small))
    assert after.mode == "P" and after.size == before.size
    assert len(small) < 0.5 * len(raw)
    a = np.asarray(before.convert("RGB")).astype(int)
    b = np.asarray(after.convert("RGB")).astype(int)
    off = np.abs(a - b).max(axis=2)
    assert (off > 8).mean() < 0.01 and (off > 24).mean() < 0.001
    for colour in COLORS.values():
        rgb = np.array([int(colour[k:k + 2], 16) for k in (1, 3, 5)])
        drawn = (a == rgb).all(axis=2)
        assert drawn.sum() > 100 and (b[drawn] == rgb).all(), colour
    # a palette PNG is exact: compacting it again changes no pixel
    again = Image.open(io.BytesIO(compact_png(small)))
    assert (np.asarray(again.convert("RGB")) == b).all()
    assert compact_png(transparent) == transparent
    # transparency as a tRNS chunk (no alpha channel), and 16-bit grey: returned as they are
    for image, extra in ((Image.new("RGB", (8, 8), (255, 255, 255)), dict(transparency=(255, 255, 255))),
                         (Image.new("L", (8, 8), 200), dict(transparency=200)),
                         (Image.new("I;16", (8, 8), 40000), {})):
        out = io.BytesIO()
        image.save(out, "PNG", **extra)
        assert compact_png(out.getvalue()) == out.getvalue()


def test_figures_with_a_colour_map_keep_all_their_colours():
    """A palette would band a colour bar and merge neighbouring values of a heat map: a figure
    that maps numbers to colours (an image with its colour bar, points coloured by value) is
    stored as matplotlib prints it; one of lines, bands and plain markers in a palette."""
    import base64
    import io
    import re

    import matplotlib.pyplot as plt
    from PIL import Image

    from attnlab.responsive import _png, figure_html, figure_png

    def pngs(html):
        return [Image.open(io.BytesIO(base64.b64decode(b)))
                for b in re.findall(r"base64,([A-Za-z0-9+/=]+)", html)]

    heat, axes = plt.subplots(1, 2, figsize=(8, 3))
    colours = axes[0].imshow(np.linspace(0, 1, 100).reshape(10, 10), cmap="Purples")
    heat.colorbar(colours, ax=axes[0])
    axes[1].scatter([0, 1, 2], [1, 0, 2], c=[0.1, 0.5, 0.9])
    lines, ax = plt.subplots(1, 2, figsize=(8, 3))
    ax[0].plot([0, 1], [0, 1], "o-")
    ax[1].fill_between([0, 1], [0, 0], [1, 2], alpha=0.3)
    ax[1].scatter([0, 1], [1, 0], color="k")
    try:
        kept, palette = pngs(figure_html(heat)), pngs(figure_html(lines))
        assert len(kept) == len(palette) == 2
        assert all(im.mode == "RGBA" for im in kept) and all(im.mode == "P" for im in palette)
        assert base64.b64decode(figure_png(heat)) == _png(heat)
        assert Image.open(io.BytesIO(base64.b64decode(figure_png(lines)))).mode == "P"
    finally:
        plt.close("all")


def test_phone_figures_registers_the_html_display_of_figures():
    from IPython.core.interactiveshell import InteractiveShell
    from matplotlib.figure import Figure

    from attnlab.responsive import figure_html, figure_png, phone_figures

    shell = InteractiveShell.instance()
    phone_figures(shell)
    assert shell.display_formatter.formatters["text/html"].lookup_by_type(Figure) is figure_html
    assert shell.display_formatter.formatters["image/png"].lookup_by_type(Figure) is figure_png
    import base64
    import io

    import matplotlib.pyplot as plt
    from PIL import Image

    fig = plt.figure(figsize=(3, 2))
    fig.add_subplot().plot([0, 1])
    try:
        shown, _ = shell.display_formatter.format(fig)
    finally:
        plt.close(fig)
    assert Image.open(io.BytesIO(base64.b64decode(shown["image/png"]))).mode == "P"
    assert shown["text/html"].startswith('<picture class="attnlab-figure"')


def test_alt_text_says_which_curve_is_which_and_the_point():
    """The alternative text names each curve with its colour, line style and marker (the
    channels that survive greyscale) and puts the point set by ``describe`` first."""
    import matplotlib.pyplot as plt

    from attnlab.alt_text import describe
    from attnlab.plots import plot_branch_curves, plot_linear_level
    from attnlab.responsive import figure_html

    ax = plot_branch_curves(np.linspace(0, 3, 20), {"semantic": np.linspace(1, 0, 20),
                                                     "positional": np.linspace(0.5, 0.4, 20)},
                            ylabel=r"training loss $\varepsilon_t$")
    plot_linear_level(0.3, ax=ax)
    ax.legend()
    describe(ax.figure, "The semantic branch ends lower.")
    try:
        html = figure_html(ax.figure)
        assert ('alt="Figure. The semantic branch ends lower. What it shows: training loss ε_t against sample complexity '
                'α = n/d (α from 0 to 3); curves: SE semantic (red, solid line, circles), SE positional '
                '(blue, dashed line, squares), linear baseline (grey, dashed line)."') in html
    finally:
        plt.close("all")


def test_phase_diagram_alt_text_states_its_point():
    import matplotlib.pyplot as plt

    from attnlab.plots import plot_phase_diagram
    from attnlab.responsive import figure_html

    ax = plot_phase_diagram([dict(omega=0.0, alpha_c=1.0, alpha_l=1.2), dict(omega=0.3, alpha_c=1.24, alpha_l=1.49),
                             dict(omega=0.5, alpha_c=2.0, alpha_l=float("nan"))])
    try:
        html = figure_html(ax.figure)
        assert ('alt="Figure. The positional phase lies left of α_c, the semantic phase right of it; α_c goes from '
                '1.00 at ω = 0 to 2.00 at ω = 0.5; α_l, where the semantic minimum beats the linear baseline, is '
                '1.20 at ω = 0. What it shows: positional weight ω against') in html
        assert "α_c (training losses cross) (black, solid line, circles)" in html
    finally:
        plt.close("all")


def test_alt_text_of_error_bars_and_collections():
    """Legend handles of error bars, scatter plots and filled areas (whose line style and colour
    are lists) are described as far as they can be, never an error (chapter 5's GD figure)."""
    import matplotlib.pyplot as plt

    from attnlab.plots import plot_points
    from attnlab.responsive import figure_html

    fig, ax = plt.subplots()
    plot_points([1, 2], [0.1, 0.2], "semantic", ax=ax, yerr=[0.01, 0.02], label="GD semantic")
    ax.scatter([1, 2], [0.3, 0.1], c=[0.2, 0.8], label="scatter")
    ax.fill_between([1, 2], [0, 0], [1, 1], color="0.8", label="band")
    ax.vlines([1.5], 0, 1, linestyles="dashed", label="lines")
    ax.legend()
    try:
        html = figure_html(fig)
        assert 'alt="Figure. What it shows: curves: ' in html and "GD semantic (red" in html
        assert "band" in html and "lines (dashed line)" in html
    finally:
        plt.close("all")
