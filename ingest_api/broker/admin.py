"""Cluster administration from this node: topics, partitions' metadata, brokers, and controller changes.

`AdminService` reads the node's metadata image (topics, partition states, brokers) and changes the
cluster through the active controller: `submit(op, args)` runs a controller request and answers
once this node has applied the change, so the caller reads its own write here. Routers use it for
the v2/v3 topic endpoints and the security admin endpoints (users, API keys, ACLs, quotas).

`MetadataWaiters` lets a caller wait until this node has applied the metadata log up to an index
(woken by the quorum host's `on_applied`).

Concurrency: all on the node's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable

from lakelog.infra.config import LOG_CONFIG, ConfigError
from lakelog.ingest_api.cluster.errors import InvalidReplicationFactorError
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.errors import InvalidRequestError, PartitionNotFoundError, TopicExistsError, TopicNotFoundError
from lakelog.ingest_api.broker.metadata import TopicMetadata
from lakelog.ingest_api.cluster.names import validate_topic_name

log = logging.getLogger("lakelog.node")


@dataclass(frozen=True)
class PartitionStateView:
    """A partition as the metadata image says it is."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


class MetadataWaiters:
    """Futures waiting for the metadata log to be applied up to an index."""

    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self._waiters: list[tuple[int, asyncio.Future]] = []

    def applied(self, index: int) -> None:
        for waiter in list(self._waiters):
            if index >= waiter[0]:
                self._waiters.remove(waiter)
                if not waiter[1].done():
                    waiter[1].set_result(None)

    async def wait(self, index: int, timeout_s: float) -> bool:
        """Wait until this node has applied the metadata log up to `index`; False on timeout."""
        if self.image.last_applied_index >= index:
            return True
        fut = asyncio.get_running_loop().create_future()
        entry = (index, fut)
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            if entry in self._waiters:
                self._waiters.remove(entry)


class AdminService:
    def __init__(self, config: NodeConfig, image: ClusterImage, *, check_ready: Callable[[], None],
                 controller_call: Callable[..., Awaitable[dict[str, Any]]], waiters: MetadataWaiters,
                 check_file_budget: Callable[[int], None],
                 delete_remote_topic: Callable[[str, str, int], Awaitable[None]] | None) -> None:
        self.config = config
        self.image = image
        self.check_ready = check_ready
        self._controller_call = controller_call
        self._waiters = waiters
        self._check_file_budget = check_file_budget
        self._delete_remote_topic = delete_remote_topic

    # ------------------------------------------------------------------ reads

    def topic_metadata(self, name: str) -> TopicMetadata:
        """The topic as the image says (no readiness check: for the node's own components)."""
        t = self.image.topics.get(name)
        if t is None:
            raise TopicNotFoundError(f"Topic {name} not found.")
        return TopicMetadata(name, t.topic_id, len(t.partitions),
                             len(t.partitions[0].replicas) if t.partitions else 0, dict(t.configs),
                             [list(s.replicas) for s in t.partitions])

    def topics(self) -> list[TopicMetadata]:
        self.check_ready()
        return [self.topic_metadata(n) for n in sorted(self.image.topics)]

    def topic(self, name: str) -> TopicMetadata:
        self.check_ready()
        return self.topic_metadata(name)

    def topic_config(self, name: str) -> dict[str, object]:
        """Effective config of a topic: every key with its value (defaults filled in)."""
        return self.config.log_config(self.topic(name).configs).to_dict()

    def partition_state(self, topic: str, partition: int) -> PartitionStateView:
        self.check_ready()
        t = self.image.topics.get(topic)
        if t is None:
            raise TopicNotFoundError(f"Topic {topic} not found.")
        if not 0 <= partition < len(t.partitions):
            raise PartitionNotFoundError(f"Partition {partition} of topic {topic} not found.")
        st = t.partitions[partition]
        return PartitionStateView(topic, partition, st.leader, st.leader_epoch, list(st.replicas), list(st.isr))

    def brokers(self) -> list[Any]:
        self.check_ready()
        return [self.image.brokers[i] for i in sorted(self.image.brokers)]

    # ------------------------------------------------------------------ changes

    async def submit(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run a controller request; answer once this node has applied it (the caller reads its own write)."""
        res = await self._controller_call(op, args)
        await self._waiters.wait(int(res.get("metadata_offset", 0)), self.config.request_timeout_ms / 1000)
        return res

    def _live_brokers(self) -> int:
        return max(1, sum(1 for b in self.image.brokers.values() if not b.fenced))

    async def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                           configs: dict[str, str] | None = None, *, validate_only: bool = False) -> TopicMetadata:
        """Create a topic; with `validate_only`, run every check and create nothing (Kafka's
        CreateTopics validateOnly): the answer describes the topic as it would be."""
        self.check_ready()
        validate_topic_name(name)
        partitions = self.config.num_partitions if partitions is None else partitions
        rf = self.config.default_replication_factor if replication_factor is None else replication_factor
        if not 1 <= partitions <= self.config.max_partitions_per_topic:
            raise InvalidRequestError(f"partitions_count must be between 1 and {self.config.max_partitions_per_topic}")
        configs = self._validated_configs(configs or {})
        # Refuse up front a topic whose share of logs would not fit this node's open-file limit
        # (placement spreads replicas evenly, so every node gets about the same share).
        live = self._live_brokers()
        self._check_file_budget(-(-partitions * min(rf, live) // live))
        if validate_only:
            if name in self.image.topics:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            if rf > live:  # what the controller's placement would refuse
                raise InvalidReplicationFactorError(
                    f"replication factor {rf} is larger than the {live} available broker(s)")
            return TopicMetadata(name, "", partitions, rf, configs, [])
        await self.submit("create_topic", {"name": name, "partitions": partitions, "replication_factor": rf,
                                           "configs": configs})
        log.info("created topic %s with %d partition(s), replication factor %d", name, partitions, rf)
        return self.topic_metadata(name)

    def _validated_configs(self, configs: dict[str, str]) -> dict[str, str]:
        for name in configs:
            if name not in LOG_CONFIG.keys:
                raise ConfigError(f"unknown topic config {name!r}")
        self.config.log_config(configs)  # raises on a bad value
        # A tiered compacted topic is compacted by the Spark job over the remote tier; the local
        # cleaner leaves its hot tail alone (compaction/cleaner.py).
        return {k: str(v) for k, v in configs.items()}

    async def delete_topic(self, name: str) -> None:
        """Delete a topic. The node that handled the request (after applying the deletion) also
        deletes the topic's remote data, when the topic was tiered."""
        self.check_ready()
        meta = self.topic_metadata(name)
        await self.submit("delete_topic", {"name": name})
        log.info("deleted topic %s", name)
        if self._delete_remote_topic is not None and self.config.log_config(meta.configs).remote_storage_enable:
            await self._delete_remote_topic(name, meta.topic_id, meta.partitions)

    async def alter_topic_configs(self, name: str, set_configs: dict[str, str],
                                  delete: Iterable[str] = ()) -> TopicMetadata:
        self.check_ready()
        topic = self.topic_metadata(name)
        merged = dict(topic.configs)
        merged.update({k: str(v) for k, v in set_configs.items()})
        for k in delete:
            merged.pop(k, None)
        merged = self._validated_configs(merged)
        await self.submit("alter_configs", {"name": name, "configs": merged})
        return self.topic_metadata(name)

    async def create_partitions(self, name: str, total: int) -> TopicMetadata:
        """Grow a topic to `total` partitions (never shrinks; Kafka's `--alter --partitions`). Keyed
        records may map to other partitions afterwards; consumer groups subscribed to the topic rebalance."""
        self.check_ready()
        topic = self.topic_metadata(name)
        if topic.partitions < total <= self.config.max_partitions_per_topic:
            live = self._live_brokers()
            self._check_file_budget(-(-(total - topic.partitions) * min(topic.replication_factor, live) // live))
        await self.submit("create_partitions", {"name": name, "total": total})
        log.info("topic %s now has %d partitions", name, total)
        return self.topic_metadata(name)
