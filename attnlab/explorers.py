"""Explorers that work in a static HTML page: Bokeh figures whose sliders run in the browser.

Nothing is computed when a slider moves: the figures carry the state evolution
solved ahead of time on a grid (:mod:`attnlab.explorer_grid`) and a few lines of
JavaScript pick the slice of the chosen ``(omega, sigma, lambda)``. The
teacher explorer is pure arithmetic, ``T(h*) = (1 - omega) softmax(h* h*^T) +
omega A``, done in the page.

Each function returns a Bokeh layout; :func:`embed` turns it into HTML that draws
wherever the chapter runs:

* in a notebook front end (JupyterLab, classic Notebook, VS Code, Colab), the output
  carries BokehJS itself, inline (about 1.6 MB, loaded once per page; Colab, which runs
  each output in a frame of its own, loads it per output), so nothing is fetched;
* in the book's HTML pages, which load BokehJS from the book's own static files
  (``book/_ext/offline_assets.py`` copies the files that the installed Bokeh ships,
  :func:`bokehjs_files`, and sets ``ATTNLAB_EXPLORER_BOKEHJS=page`` for the kernels that
  execute the chapters), the output is the document alone.

Models a test or a script can look up by name (``doc.get_model_by_name``): the
root layouts ``transition-explorer``, ``overlaps-explorer``, ``phase-explorer`` and
``teacher-explorer``, sliders ``omega``, ``sigma``, ``lam``, ``alpha`` (``h1``, ``h2`` in the teacher
explorer), data sources ``semantic`` and ``positional`` (columns ``alpha`` and the
plotted quantities), spans ``alpha_c``, ``alpha_l``, ``eps_g_linear``,
``cursor``, the text ``readout``, and ``alpha_range``, the curve explorers' shared
``alpha`` axis (fixed to the grid's range); ``data-table``, the values drawn, as a table
(:mod:`attnlab.explorer_access`: slider names, live readout, data table).
"""
from __future__ import annotations

import hashlib
import re
import uuid
from pathlib import Path

import numpy as np

from .explorer_grid import ExplorerGrid, grid_spinodals
from .extrapolation import gd_gap_map
from .params import BRANCHES, DEFAULT_ALPHA_MAX, ModelParams
from .explorer_access import make_accessible
from .plots import COLORS, DASHES

__all__ = ["transition_explorer", "overlaps_explorer", "phase_explorer", "teacher_explorer",
           "embed", "book_explorer", "bokehjs_files", "bokehjs_names"]

#: How each branch's line looks, in words (the plots' names for screen readers).
_STYLE_WORDS = {"semantic": "red, solid line", "positional": "blue, dashed line"}

_LABELS = {"eps_t": "training loss ε_t", "eps_g": "test error ε_g", "m": "m = 1·Q/d",
           "theta": "θ = Q*·Q/d", "qnorm": "|Q|²/d"}

# Offset of the curve of grid point (i, j, k) and branch b in the flat arrays, and the
# slice-and-redraw step shared by the curve explorers.
_SELECT_JS = """
const i = Math.round(omega.value), j = Math.round(sigma.value), k = Math.round(lam.value);
const ia = Math.round(alpha.value);
const na = alphas.length, nb = branches.length;
const at = (b) => (((i * shape[1] + j) * shape[2] + k) * nb + b) * na;
for (const [b, name] of branches.entries()) {
  const src = sources[name], data = {alpha: alphas};
  for (const f of fields) {
    const flat = grid.data[f], out = new Array(na);
    for (let a = 0; a < na; a++) out[a] = flat[at(b) + a];
    data[f] = out;
  }
  src.data = data;
}
const t = (i_dense[i] * shape[1] + j) * shape[2] + k;
"""


#: Margins of every slider (top, right, bottom, left): room on the right for the handle at the
#: end of its track, which Bokeh's default of 5 px clips.
SLIDER_MARGIN = (5, 16, 5, 5)


def _slider(name, title, values, value, fmt="0[.]00"):
    """A slider over the grid values: its value is the index, its label the grid value."""
    from bokeh.models import CustomJSTickFormatter, Slider

    values = [float(v) for v in values]
    idx = int(np.argmin(np.abs(np.asarray(values) - value)))
    formatter = CustomJSTickFormatter(args=dict(v=values), code="return String(v[Math.round(tick)]);")
    # one grid value: a fixed slider (Bokeh needs start < end)
    s = Slider(start=0, end=max(len(values) - 1, 1), step=1, value=idx, title=title, name=name, format=formatter,
               sizing_mode="stretch_width", show_value=True, disabled=len(values) == 1, margin=SLIDER_MARGIN)
    s.tags = [values]
    return s


def _check(name, value, lo, hi):
    """A finite float in ``[lo, hi]``, or ``ValueError`` naming ``name``."""
    v = float(value)
    if not (np.isfinite(v) and lo <= v <= hi):
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value!r}")
    return v


#: Height (px) that a legend of one row below a plot takes from the plot's height.
_LEGEND_HEIGHT = 62


def _figure(ylabel, x_range=None, height=230, title=None):
    from bokeh.plotting import figure

    kw = dict(x_range=x_range) if x_range is not None else {}
    # the toolbar above the plot, not beside it: at phone width the plot keeps the column's width
    fig = figure(height=height, sizing_mode="stretch_width", tools="pan,wheel_zoom,box_zoom,reset,save",
                 toolbar_location="above", title=title, **kw)
    from bokeh.models import BasicTickFormatter

    fig.xaxis.axis_label = "α = n/d"
    fig.yaxis.axis_label = ylabel
    fig.yaxis.formatter = BasicTickFormatter(use_scientific=False)
    fig.toolbar.logo = None
    return fig


def _curve_explorer(grid: ExplorerGrid, fields, omega, sigma, lam, alpha, extra_js="", extra_args=None,
                    decorate=None, title="", name="explorer", key="", readout_text=None):
    """Sliders over the grid and one figure per field with both branches' curves.

    ``readout_text(grid, i, j, k, a)``, if given, writes the initial readout in Python
    (what ``extra_js`` writes in the page at the grid point ``(i, j, k)`` and cursor ``a``)."""
    from bokeh.layouts import column, row
    from bokeh.models import ColumnDataSource, CustomJS, Div, HoverTool, Legend, Range1d, Span

    sliders = dict(omega=_slider("omega", "ω (positional weight)", grid.omegas, _check("omega", omega, 0, 1)),
                   sigma=_slider("sigma", "σ (token std)", grid.sigmas, _check("sigma", sigma, 0, 10)),
                   lam=_slider("lam", "λ (ridge)", grid.lams, _check("lam", lam, 0, 10)),
                   alpha=_slider("alpha", "α = n/d (cursor)", grid.alphas, _check("alpha", alpha, 0, 1e3)))
    flat = {f: np.where(grid.curves["on_branch"], grid.curves[f], np.nan).ravel() for f in fields}
    store = ColumnDataSource({f: v for f, v in flat.items()}, name="grid")
    sources = {b: ColumnDataSource({"alpha": grid.alphas, **{f: np.zeros(len(grid.alphas)) for f in fields}}, name=b)
               for b in BRANCHES}
    spans = dict(alpha_c=Span(location=0, dimension="height", line_color=COLORS["alpha_c"], line_dash="dashed",
                              line_width=1.5, name="alpha_c"),
                 cursor=Span(location=0, dimension="height", line_color="#999999", line_width=1, name="cursor"))
    # the grid's alpha range, fixed: an auto-range would follow the data and jump where a branch is absent
    x_range = Range1d(float(grid.alphas[0]), float(grid.alphas[-1]), name="alpha_range")
    figs, legends = [], []
    for f in fields:
        fig = _figure(_LABELS[f], x_range=x_range)
        items = []
        for b in BRANCHES:
            r = fig.line("alpha", f, source=sources[b], color=COLORS[b], line_width=2.5, line_dash=DASHES[b])
            items.append((f"{b} branch", [r]))
            fig.add_tools(HoverTool(renderers=[r], mode="vline",
                                    tooltips=[("branch", b), ("α", "@alpha{0.00}"), (_LABELS[f], f"@{f}{{0.00000}}")]))
        fig.add_layout(spans["alpha_c"])
        fig.add_layout(spans["cursor"])
        if decorate is not None:
            decorate(fig, f, items)
        if legends and len(items) == len(BRANCHES):
            # the branches only: one legend under the first plot serves every plot (on a phone the
            # plots are stacked, and each legend took a line of its own); a click hides the branch in all
            for item, (_, renderers) in zip(legends[0].items, items):
                item.renderers += renderers
            fig.height -= _LEGEND_HEIGHT  # (the height holds the legend: the same plot area as the first)
        else:
            legends.append(Legend(items=items, location="center", orientation="horizontal", click_policy="hide",
                                  spacing=14))
            fig.add_layout(legends[-1], "below")
        figs.append(fig)
    readout = Div(text="", name="readout", sizing_mode="stretch_width")
    dense_index = [int(np.flatnonzero(np.isclose(grid.omegas_dense, w))[0]) for w in grid.omegas]
    args = dict(grid=store, sources=sources, alphas=[float(a) for a in grid.alphas], fields=list(fields),
                branches=list(BRANCHES), shape=list(grid.eps_g_linear.shape), i_dense=dense_index,
                ac_table=[float(x) for x in grid.alpha_c.ravel()], al_table=[float(x) for x in grid.alpha_l.ravel()],
                eps_lin=[float(x) for x in grid.eps_g_linear.ravel()], readout=readout, **spans,
                **sliders, **(extra_args or {}))
    # the sliders' values are grid indices
    code = (_SELECT_JS + "const ac = ac_table[t], al = al_table[t], x = alphas[ia];\n"
            + "alpha_c.location = Number.isFinite(ac) ? ac : null; alpha_c.visible = Number.isFinite(ac);\n"
            + "cursor.location = x;\n" + extra_js)
    callback = CustomJS(args=args, code=code)
    for s in sliders.values():
        s.js_on_change("value", callback)
    controls = column(row(sliders["omega"], sliders["sigma"], sizing_mode="stretch_width"),
                      row(sliders["lam"], sliders["alpha"], sizing_mode="stretch_width"), sizing_mode="stretch_width")
    head = Div(text=f"<b>{title}</b> <small>({key}grey vertical line: the α cursor)</small>",
               sizing_mode="stretch_width")
    layout = column(head, controls, readout, *figs, sizing_mode="stretch_width", name=name)
    _on_ready(layout, callback)
    _fill_python(grid, sources, fields, sliders, spans)
    if readout_text is not None:
        readout.text = readout_text(grid, *(int(sliders[n].value) for n in ("omega", "sigma", "lam", "alpha")))
    branches = ", ".join(f"{b} branch ({_STYLE_WORDS[b]})" for b in BRANCHES)
    make_accessible(layout, sliders=list(sliders.values()), readout=readout,
                    plots=[(fig, f"{title}: {_LABELS[f]} against α = n/d; {branches}; {key}grey vertical line: "
                                 f"the α cursor") for fig, f in zip(figs, fields)],
                    keys=[("α", sources[BRANCHES[0]], "alpha")],
                    columns=[(f"{_LABELS[f]}, {b}", sources[b], f) for f in fields for b in BRANCHES],
                    summary=f"{title}: data table of the curves at this setting")
    return layout


def _on_ready(layout, callback):
    """Run ``callback`` once the page has drawn the document (the readouts are written in JavaScript)."""
    from bokeh.document import Document

    doc = Document()
    doc.add_root(layout)
    doc.js_on_event("document_ready", callback)


def _fill_python(grid, sources, fields, sliders, spans):
    """The initial slice, also in Python (for ``bokeh.io.show`` and for exports without JavaScript)."""
    i, j, k, a = (int(sliders[n].value) for n in ("omega", "sigma", "lam", "alpha"))
    for b, name in enumerate(BRANCHES):
        data = {"alpha": grid.alphas}
        for f in fields:
            data[f] = np.where(grid.curves["on_branch"][i, j, k, b], grid.curves[f][i, j, k, b], np.nan)
        sources[name].data = data
    t = (int(np.flatnonzero(np.isclose(grid.omegas_dense, grid.omegas[i]))[0]), j, k)
    ac = grid.alpha_c[t]
    spans["alpha_c"].location = float(ac) if np.isfinite(ac) else None
    spans["alpha_c"].visible = bool(np.isfinite(ac))
    spans["cursor"].location = float(grid.alphas[a])


# The readout of the transition explorer; :func:`_transition_readout` writes the same text in Python.
_PHASE_JS = """
const fmt = (v, d) => Number.isFinite(v) ? v.toFixed(d) : "n/a";
const at_x = (name, f) => sources[name].data[f][ia];
const lin = eps_lin[(i * shape[1] + j) * shape[2] + k];
eps_g_linear.location = lin;
alpha_l.location = Number.isFinite(al) ? al : null; alpha_l.visible = Number.isFinite(al);
let phase;
if (!Number.isFinite(ac)) phase = no_crossing[(i * shape[1] + j) * shape[2] + k];
else if (x < ac) phase = phase_names.positional + " (α < α_c = " + ac.toFixed(3) + ")";
else phase = phase_names.semantic + " (α ≥ α_c = " + ac.toFixed(3) + ")";
let absent = "";
for (const [b, name] of branches.entries()) {
  if (undecided[at(b) + ia]) absent += "<br>The state evolution cannot tell whether there is a " + name + undecided_note;
  else if (!Number.isFinite(at_x(name, "eps_t"))) absent += "<br>The default stability test finds no " + name + absent_note;
}
readout.text = "At α = " + x.toFixed(2) + ": phase " + phase + absent
  + "<br>training loss ε_t: semantic " + fmt(at_x("semantic", "eps_t"), 5) + ", positional " + fmt(at_x("positional", "eps_t"), 5)
  + "; test error ε_g: semantic " + fmt(at_x("semantic", "eps_g"), 5) + ", positional " + fmt(at_x("positional", "eps_g"), 5)
  + ", linear " + fmt(lin, 5) + "; α_l = " + fmt(al, 3);
"""


#: The readout where a branch has no minimum at the slider's alpha by the default stability probe
#: (after "The default stability test finds no semantic"), and where the two probes disagree (after
#: "The state evolution cannot tell whether there is a semantic"; the curve is drawn by the default one).
ABSENT_NOTE = " minimum here (its fixed point is unstable or absent at this α)."
UNDECIDED_NOTE = (" minimum here (its two stability tests disagree at this α: Chapter 6, “How sure is a "
                  "spinodal?”).")


def _phase_name(branch: str) -> str:
    """The phase's name in bold, in the branch's colour (HTML)."""
    return f"<b style='color:{COLORS[branch]}'>{branch}</b>"


def _phase_without_crossing(grid: ExplorerGrid) -> list[str]:
    """The phase named by the transition explorer where ``alpha_c`` is not in ``(0, alpha_max]``.

    Without a crossing of the training losses the lower minimum does not switch: it is
    the branch with the lower training loss at the largest ``alpha`` where both exist (the
    threshold search starts there), else the one branch that exists somewhere. Where
    neither exists the weights are ``Q = 0``: uniform attention, which depends on no
    token's content, so the phase is positional there (the text says so); where the
    semantic branch is the lower one but appears only at some ``alpha``, the phase below
    is positional (the text names that ``alpha``).

    Returns
    -------
    list of str
        HTML, one per curve grid point ``(omega, sigma, lambda)``, flat in C order.
    """
    on, eps_t = grid.curves["on_branch"], grid.curves["eps_t"]
    s, p = BRANCHES.index("semantic"), BRANCHES.index("positional")
    out = []
    for at in np.ndindex(on.shape[:3]):
        both, some = np.flatnonzero(on[at][s] & on[at][p]), np.flatnonzero(on[at].any(axis=0))
        if both.size:
            lower = "semantic" if eps_t[at][s, both[-1]] < eps_t[at][p, both[-1]] else "positional"
        else:
            lower = "semantic" if on[at][s].any() else "positional"
        first = int(np.flatnonzero(on[at][s])[0]) if lower == "semantic" else 0
        if lower == "semantic" and first > 0:
            out.append(f"{_phase_name('semantic')} from α = {grid.alphas[first]:g}, where its branch appears "
                       f"({_phase_name('positional')} below; the training losses do not cross)")
            continue
        if some.size == 0:
            why = "neither branch exists: Q = 0, uniform attention"
        elif some[0] > 0:
            why = f"no crossing; below α = {grid.alphas[some[0]]:g} neither branch exists: Q = 0, uniform attention"
        else:
            why = "no crossing: the lower minimum does not switch"
        out.append(f"{_phase_name(lower)} for all α in (0, {DEFAULT_ALPHA_MAX:g}] ({why})")
    return out


def _transition_readout(grid: ExplorerGrid, i: int, j: int, k: int, a: int) -> str:
    """The transition explorer's readout at grid point ``(i, j, k)`` and cursor ``alphas[a]``
    (the text that :data:`_PHASE_JS` writes in the page)."""
    t = (int(np.flatnonzero(np.isclose(grid.omegas_dense, grid.omegas[i]))[0]), j, k)
    ac, al, x, lin = grid.alpha_c[t], grid.alpha_l[t], float(grid.alphas[a]), grid.eps_g_linear[i, j, k]

    def fmt(v, d):
        return f"{v:.{d}f}" if np.isfinite(v) else "n/a"

    def at_x(branch, f):
        b = BRANCHES.index(branch)
        return grid.curves[f][i, j, k, b, a] if grid.curves["on_branch"][i, j, k, b, a] else np.nan

    if not np.isfinite(ac):
        phase = _phase_without_crossing(grid)[np.ravel_multi_index((i, j, k), grid.eps_g_linear.shape)]
    elif x < ac:
        phase = f"{_phase_name('positional')} (α < α_c = {ac:.3f})"
    else:
        phase = f"{_phase_name('semantic')} (α ≥ α_c = {ac:.3f})"
    def note(b):
        if grid.curves["undecided"][i, j, k, BRANCHES.index(b), a]:
            return f"<br>The state evolution cannot tell whether there is a {b}{UNDECIDED_NOTE}"
        return "" if np.isfinite(at_x(b, "eps_t")) else f"<br>The default stability test finds no {b}{ABSENT_NOTE}"

    absent = "".join(note(b) for b in BRANCHES)
    return (f"At α = {x:.2f}: phase {phase}{absent}"
            f"<br>training loss ε_t: semantic {fmt(at_x('semantic', 'eps_t'), 5)}, positional "
            f"{fmt(at_x('positional', 'eps_t'), 5)}; test error ε_g: semantic {fmt(at_x('semantic', 'eps_g'), 5)}, "
            f"positional {fmt(at_x('positional', 'eps_g'), 5)}, linear {fmt(lin, 5)}; α_l = {fmt(al, 3)}")


def transition_explorer(grid: ExplorerGrid, *, omega: float = 0.3, sigma: float = 0.5, lam: float = 0.01,
                        alpha: float = 1.0):
    """The transition explorer: training loss and test error of both branches against ``alpha``.

    Sliders pick ``omega``, ``sigma``, ``lambda`` on the grid and a cursor
    ``alpha``. Drawn: the training loss ``eps_t`` (Cui et al. 2024, eq. (13)) and
    the test error ``eps_g`` (eq. (12)) of the semantic and positional branches,
    the linear positional baseline, ``alpha_c`` (training losses cross) and
    ``alpha_l`` (the semantic minimum beats the baseline); the text names the
    phase at the cursor.

    Parameters
    ----------
    grid : ExplorerGrid
        From :func:`attnlab.explorer_grid.load_explorer_grid`.
    omega, sigma, lam, alpha : float
        Initial values (the nearest grid values are used).

    Returns
    -------
    bokeh.models.Column

    Raises
    ------
    ValueError
        A non-finite initial value or one outside ``[0, 1]`` (``omega``).
    """
    from bokeh.models import Span

    extra = dict(alpha_l=Span(location=0, dimension="height", line_color=COLORS["alpha_l"], line_dash="dotted",
                              line_width=1.5, name="alpha_l"),
                 eps_g_linear=Span(location=0, dimension="width", line_color=COLORS["linear"], line_dash="dashed",
                                   line_width=1.5, name="eps_g_linear"))
    phases = dict(no_crossing=_phase_without_crossing(grid), phase_names={b: _phase_name(b) for b in BRANCHES},
                  absent_note=ABSENT_NOTE, undecided_note=UNDECIDED_NOTE,
                  undecided=grid.curves["undecided"].ravel().astype(int).tolist())

    def decorate(fig, f, items):
        if f == "eps_g":
            fig.add_layout(extra["alpha_l"])
            fig.add_layout(extra["eps_g_linear"])

    layout = _curve_explorer(grid, ("eps_t", "eps_g"), omega, sigma, lam, alpha, extra_js=_PHASE_JS,
                             extra_args=dict(extra, **phases), decorate=decorate, title="Transition explorer",
                             name="transition-explorer", key="black dashed: α_c; green dotted: α_l; grey dashed "
                                                              "horizontal: the linear baseline; ",
                             readout_text=_transition_readout)
    i, j, k = (int(layout.select_one({"name": n}).value) for n in ("omega", "sigma", "lam"))
    t = (int(np.flatnonzero(np.isclose(grid.omegas_dense, grid.omegas[i]))[0]), j, k)
    extra["eps_g_linear"].location = float(grid.eps_g_linear[i, j, k])
    al = grid.alpha_l[t]
    extra["alpha_l"].location = float(al) if np.isfinite(al) else None
    extra["alpha_l"].visible = bool(np.isfinite(al))
    return layout


_OVERLAP_JS = """
const fmt = (v) => Number.isFinite(v) ? v.toFixed(4) : "n/a";
const at_x = (name, f) => sources[name].data[f][ia];
readout.text = "At α = " + x.toFixed(2) + ": semantic m = " + fmt(at_x("semantic", "m")) + ", θ = "
  + fmt(at_x("semantic", "theta")) + ", |Q|²/d = " + fmt(at_x("semantic", "qnorm")) + "; positional m = "
  + fmt(at_x("positional", "m")) + ", θ = " + fmt(at_x("positional", "theta")) + ", |Q|²/d = "
  + fmt(at_x("positional", "qnorm")) + (Number.isFinite(ac) ? "; α_c = " + ac.toFixed(3) : "");
"""


def overlaps_explorer(grid: ExplorerGrid, *, omega: float = 0.3, sigma: float = 0.5, lam: float = 0.01,
                      alpha: float = 1.0):
    """The overlaps ``m``, ``theta``, ``|Q|^2/d`` of both branches against ``alpha``.

    Same sliders as :func:`transition_explorer`; the state-evolution overlaps of
    Cui et al. 2024, Result 4.2, as the trainers report them (``m = 1.Q/d``,
    ``theta = Q*.Q/d``, ``|Q|^2/d``). A branch is drawn only where it exists
    (converged, lead overlap above ``1e-6``).

    Parameters and returns as :func:`transition_explorer`.
    """
    return _curve_explorer(grid, ("m", "theta", "qnorm"), omega, sigma, lam, alpha, extra_js=_OVERLAP_JS,
                           title="Overlap explorer", name="overlaps-explorer", key="black dashed: α_c; ")


def phase_explorer(grid: ExplorerGrid, *, sigma: float = 0.5, lam: float = 0.01, gd_map: dict | None = None):
    """``alpha_c(omega)`` and ``alpha_l(omega)`` with ``sigma`` and ``lambda`` sliders.

    Parameters
    ----------
    grid : ExplorerGrid
    sigma, lam : float
        Initial values (nearest grid values).
    gd_map : dict, optional
        Gradient-descent map drawn under the lines where its ``sigma`` and
        ``lam`` are selected: keys ``sigma``, ``lam``, and arrays ``omega``,
        ``alpha``, ``gap`` (training loss from the informed init minus from
        the random init, averaged over seeds; ``gap < 0``: the informed
        minimum is lower) of equal length.

    Returns
    -------
    bokeh.models.Column
    """
    from bokeh.layouts import column, row
    from bokeh.models import (BasicTickFormatter, ColorBar, ColumnDataSource, CustomJS, Div, HoverTool, Legend,
                              LegendItem, LinearColorMapper)
    from bokeh.plotting import figure

    sliders = dict(sigma=_slider("sigma", "σ (token std)", grid.sigmas, _check("sigma", sigma, 0, 10)),
                   lam=_slider("lam", "λ (ridge)", grid.lams, _check("lam", lam, 0, 10)))
    n_o = len(grid.omegas_dense)
    table = {"alpha_c": grid.alpha_c, "alpha_l": grid.alpha_l}
    # the spinodals, at the curves' omegas (NaN at the midpoints of the dense axis of the thresholds)
    spin = grid_spinodals(grid)
    on_dense = np.array([int(np.flatnonzero(np.isclose(grid.omegas_dense, w))[0]) for w in grid.omegas])
    for key in ("alpha_s_semantic", "alpha_s_positional"):
        dense = np.full(grid.alpha_c.shape, np.nan)
        dense[on_dense] = spin[key]
        table[key] = dense
    src = ColumnDataSource(dict(omega=grid.omegas_dense, **{key: np.zeros(n_o) for key in table}), name="thresholds")
    fig = figure(height=420, sizing_mode="stretch_width", x_range=(0, 3), y_range=(-0.02, float(grid.omegas_dense[-1]) + 0.02),
                 tools="pan,wheel_zoom,box_zoom,reset,save", toolbar_location="above")
    fig.toolbar.logo = None
    fig.xaxis.axis_label, fig.yaxis.axis_label = "α = n/d", "ω (positional weight)"
    items = []
    gd_src = gd_bar = gd_item = None
    if gd_map is not None:
        gd = {k: np.asarray(gd_map[k], float) for k in ("omega", "alpha", "gap")}
        # the scale saturates at a fifth of the largest gap: near the transition the gaps are
        # small, and their sign, the point of the map, must show (hover for the value)
        span = 0.2 * float(np.nanmax(np.abs(gd["gap"]))) or 1.0
        mapper = LinearColorMapper(palette=_diverging(), low=-span, high=span)
        gd_src = ColumnDataSource(dict(gd, shown=np.ones(len(gd["gap"]))), name="gd_map")
        cells = fig.rect("alpha", "omega", width=0.25, height=0.1, source=gd_src, fill_color={"field": "gap", "transform": mapper},
                         line_color=None, fill_alpha="shown")
        fig.add_tools(HoverTool(renderers=[cells], tooltips=[("α", "@alpha"), ("ω", "@omega"),
                                                            ("GD gap ε_t(informed) − ε_t(random)", "@gap{0.00000}")]))
        # under the plot, horizontal: beside it the colour bar would take a third of a phone's width
        gd_bar = ColorBar(color_mapper=mapper, title="GD gap ε_t(informed) − ε_t(random), saturated", height=8,
                          orientation="horizontal", formatter=BasicTickFormatter(use_scientific=False),
                          major_label_text_font_size="10px", name="gd_bar")
        fig.add_layout(gd_bar, "below")
        # shown, like the map itself, only at the map's sigma and lambda
        gd_item = LegendItem(label=f"GD map (d = 200, σ = {gd_map['sigma']:g}, λ = {gd_map['lam']:g})",
                             renderers=[cells], name="gd_item")
        items.append(gd_item)
    lc = fig.line("alpha_c", "omega", source=src, color=COLORS["alpha_c"], line_width=2.5)
    fig.scatter("alpha_c", "omega", source=src, color=COLORS["alpha_c"], size=5)
    ll = fig.line("alpha_l", "omega", source=src, color=COLORS["alpha_l"], line_width=2, line_dash="dashed")
    fig.add_tools(HoverTool(renderers=[lc, ll], tooltips=[("ω", "@omega{0.00}"), ("α_c", "@alpha_c{0.000}"),
                                                          ("α_l", "@alpha_l{0.000}")]))
    spin_src = ColumnDataSource(dict(omega=grid.omegas, alpha_s_semantic=np.zeros(len(grid.omegas)),
                                     alpha_s_positional=np.zeros(len(grid.omegas))), name="spinodals")
    ls = fig.line("alpha_s_semantic", "omega", source=spin_src, color=COLORS["semantic"], line_width=2,
                  line_dash="dotted")
    fig.scatter("alpha_s_semantic", "omega", source=spin_src, color=COLORS["semantic"], marker="triangle", size=7)
    lp = fig.line("alpha_s_positional", "omega", source=spin_src, color=COLORS["positional"], line_width=2,
                  line_dash="dashdot")
    fig.scatter("alpha_s_positional", "omega", source=spin_src, color=COLORS["positional"], marker="inverted_triangle",
                size=7)
    fig.add_tools(HoverTool(renderers=[ls, lp], tooltips=[("ω", "@omega{0.00}"),
                                                          ("semantic minimum from α", "@alpha_s_semantic{0.00}"),
                                                          ("positional minimum up to α", "@alpha_s_positional{0.00}")]))
    items += [LegendItem(label="α_c (training losses cross)", renderers=[lc]),
              LegendItem(label="α_l (beats the linear baseline)", renderers=[ll]),
              LegendItem(label="spinodal: semantic minimum appears", renderers=[ls]),
              LegendItem(label="spinodal: positional minimum ends", renderers=[lp])]
    fig.add_layout(Legend(items=items, location="center", orientation="vertical"), "below")
    readout = Div(text="", name="readout", sizing_mode="stretch_width")
    args = dict(src=src, alpha_c=[float(x) for x in table["alpha_c"].ravel()],
                alpha_l=[float(x) for x in table["alpha_l"].ravel()], shape=list(grid.alpha_c.shape),
                spin_src=spin_src, on_dense=[int(i) for i in on_dense],
                s_sem=[float(x) for x in table["alpha_s_semantic"].ravel()],
                s_pos=[float(x) for x in table["alpha_s_positional"].ravel()],
                readout=readout, gd=gd_src, gd_bar=gd_bar, gd_item=gd_item, gd_at=[gd_map["sigma"], gd_map["lam"]] if gd_map else None,
                alpha_max=float(DEFAULT_ALPHA_MAX),
                sigmas=[float(s) for s in grid.sigmas], lams=[float(x) for x in grid.lams], **sliders)
    code = """
const j = Math.round(sigma.value), k = Math.round(lam.value), n = shape[0];
const ac = new Array(n), al = new Array(n), ss = new Array(n), sp = new Array(n);
for (let i = 0; i < n; i++) {
  const t = (i * shape[1] + j) * shape[2] + k;
  ac[i] = alpha_c[t]; al[i] = alpha_l[t]; ss[i] = s_sem[t]; sp[i] = s_pos[t];
}
src.data = {omega: src.data.omega, alpha_c: ac, alpha_l: al, alpha_s_semantic: ss, alpha_s_positional: sp};
spin_src.data = {omega: spin_src.data.omega, alpha_s_semantic: on_dense.map((i) => ss[i]),
                 alpha_s_positional: on_dense.map((i) => sp[i])};
let note = "σ = " + sigmas[j] + ", λ = " + lams[k] + ".";
note += " " + spinodal_words(j, k);
// where the line of alpha_l (or alpha_c) stops, say why instead of leaving a silent end
const om = src.data.omega;
const beyond = (a) => om.filter((w, i) => !Number.isFinite(a[i]));
const far_l = om.filter((w, i) => Number.isFinite(ac[i]) && !Number.isFinite(al[i]));
const far_c = beyond(ac);
if (far_l.length) note += " α_l lies beyond α = " + alpha_max + " (the grid's range) at ω = " + far_l.join(", ") + ".";
if (far_c.length) note += " No crossing α_c ≤ " + alpha_max + " at ω = " + far_c.join(", ") + ".";
if (gd !== null) {
  const on = Math.abs(sigmas[j] - gd_at[0]) < 1e-9 && Math.abs(lams[k] - gd_at[1]) < 1e-9;
  gd.data = Object.assign({}, gd.data, {shown: gd.data.shown.map(() => on ? 1 : 0)});
  gd_bar.visible = on; gd_item.visible = on;
  note += on ? " Under the lines: the gradient-descent map at these σ, λ (blue: the random init's minimum is lower, red: the informed one's)."
             : " The gradient-descent map is cached at σ = " + gd_at[0] + ", λ = " + gd_at[1] + " only.";
}
readout.text = note;
"""
    args["spinodal_text"] = [_spinodal_words(grid, spin, j, k) for j in range(len(grid.sigmas))
                             for k in range(len(grid.lams))]
    code = "const spinodal_words = (j, k) => spinodal_text[j * shape[2] + k];\n" + code
    callback = CustomJS(args=args, code=code)
    for s in sliders.values():
        s.js_on_change("value", callback)
    layout = column(Div(text="<b>Phase diagram explorer</b>", sizing_mode="stretch_width"),
                    row(sliders["sigma"], sliders["lam"], sizing_mode="stretch_width"), readout, fig,
                    sizing_mode="stretch_width", name="phase-explorer")
    _on_ready(layout, callback)
    j, k = int(sliders["sigma"].value), int(sliders["lam"].value)
    src.data = dict(omega=grid.omegas_dense, **{key: v[:, j, k] for key, v in table.items()})
    spin_src.data = dict(omega=grid.omegas, alpha_s_semantic=spin["alpha_s_semantic"][:, j, k],
                         alpha_s_positional=spin["alpha_s_positional"][:, j, k])
    make_accessible(layout, sliders=list(sliders.values()), readout=readout,
                    plots=[(fig, "Phase diagram: ω (positional weight) against α = n/d; black solid line with dots: "
                                 "α_c, where the training losses cross (positional phase to its left, semantic to "
                                 "its right); green dashed line: α_l, where the semantic minimum beats the linear "
                                 "baseline; red dotted line with triangles: the semantic spinodal (the semantic "
                                 "minimum exists to its right); blue dash-dotted line with inverted triangles: "
                                 "the positional spinodal (the positional minimum exists to its left); both "
                                 "minima coexist between them")],
                    keys=[("ω", src, "omega")],
                    columns=[("α_c", src, "alpha_c"), ("α_l", src, "alpha_l"),
                             ("semantic minimum from α", src, "alpha_s_semantic"),
                             ("positional minimum up to α", src, "alpha_s_positional")],
                    summary="Phase diagram: data table of α_c, α_l and the spinodals at this σ, λ")
    return layout


def _spinodal_words(grid: ExplorerGrid, spin: dict, j: int, k: int) -> str:
    """Where each minimum exists at ``sigma = sigmas[j]``, ``lambda = lams[k]``, per ``omega`` of
    the curves (:func:`attnlab.explorer_grid.grid_spinodals`), in words for the readout."""
    lo, hi = float(grid.alphas[0]), float(grid.alphas[-1])

    def words(runs):
        if not runs:
            return "none"
        return ", ".join("all α" if (a, b) == (lo, hi) else f"α ≥ {a:.2f}" if b == hi else
                         f"α ≤ {b:.2f}" if a == lo else f"{a:.2f} ≤ α ≤ {b:.2f}" for a, b in runs)

    parts = [f"ω = {w:g}: " + "; ".join(f"{b} {words(spin['runs'][i, j, k, n])}" for n, b in enumerate(BRANCHES))
             for i, w in enumerate(grid.omegas)]
    return f"Minima exist (α from {lo:g} to {hi:g}) at " + " · ".join(parts) + "."


def _diverging():
    """Red (negative: the informed, semantic minimum is lower) through white to blue (positive)."""
    from bokeh.palettes import Blues256, Reds256, diverging_palette

    return diverging_palette(Reds256, Blues256, 256)


def teacher_explorer(*, omega: float = 0.3, h1: float = 1.0, h2: float = -0.5, A=None):
    """The teacher's attention matrix ``T(h*) = (1 - omega) softmax(h* h*^T) + omega A``.

    Sliders for ``omega`` and the teacher projections ``h*_1, h*_2``; three
    heat maps (semantic part ``softmax(h* h*^T)``, positional part ``A``, the
    mixture; Cui et al. 2024, eq. (2)) computed in the page.

    Parameters
    ----------
    omega : float
        In ``[0, 1]``.
    h1, h2 : float
        In ``[-2.5, 2.5]`` (the sliders' range).
    A : array_like, shape (2, 2), optional
        Row-stochastic positional matrix (default the paper's).

    Returns
    -------
    bokeh.models.Column
        Data sources ``semantic_part``, ``positional_part``, ``teacher``
        (columns ``row``, ``col``, ``value``, ``label``).

    Raises
    ------
    ValueError
        ``omega`` outside ``[0, 1]``, ``h1`` or ``h2`` outside ``[-2.5, 2.5]``, or a bad ``A``.
    """
    from bokeh.layouts import column, row
    from bokeh.models import ColumnDataSource, CustomJS, Div, LinearColorMapper, Slider
    from bokeh.palettes import Blues256, Greys256, Reds256
    from bokeh.plotting import figure

    from .attention import teacher_attention

    A_arr = ModelParams(A=A).A_array
    omega, h1, h2 = _check("omega", omega, 0, 1), _check("h1", h1, -2.5, 2.5), _check("h2", h2, -2.5, 2.5)
    slider = lambda **kw: Slider(sizing_mode="stretch_width", margin=SLIDER_MARGIN, **kw)
    sliders = dict(omega=slider(start=0, end=1, step=0.05, value=omega, title="ω", name="omega"),
                   h1=slider(start=-2.5, end=2.5, step=0.1, value=h1, title="h*₁", name="h1"),
                   h2=slider(start=-2.5, end=2.5, step=0.1, value=h2, title="h*₂", name="h2"))
    # (query, attended: the same cells numbered from 1, as the axes and the data table name them)
    cells = dict(row=[0, 0, 1, 1], col=[0, 1, 0, 1], query=[1, 1, 2, 2], attended=[1, 2, 1, 2])

    def panel(name, title, palette, M):
        M = np.asarray(M, float)
        src = ColumnDataSource(dict(cells, value=M.ravel(), label=[f"{v:.2f}" for v in M.ravel()]), name=name)
        fig = figure(height=210, width=210, x_range=(-0.5, 1.5), y_range=(1.5, -0.5), title=title, tools="",
                     toolbar_location=None, sizing_mode="fixed")
        # the top of the scale stays mid-tone, so the black labels read on every cell
        mapper = LinearColorMapper(palette=palette[::-1], low=0, high=1.35)
        fig.rect("col", "row", width=1, height=1, source=src, fill_color={"field": "value", "transform": mapper},
                 line_color="white")
        fig.text("col", "row", text="label", source=src, text_align="center", text_baseline="middle",
                 text_color="black", text_font_size="13px")
        fig.xaxis.ticker = fig.yaxis.ticker = [0, 1]
        fig.xaxis.major_label_overrides = fig.yaxis.major_label_overrides = {0: "1", 1: "2"}
        fig.xaxis.axis_label, fig.yaxis.axis_label = "attended token", "query token"
        return src, fig

    hstar = np.array([h1, h2])
    sem_src, f1 = panel("semantic_part", "semantic part", Reds256, teacher_attention(hstar, 0.0, A_arr))
    pos_src, f2 = panel("positional_part", "positional part A", Blues256, A_arr)
    t_src, f3 = panel("teacher", "teacher T(h*)", Greys256, teacher_attention(hstar, omega, A_arr))
    code = """
const h = [h1.value, h2.value], w = omega.value, S = [], T = [];
for (let r = 0; r < 2; r++) {
  const z = [h[r] * h[0], h[r] * h[1]], mx = Math.max(z[0], z[1]);
  const e = z.map((v) => Math.exp(v - mx)), s = e[0] + e[1];
  for (let c = 0; c < 2; c++) { S.push(e[c] / s); T.push((1 - w) * e[c] / s + w * A[r][c]); }
}
const set = (src, M) => { src.data = Object.assign({}, src.data, {value: M, label: M.map((v) => v.toFixed(2))}); };
set(sem, S); set(teacher, T);
"""
    readout = Div(text=teacher_readout(teacher_attention(hstar, omega, A_arr)), name="readout",
                  sizing_mode="stretch_width")
    callback = CustomJS(args=dict(sem=sem_src, teacher=t_src, A=A_arr.tolist(), readout=readout, **sliders),
                        code=code + _TEACHER_READOUT_JS)
    for s in sliders.values():
        s.js_on_change("value", callback)
    layout = column(Div(text="<b>Teacher attention explorer</b>", sizing_mode="stretch_width"),
                    # the teacher first: on a phone the panels stack, and it is the one the sliders move most
                    row(*sliders.values(), sizing_mode="stretch_width"), readout,
                    row(f3, f1, f2, styles={"flex-wrap": "wrap"}), sizing_mode="stretch_width", name="teacher-explorer")
    _on_ready(layout, callback)
    heat = "2 × 2 heat map, rows: query token 1 and 2, columns: attended token 1 and 2, each cell labelled with its weight"
    make_accessible(layout, sliders=list(sliders.values()), readout=readout,
                    plots=[(f3, f"Teacher T(h*): {heat} (greys)"), (f1, f"Semantic part softmax(h* h*ᵀ): {heat} (reds)"),
                           (f2, f"Positional part A: {heat} (blues)")],
                    keys=[("query token", t_src, "query"), ("attended token", t_src, "attended")],
                    columns=[("teacher T(h*)", t_src, "value"), ("semantic part", sem_src, "value"),
                             ("positional part A", pos_src, "value")],
                    summary="Teacher attention: data table of the three matrices")
    return layout


# The teacher explorer's readout; :func:`teacher_readout` writes the same text in Python.
_TEACHER_READOUT_JS = """
readout.text = "Teacher T(h*): query token 1 attends " + T[0].toFixed(2) + " to token 1 and " + T[1].toFixed(2)
  + " to token 2; query token 2 attends " + T[2].toFixed(2) + " to token 1 and " + T[3].toFixed(2) + " to token 2.";
"""


def teacher_readout(T) -> str:
    """The teacher explorers' readout (this module's and :func:`attnlab.widgets.teacher_explorer`'s).

    Parameters
    ----------
    T : array_like, shape (2, 2)
        The teacher's attention matrix.

    Returns
    -------
    str
        The four weights in words (the text that :data:`_TEACHER_READOUT_JS` writes in the page).
    """
    t = np.asarray(T, float).ravel()
    return (f"Teacher T(h*): query token 1 attends {t[0]:.2f} to token 1 and {t[1]:.2f} to token 2; "
            f"query token 2 attends {t[2]:.2f} to token 1 and {t[3]:.2f} to token 2.")


def bokehjs_files() -> list[Path]:
    """The BokehJS files the explorers need, as shipped by the installed Bokeh package.

    Returns
    -------
    list of Path
        ``bokeh.min.js`` and ``bokeh-widgets.min.js`` (the book serves them from its
        ``_static`` folder, under the names of :func:`bokehjs_names`).
    """
    from bokeh.util.paths import bokehjs_path

    js = Path(bokehjs_path()) / "js"
    return [js / "bokeh.min.js", js / "bokeh-widgets.min.js"]


def bokehjs_names() -> list[str]:
    """Versioned file names of :func:`bokehjs_files` (``bokeh-3.9.2.min.js``, ...)."""
    import bokeh

    return [p.name.replace(".min.js", f"-{bokeh.__version__}.min.js") for p in bokehjs_files()]


#: Environment variable that says who loads BokehJS: ``page`` (the book's pages) or
#: ``inline`` (the default: the output itself, for notebook front ends).
BOKEHJS_MODE = "ATTNLAB_EXPLORER_BOKEHJS"


def _inline_bokehjs() -> str:
    """A script that loads the installed BokehJS unless this version is loaded already."""
    import json

    import bokeh

    source = "\n".join(p.read_text(encoding="utf-8") for p in bokehjs_files())
    # indirect eval: global scope, where BokehJS defines window.Bokeh ("</" cannot end the script)
    literal = json.dumps(source).replace("</", "<\\/")
    return ('<script type="text/javascript">'
            f'if (!(window.Bokeh && window.Bokeh.version === "{bokeh.__version__}")) {{ (0, eval)({literal}); }}'
            '</script>')


class _Embedded:
    """An explorer's HTML (``text/html``), with a one-line ``text/plain``.

    ``html`` is the document for a page that loads BokehJS (the book's); the mime
    bundle adds BokehJS inline unless ``ATTNLAB_EXPLORER_BOKEHJS=page``.
    """

    def __init__(self, html: str, title: str):
        self.html, self.title = html, title

    def _repr_mimebundle_(self, **kwargs):
        import os

        mode = os.environ.get(BOKEHJS_MODE, "inline")
        if mode not in ("inline", "page"):
            raise ValueError(f"{BOKEHJS_MODE} must be 'inline' or 'page', got {mode!r}")
        html = self.html if mode == "page" else self.html.replace(_NOTE, _inline_bokehjs(), 1)
        return {"text/html": html, "text/plain": f"{self.title} (drawn by BokehJS)"}


# Shown where nobody loads BokehJS: a stored output opened without running the cell
# (the book's stylesheet hides it; the inline output replaces it by BokehJS).
_NOTE = ('<p class="attnlab-explorer-note">This explorer is drawn by BokehJS. Run this cell to draw it here: '
         'the output then carries BokehJS itself. The HTML pages of the book load it for you.</p>')


def embed(layout, title: str = "explorer") -> _Embedded:
    """The explorer as HTML that draws in the book's pages and in notebook front ends.

    The returned object displays in a notebook cell as ``text/html``: a ``div``, the
    document's JSON and BokehJS inline (unless the environment variable
    ``ATTNLAB_EXPLORER_BOKEHJS`` is ``page``, as in the book's build, whose pages load
    BokehJS from their static files; then a note for stored outputs opened without
    running, which the book's stylesheet hides, stands in its place).

    Parameters
    ----------
    layout : bokeh.models.LayoutDOM
        E.g. from :func:`transition_explorer`.
    title : str
        Plain-text description.

    Returns
    -------
    object with ``_repr_mimebundle_`` (``.html`` holds the HTML for a page that loads BokehJS)

    Raises
    ------
    ValueError
        At display, if ``ATTNLAB_EXPLORER_BOKEHJS`` is neither ``inline`` nor ``page``.
    """
    from bokeh.embed import components

    script, div = components(layout)
    return _Embedded(_stable_ids(f'<div class="attnlab-explorer">{_NOTE}{div}{script}</div>', title), title)


_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _stable_ids(html: str, title: str) -> str:
    """Replace the random UUIDs Bokeh gives the embedded document and its element.

    Derived instead from the title and the rest of the HTML (whose model ids count up
    within the process), so that a chapter executed twice gives the same output.
    """
    digest = hashlib.sha256(_UUID.sub("", html).encode()).hexdigest()
    found = list(dict.fromkeys(_UUID.findall(html)))
    stable = {u: str(uuid.uuid5(uuid.NAMESPACE_URL, f"attnlab-explorer/{title}/{k}/{digest}"))
              for k, u in enumerate(found)}
    return _UUID.sub(lambda m: stable[m.group(0)], html)


class _Note:
    """What the book shows where an explorer's data is not available (e.g. on Colab)."""

    def __init__(self, text: str):
        self.text = text

    def _repr_mimebundle_(self, **kwargs):
        return {"text/plain": self.text}


def book_explorer(kind: str, **kwargs):
    """An explorer of the book, embedded (:func:`embed`), from the cached grid and results.

    Parameters
    ----------
    kind : {"transition", "overlaps", "phase", "teacher"}
    **kwargs
        Initial values, passed to the explorer's function.

    Returns
    -------
    object displayed by the notebook cell: the embedded explorer, or a one-line
    note where the cached grid is not available (a copy of attnlab without
    ``results/``, e.g. on Colab: the live ipywidgets explorers still work).

    Raises
    ------
    ValueError
        Unknown ``kind`` or bad initial values.
    """
    from .explorer_grid import load_explorer_grid
    from .params import check_choice

    kind = check_choice("kind", kind, ("transition", "overlaps", "phase", "teacher"))
    if kind == "teacher":
        return embed(teacher_explorer(**kwargs), "Teacher attention explorer")
    try:
        grid = load_explorer_grid()
    except FileNotFoundError as exc:
        return _Note(f"{exc}. The live explorer below solves the state evolution instead.")
    if kind == "transition":
        return embed(transition_explorer(grid, **kwargs), "Transition explorer")
    if kind == "overlaps":
        return embed(overlaps_explorer(grid, **kwargs), "Overlap explorer")
    from .experiments.figures import load_results

    runs = load_results("phase-diagram")
    return embed(phase_explorer(grid, gd_map=gd_gap_map(runs) if runs is not None else None, **kwargs),
                 "Phase diagram explorer")
