"""The explorers draw in a notebook front end, from an installed attnlab (the Colab path).

Chapters 5 and 6 are executed from attnlab's wheel installed in a fresh venv (the
``installed_attnlab`` fixture), in a folder outside the repository, by ``jupyter nbconvert
--execute --to html``: its HTML shows each output as a notebook front end does (JupyterLab's
template; the outputs' scripts run in the page), the closest offline stand-in for
JupyterLab or Colab. In headless Chromium every explorer must draw (a document, a view and
plots of non-zero size) with no script error, and a slider moved with the keyboard must
redraw it (the plotted data or the readout change). Chromium: see ``tests/browser.py``.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from browser import get, press, severe_console_errors, wait_ready

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = {"05_state_evolution": ("overlaps-explorer",),
            "06_phase_transition": ("phase-explorer", "transition-explorer")}
SLIDERS = {"overlaps-explorer": ("omega", "alpha"), "transition-explorer": ("omega", "lam", "alpha"),
           "phase-explorer": ("sigma", "lam")}
# nbconvert's template links require.js, jQuery, MathJax and the widget manager from a CDN:
# pointed at nothing, so that the test touches no network (the explorers need none of them)
NO_CDN = [f"--HTMLExporter.{name}=data:," for name in ("require_js_url", "jquery_url", "mathjax_url",
                                                        "widget_renderer_url")]

_VIEWS = """
const root = [...Bokeh.index].find((v) => v.model.name === arguments[0]);
const stack = [root], plots = [];
while (stack.length) {
  const v = stack.pop();
  if (v.canvas_view) { const r = v.el.getBoundingClientRect(); plots.push([r.width, r.height]); }
  if (v.child_views) stack.push(...v.child_views);
}
return plots;"""

_STATE = """
const doc = Bokeh.documents.find((d) => d.get_model_by_name(arguments[0]));
const out = [];
for (const m of doc.all_models) {
  if (m.data !== undefined) out.push(JSON.stringify(m.data));
  if (m.name === "readout") out.push(m.text);
}
return out.join("|");"""


# first cell of each executed copy: where the kernel's attnlab comes from
WHERE = "import attnlab\nprint('attnlab from', attnlab.__file__)"


@pytest.fixture(scope="module")
def executed_pages(installed_attnlab, tmp_path_factory) -> Path:
    import nbformat

    out = tmp_path_factory.mktemp("frontend")
    for name in CHAPTERS:
        nb = nbformat.read(ROOT / "book" / f"{name}.ipynb", as_version=4)
        nb.cells.insert(0, nbformat.v4.new_code_cell(WHERE))
        nbformat.write(nb, out / f"{name}.ipynb")
    # a kernel that runs the venv's interpreter (the default "python3" spec may name the
    # `python` on PATH, whose attnlab is the repository's)
    spec = out / "jupyter" / "kernels" / "attnlab-wheel"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(installed_attnlab.python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "attnlab from its wheel", "language": "python"}))
    env = {k: v for k, v in installed_attnlab.env.items() if k != "ATTNLAB_EXPLORER_BOKEHJS"}
    env["JUPYTER_PATH"] = str(out / "jupyter")
    subprocess.run([str(installed_attnlab.python), "-m", "jupyter", "nbconvert", "--to", "html", "--execute",
                    "--ExecutePreprocessor.kernel_name=attnlab-wheel", "--ExecutePreprocessor.timeout=600", *NO_CDN,
                    *(f"{n}.ipynb" for n in CHAPTERS)], cwd=out, env=env, capture_output=True, text=True, check=True)
    return out


@pytest.mark.parametrize("chapter", list(CHAPTERS))
def test_explorers_draw_and_redraw_in_a_notebook_front_end(executed_pages, installed_attnlab, driver, chapter):
    page = executed_pages / f"{chapter}.html"
    html = page.read_text()
    assert f"attnlab from {installed_attnlab.venv}" in html, "the chapter did not run the installed wheel"
    driver.get_log("browser")  # drop earlier pages' entries
    driver.get(page.as_uri())
    roots = CHAPTERS[chapter]
    wait_ready(driver, roots)
    for root in roots:
        plots = driver.execute_script(_VIEWS, root)
        assert plots and all(w > 100 and h > 100 for w, h in plots), f"{chapter}: {root} plots {plots}"
        for slider in SLIDERS[root]:
            before = driver.execute_script(_STATE, root)
            press(driver, root, slider)
            after = driver.execute_script(_STATE, root)
            assert after != before, f"{chapter}: moving {slider} did not redraw {root}"
            assert get(driver, root, slider, "value") is not None
    assert severe_console_errors(driver) == [], json.dumps(severe_console_errors(driver), indent=1)
