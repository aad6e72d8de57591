"""The log-level admin operations of a node: DeleteRecords on the partitions it leads, and the
description of its log directory (Kafka's DeleteRecords and DescribeLogDirs).

DeleteRecords moves a partition's log start offset up (never down) on its leader, through
`PartitionLog.maybe_increment_log_start_offset` — the same step retention takes — and the followers
follow: each fetch answer carries the leader's log start, which a follower applies to its own log
(`IncrementLogStart` in replication/core.py). Whole segments below the new start are deleted; the
records of the first remaining segment below it are no longer served.

Not yet: a partition of a topic with `remote.storage.enable` is refused (INVALID_REQUEST), as its
remote tier would keep serving the records below the new start.

Concurrency: `delete_records_before` is awaited on the node's event loop and runs the log's step
(which takes the log's lock and deletes files) on a worker thread; `describe_log_dir` reads sizes
under each log's lock.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.replication.partition import Partition
from lakelog.logstore.errors import OffsetOutOfRangeError
from lakelog.logstore.log_dir_health import LogDirHealth, LogDirState

#: DeleteRecords' offset that means "the high watermark".
HIGH_WATERMARK = -1


async def delete_records_before(p: Partition, offset: int, *, tiered: bool) -> int:
    """Delete the records of `p` (led by this node) below `offset` (-1: the high watermark);
    returns the new log start offset (Kafka's low watermark). An offset above the high watermark is
    OffsetOutOfRangeError; one at or below the log start changes nothing."""
    p.check_leader()
    if tiered:
        raise InvalidRequestError(f"{p.key}: DeleteRecords on a topic with remote.storage.enable is not supported")
    hw = p.high_watermark
    target = hw if offset == HIGH_WATERMARK else offset
    if not 0 <= target <= hw:
        raise OffsetOutOfRangeError(f"{p.key}: cannot delete records below {offset}: the high watermark is {hw}")
    if target > p.log_start_offset:
        await asyncio.to_thread(p.log.maybe_increment_log_start_offset, target)
    return p.log_start_offset


@dataclass(frozen=True)
class LogDirDescription:
    path: str
    online: bool
    #: (topic, partition, size in bytes) of every partition held in the directory.
    partitions: list[tuple[str, int, int]]
    total_bytes: int
    usable_bytes: int


def describe_log_dir(health: LogDirHealth, partitions: Iterable[Partition]) -> LogDirDescription:
    """The node's one log directory: where, whether it is online, each partition's size on disk, and
    the file system's size and free bytes (-1 when they cannot be read)."""
    sizes = sorted((p.key.topic, p.key.partition, p.log.size_in_bytes) for p in partitions)
    try:
        usage = shutil.disk_usage(Path(health.path))
        total, usable = usage.total, usage.free
    except OSError:
        total = usable = -1
    online = health.status()["state"] == LogDirState.ONLINE.name.lower()
    return LogDirDescription(str(Path(health.path).resolve()), online, sizes, total, usable)
