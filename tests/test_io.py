"""Atomic writes: whole files or nothing, and the permissions a user expects."""
from __future__ import annotations

import os
import stat
import sys

import pytest

from tutorial_lib.utils.io import atomic_write_bytes, atomic_write_text

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_writes_the_whole_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "runs.csv"
    atomic_write_text(target, "a,b\n1,2\n")
    atomic_write_bytes(target, b"a,b\n3,4\n")
    assert target.read_bytes() == b"a,b\n3,4\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["runs.csv"]


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "runs.csv"
    target.write_text("old\n")

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new\n")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["runs.csv"]


@posix_only
def test_a_rewritten_file_keeps_its_permissions(tmp_path):
    target = tmp_path / "README.md"
    target.write_text("old\n")
    for wanted in (0o644, 0o664, 0o600):
        os.chmod(target, wanted)
        atomic_write_text(target, "new\n")
        assert mode(target) == wanted


@posix_only
def test_a_new_file_gets_the_umask_permissions_not_owner_only(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "new.csv", "x\n")
        os.umask(0o002)
        atomic_write_text(tmp_path / "shared.csv", "x\n")
    finally:
        os.umask(old)
    assert mode(tmp_path / "new.csv") == 0o644
    assert mode(tmp_path / "shared.csv") == 0o664
