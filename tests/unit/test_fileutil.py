"""logstore/fileutil.py: atomic replacement, and a secret's permission bits from its creation on."""

from __future__ import annotations

import os
import stat

from lakelog.logstore import fileutil
from lakelog.logstore.fileutil import SyncBatch, atomic_write


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


def _count_durability_calls(monkeypatch) -> list[str]:
    calls: list[str] = []
    real_fsync, real_syncfs = os.fsync, fileutil.syncfs
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(fileutil, "syncfs", lambda path: (calls.append("syncfs"), real_syncfs(path))[1])
    return calls


def test_a_sync_batch_defers_new_files_only_and_makes_them_durable_at_once(tmp_path, monkeypatch):
    calls = _count_durability_calls(monkeypatch)
    (tmp_path / "existing").write_bytes(b"old")
    batch = SyncBatch(tmp_path)
    with batch.deferring():
        for i in range(20):
            (tmp_path / f"d{i}").mkdir()
            atomic_write(tmp_path / f"d{i}" / "new", b"x")
            batch.add_dir(tmp_path / f"d{i}")
        atomic_write(tmp_path / "existing", b"replaced")  # a replacement is crash-safe on its own
    assert calls == ["fsync", "fsync"]  # the replacement's file and directory, nothing else yet
    assert len(batch) == 20 + 21  # 20 files, 20 directories and their parent
    batch.sync()
    assert calls[2:] == ["syncfs"] and batch.calls == 1 and len(batch) == 0
    batch.sync()  # nothing recorded: nothing to do
    assert len(calls) == 3
    assert all((tmp_path / f"d{i}" / "new").read_bytes() == b"x" for i in range(20))


def test_a_small_sync_batch_fsyncs_each_path_and_outside_a_batch_nothing_is_deferred(tmp_path, monkeypatch):
    calls = _count_durability_calls(monkeypatch)
    batch = SyncBatch(tmp_path)
    with batch.deferring():
        atomic_write(tmp_path / "a", b"1")
    atomic_write(tmp_path / "b", b"2")  # outside the block: file and directory fsynced at once
    assert calls == ["fsync", "fsync"]
    batch.sync()
    assert calls[2:] == ["fsync", "fsync"]  # below SYNCFS_MIN_PATHS: the file, then its directory
