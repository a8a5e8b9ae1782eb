"""Headless Chromium for the browser tests (Selenium), and helpers that read and move a
Bokeh explorer in a page: shared by the tests of the built book and of notebook front ends.

Needs Debian's ``chromium`` and ``chromium-driver``; without them a test is skipped, unless
``ATTNLAB_REQUIRE_BROWSER=1`` (set by ``.ci/run``) makes that a failure.
"""
from __future__ import annotations

import os
import shutil

import numpy as np
import pytest


def browser_or_skip() -> tuple[str, str]:
    """Paths of Chromium and its driver; skip (or fail, under ``ATTNLAB_REQUIRE_BROWSER``)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    message = "headless Chromium is needed: apt-get install chromium chromium-driver"
    if os.environ.get("ATTNLAB_REQUIRE_BROWSER"):
        pytest.fail(message)
    pytest.skip(message)


def start_chromium(width: int = 1280, height: int = 1000):
    """A headless Chromium that logs the console and the network."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = browser_or_skip()
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={width},{height}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(options=opts, service=Service(chromedriver))
    drv.set_script_timeout(30)
    return drv


DOC = "const doc = Bokeh.documents.find((d) => d.get_model_by_name(arguments[0]));"

_HANDLE = """
const root = [...Bokeh.index].find((v) => v.model.name === arguments[0]);
const stack = [root];
while (stack.length) {
  const v = stack.pop();
  if (v.model.name === arguments[1]) return v.shadow_el.querySelector('.noUi-handle');
  if (v.child_views) stack.push(...v.child_views);
}
return null;"""


def get(drv, root, name, attr):
    """Attribute ``attr`` of the model ``name`` in the document of the explorer ``root``."""
    return drv.execute_script(DOC + "const m = doc.get_model_by_name(arguments[1]); return m[arguments[2]];",
                              root, name, attr)


def column(drv, root, source, field) -> np.ndarray:
    """Column ``field`` of the data source ``source`` (``None`` as NaN)."""
    values = drv.execute_script(DOC + "return Array.from(doc.get_model_by_name(arguments[1]).data[arguments[2]]);",
                                root, source, field)
    return np.array([np.nan if v is None else v for v in values], float)


def press(drv, root, slider):
    """One keyboard step of the slider (right, or left at its end); returns (before, after)."""
    from selenium.webdriver.common.keys import Keys

    before = get(drv, root, slider, "value")
    end = get(drv, root, slider, "end")
    handle = drv.execute_script(_HANDLE, root, slider)
    assert handle is not None, f"{root}: no slider handle {slider}"
    handle.send_keys(Keys.ARROW_LEFT if before >= end - 1e-12 else Keys.ARROW_RIGHT)
    after = get(drv, root, slider, "value")
    assert after != before, f"{root}: the key did not move slider {slider}"
    return before, after


def wait_ready(drv, roots, timeout: float = 30):
    """Wait until every explorer of ``roots`` has a document and a view in the page."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(drv, timeout).until(lambda d: d.execute_script(
        "return typeof Bokeh !== 'undefined' && arguments[0].every((r) => Bokeh.documents.some("
        "(doc) => doc.get_model_by_name(r)) && [...Bokeh.index].some((v) => v.model.name === r))", list(roots)))


def drawn_canvases(drv, root) -> int:
    """How many plots of the explorer ``root`` have drawn a canvas of non-zero size."""
    return drv.execute_script("""
const root = [...Bokeh.index].find((v) => v.model.name === arguments[0]);
const stack = [root];
let n = 0;
while (stack.length) {
  const v = stack.pop();
  if (v.canvas_view && v.canvas_view.bbox && v.canvas_view.bbox.width > 0 && v.canvas_view.bbox.height > 0) n++;
  if (v.child_views) stack.push(...v.child_views);
  if (v.renderer_views) stack.push(...v.renderer_views.values?.() ?? []);
}
return n;""", root)


def severe_console_errors(drv) -> list[str]:
    return [e["message"] for e in drv.get_log("browser") if e["level"] == "SEVERE"]
