"""The explorers in the built HTML book, in headless Chromium (Selenium).

Builds the book into a temporary folder (``ATTNLAB_BOOK_HTML=path/to/_build/html``
reuses a build), opens every page with an explorer, moves every slider with the
keyboard as a reader would, and checks that the drawn data are the cached grid's
values at the new point, that the thresholds' markers follow, that the page logs no
error and loads nothing from the network. Slider latency and page weight are
measured and written to ``$ATTNLAB_EXPLORER_REPORT`` or ``explorers-browser.json``
in pytest's temporary folder (and printed with ``-s``); ``benchmarks/bench_explorers.py``
reports them.

Every page of the book is also opened at a phone's width, where none may be wider than
the screen.

Needs Debian's ``chromium`` and ``chromium-driver``; without them the test is
skipped, unless ``ATTNLAB_REQUIRE_BROWSER=1`` (set by ``.ci/run``) makes that a failure.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attnlab.attention import teacher_attention
from attnlab.explorer_grid import load_explorer_grid
from attnlab.explorers import _transition_readout
from attnlab.params import BRANCHES, ModelParams

ROOT = Path(__file__).resolve().parents[1]
PAGES = {"book/02_solvable_model.html": ("teacher-explorer",),
         "book/05_state_evolution.html": ("overlaps-explorer",),
         "book/06_phase_transition.html": ("phase-explorer", "transition-explorer")}
CURVE_FIELDS = {"transition-explorer": ("eps_t", "eps_g"), "overlaps-explorer": ("m", "theta", "qnorm")}


def _browser_or_skip():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    message = "headless Chromium is needed: apt-get install chromium chromium-driver"
    if os.environ.get("ATTNLAB_REQUIRE_BROWSER"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def book_html(tmp_path_factory) -> Path:
    _browser_or_skip()
    given = os.environ.get("ATTNLAB_BOOK_HTML")
    if given:
        return Path(given).resolve()  # a relative path too (file:// URIs need an absolute one)
    out = tmp_path_factory.mktemp("book")
    exe = shutil.which("jupyter-book") or shutil.which("jb")
    proc = subprocess.run([exe, "build", str(ROOT), "--path-output", str(out), "-W", "-n", "--keep-going"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "_build" / "html"


@pytest.fixture(scope="module")
def driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = _browser_or_skip()
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(options=opts, service=Service(chromedriver))
    drv.set_script_timeout(20)
    yield drv
    drv.quit()


# --------------------------------------------------------------------------- page helpers

_DOC = "const doc = Bokeh.documents.find((d) => d.get_model_by_name(arguments[0]));"

_HANDLE = """
const root = [...Bokeh.index].find((v) => v.model.name === arguments[0]);
const stack = [root];
while (stack.length) {
  const v = stack.pop();
  if (v.model.name === arguments[1]) return v.shadow_el.querySelector('.noUi-handle');
  if (v.child_views) stack.push(...v.child_views);
}
return null;"""


def _get(drv, root, name, attr):
    return drv.execute_script(_DOC + "const m = doc.get_model_by_name(arguments[1]); return m[arguments[2]];",
                              root, name, attr)


def _column(drv, root, source, field):
    values = drv.execute_script(_DOC + "return Array.from(doc.get_model_by_name(arguments[1]).data[arguments[2]]);",
                                root, source, field)
    return np.array([np.nan if v is None else v for v in values], float)


def _press(drv, root, slider):
    """One keyboard step of the slider (right, or left at its end); returns (before, after)."""
    from selenium.webdriver.common.keys import Keys

    before = _get(drv, root, slider, "value")
    end = _get(drv, root, slider, "end")
    handle = drv.execute_script(_HANDLE, root, slider)
    assert handle is not None, f"{root}: no slider handle {slider}"
    handle.send_keys(Keys.ARROW_LEFT if before >= end - 1e-12 else Keys.ARROW_RIGHT)
    after = _get(drv, root, slider, "value")
    assert after != before, f"{root}: the key did not move slider {slider}"
    return before, after


def _latency_ms(drv, root, slider, value):
    """Time from setting a slider's value to the second animation frame after it (the redraw)."""
    return drv.execute_async_script(_DOC + """
const done = arguments[arguments.length - 1], s = doc.get_model_by_name(arguments[1]);
const t0 = performance.now();
s.value = arguments[2];
requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now() - t0)));""", root, slider, value)


def _wait_ready(drv, roots):
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(drv, 30).until(lambda d: d.execute_script(
        "return typeof Bokeh !== 'undefined' && arguments[0].every((r) => Bokeh.documents.some("
        "(doc) => doc.get_model_by_name(r)) && [...Bokeh.index].some((v) => v.model.name === r))", list(roots)))


# --------------------------------------------------------------------------- checks per explorer

def _check_curves(drv, root, grid, latency):
    fields = CURVE_FIELDS[root]
    for slider in ("omega", "sigma", "lam", "alpha"):
        old = {b: _column(drv, root, b, fields[0]) for b in BRANCHES}
        old_ac, old_cursor = _get(drv, root, "alpha_c", "location"), _get(drv, root, "cursor", "location")
        _press(drv, root, slider)
        i, j, k, a = (int(round(_get(drv, root, n, "value"))) for n in ("omega", "sigma", "lam", "alpha"))
        for b_idx, b in enumerate(BRANCHES):
            shown = grid.curves["on_branch"][i, j, k, b_idx]
            for f in fields:
                want = np.where(shown, grid.curves[f][i, j, k, b_idx], np.nan)
                np.testing.assert_allclose(_column(drv, root, b, f), want, rtol=1e-6, atol=0, equal_nan=True,
                                           err_msg=f"{root}: {b} {f} after moving {slider}")
        t = (int(np.flatnonzero(np.isclose(grid.omegas_dense, grid.omegas[i]))[0]), j, k)
        ac = grid.alpha_c[t]
        if np.isfinite(ac):
            assert _get(drv, root, "alpha_c", "location") == pytest.approx(ac, rel=1e-9)
        else:
            assert _get(drv, root, "alpha_c", "visible") is False
        assert _get(drv, root, "cursor", "location") == pytest.approx(grid.alphas[a])
        if slider == "alpha":
            assert _get(drv, root, "cursor", "location") != old_cursor
        else:
            new = {b: _column(drv, root, b, fields[0]) for b in BRANCHES}
            assert any(not np.allclose(old[b], new[b], equal_nan=True) for b in BRANCHES), f"{root}: {slider} drew nothing new"
            if np.isfinite(ac) and old_ac is not None and not np.isclose(old_ac, ac):
                assert _get(drv, root, "alpha_c", "location") != old_ac
        if root == "transition-explorer":
            assert _get(drv, root, "eps_g_linear", "location") == pytest.approx(grid.eps_g_linear[i, j, k], rel=1e-9)
            # the phase named, also where the training losses do not cross (the text Python writes)
            assert _get(drv, root, "readout", "text") == _transition_readout(grid, i, j, k, a)
        # the alpha axis stays the grid's range (an auto-range jumped where a branch is absent)
        assert (_get(drv, root, "alpha_range", "start"), _get(drv, root, "alpha_range", "end")) == pytest.approx(
            (grid.alphas[0], grid.alphas[-1]))
        latency.append(_latency_ms(drv, root, slider, 0))


def _check_phase(drv, root, grid, latency):
    for slider in ("sigma", "lam"):
        _press(drv, root, slider)
        j, k = (int(round(_get(drv, root, n, "value"))) for n in ("sigma", "lam"))
        np.testing.assert_allclose(_column(drv, root, "thresholds", "alpha_c"), grid.alpha_c[:, j, k], rtol=1e-9,
                                   equal_nan=True)
        np.testing.assert_allclose(_column(drv, root, "thresholds", "alpha_l"), grid.alpha_l[:, j, k], rtol=1e-9,
                                   equal_nan=True)
        shown = _column(drv, root, "gd_map", "shown")
        paper = np.isclose(grid.sigmas[j], 0.5) and np.isclose(grid.lams[k], 0.01)
        assert (shown == (1.0 if paper else 0.0)).all()
        # its colour bar and legend entry go with it
        assert _get(drv, root, "gd_bar", "visible") == paper and _get(drv, root, "gd_item", "visible") == paper
        # where a threshold's line stops, the text says that it lies beyond the grid
        text = _get(drv, root, "readout", "text")
        ac, al = grid.alpha_c[:, j, k], grid.alpha_l[:, j, k]
        assert ("α_l lies beyond" in text) == bool(np.any(np.isfinite(ac) & ~np.isfinite(al))), text
        assert ("No crossing" in text) == bool(np.any(~np.isfinite(ac))), text
        latency.append(_latency_ms(drv, root, slider, 0))


def _check_teacher(drv, root, grid, latency):
    A = ModelParams().A_array
    for slider in ("omega", "h1", "h2"):
        _press(drv, root, slider)
        w, h1, h2 = (_get(drv, root, n, "value") for n in ("omega", "h1", "h2"))
        h = np.array([h1, h2])
        np.testing.assert_allclose(_column(drv, root, "teacher", "value"), teacher_attention(h, w, A).ravel(), rtol=1e-6)
        np.testing.assert_allclose(_column(drv, root, "semantic_part", "value"), teacher_attention(h, 0.0, A).ravel(),
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
        driver.get_log("performance")  # drop earlier pages' entries
        driver.get(path.as_uri())
        _wait_ready(driver, roots)
        latency = []
        for root in roots:
            CHECKS[root](driver, root, grid, latency)
        urls = _requests(driver)
        remote = [u for u in urls if not u.startswith(("file:", "data:", "blob:", "about:"))]
        assert remote == [], f"{page} loads from the network: {remote}"
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
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
