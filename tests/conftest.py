"""Shared fixtures: ``stub_compute`` replaces the first computing step of every
command and entry point by raising :class:`Reached`, so that a test of input
validation never computes (and proves that validation comes first)."""
import pytest


class Reached(BaseException):
    """Validation passed: the computation would start here (not an ``Exception``,
    so that no ``except`` clause of the code under test swallows it)."""


@pytest.fixture
def stub_compute(monkeypatch):
    import attnlab.counting
    import attnlab.experiments.figures
    import attnlab.simulation
    import attnlab.theory.branches
    import attnlab.theory.thresholds

    def reached(*args, **kwargs):
        raise Reached()

    for module, name in ((attnlab.simulation, "make_problem"), (attnlab.theory.branches, "fixed_point"),
                         (attnlab.theory.thresholds, "linear_baseline_error"),
                         (attnlab.theory.thresholds, "map_transitions"), (attnlab.counting, "_train"),
                         (attnlab.experiments.figures, "run_sweeps")):
        monkeypatch.setattr(module, name, reached)
    return Reached


def pytest_configure(config):
    """Under pytest-xdist, each worker's thread pools (torch, BLAS, OpenMP: read at import,
    also by the notebook kernels it starts) get its share of the cores: with a pool of
    every core per worker, two workers on two cores ran chapter 3's gradient descent 2.5x
    slower than one. A variable the caller set is kept."""
    import os

    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        share = str(max(1, cores // workers))
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            os.environ.setdefault(name, share)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that fails on a child process's exit status (``subprocess.run(..., check=True)``)
    shows the child's output: pytest alone prints only ``CalledProcessError ... exit status 1``."""
    import subprocess

    outcome = yield
    report = outcome.get_result()
    exc = call.excinfo.value if call.excinfo is not None else None
    if isinstance(exc, subprocess.CalledProcessError):
        for name in ("stderr", "stdout"):
            text = getattr(exc, name)
            if isinstance(text, bytes):
                text = text.decode(errors="replace")
            if text:
                report.sections.append((f"child process {name} ({' '.join(map(str, exc.cmd))[:200]})",
                                        text[-20000:]))


# --------------------------------------------------------------------------- the book, built once

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
#: What the book is built from: a change to any of these makes ``_build/html`` stale.
BOOK_SOURCES = ("_config.yml", "_toc.yml", "references.bib", "book", "attnlab", "results")


def _newest_source_mtime() -> float:
    newest = 0.0
    for name in BOOK_SOURCES:
        path = ROOT / name
        files = [path] if path.is_file() else (p for p in path.rglob("*") if p.is_file())
        for f in files:
            if "__pycache__" in f.parts or ".ipynb_checkpoints" in f.parts or f.suffix in (".pyc", ".lock"):
                continue
            newest = max(newest, f.stat().st_mtime)
    return newest


def built_book_is_current(html) -> bool:
    """``html`` holds a finished build (its search index, written last), newer than every
    source of the book, with no failed-execution report."""
    done = html / "searchindex.js"
    reports = html / "reports"
    if not done.is_file() or (reports.is_dir() and any(reports.iterdir())):
        return False
    return done.stat().st_mtime > _newest_source_mtime()


@pytest.fixture(scope="session")
def book_html(tmp_path_factory):
    """The HTML book: the README's ``_build/html`` (its main job) when it is current, else
    built once for the whole session into a temporary folder."""
    import shutil
    import subprocess

    from browser import browser_or_skip

    browser_or_skip()  # (no browser, no test that needs the book)
    built = ROOT / "_build" / "html"
    if built_book_is_current(built):
        return built
    out = tmp_path_factory.mktemp("book")
    exe = shutil.which("jupyter-book") or shutil.which("jb")
    proc = subprocess.run([exe, "build", str(ROOT), "--path-output", str(out), "-W", "-n", "--keep-going"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out / "_build" / "html"


@pytest.fixture(scope="session")
def driver():
    """One headless Chromium for the session (``tests/browser.py``)."""
    from browser import start_chromium

    drv = start_chromium()
    yield drv
    drv.quit()


@pytest.fixture(scope="session")
def installed_attnlab(tmp_path_factory):
    """attnlab installed from its wheel into a fresh venv (``tests/installed.py``)."""
    import sys

    if sys.platform == "win32":
        pytest.skip("POSIX virtual environment layout")
    from installed import install_wheel

    return install_wheel(tmp_path_factory.mktemp("installed"))
