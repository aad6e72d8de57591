"""The tiering manager of one partition: upload sealed segments, delete by remote retention, clean
up after crashes and older leaders, and tell local retention what it may delete.

Copy round (`copy_segments(log, leader_epoch, high_watermark)`), run by the partition leader:

  1. On the first round of a leader epoch: re-read the manifest, commit a claim (which raises the
     manifest's leader epoch, fencing every older writer) that also abandons leftover COPY_STARTED
     entries (a crash, or an older leader cut off mid-upload: -> DELETE_STARTED), and sweep orphans
     (objects no manifest entry owns — late writes of a fenced zombie).
  2. Delete the objects of DELETE_STARTED entries whose delay is over; commit DELETE_FINISHED.
  3. Candidates: sealed segments (never the active one) whose offsets [base, next segment's base - 1]
     end below the high watermark and are not yet covered by COPY_FINISHED entries, in offset order.
     Each continues the remote tier exactly: from remote end + 1. A new leader's segment boundaries
     differ from the old leader's, so a segment that starts below that offset is uploaded from the
     batch starting at it (its indexes regenerated for the slice) — no overlap, no duplicate.
  4. Per segment: read it once, checking every batch's CRC and building its `.index`/`.timeindex`
     (only real entries, as the local segment writes them) and `.epochs`; commit COPY_STARTED (with
     a fresh segment id, and abandoning any other COPY_STARTED of uploads in the same CAS); PUT
     `.log`, `.index`, `.timeindex`, `.epochs` (the three small ones in parallel with the `.log`,
     on the object executor when there is one, which also scans the next segment meanwhile);
     commit COPY_FINISHED — in the same CAS as the next segment's COPY_STARTED, so a round writes
     the manifest once per segment, plus once at its end.

Why nothing is lost, duplicated or orphaned:
  * COPY_FINISHED entries are contiguous and never overlap (manifest.validate refuses otherwise);
  * an entry is committed COPY_STARTED before its first object is written, so every object has
    an owner in the manifest; objects of an abandoned upload are deleted through DELETE_STARTED ->
    DELETE_FINISHED; a zombie's writes after that are orphans that the sweep deletes (it lists
    first, then reads the manifest, so an upload in flight is never taken for an orphan);
  * a fenced commit (FencedLeaderEpochError) deletes the objects the loser just wrote (best effort;
    the sweep covers a crash);
  * a failure at any step leaves COPY_STARTED, which the next round abandons: uploads are resumable
    (a segment is re-uploaded whole under a new id) and idempotent (repeated transitions are no-ops).

Local retention (`eligible_for_local_deletion`, `apply_local_retention`) only deletes segments
whose offsets are covered by COPY_FINISHED entries (or already expired remotely): if the store is
down, local data stays until the upload succeeds. Remote retention (`enforce_retention`) applies
`retention.ms` / `retention.bytes` to the whole log (remote + local-only bytes) by moving leading
segments to DELETE_STARTED and advancing the remote log start offset; their objects go after
`remote.segment.delete.delay.ms`. `delete_all` removes a deleted topic's partition and leaves a
tombstone manifest that fences that incarnation's writers.

Concurrency: one partition's write paths (copy, cleanup, retention, sweep, delete_all) take the
partition's lock, so a node may call them from any thread; they block on the store (call them from
a background thread, never from the event loop). Different partitions run in parallel.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from typing import Callable

from lakelog.logstore.retention import RetentionResult, SegmentInfo, apply_retention, plan_retention
from lakelog.logstore.errors import LogClosedError, SegmentsChangedError
from lakelog.logstore.segment import SegmentReader
from lakelog.logstore.record_batch import NO_TIMESTAMP, crc32c
from lakelog.tiering import epochs as epochs_format
from lakelog.tiering import manifest as mf
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.errors import (
    FencedLeaderEpochError,
    InvalidStateTransitionError,
    LocalSegmentChangedError,
    ManifestInvariantError,
    StoreError,
    TieringError,
    TransientStoreError,
)
from lakelog.tiering.layout import (
    EPOCHS_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    new_segment_id,
    parse_segment_file,
    partition_dir,
    segment_key,
    segment_keys,
)
from lakelog.tiering.manifest import ORIGIN_UPLOAD, PartitionManifest, RemoteSegment, SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.metrics import TieringMetrics
from lakelog.tiering.orphans import orphan_keys
from lakelog.tiering.segment_scan import SegmentScan, scan_segment
from lakelog.tiering.store import FileSlice, ObjectStore

logger = logging.getLogger(__name__)

@dataclass(slots=True)
class _Prepared:
    """A local segment ready to upload: its snapshot reader (closed after the PUTs) and its scan."""

    reader: SegmentReader
    scan: SegmentScan
    epochs: bytes


# ---------------------------------------------------------------------------------------------
# reports


@dataclass(slots=True)
class CopyReport:
    """What one copy round did."""

    uploaded: list[RemoteSegment] = field(default_factory=list)
    bytes_uploaded: int = 0
    abandoned: list[str] = field(default_factory=list)  # COPY_STARTED leftovers moved to DELETE_STARTED
    deleted: list[str] = field(default_factory=list)  # segments whose objects were deleted
    orphans_deleted: list[str] = field(default_factory=list)  # object keys
    restarted_at: int | None = None  # the remote tier restarted here (the offsets before expired locally)
    remote_end_offset: int | None = None
    lag_segments: int = 0  # sealed local segments not yet tiered
    lag_bytes: int = 0


@dataclass(slots=True)
class RemoteRetentionReport:
    """What one remote retention pass did."""

    segments_expired: list[str] = field(default_factory=list)
    bytes_expired: int = 0
    log_start_offset: int = 0
    deleted: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------
# the manager of one partition


class SegmentUploader:
    """Uploads, remote retention and cleanup of one partition (see the module docstring)."""

    def __init__(self, meta: ManifestStore, store: ObjectStore, *, config: TieringConfig | None = None,
                 metrics: TieringMetrics | None = None, clock: Callable[[], float] = time.time,
                 object_executor: Executor | None = None) -> None:
        self.meta = meta
        self.store = store
        #: Where a segment's small objects are PUT while the `.log` streams (None: one after another).
        #: Its tasks never wait on anything, so sharing it between partitions cannot deadlock.
        self.object_executor = object_executor
        self.topic = meta.topic
        self.partition = meta.partition
        self.config = config if config is not None else TieringConfig()
        self.metrics = metrics if metrics is not None else TieringMetrics()
        self._clock = clock
        self._lock = threading.Lock()
        self._claimed_epoch: int | None = None
        self._last_sweep = 0.0

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _keys(self, s: RemoteSegment) -> list[str]:
        return segment_keys(self.topic, self.partition, s.base_offset, s.segment_id)

    # ------------------------------------------------------------------ copy

    def copy_segments(self, log, leader_epoch: int, high_watermark: int, *, now_ms: int | None = None,
                      max_segments: int | None = None) -> CopyReport:
        """One copy round for `log` (a PartitionLog this node leads in `leader_epoch`); see the module
        docstring. Raises FencedLeaderEpochError when a newer leader owns the manifest,
        TransientStoreError when the store is unreachable (retry the round later)."""
        with self._lock:
            now = self._now_ms() if now_ms is None else now_ms
            report = CopyReport()
            try:
                self._copy_locked(log, leader_epoch, high_watermark, now, max_segments, report)
            except FencedLeaderEpochError:
                self.metrics.add("fenced_commits")
                raise
            except TieringError:
                self.metrics.add("upload_failures")
                raise
            finally:
                self._record_lag(log, report)
            return report

    def _copy_locked(self, log, epoch: int, hw: int, now: int, max_segments: int | None,
                     report: CopyReport) -> None:
        if self._claimed_epoch != epoch:
            self.meta.load()
            self._abandon(epoch, now, report, claim=True)
            self._claimed_epoch = epoch
            self._sweep_locked(report)
        elif any(s.origin == ORIGIN_UPLOAD for s in (self.meta.cached or self.meta.load()).in_state(
                SegmentState.COPY_STARTED)):
            self._abandon(epoch, now, report, claim=False)
        if self.config.remote_log_orphan_sweep_interval_ms and \
                (time.monotonic() - self._last_sweep) * 1000 >= self.config.remote_log_orphan_sweep_interval_ms:
            self._sweep_locked(report)
        self._delete_due(epoch, now, report)
        limit = max_segments or self.config.remote_log_copy_max_segments_per_round
        conflicts = 0
        # The segment whose objects are written but whose COPY_FINISHED is not committed yet: it goes
        # in the same CAS as the next segment's COPY_STARTED (one manifest write per segment, not two).
        carry: list[RemoteSegment] = []
        # The next segment's scan, started while this one's objects are PUT: (plan, future).
        ahead: list[tuple[tuple[int, int, int], Future]] = []

        def scan_next(entry: RemoteSegment) -> None:
            """Called once `entry` is committed COPY_STARTED: scan the segment after it meanwhile."""
            if self.object_executor is None or len(report.uploaded) + 2 > limit:
                return
            m = self.meta.cached
            if m is None:
                return
            nxt = self._next_candidate(log, mf.finish_copy(m, entry.segment_id, epoch=epoch, now_ms=now) or m, hw)
            if nxt is None or nxt[3]:
                return
            plan = (nxt[0].base_offset, nxt[1], nxt[2])
            try:
                ahead.append((plan, self.object_executor.submit(self._prepare, log, nxt[0], nxt[1], nxt[2])))
            except RuntimeError:  # the executor is shut down
                pass

        try:
            while len(report.uploaded) + len(carry) < limit:
                m = self.meta.cached or self.meta.load()
                if carry:  # plan as if the carried segment were finished: the next one continues it
                    m = mf.finish_copy(m, carry[0].segment_id, epoch=epoch, now_ms=now) or m
                planned = self._next_candidate(log, m, hw)
                if planned is None:
                    break
                seg, from_offset, end_offset, restart = planned
                if restart:
                    if report.restarted_at is not None:
                        raise ManifestInvariantError(f"the remote tier restarted at {report.restarted_at} and "
                                                     f"still does not continue at {from_offset}")
                    self._finish(carry, epoch, now, report)
                    self.meta.commit(epoch, lambda cur: mf.restart_at(
                        mf.abandon_copies(cur, epoch=epoch, now_ms=now) or cur, from_offset, epoch=epoch,
                        now_ms=now, delete_after_ms=now + self.config.remote_segment_delete_delay_ms))
                    report.restarted_at = from_offset
                    logger.warning("%s-%s: offsets before %d expired locally before they were tiered; the remote "
                                   "tier restarts at %d", self.topic, self.partition, from_offset, from_offset)
                    continue
                prepared = self._take_ahead(ahead, (seg.base_offset, from_offset, end_offset))
                try:
                    self._upload(log, seg, from_offset, end_offset, epoch, now, report, carry, prepared=prepared,
                                 on_started=scan_next)
                except ManifestInvariantError:
                    # Another writer changed the remote end meanwhile: plan again from a fresh manifest.
                    conflicts += 1
                    if conflicts > 3:
                        raise
                    self._finish(carry, epoch, now, report)
                    self.meta.load()
                    continue
            self._finish(carry, epoch, now, report)
        except BaseException:
            if carry:  # e.g. the next segment's scan failed: this one is complete, commit it
                with contextlib.suppress(TieringError):
                    self._finish(carry, epoch, now, report)
            raise
        finally:
            self._take_ahead(ahead, None)
        self._delete_due(epoch, now, report)
        report.remote_end_offset = (self.meta.cached or self.meta.load()).end_offset

    def _next_candidate(self, log, m: PartitionManifest, hw: int):
        """(segment, from offset, end offset, restart?) of the next upload, or None."""
        end = m.end_offset
        segments = log.segments
        for seg, nxt in zip(segments, segments[1:]):
            seg_end = nxt.base_offset - 1
            if nxt.base_offset > hw:
                return None
            if end is not None and seg_end <= end:
                continue
            if end is None:
                from_offset = max(seg.base_offset, m.log_start_offset)
                if from_offset > seg_end:
                    continue  # entirely below the remote log start: expired
            else:
                from_offset = end + 1
                if from_offset < seg.base_offset:
                    # The local log lost (end, seg.base_offset) before it was tiered: restart there.
                    return seg, seg.base_offset, seg_end, True
            return seg, from_offset, seg_end, False
        return None

    def _abandon(self, epoch: int, now: int, report: CopyReport, *, claim: bool) -> None:
        before = self.meta.cached
        stale = [s.segment_id for s in (before.in_state(SegmentState.COPY_STARTED) if before else ())
                 if s.origin == ORIGIN_UPLOAD]

        def change(m: PartitionManifest) -> PartitionManifest | None:
            abandoned = mf.abandon_copies(m, epoch=epoch, now_ms=now)
            return abandoned if abandoned is not None else (mf.claim(m, epoch) if claim else None)

        after = self.meta.commit(epoch, change)
        moved = [sid for sid in stale if (s := after.segment(sid)) is not None and s.state != SegmentState.COPY_STARTED]
        report.abandoned.extend(moved)
        self.metrics.add("segments_abandoned", len(moved))

    def _prepare(self, log, seg, from_offset: int, end_offset: int) -> "_Prepared":
        """Open a snapshot of local segment `seg` and scan offsets [from_offset, end_offset] of it."""
        try:
            # A snapshot through a private descriptor: retention or a compaction swap of the segment
            # meanwhile cannot change the bytes under the scan and the PUT.
            reader = log.open_segment_reader(seg.base_offset)
        except (SegmentsChangedError, LogClosedError):
            raise LocalSegmentChangedError(f"segment {seg.base_offset} was deleted or replaced before its "
                                           f"upload") from None
        try:
            scan = scan_segment(reader.fileno(), reader.size, base_offset=from_offset, end_offset=end_offset,
                                index_interval_bytes=log.config.index_interval_bytes, path=str(seg.log_path))
            return _Prepared(reader, scan, epochs_format.encode(scan.leader_epochs))
        except BaseException:
            reader.close()
            raise

    @staticmethod
    def _take_ahead(ahead: list, plan: tuple[int, int, int] | None) -> "_Prepared | None":
        """The read-ahead scan if it was for `plan`; any other is waited for and closed."""
        found = None
        while ahead:
            key, fut = ahead.pop()
            try:
                prepared = fut.result()
            except Exception:  # noqa: BLE001 - scanned again in the foreground, which raises it
                continue
            if key == plan and found is None:
                found = prepared
            else:
                prepared.reader.close()
        return found

    def _upload(self, log, seg, from_offset: int, end_offset: int, epoch: int, now: int, report: CopyReport,
                carry: list[RemoteSegment], *, prepared: "_Prepared | None" = None,
                on_started: Callable[[RemoteSegment], None] | None = None) -> None:
        """Upload offsets [from_offset, end_offset] of local segment `seg`: scan it, commit COPY_STARTED
        (with COPY_FINISHED of the segment in `carry`, whose objects are written, in the same CAS),
        PUT its objects. On return `carry` holds this segment (objects written, COPY_FINISHED not
        committed: the caller passes it on or calls `_finish`); the previous one was finished
        (counted in `report`). On an error `carry` holds whatever is still unfinished. `prepared`:
        the segment already scanned (by a read-ahead); `on_started(entry)` runs once this segment
        is committed COPY_STARTED, before its PUTs."""
        if prepared is None:
            prepared = self._prepare(log, seg, from_offset, end_offset)
        with prepared.reader:
            fd, scan, epochs_bytes = prepared.reader.fileno(), prepared.scan, prepared.epochs
            sid = new_segment_id()
            entry = RemoteSegment(
                segment_id=sid, base_offset=from_offset, end_offset=end_offset, max_timestamp=scan.max_timestamp,
                size_in_bytes=scan.end_position - scan.start_position, leader_epochs=tuple(scan.leader_epochs),
                state=SegmentState.COPY_STARTED, state_epoch=epoch, origin=ORIGIN_UPLOAD,
                index_bytes=len(scan.index), index_crc32c=crc32c(scan.index),
                time_index_bytes=len(scan.time_index), time_index_crc32c=crc32c(scan.time_index),
                epochs_bytes=len(epochs_bytes), epochs_crc32c=crc32c(epochs_bytes), created_ms=now, updated_ms=now,
                record_count=scan.record_count)
            previous = carry[0] if carry else None

            def change(m: PartitionManifest) -> PartitionManifest | None:
                if previous is not None:
                    m = mf.finish_copy(m, previous.segment_id, epoch=epoch, now_ms=now) or m
                # Superseded leftovers go in the same CAS: they would overlap the new entry.
                return mf.start_copy(mf.abandon_copies(m, epoch=epoch, now_ms=now) or m, entry)

            try:
                self.meta.commit(epoch, change)
            except (FencedLeaderEpochError, InvalidStateTransitionError):
                if previous is not None:  # a newer leader took over: the carried objects are garbage
                    carry.clear()
                    with contextlib.suppress(StoreError):
                        self.store.delete_many(self._keys(previous))
                raise
            if previous is not None:
                carry.clear()
                self._account(previous, report)
            if on_started is not None:
                on_started(entry)
            key = lambda suffix: segment_key(self.topic, self.partition, from_offset, sid, suffix)  # noqa: E731
            self._put_objects(key(LOG_SUFFIX), FileSlice(fd, scan.start_position, scan.end_position),
                              [(key(INDEX_SUFFIX), scan.index), (key(TIME_INDEX_SUFFIX), scan.time_index),
                               (key(EPOCHS_SUFFIX), epochs_bytes)])
        carry.append(entry)

    def _finish(self, carry: list[RemoteSegment], epoch: int, now: int, report: CopyReport) -> None:
        """Commit COPY_FINISHED of the segment in `carry` (if any), alone."""
        if not carry:
            return
        entry = carry.pop()
        try:
            self.meta.commit(epoch, lambda m: mf.finish_copy(m, entry.segment_id, epoch=epoch, now_ms=now))
        except (FencedLeaderEpochError, InvalidStateTransitionError):
            # A newer leader took over (and abandoned this entry): our objects are garbage now.
            with contextlib.suppress(StoreError):
                self.store.delete_many(self._keys(entry))
            raise
        self._account(entry, report)

    def _account(self, entry: RemoteSegment, report: CopyReport) -> None:
        uploaded = entry.size_in_bytes + entry.index_bytes + entry.time_index_bytes + entry.epochs_bytes
        report.bytes_uploaded += uploaded
        self.metrics.add("bytes_uploaded", uploaded)
        self.metrics.add("segments_uploaded")
        m = self.meta.cached
        done = m.segment(entry.segment_id) if m is not None else None
        report.uploaded.append(done if done is not None else entry)

    def _put_objects(self, log_key: str, log_data: FileSlice, small: list[tuple[str, bytes]]) -> None:
        """PUT a segment's objects: the small ones (indexes, epochs) on the object executor while this
        thread streams the `.log`, so that a segment costs about one request's latency, not four.
        Every PUT has ended (done or failed) when this returns or raises; the first error is raised."""
        executor = self.object_executor
        if executor is None:
            self.store.put(log_key, log_data)
            for k, data in small:
                self.store.put(k, data)
            return
        futures = []
        try:
            for k, data in small:
                futures.append(executor.submit(self.store.put, k, data))
        except RuntimeError:  # the executor was shut down (the node is stopping): no parallelism
            pass
        error: BaseException | None = None
        try:
            self.store.put(log_key, log_data)
        except BaseException as e:  # noqa: BLE001 - re-raised once the other PUTs have ended
            error = e
        for k, data in small[len(futures):]:
            if error is None:
                try:
                    self.store.put(k, data)
                except BaseException as e:  # noqa: BLE001
                    error = e
        for fut in futures:
            try:
                fut.result()
            except BaseException as e:  # noqa: BLE001
                error = error or e
        if error is not None:
            raise error

    def _record_lag(self, log, report: CopyReport) -> None:
        m = self.meta.cached
        covered = self._covered_until(m) if m is not None else -1
        segments = log.segments
        lag = [s for s, nxt in zip(segments, segments[1:]) if nxt.base_offset - 1 > covered]
        report.lag_segments = len(lag)
        report.lag_bytes = sum(s.size for s in lag)
        self.metrics.set_upload_lag(self.topic, self.partition, report.lag_segments, report.lag_bytes)

    # ------------------------------------------------------------------ deletion and cleanup

    def _delete_due(self, epoch: int, now: int, report: CopyReport | RemoteRetentionReport | None, *,
                    force: bool = False, allow_deleted: bool = False) -> list[str]:
        m = self.meta.cached or self.meta.load()
        due = [s for s in m.in_state(SegmentState.DELETE_STARTED) if s.delete_after_ms <= now]
        if not due:
            return []
        self.store.delete_many([k for s in due for k in self._keys(s)])
        ids = [s.segment_id for s in due]
        keep = self.config.remote_log_metadata_deleted_segments_kept
        self.meta.commit(epoch, lambda cur: mf.finish_delete(cur, ids, epoch=epoch, now_ms=now, keep_finished=keep),
                         force=force, allow_deleted=allow_deleted)
        self.metrics.add("segments_deleted", len(ids))
        self.metrics.add("bytes_deleted", sum(s.size_in_bytes for s in due))
        if report is not None:
            report.deleted.extend(ids)
        return ids

    def cleanup(self, leader_epoch: int, *, now_ms: int | None = None) -> list[str]:
        """Delete the objects of DELETE_STARTED segments whose delay is over; their ids."""
        with self._lock:
            return self._delete_due(leader_epoch, self._now_ms() if now_ms is None else now_ms, None)

    def sweep_orphans(self) -> list[str]:
        """Delete objects under the partition that no live manifest entry owns; their keys."""
        with self._lock:
            report = CopyReport()
            self._sweep_locked(report)
            return report.orphans_deleted

    def _sweep_locked(self, report: CopyReport) -> None:
        # List first, then read the manifest: an object listed was written after its entry was
        # committed COPY_STARTED, so that entry is in the manifest read afterwards (or was deleted).
        objects = self.store.list(partition_dir(self.topic, self.partition) + "/")
        doomed = orphan_keys((o.key for o in objects), self.meta.load())  # tiering/orphans.py
        if doomed:
            self.store.delete_many(doomed)
            self.metrics.add("orphans_deleted", len(doomed))
            report.orphans_deleted.extend(doomed)
        self._last_sweep = time.monotonic()

    def enforce_retention(self, leader_epoch: int, *, retention_ms: int, retention_bytes: int,
                          local_only_bytes: int = 0, now_ms: int | None = None) -> RemoteRetentionReport:
        """Total retention over the remote tier: `retention.ms` by each segment's max timestamp,
        `retention.bytes` over remote + `local_only_bytes` (local data not yet tiered). Expired
        leading segments go to DELETE_STARTED and the remote log start offset moves past them;
        their objects are deleted after `remote.segment.delete.delay.ms`."""
        with self._lock:
            now = self._now_ms() if now_ms is None else now_ms
            m = self.meta.cached or self.meta.load()
            report = RemoteRetentionReport(log_start_offset=m.log_start_offset)
            done = m.copy_finished
            if done:
                infos = [SegmentInfo(s.base_offset, s.end_offset + 1, s.size_in_bytes,
                                     s.max_timestamp if s.max_timestamp > NO_TIMESTAMP else s.created_ms) for s in done]
                tail = done[-1].end_offset + 1
                infos.append(SegmentInfo(tail, tail, max(0, local_only_bytes), now))  # the local-only part: kept
                plan = plan_retention(infos, now_ms=now, retention_ms=retention_ms, retention_bytes=retention_bytes)
                if not plan.is_empty:
                    planned = set(plan.base_offsets)
                    ids = [s.segment_id for s in done if s.base_offset in planned]
                    delay = self.config.remote_segment_delete_delay_ms
                    after = self.meta.commit(leader_epoch, lambda cur: mf.start_delete(
                        cur, ids, epoch=leader_epoch, now_ms=now, delete_after_ms=now + delay,
                        new_log_start_offset=plan.new_log_start_offset))
                    report.segments_expired = ids
                    report.bytes_expired = plan.bytes_deleted
                    report.log_start_offset = after.log_start_offset
            report.deleted = self._delete_due(leader_epoch, now, None)
            return report

    def delete_all(self, *, now_ms: int | None = None) -> int:
        """Topic deletion: delete every object of the partition and leave a tombstone manifest that
        fences this incarnation's writers (a new topic id may take the name over). Returns the number
        of objects deleted. Idempotent; safe to retry after any failure."""
        with self._lock:
            now = self._now_ms() if now_ms is None else now_ms
            self.meta.load()
            self.meta.commit(-1, lambda m: mf.mark_deleted(m, epoch=m.leader_epoch, now_ms=now), force=True,
                             allow_deleted=True)
            objects = [o.key for o in self.store.list(partition_dir(self.topic, self.partition) + "/")
                       if parse_segment_file(o.key.rsplit("/", 1)[-1]) is not None]
            self.store.delete_many(objects)
            m = self.meta.cached or self.meta.load()
            ids = [s.segment_id for s in m.in_state(SegmentState.DELETE_STARTED)]
            self.meta.commit(-1, lambda cur: mf.finish_delete(cur, ids, epoch=cur.leader_epoch, now_ms=now,
                                                              keep_finished=0), force=True, allow_deleted=True)
            self.metrics.add("segments_deleted", len(ids))
            self._claimed_epoch = None
            return len(objects)

    # ------------------------------------------------------------------ local retention

    @staticmethod
    def _covered_until(m: PartitionManifest) -> int:
        """The last offset that local retention may consider safe: tiered, or expired remotely."""
        end = m.end_offset
        return end if end is not None else m.log_start_offset - 1

    def tiered_offset(self, *, max_age_ms: int | None = None) -> int:
        """One past the last offset covered by the remote tier (0 if nothing was tiered).

        If the store cannot be reached, the last manifest this process saw answers (coverage only
        grows, so a stale answer is safe), or 0 when it saw none: local data then stays."""
        try:
            m = self.meta.current(self.config.remote_log_metadata_max_age_ms if max_age_ms is None else max_age_ms)
        except TransientStoreError:
            m = self.meta.last_known
            if m is None:
                return 0
        return self._covered_until(m) + 1

    def eligible_for_local_deletion(self, log, *, max_age_ms: int | None = None) -> list:
        """The leading sealed local segments whose offsets [base, next base - 1] the remote tier
        covers (COPY_FINISHED, or expired remotely): the only ones local retention may delete."""
        covered = self.tiered_offset(max_age_ms=max_age_ms) - 1
        out = []
        segments = log.segments
        for seg, nxt in zip(segments, segments[1:]):
            if nxt.base_offset - 1 > covered:
                break
            out.append(seg)
        return out

    def local_only_bytes(self, log, *, max_age_ms: int | None = None) -> int:
        """Bytes of local segments not covered by the remote tier (the active one included): what
        `retention.bytes` counts on top of the remote tier's size."""
        covered = self.tiered_offset(max_age_ms=max_age_ms) - 1
        segments = log.segments
        nexts = [n.base_offset for n in segments[1:]] + [None]
        return sum(s.size for s, n in zip(segments, nexts) if n is None or n - 1 > covered)

    def apply_local_retention(self, log, high_watermark: int, *, now_ms: int | None = None,
                              max_age_ms: int | None = None) -> RetentionResult:
        """Local retention of a tiered topic: `local.retention.ms` / `local.retention.bytes` (-2:
        follow `retention.*`), deleting only segments the remote tier covers and below the HW."""
        cfg = log.config
        local_ms = cfg.retention_ms if cfg.local_retention_ms == -2 else cfg.local_retention_ms
        local_bytes = cfg.retention_bytes if cfg.local_retention_bytes == -2 else cfg.local_retention_bytes
        bound = min(high_watermark, self.tiered_offset(max_age_ms=max_age_ms))
        now = self._now_ms() if now_ms is None else now_ms
        return apply_retention(log, now, bound, retention_ms=local_ms, retention_bytes=local_bytes)
