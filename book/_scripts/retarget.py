#!/usr/bin/env python
"""Point the book at another repository or release (e.g. an instructor's fork).

    python book/_scripts/retarget.py --url https://github.com/ME/attnlab --release v0.1.0

The one place that names the repository is ``repository`` in ``_config.yml``: ``url`` and
``branch`` (the release tag or branch that the launch buttons open). This command writes
both there, then rewrites the install cell of every chapter (``book/md/*.md``, which
installs ``attnlab[notebook] @ git+URL@RELEASE`` when attnlab is not importable) from them and syncs
the paired notebooks with jupytext (their outputs are kept). Without options it only
re-applies ``_config.yml`` to the chapters. ``tests/test_book.py`` checks that they agree.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

INSTALL = re.compile(r"git\+https://[^\s\"'@]+(?:@[^\s\"']+)?")


def install_spec(url: str, release: str) -> str:
    return f"git+{url}@{release}"


def retarget(root: Path, url: str | None = None, release: str | None = None, sync: bool = True) -> list[Path]:
    """Apply the repository settings; returns the chapter sources that changed."""
    config = root / "_config.yml"
    text = config.read_text()
    block = re.search(r"^repository:\n(?:[ \t]+.*\n)+", text, flags=re.M)
    if not block:
        raise SystemExit("_config.yml has no repository: block")
    new_block = block.group(0)
    if url:
        if not re.match(r"https://[^\s@]+$", url):
            raise SystemExit(f"--url must be an https URL, got {url!r}")
        new_block = re.sub(r"^(\s+url:).*$", rf"\1 {url.rstrip('/')}", new_block, flags=re.M)
    if release:
        if not re.match(r"[\w.\-/]+$", release):
            raise SystemExit(f"--release must be a tag or branch name, got {release!r}")
        new_block = re.sub(r"^(\s+branch:).*$", rf"\1 {release}", new_block, flags=re.M)
    config.write_text(text.replace(block.group(0), new_block))
    repo = yaml.safe_load(config.read_text())["repository"]
    spec = install_spec(repo["url"], repo["branch"])
    changed = []
    for md in sorted((root / "book" / "md").glob("*.md")):
        src = md.read_text()
        new = INSTALL.sub(spec, src)
        if new != src:
            md.write_text(new)
            changed.append(md)
    if sync and changed:
        subprocess.run(["jupytext", "--sync", *map(str, changed)], check=True, cwd=root,
                       stdout=subprocess.DEVNULL)
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="repository URL, https://github.com/OWNER/NAME")
    ap.add_argument("--release", help="release tag (or branch) that the book installs and opens")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    args = ap.parse_args(argv)
    changed = retarget(args.root, args.url, args.release)
    repo = yaml.safe_load((args.root / "_config.yml").read_text())["repository"]
    print(f"repository {repo['url']} at {repo['branch']}; {len(changed)} chapters updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
