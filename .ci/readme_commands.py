"""Print the commands of the README's Quick start, one a line: `.ci/run` checks its own against them.

The block is the first fenced ``bash`` block after the line
``<!-- .ci/run: the commands of the next block, in order -->``; blank lines and ``#``
comments are left out. Exit 2 with one line when the marker or the block is missing.
"""
from __future__ import annotations

import sys
from pathlib import Path

MARKER = "<!-- .ci/run: the commands of the next block, in order -->"


def commands(text: str) -> list[str]:
    """The commands of the marked block of ``text`` (a README)."""
    lines = text.splitlines()
    try:
        start = lines.index(MARKER)
    except ValueError:
        raise ValueError(f"no line {MARKER!r}") from None
    fence = next((k for k in range(start + 1, len(lines)) if lines[k].strip()), None)
    if fence is None or lines[fence].strip() != "```bash":
        raise ValueError("the marker is not followed by a ```bash block")
    out = []
    for line in lines[fence + 1:]:
        if line.strip() == "```":
            return out
        if line.strip() and not line.lstrip().startswith("#"):
            out.append(line.strip())
    raise ValueError("the ```bash block after the marker is not closed")


def main(argv: list[str]) -> int:
    path = Path(argv[1] if len(argv) > 1 else "README.md")
    try:
        found = commands(path.read_text())
    except (OSError, ValueError) as exc:
        print(f"readme_commands: error: {path}: {exc}", file=sys.stderr)
        return 2
    print("\n".join(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
