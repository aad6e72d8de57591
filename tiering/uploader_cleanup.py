"""Deletion and cleanup of a partition's remote segments (uploader.py's docstring).

`SegmentDeleter` is the part of a partition's `SegmentUploader` (uploader.py) that deletes: the
objects of DELETE_STARTED segments once `remote.segment.delete.delay.ms` is over (`delete_due`),
orphans no manifest entry owns (`sweep_orphans`), remote retention (`enforce_retention`) and a
deleted topic's partition (`delete_all`).

Concurrency: not thread-safe; the uploader calls it under the partition's lock. It blocks on the
store.
"""

from __future__ import annotations

from lakelog.logstore.record_batch import NO_TIMESTAMP
from lakelog.logstore.retention import SegmentInfo, plan_retention
from lakelog.tiering import manifest_transitions
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.layout import parse_segment_file, partition_dir, segment_keys
from lakelog.tiering.manifest_model import RemoteSegment, SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.metrics import TieringMetrics
from lakelog.tiering.orphans import orphan_keys
from lakelog.tiering.store import ObjectStore
from lakelog.tiering.uploader_reports import CopyReport, RemoteRetentionReport


class SegmentDeleter:
    """Deletes a partition's remote segments (module doc); `SegmentUploader` holds it and calls it
    under the partition's lock."""

    def __init__(self, meta: ManifestStore, store: ObjectStore, config: TieringConfig,
                 metrics: TieringMetrics) -> None:
        self.meta = meta
        self.store = store
        self.config = config
        self.metrics = metrics
        self.topic = meta.topic
        self.partition = meta.partition

    def _keys(self, s: RemoteSegment) -> list[str]:
        return segment_keys(self.topic, self.partition, s.base_offset, s.segment_id,
                            txn_index=s.txn_index_bytes > 0)

    # ------------------------------------------------------------------ deletion and cleanup

    def delete_due(self, epoch: int, now: int, report: CopyReport | RemoteRetentionReport | None, *,
                   force: bool = False, allow_deleted: bool = False) -> list[str]:
        """Delete the objects of DELETE_STARTED segments whose delay is over and commit
        DELETE_FINISHED; their ids (also added to `report.deleted`)."""
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

    def sweep_orphans(self, report: CopyReport) -> None:
        """Delete objects under the partition that no live manifest entry owns (into `report`)."""
        # List first, then read the manifest: an object listed was written after its entry was
        # committed COPY_STARTED, so that entry is in the manifest read afterwards (or was deleted).
        objects = self.store.list(partition_dir(self.topic, self.partition) + "/")
        doomed = orphan_keys((o.key for o in objects), self.meta.load())  # tiering/orphans.py
        if doomed:
            self.store.delete_many(doomed)
            self.metrics.add("orphans_deleted", len(doomed))
            report.orphans_deleted.extend(doomed)

    def enforce_retention(self, leader_epoch: int, *, retention_ms: int, retention_bytes: int,
                          local_only_bytes: int, now: int) -> RemoteRetentionReport:
        """Total retention over the remote tier: `retention.ms` by each segment's max timestamp,
        `retention.bytes` over remote + `local_only_bytes` (local data not yet tiered). Expired
        leading segments go to DELETE_STARTED and the remote log start offset moves past them;
        their objects are deleted after `remote.segment.delete.delay.ms`."""
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
        report.deleted = self.delete_due(leader_epoch, now, None)
        return report

    def delete_all(self, now: int) -> int:
        """Topic deletion: delete every object of the partition and leave a tombstone manifest that
        fences this incarnation's writers (a new topic id may take the name over). Returns the number
        of objects deleted. Idempotent; safe to retry after any failure."""
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
        return len(objects)
