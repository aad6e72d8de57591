"""Retention by time and size: which leading segments `retention.ms` / `retention.bytes` delete.

The decision is pure, over segment descriptors (`SegmentInfo`: base offset, next offset, size,
retention timestamp), so the local cleaner and the Spark retention job over the remote tier share
it. `apply_retention` is the local plumbing: it plans over a `PartitionLog`'s segments and calls
`PartitionLog.delete_oldest_segments`, which advances the log start offset.

Rules (Kafka's `deleteRetentionMsBreachedSegments` / `deleteRetentionSizeBreachedSegments`):
  * time: a segment has expired when `now - retention timestamp > retention.ms`; the retention
    timestamp is its newest record's timestamp (its file's mtime when it holds none).
    `retention.ms = -1` keeps forever.
  * size: while the partition (the active segment included) is larger than `retention.bytes`,
    delete the oldest segment if the partition is still at least `retention.bytes` without it.
    `retention.bytes = -1` is no limit.
  * Only a leading run of segments is deleted: the first segment a rule keeps stops that rule.
    The result is the longer of the two runs (applying them one after the other gives the same).

Invariants (checked with `invariant()`):
  * the active segment (the last descriptor) is never deleted;
  * a segment holding an offset at or above the high watermark (next offset > HW) is never
    deleted: consumers may not have read it and a follower may still need it;
  * the log start offset never moves backwards: after deleting k segments it becomes the base
    offset of segment k, which is above every deleted offset.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Sequence

from lakelog.infra.errors import invariant


class RetentionReason(enum.Enum):
    """Why a segment is deleted."""

    TIME = "retention.ms"
    SIZE = "retention.bytes"


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What retention needs to know about one segment."""

    base_offset: int
    next_offset: int  # one past its last offset (the base offset when empty)
    size_in_bytes: int
    retention_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """The leading segments to delete, and the log start offset that follows."""

    base_offsets: tuple[int, ...]
    reasons: tuple[RetentionReason, ...]
    bytes_deleted: int
    new_log_start_offset: int | None  # None when nothing is deleted

    @property
    def is_empty(self) -> bool:
        return not self.base_offsets


@dataclass(frozen=True, slots=True)
class RetentionResult:
    """What `apply_retention` deleted."""

    deleted_base_offsets: tuple[int, ...]
    bytes_deleted: int
    log_start_offset: int


def plan_retention(segments: Sequence[SegmentInfo], *, now_ms: int, retention_ms: int,
                   retention_bytes: int, high_watermark: int | None = None) -> RetentionPlan:
    """The leading segments that `retention.ms` / `retention.bytes` delete.

    `segments` are in offset order and the last one is the active segment. With a
    `high_watermark`, no segment holding an offset at or above it is deleted.
    """
    for a, b in zip(segments, segments[1:]):
        invariant(a.base_offset < b.base_offset, f"segments out of order: {a.base_offset} then {b.base_offset}")
    # The active segment and everything from the first segment reaching the HW are off limits.
    limit = max(0, len(segments) - 1)
    if high_watermark is not None:
        for i in range(limit):
            if segments[i].next_offset > high_watermark:
                limit = i
                break

    by_time = 0
    if retention_ms >= 0:
        while by_time < limit and now_ms - segments[by_time].retention_timestamp_ms > retention_ms:
            by_time += 1

    by_size = 0
    if retention_bytes >= 0:
        excess = sum(s.size_in_bytes for s in segments) - retention_bytes
        while by_size < limit and excess - segments[by_size].size_in_bytes >= 0:
            excess -= segments[by_size].size_in_bytes
            by_size += 1

    count = max(by_time, by_size)
    invariant(count <= limit, "retention would delete the active segment or one at/above the HW")
    if count == 0:
        return RetentionPlan((), (), 0, None)
    reasons = tuple(RetentionReason.TIME if i < by_time else RetentionReason.SIZE for i in range(count))
    return RetentionPlan(tuple(s.base_offset for s in segments[:count]), reasons,
                         sum(s.size_in_bytes for s in segments[:count]), segments[count].base_offset)


def segment_infos(log) -> list[SegmentInfo]:
    """Descriptors of a `PartitionLog`'s segments, the active one last."""
    return [SegmentInfo(s.base_offset, s.next_offset, s.size, s.retention_timestamp()) for s in log.segments]


def apply_retention(log, now_ms: int, high_watermark: int | None = None, *,
                    retention_ms: int | None = None, retention_bytes: int | None = None) -> RetentionResult:
    """Delete the segments `plan_retention` picks from a `PartitionLog`; advance its log start offset.

    Does nothing unless the log's `cleanup.policy` includes `delete`, or explicit `retention_ms` /
    `retention_bytes` are given: those override the log's config, and are how tiered topics apply
    their local limits — to compacted tiered topics too, since local retention of a tiered log
    only drops what the remote tier holds (which the compaction job keeps compacted).

    Concurrency: safe alongside appends and reads (the log serialises the deletion under its
    lock). Segments are matched by base offset, so a segment rolled or replaced between the plan
    and the deletion is kept, never deleted by mistake.
    """
    cfg = log.config
    if not cfg.delete and retention_ms is None and retention_bytes is None:
        return RetentionResult((), 0, log.log_start_offset)
    plan = plan_retention(segment_infos(log), now_ms=now_ms,
                          retention_ms=cfg.retention_ms if retention_ms is None else retention_ms,
                          retention_bytes=cfg.retention_bytes if retention_bytes is None else retention_bytes,
                          high_watermark=high_watermark)
    if plan.is_empty:
        return RetentionResult((), 0, log.log_start_offset)
    planned = set(plan.base_offsets)
    sizes: dict[int, int] = {}

    def doomed(segment, _next_segment) -> bool:
        if segment.base_offset in planned:
            sizes[segment.base_offset] = segment.size
            return True
        return False

    deleted = log.delete_oldest_segments(doomed, upper_bound_offset=high_watermark)
    return RetentionResult(tuple(deleted), sum(sizes[b] for b in deleted), log.log_start_offset)
