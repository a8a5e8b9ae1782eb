"""The ipywidgets explorers in a live kernel, with the keyboard only (issue 38).

``book/_scripts/check_widget_keyboard.py`` starts JupyterLab headless with a notebook that
shows chapter 2's live teacher explorer, runs it in headless Chromium and reaches every
slider with Tab: each must have an accessible name that is its visible description, show
a focus ring, and move on ArrowRight, and the redraw must rewrite the explorer's text
readout inside a live region that stays in the page. (About 20 s: JupyterLab 3-5 s, the
page 4-5 s, the first draw 3-4 s, the keys 2 s.) Chromium: see ``tests/browser.py``.

The unit tests below check, without a browser, what :mod:`attnlab.widgets` gives the page
for it: the classes that the access script looks for and the script itself.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from browser import browser_or_skip

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "book" / "_scripts" / "check_widget_keyboard.py"


def test_every_slider_of_a_live_explorer_works_with_the_keyboard_in_jupyterlab(tmp_path):
    browser_or_skip()
    out = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--explorer", "teacher", "--timeout", "150",
                             "--json", str(out)], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=200)  # (the script stops itself after 150 s)
    except subprocess.TimeoutExpired:
        proc.terminate()  # the script shuts JupyterLab and the browser down on SIGTERM
        output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, output
    report = json.loads(out.read_text())
    assert report["failures"] == []
    sliders = report["sliders"]
    assert [s["label"] for s in sliders] == ["ω", "h*₁", "h*₂"]  # every slider, in order, by Tab
    for s in sliders:
        assert s["ax"]["role"] == "slider" and s["ax"]["name"] == s["label"]
        assert s["value_after"] != s["value_before"] and s["valuetext"][0] != s["valuetext"][1]
        assert s["focused_style"] != s["unfocused_style"] and s["still_focused"] and s["live_region_kept"]
        assert [r["role"] for r in s["live_after"]] == ["status"]
    # the readout says what was drawn: the first slider (omega) changes the teacher's mixture
    assert sliders[0]["live_after"][0]["text"] != sliders[0]["live_before"][0]["text"]
    assert all(c["name"] for c in report["other_controls"])  # the editable value boxes
    assert report["shift_tab_reaches"] == len(sliders) - 2
    # JupyterLab and the kernel it started are gone
    assert len(report["server_processes"]) >= 2
    assert not [pid for pid in report["server_processes"] if psutil.pid_exists(pid)]


def test_live_explorer_panel_carries_the_classes_the_access_script_looks_for(monkeypatch):
    pytest.importorskip("ipywidgets")
    from attnlab.explorer_access import READOUT_CLASS, WIDGET_CLASS
    from attnlab.widgets import teacher_explorer

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, **kw: shown.append(obj))
    live = teacher_explorer(show=False).show()
    assert WIDGET_CLASS in live.panel._dom_classes and READOUT_CLASS in live.readout._dom_classes
    # the sliders are inside the panel and are described (the names the script gives them)
    box = [c for c in live.panel.children if hasattr(c, "children")]
    assert [w.description for w in box[0].children] == [w.description for w in live.sliders.values()]
    assert all(w.description for w in live.sliders.values())
    # the readout is text (a live region in the page), escaped: no element of its own
    assert live.readout.value and "<" not in live.readout.value
    # what was displayed: the panel, the figure, and last the script (that shows nothing)
    assert shown[0] is live.panel
    bundle = shown[-1]._repr_mimebundle_()
    assert bundle["text/plain"] == "" and bundle["text/html"] == ""
    js = bundle["application/javascript"]
    assert f".{WIDGET_CLASS} .widget-slider" in js and f".{READOUT_CLASS} .widget-html-content" in js
    for attribute in ("aria-labelledby", "aria-valuetext", "aria-valuenow", "aria-live", "focus-visible"):
        assert attribute in js

