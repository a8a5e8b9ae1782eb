"""attnlab as a user installs it: a wheel built from a copy of the sources, installed into a
fresh virtual environment, away from the repository (the ``installed_attnlab`` fixture).

The venv sees this environment's packages (attnlab's dependencies, Jupyter) but not its
attnlab: ``--system-site-packages`` would see the *base* interpreter's packages, which inside
a venv (the README's set-up) lack them, so a ``.pth`` line appends this environment's site
folders instead; the ``.pth`` files in those folders (an editable install's finder) are not
processed, so the wheel's attnlab is the only one.
"""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent


def install_wheel(tmp: Path) -> SimpleNamespace:
    """Build attnlab's wheel and install it into ``tmp/venv``.

    Returns
    -------
    SimpleNamespace
        ``python`` (the venv's interpreter), ``venv``, ``wheel``, ``env`` (the environment
        for its subprocesses: no ``PYTHONPATH``, no ``ATTNLAB_RESULTS``).
    """
    src = tmp / "src"
    src.mkdir()
    for item in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / item, src / item)
    shutil.copytree(ROOT / "attnlab", src / "attnlab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "results", src / "results", ignore=shutil.ignore_patterns("*.png", "*.lock"))
    shutil.copytree(ROOT / "book" / "_data", src / "book" / "_data")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNLAB_RESULTS")}
    run = dict(capture_output=True, text=True, env=env, check=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp / "dist"), str(src)], **run)
    wheel = next((tmp / "dist").glob("attnlab-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], **run)
    python = venv / "bin" / "python"
    inner = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                           **run).stdout.strip()
    outer = [p for p in site.getsitepackages() + [site.getusersitepackages()] if Path(p).is_dir()]
    (Path(inner) / "outer_environment.pth").write_text("\n".join(outer) + "\n")
    # (pip from this environment, installing into the venv)
    subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], **run)
    shutil.rmtree(src)  # no repository files left
    return SimpleNamespace(python=python, venv=venv, wheel=wheel, env=env)
