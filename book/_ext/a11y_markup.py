"""Sphinx extension: accessible roles in markup that docutils writes for the bibliography.

docutils' HTML5 writer puts the citations of ``{bibliography}`` (sphinxcontrib-bibtex) in a
``<div role="list" class="citation-list">`` whose entries are ``role="doc-biblioentry"``.
DPUB-ARIA 1.1 deprecated ``doc-biblioentry``, and it is no list item: axe-core reports
``aria-required-children`` (critical: a screen reader announces a list with no items),
``aria-deprecated-role`` and ``aria-allowed-role``. Each entry is made a ``listitem``
instead (the list of references stays a list; the entries' ids and back-links are kept).

sphinx-exercise gives the body of every exercise the id ``exercise-content`` and of every
solution ``solution-content``: a page with several exercises repeats the id (axe-core's
``duplicate-id``; nothing links to it, no stylesheet names it). The second and later ones are
numbered (``exercise-content-2``, ...).

The rewrites are done on the page body at build time, so they need no JavaScript.
"""
from __future__ import annotations

import re

_ENTRY = re.compile(r'(<div class="citation"[^>]*?) role="doc-biblioentry"')


_REPEATED_IDS = ("exercise-content", "solution-content")


def _number_repeats(body: str, name: str) -> str:
    count = 0

    def repl(m):
        nonlocal count
        count += 1
        return m.group(0) if count == 1 else f'id="{name}-{count}"'

    return re.sub(f'id="{name}"', repl, body)


def fix_body(body: str) -> str:
    """``body`` with each ``doc-biblioentry`` of a citation list made a ``listitem`` and
    the repeated ids of sphinx-exercise numbered."""
    body = _ENTRY.sub(r'\1 role="listitem"', body)
    for name in _REPEATED_IDS:
        body = _number_repeats(body, name)
    return body


def _page(app, pagename, templatename, context, doctree):
    body = context.get("body")
    if body:
        context["body"] = fix_body(body)


def setup(app):
    app.connect("html-page-context", _page)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
