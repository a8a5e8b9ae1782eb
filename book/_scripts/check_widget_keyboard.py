"""Keyboard check of a live ipywidgets explorer in JupyterLab (issue 38).

Starts JupyterLab headless (a free port, a token, a temporary folder holding a small
notebook that shows one explorer of :mod:`attnlab.widgets`, the call a chapter makes),
opens the notebook in headless Chromium (Selenium), runs its cells, waits for the widget
and then uses only the keyboard:

* Tab, from the cell that shows the explorer, until every slider of the explorer was
  focused (Shift+Tab then goes back to the previous one);
* at each slider: its accessible name, role and value as Chromium computes them (the
  accessibility tree, ``Accessibility.getPartialAXTree``) and whether its focus is
  visible (the focused handle's outline or box shadow differ from the unfocused one's);
* ArrowRight (ArrowLeft at the slider's end): the slider's value must change, and the
  explorer's text readout, which must be a live region (``role="status"`` or
  ``aria-live``), must be rewritten for the new value.

Prints a short report and exits 1 if a check failed, 2 if the check could not run
(JupyterLab or the widget did not come up in time). JupyterLab, its kernel and the browser
are shut down in every case (their own process group; hard timeouts everywhere).

Usage::

    PYTHONPATH=. python book/_scripts/check_widget_keyboard.py [--explorer teacher] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import psutil

ROOT = Path(__file__).resolve().parents[2]

#: The notebook's cells per explorer: the calls the chapters make (02, 05, 06)
CALLS = {
    "teacher": "from attnlab.widgets import teacher_explorer\n\n"
               "explorer = teacher_explorer(omega=0.3, h1=1.0, h2=-0.5)",
    "overlaps": "from attnlab.widgets import overlaps_explorer\n\n"
                "live_overlaps = overlaps_explorer(omega=0.3, sigma=0.5, lam=0.01, alpha=1.0)",
    "se": "from attnlab.widgets import se_explorer\n\n"
          "explorer = se_explorer(omega=0.3, sigma=0.5, lam=0.01, alpha=1.0)",
}

#: JupyterLab settings for a quiet, offline start (no news or update pop-up taking the focus)
SETTINGS = {"@jupyterlab/apputils-extension/notification.jupyterlab-settings":
            {"fetchNews": "false", "checkForUpdates": False}}


class CheckError(RuntimeError):
    """The check could not run (exit status 2)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_notebook(folder: Path, call: str) -> Path:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import attnlab\nprint('attnlab from', attnlab.__file__)"),
                nbformat.v4.new_code_cell(call)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / "explorer.ipynb"
    nbformat.write(nb, path)
    return path


@contextmanager
def jupyterlab(folder: Path, timeout: float):
    """A JupyterLab server in ``folder``; yields ``server`` (``url``, ``token``).

    Its configuration, runtime files, settings and workspaces live in ``folder``; the
    kernel runs this interpreter with this process's ``PYTHONPATH``. On exit the server is
    asked to shut down (its kernels with it); then whatever is left of the server and of the
    processes it started (a kernel runs in a session of its own) is killed, and
    ``server.processes`` lists their ids.
    """
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ)
    for name, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_RUNTIME_DIR", "runtime"),
                      ("JUPYTERLAB_SETTINGS_DIR", "settings"), ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"),
                      ("IPYTHONDIR", "ipython"), ("MPLCONFIGDIR", "mpl")):
        (folder / sub).mkdir()
        env[name] = str(folder / sub)
    for name, value in SETTINGS.items():
        path = folder / "settings" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    log = open(folder / "jupyterlab.log", "w")
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}",
           "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
           "--LabApp.extension_manager=readonly", "--ServerApp.terminals_enabled=False",
           "--ServerApp.shutdown_no_activity_timeout=600"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # (CI's container)
        cmd.append("--allow-root")
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    server = SimpleNamespace(url=url, token=token, processes=[proc.pid])
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise CheckError(f"JupyterLab exited with {proc.returncode}: {_tail(folder / 'jupyterlab.log')}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise CheckError(f"JupyterLab did not answer within {timeout:.0f} s: {_tail(folder / 'jupyterlab.log')}")
            time.sleep(0.25)
        yield server
    finally:
        try:
            family = psutil.Process(proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            family = []
        server.processes += [p.pid for p in family]
        try:
            req = urllib.request.Request(f"{url}/api/shutdown", method="POST",
                                         headers={"Authorization": f"token {token}"})
            urllib.request.urlopen(req, timeout=5).close()
            proc.wait(timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for p in family:  # (a kernel that the shutdown did not end)
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        proc.kill()
        proc.wait(timeout=10)
        psutil.wait_procs(family, timeout=10)
        log.close()


def _tail(path: Path, n: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _chromium(width: int, height: int):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver")
    if not (chromium and driver):
        raise CheckError("headless Chromium and chromedriver are needed (apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--force-renderer-accessibility"):
        opts.add_argument(arg)
    drv = webdriver.Chrome(options=opts, service=Service(driver))
    drv.set_page_load_timeout(60)
    drv.set_script_timeout(30)
    return drv


def _wait(what: str, predicate, timeout: float, poll: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise CheckError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(poll)


# ----------------------------------------------------------------------------- the page

#: The explorer's output: the widget view in the second cell's output area
_EXPLORER = "document.querySelectorAll('.jp-Notebook .jp-Cell')[1]?.querySelector('.jp-OutputArea')"

_ACTIVE = """
const out = %s;
const a = document.activeElement;
if (!a) return null;
const slider = a.closest('.widget-slider');
const sliders = out ? [...out.querySelectorAll('.widget-slider')] : [];
return {inside: !!(out && out.contains(a)), slider: slider ? sliders.indexOf(slider) : -1,
        handle: a.classList.contains('noUi-handle'), tag: a.tagName.toLowerCase(),
        cls: String(a.className).slice(0, 80), value: a.getAttribute('aria-valuenow')};
""" % _EXPLORER

_STYLE = """
const s = getComputedStyle(arguments[0]);
return [s.outlineStyle, s.outlineWidth, s.outlineColor, s.boxShadow, s.borderColor, s.backgroundColor].join(' | ');
"""

def _ax_node(drv, element) -> dict:
    """Chromium's accessibility node of ``element``: role, name (and where it comes from), value."""
    drv.execute_script("arguments[0].setAttribute('data-ax-probe', '1')", element)
    try:
        root = drv.execute_cdp_cmd("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        node = drv.execute_cdp_cmd("DOM.querySelector", {"nodeId": root, "selector": "[data-ax-probe]"})["nodeId"]
        nodes = drv.execute_cdp_cmd("Accessibility.getPartialAXTree", {"nodeId": node, "fetchRelatives": False})["nodes"]
    finally:
        drv.execute_script("arguments[0].removeAttribute('data-ax-probe')", element)
    ax = nodes[0]
    get = lambda key: (ax.get(key) or {}).get("value")
    sources = [s.get("type") + (f":{s.get('attribute')}" if s.get("attribute") else "")
               for s in (ax.get("name") or {}).get("sources", []) if s.get("value") or s.get("attributeValue")]
    props = {p["name"]: p["value"].get("value") for p in ax.get("properties", [])}
    return {"role": get("role"), "name": get("name") or "", "name_from": sources[:1],
            "value": get("value"), "focusable": props.get("focusable"),
            "live": props.get("live")}


def _live_region_elements(drv):
    """The explorer's elements with role=status (log, alert) or aria-live."""
    return drv.execute_script(f"const o = {_EXPLORER}; return o ? [...o.querySelectorAll("
                              "'[role=status], [role=log], [role=alert], [aria-live]')] : [];")


def _live_regions(drv):
    """The explorer's live regions as the accessibility tree has them: role, live, text."""
    out = []
    for e in _live_region_elements(drv):
        node = _ax_node(drv, e)
        out.append({"role": node["role"], "live": node["live"], "name": node["name"],
                    "text": e.get_attribute("textContent").strip()})
    return out


def check(explorer: str = "teacher", width: int = 1280, height: int = 900, startup: float = 90,
          draw: float = 60, tabs: int = 40, screenshot: Path | None = None, log=print) -> dict:
    """Run the keyboard check; returns the report (``report["failures"]`` lists what failed).

    Parameters
    ----------
    explorer : {"teacher", "overlaps", "se"}
        The explorer of :mod:`attnlab.widgets` to show (the call its chapter makes).
    width, height : int
        Browser window, px.
    startup, draw : float
        Time limits, s: JupyterLab and the page; the widget's first draw and each redraw.
    tabs : int
        Most Tab presses from the cell to the last slider.
    screenshot : pathlib.Path, optional
        Where to save a picture of the explorer with its first slider focused (PNG).
    log : callable
        Progress messages.

    Raises
    ------
    CheckError
        The check could not run (JupyterLab, the page or the widget did not come up in time).
    """
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    report = {"explorer": explorer, "sliders": [], "failures": [], "timings": {}}
    fail = report["failures"].append
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="attnlab-widget-keyboard-") as tmp:
        folder = Path(tmp)
        _write_notebook(folder, CALLS[explorer])
        with jupyterlab(folder, startup) as server:
            url, token = server.url, server.token
            report["timings"]["jupyterlab_s"] = round(time.monotonic() - t0, 1)
            drv = _chromium(width, height)
            try:
                t1 = time.monotonic()
                drv.get(f"{url}/lab/tree/explorer.ipynb?token={token}&reset")
                _wait("the notebook and its kernel", lambda: drv.execute_script(
                    "const app = window.jupyterapp; const w = app && app.shell.currentWidget;"
                    "return !!(w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
                    " && w.sessionContext.session.kernel.connectionStatus === 'connected'"
                    " && document.querySelectorAll('.jp-Notebook .jp-Cell').length >= 2);"), startup)
                report["timings"]["page_s"] = round(time.monotonic() - t1, 1)
                t2 = time.monotonic()
                drv.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells');")
                handles = _wait("the explorer's sliders and figure", lambda: drv.execute_script(
                    f"const o = {_EXPLORER}; if (!o || !o.querySelector('img')) return null;"
                    "const h = o.querySelectorAll('.widget-slider .noUi-handle'); return h.length ? [...h] : null;"),
                    draw)
                _wait("the status line", lambda: drv.execute_script(  # (written after the readout)
                    f"const o = {_EXPLORER}; return o !== null && /drawn in/.test(o.textContent);"), draw)
                report["timings"]["first_draw_s"] = round(time.monotonic() - t2, 1)
                log(f"explorer {explorer!r}: {len(handles)} sliders, first draw after "
                    f"{report['timings']['first_draw_s']} s")
                unfocused = [drv.execute_script(_STYLE, h) for h in handles]

                # Where a reader's keyboard navigation starts: the explorer's cell, in command
                # mode (a click on the cell's prompt; Escape leaves any editor)
                prompt = drv.execute_script("return document.querySelectorAll('.jp-Notebook .jp-Cell')[1]"
                                            ".querySelector('.jp-InputArea-prompt');")
                ActionChains(drv).move_to_element(prompt).click().perform()
                ActionChains(drv).send_keys(Keys.ESCAPE).perform()
                t3 = time.monotonic()
                seen, order, presses = {}, [], 0
                while len(seen) < len(handles) and presses < tabs:
                    ActionChains(drv).send_keys(Keys.TAB).perform()
                    presses += 1
                    a = drv.execute_script(_ACTIVE)
                    order.append(a)
                    if a and a["inside"] and not a["handle"]:  # another control of the explorer
                        node = _ax_node(drv, drv.switch_to.active_element)
                        report.setdefault("other_controls", []).append({"element": f"{a['tag']}.{a['cls']}", **node})
                        if not node["name"].strip():
                            fail(f"a focusable {a['tag']}.{a['cls']} (role {node['role']}) in the explorer has no "
                                 "accessible name")
                    if a and a["inside"] and a["handle"] and a["slider"] not in seen:
                        seen[a["slider"]] = presses
                        if screenshot is not None and not seen.keys() - {a["slider"]}:
                            drv.execute_script(f"return {_EXPLORER};").screenshot(str(screenshot))
                        report["sliders"].append(_check_slider(drv, handles, a["slider"], unfocused, draw, fail))
                report["tab_presses"] = presses
                report["focus_order"] = [f"{a['tag']}.{a['cls'].split()[0] if a['cls'] else ''}"
                                         + (f" [slider {a['slider']}]" if a["slider"] >= 0 else "")
                                         for a in order if a]
                missing = [i for i in range(len(handles)) if i not in seen]
                if missing:
                    fail(f"Tab did not reach slider(s) {missing} within {tabs} presses")
                elif sorted(seen, key=seen.get) != sorted(seen):
                    fail(f"Tab reached the sliders out of order: {sorted(seen, key=seen.get)}")
                # Shift+Tab from the last slider (where Tab stopped) back to the one before it
                if len(seen) == len(handles) > 1:
                    for _ in range(4):
                        ActionChains(drv).key_down(Keys.SHIFT).send_keys(Keys.TAB).key_up(Keys.SHIFT).perform()
                        a = drv.execute_script(_ACTIVE)
                        if a and a["handle"]:
                            break
                    report["shift_tab_reaches"] = a["slider"] if a and a["handle"] else None
                    if report["shift_tab_reaches"] != len(handles) - 2:
                        fail(f"Shift+Tab from the last slider reached {a}, not slider {len(handles) - 2}")
                report["timings"]["keyboard_s"] = round(time.monotonic() - t3, 1)
            finally:
                drv.quit()
    report["server_processes"] = server.processes
    report["timings"]["total_s"] = round(time.monotonic() - t0, 1)
    return report


def _check_slider(drv, handles, i, unfocused, draw, fail) -> dict:
    """The checks at slider ``i`` (focused by Tab): name, focus ring, one arrow key."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    handle = handles[i]
    node = _ax_node(drv, handle)
    label = drv.execute_script("return arguments[0].closest('.widget-slider')"
                               ".querySelector('.widget-label')?.textContent.trim() || '';", handle)
    focused = drv.execute_script(_STYLE, handle)
    row = {"slider": i, "label": label, "ax": node, "focused_style": focused, "unfocused_style": unfocused[i]}
    if node["role"] != "slider":
        fail(f"slider {i} ({label}): role {node['role']!r}, not 'slider'")
    if not node["name"].strip():
        fail(f"slider {i} ({label}): no accessible name")
    elif label and label.split()[0] not in node["name"]:
        fail(f"slider {i} ({label}): accessible name {node['name']!r} does not name its parameter")
    if focused == unfocused[i]:
        fail(f"slider {i} ({label}): no visible focus indicator (focused and unfocused styles equal: {focused})")
    live_before = _live_regions(drv)
    regions_before = _live_region_elements(drv)
    if not live_before:
        fail(f"slider {i} ({label}): the explorer has no live region (role=status / aria-live)")
    at_end = drv.execute_script("return Number(arguments[0].getAttribute('aria-valuenow'))"
                                " >= Number(arguments[0].getAttribute('aria-valuemax'));", handle)
    key = Keys.ARROW_LEFT if at_end else Keys.ARROW_RIGHT
    value = lambda n: n["value"]  # (aria-valuenow; the value text is read from the page below)
    before = value(node)
    text_before = handle.get_attribute("aria-valuetext")
    t = time.monotonic()
    ActionChains(drv).send_keys(key).perform()
    texts = lambda: [r["text"] for r in live_before]
    try:
        _wait(f"slider {i}'s readout to change", lambda: [r["text"] for r in _live_regions(drv)] != texts(),
              draw, poll=0.2)
    except CheckError as exc:
        if live_before:
            fail(f"slider {i} ({label}): {exc}")
    row["redraw_s"] = round(time.monotonic() - t, 2)
    try:  # (the accessibility tree follows the page asynchronously)
        after_node = _wait(f"slider {i}'s accessible value to change",
                           lambda: (lambda n: n if value(n) != before else None)(_ax_node(drv, handle)), 5)
    except CheckError:
        after_node = _ax_node(drv, handle)
    after = value(after_node)
    row["valuetext"] = (text_before, handle.get_attribute("aria-valuetext"))
    row["key"] = "ArrowLeft" if at_end else "ArrowRight"
    row["value_before"], row["value_after"] = before, after
    row["live_before"], row["live_after"] = live_before, _live_regions(drv)
    regions_after = _live_region_elements(drv)
    row["live_region_kept"] = [e.id for e in regions_before] == [e.id for e in regions_after]
    if live_before and not row["live_region_kept"]:
        fail(f"slider {i} ({label}): the redraw replaced the live region element (a region must be in the page "
             "before its text changes for a screen reader to announce the change)")
    row["still_focused"] = drv.execute_script("return document.activeElement === arguments[0];", handle)
    if before == after:
        fail(f"slider {i} ({label}): {row['key']} did not change its value ({before})")
    if not row["still_focused"]:
        fail(f"slider {i} ({label}): the focus left the slider after the redraw")
    return row


def format_report(report: dict) -> str:
    """The report as a few lines of text."""
    lines = [f"explorer {report['explorer']!r}: timings {report['timings']}"]
    for r in report["sliders"]:
        ax = r["ax"]
        lines.append(f"  slider {r['slider']} (label {r['label']!r}): role={ax['role']} name={ax['name']!r} "
                     f"(from {ax['name_from']}) value {r['value_before']} -> {r['value_after']} after {r['key']} "
                     f"(redraw {r['redraw_s']} s; "
                     f"aria-valuetext {r['valuetext'][0]!r} -> {r['valuetext'][1]!r}; live region kept: {r['live_region_kept']})")
        lines.append(f"    focus: {r['unfocused_style']}  ->  {r['focused_style']}")
        for b, a in zip(r["live_before"], r["live_after"]):
            lines.append(f"    live region role={b['role']} live={b['live']}: {b['text']!r}\n      -> {a['text']!r}")
    for c in report.get("other_controls", []):
        lines.append(f"  other control {c['element']}: role={c['role']} name={c['name']!r} value={c['value']!r}")
    if "shift_tab_reaches" in report:
        lines.append(f"  Shift+Tab from the last slider reaches slider {report['shift_tab_reaches']}")
    if "focus_order" in report:
        lines.append(f"  Tab order ({report['tab_presses']} presses): " + ", ".join(report["focus_order"]))
    lines.append("FAIL:\n  " + "\n  ".join(report["failures"]) if report["failures"] else "OK: every check passed")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--explorer", choices=sorted(CALLS), default="teacher")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--timeout", type=float, default=240, help="hard limit of the whole check, s")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--screenshot", type=Path, help="a PNG of the explorer, its first slider focused")
    args = parser.parse_args(argv)

    def expired(*_):
        raise CheckError(f"the check ran past its hard limit of {args.timeout:.0f} s")

    signal.signal(signal.SIGALRM, expired)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the servers are shut down
    signal.alarm(int(args.timeout))
    try:
        report = check(args.explorer, width=args.width, screenshot=args.screenshot, log=lambda m: print(m, flush=True))
    except CheckError as exc:
        print(f"could not check: {exc}", file=sys.stderr)
        return 2
    finally:
        signal.alarm(0)
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
