"""The node's entry point to the remote tier: one `RemoteTier` per node, one `RemotePartition` per
partition replica.

    tier = RemoteTier(open_store("s3://bucket/prefix"), TieringConfig({...}))
    rp = tier.partition("orders", 0, topic_id="...")

    # the leader, from a background thread, every few seconds:
    rp.copy_segments(log, leader_epoch, high_watermark)          # upload sealed segments below the HW
    rp.enforce_log_retention(log, leader_epoch)                  # retention.ms / retention.bytes, remote tier
    rp.apply_local_retention(log, high_watermark)                 # local.retention.* (leader and followers)

    # a fetch below the local log start offset, on a worker thread:
    rp.read(offset, max_bytes, max_offset=hw)                     # -> RemoteFetchResult
    rp.offset_for_timestamp(ts)                                   # ListOffsets over tiered data

    # topic deletion:
    rp.delete_all(); tier.forget("orders", 0)
    # what deletions left behind (the store was down), from one node, with the cluster's topics:
    tier.sweep_deleted_topics({"orders": topic_id, ...}, grace_ms=3_600_000)

The tier owns what partitions share: the store, the remote index cache and the chunk cache (both
bounded LRU by bytes), the fetch, prefetch and upload thread pools (bounded), and the metrics.

Concurrency: everything is thread-safe. `partition()` returns the same object for the same
partition. Calls block on the store; never call them from the event loop.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Mapping

from lakelog.index.transaction_index import TxnIndexSearch
from lakelog.tiering.cache import ByteLRUCache
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.errors import TieringError
from lakelog.tiering.layout import parse_segment_file, partition_dir
from lakelog.tiering.manifest_model import PartitionManifest
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.metrics import TieringMetrics
from lakelog.tiering.reader import RemoteFetchResult, RemoteLogReader
from lakelog.tiering.store import ObjectStore
from lakelog.tiering.uploader import SegmentUploader
from lakelog.tiering.uploader_reports import CopyReport, RemoteRetentionReport

logger = logging.getLogger(__name__)


class RemotePartition:
    """The remote tier of one partition: manifest, uploads, retention and reads."""

    def __init__(self, tier: "RemoteTier", topic: str, partition: int, topic_id: str | None) -> None:
        cfg = tier.config
        self.topic = topic
        self.partition = partition
        self.meta = ManifestStore(tier.store, topic, partition, topic_id=topic_id,
                                  max_attempts=cfg.remote_log_metadata_commit_max_attempts)
        self.uploader = SegmentUploader(self.meta, tier.store, config=cfg, metrics=tier.metrics, clock=tier.clock,
                                        object_executor=tier.upload_executor)
        self.reader = RemoteLogReader(self.meta, tier.store, config=cfg, index_cache=tier.index_cache,
                                      chunk_cache=tier.chunk_cache, fetch_executor=tier.fetch_executor,
                                      prefetch_executor=tier.prefetch_executor, metrics=tier.metrics)

    # -- leader work
    def copy_segments(self, log, leader_epoch: int, high_watermark: int, **kw) -> CopyReport:
        return self.uploader.copy_segments(log, leader_epoch, high_watermark, **kw)

    def enforce_retention(self, leader_epoch: int, *, retention_ms: int, retention_bytes: int,
                          local_only_bytes: int = 0, now_ms: int | None = None) -> RemoteRetentionReport:
        return self.uploader.enforce_retention(leader_epoch, retention_ms=retention_ms,
                                               retention_bytes=retention_bytes, local_only_bytes=local_only_bytes,
                                               now_ms=now_ms)

    def enforce_log_retention(self, log, leader_epoch: int, *, now_ms: int | None = None) -> RemoteRetentionReport:
        """`enforce_retention` with the log's `retention.ms` / `retention.bytes` and its local-only bytes."""
        cfg = log.config
        if not cfg.delete:
            return self.enforce_retention(leader_epoch, retention_ms=-1, retention_bytes=-1, now_ms=now_ms)
        return self.enforce_retention(leader_epoch, retention_ms=cfg.retention_ms, retention_bytes=cfg.retention_bytes,
                                      local_only_bytes=self.uploader.local_only_bytes(log), now_ms=now_ms)

    def cleanup(self, leader_epoch: int, *, now_ms: int | None = None) -> list[str]:
        return self.uploader.cleanup(leader_epoch, now_ms=now_ms)

    def sweep_orphans(self) -> list[str]:
        return self.uploader.sweep_orphans()

    def delete_all(self, *, now_ms: int | None = None) -> int:
        return self.uploader.delete_all(now_ms=now_ms)

    # -- local retention (leader and followers)
    def eligible_for_local_deletion(self, log, *, max_age_ms: int | None = None) -> list:
        return self.uploader.eligible_for_local_deletion(log, max_age_ms=max_age_ms)

    def apply_local_retention(self, log, high_watermark: int, *, now_ms: int | None = None):
        return self.uploader.apply_local_retention(log, high_watermark, now_ms=now_ms)

    def tiered_offset(self, *, max_age_ms: int | None = None) -> int:
        return self.uploader.tiered_offset(max_age_ms=max_age_ms)

    def local_only_bytes(self, log) -> int:
        return self.uploader.local_only_bytes(log)

    # -- reads
    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> RemoteFetchResult:
        return self.reader.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        return self.reader.offset_for_timestamp(timestamp)

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearch:
        return self.reader.aborted_transactions(fetch_offset, upper_bound_offset)

    def manifest(self, *, max_age_ms: int | None = None) -> PartitionManifest:
        return self.meta.current(self.reader.config.remote_log_metadata_max_age_ms if max_age_ms is None
                                 else max_age_ms)

    @property
    def log_start_offset(self) -> int | None:
        """The remote log start offset, or None when the remote tier holds nothing."""
        m = self.manifest()
        return m.log_start_offset if m.end_offset is not None else None


@dataclass(slots=True)
class DeletedTopicsSweep:
    """What one sweep of deleted topics' remote data found and did."""

    partitions_examined: int = 0
    deleted: list[str] = field(default_factory=list)  # partition dirs whose segment objects were deleted
    objects_deleted: int = 0
    too_recent: list[str] = field(default_factory=list)  # left for a later sweep (inside the grace period)
    errors: list[str] = field(default_factory=list)  # "dir: error" (retried by the next sweep)


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """(topic, partition) of a remote partition directory name `<topic>-<partition>`, or None."""
    topic, sep, number = name.rpartition("-")
    if not sep or not number.isdigit() or len(number) > 9:
        return None
    try:
        partition_dir(topic, int(number))
    except ValueError:
        return None
    return topic, int(number)


class RemoteTier:
    """One node's remote tier: the store and everything partitions share."""

    def __init__(self, store: ObjectStore, config: TieringConfig | Mapping | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.config = config if isinstance(config, TieringConfig) else TieringConfig(config)
        self.clock = clock
        cfg = self.config
        threads = cfg.remote_log_reader_threads
        self.metrics = TieringMetrics()
        self.index_cache: ByteLRUCache = ByteLRUCache(cfg.remote_log_index_file_cache_total_size_bytes,
                                                      max_pending=threads * 2)
        self.chunk_cache: ByteLRUCache = ByteLRUCache(cfg.remote_fetch_chunk_cache_bytes, max_pending=threads * 2)
        # Two pools: prefetch tasks never wait on anything, so fetch tasks that wait on a prefetch
        # in flight cannot deadlock the pool that would run it.
        self.fetch_executor = ThreadPoolExecutor(threads, thread_name_prefix="lakelog-remote-fetch")
        self.prefetch_executor = ThreadPoolExecutor(threads, thread_name_prefix="lakelog-remote-prefetch")
        # PUTs of segments' small objects, in parallel with each `.log` (tasks never wait on anything).
        self.upload_executor = ThreadPoolExecutor(cfg.remote_log_upload_threads,
                                                  thread_name_prefix="lakelog-remote-upload")
        self.metrics.add_source("store", store.stats.snapshot)
        self.metrics.add_source("index_cache", self.index_cache.snapshot)
        self.metrics.add_source("chunk_cache", self.chunk_cache.snapshot)
        self._lock = threading.Lock()
        self._partitions: dict[tuple[str, int], RemotePartition] = {}

    def partition(self, topic: str, partition: int, *, topic_id: str | None = None) -> RemotePartition:
        with self._lock:
            rp = self._partitions.get((topic, partition))
            if rp is None or rp.meta.topic_id != topic_id:
                rp = RemotePartition(self, topic, partition, topic_id)
                self._partitions[(topic, partition)] = rp
            return rp

    def forget(self, topic: str, partition: int) -> None:
        """Drop a partition's state (replica removed, topic deleted); cached bytes age out."""
        with self._lock:
            self._partitions.pop((topic, partition), None)
        self.metrics.forget_partition(topic, partition)

    def sweep_deleted_topics(self, live_topics: Mapping[str, str], *, grace_ms: int, now_ms: int | None = None,
                             max_partitions: int = 100_000) -> DeletedTopicsSweep:
        """Delete the remote data a topic deletion left behind (the store was down through every
        attempt of the node that handled it): the segment objects of every remote partition whose
        topic is not in `live_topics` (name -> topic id, the cluster metadata), or whose manifest
        belongs to another incarnation of that name (a topic deleted and created again), once no
        object of the partition has changed for `grace_ms`.

        Each such partition goes through `delete_all` (tombstone manifest, then its objects), as a
        topic deletion does. Manifests are never deleted: a tombstone fences the old incarnation's
        writers and is what a new incarnation of the name takes over. At most `max_partitions`
        partition directories are examined. Errors are collected, not raised (a later sweep
        retries). Blocking: call it from a background thread.
        """
        now = int(self.clock() * 1000) if now_ms is None else now_ms
        report = DeletedTopicsSweep()
        for d in self.store.list_prefixes("")[:max_partitions]:
            parsed = parse_partition_dir(d.rstrip("/"))
            if parsed is None:
                continue  # not a partition of ours
            topic, partition = parsed
            report.partitions_examined += 1
            live_id = live_topics.get(topic)
            try:
                objects = self.store.list(d)
                segment_objects = [o for o in objects if parse_segment_file(o.key.rsplit("/", 1)[-1]) is not None]
                if not segment_objects:
                    continue  # a tombstone, or nothing uploaded yet: nothing to delete
                meta = ManifestStore(self.store, topic, partition,
                                     max_attempts=self.config.remote_log_metadata_commit_max_attempts)
                m = meta.load()
                if live_id is not None and (m.topic_id is None or m.topic_id == live_id):
                    continue  # the live topic's data (or not provably another incarnation's)
                if max(o.last_modified_ms for o in objects) > now - grace_ms:
                    report.too_recent.append(d)
                    continue
                rp = RemotePartition(self, topic, partition, m.topic_id)
                report.objects_deleted += rp.delete_all(now_ms=now)
                report.deleted.append(d)
                logger.warning("deleted the remote data of %s (topic id %s), left behind by a topic deletion",
                               d.rstrip("/"), m.topic_id)
            except TieringError as e:
                report.errors.append(f"{d}: {e}")
        return report

    def metrics_snapshot(self) -> dict:
        return self.metrics.snapshot()

    def close(self) -> None:
        self.fetch_executor.shutdown(wait=True, cancel_futures=True)
        self.upload_executor.shutdown(wait=True)  # an uploader waits on its tasks: let them end
        # Queued prefetches run (they are bounded): a cancelled one would leave its waiters hanging.
        self.prefetch_executor.shutdown(wait=True)
        self.store.close()

    def __enter__(self) -> "RemoteTier":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
