"""CI is the README: `.ci/run` runs the README's Quick start commands, read from it."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / ".ci"))
import readme_commands  # noqa: E402


def test_readme_gives_one_set_up_one_build_and_one_test_command():
    setup, build, test = readme_commands.commands((ROOT / "README.md").read_text())
    assert setup.startswith("pip install ") and '-e ".[dev]"' in setup and "torch==" in setup
    assert build == "jupyter-book build . -W -n --keep-going"
    assert test == "python -m pytest"


def test_ci_runs_the_readme_commands_in_a_fresh_venv():
    run = (ROOT / ".ci" / "run").read_text()
    # each README command is written out in .ci/run, which checks them against the README
    for cmd in readme_commands.commands((ROOT / "README.md").read_text()):
        assert f"    '{cmd}'\n" in run, cmd
    assert "python3 .ci/readme_commands.py README.md" in run and 'eval "$cmd"' in run
    assert "python3 -m venv .venv" in run and ". .venv/bin/activate" in run
    # the README tells the reader to do the same
    assert "python3 -m venv .venv && . .venv/bin/activate" in (ROOT / "README.md").read_text()


def test_ci_refuses_commands_that_are_not_the_readme_s(tmp_path):
    """A .ci/run whose lines drift from the README stops with exit 2 before installing anything."""
    (tmp_path / ".ci").mkdir()
    run = (ROOT / ".ci" / "run").read_text().replace("'python -m pytest'", "'python -m pytest -x'")
    (tmp_path / ".ci" / "run").write_text(run)
    shutil.copy(ROOT / ".ci" / "readme_commands.py", tmp_path / ".ci" / "readme_commands.py")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    env = dict(os.environ, PATH=f"{tmp_path}:{os.environ['PATH']}")
    for tool in ("chromium", "chromedriver"):  # (present: no apt-get)
        (tmp_path / tool).write_text("#!/bin/sh\n")
        (tmp_path / tool).chmod(0o755)
    res = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, env=env,
                         timeout=60)
    assert res.returncode == 2 and "not the README's Quick start block" in res.stderr, res.stderr
    assert not (tmp_path / ".venv").exists()


def test_preface_gives_the_readme_set_up_command():
    setup = readme_commands.commands((ROOT / "README.md").read_text())[0]
    assert setup in (ROOT / "book" / "md" / "00_preface.md").read_text()


@pytest.mark.parametrize("text,error", [("no marker", "no line"),
                                        (readme_commands.MARKER + "\n```sh\nls\n```", "not followed"),
                                        (readme_commands.MARKER + "\n```bash\nls\n", "not closed")])
def test_a_readme_without_the_block_is_one_error_line(tmp_path, text, error):
    (tmp_path / "README.md").write_text(text)
    res = subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_commands.py"), str(tmp_path / "README.md")],
                         capture_output=True, text=True)
    assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1 and error in res.stderr
