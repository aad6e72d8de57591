"""Topic descriptors in the remote tier (`_topics/<topic>.json`), written by the nodes for the jobs.

Layout: canonical JSON `{"crc32c": <CRC-32C of the canonical JSON of "topic">, "topic": {"name",
"topic_id", "partitions", "configs": {key: value}}, "version": 1}`. A reader refuses another
version or a CRC mismatch (RemoteCorruptionError).

The leader of a tiered topic's partition 0 publishes it when the topic's metadata changes, so
Spark jobs over the remote tier know a topic's configs (cleanup.policy, retention, index
interval, value.schema) without reaching the cluster. Writes are plain PUTs of whole objects:
a reader sees the old or the new descriptor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from lakelog.logstore.record_batch import crc32c
from lakelog.tiering.errors import ObjectNotFoundError, RemoteCorruptionError
from lakelog.tiering.store import ObjectStore

TOPICS_DIR = "_topics"


@dataclass(frozen=True, slots=True)
class TopicDescriptor:
    """What the nodes publish about a tiered topic (`_topics/<topic>.json`, version 1)."""

    name: str
    topic_id: str | None
    partitions: int
    configs: dict[str, str]

    def config(self, name: str, default: str | None = None) -> str | None:
        return self.configs.get(name, default)


def topic_descriptor_key(topic: str) -> str:
    return f"{TOPICS_DIR}/{topic}.json"


def encode_topic_descriptor(d: TopicDescriptor) -> bytes:
    body = {"name": d.name, "topic_id": d.topic_id, "partitions": d.partitions,
            "configs": dict(sorted(d.configs.items()))}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return json.dumps({"version": 1, "crc32c": crc32c(canonical), "topic": body},
                      sort_keys=True, separators=(",", ":")).encode()


def decode_topic_descriptor(data: bytes, key: str = "") -> TopicDescriptor:
    try:
        doc = json.loads(data)
        if doc.get("version") != 1:
            raise ValueError(f"unsupported version {doc.get('version')!r}")
        body = doc["topic"]
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        if crc32c(canonical) != doc["crc32c"]:
            raise ValueError("CRC-32C mismatch")
        return TopicDescriptor(str(body["name"]), body.get("topic_id"), int(body["partitions"]),
                               {str(k): str(v) for k, v in body["configs"].items()})
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise RemoteCorruptionError(f"topic descriptor {key}: {e}", key=key) from None


def read_topic_descriptor(store: ObjectStore, topic: str) -> TopicDescriptor | None:
    key = topic_descriptor_key(topic)
    try:
        data, _ = store.get(key)
    except ObjectNotFoundError:
        return None
    return decode_topic_descriptor(data, key)


def write_topic_descriptor(store: ObjectStore, d: TopicDescriptor) -> bool:
    """Publish `d` unless the stored descriptor already says the same; True if written."""
    if read_topic_descriptor(store, d.name) == d:
        return False
    store.put(topic_descriptor_key(d.name), encode_topic_descriptor(d))
    return True


