"""Atomic writes: a crash never leaves a half-written file behind."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def _permissions_for(path: Path) -> int:
    """The mode a rewrite of ``path`` should have: the file's own when it exists, else what ``open()`` would give
    a new file (0o666 less the umask). ``mkstemp`` alone would leave every rewritten file owner-only (0o600)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to a temporary file in the same folder, fsync it, then rename over ``path`` (which keeps
    its permissions; a new file gets the usual ones)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _permissions_for(path))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))
