"""What makes a Bokeh explorer usable without the mouse and without the picture.

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

#: The focus ring of the slider handles (WCAG 2.4.7): Bokeh's default shows none.
FOCUS_CSS = (".noUi-handle:focus, .noUi-handle:focus-visible { outline: 3px solid #1a1a1a; "
             "outline-offset: 2px; box-shadow: 0 0 0 5px #ffd166; }")

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
