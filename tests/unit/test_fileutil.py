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


def test_a_batched_replacement_is_written_at_the_sync_in_two_phases(tmp_path, monkeypatch):
    paths = [tmp_path / f"d{i}" / "ckpt" for i in range(40)]
    for p in paths:
        p.parent.mkdir()
        atomic_write(p, b"old")
    calls = _count_durability_calls(monkeypatch)
    batch = SyncBatch(tmp_path)
    with batch.deferring():
        for p in paths:
            atomic_write(p, b"new", batchable=True)
            atomic_write(p, b"newer", batchable=True)  # the latest write of a path wins
        atomic_write(tmp_path / "d0" / "other", b"x")  # a new file: deferred as before
    assert calls == [] and all(p.read_bytes() == b"old" for p in paths)  # nothing written before the sync
    batch.sync()
    # The temp files (and the new file) durable, the renames, then the renames durable.
    assert calls == ["syncfs", "syncfs"] and batch.calls == 2
    assert all(p.read_bytes() == b"newer" for p in paths)
    assert not list(tmp_path.glob("*/*.tmp"))
    assert len(batch) == 0 and not fileutil._PENDING


def test_an_unbatched_write_after_a_batched_one_is_never_overwritten_by_the_batch(tmp_path):
    path = tmp_path / "ckpt"
    atomic_write(path, b"old")
    batch = SyncBatch(tmp_path)
    with batch.deferring():
        atomic_write(path, b"batched", batchable=True)
    atomic_write(path, b"later")  # e.g. another thread, outside the batch: durable at once
    batch.sync()
    assert path.read_bytes() == b"later" and not fileutil._PENDING


def test_outside_a_batch_a_batchable_write_is_durable_at_once(tmp_path, monkeypatch):
    path = tmp_path / "ckpt"
    atomic_write(path, b"old")
    calls = _count_durability_calls(monkeypatch)
    atomic_write(path, b"new", batchable=True)
    assert calls == ["fsync", "fsync"] and path.read_bytes() == b"new"


def test_a_batched_replacement_whose_directory_was_deleted_is_dropped(tmp_path):
    import shutil

    path = tmp_path / "d" / "ckpt"
    path.parent.mkdir()
    atomic_write(path, b"old")
    batch = SyncBatch(tmp_path)
    with batch.deferring():
        atomic_write(path, b"new", batchable=True)
    shutil.rmtree(tmp_path / "d")  # the partition was deleted meanwhile
    batch.sync()
    assert not path.exists() and not fileutil._PENDING


def test_a_task_created_inside_a_deferring_block_writes_durably_on_its_own(tmp_path, monkeypatch):
    import asyncio

    calls = _count_durability_calls(monkeypatch)
    batch = SyncBatch(tmp_path)

    async def later() -> None:
        atomic_write(tmp_path / "by-task", b"x")  # e.g. a replica fetcher started by a reconcile

    async def main() -> None:
        with batch.deferring():
            task = asyncio.get_running_loop().create_task(later())
            atomic_write(tmp_path / "in-block", b"x")
        await task

    asyncio.run(main())
    assert len(batch) == 2  # only the block's own file (and its directory) wait for the sync
    assert calls == ["fsync", "fsync"]  # the task's file and directory, at once
