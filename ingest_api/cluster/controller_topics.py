"""The active controller's topics and partitions: create, alter, delete, ISR changes, reassignments, elections.

`ControllerTopics` is the part of `Controller` (controller.py) that changes topics and partitions:
`create_topic` (placement derived from the topic name), `create_partitions`, `delete_topic`,
`alter_configs`, `min_insync_replicas`, `alter_partition` (a leader's ISR change, a partition
epoch compare-and-swap), `alter_partition_reassignments` (reassignment.py's steps) and
`elect_leaders`.

Pure, and not thread-safe: calls come from one thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from lakelog.ingest_api.cluster import reassignment
from lakelog.ingest_api.cluster.controller_config import MIN_INSYNC_REPLICAS_KEY
from lakelog.ingest_api.cluster.controller_state import ControllerState
from lakelog.ingest_api.cluster.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidIsrError,
    InvalidPartitionsError,
    InvalidUpdateVersionError,
    NotPartitionLeaderError,
)
from lakelog.ingest_api.cluster.image_values import (
    MAX_CONFIG_ENTRIES,
    MAX_CONFIG_KEY_LENGTH,
    MAX_CONFIG_VALUE_LENGTH,
    PartitionState,
)
from lakelog.ingest_api.cluster.partition_change import LivenessView, change_record, fresh_partition
from lakelog.ingest_api.cluster.placement import assign_replicas
from lakelog.ingest_api.errors import InvalidRequestError, PartitionNotFoundError, TopicExistsError
from lakelog.ingest_api.cluster.names import validate_topic_name
from lakelog.logstore.record_batch import crc32c


class ControllerTopics(ControllerState):
    """Topics and partitions of `Controller` (module doc); its fields are made in controller.py."""

    # --- topics --------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                     configs: Mapping[str, str], topic_id: str, now_ms: int) -> list[dict[str, Any]]:
        """A new topic placed over the eligible brokers; leader = first replica, ISR = replicas."""
        self._require_active()
        validate_topic_name(name)
        if name in self.image.topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        self._check_topic_id(topic_id)
        partitions = self.config.num_partitions if partitions is None else partitions
        rf = self.config.default_replication_factor if replication_factor is None else replication_factor
        if type(partitions) is not int or not 1 <= partitions <= self.config.max_partitions_per_topic:
            raise InvalidPartitionsError(
                f"partitions must be in [1, {self.config.max_partitions_per_topic}], not {partitions!r}")
        configs = _check_configs(configs)
        # Kafka draws the start offset at random; a hash of the name is as even and repeatable.
        h = crc32c(name.encode("utf-8"))
        assignment = assign_replicas(self._placement_brokers(), partitions, rf, start_index=h & 0xFFFF,
                                     next_replica_shift=h >> 16)
        record = {"type": "create_topic", "name": name, "topic_id": topic_id, "configs": configs,
                  "partitions": [fresh_partition(replicas).to_dict() for replicas in assignment]}
        self._check_size(record, f"topic {name!r} with {partitions} partitions")
        return [record]

    def create_partitions(self, name: str, total: int) -> list[dict[str, Any]]:
        """Grow a topic to `total` partitions (Kafka's `--alter --partitions`); never shrinks."""
        self._require_active()
        t = self._topic(name)
        current = len(t.partitions)
        if type(total) is not int or not current < total <= self.config.max_partitions_per_topic:
            raise InvalidPartitionsError(
                f"topic '{name}' has {current} partitions; the new count must be in "
                f"({current}, {self.config.max_partitions_per_topic}], not {total!r}")
        brokers = self._placement_brokers()
        ids = sorted(node_id for node_id, _ in brokers)
        # Kafka's addPartitions: continue the pattern from partition 0's preferred leader.
        first = t.partitions[0].preferred_leader
        start = next((i for i, node_id in enumerate(ids) if node_id >= first), 0)
        assignment = assign_replicas(brokers, total - current, len(t.partitions[0].replicas),
                                     start_index=start, next_replica_shift=start, start_partition_id=current)
        record = {"type": "create_partitions", "name": name, "topic_id": t.topic_id,
                  "partitions": [fresh_partition(replicas).to_dict() for replicas in assignment]}
        self._check_size(record, f"{total - current} new partitions of topic {name!r}")
        return [record]

    def delete_topic(self, name: str) -> list[dict[str, Any]]:
        """Delete a topic."""
        self._require_active()
        t = self._topic(name)
        return [{"type": "delete_topic", "name": name, "topic_id": t.topic_id}]

    def alter_configs(self, name: str, configs: Mapping[str, str]) -> list[dict[str, Any]]:
        """Replace a topic's config overrides with `configs` (keys and values validated by the caller)."""
        self._require_active()
        t = self._topic(name)
        configs = _check_configs(configs)
        if configs == t.configs:
            return []
        record = {"type": "alter_configs", "name": name, "topic_id": t.topic_id, "configs": configs}
        self._check_size(record, f"configs of topic {name!r}")
        return [record]

    def min_insync_replicas(self, name: str) -> int:
        """The topic's effective min.insync.replicas (its override, else the controller default)."""
        value = self._topic(name).configs.get(MIN_INSYNC_REPLICAS_KEY)
        try:
            return int(value) if value is not None else self.config.default_min_insync_replicas
        except ValueError:
            return self.config.default_min_insync_replicas

    # --- partitions ----------------------------------------------------------------------------

    def alter_partition(self, node_id: int, broker_epoch: int, topic: str, partition: int,
                        leader_epoch: int, partition_epoch: int, new_isr: Iterable[int]
                        ) -> tuple[list[dict[str, Any]], PartitionState]:
        """A leader's ISR change, a compare-and-swap on (leader epoch, partition epoch).

        Refused unless the requester is the leader of `leader_epoch` (FencedLeaderEpochError,
        NotPartitionLeaderError) and `partition_epoch` is current (InvalidUpdateVersionError); the
        new ISR must hold the leader and only replicas (InvalidIsrError), and every member it adds
        must be eligible (IneligibleReplicaError). Returns the records (none if the ISR is already
        that set) and the resulting partition state.
        """
        self._require_active()
        self._check_broker(node_id, broker_epoch)
        t = self._topic(topic)
        if type(partition) is not int or not 0 <= partition < len(t.partitions):
            raise PartitionNotFoundError(f"Partition {partition} of topic '{topic}' not found.")
        state = t.partitions[partition]
        where = f"{topic}-{partition}"
        if leader_epoch != state.leader_epoch:
            raise FencedLeaderEpochError(
                f"{where}: leader epoch {leader_epoch} is not the current {state.leader_epoch}")
        if state.leader != node_id:
            raise NotPartitionLeaderError(f"{where}: node {node_id} is not the leader (node {state.leader} is)")
        if partition_epoch != state.partition_epoch:
            raise InvalidUpdateVersionError(
                f"{where}: partition epoch {partition_epoch} is not the current {state.partition_epoch}")
        isr = tuple(new_isr)
        if not all(type(r) is int for r in isr) or len(set(isr)) != len(isr):
            raise InvalidIsrError(f"{where}: ISR {list(isr)} must be distinct node ids")
        if node_id not in isr:
            raise InvalidIsrError(f"{where}: ISR {list(isr)} lacks the leader {node_id}")
        if not set(isr) <= set(state.replicas):
            raise InvalidIsrError(f"{where}: ISR {list(isr)} names nodes outside replicas {list(state.replicas)}")
        view = LivenessView(self.image)
        ineligible = [r for r in isr if r not in state.isr and not view.eligible(r)]
        if ineligible:
            raise IneligibleReplicaError(f"{where}: replicas {ineligible} are fenced, shutting down or "
                                         f"unregistered and cannot join the ISR")
        if set(isr) == set(state.isr):
            return [], state
        new = dataclasses.replace(state, isr=isr, partition_epoch=state.partition_epoch + 1)
        preferred = state.replicas[0] if state.replicas else -1
        if preferred != state.leader and preferred in isr and preferred not in state.isr:
            # Each such expansion pushes the rebalance back: after a restart they come in a burst,
            # and the leaderships move once, when it is over, in one tick.
            self._rebalance_due_ms = self._now_ms + self.config.preferred_leader_return_delay_ms
        return self._proposed([change_record(t, partition, state, new)]), new

    def alter_partition_reassignments(self, changes: Iterable[tuple[str, int, list[int] | None]]
                                      ) -> list[dict[str, Any]]:
        """Start, change (a target replica list) or cancel (None) partition reassignments (Kafka's
        AlterPartitionReassignments); all are checked before any record is returned."""
        self._require_active()
        records: list[dict[str, Any]] = []
        seen: set[tuple[str, int]] = set()
        for topic, partition, target in changes:
            t = self._topic(topic)
            if type(partition) is not int or not 0 <= partition < len(t.partitions):
                raise PartitionNotFoundError(f"Partition {partition} of topic '{topic}' not found.")
            where = f"{topic}-{partition}"
            if (topic, partition) in seen:
                raise InvalidRequestError(f"{where} is named twice")
            seen.add((topic, partition))
            state = t.partitions[partition]
            if target is None:
                new = reassignment.cancel(state, where)
            else:
                new = reassignment.start(state, reassignment.check_target(target, self.image.brokers, where))
            if new != state:
                records.append(change_record(t, partition, state, new))
        return self._proposed(records)

    def elect_leaders(self, partitions: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
        """Kafka's ElectLeaders (PREFERRED) for the named partitions: leadership to each one's first
        replica where it is eligible, in the ISR and not leading already (else unchanged)."""
        self._require_active()
        view = LivenessView(self.image)
        records: list[dict[str, Any]] = []
        for topic, partition in partitions:
            t = self._topic(topic)
            if type(partition) is not int or not 0 <= partition < len(t.partitions):
                raise PartitionNotFoundError(f"Partition {partition} of topic '{topic}' not found.")
            state = t.partitions[partition]
            preferred = state.preferred_leader
            if preferred != state.leader and preferred in state.isr and view.eligible(preferred):
                new = dataclasses.replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1,
                                          partition_epoch=state.partition_epoch + 1)
                records.append(change_record(t, partition, state, new))
        return self._proposed(records)


def _check_configs(configs: Mapping[str, str]) -> dict[str, str]:
    if len(configs) > MAX_CONFIG_ENTRIES:
        raise InvalidRequestError(f"at most {MAX_CONFIG_ENTRIES} config entries")
    for k, v in configs.items():
        if not (isinstance(k, str) and 0 < len(k) <= MAX_CONFIG_KEY_LENGTH
                and isinstance(v, str) and len(v) <= MAX_CONFIG_VALUE_LENGTH):
            raise InvalidRequestError(f"config {k!r} must be a string key with a string value of at most "
                                      f"{MAX_CONFIG_VALUE_LENGTH} characters")
    return dict(configs)
