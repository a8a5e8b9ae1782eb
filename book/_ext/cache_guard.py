"""Sphinx extension: re-execute the chapters when the code they call changes.

jupyter-cache (``execute_notebooks: cache``) keys a notebook's outputs on the
source of its code cells only, and Sphinx re-reads a document only when its
own file changes. An edit of the attnlab library or of the cached results under
``results/`` or ``book/_data/`` (the tables ``*.csv`` and their provenance ``*.json``, which
cells print and read, e.g. whether a sweep is complete) would therefore leave stale outputs
in the HTML. This extension hashes those inputs; when the hash differs from the one recorded beside the cache at
the last build (or none was recorded), it empties the jupyter cache and marks every notebook document as
outdated, so the next build executes all chapters afresh.
"""
from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from sphinx.util import logging

LOGGER = logging.getLogger(__name__)

#: Inputs, relative to the book root, whose content decides the chapters' outputs.
WATCHED = ("attnlab/**/*.py", "results/*.csv", "results/*.json", "book/_data/*.csv", "book/_data/*.json")
#: Not inputs: ``attnlab reproduce NAME --quick`` writes ``NAME-quick.*`` and ``NAME-quick-theory.*``
#: beside the cached tables (a check of the pipeline that no chapter reads).
QUICK_SUFFIXES = ("-quick", "-quick-theory")


def source_hash(root: Path) -> str:
    """SHA-256 over the paths and contents of the watched files."""
    h = hashlib.sha256()
    for pattern in WATCHED:
        for path in sorted(root.glob(pattern)):
            if "__pycache__" in path.parts or path.stem.endswith(QUICK_SUFFIXES):
                continue
            h.update(str(path.relative_to(root)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def _cache_path(app) -> Path:
    configured = getattr(app.config, "nb_execution_cache_path", "") or ""
    return Path(configured) if configured else Path(app.outdir).parent / ".jupyter_cache"


def _hash_file(cache: Path) -> Path:
    # Recorded beside the cache, not in Sphinx's environment: a second build sharing the
    # cache (the student edition, build_course.py) then reuses it instead of clearing it.
    return cache.with_name(cache.name + ".attnlab-hash")


def _outdated(app, env, added, changed, removed):
    new = source_hash(Path(app.srcdir))
    cache = _cache_path(app)
    record = _hash_file(cache)
    old = record.read_text().strip() if record.exists() else None
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(new + "\n")
    if old == new:
        return []
    if cache.exists():
        shutil.rmtree(cache)
    notebooks = [doc for doc in env.found_docs if Path(env.doc2path(doc)).suffix == ".ipynb"]
    docs = [doc for doc in notebooks if doc not in added]  # (added ones are read anyway)
    if old is None:
        LOGGER.info(f"[cache_guard] first build with this execution cache: executing every chapter "
                    f"(the hash of the attnlab sources and cached results is recorded in {record.name})")
    else:
        LOGGER.info(f"[cache_guard] attnlab sources or cached results changed: re-executing all "
                    f"{len(notebooks)} notebooks")
    return docs


def setup(app):
    app.connect("env-get-outdated", _outdated)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
