"""What makes an explorer usable without the mouse and without the picture.

Two kinds of explorers: the kernel-free Bokeh ones (:mod:`attnlab.explorers`, made
accessible by :func:`make_accessible`) and the ipywidgets ones that a running notebook
shows (:mod:`attnlab.widgets`, made accessible by :func:`widget_access_script`).

:func:`make_accessible` adds to an explorer's layout, in the page (JavaScript, no kernel):

* an accessible name and value text on every slider handle (the handles of Bokeh's
  sliders are ``role="slider"`` elements without a name; their value is a grid index, so
  the value text gives the grid value instead) and a visible keyboard focus ring;
* ``role="status"`` and ``aria-live="polite"`` on the explorer's text readout, so that a
  screen reader reads it after every redraw (the explorer's own callback writes the
  values at the current setting and the thresholds into it);
* ``role="img"`` and a name on each plot (what is drawn, in words);
* a data table of the values drawn at the current setting, in a ``<details>`` element
  under the plots: one click (or Enter) away; it is rewritten after every redraw and
  stays open if the reader opened it.

The explorer's own callbacks are untouched: the script here runs after them (Bokeh runs
the callbacks of a property in the order they were added) and only reads their result.
"""
from __future__ import annotations

#: The focus ring of the slider handles (WCAG 2.4.7), on both kinds of explorers.
FOCUS_RING = "outline: 3px solid #1a1a1a; outline-offset: 2px; box-shadow: 0 0 0 5px #ffd166;"
#: The focus ring in a Bokeh slider's stylesheet (Bokeh's default shows none).
FOCUS_CSS = f".noUi-handle:focus, .noUi-handle:focus-visible {{ {FOCUS_RING} }}"

_ACCESS_JS = """
const find = (model) => {
  const stack = [...Bokeh.index];
  while (stack.length) {
    const v = stack.pop();
    if (v.model === model) return v;
    if (v.child_views) stack.push(...v.child_views);
  }
  return null;
};
const shown = (s) => s.tags && s.tags.length ? String(s.tags[0][Math.round(s.value)]) : String(s.value);
const setting = sliders.map((s) => s.title + " = " + shown(s)).join(", ");
for (const s of sliders) {
  const v = find(s);
  const handle = v && v.shadow_el ? v.shadow_el.querySelector(".noUi-handle") : null;
  if (handle === null) continue;
  handle.setAttribute("aria-label", s.title);
  handle.setAttribute("aria-valuetext", shown(s));
}
const rv = readout === null ? null : find(readout);
if (rv !== null) {
  rv.el.setAttribute("role", "status"); rv.el.setAttribute("aria-live", "polite"); rv.el.setAttribute("aria-atomic", "true");
}
for (const [fig, label] of plots) {
  const v = find(fig);
  if (v !== null) { v.el.setAttribute("role", "img"); v.el.setAttribute("aria-label", label); }
}
const fmt = (x) => (x === null || x === undefined || !Number.isFinite(x)) ? "n/a"
  : (Number.isInteger(x) ? String(x) : x.toPrecision(5).replace(/\\.?0+$/, ""));
const cols = keys.concat(columns);
const n = keys.length ? keys[0][1].data[keys[0][2]].length : 0;
let body = "";
for (let r = 0; r < n; r++) {
  const vals = columns.map(([h, src, f]) => src.data[f][r]);
  if (columns.length && !vals.some((x) => x !== null && Number.isFinite(x))) continue;
  body += "<tr>" + keys.map(([h, src, f]) => "<th scope='row'>" + fmt(src.data[f][r]) + "</th>").join("")
    + vals.map((x) => "<td>" + fmt(x) + "</td>").join("") + "</tr>";
}
const tv = find(table);
const open = tv !== null && tv.shadow_el && tv.shadow_el.querySelector("details") !== null
  && tv.shadow_el.querySelector("details").open;
table.text = "<details" + (open ? " open" : "") + "><summary>" + summary + "</summary>"
  + "<table style='border-collapse: collapse'><caption style='text-align: left'>" + setting + "</caption><thead><tr>"
  + cols.map(([h]) => "<th scope='col' style='padding: 0 0.6em; text-align: right'>" + h + "</th>").join("")
  + "</tr></thead><tbody style='text-align: right'>" + body + "</tbody></table></details>";
"""


def make_accessible(layout, *, sliders, readout, plots, keys, columns, summary):
    """Add names, the live readout, plot labels and a data table to ``layout`` (in place).

    Parameters
    ----------
    layout : bokeh.models.Column
        The explorer's root, already in a document (as the explorers of :mod:`attnlab.explorers` build it);
        the data table is appended to its children.
    sliders : list of bokeh.models.Slider
        Each handle is named by the slider's ``title``; a slider with ``tags = [values]``
        (the grid sliders, whose value is an index) is read out as ``values[index]``.
    readout : bokeh.models.Div or None
        The text the explorer rewrites at every redraw: made a polite live region.
    plots : list of (bokeh.plotting.figure, str)
        Each plot and the words that name it (``role="img"``).
    keys, columns : list of (str, bokeh.models.ColumnDataSource, str)
        The table's row headers and data columns: header, source, column name. Rows
        where every data column is missing (``NaN``) are left out.
    summary : str
        The text of the ``<summary>`` that opens the table.

    Returns
    -------
    bokeh.models.Div
        The table (model name ``data-table``).
    """
    from bokeh.models import CustomJS, Div

    for s in sliders:
        s.stylesheets = [*s.stylesheets, FOCUS_CSS]
    table = Div(text=f"<details><summary>{summary}</summary></details>", name="data-table",
                sizing_mode="stretch_width")
    layout.children.append(table)
    callback = CustomJS(args=dict(sliders=list(sliders), readout=readout, plots=[list(p) for p in plots],
                                  keys=[list(k) for k in keys], columns=[list(c) for c in columns], table=table,
                                  summary=summary), code=_ACCESS_JS)
    for s in sliders:
        s.js_on_change("value", callback)
    layout.document.js_on_event("document_ready", callback)
    return table


# ----------------------------------------------------------------------------- ipywidgets explorers

#: DOM class of an ipywidgets explorer's panel (``Widget.add_class``): what the script names.
WIDGET_CLASS = "attnlab-explorer"
#: DOM class of the panel's text readout (an ``ipywidgets.HTML``): made a live region.
READOUT_CLASS = "attnlab-readout"

_WIDGET_ACCESS_JS = """
(() => {
  if (!window.attnlabWidgetAccess) {
    const style = document.createElement("style");
    style.textContent = %(css)s;
    document.head.appendChild(style);
    let ids = 0, queued = false;
    const hooked = new WeakSet();
    const apply = () => {
      queued = false;
      for (const box of document.querySelectorAll(".%(panel)s .widget-slider")) {
        const label = box.querySelector(".widget-label"), handle = box.querySelector(".noUi-handle");
        const readout = box.querySelector(".widget-readout"), target = box.querySelector(".noUi-target");
        if (label === null || handle === null) continue;
        if (!label.id) label.id = "attnlab-slider-label-" + (++ids) + "-" + Date.now();
        handle.setAttribute("aria-labelledby", label.id);
        const value = () => {
          const text = readout === null ? "" : readout.textContent.trim();
          if (text) handle.setAttribute("aria-valuetext", text);
          const now = target !== null && target.noUiSlider ? Number(target.noUiSlider.get(true)) : NaN;
          if (Number.isFinite(now)) handle.setAttribute("aria-valuenow", String(now));
        };
        if (readout !== null) {
          readout.setAttribute("role", "textbox");
          readout.setAttribute("aria-labelledby", label.id);
        }
        if (target !== null && target.noUiSlider && !hooked.has(target.noUiSlider)) {
          hooked.add(target.noUiSlider);
          target.noUiSlider.on("update.attnlab", value);
        }
        value();
      }
      for (const el of document.querySelectorAll(".%(readout)s .widget-html-content")) {
        if (el.getAttribute("role") === "status") continue;
        el.setAttribute("role", "status"); el.setAttribute("aria-live", "polite"); el.setAttribute("aria-atomic", "true");
      }
    };
    window.attnlabWidgetAccess = () => { if (!queued) { queued = true; requestAnimationFrame(apply); } };
    new MutationObserver(window.attnlabWidgetAccess).observe(document.body, {childList: true, subtree: true});
  }
  window.attnlabWidgetAccess();
})();
"""


class _Script:
    """A display output that runs JavaScript and shows nothing (not even a ``text/plain`` repr)."""

    def __init__(self, code: str):
        self.code = code

    def _repr_mimebundle_(self, **kwargs):
        return {"application/javascript": self.code, "text/html": "", "text/plain": ""}


def widget_access_script():
    """What an ipywidgets explorer lacks for a keyboard and a screen reader, as a display output.

    ipywidgets 8 draws a ``FloatSlider`` with noUiSlider: its handle is a ``role="slider"``
    element that the keyboard reaches and moves, but without an accessible name (the
    slider's ``description`` is a ``<label>`` that names nothing: the handle is no form
    control, and ipywidgets passes noUiSlider no handle attributes), with a value text of
    unrounded floats ("-0.3999999999999999"), and next to an editable readout without a
    name or role. An ``ipywidgets.HTML`` readout is rewritten as a whole (``innerHTML``), so
    a live region inside its value is a new element at every redraw, which screen readers
    often do not announce. No ipywidgets option covers these, so the script, run once in the
    page (the front end that draws the widgets runs JavaScript outputs too: JupyterLab,
    Notebook 7, Colab, VS Code), watches the page and, inside every element of class
    :data:`WIDGET_CLASS`:

    * names each slider handle and its editable readout by the slider's visible
      ``description`` (``aria-labelledby``; the readout gets ``role="textbox"``), and after
      every move gives the handle the readout's formatted value as ``aria-valuetext`` and
      the slider's value as ``aria-valuenow`` (noUiSlider writes it to one decimal: 0.3 for
      0.35, 0.0 for every ``lam`` of the explorers);
    * draws :data:`FOCUS_RING` around the focused handle;
    * makes the kept element of every :data:`READOUT_CLASS` HTML widget a polite live region
      (``role="status"``), so that each new text there is read out.

    It runs once per page (a second call only re-applies it) and touches no other widget.

    Returns
    -------
    object
        A display output with an ``application/javascript`` part and empty ``text/html`` and
        ``text/plain`` parts (what a page without a kernel shows: nothing).
    """
    import json

    css = f".{WIDGET_CLASS} .noUi-handle:focus-visible {{ {FOCUS_RING} }}"
    return _Script(_WIDGET_ACCESS_JS % {"css": json.dumps(css), "panel": WIDGET_CLASS, "readout": READOUT_CLASS})
