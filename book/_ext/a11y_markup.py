"""Sphinx extension: accessible roles in markup that docutils writes for the bibliography.

docutils' HTML5 writer puts the citations of ``{bibliography}`` (sphinxcontrib-bibtex) in a
``<div role="list" class="citation-list">`` whose entries are ``role="doc-biblioentry"``.
DPUB-ARIA 1.1 deprecated ``doc-biblioentry``, and it is no list item: axe-core reports
``aria-required-children`` (critical: a screen reader announces a list with no items),
``aria-deprecated-role`` and ``aria-allowed-role``. Each entry is made a ``listitem``
instead (the list of references stays a list; the entries' ids and back-links are kept).
The rewrite is done on the page body at build time, so it needs no JavaScript.
"""
from __future__ import annotations

import re

_ENTRY = re.compile(r'(<div class="citation"[^>]*?) role="doc-biblioentry"')


def fix_body(body: str) -> str:
    """``body`` with each ``doc-biblioentry`` of a citation list made a ``listitem``."""
    return _ENTRY.sub(r'\1 role="listitem"', body)


def _page(app, pagename, templatename, context, doctree):
    body = context.get("body")
    if body and "doc-biblioentry" in body:
        context["body"] = fix_body(body)


def setup(app):
    app.connect("html-page-context", _page)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
