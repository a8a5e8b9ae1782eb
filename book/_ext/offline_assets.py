"""Sphinx extension: the pages load their JavaScript from the book's own static files.

* BokehJS, for the kernel-free explorers (:mod:`attnlab.explorers`): the files the
  installed Bokeh package ships go to ``_static/bokeh/`` and are added to the pages
  whose body holds an explorer (the other pages carry no extra weight), with the
  small stylesheet that hides the note meant for live notebooks.
* MathJax 3, from the ``django-static-mathjax`` package (MathJax's own build, no
  Django needed), goes to ``_static/mathjax/``; ``_config.yml`` points
  ``mathjax_path`` there instead of a CDN.

So a page opened from disk, offline, draws its formulas and its explorers. The kernels
that execute the chapters for the book get ``ATTNLAB_EXPLORER_BOKEHJS=page``: their
explorer outputs leave BokehJS to the page instead of carrying it inline.

It also drops repeated inline scripts from each page: the thebe configuration
(``const THEBE_JS_URL = ...``) is added twice by the launch-button machinery, and the
second copy throws ``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared``.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

_CSS = ".attnlab-explorer-note { display: none; }\n.attnlab-explorer { margin: 0.5em 0 1em 0; }\n"
_MARKER = 'class="attnlab-explorer"'
# what tex-mml-chtml.js loads: the component itself, its input/output modules and fonts,
# the menu and the accessibility extensions it may fetch on demand
_MATHJAX = ("tex-mml-chtml.js", "input", "output", "ui", "a11y", "sre")


def _mathjax_source() -> Path:
    import mathjax  # the django-static-mathjax distribution

    return Path(mathjax.__file__).parent / "static" / "mathjax" / "es5"


def _copy(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    from attnlab.explorers import bokehjs_files, bokehjs_names

    static = Path(app.outdir) / "_static"
    target = static / "bokeh"
    target.mkdir(parents=True, exist_ok=True)
    for src, name in zip(bokehjs_files(), bokehjs_names()):
        shutil.copyfile(src, target / name)
    (target / "explorers.css").write_text(_CSS)
    src = _mathjax_source()
    for name in _MATHJAX:
        if (src / name).is_dir():
            shutil.copytree(src / name, static / "mathjax" / name, dirs_exist_ok=True)
        else:
            (static / "mathjax").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / name, static / "mathjax" / name)


def _page(app, pagename, templatename, context, doctree):
    if _MARKER not in (context.get("body") or ""):
        return
    from attnlab.explorers import bokehjs_names

    for name in bokehjs_names():
        app.add_js_file(f"bokeh/{name}", priority=400)
    app.add_css_file("bokeh/explorers.css")


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        # an inline script's file name is None or "" depending on who added it
        key = (getattr(js, "filename", str(js)) or None, getattr(js, "attributes", {}).get("body"))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


def setup(app):
    # the kernels that execute the chapters (started later, with this environment) embed the
    # explorers without BokehJS: these pages load it (attnlab.explorers.embed)
    from attnlab.explorers import BOKEHJS_MODE

    os.environ[BOKEHJS_MODE] = "page"
    app.connect("html-page-context", _page)
    # last: the launch buttons add the second copy during this event
    app.connect("html-page-context", _dedupe_scripts, priority=999)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
