"""A shared course server: caches that cannot run code or feed wrong points, numba caches repaired.

Every test here writes into a cache what another user (or a damaged disk) could, and checks
that nothing runs, no wrong number comes out and the session goes on with one warning.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import attnlab

ROOT = Path(__file__).resolve().parents[1]


class _Payload:
    """A pickle that creates ``marker`` when it is loaded (what a hostile cache entry would do)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _python(code: str, env: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ATTNLAB_COMPILE_HELPER": "0", **env}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


_POINTS = ("import warnings, numpy as np\n"
           "from attnlab.theory.quadrature import QMCRule, _sobol_gaussians, gaussian_points\n"
           "with warnings.catch_warnings(record=True) as caught:\n"
           "    warnings.simplefilter('always')\n"
           "    pts = gaussian_points.__wrapped__(QMCRule(log2_points=6, scrambles=1, seed=4))\n"
           "print(np.array_equal(pts, _sobol_gaussians(6, 1, 4, 6, '')), len(caught))\n"
           "for w in caught: print('WARNING', w.message)\n")


def _cache_files(folder: Path) -> list:
    return [p for p in folder.rglob("*") if p.is_file() and p.suffix in (".pkl", ".npy")]


def test_a_pickle_in_the_points_cache_is_never_loaded(tmp_path):
    """Every data file of the points cache replaced by a pickle that runs a command: the next
    session does not run it (an entry is a .npy read with allow_pickle=False, checked against
    its manifest's SHA-256), warns once and uses the right points. Also with a manifest that
    matches the pickle's bytes (someone who could write the folder)."""
    import hashlib
    import json
    cache, marker = tmp_path / "points", tmp_path / "ran"
    env = {"ATTNLAB_CACHE_DIR": str(cache)}
    assert _python(_POINTS, env).stdout.split()[:2] == ["True", "0"]
    files = _cache_files(cache)
    assert files
    payload = pickle.dumps(_Payload(marker))
    for f in files:
        f.write_bytes(payload)
    out = _python(_POINTS, env)
    assert not marker.exists(), "a pickle in the points cache was executed"
    assert out.stdout.split()[:2] == ["True", "1"], (out.stdout, out.stderr)
    # the manifest made to match (its SHA-256, shape and dtype): np.load still refuses the pickle
    for f in _cache_files(cache):
        f.write_bytes(payload)
        manifest = f.with_suffix(".json")
        if manifest.exists():
            meta = json.loads(manifest.read_text())
            manifest.write_text(json.dumps(dict(meta, sha256=hashlib.sha256(payload).hexdigest())))
    out = _python(_POINTS, env)
    assert not marker.exists() and out.stdout.split()[:2] == ["True", "1"], (out.stdout, out.stderr)


def _replace_points(cache: Path, factor: float, manifest: bool) -> None:
    """Every entry of the points cache scaled by ``factor``, in the format of its file."""
    import hashlib
    import json

    import joblib
    for f in _cache_files(cache):
        if f.suffix == ".pkl":
            joblib.dump(joblib.load(f) * factor, f)
        else:
            np.save(f, np.load(f) * factor)
            if manifest:
                meta = json.loads(f.with_suffix(".json").read_text())
                f.with_suffix(".json").write_text(json.dumps(dict(meta, sha256=hashlib.sha256(f.read_bytes())
                                                                  .hexdigest())))


def test_scaled_points_in_the_cache_are_not_used(tmp_path):
    """Points scaled by 1.05 (theta +7%, eps_g -12% with converged: true before): their SHA-256
    differs from the manifest, so the right points are generated again, with one warning."""
    env = {"ATTNLAB_CACHE_DIR": str(tmp_path)}
    _python(_POINTS, env)
    _replace_points(tmp_path, 1.05, manifest=False)
    out = _python(_POINTS, env)
    assert out.stdout.split()[:2] == ["True", "1"] and "SHA-256" in out.stdout, (out.stdout, out.stderr)
    assert _python(_POINTS, env).stdout.split()[:2] == ["True", "0"]  # and the entry was written again


def test_a_points_cache_other_users_can_write_is_not_read(tmp_path):
    """A folder writable by all (the README's old `chmod -R a+rwX` advice): an entry there, even
    with a matching manifest, is not read; a folder prepared read-only is read but not written."""
    cache = tmp_path / "shared"
    env = {"ATTNLAB_CACHE_DIR": str(cache)}
    _python(_POINTS, env)
    _replace_points(cache, 1.05, manifest=True)
    for p in [cache, *cache.rglob("*")]:
        p.chmod(0o777 if p.is_dir() else 0o666)
    out = _python(_POINTS, env)
    assert out.stdout.split()[:2] == ["True", "1"] and "other users" in out.stdout, (out.stdout, out.stderr)


def test_a_read_only_prepared_points_cache_is_read(tmp_path):
    """An administrator's folder (mode 755, files 644; here the files are made read-only) is read:
    the points come from it (a sentinel entry proves it) and nothing is written there."""
    from attnlab.safe_cache import load_array, save_array
    folder = tmp_path / "prepared"
    folder.mkdir()
    assert save_array(folder, "x", np.arange(6.0).reshape(2, 3))
    before = sorted(p.name for p in folder.iterdir())
    folder.chmod(0o555)
    try:
        assert np.array_equal(load_array(folder, "x", shape=(2, 3)), np.arange(6.0).reshape(2, 3))
        assert not save_array(folder, "y", np.zeros(3)) or os.geteuid() == 0
    finally:
        folder.chmod(0o755)
    assert sorted(p.name for p in folder.iterdir()) == before or os.geteuid() == 0


def test_a_full_disk_for_the_points_cache_leaves_no_temporary_file(tmp_path, monkeypatch):
    """A write that fails (ENOSPC) gives the points, one warning naming the file and no
    temporary file (joblib said 'Possibly a race condition' and left them)."""
    import errno

    from attnlab import safe_cache
    real = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safe_cache.os, "fsync", full)
    with pytest.warns(safe_cache.CacheWarning, match="No space left on device") as caught:
        assert not safe_cache.save_array(tmp_path, "x", np.zeros(4))
    monkeypatch.setattr(safe_cache.os, "fsync", real)
    assert len(caught) == 1 and str(tmp_path / "x.npy") in str(caught[0].message)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------- numba's cache

_KERNEL = ("import warnings\n"
           "with warnings.catch_warnings(record=True) as caught:\n"
           "    warnings.simplefilter('always')\n"
           "    from attnlab.theory import kernels\n"
           "    value = kernels.sigmoid(0.3)\n"
           "print(round(value, 12), len(caught))\n"
           "for w in caught: print('WARNING', w.message)\n")


def _indexes(folder: Path) -> list:
    return sorted(folder.rglob("kernels.sigmoid-*.nbi"))


@pytest.fixture
def numba_cache(tmp_path):
    """A numba cache folder holding attnlab's sigmoid, and the environment that uses it."""
    env = {"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "XDG_CACHE_HOME": str(tmp_path / "home"),
           "ATTNLAB_CACHE_DIR": ""}
    out = _python(_KERNEL, env)
    assert out.returncode == 0 and out.stdout.split()[:2] == ["0.574442516812", "0"], (out.stdout, out.stderr)
    assert _indexes(tmp_path / "numba")
    return tmp_path / "numba", env


def test_a_numba_cache_other_users_can_write_is_not_loaded(numba_cache, tmp_path):
    """numba unpickles its index files: in a folder every user can write, one user's pickle
    would run in the next user's session (exit 0, same result, nothing printed). Such a folder
    is not used: the kernels go to this user's private cache, with one warning."""
    folder, env = numba_cache
    marker = tmp_path / "ran"
    for index in _indexes(folder):
        index.write_bytes(pickle.dumps(_Payload(marker)))
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o777 if p.is_dir() else 0o666)
    out = _python(_KERNEL, env)
    assert not marker.exists(), "a pickle in a shared numba cache was executed"
    assert out.returncode == 0 and out.stdout.split()[:2] == ["0.574442516812", "1"], (out.stdout, out.stderr)
    assert "can be written by other users" in out.stdout
    assert _indexes(tmp_path / "home" / "attnlab" / "numba-private")
    assert oct((tmp_path / "home" / "attnlab" / "numba-private").stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("damage", ["empty", "truncated", "random", "data"])
def test_a_damaged_numba_cache_is_compiled_again_with_one_warning(numba_cache, damage):
    """An empty, cut-off or random index (or a damaged data file) made every solve and warm-up
    fail with a 105-151-line traceback, again on every run. Now: one warning, the right value,
    and the next run loads a sound cache without a warning."""
    folder, env = numba_cache
    index = _indexes(folder)[0]
    if damage == "data":
        for data in folder.rglob("kernels.sigmoid-*.nbc"):
            data.write_bytes(os.urandom(64))
    else:
        raw = index.read_bytes()
        index.write_bytes({"empty": b"", "truncated": raw[: len(raw) // 2], "random": os.urandom(200)}[damage])
    out = _python(_KERNEL, env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[:2] == ["0.574442516812", "1"] and "is damaged" in out.stdout, out.stdout
    again = _python(_KERNEL, env)
    assert again.stdout.split()[:2] == ["0.574442516812", "0"], (again.stdout, again.stderr)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs to give a folder to another user (chown)")
def test_a_folder_of_another_user_that_its_group_can_write_is_not_trusted(tmp_path):
    """An administrator's folder (another owner, mode 755) is read; the same folder writable by its
    group (e.g. all students) is ignored with one warning; this user's own group-writable
    folder (umask 002) is read."""
    from attnlab.safe_cache import CacheWarning, load_array, save_array
    folder = tmp_path / "prepared"
    folder.mkdir()
    assert save_array(folder, "x", np.ones(3))
    os.chown(folder, 12345, 12345)
    for f in folder.iterdir():
        os.chown(f, 12345, 12345)
    folder.chmod(0o755)
    assert np.array_equal(load_array(folder, "x", shape=(3,)), np.ones(3))
    folder.chmod(0o775)
    with pytest.warns(CacheWarning, match="other users"):
        assert load_array(folder, "x", shape=(3,)) is None
    os.chown(folder, os.geteuid(), os.getegid())
    assert np.array_equal(load_array(folder, "x", shape=(3,)), np.ones(3))


def test_a_fresh_clone_without_pycache_uses_it_without_a_warning(tmp_path):
    """In a fresh clone (or with PYTHONDONTWRITEBYTECODE) attnlab/theory/__pycache__ does not
    exist yet: numba creates it in attnlab/theory, which only its owner can write, so nothing is
    moved and nothing is printed (a warning there would fail the book build's -W)."""
    import shutil
    copy = tmp_path / "clone"
    shutil.copytree(Path(attnlab.__file__).parent, copy / "attnlab",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for p in [copy, *copy.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    out = subprocess.run([sys.executable, "-W", "error::attnlab.safe_cache.CacheWarning", "-c",
                          "import attnlab.theory, numba; print(numba.config.CACHE_DIR or 'default')"],
                         capture_output=True, text=True, cwd=copy, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1",
                              "NUMBA_CACHE_DIR": "", "XDG_CACHE_HOME": str(tmp_path / "home")})
    assert out.returncode == 0, out.stderr
    assert "can be written by other users" not in out.stderr
    assert not (tmp_path / "home" / "attnlab" / "numba-private").exists()
