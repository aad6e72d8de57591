"""Deletion, cleanup and local retention of a partition's tiering manager (uploader.py's docstring).

`UploaderCleanup` is the part of `SegmentUploader` (uploader.py) that deletes and answers local
retention: the objects of DELETE_STARTED segments once `remote.segment.delete.delay.ms` is over
(`cleanup`), orphans no manifest entry owns (`sweep_orphans`), remote retention
(`enforce_retention`), a deleted topic's partition (`delete_all`); and, for local retention, how
far the remote tier covers the log (`tiered_offset`, `eligible_for_local_deletion`,
`local_only_bytes`, `apply_local_retention`).

Concurrency: the public write paths take the partition's lock; they block on the store.
"""

from __future__ import annotations

import time

from lakelog.logstore.retention import RetentionResult, SegmentInfo, apply_retention, plan_retention
from lakelog.logstore.record_batch import NO_TIMESTAMP
from lakelog.tiering import manifest_transitions
from lakelog.tiering.errors import TransientStoreError
from lakelog.tiering.layout import parse_segment_file, partition_dir
from lakelog.tiering.manifest_model import PartitionManifest, SegmentState
from lakelog.tiering.orphans import orphan_keys
from lakelog.tiering.uploader_state import CopyReport, RemoteRetentionReport, UploaderState


class UploaderCleanup(UploaderState):
    """Deletion, cleanup and local retention of `SegmentUploader` (module doc)."""

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
        self.meta.commit(epoch, lambda cur: manifest_transitions.finish_delete(cur, ids, epoch=epoch, now_ms=now, keep_finished=keep),
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
                    after = self.meta.commit(leader_epoch, lambda cur: manifest_transitions.start_delete(
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
            self.meta.commit(-1, lambda m: manifest_transitions.mark_deleted(m, epoch=m.leader_epoch, now_ms=now), force=True,
                             allow_deleted=True)
            objects = [o.key for o in self.store.list(partition_dir(self.topic, self.partition) + "/")
                       if parse_segment_file(o.key.rsplit("/", 1)[-1]) is not None]
            self.store.delete_many(objects)
            m = self.meta.cached or self.meta.load()
            ids = [s.segment_id for s in m.in_state(SegmentState.DELETE_STARTED)]
            self.meta.commit(-1, lambda cur: manifest_transitions.finish_delete(cur, ids, epoch=cur.leader_epoch, now_ms=now,
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
