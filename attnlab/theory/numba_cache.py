"""Numba's on-disk cache of attnlab's kernels: only in a folder no other user can write, and damage repaired.

Numba keeps a compiled kernel (``cache=True``) as an index ``NAME.nbi`` and data files
``NAME.N.nbc`` and reads both with ``pickle``: whoever can write these files runs code
in every process that loads them (unlike the point sets, :mod:`attnlab.safe_cache`, they
cannot be stored as plain arrays). Hence:

* :func:`secure_cache_folder` (called when :mod:`attnlab.theory` is imported, before any
  kernel is defined) checks the folder numba would use, ``NUMBA_CACHE_DIR`` or the
  ``__pycache__`` next to attnlab's sources: if other users can write it or its parent
  (:func:`attnlab.safe_cache.trusted`: world-writable, or group-writable and not this
  user's), numba is pointed at a private folder of this user instead
  (:func:`private_folder`, mode ``700``) with one :class:`~attnlab.safe_cache.CacheWarning`.
  A numba cache is therefore never shared between users; each user compiles once
  (``attnlab warm-up`` as that user, e.g. at the start of a session), see the README.
* :func:`guard_loads` wraps the loading of each kernel: an index or data file that cannot
  be read (random bytes, cut off, empty: numba raises from ``pickle``, on every run)
  is removed where this user owns it and the kernel is compiled again, into the same
  folder if the file could be removed, else into a fresh private folder; one warning
  line names the folder. (Removing a file cannot make it run: it is never unpickled.)
"""
from __future__ import annotations

import os
import threading
import warnings
from pathlib import Path

import numba

from ..safe_cache import CacheWarning, trusted, trusted_folder

__all__ = ["candidate_folder", "private_folder", "secure_cache_folder", "guard_loads"]

_THEORY = Path(__file__).resolve().parent
_lock = threading.Lock()
_warned: set = set()


def candidate_folder() -> Path | None:
    """The folder numba would keep attnlab's kernels in: ``NUMBA_CACHE_DIR`` if set and writable
    by this user (created if missing, as numba would), else the ``__pycache__`` next to
    :mod:`attnlab.theory`'s sources if writable, else ``None`` (numba's user-wide cache in this
    user's home: their own)."""
    if numba.config.CACHE_DIR:
        folder = Path(os.path.abspath(numba.config.CACHE_DIR))
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass
        if os.access(folder, os.W_OK):
            return folder
    folder = _THEORY / "__pycache__"
    return folder if os.access(folder if folder.exists() else _THEORY, os.W_OK) else None


def private_folder() -> Path:
    """This user's own numba cache for attnlab: ``$XDG_CACHE_HOME/attnlab/numba-private``, else
    ``~/.cache/attnlab/numba-private`` (created with mode ``700``).

    Raises
    ------
    OSError
        If it cannot be created or is not :func:`~attnlab.safe_cache.trusted`.
    """
    try:
        home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    except RuntimeError as exc:  # no home directory
        raise OSError(f"no folder for a private numba cache ({exc})") from None
    folder = home / "attnlab" / "numba-private"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not trusted_folder(folder):
        raise OSError(f"{folder} can be written by other users")
    return folder


def _warn_once(key: str, message: str) -> None:
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, CacheWarning, stacklevel=3)


def secure_cache_folder() -> None:
    """Point numba at :func:`private_folder` where :func:`candidate_folder` can be written by other
    users (one warning); with no private folder either, at a fresh temporary folder of this process.
    Nothing where numba's JIT is disabled."""
    if numba.config.DISABLE_JIT:
        return
    folder = candidate_folder()
    # a folder numba has not created yet (a fresh clone, PYTHONDONTWRITEBYTECODE) is as safe as
    # the parent it will be created in
    if folder is None or trusted_folder(folder if folder.exists() else folder.parent):
        return
    try:
        private = private_folder()
    except OSError as exc:
        import tempfile
        private = Path(tempfile.mkdtemp(prefix="attnlab-numba-"))  # (mode 700) for this process only
        _warn_once("folder", f"numba's cache folder {folder} can be written by other users, and there is no private "
                             f"one ({exc}): compiling into {private} for this session")
    numba.config.CACHE_DIR = str(private)
    os.environ["NUMBA_CACHE_DIR"] = str(private)  # (the compile helper processes inherit it)
    if private.name == "numba-private":
        _warn_once("folder", f"numba's cache folder {folder} can be written by other users (its files are "
                             f"pickles, which run code when loaded): using the private folder {private} instead")


def _recover(dispatcher, exc: Exception) -> None:
    """Remove the damaged index of ``dispatcher`` (or move its cache to a fresh private folder)."""
    from numba.core.caching import FunctionCache

    cache = dispatcher._cache
    index = Path(cache._cache_file._index_path)
    folder = index.parent
    try:
        if trusted(index) and os.stat(index).st_uid == os.geteuid():
            os.unlink(index)  # numba compiles the kernel again and writes a new index and data file
            where = f"compiling it again into {folder}"
        else:
            raise PermissionError("not this user's file")
    except OSError:
        import tempfile
        fresh = tempfile.mkdtemp(prefix="attnlab-numba-")
        previous, numba.config.CACHE_DIR = numba.config.CACHE_DIR, fresh
        try:
            dispatcher._cache = FunctionCache(dispatcher.py_func)
        finally:
            numba.config.CACHE_DIR = previous
        from .kernels import key_cache_on_kernels
        key_cache_on_kernels(dispatcher)
        guard_loads([dispatcher])
        where = f"compiling it again into the fresh folder {fresh}"
    _warn_once(str(folder), f"numba's cache in {folder} is damaged ({index.name}: {type(exc).__name__}): {where}")


def guard_loads(dispatchers) -> None:
    """Make a damaged cache entry of each of ``dispatchers`` (numba's cached dispatchers) a
    recompilation with one warning instead of an exception (see the module docstring)."""
    from numba.core.caching import NullCache

    for dispatcher in dispatchers:
        cache = getattr(dispatcher, "_cache", None)
        if cache is None or isinstance(cache, NullCache) or getattr(cache, "_attnlab_guarded", False):
            continue
        load = cache.load_overload

        def guarded(sig, target_context, _load=load, _dispatcher=dispatcher):
            try:
                return _load(sig, target_context)
            except Exception as exc:  # noqa: BLE001 (random bytes, a cut-off pickle: anything unpickling raises)
                _recover(_dispatcher, exc)
                return None  # numba compiles (and saves into the dispatcher's present cache)

        cache.load_overload = guarded
        cache._attnlab_guarded = True

