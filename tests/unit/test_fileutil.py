"""logstore/fileutil.py: atomic replacement, and a secret's permission bits from its creation on."""

from __future__ import annotations

import os
import stat

from lakelog.logstore.fileutil import atomic_write


def test_atomic_write_replaces_the_whole_file(tmp_path):
    path = tmp_path / "f"
    atomic_write(path, b"old bytes, longer than the new ones")
    atomic_write(path, b"new")
    assert path.read_bytes() == b"new"
    assert not (tmp_path / "f.tmp").exists()


def test_a_secret_is_never_readable_by_others_even_over_a_leftover_temp_file(tmp_path):
    path = tmp_path / "secret"
    leftover = tmp_path / "secret.tmp"  # a crash between create and rename left a world-readable temp file
    leftover.write_bytes(b"stale")
    os.chmod(leftover, 0o644)
    old = os.umask(0)
    try:
        atomic_write(path, b"token\n", mode=0o600)
    finally:
        os.umask(old)
    assert path.read_bytes() == b"token\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_without_a_mode_the_umask_decides(tmp_path):
    path = tmp_path / "plain"
    old = os.umask(0o022)
    try:
        atomic_write(path, b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
