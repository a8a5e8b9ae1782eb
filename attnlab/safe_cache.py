"""Disk caches that cannot run code: plain ``.npy`` arrays checked against a manifest, trusted folders only.

A cache is a shared resource on a course server: whoever can write a cache entry
decides what the next reader loads. Two rules follow.

* **No pickles.** An entry is a plain ``.npy`` array read with ``allow_pickle=False``
  (a pickle in it raises, it is never unpickled) next to a small JSON manifest holding
  its SHA-256, shape and dtype. A file that does not match its manifest, is not a
  regular file, or does not parse is ignored with one warning (:class:`CacheWarning`)
  and the caller recomputes the value (every entry is deterministic).
* **Trusted folders only** (:func:`trusted`): an entry is read only from a folder (and
  file) that no one but its owner can write: not writable by "others", and not by its
  group unless the reader owns it; the same holds for the folder's parent (which could
  otherwise rename it). A folder prepared by an administrator (owner
  ``root`` or a build user, mode ``755``) is read but, as readers cannot write it,
  never written; a per-user cache (``~/.cache``) is the user's own.

The hash detects damage (a cut-off or half-written file, a bit flip, the wrong array
under a name); the permission rule is what keeps other users from replacing an entry
(they could write a matching manifest too). Writes go through a temporary file and
``os.replace``: a reader never sees half an entry, and a full disk leaves no temporary
file behind (one warning naming the folder).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tempfile
import warnings
from pathlib import Path

import numpy as np

__all__ = ["CacheWarning", "trusted", "trusted_folder", "load_array", "save_array"]


class CacheWarning(UserWarning):
    """A cache entry was ignored (damaged, or in a folder others can write) or could not be written."""


def _owned_safely(st: os.stat_result) -> bool:
    if st.st_mode & stat.S_IWOTH:
        return False
    return not (st.st_mode & stat.S_IWGRP) or st.st_uid == os.geteuid()


def trusted(path) -> bool:
    """Whether ``path`` (a folder or file) can only be written by its owner and the reader.

    ``False`` where it is writable by all users (``o+w``, with or without the sticky bit:
    anyone may then create an entry first), or by its group when the reader is not its
    owner; ``False`` also where it cannot be examined. A file must be a regular file
    (not a link, a FIFO or a device).
    """
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        return False
    return _owned_safely(st)


def trusted_folder(folder) -> bool:
    """Whether ``folder`` is :func:`trusted` and cannot be renamed or replaced by another user:
    its parent is trusted too, or has the sticky bit (``/tmp``) and ``folder`` belongs to the
    reader or to ``root``."""
    folder = Path(os.path.abspath(folder))
    if not trusted(folder):
        return False
    if trusted(folder.parent):
        return True
    try:
        parent, st = os.stat(folder.parent), os.lstat(folder)
    except OSError:
        return False
    return bool(parent.st_mode & stat.S_ISVTX) and st.st_uid in (os.geteuid(), 0)


def _paths(folder: Path, name: str) -> tuple[Path, Path]:
    return folder / f"{name}.npy", folder / f"{name}.json"


def _warn(message: str) -> None:
    warnings.warn(message, CacheWarning, stacklevel=3)


def load_array(folder, name: str, *, shape: tuple, dtype=np.float64) -> np.ndarray | None:
    """The array ``name`` of the cache ``folder``, or ``None`` (missing, or not to be trusted).

    Parameters
    ----------
    folder : str or Path or None
        The cache folder (``None``: no disk cache).
    name : str
        The entry's name (``NAME.npy`` and its manifest ``NAME.json``).
    shape : tuple of int
        The shape the entry must have.
    dtype : numpy dtype
        The dtype it must have.

    Returns
    -------
    ndarray or None
        ``None`` where the entry is missing (silently), or is present but fails a check
        (one :class:`CacheWarning` naming the file and the check): the folder or file is
        writable by others, the manifest is not the expected JSON, the data's SHA-256,
        shape or dtype differ from it or from ``shape``/``dtype``, the file is not a plain
        ``.npy`` array (a pickled object is refused, never loaded) or holds a NaN or an
        infinity. Nothing is raised.
    """
    if folder is None:
        return None
    folder = Path(folder)
    data_path, meta_path = _paths(folder, name)
    if not os.path.lexists(data_path) and not os.path.lexists(meta_path):
        return None
    problem = None
    if not trusted_folder(folder):
        problem = f"the folder {folder} (or its parent) can be written by other users"
    elif not (trusted(data_path) and trusted(meta_path)):
        problem = "not a regular file that only its owner can write (or its manifest is missing)"
    else:
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            raw = data_path.read_bytes()
            if not isinstance(meta, dict) or meta.get("sha256") != hashlib.sha256(raw).hexdigest():
                problem = "its SHA-256 differs from its manifest (damaged or replaced)"
            else:
                arr = np.load(io.BytesIO(raw), allow_pickle=False)
                if arr.shape != tuple(shape) or arr.dtype != np.dtype(dtype) \
                        or list(arr.shape) != meta.get("shape") or str(arr.dtype) != meta.get("dtype"):
                    problem = (f"shape {arr.shape} and dtype {arr.dtype} where {tuple(shape)} {np.dtype(dtype)} "
                               "are expected")
                elif not np.isfinite(arr).all():
                    problem = "it holds NaN or infinite values"
                else:
                    return arr
        except (OSError, ValueError, UnicodeDecodeError) as exc:  # (np.load refuses a pickle with ValueError)
            problem = f"unreadable ({type(exc).__name__}: {exc})"
    _warn(f"ignored the cache entry {data_path}: {problem}; computing it again")
    return None


def save_array(folder, name: str, array: np.ndarray) -> bool:
    """Write ``array`` as the entry ``name`` of ``folder`` (``.npy`` and its manifest), atomically.

    Nothing is written (and ``False`` returned, silently) where ``folder`` is ``None`` or
    cannot be written by this user, or is not :func:`trusted`; where the write fails
    (e.g. a full disk) the temporary files are removed and one :class:`CacheWarning`
    names the folder and the error. Never raises ``OSError``.

    Returns
    -------
    bool
        Whether the entry was written.
    """
    if folder is None:
        return False
    folder = Path(folder)
    if not (trusted_folder(folder) and os.access(folder, os.W_OK)):
        return False
    array = np.ascontiguousarray(array)
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    raw = buf.getvalue()
    meta = json.dumps({"sha256": hashlib.sha256(raw).hexdigest(), "shape": list(array.shape),
                       "dtype": str(array.dtype)}).encode()
    data_path, meta_path = _paths(folder, name)
    temps = []
    try:
        for content, target in ((raw, data_path), (meta, meta_path)):
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
            temps.append(tmp)
            with os.fdopen(fd, "wb") as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, target in zip(temps, (data_path, meta_path)):
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
        return True
    except OSError as exc:
        for tmp in temps:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        _warn(f"could not write the cache entry {data_path} ({exc.strerror or exc}); it is computed "
              "again in the next session")
        return False
