#!/usr/bin/env python
"""Point the book at another repository or release (e.g. an instructor's fork).

    python book/_scripts/retarget.py --url https://github.com/ME/attnlab --release v0.1.0

The one place that names the repository is ``repository`` in ``_config.yml``: ``url`` and
``branch`` (the release tag or branch that the launch buttons open). This command writes
both there, then rewrites the install cell of every chapter (``book/md/*.md``, which
installs ``attnlab[notebook] @ git+URL@RELEASE`` when attnlab is not importable) from them and syncs
the paired notebooks with jupytext (their outputs are kept). Without options it only
re-applies ``_config.yml`` to the chapters. ``tests/test_book.py`` checks that they agree.

    python book/_scripts/retarget.py --check [--tag vX.Y.Z]

only checks, for a release (``RELEASE.md``), that the book points at ``v`` + ``version`` of
``pyproject.toml``, the tag that the release procedure creates (and that ``attnlab.__version__``
is that version): ``repository.branch`` (what the
launch buttons open), every chapter's install cell (``book/md/*.md`` and ``book/NN_*.ipynb``)
and every other ``git+URL@TAG`` of attnlab in the files of :data:`PIN_FILES` (the problem sets'
install cell is made from ``_config.yml`` by ``build_course.release_spec``; their autograder
installs the wheel it carries). With
``--tag`` (CI: the tag that was pushed) that tag must be the same one. Exit code 0 when all
agree, 2 with one line naming what does not.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

import yaml

INSTALL = re.compile(r"git\+https://[^\s\"'@]+(?:@[^\s\"']+)?")
#: a pip requirement of attnlab from git, with or without extras and release:
#: ``attnlab[notebook] @ git+URL@TAG``; in a notebook's JSON the closing quote is ``\"``
PIN = re.compile(r"(?:attnlab(?:\[[\w,\s-]*\])?\s*@\s*)?git\+(https://[^\s\"'\\@]+)(?:@([^\s\"'\\]+))?")
#: the chapters: each installs attnlab at the release in its first code cell
CHAPTER_FILES = ("book/md/*.md", "book/[0-9][0-9]_*.ipynb")
#: other files that could pin a release of attnlab (scripts, Binder, course material, docs)
PIN_FILES = ("README.md", "RELEASE.md", "environment.yml", "postBuild", "book/_scripts/*.py",
             "book/appendix/*.md", "book/course/*/*.md", "book/course/*/*.py")


class RetargetError(ValueError):
    """An option value that cannot be applied (one line for the command line)."""


def install_spec(url: str, release: str) -> str:
    return f"git+{url}@{release}"


def retarget(root: Path, url: str | None = None, release: str | None = None, sync: bool = True) -> list[Path]:
    """Apply the repository settings; returns the chapter sources that changed."""
    config = root / "_config.yml"
    text = config.read_text()
    block = re.search(r"^repository:\n(?:[ \t]+.*\n)+", text, flags=re.M)
    if not block:
        raise RetargetError("_config.yml has no repository: block")
    new_block = block.group(0)
    if url:
        if not re.match(r"https://[^\s@]+$", url):
            raise RetargetError(f"--url must be an https URL, got {url!r}")
        new_block = re.sub(r"^(\s+url:).*$", rf"\1 {url.rstrip('/')}", new_block, flags=re.M)
    if release:
        if not re.match(r"[\w.\-/]+$", release):
            raise RetargetError(f"--release must be a tag or branch name, got {release!r}")
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


def release_tag(root: Path) -> str:
    """The tag of this version: ``v`` + ``version`` in the ``[project]`` table of pyproject.toml.

    Parameters
    ----------
    root : Path
        The repository root.

    Returns
    -------
    str
        E.g. ``"v0.1.0"``.

    Raises
    ------
    RetargetError
        When pyproject.toml has no ``version`` in ``[project]``.
    """
    text = (root / "pyproject.toml").read_text()
    # the lines of [project] up to the next table (tomllib is Python >= 3.11 only)
    found = re.search(r'^\[project\]\n(?:(?!\[).*\n)*?version\s*=\s*"([^"]+)"', text, flags=re.M)
    if not found:
        raise RetargetError("pyproject.toml has no version in [project]")
    return "v" + found.group(1)


def _rel(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def check(root: Path, tag: str | None = None) -> tuple[str, list[str]]:
    """What does not point at the release of this version (``RELEASE.md``).

    Parameters
    ----------
    root : Path
        The repository root.
    tag : str, optional
        The tag being released (CI: the pushed tag); it must be ``v`` + the version too.

    Returns
    -------
    expected : str
        The release tag, ``v`` + ``version`` of pyproject.toml.
    problems : list of str
        One entry per disagreement (empty when the book points at ``expected``): the tag,
        ``attnlab.__version__``, ``repository.branch`` of ``_config.yml``, a chapter without an
        install cell, and every ``git+URL@TAG`` (chapters and :data:`PIN_FILES`) other than
        ``git+URL@expected``.
    """
    expected = release_tag(root)
    problems = []
    if tag is not None and tag != expected:
        problems.append(f"the tag is {tag}")
    init = (root / "attnlab" / "__init__.py").read_text()
    version = re.search(r'^__version__\s*=\s*"([^"]+)"', init, flags=re.M)
    if not version or f"v{version.group(1)}" != expected:
        problems.append(f"attnlab/__init__.py: __version__ is {version.group(1) if version else 'missing'}")
    repo = (yaml.safe_load((root / "_config.yml").read_text()) or {}).get("repository") or {}
    if str(repo.get("branch")) != expected:
        problems.append(f"_config.yml: repository.branch (the launch buttons) is {repo.get('branch')}")
    spec = install_spec(str(repo.get("url", "")).rstrip("/"), expected)
    chapters = {p for pattern in CHAPTER_FILES for p in root.glob(pattern)}
    others = {p for pattern in PIN_FILES for p in root.glob(pattern)} - chapters
    if not chapters:
        problems.append("no chapter found (book/md/*.md, book/NN_*.ipynb)")
    for path in sorted(chapters | others):
        pins = [(m.group(1), m.group(2)) for m in PIN.finditer(path.read_text())]
        if path in chapters and not pins:
            problems.append(f"{_rel(path, root)}: no install cell (git+URL@TAG)")
        for url, ref in pins:
            if install_spec(url, ref) != spec:
                problems.append(f"{_rel(path, root)}: installs git+{url}" + (f"@{ref}" if ref else " (no tag)"))
    return expected, problems


class _OneLineErrorParser(argparse.ArgumentParser):
    """Argument parser whose errors are one line, exit code 2 (as ``attnlab``'s)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(argv=None) -> int:
    ap = _OneLineErrorParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="repository URL, https://github.com/OWNER/NAME")
    ap.add_argument("--release", help="release tag (or branch) that the book installs and opens")
    ap.add_argument("--check", action="store_true",
                    help="change nothing: check that the book points at v + the version of pyproject.toml")
    ap.add_argument("--tag", help="with --check: the tag being released (CI: the pushed tag), must be that one too")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    args = ap.parse_args(argv)
    try:
        if args.check:
            if args.url or args.release:
                ap.error("--check changes nothing: leave out --url and --release")
            expected, problems = check(args.root, args.tag)
            if problems:
                more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
                fix = (f"python book/_scripts/retarget.py --release {expected}"
                       if args.tag in (None, expected) else "bump the version first")
                ap.error(f"the release is {expected} (v + version of pyproject.toml), but "
                         f"{'; '.join(problems[:3])}{more} (fix: {fix}; see RELEASE.md)")
            print(f"the book points at {expected}, v + the version of pyproject.toml")
            return 0
        if args.tag:
            ap.error("--tag goes with --check")
        changed = retarget(args.root, args.url, args.release)
    except (RetargetError, OSError, yaml.YAMLError) as exc:
        ap.error(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    repo = yaml.safe_load((args.root / "_config.yml").read_text())["repository"]
    print(f"repository {repo['url']} at {repo['branch']}; {len(changed)} chapters updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
