"""The explorers in the built HTML book, in headless Chromium (Selenium).

Uses the session's book (the ``book_html`` fixture of ``conftest.py``: ``_build/html`` when
it is newer than every source of the book, else one build per session into a temporary
folder), opens every page with an explorer, moves every slider with the
keyboard as a reader would, and checks that the drawn data are the cached grid's
values at the new point, that the thresholds' markers follow, that the page logs no
error and loads nothing from the network. Slider latency and page weight are
measured and written to ``$ATTNLAB_EXPLORER_REPORT`` or ``explorers-browser.json``
in pytest's temporary folder (and printed with ``-s``); ``benchmarks/bench_explorers.py``
reports them.

Every page of the book is also opened at a phone's width, where none may be wider than
the screen.

Chromium: see ``tests/browser.py``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from attnlab.attention import teacher_attention
from attnlab.explorer_grid import load_explorer_grid
from attnlab.explorers import _transition_readout
from attnlab.params import BRANCHES, ModelParams
from browser import DOC, column, get, press, severe_console_errors, wait_ready

ROOT = Path(__file__).resolve().parents[1]
PAGES = {"book/02_solvable_model.html": ("teacher-explorer",),
         "book/05_state_evolution.html": ("overlaps-explorer",),
         "book/06_phase_transition.html": ("phase-explorer", "transition-explorer")}
CURVE_FIELDS = {"transition-explorer": ("eps_t", "eps_g"), "overlaps-explorer": ("m", "theta", "qnorm")}


def _latency_ms(drv, root, slider, value):
    """Time from setting a slider's value to the second animation frame after it (the redraw)."""
    return drv.execute_async_script(DOC + """
const done = arguments[arguments.length - 1], s = doc.get_model_by_name(arguments[1]);
const t0 = performance.now();
s.value = arguments[2];
requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - t0)));""", root, slider, value)


def wait_ready(drv, roots):
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(drv, 30).until(lambda d: d.execute_script(
        "return typeof Bokeh !== 'undefined' && arguments[0].every((r) => Bokeh.documents.some("
        "(doc) => doc.get_model_by_name(r)) && [...Bokeh.index].some((v) => v.model.name === r))", list(roots)))


# --------------------------------------------------------------------------- checks per explorer

def _check_curves(drv, root, grid, latency):
    fields = CURVE_FIELDS[root]
    for slider in ("omega", "sigma", "lam", "alpha"):
        old = {b: column(drv, root, b, fields[0]) for b in BRANCHES}
        old_ac, old_cursor = get(drv, root, "alpha_c", "location"), get(drv, root, "cursor", "location")
        press(drv, root, slider)
        i, j, k, a = (int(round(get(drv, root, n, "value"))) for n in ("omega", "sigma", "lam", "alpha"))
        for b_idx, b in enumerate(BRANCHES):
            shown = grid.curves["on_branch"][i, j, k, b_idx]
            for f in fields:
                want = np.where(shown, grid.curves[f][i, j, k, b_idx], np.nan)
                np.testing.assert_allclose(column(drv, root, b, f), want, rtol=1e-6, atol=0, equal_nan=True,
                                           err_msg=f"{root}: {b} {f} after moving {slider}")
        t = (int(np.flatnonzero(np.isclose(grid.omegas_dense, grid.omegas[i]))[0]), j, k)
        ac = grid.alpha_c[t]
        if np.isfinite(ac):
            assert get(drv, root, "alpha_c", "location") == pytest.approx(ac, rel=1e-9)
        else:
            assert get(drv, root, "alpha_c", "visible") is False
        assert get(drv, root, "cursor", "location") == pytest.approx(grid.alphas[a])
        if slider == "alpha":
            assert get(drv, root, "cursor", "location") != old_cursor
        else:
            new = {b: column(drv, root, b, fields[0]) for b in BRANCHES}
            assert any(not np.allclose(old[b], new[b], equal_nan=True) for b in BRANCHES), f"{root}: {slider} drew nothing new"
            if np.isfinite(ac) and old_ac is not None and not np.isclose(old_ac, ac):
                assert get(drv, root, "alpha_c", "location") != old_ac
        if root == "transition-explorer":
            assert get(drv, root, "eps_g_linear", "location") == pytest.approx(grid.eps_g_linear[i, j, k], rel=1e-9)
            # the phase named, also where the training losses do not cross (the text Python writes)
            assert get(drv, root, "readout", "text") == _transition_readout(grid, i, j, k, a)
        # the alpha axis stays the grid's range (an auto-range jumped where a branch is absent)
        assert (get(drv, root, "alpha_range", "start"), get(drv, root, "alpha_range", "end")) == pytest.approx(
            (grid.alphas[0], grid.alphas[-1]))
        latency.append(_latency_ms(drv, root, slider, 0))


def _check_phase(drv, root, grid, latency):
    for slider in ("sigma", "lam"):
        press(drv, root, slider)
        j, k = (int(round(get(drv, root, n, "value"))) for n in ("sigma", "lam"))
        np.testing.assert_allclose(column(drv, root, "thresholds", "alpha_c"), grid.alpha_c[:, j, k], rtol=1e-9,
                                   equal_nan=True)
        np.testing.assert_allclose(column(drv, root, "thresholds", "alpha_l"), grid.alpha_l[:, j, k], rtol=1e-9,
                                   equal_nan=True)
        shown = column(drv, root, "gd_map", "shown")
        paper = np.isclose(grid.sigmas[j], 0.5) and np.isclose(grid.lams[k], 0.01)
        assert (shown == (1.0 if paper else 0.0)).all()
        # its colour bar and legend entry go with it
        assert get(drv, root, "gd_bar", "visible") == paper and get(drv, root, "gd_item", "visible") == paper
        # where a threshold's line stops, the text says that it lies beyond the grid
        text = get(drv, root, "readout", "text")
        ac, al = grid.alpha_c[:, j, k], grid.alpha_l[:, j, k]
        assert ("α_l lies beyond" in text) == bool(np.any(np.isfinite(ac) & ~np.isfinite(al))), text
        assert ("No crossing" in text) == bool(np.any(~np.isfinite(ac))), text
        latency.append(_latency_ms(drv, root, slider, 0))


def _check_teacher(drv, root, grid, latency):
    A = ModelParams().A_array
    for slider in ("omega", "h1", "h2"):
        press(drv, root, slider)
        w, h1, h2 = (get(drv, root, n, "value") for n in ("omega", "h1", "h2"))
        h = np.array([h1, h2])
        np.testing.assert_allclose(column(drv, root, "teacher", "value"), teacher_attention(h, w, A).ravel(), rtol=1e-6)
        np.testing.assert_allclose(column(drv, root, "semantic_part", "value"), teacher_attention(h, 0.0, A).ravel(),
                                   rtol=1e-6)
        latency.append(_latency_ms(drv, root, slider, 0.5 if slider == "omega" else 1.0))


CHECKS = {"transition-explorer": _check_curves, "overlaps-explorer": _check_curves, "phase-explorer": _check_phase,
          "teacher-explorer": _check_teacher}


def _requests(drv) -> list[str]:
    urls = []
    for entry in drv.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def test_explorers_in_the_built_pages(book_html, driver, tmp_path_factory):
    grid = load_explorer_grid()
    report = {}
    for page, roots in PAGES.items():
        path = book_html / page
        assert path.exists(), f"{page} was not built"
        # drop earlier pages' entries: the browser is shared by the session's tests (axe-core's
        # stylesheet requests on other pages log CORS errors under file://)
        driver.get_log("performance")
        driver.get_log("browser")
        driver.get(path.as_uri())
        wait_ready(driver, roots)
        latency = []
        for root in roots:
            CHECKS[root](driver, root, grid, latency)
        urls = _requests(driver)
        remote = [u for u in urls if not u.startswith(("file:", "data:", "blob:", "about:"))]
        assert remote == [], f"{page} loads from the network: {remote}"
        errors = severe_console_errors(driver)
        assert errors == [], f"{page}: console errors {errors}"
        local = {Path(u[len("file://"):].split("?")[0].split("#")[0]) for u in urls if u.startswith("file:")}
        weight = sum(p.stat().st_size for p in local if p.is_file())
        report[page] = dict(explorers=list(roots), html_bytes=path.stat().st_size, page_weight_bytes=weight,
                            requests=len(urls), latency_ms_median=float(np.median(latency)),
                            latency_ms_max=float(np.max(latency)), slider_moves=len(latency))
        assert path.stat().st_size < 4_000_000, f"{page}: the HTML is {path.stat().st_size} bytes"
    out = Path(os.environ.get("ATTNLAB_EXPLORER_REPORT") or tmp_path_factory.getbasetemp() / "explorers-browser.json")
    out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))


_TYPESET = """
const done = arguments[arguments.length - 1];
const typeset = window.MathJax && MathJax.startup && MathJax.startup.promise;
(typeset || Promise.resolve()).then(() => done(true), () => done(false));"""


def test_every_page_fits_a_phone_screen(book_html, driver):
    """At a phone's width (390 CSS px) no page of the book is wider than the screen (a wider
    page is shown zoomed out, or scrolls sideways as a whole): code, tables and equations
    scroll in their own boxes, API signatures and parameter lists wrap
    (``book/_static/attnlab.css``; the API page was 587 px wide before), and so does the
    general index, linked from every page's head (717 px before)."""
    pages = sorted(book_html.glob("book/**/*.html")) + [book_html / "genindex.html", book_html / "py-modindex.html"]
    assert len(pages) >= 17 and all(p.exists() for p in pages), pages
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": False})
    wide = {}
    try:
        for page in pages:
            driver.get(page.as_uri())
            driver.execute_async_script(_TYPESET)  # (display equations are laid out by MathJax)
            width = driver.execute_script("return document.documentElement.scrollWidth")
            if width > 390:
                wide[str(page.relative_to(book_html))] = width
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert wide == {}, f"pages wider than a 390 px screen (px): {wide}"


_FIGURES = """
const out = [];
for (const img of document.querySelectorAll('.cell_output img, figure img')) {
  if (!img.naturalWidth) continue;
  const pic = img.closest('picture.attnlab-figure');
  const narrow = pic && img.currentSrc !== img.src;
  const minPx = pic ? parseFloat(pic.getAttribute(narrow ? 'data-narrow-min-font-px' : 'data-min-font-px')) : null;
  out.push({narrow: !!narrow, phone: !!pic, natural: img.naturalWidth, shown: img.getBoundingClientRect().width,
            minPx: minPx, alt: img.getAttribute('alt') || ''});
}
return out;"""


def test_figure_text_is_legible_on_a_phone(book_html, driver):
    """At 390 CSS px every figure of a chapter shows its smallest text at >= 9 CSS px: the
    page picks the figure's phone variant (``attnlab.responsive``) where the figure is wider
    than the column (chapter 5's six panels were scaled to 0.39, 4 px labels)."""
    pages = sorted(book_html.glob("book/0*.html"))
    assert len(pages) == 8, pages
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": False})
    small, figures = {}, 0
    try:
        for page in pages:
            driver.get(page.as_uri())
            for k, fig in enumerate(driver.execute_script(_FIGURES)):
                figures += 1
                scale = fig["shown"] / fig["natural"]
                # an image without font information may not be scaled down
                text_px = fig["minPx"] * scale if fig["phone"] else (99.0 if scale > 0.97 else 0.0)
                if not text_px >= 9.0:
                    small[f"{page.name} #{k}"] = dict(fig, text_px=round(text_px, 1))
                assert fig["alt"].startswith("Figure"), (page.name, k, fig["alt"])
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    assert figures >= 20
    assert small == {}, f"figure text below 9 CSS px at 390 px: {json.dumps(small, indent=1)}"
