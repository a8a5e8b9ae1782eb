"""How long the README's test command takes, in this environment, and what else ran.

    python benchmarks/bench_test_suite.py                # the README's command, as written
    python benchmarks/bench_test_suite.py -- -n 0        # extra pytest options (here: serial)

Runs the third command of the README's Quick start block (``.ci/readme_commands.py``, the
one ``.ci/run`` runs) from the repository root, with the book of the main job in
``_build/html`` if it is current (build it first: the tests then reuse it), and prints the
wall time, pytest's closing line, the load average before and after, and the hypervisor's
steal time over the run (``benchmarks/machine.py``). Arguments after ``--`` are appended
to the command, so that two variants can be timed side by side in one session.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / ".ci"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))

import machine  # noqa: E402
import readme_commands  # noqa: E402
from conftest import built_book_is_current  # noqa: E402


def main(argv: list[str]) -> int:
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    command = shlex.split(readme_commands.commands((ROOT / "README.md").read_text())[2]) + extra
    print(machine.describe())
    print(f"book of the main job current: {built_book_is_current(ROOT / '_build' / 'html')}")
    load = os.getloadavg()
    before = machine.cpu_times()
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    log = Path(os.environ.get("ATTNLAB_SUITE_LOG", "") or "/dev/null")
    log.write_text(proc.stdout + proc.stderr)
    wall = time.perf_counter() - start
    closing = [line for line in proc.stdout.splitlines() if " passed" in line or " failed" in line][-1:]
    print(f"{' '.join(command)}: exit {proc.returncode}, {wall:.0f} s ({wall / 60:.1f} min)")
    print(f"  {closing[0] if closing else proc.stdout[-500:]}")
    print(f"  load average before {load[0]:.2f}, after {os.getloadavg()[0]:.2f}; {machine.steal(before)}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
