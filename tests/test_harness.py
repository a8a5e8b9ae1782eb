"""The test suite itself: what a failing test shows."""
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

FAILING = '''
import subprocess, sys

def test_child_fails():
    subprocess.run([sys.executable, "-c", "import sys; print('child says hello'); "
                    "sys.exit('child error: no module named nowhere')"], capture_output=True, text=True, check=True)
'''


def test_a_failing_child_process_shows_its_stderr_and_stdout(tmp_path):
    """``check=True`` failures carry the child's output into pytest's report (a nested venv's
    ``ModuleNotFoundError`` was reported as ``exit status 1`` alone)."""
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_child.py").write_text(FAILING)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                          str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "child process stderr" in res.stdout and "child error: no module named nowhere" in res.stdout, res.stdout
    assert "child process stdout" in res.stdout and "child says hello" in res.stdout, res.stdout
