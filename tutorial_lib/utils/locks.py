"""File locks between processes: the results file's append lock and the lock a benchmark run holds while it trains.

Both are operating-system locks (``flock`` on POSIX, ``msvcrt.locking`` on Windows): the system drops them when
the process that holds them exits, however it exits, so a crash never leaves a lock that someone must judge stale.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


def lock_file(fh: IO, blocking: bool = True) -> bool:
    """Take an exclusive lock on the open file ``fh``; ``False`` when ``blocking`` is off and another process
    holds it. Blocking waits (on Windows for up to 10 s, then raises ``OSError``)."""
    if os.name == "nt":
        import msvcrt

        fh.seek(0)   # msvcrt locks bytes from the current position: always the first byte
        try:
            msvcrt.locking(fh.fileno(), msvcrt.LK_LOCK if blocking else msvcrt.LK_NBLCK, 1)
        except OSError:
            if blocking:
                raise
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fh, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def unlock_file(fh: IO) -> None:
    """Release the lock :func:`lock_file` took on the open file ``fh``."""
    if os.name == "nt":
        import msvcrt

        fh.seek(0)
        msvcrt.locking(fh.fileno(), msvcrt.LK_UNLCK, 1)
    else:
        import fcntl

        fcntl.flock(fh, fcntl.LOCK_UN)


@contextmanager
def locked(path: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<path>.lock`` while the block runs (waiting for it if another process has it)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(path.suffix + ".lock"), "w") as lock:
        lock_file(lock)
        try:
            yield
        finally:
            unlock_file(lock)


class HeldLock:
    """A lock file this process holds (see :func:`try_hold`); :meth:`release` gives it up and removes the file."""

    def __init__(self, path: Path, fh: IO):
        self.path, self._fh = path, fh

    def release(self) -> None:
        """Remove the lock file (where the OS allows it), unlock and close it; a second call does nothing."""
        if self._fh.closed:
            return
        try:
            self.path.unlink()   # while still held: whoever waits on this file then sees it is gone and retries
        except OSError:
            pass                 # Windows does not remove an open file; the next holder reuses it
        unlock_file(self._fh)
        self._fh.close()


def try_hold(path: str | Path) -> HeldLock | None:
    """Lock ``path`` (created if missing) without waiting and write this process id into it; ``None`` when
    another live process holds it. The lock lasts until :meth:`HeldLock.release` or the end of this process."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fh = open(path, "a+")
        if not lock_file(fh, blocking=False):
            fh.close()
            return None
        try:   # the previous holder may have removed the file between our open and our lock: then lock anew
            current = os.path.samestat(os.fstat(fh.fileno()), os.stat(path))
        except FileNotFoundError:
            current = False
        if current:
            fh.seek(0)
            fh.truncate()
            fh.write(str(os.getpid()))   # for a person looking at the folder; the lock itself is the OS's
            fh.flush()
            return HeldLock(path, fh)
        unlock_file(fh)
        fh.close()


__all__ = ["lock_file", "unlock_file", "locked", "HeldLock", "try_hold"]
