"""Disk faults under a partition (logstore/log_dir_health.py, ingest_api/partition.py): ENOSPC or
EIO while appending, flushing or rolling refuses the write with KAFKA_STORAGE_ERROR (507 when the
disk is full, 503 otherwise, never 500), acknowledges nothing it could not write, and takes the log
directory offline until a restart, whose recovery keeps every record written before the fault.

The faults come from a fault-injecting file layer at the logstore seam: the `os` calls the segment
makes (`pwritev`, `fsync`) and the segment the log rolls to, replaced for the test's duration."""

from __future__ import annotations

import errno
import os

import pytest

from lakelog.infra.config import LogConfig
from lakelog.ingest_api.error_table import http_error
from lakelog.ingest_api.replication.partition import Partition, PartitionKey
from lakelog.logstore import local_log, segment
from lakelog.logstore.errors import KafkaStorageError, LogDirectoryFullError
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.log_dir_health import LogDirHealth, LogDirState
from lakelog.logstore.record_batch import Record, build_batch, iter_batches


def batch(tag: str, n: int = 3) -> bytes:
    return build_batch([Record(i, 1_700_000_000_000, None, f"{tag}-{i}".encode()) for i in range(n)])


class FaultyFiles:
    """Makes the segment's writes, fsyncs or the next roll fail with `code` while armed."""

    def __init__(self, monkeypatch, operation: str, code: int) -> None:
        self.code = code
        self.armed = True
        if operation == "append":
            real = os.pwritev
            monkeypatch.setattr(segment.os, "pwritev", lambda fd, bufs, pos: self._fail() or real(fd, bufs, pos))
        elif operation == "flush":
            real_fsync = os.fsync
            monkeypatch.setattr(segment.os, "fsync", lambda fd: self._fail() or real_fsync(fd))
        elif operation == "roll":
            real_segment = local_log.LogSegment
            monkeypatch.setattr(local_log, "LogSegment", lambda *a, **kw: self._fail() or real_segment(*a, **kw))
        else:
            raise ValueError(operation)

    def _fail(self) -> None:
        if self.armed:
            raise OSError(self.code, os.strerror(self.code))


def leader(tmp_path, **configs) -> Partition:
    log = PartitionLog(tmp_path / "data" / "t-0", LogConfig(configs))
    p = Partition(PartitionKey("t", 0), log, node_id=1, log_dir=LogDirHealth(tmp_path / "data"))
    assert p.make_leader(1, 1, [1], [1])
    return p


def records(log: PartitionLog) -> list[bytes]:
    out = []
    for _, b in iter_batches(log.read(0, 1 << 20).records):
        out.extend(r.value for r in b.records())
    return out


@pytest.mark.parametrize("operation,code,configs,answer", [
    ("append", errno.ENOSPC, {}, (507, 50701)),
    ("append", errno.EIO, {}, (503, 50340)),
    ("flush", errno.EIO, {"flush.messages": 1}, (503, 50340)),
    ("roll", errno.ENOSPC, {"segment.bytes": 200}, (507, 50701)),
])
def test_a_disk_fault_refuses_the_write_and_takes_the_directory_offline(tmp_path, monkeypatch, operation, code,
                                                                       configs, answer):
    p = leader(tmp_path, **configs)
    for i in range(2):
        p.append_as_leader(batch(f"ok{i}"))
    before = p.log.log_end_offset
    faults = FaultyFiles(monkeypatch, operation, code)
    with pytest.raises(KafkaStorageError) as refused:
        p.append_as_leader(batch("lost"))
    assert isinstance(refused.value, LogDirectoryFullError) == (code == errno.ENOSPC)
    status, error_code, message = http_error(refused.value)
    assert (status, error_code) == answer and message.startswith("KAFKA_STORAGE_ERROR"), message
    assert p.log_dir.state == LogDirState.OFFLINE
    assert p.log_dir.status()["errno"] == errno.errorcode[code]
    if operation != "flush":  # a failed fsync comes after the write: those bytes are readable, not acknowledged
        assert p.log.log_end_offset == before
    # The disk is back, but the directory stays offline: no write is tried until a restart.
    faults.armed = False
    with pytest.raises(KafkaStorageError):
        p.append_as_leader(batch("later"))
    p.log.close()
    # The restart: recovery keeps every record written before the fault.
    reopened = PartitionLog(tmp_path / "data" / "t-0", LogConfig(configs))
    try:
        got = records(reopened)
        assert got[:6] == [f"ok{i}-{j}".encode() for i in range(2) for j in range(3)]
        assert b"later-0" not in got
    finally:
        reopened.close()


def test_a_follower_append_that_fails_takes_the_directory_offline(tmp_path, monkeypatch):
    health = LogDirHealth(tmp_path / "data")
    log = PartitionLog(tmp_path / "data" / "t-0")
    p = Partition(PartitionKey("t", 0), log, node_id=2, log_dir=health)
    data = build_batch([Record(0, 1_700_000_000_000, None, b"x")], base_offset=0)
    FaultyFiles(monkeypatch, "append", errno.EIO)
    with pytest.raises(KafkaStorageError):
        p.append_as_follower(data, 1, 0)
    assert health.state == LogDirState.OFFLINE
    log.close()


def test_a_missing_file_is_not_a_disk_failure(tmp_path, monkeypatch):
    p = leader(tmp_path)
    FaultyFiles(monkeypatch, "append", errno.ENOENT)
    with pytest.raises(FileNotFoundError):
        p.append_as_leader(batch("x"))
    assert p.log_dir.state == LogDirState.ONLINE
    p.log.close()
