"""The ingest node's logic, independent of HTTP: topics, produce, fetch, offsets.

Routers call these methods and translate errors (see errors.py); tests drive the class directly.

Lifecycle: `start()` opens every hosted partition log (recovering them after a crash) and starts
the background tasks (flush scheduler, cleaner); until then `ready` is False and the API answers
503. `stop()` wakes waiting fetches, stops the tasks and closes the logs cleanly.

Concurrency: methods may be called from the event loop and from worker threads; topic changes
are serialised by the node's lock, appends and reads by each partition log's lock.
"""

from __future__ import annotations

import logging
import os
import resource
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Iterable

from compaction.cleaner import LogCleaner
from infra.config import LOG_CONFIG, ConfigError
from ingest_api.config import NodeConfig
from ingest_api.errors import (
    InvalidRequestError,
    NotReadyError,
    PartitionNotFoundError,
    RequestTooLargeError,
    TopicExistsError,
)
from ingest_api.metadata import MetadataStore, TopicMetadata, load_or_create_meta_properties
from ingest_api.names import validate_topic_name
from ingest_api.partition import Partition, PartitionKey
from ingest_api.partitioner import StickyPartitioner
from logstore.log import AppendInfo, FetchResult, PartitionLog
from logstore.record_batch import Record, build_batch

log = logging.getLogger("lakelog.node")

#: Open files a partition's log holds (the active segment's .log, .index, .timeindex).
FILES_PER_PARTITION = 3


@dataclass(frozen=True)
class ProduceRecord:
    """One record of a JSON / binary produce request, already turned into bytes."""

    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True)
class ProduceResult:
    partition: int
    offset: int


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.node_id: int = config.node_id
        self.data_dir = config.data_dir
        self.cluster_id = ""
        self.metadata: MetadataStore | None = None
        self._partitions: dict[PartitionKey, Partition] = {}
        self._lock = threading.RLock()
        self._ready = False
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self.cleaner = LogCleaner(interval_ms=config.log_cleaner_backoff_ms) if config.log_cleaner_enable else None
        self.started_at = time.time()

    # ------------------------------------------------------------------ lifecycle

    @property
    def ready(self) -> bool:
        return self._ready

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = load_or_create_meta_properties(self.data_dir, self.node_id)
        self.metadata = MetadataStore(self.data_dir)
        for topic in self.metadata.topics():
            for p in range(topic.partitions):
                self._open_partition(topic, p)
        self._start_background(self._flush_loop, "flush-scheduler")
        if self.cleaner is not None:
            self.cleaner.start()
        self._ready = True
        log.info("node %s ready: cluster %s, %d partition(s)", self.node_id, self.cluster_id, len(self._partitions))

    def stop(self) -> None:
        self._ready = False
        self._stopping.set()
        with self._lock:
            partitions = list(self._partitions.values())
        for p in partitions:
            p.wake_all()
        deadline = time.monotonic() + self.config.shutdown_timeout_ms / 1000
        if self.cleaner is not None:
            self.cleaner.stop(max(0.1, deadline - time.monotonic()))
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        for p in partitions:
            p.log.close()
        log.info("node %s stopped cleanly", self.node_id)

    def _start_background(self, target, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _flush_loop(self) -> None:
        interval = self.config.log_flush_scheduler_interval_ms / 1000
        while not self._stopping.wait(interval):
            for p in self.partitions():
                try:
                    p.log.flush_if_due()
                except Exception:  # a closed log during deletion; the next pass moves on
                    log.exception("flush of %s failed", p.key)

    def check_ready(self) -> None:
        if not self._ready:
            raise NotReadyError("node is not ready")

    # ------------------------------------------------------------------ topics

    def _open_partition(self, topic: TopicMetadata, p: int) -> Partition:
        key = PartitionKey(topic.name, p)
        plog = PartitionLog(self.data_dir / f"{topic.name}-{p}", self.config.log_config(topic.configs))
        if not plog.recovery.clean_shutdown:
            log.warning("partition %s recovered: %s", key, plog.recovery)
        partition = Partition(key, plog, self.node_id, leader_epoch=max(plog.latest_epoch, 0))
        self._partitions[key] = partition
        if self.cleaner is not None:
            self.cleaner.register(plog, lambda: partition.high_watermark)
        return partition

    def topics(self) -> list[TopicMetadata]:
        self.check_ready()
        return self.metadata.topics()  # type: ignore[union-attr]

    def topic(self, name: str) -> TopicMetadata:
        self.check_ready()
        return self.metadata.topic(name)  # type: ignore[union-attr]

    def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                     configs: dict[str, str] | None = None) -> TopicMetadata:
        self.check_ready()
        validate_topic_name(name)
        partitions = self.config.num_partitions if partitions is None else partitions
        rf = self.config.default_replication_factor if replication_factor is None else replication_factor
        if not 1 <= partitions <= self.config.max_partitions_per_topic:
            raise InvalidRequestError(f"partitions_count must be between 1 and {self.config.max_partitions_per_topic}")
        if rf != 1:
            raise InvalidRequestError(f"replication_factor {rf} is larger than the 1 available node(s)")
        configs = self._validated_configs(configs or {})
        with self._lock:
            if self.metadata.has_topic(name):  # type: ignore[union-attr]
                raise TopicExistsError(f"Topic '{name}' already exists.")
            self._check_file_budget(partitions)
            topic = TopicMetadata(name, "", partitions, rf, configs, [[self.node_id] for _ in range(partitions)])
            opened: list[Partition] = []
            try:
                # Open every log before the topic is recorded: a failure leaves no half-made topic.
                for p in range(partitions):
                    opened.append(self._open_partition(topic, p))
                topic = self.metadata.create_topic(name, partitions, rf, configs,  # type: ignore[union-attr]
                                                   topic.replicas)
            except BaseException:
                for part in opened:
                    self._partitions.pop(part.key, None)
                    if self.cleaner is not None:
                        self.cleaner.unregister(part.log)
                    part.log.delete()
                raise
        log.info("created topic %s with %d partition(s)", name, partitions)
        return topic

    def _check_file_budget(self, new_partitions: int) -> None:
        """Refuse a topic whose logs would not fit in the process's open-file limit."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return
        try:
            in_use = len(os.listdir("/proc/self/fd"))
        except OSError:
            in_use = 0
        # Each partition keeps its active segment's .log, .index and .timeindex open; keep a
        # quarter of the limit for sockets, sealed segments and checkpoints.
        needed = new_partitions * FILES_PER_PARTITION
        if in_use + needed > soft * 3 // 4:
            raise InvalidRequestError(f"{new_partitions} more partition(s) need about {needed} open files; this node "
                                      f"uses {in_use} of its limit of {soft}: raise the limit (ulimit -n) or use "
                                      f"fewer partitions")

    def _validated_configs(self, configs: dict[str, str]) -> dict[str, str]:
        for name in configs:
            if name not in LOG_CONFIG.keys:
                raise ConfigError(f"unknown topic config {name!r}")
        self.config.log_config(configs)  # raises on a bad value
        return {k: str(v) for k, v in configs.items()}

    def delete_topic(self, name: str) -> None:
        self.check_ready()
        with self._lock:
            topic = self.metadata.delete_topic(name)  # type: ignore[union-attr]
            for p in range(topic.partitions):
                partition = self._partitions.pop(PartitionKey(name, p), None)
                if partition is not None:
                    partition.wake_all()
                    if self.cleaner is not None:
                        self.cleaner.unregister(partition.log)
                    partition.log.delete()
                else:
                    shutil.rmtree(self.data_dir / f"{name}-{p}", ignore_errors=True)
        log.info("deleted topic %s", name)

    def alter_topic_configs(self, name: str, set_configs: dict[str, str], delete: Iterable[str] = ()) -> TopicMetadata:
        self.check_ready()
        with self._lock:
            topic = self.metadata.topic(name)  # type: ignore[union-attr]
            merged = dict(topic.configs)
            merged.update({k: str(v) for k, v in set_configs.items()})
            for k in delete:
                merged.pop(k, None)
            merged = self._validated_configs(merged)
            topic = self.metadata.set_configs(name, merged)  # type: ignore[union-attr]
            new_config = self.config.log_config(merged)
            for p in range(topic.partitions):
                self._partitions[PartitionKey(name, p)].log.update_config(new_config)
            return topic

    def topic_config(self, name: str) -> dict[str, object]:
        """Effective config of a topic: every key with its value (defaults filled in)."""
        topic = self.topic(name)
        return self.config.log_config(topic.configs).to_dict()

    def partitions(self) -> list[Partition]:
        with self._lock:
            return list(self._partitions.values())

    def partition(self, topic: str, partition: int) -> Partition:
        self.check_ready()
        meta = self.metadata.topic(topic)  # type: ignore[union-attr]
        if not 0 <= partition < meta.partitions:
            raise PartitionNotFoundError(f"Partition {partition} of topic {topic} not found.")
        with self._lock:
            return self._partitions[PartitionKey(topic, partition)]

    # ------------------------------------------------------------------ produce

    def produce_records(self, topic: str, records: list[ProduceRecord], *, partition: int | None = None,
                        timestamp_ms: int | None = None) -> list[ProduceResult]:
        """Append JSON / binary records: one batch per target partition; results in request order."""
        self.check_ready()
        meta = self.metadata.topic(topic)  # type: ignore[union-attr]
        if len(records) > self.config.max_records_per_request:
            raise RequestTooLargeError(f"{len(records)} records exceed max.records.per.request="
                                       f"{self.config.max_records_per_request}")
        if not records:
            raise InvalidRequestError("records must not be empty")
        now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        sticky = StickyPartitioner(meta.partitions)
        targets: list[int] = []
        for r in records:
            p = partition if partition is not None else (r.partition if r.partition is not None else sticky.partition(r.key))
            if not 0 <= p < meta.partitions:
                raise PartitionNotFoundError(f"Partition {p} of topic {topic} not found.")
            targets.append(p)
        by_partition: dict[int, list[int]] = {}
        for i, p in enumerate(targets):
            by_partition.setdefault(p, []).append(i)
        offsets = [0] * len(records)
        for p, idxs in by_partition.items():
            batch = build_batch([Record(j, now, records[i].key, records[i].value, records[i].headers)
                                 for j, i in enumerate(idxs)])
            info = self.partition(topic, p).append_as_leader(batch)
            for j, i in enumerate(idxs):
                offsets[i] = info.first_offset + j
        return [ProduceResult(p, o) for p, o in zip(targets, offsets)]

    def produce_batches(self, topic: str, partition: int, data: bytes) -> AppendInfo:
        """Append RecordBatch v2 bytes as received (after validation)."""
        return self.partition(topic, partition).append_as_leader(data)

    # ------------------------------------------------------------------ fetch and offsets

    def fetch(self, topic: str, partition: int, offset: int, max_bytes: int) -> FetchResult:
        return self.partition(topic, partition).read(offset, max_bytes)

    async def fetch_wait(self, topic: str, partition: int, offset: int, max_bytes: int,
                         timeout_ms: int) -> FetchResult:
        """Fetch; if nothing is there yet, wait up to `timeout_ms` (bounded by fetch.max.wait.ms)."""
        p = self.partition(topic, partition)
        result = p.read(offset, max_bytes)
        if len(result.records) or timeout_ms <= 0:
            return result
        await p.wait_for_data(offset, min(timeout_ms, self.config.fetch_max_wait_ms) / 1000)
        # Look the partition up again: the topic may have been deleted (404) while we waited.
        return self.partition(topic, partition).read(offset, max_bytes)

    def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(beginning offset, end offset) as a consumer sees them: log start offset and HW."""
        p = self.partition(topic, partition)
        return p.log_start_offset, p.high_watermark

    def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> tuple[int, int] | None:
        p = self.partition(topic, partition)
        found = p.log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= p.high_watermark:
            return None
        return found
