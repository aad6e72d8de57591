"""The active controller's topics: create, grow, alter and delete them.

`TopicManager` is the part of the controller (controller.py) that builds the topic records:
`create_topic` (replicas placed by placement.py over the eligible brokers, the placement offsets
derived from the topic name), `create_partitions` (continuing partition 0's placement pattern),
`delete_topic`, `alter_configs`, and answers `min_insync_replicas`. Changes of a partition's leader,
ISR or replicas are `PartitionReconciler`'s (controller_partitions.py). `find_topic` is the lookup
both use.

Pure, and not thread-safe: calls come from one thread (the controller checks it is active first).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lakelog.ingest_api.cluster.controller_config import MIN_INSYNC_REPLICAS_KEY, ControllerConfig
from lakelog.ingest_api.cluster.errors import InvalidPartitionsError, InvalidTopicIdError
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.image_values import (
    MAX_CONFIG_ENTRIES,
    MAX_CONFIG_KEY_LENGTH,
    MAX_CONFIG_VALUE_LENGTH,
    MAX_TOPIC_ID_LENGTH,
    TopicImage,
    encode_record,
)
from lakelog.ingest_api.cluster.partition_change import LivenessView, fresh_partition
from lakelog.ingest_api.cluster.placement import assign_replicas
from lakelog.ingest_api.errors import InvalidRequestError, RequestTooLargeError, TopicExistsError, TopicNotFoundError
from lakelog.ingest_api.cluster.names import validate_topic_name
from lakelog.logstore.record_batch import crc32c


def find_topic(image: ClusterImage, name: str) -> TopicImage:
    """The topic `name` of the image (TopicNotFoundError if there is none)."""
    t = image.topics.get(name)
    if t is None:
        raise TopicNotFoundError(f"Topic '{name}' not found.")
    return t


class TopicManager:
    """The topic records of the active controller (module doc)."""

    def __init__(self, image: ClusterImage, config: ControllerConfig) -> None:
        self._image = image
        self._config = config

    def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                     configs: Mapping[str, str], topic_id: str, now_ms: int) -> list[dict[str, Any]]:
        """A new topic placed over the eligible brokers; leader = first replica, ISR = replicas."""
        validate_topic_name(name)
        if name in self._image.topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        self._check_topic_id(topic_id)
        partitions = self._config.num_partitions if partitions is None else partitions
        rf = self._config.default_replication_factor if replication_factor is None else replication_factor
        if type(partitions) is not int or not 1 <= partitions <= self._config.max_partitions_per_topic:
            raise InvalidPartitionsError(
                f"partitions must be in [1, {self._config.max_partitions_per_topic}], not {partitions!r}")
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
        t = find_topic(self._image, name)
        current = len(t.partitions)
        if type(total) is not int or not current < total <= self._config.max_partitions_per_topic:
            raise InvalidPartitionsError(
                f"topic '{name}' has {current} partitions; the new count must be in "
                f"({current}, {self._config.max_partitions_per_topic}], not {total!r}")
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
        t = find_topic(self._image, name)
        return [{"type": "delete_topic", "name": name, "topic_id": t.topic_id}]

    def alter_configs(self, name: str, configs: Mapping[str, str]) -> list[dict[str, Any]]:
        """Replace a topic's config overrides with `configs` (keys and values validated by the caller)."""
        t = find_topic(self._image, name)
        configs = _check_configs(configs)
        if configs == t.configs:
            return []
        record = {"type": "alter_configs", "name": name, "topic_id": t.topic_id, "configs": configs}
        self._check_size(record, f"configs of topic {name!r}")
        return [record]

    def min_insync_replicas(self, name: str) -> int:
        """The topic's effective min.insync.replicas (its override, else the controller default)."""
        value = find_topic(self._image, name).configs.get(MIN_INSYNC_REPLICAS_KEY)
        try:
            return int(value) if value is not None else self._config.default_min_insync_replicas
        except ValueError:
            return self._config.default_min_insync_replicas

    def _check_topic_id(self, topic_id: str) -> None:
        if not isinstance(topic_id, str) or not 0 < len(topic_id) <= MAX_TOPIC_ID_LENGTH:
            raise InvalidTopicIdError(f"topic id must be a string of 1..{MAX_TOPIC_ID_LENGTH} characters")
        if any(t.topic_id == topic_id for t in self._image.topics.values()):
            raise InvalidTopicIdError(f"topic id {topic_id} is taken")

    def _check_size(self, record: Mapping[str, Any], what: str) -> None:
        size = len(encode_record(record))
        if size > self._config.max_record_bytes:
            raise RequestTooLargeError(f"{what} takes a {size}-byte metadata record, above the limit of "
                                       f"{self._config.max_record_bytes} bytes")

    def _placement_brokers(self) -> list[tuple[int, str | None]]:
        view = LivenessView(self._image)
        return [(n, reg.rack) for n, reg in sorted(self._image.brokers.items()) if view.eligible(n)]


def _check_configs(configs: Mapping[str, str]) -> dict[str, str]:
    if len(configs) > MAX_CONFIG_ENTRIES:
        raise InvalidRequestError(f"at most {MAX_CONFIG_ENTRIES} config entries")
    for k, v in configs.items():
        if not (isinstance(k, str) and 0 < len(k) <= MAX_CONFIG_KEY_LENGTH
                and isinstance(v, str) and len(v) <= MAX_CONFIG_VALUE_LENGTH):
            raise InvalidRequestError(f"config {k!r} must be a string key with a string value of at most "
                                      f"{MAX_CONFIG_VALUE_LENGTH} characters")
    return dict(configs)
