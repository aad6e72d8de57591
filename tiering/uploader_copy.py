"""The copy round of a partition's tiering manager: upload sealed segments (uploader.py's docstring).

`SegmentCopier` is the part of a partition's `SegmentUploader` (uploader.py) that uploads: `copy`
(per segment: scan, COPY_STARTED, PUT the four objects, COPY_FINISHED in the same CAS as the next
segment's COPY_STARTED, the next segment scanned ahead on the object executor), `abandon`
(leftover COPY_STARTED entries, with the claim of a new leader epoch) and `record_lag`. The
uploader runs the round around it (claim, orphan sweep, deletions). The steps and why nothing is
lost, duplicated or orphaned are in uploader.py's docstring.

Concurrency: not thread-safe; the uploader calls it under the partition's lock. It blocks on the
store.
"""

from __future__ import annotations

import contextlib
import logging
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Callable

from lakelog.index.transaction_index import AbortedTxn, encode_entries
from lakelog.logstore.errors import LogClosedError, SegmentsChangedError
from lakelog.logstore.file_records import SegmentReader
from lakelog.logstore.record_batch import crc32c
from lakelog.tiering import epochs as epochs_format, manifest_transitions
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.errors import (
    FencedLeaderEpochError,
    InvalidStateTransitionError,
    LocalSegmentChangedError,
    ManifestInvariantError,
    StoreError,
    TieringError,
)
from lakelog.tiering.layout import EPOCHS_SUFFIX, new_segment_id, segment_key, segment_keys
from lakelog.logstore.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from lakelog.tiering.manifest_model import ORIGIN_UPLOAD, PartitionManifest, RemoteSegment, SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.metrics import TieringMetrics
from lakelog.tiering.segment_scan import SegmentScan, scan_segment
from lakelog.tiering.store import FileSlice, ObjectStore
from lakelog.tiering.uploader_reports import CopyReport

logger = logging.getLogger("lakelog.tiering.uploader")


@dataclass(slots=True)
class _Prepared:
    """A local segment ready to upload: its snapshot reader (closed after the PUTs) and its scan."""

    reader: SegmentReader
    scan: SegmentScan
    epochs: bytes
    txn_index: bytes  # the slice's aborted transactions, Kafka's .txnindex bytes; b"" when none
    later_aborts: tuple[AbortedTxn, ...]  # aborted transactions of the slice whose marker lies later


def later_aborts(log, from_offset: int, end_offset: int) -> tuple[AbortedTxn, ...]:
    """The aborted transactions with data in [from_offset, end_offset] whose ABORT marker lies
    after `end_offset`, from the local `.txnindex` files of the later segments. Complete at
    upload: tiering copies only below min(HW, LSO), so every transaction with data in the slice
    is decided and its marker is in the local log (a later segment is never tiered first)."""
    return tuple(e for e in log.aborted_transactions(from_offset, end_offset + 1) if e.last_offset > end_offset)


def covered_until(m: PartitionManifest) -> int:
    """The last offset that local retention may consider safe: tiered, or expired remotely."""
    end = m.end_offset
    return end if end is not None else m.log_start_offset - 1


class SegmentCopier:
    """Uploads the sealed segments of one partition (module doc); `SegmentUploader` holds it and
    calls it under the partition's lock."""

    def __init__(self, meta: ManifestStore, store: ObjectStore, config: TieringConfig, metrics: TieringMetrics,
                 object_executor: Executor | None) -> None:
        self.meta = meta
        self.store = store
        self.config = config
        self.metrics = metrics
        #: Where a segment's small objects are PUT while the `.log` streams (None: one after another).
        #: Its tasks never wait on anything, so sharing it between partitions cannot deadlock.
        self.object_executor = object_executor
        self.topic = meta.topic
        self.partition = meta.partition

    def _keys(self, s: RemoteSegment) -> list[str]:
        return segment_keys(self.topic, self.partition, s.base_offset, s.segment_id,
                            txn_index=s.txn_index_bytes > 0)

    # ------------------------------------------------------------------ copy

    def copy(self, log, epoch: int, hw: int, now: int, max_segments: int | None, report: CopyReport) -> None:
        """Upload the candidates of one round, in offset order, at most `max_segments` (default
        `remote.log.copy.max.segments.per.round`); steps 3 and 4 of uploader.py's docstring."""
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
            nxt = self._next_candidate(log, manifest_transitions.finish_copy(m, entry.segment_id, epoch=epoch, now_ms=now) or m, hw)
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
                    m = manifest_transitions.finish_copy(m, carry[0].segment_id, epoch=epoch, now_ms=now) or m
                planned = self._next_candidate(log, m, hw)
                if planned is None:
                    break
                seg, from_offset, end_offset, restart = planned
                if restart:
                    if report.restarted_at is not None:
                        raise ManifestInvariantError(f"the remote tier restarted at {report.restarted_at} and "
                                                     f"still does not continue at {from_offset}")
                    self._finish(carry, epoch, now, report)
                    self.meta.commit(epoch, lambda cur: manifest_transitions.restart_at(
                        manifest_transitions.abandon_copies(cur, epoch=epoch, now_ms=now) or cur, from_offset, epoch=epoch,
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

    def abandon(self, epoch: int, now: int, report: CopyReport, *, claim: bool) -> None:
        """Move leftover COPY_STARTED uploads to DELETE_STARTED; with `claim`, also raise the
        manifest's leader epoch to `epoch` (fencing older writers) in the same commit."""
        before = self.meta.cached
        stale = [s.segment_id for s in (before.in_state(SegmentState.COPY_STARTED) if before else ())
                 if s.origin == ORIGIN_UPLOAD]

        def change(m: PartitionManifest) -> PartitionManifest | None:
            abandoned = manifest_transitions.abandon_copies(m, epoch=epoch, now_ms=now)
            return abandoned if abandoned is not None else (manifest_transitions.claim(m, epoch) if claim else None)

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
            # The segment is sealed: its .txnindex no longer changes (only a truncation below the HW could).
            aborted = [e for e in log.segment_aborted_transactions(seg.base_offset)
                       if from_offset <= e.last_offset <= end_offset]
            return _Prepared(reader, scan, epochs_format.encode(scan.leader_epochs), encode_entries(aborted),
                             later_aborts(log, from_offset, end_offset))
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
            fd, scan, epochs_bytes, txn_bytes = (prepared.reader.fileno(), prepared.scan, prepared.epochs,
                                                 prepared.txn_index)
            sid = new_segment_id()
            entry = RemoteSegment(
                segment_id=sid, base_offset=from_offset, end_offset=end_offset, max_timestamp=scan.max_timestamp,
                size_in_bytes=scan.end_position - scan.start_position, leader_epochs=tuple(scan.leader_epochs),
                state=SegmentState.COPY_STARTED, state_epoch=epoch, origin=ORIGIN_UPLOAD,
                index_bytes=len(scan.index), index_crc32c=crc32c(scan.index),
                time_index_bytes=len(scan.time_index), time_index_crc32c=crc32c(scan.time_index),
                epochs_bytes=len(epochs_bytes), epochs_crc32c=crc32c(epochs_bytes),
                txn_index_bytes=len(txn_bytes), txn_index_crc32c=crc32c(txn_bytes) if txn_bytes else 0,
                created_ms=now, updated_ms=now,
                record_count=scan.record_count, later_aborts=prepared.later_aborts)
            previous = carry[0] if carry else None

            def change(m: PartitionManifest) -> PartitionManifest | None:
                if previous is not None:
                    m = manifest_transitions.finish_copy(m, previous.segment_id, epoch=epoch, now_ms=now) or m
                # Superseded leftovers go in the same CAS: they would overlap the new entry.
                return manifest_transitions.start_copy(manifest_transitions.abandon_copies(m, epoch=epoch, now_ms=now) or m, entry)

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
                               (key(EPOCHS_SUFFIX), epochs_bytes)]
                              + ([(key(TXN_INDEX_SUFFIX), txn_bytes)] if txn_bytes else []))
        carry.append(entry)

    def _finish(self, carry: list[RemoteSegment], epoch: int, now: int, report: CopyReport) -> None:
        """Commit COPY_FINISHED of the segment in `carry` (if any), alone."""
        if not carry:
            return
        entry = carry.pop()
        try:
            self.meta.commit(epoch, lambda m: manifest_transitions.finish_copy(m, entry.segment_id, epoch=epoch, now_ms=now))
        except (FencedLeaderEpochError, InvalidStateTransitionError):
            # A newer leader took over (and abandoned this entry): our objects are garbage now.
            with contextlib.suppress(StoreError):
                self.store.delete_many(self._keys(entry))
            raise
        self._account(entry, report)

    def _account(self, entry: RemoteSegment, report: CopyReport) -> None:
        uploaded = (entry.size_in_bytes + entry.index_bytes + entry.time_index_bytes + entry.epochs_bytes
                    + entry.txn_index_bytes)
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

    def record_lag(self, log, report: CopyReport) -> None:
        """Count the sealed local segments (and their bytes) not yet covered by the remote tier."""
        m = self.meta.cached
        covered = covered_until(m) if m is not None else -1
        segments = log.segments
        lag = [s for s, nxt in zip(segments, segments[1:]) if nxt.base_offset - 1 > covered]
        report.lag_segments = len(lag)
        report.lag_bytes = sum(s.size for s in lag)
        self.metrics.set_upload_lag(self.topic, self.partition, report.lag_segments, report.lag_bytes)
