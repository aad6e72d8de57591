"""Key compaction and retention of one partition's remote tier (the work of one Spark task).

No pyspark here: `spark_log/jobs.py` runs retention in Spark tasks, one per partition; the
compaction job runs the same round split over several tasks (`compaction/remote_split.py`; the
steps both rounds share are in `compaction/remote_common.py`), and `compact_partition` is the
one-task reference it is tested against; tests call these functions directly. The record and
batch rules are compactor.py's, unchanged (the same functions the local cleaner uses); this module
supplies the remote side:

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
import os
import tempfile
import time
from typing import Callable

from lakelog.compaction import vectorized
from lakelog.compaction.compactor import CompactionStats, build_offset_map, next_first_dirty_offset
from lakelog.compaction.remote_common import (
    PartitionJob,
    PartitionReport,
    StagedReplacement,
    current_time_ms,
    delete_due_objects,
    group_below,
    job_commit,
    merge_small,
    plan_round,
    upload_replacement,
    write_group,
    write_job_state,
)
from lakelog.compaction.txn_markers import TransactionCleaning
from lakelog.infra.config import LogConfig
from lakelog.logstore.record_batch import NO_TIMESTAMP
from lakelog.logstore.retention import SegmentInfo, plan_retention
from lakelog.tiering import manifest_transitions
from lakelog.tiering.errors import LeaseHeldError
from lakelog.tiering.lease import acquire
from lakelog.tiering.manifest_model import PartitionManifest, SegmentState
from lakelog.tiering.manifest_transitions import Replacement
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.remote_scan import iter_segment_batches, segments_aborted_transactions
from lakelog.tiering.store import ObjectStore

DEFAULT_DELETE_DELAY_MS = 60_000
DEFAULT_MAX_MAP_ENTRIES = 4_000_000


def _run_under_lease(store: ObjectStore, topic: str, partition: int, job: str, body: Callable[[PartitionJob], None],
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
        body(PartitionJob(store, topic, partition, current_time_ms() if now_ms is None else now_ms, lease, meta,
                           meta.load(), report))
        return report
    finally:
        lease.release()
        report.seconds = time.monotonic() - started


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


def _compact(job: PartitionJob, config: LogConfig, *, force: bool, delete_delay_ms: int,
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

    # Aborted transactions (the segments' .txnindex objects and `later_aborts`, whose markers may
    # not be tiered yet): their batches are dropped and never mapped, so an aborted record cannot
    # supersede a committed one (the reference does this).
    aborted = segments_aborted_transactions(store, topic, partition, segments)
    # Over decoded columns when the native decoder is built and every key fits the map; the
    # reference otherwise (it maps a prefix when the keys do not fit).
    native = vectorized.build_offset_map(dirty_batches(), start_offset=first_dirty, end_offset=uncleanable,
                                         max_entries=max_map_entries,
                                         max_uncompressed_bytes=config.max_uncompressed_batch_bytes) \
        if vectorized.available() and not aborted else None
    if native is not None:
        mapped, arrow_map = native
    else:
        arrow_map = None
        mapped = build_offset_map(dirty_batches(), start_offset=first_dirty, end_offset=uncleanable,
                                  max_entries=max_map_entries,
                                  max_uncompressed_bytes=config.max_uncompressed_batch_bytes, aborted=aborted)
    map_end = mapped.map_end_offset
    groups = group_below(segments, map_end, config)
    stats = CompactionStats()
    staged: list[StagedReplacement] = []
    txns = TransactionCleaning(aborted)  # one walk from the remote log start through every group
    with tempfile.TemporaryDirectory(prefix="lakelog-compaction-") as workdir:
        try:
            for g in groups:
                staged.append(write_group(store, topic, partition, g, mapped.offset_map, map_end, params,
                                           config, stats, now, workdir, arrow_map=arrow_map, aborted=aborted,
                                           txns=txns))
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
                after = job_commit(meta, lambda cur: manifest_transitions.set_cleaner_checkpoint(cur, checkpoint))
                report.reason = "nothing to drop"
                report.records_read, report.records_kept = stats.records_read, stats.records_kept
                report.bytes_read = stats.bytes_read
                report.cleaner_checkpoint = after.cleaner_checkpoint
                write_job_state(store, topic, partition, {"earliest_delete_horizon_ms": stats.earliest_delete_horizon_ms})
                report.objects_deleted = delete_due_objects(store, meta, topic, partition, now)
                return
            staged = merge_small(staged, config, now, workdir)
            # Staged entries own their objects before the objects exist: no orphan sweep
            # takes them for garbage, and a crash leaves entries the next run abandons.
            job_commit(meta, lambda cur: manifest_transitions.stage_replacements(cur, [st.entry for st in staged]))
            for st in staged:
                upload_replacement(store, topic, partition, st)
        finally:
            for st in staged:
                with contextlib.suppress(OSError):
                    os.close(st.fd)
    checkpoint = next_first_dirty_offset(map_end, stats.first_kept_for_lag_offset)
    replacements = [Replacement(tuple(s.segment_id for s in st.group), (st.entry.segment_id,)) for st in staged]
    final = {st.entry.segment_id: st.entry for st in staged}

    def swap(cur: PartitionManifest) -> PartitionManifest | None:
        out = manifest_transitions.swap_replacements(cur, replacements, epoch=cur.leader_epoch, now_ms=now,
                                                     delete_after_ms=now + delete_delay_ms, updates=final) or cur
        swapped = all((x := out.segment(i)) is not None and x.state == SegmentState.COPY_FINISHED for i in final)
        if swapped:  # the checkpoint only holds if every group was cleaned
            out = manifest_transitions.set_cleaner_checkpoint(out, checkpoint) or out
        return out if out is not cur else None

    after = job_commit(meta, swap)
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
        write_job_state(store, topic, partition, {"earliest_delete_horizon_ms": stats.earliest_delete_horizon_ms})
    report.extra["earliest_delete_horizon_ms"] = stats.earliest_delete_horizon_ms
    report.objects_deleted = delete_due_objects(store, meta, topic, partition, now)

# ---------------------------------------------------------------------------------------------
# retention


def expire_partition(store: ObjectStore, topic: str, partition: int, config: LogConfig, *, owner: str,
                     now_ms: int | None = None, delete_delay_ms: int = DEFAULT_DELETE_DELAY_MS,
                     lease_ttl_ms: int = 10 * 60 * 1000) -> PartitionReport:
    """`retention.ms` / `retention.bytes` over the remote tier by whole leading segments."""
    return _run_under_lease(
        store, topic, partition, "retention", owner=owner, now_ms=now_ms, lease_ttl_ms=lease_ttl_ms,
        body=lambda job: _expire(job, config, delete_delay_ms=delete_delay_ms))


def _expire(job: PartitionJob, config: LogConfig, *, delete_delay_ms: int) -> None:
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
            return manifest_transitions.start_delete(cur, still, epoch=cur.leader_epoch, now_ms=now,
                                                     delete_after_ms=now + delete_delay_ms, new_log_start_offset=last_end + 1)

        after = job_commit(meta, change)
        report.action = "expired"
        report.segments_expired = len(doomed)
        report.bytes_read = plan.bytes_deleted
        report.reason = ", ".join(sorted({r.value for r in plan.reasons}))
        report.log_start_offset = after.log_start_offset
    else:
        report.reason = "nothing expired"
    report.objects_deleted = delete_due_objects(store, meta, topic, partition, now)
