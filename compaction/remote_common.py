"""The steps a remote compaction round is made of, shared by the one-task round
(`compaction/remote.py`) and the round split over tasks (`compaction/remote_split.py`).

No pyspark here. What a round does with these steps, and in which order, is in remote.py's
docstring; this module holds them so that neither round imports the other's private parts:

  * `PartitionReport`, `PartitionJob`, `job_commit`: a job's report, its round under the lease,
    and its manifest commits (at the manifest's own epoch: a job never fences the leader);
  * `plan_round` / `DirtySection`: abandon staged leftovers, decide whether a round runs and on
    which dirty section; `group_below`: the segments below the map end grouped by `segment.bytes`;
  * `write_group`, `merge_small`, `upload_replacement`: a group compacted into a temp file, adjacent
    small replacements merged, the replacement's objects uploaded;
  * `read_job_state` / `write_job_state`: the note to the next round (the earliest delete horizon);
  * `delete_due_objects`: the objects of DELETE_STARTED segments whose delay is over.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

from lakelog.compaction import vectorized
from lakelog.compaction.compactor import (
    MAX_GROUP_OFFSET_SPAN,
    CleaningParams,
    CleaningTrigger,
    CompactionStats,
    OffsetMap,
    SegmentSpan,
    cleaning_trigger,
    compact_batches,
    group_segments,
)
from lakelog.compaction.txn_markers import TransactionCleaning
from lakelog.index.transaction_index import AbortedTxn, encode_entries
from lakelog.infra.config import LogConfig
from lakelog.infra.errors import invariant
from lakelog.logstore.record_batch import NO_TIMESTAMP, crc32c
from lakelog.tiering import epochs as epochs_format, manifest_transitions
from lakelog.tiering.errors import ObjectNotFoundError
from lakelog.tiering.layout import EPOCHS_SUFFIX, new_segment_id, segment_key, segment_keys
from lakelog.logstore.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from lakelog.tiering.lease import Lease
from lakelog.tiering.manifest_model import PartitionManifest, RemoteSegment, SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.remote_scan import iter_segment_batches, txn_index_entries
from lakelog.tiering.segment_scan import scan_segment
from lakelog.tiering.store import FileSlice, ObjectStore

COMPACTION_ORIGIN = "job:compaction"
KEEP_DELETE_FINISHED = 100
#: Cleaned batches are gathered up to this many bytes per write to the replacement's temp file.
WRITE_BUFFER_BYTES = 4 * 1024 * 1024
@dataclass
class PartitionReport:
    """What a job did to one partition (returned from a Spark task, so plain data)."""

    topic: str
    partition: int
    action: str = "none"  # none | compacted | expired | skipped
    reason: str = ""
    segments_before: int = 0
    segments_replaced: int = 0
    segments_written: int = 0
    segments_expired: int = 0
    groups_abandoned: int = 0
    records_read: int = 0
    records_kept: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    log_start_offset: int = 0
    cleaner_checkpoint: int | None = None
    objects_deleted: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)


def current_time_ms() -> int:
    return int(time.time() * 1000)


def job_commit(meta: ManifestStore, change: Callable[[PartitionManifest], PartitionManifest | None]
                ) -> PartitionManifest:
    """Jobs are not leaders: they commit at the manifest's own epoch (never raising it, which would
    fence the partition's leader) and skip the epoch check; the CAS still orders them."""
    return meta.commit(-1, lambda m: change(m), force=True)


@dataclass
class PartitionJob:
    """One round of a job over one partition, under its lease: what `_run_under_lease` hands a body."""

    store: ObjectStore
    topic: str
    partition: int
    now: int
    lease: Lease
    meta: ManifestStore
    manifest: PartitionManifest  # as loaded when the round started
    report: PartitionReport

    def live_segments(self) -> list[RemoteSegment]:
        """The COPY_FINISHED segments at or above the log start offset (recorded in the report)."""
        m = self.manifest
        segments = [s for s in m.copy_finished if s.end_offset >= m.log_start_offset]
        self.report.segments_before = len(segments)
        self.report.log_start_offset = m.log_start_offset
        return segments


def delete_due_objects(store: ObjectStore, meta: ManifestStore, topic: str, partition: int, now_ms: int) -> int:
    """Delete the objects of DELETE_STARTED segments whose delay is over; mark them finished."""
    m = meta.load()
    due = [s for s in m.in_state(SegmentState.DELETE_STARTED) if s.delete_after_ms <= now_ms]
    if not due:
        return 0
    keys = [k for s in due
            for k in segment_keys(topic, partition, s.base_offset, s.segment_id, txn_index=s.txn_index_bytes > 0)]
    store.delete_many(keys)
    ids = [s.segment_id for s in due]
    job_commit(meta, lambda cur: manifest_transitions.finish_delete(cur, ids, epoch=cur.leader_epoch, now_ms=now_ms,
                                                                     keep_finished=KEEP_DELETE_FINISHED))
    return len(ids)


def _first_young_offset(store, topic, partition, segments, first_dirty: int, cutoff_ms: int) -> tuple[int | None, int]:
    """(base offset of the first dirty batch younger than the cutoff, earliest dirty batch timestamp)."""
    earliest = NO_TIMESTAMP
    for seg in segments:
        if seg.end_offset < first_dirty:
            continue
        if seg.max_timestamp != NO_TIMESTAMP and seg.max_timestamp <= cutoff_ms and earliest != NO_TIMESTAMP:
            continue  # the whole segment is old enough, and the earliest timestamp is already known
        for _, batch in iter_segment_batches(store, topic, partition, seg, from_offset=first_dirty):
            if earliest == NO_TIMESTAMP:
                earliest = batch.max_timestamp
            if batch.max_timestamp > cutoff_ms:
                return batch.base_offset, earliest
            if seg.max_timestamp != NO_TIMESTAMP and seg.max_timestamp <= cutoff_ms:
                break  # only needed the first batch's timestamp
    return None, earliest


@dataclass
class StagedReplacement:
    """A compacted group written to a temp file, waiting for its upload."""

    group: list[RemoteSegment]
    entry: RemoteSegment
    fd: int
    index: bytes
    time_index: bytes
    epochs: bytes
    txn_index: bytes = b""  # the group's aborted transactions, carried over (Kafka's .txnindex bytes)


def with_txn_index(st: StagedReplacement, txn_index: bytes) -> StagedReplacement:
    """`st` carrying `txn_index` as its `.txnindex` object (recorded in its manifest entry)."""
    entry = dataclasses.replace(st.entry, txn_index_bytes=len(txn_index),
                                txn_index_crc32c=crc32c(txn_index) if txn_index else 0)
    return dataclasses.replace(st, entry=entry, txn_index=txn_index)


def group_txn_index(store: ObjectStore, topic: str, partition: int, group: list[RemoteSegment]) -> bytes:
    """The `.txnindex` entries of `group`'s segments, in order: a replacement keeps them (the
    aborted data it still holds must stay marked; entries of dropped data do no harm)."""
    return encode_entries([e for seg in group for e in txn_index_entries(store, topic, partition, seg)])


def write_group(store: ObjectStore, topic: str, partition: int, group: list[RemoteSegment], offset_map: OffsetMap,
                 map_end: int, params: CleaningParams, config: LogConfig, stats: CompactionStats, now_ms: int,
                 workdir: str, arrow_map=None, segment_id: str | None = None,
                 aborted: list[AbortedTxn] | None = None, txns: TransactionCleaning | None = None) -> StagedReplacement:
    """Compact `group` into a temp file in `workdir`; the caller closes the returned fd. With
    `arrow_map` (compaction/vectorized.py) the records are decided in bulk over decoded columns;
    `aborted` (the reference only) names aborted transactions whose batches are dropped. With
    `txns` (a round walking every group from the log start, compaction/txn_markers.py) markers
    may go and the replacement's `.txnindex` holds the entries kept; without it markers are
    copied and the group's entries carried over."""
    invariant(arrow_map is None or not aborted, "the vectorized rewrite does not drop aborted transactions")
    fd, path = tempfile.mkstemp(prefix="compacted-", suffix=".log", dir=workdir)
    size = 0
    try:
        batches = (b for seg in group for _, b in iter_segment_batches(store, topic, partition, seg))
        outcomes = compact_batches(batches, offset_map, map_end, params, stats=stats, aborted=aborted or (),
                                   txns=txns) \
            if arrow_map is None \
            else vectorized.compact_batches(batches, arrow_map, map_end, params, stats=stats, txns=txns)
        pending: list[bytes] = []
        pending_bytes = 0
        for outcome in outcomes:
            if outcome.data is not None:
                pending.append(outcome.data)
                pending_bytes += len(outcome.data)
                if pending_bytes >= WRITE_BUFFER_BYTES:
                    size += os.pwrite(fd, b"".join(pending), size)
                    pending, pending_bytes = [], 0
        if pending:
            size += os.pwrite(fd, b"".join(pending), size)
        kept = group_txn_index(store, topic, partition, group) if txns is None else \
            encode_entries(txns.entries_between(group[0].base_offset, group[-1].end_offset + 1))
        return with_txn_index(stage_file(group, fd, path, size, config, now_ms, segment_id), kept)
    except BaseException:
        os.close(fd)
        raise


def stage_file(group: list[RemoteSegment], fd: int, path: str, size: int, config: LogConfig, now_ms: int,
                segment_id: str | None = None) -> StagedReplacement:
    """The manifest entry and indexes of a replacement written to `fd` (covering `group`'s offsets),
    under `segment_id` (a new one when None)."""
    base, end = group[0].base_offset, group[-1].end_offset
    scan = scan_segment(fd, size, base_offset=base, end_offset=end,
                        index_interval_bytes=config.index_interval_bytes, path=path)
    merged: list[tuple[int, int]] = []
    for seg in group:
        for epoch, start in seg.leader_epochs:
            if not merged or epoch > merged[-1][0]:
                merged.append((epoch, start))
    epochs_bytes = epochs_format.encode(merged)
    entry = RemoteSegment(
        segment_id=segment_id or new_segment_id(), base_offset=base, end_offset=end,
        max_timestamp=scan.max_timestamp if scan.batch_count else NO_TIMESTAMP, size_in_bytes=size,
        leader_epochs=tuple(merged), state=SegmentState.COPY_STARTED, state_epoch=-1, origin=COMPACTION_ORIGIN,
        index_bytes=len(scan.index), index_crc32c=crc32c(scan.index),
        time_index_bytes=len(scan.time_index), time_index_crc32c=crc32c(scan.time_index),
        epochs_bytes=len(epochs_bytes), epochs_crc32c=crc32c(epochs_bytes), created_ms=now_ms, updated_ms=now_ms,
        record_count=scan.record_count, later_aborts=group[-1].later_aborts)
    return StagedReplacement(group, entry, fd, scan.index, scan.time_index, epochs_bytes)


def merge_small(staged: list[StagedReplacement], config: LogConfig, now_ms: int, workdir: str) -> list[StagedReplacement]:
    """Adjacent replacements whose cleaned bytes fit one segment become one (Kafka's cleaner
    groups by the input's sizes, so a round that drops most records would otherwise leave as many
    nearly empty segments as it read): consecutive outputs are concatenated while the total stays
    within `segment.bytes`, the indexes within `segment.index.bytes` and the offsets within an
    int32 of the first base offset. A merged replacement keeps the first one's segment id. Closes
    the fds of merged inputs."""
    out: list[StagedReplacement] = []
    for st in staged:
        prev = out[-1] if out else None
        if prev is not None and \
                prev.entry.size_in_bytes + st.entry.size_in_bytes <= config.segment_bytes and \
                len(prev.index) + len(st.index) <= config.segment_index_bytes and \
                len(prev.time_index) + len(st.time_index) <= config.segment_index_bytes and \
                st.group[-1].end_offset - prev.group[0].base_offset <= MAX_GROUP_OFFSET_SPAN:
            fd, path = tempfile.mkstemp(prefix="merged-", suffix=".log", dir=workdir)
            try:
                size = 0
                for part in (prev, st):
                    pos = 0
                    while pos < part.entry.size_in_bytes:
                        chunk = os.pread(part.fd, min(WRITE_BUFFER_BYTES, part.entry.size_in_bytes - pos), pos)
                        if not chunk:
                            raise OSError(f"{path}: a staged replacement is shorter than written")
                        size += os.pwrite(fd, chunk, size)
                        pos += len(chunk)
                merged = with_txn_index(stage_file(prev.group + st.group, fd, path, size, config, now_ms,
                                                   segment_id=prev.entry.segment_id), prev.txn_index + st.txn_index)
            except BaseException:
                os.close(fd)
                raise
            for part in (prev, st):
                with contextlib.suppress(OSError):
                    os.close(part.fd)
            out[-1] = merged
        else:
            out.append(st)
    return out


def upload_replacement(store: ObjectStore, topic: str, partition: int, st: StagedReplacement) -> None:
    e = st.entry
    key = lambda suffix: segment_key(topic, partition, e.base_offset, e.segment_id, suffix)  # noqa: E731
    store.put(key(LOG_SUFFIX), FileSlice(st.fd, 0, e.size_in_bytes))
    store.put(key(INDEX_SUFFIX), st.index)
    store.put(key(TIME_INDEX_SUFFIX), st.time_index)
    store.put(key(EPOCHS_SUFFIX), st.epochs)
    if st.txn_index:
        store.put(key(TXN_INDEX_SUFFIX), st.txn_index)


@dataclass
class DirtySection:
    """What a compaction round works on, once it decided to run (steps 2-3 of the docstring)."""

    segments: list[RemoteSegment]  # the COPY_FINISHED segments at or above the log start offset
    first_dirty: int
    uncleanable: int  # the first uncleanable offset: the dirty section is [first_dirty, uncleanable)
    trigger: CleaningTrigger | None  # None: forced
    params: CleaningParams


def plan_round(job: PartitionJob, config: LogConfig, *, force: bool) -> DirtySection | None:
    """Abandon this job's staged leftovers and decide whether a round runs: its dirty section, or
    None with the reason written in the report. Used by the one-task round and by the split one."""
    store, topic, partition, now, report, meta = job.store, job.topic, job.partition, job.now, job.report, job.meta
    m = job.manifest
    if m.deleted:
        report.reason = "the topic was deleted"
        return None
    if any(s.is_staged and s.origin == COMPACTION_ORIGIN for s in m.segments):
        m = job_commit(meta, lambda cur: manifest_transitions.abandon_copies(cur, epoch=cur.leader_epoch, now_ms=now,
                                                                              origin=COMPACTION_ORIGIN))
    job.manifest = m
    segments = job.live_segments()
    report.cleaner_checkpoint = m.cleaner_checkpoint
    if not segments:
        report.reason = "no remote segments"
        return None
    remote_end = segments[-1].end_offset + 1
    first_dirty = min(remote_end, max(m.log_start_offset, m.cleaner_checkpoint or 0))
    horizon = read_job_state(store, topic, partition).get("earliest_delete_horizon_ms")
    if first_dirty >= remote_end and not force and (horizon is None or now < horizon):
        report.reason = "nothing dirty"
        return None
    params = CleaningParams.from_config(config, now)
    cutoff = now - config.min_compaction_lag_ms
    young, earliest_dirty = _first_young_offset(store, topic, partition, segments, first_dirty, cutoff) \
        if config.min_compaction_lag_ms > 0 or config.max_compaction_lag_ms < (1 << 62) else (None, NO_TIMESTAMP)
    uncleanable = min(remote_end, young) if young is not None else remote_end
    clean_bytes = sum(s.size_in_bytes for s in segments if s.end_offset < first_dirty)
    dirty_bytes = sum(s.size_in_bytes for s in segments if s.end_offset >= first_dirty and s.base_offset < uncleanable)
    trigger = cleaning_trigger(clean_bytes=clean_bytes, dirty_bytes=dirty_bytes,
                               min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
                               earliest_dirty_timestamp_ms=earliest_dirty,
                               max_compaction_lag_ms=config.max_compaction_lag_ms,
                               next_delete_horizon_ms=horizon, now_ms=now)
    if uncleanable < first_dirty or (trigger is None and not force):
        report.reason = (f"dirty ratio {dirty_bytes / max(1, clean_bytes + dirty_bytes):.2f} below "
                         f"min.cleanable.dirty.ratio {config.min_cleanable_dirty_ratio}"
                         if uncleanable > first_dirty else "every dirty record is younger than min.compaction.lag.ms")
        return None
    return DirtySection(segments, first_dirty, uncleanable, trigger, params)


def group_below(segments: list[RemoteSegment], map_end: int, config: LogConfig) -> list[list[RemoteSegment]]:
    """The segments below the map end, grouped by `segment.bytes` (Kafka's groupSegmentsBySize)."""
    to_clean = [s for s in segments if s.base_offset < map_end]
    spans = [SegmentSpan(s.base_offset, s.end_offset + 1, s.size_in_bytes, s.index_bytes, s.time_index_bytes)
             for s in to_clean]
    by_base = {s.base_offset: s for s in to_clean}
    return [[by_base[x.base_offset] for x in g]
            for g in group_segments(spans, max_segment_bytes=config.segment_bytes,
                                    max_index_bytes=config.segment_index_bytes)]


def _state_key(topic: str, partition: int) -> str:
    return f"_jobs/{topic}-{partition}.compaction.json"


def read_job_state(store: ObjectStore, topic: str, partition: int) -> dict:
    """The compaction job's note to its next run: when the earliest kept tombstone may go
    (a round is due then even with nothing dirty). Missing or unreadable: no note."""
    try:
        data, _ = store.get(_state_key(topic, partition))
        doc = json.loads(data)
        return doc if isinstance(doc, dict) and doc.get("version") == 1 else {}
    except (ObjectNotFoundError, ValueError):
        return {}


def write_job_state(store: ObjectStore, topic: str, partition: int, state: dict) -> None:
    store.put(_state_key(topic, partition), json.dumps({"version": 1, **state}, sort_keys=True).encode())
