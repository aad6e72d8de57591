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

Composition: `SegmentUploader` holds the partition's lock, its `ManifestStore`, and two objects
it calls under that lock: a `SegmentCopier` (uploader_copy.py: steps 3 and 4, the abandon/claim
commit, the upload lag) and a `SegmentDeleter` (uploader_cleanup.py: deletion after the delay,
the orphan sweep, remote retention, delete-all). It runs the copy round's steps 1 and 2 itself,
and answers local retention. The reports are uploader_reports.py.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Executor
from typing import Callable

from lakelog.logstore.retention import RetentionResult, apply_retention
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.errors import FencedLeaderEpochError, TieringError, TransientStoreError
from lakelog.tiering.manifest_model import ORIGIN_UPLOAD, SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.metrics import TieringMetrics
from lakelog.tiering.store import ObjectStore
from lakelog.tiering.uploader_cleanup import SegmentDeleter
from lakelog.tiering.uploader_copy import SegmentCopier, covered_until
from lakelog.tiering.uploader_reports import CopyReport, RemoteRetentionReport


class SegmentUploader:
    """Uploads, remote retention and cleanup of one partition (see the module docstring)."""

    def __init__(self, meta: ManifestStore, store: ObjectStore, *, config: TieringConfig | None = None,
                 metrics: TieringMetrics | None = None, clock: Callable[[], float] = time.time,
                 object_executor: Executor | None = None) -> None:
        self.meta = meta
        self.store = store
        self.topic = meta.topic
        self.partition = meta.partition
        self.config = config if config is not None else TieringConfig()
        self.metrics = metrics if metrics is not None else TieringMetrics()
        self._clock = clock
        self._lock = threading.Lock()
        self._claimed_epoch: int | None = None
        self._last_sweep = 0.0
        self._copier = SegmentCopier(meta, store, self.config, self.metrics, object_executor)
        self._deleter = SegmentDeleter(meta, store, self.config, self.metrics)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # ------------------------------------------------------------------ copy

    def copy_segments(self, log, leader_epoch: int, high_watermark: int, *, now_ms: int | None = None,
                      max_segments: int | None = None) -> CopyReport:
        """One copy round for `log` (a PartitionLog this node leads in `leader_epoch`); see the module
        docstring. Raises FencedLeaderEpochError when a newer leader owns the manifest,
        TransientStoreError when the store is unreachable (retry the round later).

        Concurrency: takes the partition's lock; blocks on the store."""
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
                self._copier.record_lag(log, report)
            return report

    def _copy_locked(self, log, epoch: int, hw: int, now: int, max_segments: int | None,
                     report: CopyReport) -> None:
        if self._claimed_epoch != epoch:
            self.meta.load()
            self._copier.abandon(epoch, now, report, claim=True)
            self._claimed_epoch = epoch
            self._sweep_locked(report)
        elif any(s.origin == ORIGIN_UPLOAD for s in (self.meta.cached or self.meta.load()).in_state(
                SegmentState.COPY_STARTED)):
            self._copier.abandon(epoch, now, report, claim=False)
        if self.config.remote_log_orphan_sweep_interval_ms and \
                (time.monotonic() - self._last_sweep) * 1000 >= self.config.remote_log_orphan_sweep_interval_ms:
            self._sweep_locked(report)
        self._deleter.delete_due(epoch, now, report)
        self._copier.copy(log, epoch, hw, now, max_segments, report)
        self._deleter.delete_due(epoch, now, report)
        report.remote_end_offset = (self.meta.cached or self.meta.load()).end_offset

    # ------------------------------------------------------------------ deletion and cleanup

    def cleanup(self, leader_epoch: int, *, now_ms: int | None = None) -> list[str]:
        """Delete the objects of DELETE_STARTED segments whose delay is over; their ids.
        Takes the partition's lock; blocks on the store."""
        with self._lock:
            return self._deleter.delete_due(leader_epoch, self._now_ms() if now_ms is None else now_ms, None)

    def sweep_orphans(self) -> list[str]:
        """Delete objects under the partition that no live manifest entry owns; their keys.
        Takes the partition's lock; blocks on the store."""
        with self._lock:
            report = CopyReport()
            self._sweep_locked(report)
            return report.orphans_deleted

    def _sweep_locked(self, report: CopyReport) -> None:
        self._deleter.sweep_orphans(report)
        self._last_sweep = time.monotonic()

    def enforce_retention(self, leader_epoch: int, *, retention_ms: int, retention_bytes: int,
                          local_only_bytes: int = 0, now_ms: int | None = None) -> RemoteRetentionReport:
        """Total retention over the remote tier (see `SegmentDeleter.enforce_retention`).
        Takes the partition's lock; blocks on the store."""
        with self._lock:
            now = self._now_ms() if now_ms is None else now_ms
            return self._deleter.enforce_retention(leader_epoch, retention_ms=retention_ms,
                                                   retention_bytes=retention_bytes,
                                                   local_only_bytes=local_only_bytes, now=now)

    def delete_all(self, *, now_ms: int | None = None) -> int:
        """Topic deletion: delete every object of the partition and leave a tombstone manifest that
        fences this incarnation's writers (a new topic id may take the name over). Returns the number
        of objects deleted. Idempotent; safe to retry after any failure. Takes the partition's lock."""
        with self._lock:
            deleted = self._deleter.delete_all(self._now_ms() if now_ms is None else now_ms)
            self._claimed_epoch = None
            return deleted

    # ------------------------------------------------------------------ local retention

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
        return covered_until(m) + 1

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
