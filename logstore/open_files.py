"""The process's open-file limit against the files the partition logs hold open.

Every segment of a partition log keeps its `.log`, `.index` and `.timeindex` open for as long as
the log is open, sealed segments included, and opens its `.txnindex` while it writes an aborted
transaction: `FILES_PER_SEGMENT` (4) counted per segment, so a node of 3,000 partitions of one
segment each needs about 12,000 descriptors for its logs alone. Client and peer connections take
one each on top (`max.connections` per door, HTTP and Kafka).

At start the node lifts its soft `RLIMIT_NOFILE` to the hard limit (`lift_soft_limit`), counts the
segments it will open (`segments_on_disk`), and refuses to start when even the hard limit is below
what those segments and `RESERVED_FILES` need (`check_hard_limit`): better a clear refusal at start
than "Too many open files" from the thousandth log open. Creating partitions is checked against
the soft limit as it goes (the replica manager's `check_file_budget`).
"""

from __future__ import annotations

import os
import re
import resource
from dataclasses import dataclass
from pathlib import Path

from lakelog.infra.config import ConfigError

#: Open files per segment: .log, .index, .timeindex, and .txnindex while it is written.
FILES_PER_SEGMENT = 4
#: Descriptors kept for everything but the logs: the metadata log and its snapshots, peer
#: connections, listening sockets, the interpreter's own files, a few clients.
RESERVED_FILES = 1024
_SEGMENT_LOG = re.compile(r"^\d{20}\.log$")


@dataclass(frozen=True, slots=True)
class OpenFileLimit:
    """The soft limit before and after `lift_soft_limit`, and the hard limit (None: unlimited)."""

    soft_before: int | None
    soft: int | None
    hard: int | None


def _finite(v: int) -> int | None:
    return None if v == resource.RLIM_INFINITY else v


def lift_soft_limit() -> OpenFileLimit:
    """Raise the soft RLIMIT_NOFILE to the hard limit (a refusal by the OS leaves it as it was)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return OpenFileLimit(_finite(before), _finite(soft), _finite(hard))


def segments_on_disk(data_dir: str | os.PathLike) -> tuple[int, int]:
    """(partition directories, segments) under `data_dir`: what the node opens when it starts."""
    partitions = segments = 0
    try:
        entries = list(os.scandir(data_dir))
    except FileNotFoundError:
        return 0, 0
    for entry in entries:
        if not entry.is_dir():
            continue
        try:
            count = sum(1 for f in os.scandir(entry.path) if _SEGMENT_LOG.match(f.name))
        except OSError:
            continue
        if count:
            partitions += 1
            segments += count
    return partitions, segments


def files_needed(segments: int) -> int:
    """Descriptors `segments` open segments need, plus `RESERVED_FILES`."""
    return segments * FILES_PER_SEGMENT + RESERVED_FILES


def check_hard_limit(limit: OpenFileLimit, data_dir: Path, segments: int, partitions: int) -> None:
    """Refuse (ConfigError) when the hard limit cannot hold the segments on disk."""
    needed = files_needed(segments)
    if limit.hard is not None and limit.hard < needed:
        raise ConfigError(
            f"the open-file limit (RLIMIT_NOFILE, hard {limit.hard}) is below the {needed} files that the "
            f"{segments} segments of {partitions} partitions in {data_dir} need ({FILES_PER_SEGMENT} per segment "
            f"+ {RESERVED_FILES}): raise it (ulimit -Hn, LimitNOFILE= in a systemd unit, nofile in "
            f"/etc/security/limits.conf) to at least {needed} plus 2 x max.connections")
