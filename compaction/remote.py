"""Key compaction and retention of one partition's remote tier (the work of one Spark task).

No pyspark here: `spark_log/jobs.py` runs retention in Spark tasks, one per partition; the
compaction job runs the same round split over several tasks (`compaction/remote_split.py`, which
reuses this module's steps), and `compact_partition` is the one-task reference it is tested
against; tests call these functions directly. The record and batch rules are compactor.py's, unchanged (the same functions
the local cleaner uses); this module supplies the remote side:

Compaction round of a partition (`compact_partition`):
  1. take the partition's job lease (tiering/lease.py) — or report "skipped: lease held";
  2. abandon this job's staged leftovers of a crashed earlier run;
  3. sections over the COPY_FINISHED segments: clean = [log start, cleaner checkpoint), dirty =
     [checkpoint, first uncleanable), where first uncleanable = the first batch younger than
     `min.compaction.lag.ms`, else the remote end + 1 (every remote segment is sealed and below the
     HW by construction); run only when the dirty ratio reaches `min.cleanable.dirty.ratio`, the
     oldest dirty batch passed `max.compaction.lag.ms`, or `force`;
  4. offset map (key -> latest offset) over the dirty section, bounded by `max_map_entries`;
  5. the segments below the map end, grouped by `segment.bytes` (Kafka's groupSegmentsBySize),
     each group rewritten with `compact_batches` into one replacement covering exactly the offsets
     of the group (original offsets, batch metadata and CRCs of untouched batches preserved; an
     emptied group becomes an empty segment so the tier stays contiguous); indexes built as a
     node builds them (`scan_segment`, the topic's `index.interval.bytes`);
  6. stage the replacements in the manifest (CAS), upload their objects, then one CAS swaps every
     still-valid group (old -> DELETE_STARTED, objects deleted after
     `remote.segment.delete.delay.ms`, so readers mid-segment finish) and stores the new cleaner
     checkpoint; a group the leader's retention moved under us is abandoned, not forced;
  7. delete the objects of DELETE_STARTED segments whose delay is over.

Retention of a partition (`expire_partition`): `retention.ms` / `retention.bytes` over the remote
segments by whole leading segments (retention.py's `plan_retention`), moving the remote log start
offset that the nodes serve from; objects deleted after the delay.

Idempotence: running either twice in a row changes nothing the second time (the compacted
section is clean; the expired segments are gone). Every manifest change is a CAS that re-checks
its preconditions, so nodes may keep tiering (appending at the end, expiring at the front) while
a job runs.
"""

from __future__ import annotations

import contextlib
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
    build_offset_map,
    cleaning_trigger,
    compact_batches,
    group_segments,
    next_first_dirty_offset,
)
from lakelog.logstore.retention import SegmentInfo, plan_retention
from lakelog.infra.config import LogConfig
from lakelog.logstore.record_batch import crc32c
from lakelog.tiering.lease import Lease, LeaseHeldError, acquire
from lakelog.tiering.remote_scan import iter_segment_batches
from lakelog.tiering import epochs as epochs_format
from lakelog.tiering import manifest as mf
from lakelog.tiering.errors import ObjectNotFoundError
from lakelog.tiering.layout import EPOCHS_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, new_segment_id, segment_key
from lakelog.tiering.manifest import NO_TIMESTAMP, PartitionManifest, RemoteSegment, Replacement, SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.store import FileSlice, ObjectStore
from lakelog.tiering.segment_scan import scan_segment

COMPACTION_ORIGIN = "job:compaction"
DEFAULT_DELETE_DELAY_MS = 60_000
DEFAULT_MAX_MAP_ENTRIES = 4_000_000
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


def _now_ms() -> int:
    return int(time.time() * 1000)


def _job_commit(meta: ManifestStore, change: Callable[[PartitionManifest], PartitionManifest | None]
                ) -> PartitionManifest:
    """Jobs are not leaders: they commit at the manifest's own epoch (never raising it, which would
    fence the partition's leader) and skip the epoch check; the CAS still orders them."""
    return meta.commit(-1, lambda m: change(m), force=True)


@dataclass
class _PartitionJob:
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


def _run_under_lease(store: ObjectStore, topic: str, partition: int, job: str, body: Callable[[_PartitionJob], None],
                     *, owner: str, now_ms: int | None, lease_ttl_ms: int) -> PartitionReport:
    """Take the partition's `job` lease (or report "skipped"), load the manifest, run `body`, release.

    The lease is released and the round timed whatever `body` does; a body returns early by
    returning, having written its reason in the report.
    """
    started = time.monotonic()
    report = PartitionReport(topic, partition)
    try:
        lease = acquire(store, topic, partition, owner=owner, job=job, ttl_ms=lease_ttl_ms)
    except LeaseHeldError as e:
        report.action, report.reason = "skipped", str(e)
        return report
    try:
        meta = ManifestStore(store, topic, partition)
        body(_PartitionJob(store, topic, partition, _now_ms() if now_ms is None else now_ms, lease, meta,
                           meta.load(), report))
        return report
    finally:
        lease.release()
        report.seconds = time.monotonic() - started


def delete_due_objects(store: ObjectStore, meta: ManifestStore, topic: str, partition: int, now_ms: int) -> int:
    """Delete the objects of DELETE_STARTED segments whose delay is over; mark them finished."""
    m = meta.load()
    due = [s for s in m.in_state(SegmentState.DELETE_STARTED) if s.delete_after_ms <= now_ms]
    if not due:
        return 0
    keys = [segment_key(topic, partition, s.base_offset, s.segment_id, suffix)
            for s in due for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, EPOCHS_SUFFIX)]
    store.delete_many(keys)
    ids = [s.segment_id for s in due]
    _job_commit(meta, lambda cur: mf.finish_delete(cur, ids, epoch=cur.leader_epoch, now_ms=now_ms,
                                                   keep_finished=KEEP_DELETE_FINISHED))
    return len(ids)


# ---------------------------------------------------------------------------------------------
# compaction


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
class _Staged:
    """A compacted group written to a temp file, waiting for its upload."""

    group: list[RemoteSegment]
    entry: RemoteSegment
    fd: int
    index: bytes
    time_index: bytes
    epochs: bytes


def _write_group(store: ObjectStore, topic: str, partition: int, group: list[RemoteSegment], offset_map: OffsetMap,
                 map_end: int, params: CleaningParams, config: LogConfig, stats: CompactionStats, now_ms: int,
                 workdir: str, arrow_map=None, segment_id: str | None = None) -> _Staged:
    """Compact `group` into a temp file in `workdir`; the caller closes the returned fd. With
    `arrow_map` (compaction/vectorized.py) the records are decided in bulk over decoded columns."""
    fd, path = tempfile.mkstemp(prefix="compacted-", suffix=".log", dir=workdir)
    size = 0
    try:
        batches = (b for seg in group for _, b in iter_segment_batches(store, topic, partition, seg))
        outcomes = compact_batches(batches, offset_map, map_end, params, stats=stats) if arrow_map is None \
            else vectorized.compact_batches(batches, arrow_map, map_end, params, stats=stats)
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
        return _stage_file(group, fd, path, size, config, now_ms, segment_id)
    except BaseException:
        os.close(fd)
        raise


def _stage_file(group: list[RemoteSegment], fd: int, path: str, size: int, config: LogConfig, now_ms: int,
                segment_id: str | None = None) -> _Staged:
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
        record_count=scan.record_count)
    return _Staged(group, entry, fd, scan.index, scan.time_index, epochs_bytes)


def _merge_small(staged: list[_Staged], config: LogConfig, now_ms: int, workdir: str) -> list[_Staged]:
    """Adjacent replacements whose cleaned bytes fit one segment become one (Kafka's cleaner
    groups by the input's sizes, so a round that drops most records would otherwise leave as many
    nearly empty segments as it read): consecutive outputs are concatenated while the total stays
    within `segment.bytes`, the indexes within `segment.index.bytes` and the offsets within an
    int32 of the first base offset. A merged replacement keeps the first one's segment id. Closes
    the fds of merged inputs."""
    out: list[_Staged] = []
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
                merged = _stage_file(prev.group + st.group, fd, path, size, config, now_ms,
                                     segment_id=prev.entry.segment_id)
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


def _upload(store: ObjectStore, topic: str, partition: int, st: _Staged) -> None:
    e = st.entry
    key = lambda suffix: segment_key(topic, partition, e.base_offset, e.segment_id, suffix)  # noqa: E731
    store.put(key(LOG_SUFFIX), FileSlice(st.fd, 0, e.size_in_bytes))
    store.put(key(INDEX_SUFFIX), st.index)
    store.put(key(TIME_INDEX_SUFFIX), st.time_index)
    store.put(key(EPOCHS_SUFFIX), st.epochs)


def compact_partition(store: ObjectStore, topic: str, partition: int, config: LogConfig, *, owner: str,
                      now_ms: int | None = None, force: bool = False,
                      delete_delay_ms: int = DEFAULT_DELETE_DELAY_MS,
                      max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
                      lease_ttl_ms: int = 10 * 60 * 1000) -> PartitionReport:
    """One compaction round over the remote tier of `topic`-`partition` (see the module docstring)."""
    return _run_under_lease(
        store, topic, partition, "compaction", owner=owner, now_ms=now_ms, lease_ttl_ms=lease_ttl_ms,
        body=lambda job: _compact(job, config, force=force, delete_delay_ms=delete_delay_ms,
                                  max_map_entries=max_map_entries))


@dataclass
class DirtySection:
    """What a compaction round works on, once it decided to run (steps 2-3 of the docstring)."""

    segments: list[RemoteSegment]  # the COPY_FINISHED segments at or above the log start offset
    first_dirty: int
    uncleanable: int  # the first uncleanable offset: the dirty section is [first_dirty, uncleanable)
    trigger: CleaningTrigger | None  # None: forced
    params: CleaningParams


def plan_round(job: _PartitionJob, config: LogConfig, *, force: bool) -> DirtySection | None:
    """Abandon this job's staged leftovers and decide whether a round runs: its dirty section, or
    None with the reason written in the report. Used by the one-task round and by the split one."""
    store, topic, partition, now, report, meta = job.store, job.topic, job.partition, job.now, job.report, job.meta
    m = job.manifest
    if m.deleted:
        report.reason = "the topic was deleted"
        return None
    if any(s.is_staged and s.origin == COMPACTION_ORIGIN for s in m.segments):
        m = _job_commit(meta, lambda cur: mf.abandon_copies(cur, epoch=cur.leader_epoch, now_ms=now,
                                                            origin=COMPACTION_ORIGIN))
    job.manifest = m
    segments = job.live_segments()
    report.cleaner_checkpoint = m.cleaner_checkpoint
    if not segments:
        report.reason = "no remote segments"
        return None
    remote_end = segments[-1].end_offset + 1
    first_dirty = min(remote_end, max(m.log_start_offset, m.cleaner_checkpoint or 0))
    horizon = _read_state(store, topic, partition).get("earliest_delete_horizon_ms")
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


def _compact(job: _PartitionJob, config: LogConfig, *, force: bool, delete_delay_ms: int,
             max_map_entries: int) -> None:
    store, topic, partition, now, report, meta = job.store, job.topic, job.partition, job.now, job.report, job.meta
    section = plan_round(job, config, force=force)
    if section is None:
        return
    segments, first_dirty, uncleanable = section.segments, section.first_dirty, section.uncleanable
    trigger, params = section.trigger, section.params

    # An empty dirty section (a round for expired tombstones) maps nothing: map end = first dirty.
    def dirty_batches():
        return (b for s in segments if s.end_offset >= first_dirty and s.base_offset < uncleanable
                for _, b in iter_segment_batches(store, topic, partition, s, from_offset=first_dirty))

    # Over decoded columns when the native decoder is built and every key fits the map; the
    # reference otherwise (it maps a prefix when the keys do not fit).
    native = vectorized.build_offset_map(dirty_batches(), start_offset=first_dirty, end_offset=uncleanable,
                                         max_entries=max_map_entries,
                                         max_uncompressed_bytes=config.max_uncompressed_batch_bytes) \
        if vectorized.available() else None
    if native is not None:
        mapped, arrow_map = native
    else:
        arrow_map = None
        mapped = build_offset_map(dirty_batches(), start_offset=first_dirty, end_offset=uncleanable,
                                  max_entries=max_map_entries,
                                  max_uncompressed_bytes=config.max_uncompressed_batch_bytes)
    map_end = mapped.map_end_offset
    groups = group_below(segments, map_end, config)
    stats = CompactionStats()
    staged: list[_Staged] = []
    with tempfile.TemporaryDirectory(prefix="lakelog-compaction-") as workdir:
        try:
            for g in groups:
                staged.append(_write_group(store, topic, partition, g, mapped.offset_map, map_end, params,
                                           config, stats, now, workdir, arrow_map=arrow_map))
                if len(staged) % 8 == 0:
                    try:
                        job.lease.renew()
                    except LeaseHeldError as e:  # expired while we worked: nothing was committed yet
                        report.action, report.reason = "skipped", f"lease lost: {e}"
                        return
            if stats.batches_rewritten == 0 and stats.batches_dropped == 0:
                # Nothing to drop and no horizon to stamp: the replacements would be the same
                # bytes. Write nothing; only the checkpoint moves.
                checkpoint = next_first_dirty_offset(map_end, stats.first_kept_for_lag_offset)
                after = _job_commit(meta, lambda cur: mf.set_cleaner_checkpoint(cur, checkpoint))
                report.reason = "nothing to drop"
                report.records_read, report.records_kept = stats.records_read, stats.records_kept
                report.bytes_read = stats.bytes_read
                report.cleaner_checkpoint = after.cleaner_checkpoint
                _write_state(store, topic, partition, {"earliest_delete_horizon_ms": stats.earliest_delete_horizon_ms})
                report.objects_deleted = delete_due_objects(store, meta, topic, partition, now)
                return
            staged = _merge_small(staged, config, now, workdir)
            # Staged entries own their objects before the objects exist: no orphan sweep
            # takes them for garbage, and a crash leaves entries the next run abandons.
            _job_commit(meta, lambda cur: mf.stage_replacements(cur, [st.entry for st in staged]))
            for st in staged:
                _upload(store, topic, partition, st)
        finally:
            for st in staged:
                with contextlib.suppress(OSError):
                    os.close(st.fd)
    checkpoint = next_first_dirty_offset(map_end, stats.first_kept_for_lag_offset)
    replacements = [Replacement(tuple(s.segment_id for s in st.group), (st.entry.segment_id,)) for st in staged]
    final = {st.entry.segment_id: st.entry for st in staged}

    def swap(cur: PartitionManifest) -> PartitionManifest | None:
        out = mf.swap_replacements(cur, replacements, epoch=cur.leader_epoch, now_ms=now,
                                   delete_after_ms=now + delete_delay_ms, updates=final) or cur
        swapped = all((x := out.segment(i)) is not None and x.state == SegmentState.COPY_FINISHED for i in final)
        if swapped:  # the checkpoint only holds if every group was cleaned
            out = mf.set_cleaner_checkpoint(out, checkpoint) or out
        return out if out is not cur else None

    after = _job_commit(meta, swap)
    done = {i for i in final if (x := after.segment(i)) is not None and x.state == SegmentState.COPY_FINISHED}
    report.action = "compacted"
    report.reason = trigger.value if trigger else "forced"
    report.segments_replaced = sum(len(st.group) for st in staged if st.entry.segment_id in done)
    report.segments_written = len(done)
    report.groups_abandoned = len(staged) - len(done)
    report.records_read, report.records_kept = stats.records_read, stats.records_kept
    report.bytes_read, report.bytes_written = stats.bytes_read, stats.bytes_written
    report.cleaner_checkpoint = after.cleaner_checkpoint
    report.log_start_offset = after.log_start_offset
    if not report.groups_abandoned:
        _write_state(store, topic, partition, {"earliest_delete_horizon_ms": stats.earliest_delete_horizon_ms})
    report.extra["earliest_delete_horizon_ms"] = stats.earliest_delete_horizon_ms
    report.objects_deleted = delete_due_objects(store, meta, topic, partition, now)


def _state_key(topic: str, partition: int) -> str:
    return f"_jobs/{topic}-{partition}.compaction.json"


def _read_state(store: ObjectStore, topic: str, partition: int) -> dict:
    """The compaction job's note to its next run: when the earliest kept tombstone may go
    (a round is due then even with nothing dirty). Missing or unreadable: no note."""
    try:
        data, _ = store.get(_state_key(topic, partition))
        doc = json.loads(data)
        return doc if isinstance(doc, dict) and doc.get("version") == 1 else {}
    except (ObjectNotFoundError, ValueError):
        return {}


def _write_state(store: ObjectStore, topic: str, partition: int, state: dict) -> None:
    store.put(_state_key(topic, partition), json.dumps({"version": 1, **state}, sort_keys=True).encode())


# ---------------------------------------------------------------------------------------------
# retention


def expire_partition(store: ObjectStore, topic: str, partition: int, config: LogConfig, *, owner: str,
                     now_ms: int | None = None, delete_delay_ms: int = DEFAULT_DELETE_DELAY_MS,
                     lease_ttl_ms: int = 10 * 60 * 1000) -> PartitionReport:
    """`retention.ms` / `retention.bytes` over the remote tier by whole leading segments."""
    return _run_under_lease(
        store, topic, partition, "retention", owner=owner, now_ms=now_ms, lease_ttl_ms=lease_ttl_ms,
        body=lambda job: _expire(job, config, delete_delay_ms=delete_delay_ms))


def _expire(job: _PartitionJob, config: LogConfig, *, delete_delay_ms: int) -> None:
    store, topic, partition, now, report, meta = job.store, job.topic, job.partition, job.now, job.report, job.meta
    segments = job.live_segments()
    if job.manifest.deleted or not segments:
        report.reason = "no remote segments"
        return
    infos = [SegmentInfo(s.base_offset, s.end_offset + 1, s.size_in_bytes,
                         s.max_timestamp if s.max_timestamp > NO_TIMESTAMP else s.created_ms) for s in segments]
    # As locally, where the active segment always stays, the newest remote segment stays: the
    # tier keeps a defined end for the nodes' uploads to continue from.
    plan = plan_retention(infos, now_ms=now, retention_ms=config.retention_ms,
                          retention_bytes=config.retention_bytes)
    if not plan.is_empty:
        bases = set(plan.base_offsets)
        doomed = [s.segment_id for s in segments if s.base_offset in bases]

        def change(cur: PartitionManifest) -> PartitionManifest | None:
            still = [i for i in doomed if (x := cur.segment(i)) is not None and x.state == SegmentState.COPY_FINISHED]
            if not still:
                return None
            last_end = max(cur.segment(i).end_offset for i in still)  # type: ignore[union-attr]
            return mf.start_delete(cur, still, epoch=cur.leader_epoch, now_ms=now,
                                   delete_after_ms=now + delete_delay_ms, new_log_start_offset=last_end + 1)

        after = _job_commit(meta, change)
        report.action = "expired"
        report.segments_expired = len(doomed)
        report.bytes_read = plan.bytes_deleted
        report.reason = ", ".join(sorted({r.value for r in plan.reasons}))
        report.log_start_offset = after.log_start_offset
    else:
        report.reason = "nothing expired"
    report.objects_deleted = delete_due_objects(store, meta, topic, partition, now)
