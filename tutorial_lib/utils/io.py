"""Atomic writes: a crash never leaves a half-written file behind."""
from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path


def _create_temporary(path: Path) -> tuple[int, str]:
    """Open a new, unique temporary file beside ``path`` for writing; returns ``(fd, name)``. Created like
    ``open(..., "w")`` creates a file (0o666 less the umask), not owner-only as ``tempfile.mkstemp`` would."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), str(tmp)
        except FileExistsError:
            continue


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to a temporary file in the same folder, fsync it, then rename over ``path``. A file that is
    replaced keeps its permissions; a new one gets those of any new file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temporary(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if path.exists():
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Text version of :func:`atomic_write_bytes` (UTF-8)."""
    atomic_write_bytes(path, text.encode("utf-8"))
