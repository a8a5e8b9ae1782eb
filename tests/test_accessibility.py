"""Accessibility (WCAG 2.1 AA) of the book, the student edition, the slide decks, the
explorers and the palette.

* axe-core (the copy that the ``selenium-axe-python`` package ships: offline) runs over
  every built page of the HTML book, of the student edition and over every slide deck
  (all its slides, in reveal.js's print view), with the rules tagged WCAG 2.0/2.1 A and
  AA and best practice; any serious or critical violation fails. The counts per rule and
  page go to ``a11y-book.json`` and ``a11y-course.json`` in the folder
  ``$ATTNLAB_A11Y_REPORT`` (default pytest's temporary folder).
* One explorer is driven with the keyboard alone: Tab reaches a slider handle, which has
  an accessible name and a visible focus ring; an arrow key moves it; the text readout, a
  polite live region, changes; Chromium's accessibility tree (DevTools protocol) names
  the slider and holds the readout as a status; the data table is in a ``<details>``.
* The formulas carry MathJax's assistive MathML: ``math`` nodes in the accessibility tree.
* The palette (``attnlab.plots.COLORS``) stays distinguishable under simulated
  deuteranopia, protanopia and tritanopia, with the contrasts of WCAG 2.1.

Chromium: see ``tests/browser.py``.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from browser import wait_ready

ROOT = Path(__file__).resolve().parents[1]
#: axe-core's rule tags that are checked (WCAG 2.0 and 2.1, levels A and AA, and best practice).
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]
FAILING = ("serious", "critical")


def _axe_script() -> str:
    pytest.importorskip("selenium_axe_python", reason="pip install selenium-axe-python (the test extra)")
    import selenium_axe_python

    path = Path(selenium_axe_python.__file__).parent / "axe-core" / "axe.min.js"
    return path.read_text(encoding="utf-8")


def axe_violations(drv, url: str, settle: float = 1.0) -> list[dict]:
    """axe-core's violations on the page at ``url`` (after its scripts have drawn it)."""
    drv.get(url)
    drv.execute_async_script("""
const done = arguments[arguments.length - 1];
const typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
(typeset || Promise.resolve()).then(() => done(true), () => done(false));""")
    time.sleep(settle)  # (the quizzes and explorers draw after load)
    if "print-pdf" in url:
        # reveal.js's print view shows every slide but leaves the ``hidden``/``aria-hidden`` that
        # the presentation view puts on the slides not shown; each slide is shown without them
        drv.execute_script("document.querySelectorAll('.reveal .slides section').forEach((s) => {"
                           "s.removeAttribute('hidden'); s.removeAttribute('aria-hidden'); });")
    drv.execute_script(_axe_script())
    options = {"runOnly": {"type": "tag", "values": TAGS}, "resultTypes": ["violations"]}
    result = drv.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "axe.run(document, arguments[0]).then((r) => done(r.violations), (e) => done(String(e)));", options)
    assert isinstance(result, list), f"{url}: axe failed: {result}"
    return [{"id": v["id"], "impact": v["impact"], "nodes": len(v["nodes"]), "help": v["help"],
             "targets": [n["target"] for n in v["nodes"][:5]]} for v in result]


def _pages(html: Path) -> list[Path]:
    skip = {"_static", "_sources", "_images", "jupyter_execute", "_vendor", "reports"}
    return sorted(p for p in html.rglob("*.html") if not skip & set(p.relative_to(html).parts))


def _audit(drv, urls: dict[str, str], name: str, tmp_path_factory) -> dict:
    drv.set_script_timeout(600)
    drv.command_executor._client_config.timeout = 900  # (axe takes a while on the API page)
    found = {page: axe_violations(drv, url) for page, url in urls.items()}
    totals: dict[str, dict] = {}
    for page, violations in found.items():
        for v in violations:
            t = totals.setdefault(v["id"], {"impact": v["impact"], "nodes": 0, "pages": 0})
            t["nodes"] += v["nodes"]
            t["pages"] += 1
    report = {"pages": len(found), "rules": totals, "per_page": found}
    # $ATTNLAB_A11Y_REPORT: a folder for the reports (default pytest's temporary folder)
    out = Path(os.environ.get("ATTNLAB_A11Y_REPORT", "") or tmp_path_factory.getbasetemp()) / f"a11y-{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    print(name, json.dumps(totals, ensure_ascii=False))
    failing = {page: [v for v in vs if v["impact"] in FAILING] for page, vs in found.items()}
    failing = {page: vs for page, vs in failing.items() if vs}
    assert failing == {}, f"serious or critical accessibility violations ({name}):\n" + json.dumps(
        failing, indent=1, ensure_ascii=False)
    return report


def test_axe_finds_nothing_serious_on_any_book_page(book_html, driver, tmp_path_factory):
    pages = _pages(book_html)
    assert len(pages) >= 17, pages
    report = _audit(driver, {str(p.relative_to(book_html)): p.as_uri() for p in pages}, "book",
                    tmp_path_factory)
    # (what the book itself controls is fixed too: no unnamed slider, no contrast failure, every
    # quiz answer group named)
    assert not {"aria-input-field-name", "color-contrast", "aria-required-children"} & set(report["rules"])


def test_quizzes_are_named_radio_groups_with_announced_feedback(book_html, driver):
    """Each quiz question's answers form a radio group named by the question (axe-core 3's
    ``radiogroup`` rule, critical on today's main; axe 4 no longer checks it), the feedback is
    a live region, and the keyboard picks an answer (Tab to the group, Space)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    driver.get((book_html / "book" / "01_positional_semantic.html").as_uri())
    time.sleep(1.0)
    groups = driver.execute_script("""
return [...document.querySelectorAll('.Quiz .Answer')].map((a) => {
  const q = document.getElementById(a.getAttribute('aria-labelledby') || '');
  return [a.getAttribute('role'), q ? q.textContent.trim() : null, a.querySelectorAll('input[type=radio]').length];
});""")
    assert len(groups) >= 3, groups
    for role, question, radios in groups:
        assert role == "radiogroup" and question and radios >= 2, (role, question, radios)
    feedback = driver.execute_script("return [...document.querySelectorAll('.Quiz .Feedback')]"
                                     ".map((f) => f.getAttribute('aria-live'))")
    assert feedback and set(feedback) == {"polite"}
    # keyboard: focus the first answer's radio, Space picks it, the feedback says right or wrong
    driver.execute_script("document.querySelector('.Quiz .Answer input[type=radio]').focus()")
    assert driver.execute_script("return document.activeElement.type") == "radio"
    ActionChains(driver).send_keys(Keys.SPACE).perform()
    time.sleep(0.3)
    said = driver.execute_script("return document.querySelector('.Quiz .Feedback').textContent.trim()")
    assert said, "choosing an answer with the keyboard gave no feedback"


# --------------------------------------------------------------------------- student edition, slides

@pytest.fixture(scope="session")
def course_html(tmp_path_factory, book_html):
    """The student edition's HTML and the slide decks (``build_course.py --parts student,slides``)."""
    import shutil

    if shutil.which("npm") is None and not (ROOT / "_build" / ".course_vendor" / "complete").exists():
        pytest.skip("npm is needed once to fetch reveal.js and MathJax for the slides")
    sys.path.insert(0, str(ROOT / "book" / "_scripts"))
    import build_course

    out = tmp_path_factory.mktemp("course-a11y")
    assert build_course.main(["--out", str(out), "--parts", "student,slides"]) == 0
    return out


@pytest.mark.course
def test_axe_finds_nothing_serious_in_the_student_edition_and_the_slides(course_html, driver, tmp_path_factory):
    student = course_html / "student" / "html"
    pages = _pages(student)
    assert len(pages) >= 17, pages
    decks = sorted((course_html / "slides").glob("lecture*.html"))
    assert len(decks) >= 7, decks
    urls = {f"student/{p.relative_to(student)}": p.as_uri() for p in pages}
    # reveal.js's print view lays every slide out at once (otherwise all but one are hidden)
    urls.update({f"slides/{d.name}": d.as_uri() + "?print-pdf" for d in decks})
    _audit(driver, urls, "course", tmp_path_factory)


# --------------------------------------------------------------------------- keyboard, live readout, AX tree

def _active(drv) -> dict:
    """The focused element, through shadow roots: tag, role, name, value text, outline."""
    return drv.execute_script("""
let a = document.activeElement;
while (a && a.shadowRoot && a.shadowRoot.activeElement) a = a.shadowRoot.activeElement;
const s = getComputedStyle(a);
return {role: a.getAttribute('role'), name: a.getAttribute('aria-label'), value: a.getAttribute('aria-valuetext'),
        outline: s.outlineStyle + ' ' + s.outlineWidth};""")


_READOUT = """
const root = [...Bokeh.index].find((v) => v.model.name === arguments[0]);
const stack = [root];
while (stack.length) {
  const v = stack.pop();
  if (v.model.name === arguments[1]) return [v.el.getAttribute('aria-live'), v.el.getAttribute('role'),
                                              v.shadow_el.textContent];
  if (v.child_views) stack.push(...v.child_views);
}
return null;"""


def _ax_nodes(drv) -> list[dict]:
    drv.execute_cdp_cmd("Accessibility.enable", {})
    return drv.execute_cdp_cmd("Accessibility.getFullAXTree", {})["nodes"]


def _ax_name(node) -> str:
    return (node.get("name") or {}).get("value", "")


def _ax_role(node) -> str:
    return (node.get("role") or {}).get("value", "")


def test_an_explorer_works_with_the_keyboard_alone_and_announces_its_readout(book_html, driver):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    root = "transition-explorer"
    driver.get((book_html / "book" / "06_phase_transition.html").as_uri())
    wait_ready(driver, [root])
    time.sleep(0.5)
    # start the Tab order at the explorer's title, as a reader who reached it would
    driver.execute_script("""
const host = [...document.querySelectorAll('.attnlab-explorer')].find((e) => e.innerHTML.includes(arguments[0]));
host.setAttribute('tabindex', '-1'); host.focus();""", root)
    focused = None
    for _ in range(40):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        focused = _active(driver)
        if focused["role"] == "slider":
            break
    assert focused and focused["role"] == "slider", "Tab never reached a slider of the explorer"
    assert focused["name"] == "ω (positional weight)", focused  # an accessible name
    assert focused["outline"].split()[0] not in ("none", "hidden") and focused["outline"].split()[1] != "0px", focused
    live, role, before = driver.execute_script(_READOUT, root, "readout")
    assert (live, role) == ("polite", "status")
    assert "At α =" in before
    value_before = focused["value"]
    ActionChains(driver).send_keys(Keys.ARROW_RIGHT).perform()
    time.sleep(0.3)
    after = driver.execute_script(_READOUT, root, "readout")[2]
    focused = _active(driver)
    assert focused["value"] != value_before, "the arrow key did not move the slider"
    assert after != before, "the readout did not change with the slider"
    # the next slider, and the cursor slider, whose readout names the values at the cursor
    for _ in range(3):
        ActionChains(driver).send_keys(Keys.TAB).perform()
    assert _active(driver)["name"] == "α = n/d (cursor)"
    ActionChains(driver).send_keys(Keys.ARROW_RIGHT).perform()
    time.sleep(0.3)
    cursor = driver.execute_script(_READOUT, root, "readout")[2]
    assert cursor != after and f"At α = {float(_active(driver)['value']):.2f}" in cursor
    # the data table, one click away: a <details> whose table holds the plotted values
    table = driver.execute_script(_READOUT, root, "data-table")[2]
    assert "data table" in table and "ε_t, semantic" in table
    # what a screen reader is given: Chromium's accessibility tree
    nodes = _ax_nodes(driver)
    sliders = {_ax_name(n) for n in nodes if _ax_role(n) == "slider"}
    assert {"ω (positional weight)", "σ (token std)", "λ (ridge)", "α = n/d (cursor)"} <= sliders, sliders
    status = [n for n in nodes if _ax_role(n) == "status"]
    assert status, "no live status region in the accessibility tree"
    images = {_ax_name(n) for n in nodes if _ax_role(n) == "image"}
    assert any(name.startswith("Transition explorer: training loss") for name in images), images


def test_formulas_reach_the_accessibility_tree_as_math(book_html, driver):
    driver.get((book_html / "book" / "02_solvable_model.html").as_uri())
    driver.execute_async_script("""
const done = arguments[arguments.length - 1];
const typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
(typeset || Promise.resolve()).then(() => done(true), () => done(false));""")
    assert driver.execute_script("return document.querySelectorAll('mjx-assistive-mml math').length") > 10
    nodes = _ax_nodes(driver)
    math = [n for n in nodes if _ax_role(n) in ("math", "MathMLMath")]
    assert len(math) > 10, "no MathML in the accessibility tree"


# --------------------------------------------------------------------------- palette

def _luminance(hex_colour: str) -> float:
    from matplotlib.colors import to_rgb

    c = np.asarray(to_rgb(hex_colour))
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(c @ [0.2126, 0.7152, 0.0722])


def contrast(a: str, b: str) -> float:
    """WCAG 2.1 contrast ratio of two colours."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_contrast_formula_matches_known_values():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)  # the classic just-failing grey


@pytest.mark.parametrize("cvd", [None, "deuteranomaly", "protanomaly", "tritanomaly"])
def test_palette_stays_distinguishable_under_colour_vision_deficiency(cvd):
    """Every pair of the book's colours stays >= 10 apart in CAM02-UCS (about the distance
    that tells two thin lines apart at a glance) under each simulated deficiency at full
    severity (Machado et al. 2009, via colorspacious)."""
    colorspacious = pytest.importorskip("colorspacious")
    from matplotlib.colors import to_rgb

    from attnlab.plots import COLORS

    def seen(c):
        rgb = np.asarray(to_rgb(c))
        if cvd is None:
            return rgb
        space = {"name": "sRGB1+CVD", "cvd_type": cvd, "severity": 100}
        return np.clip(colorspacious.cspace_convert(rgb, space, "sRGB1"), 0, 1)

    distances = {(a, b): float(colorspacious.deltaE(seen(COLORS[a]), seen(COLORS[b]), input_space="sRGB1"))
                 for a, b in itertools.combinations(COLORS, 2)}
    close = {k: round(d, 1) for k, d in distances.items() if d < 10}
    assert close == {}, f"colours too close under {cvd or 'normal vision'}: {close}"


def test_palette_contrast_and_second_channel():
    """Text colours (the branches, named in the explorers' readouts) >= 4.5:1 on white, every
    colour >= 3:1 (non-text contrast, WCAG 1.4.11); in greyscale the branches differ by
    marker and line style."""
    from attnlab.plots import COLORS, DASHES, LINESTYLES, MARKERS

    ratios = {k: contrast(c, "#ffffff") for k, c in COLORS.items()}
    assert min(ratios[k] for k in ("positional", "semantic")) >= 4.5, ratios
    assert min(ratios.values()) >= 3.0, ratios
    assert MARKERS["positional"] != MARKERS["semantic"]
    assert LINESTYLES["positional"] != LINESTYLES["semantic"]
    assert DASHES["positional"] != DASHES["semantic"]


# --------------------------------------------------------------------------- markup, without a browser

def test_bibliography_entries_become_list_items_and_repeated_ids_are_numbered():
    import importlib.util

    spec = importlib.util.spec_from_file_location("a11y_markup", ROOT / "book" / "_ext" / "a11y_markup.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    body = ('<div role="list" class="citation-list"><div class="citation" id="id6" role="doc-biblioentry">'
            '<span class="label">1</span></div></div>'
            '<section id="exercise-content"></section><section id="exercise-content"></section>'
            '<section id="solution-content"></section><section id="exercise-content"></section>')
    out = mod.fix_body(body)
    assert 'class="citation" id="id6" role="listitem"' in out and "doc-biblioentry" not in out
    assert [out.count(f'id="exercise-content{s}"') for s in ("", "-2", "-3")] == [1, 1, 1]
    assert out.count('id="solution-content"') == 1


def test_every_explorer_names_its_sliders_and_has_a_live_readout_and_a_data_table():
    """In Python: each explorer's layout holds the data table, each slider the focus ring and
    the script that names it, and a readout to make live (the browser test checks the page)."""
    from attnlab.explorer_access import FOCUS_CSS
    from attnlab.explorer_grid import load_explorer_grid
    from attnlab.explorers import overlaps_explorer, phase_explorer, teacher_explorer, transition_explorer

    grid = load_explorer_grid()
    for layout in (transition_explorer(grid), overlaps_explorer(grid), phase_explorer(grid), teacher_explorer()):
        from bokeh.models import Slider

        sliders = list(layout.select({"type": Slider}))
        assert sliders and all(FOCUS_CSS in s.stylesheets for s in sliders)
        table = layout.select_one({"name": "data-table"})
        assert table is not None and table.text.startswith("<details><summary>")
        assert layout.select_one({"name": "readout"}) is not None
        for s in sliders:
            callbacks = s.js_property_callbacks["change:value"]
            assert any("aria-label" in cb.code and "aria-live" in cb.code for cb in callbacks), s.name


def test_live_explorers_write_the_values_drawn_into_a_status_readout():
    """The ipywidgets explorers (a kernel): each redraw writes the values it drew, in words."""
    pytest.importorskip("ipywidgets")
    from attnlab.attention import teacher_attention
    from attnlab.explorer_access import READOUT_CLASS
    from attnlab.params import ModelParams
    from attnlab.widgets import se_explorer, teacher_explorer

    live = se_explorer(alpha=1.5, show=False)
    live.render()
    text = live.readout.value
    assert text.startswith("At α = 1.50: semantic branch")
    assert READOUT_CLASS in live.readout._dom_classes  # (the page makes it a live region)
    sem = live.state.results["semantic"]
    assert f"ε_t {sem.eps_t:.5f}" in text and f"linear baseline ε_g {live.state.eps_g_linear:.5f}" in text
    teacher = teacher_explorer(omega=0.4, h1=1.0, h2=-0.5, show=False)
    teacher.render()
    T = teacher_attention(np.array([1.0, -0.5]), 0.4, ModelParams().A_array)
    assert f"query token 1 attends {T[0, 0]:.2f} to token 1" in teacher.readout.value
