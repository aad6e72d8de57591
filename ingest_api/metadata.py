"""Topic metadata of a single node: a versioned, checksummed JSON image on local disk.

File `<log.dirs>/node-metadata.json`:

    {"version": 1, "crc32c": <CRC-32C of the canonical JSON of "image">, "image": {
        "topics": {"<name>": {"topic_id": "<uuid>", "partitions": N, "replication_factor": R,
                              "configs": {"<topic key>": "<value>", ...},
                              "replicas": [[node ids of partition 0], ...]}}}}

Written crash-safely (temp file, fsync, rename, fsync dir); a reader refuses another version or a
checksum mismatch. `meta.properties` beside it holds `version`, `cluster.id` and `node.id`, as a
Kafka data directory does, and a node refuses a data directory that belongs to another node id.

This store is the metadata of a one-node cluster; the controller quorum replaces it with a
replicated metadata log, behind the same `MetadataStore` methods.

Concurrency: every method takes the store's lock.
"""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infra.config import ConfigError
from ingest_api.errors import TopicExistsError, TopicNotFoundError
from logstore.errors import CorruptRecordError, UnsupportedFormatVersionError
from logstore.fileutil import atomic_write
from logstore.record_batch import crc32c

METADATA_FILE = "node-metadata.json"
META_PROPERTIES = "meta.properties"
METADATA_VERSION = 1


@dataclass
class TopicMetadata:
    name: str
    topic_id: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = field(default_factory=dict)
    replicas: list[list[int]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"topic_id": self.topic_id, "partitions": self.partitions,
                "replication_factor": self.replication_factor, "configs": dict(self.configs),
                "replicas": [list(r) for r in self.replicas]}

    @classmethod
    def from_json(cls, name: str, d: dict[str, Any]) -> "TopicMetadata":
        return cls(name, d["topic_id"], int(d["partitions"]), int(d["replication_factor"]),
                   {str(k): str(v) for k, v in d.get("configs", {}).items()},
                   [list(map(int, r)) for r in d.get("replicas", [])])


def load_or_create_meta_properties(data_dir: Path, node_id: int) -> str:
    """Return the cluster id, creating `meta.properties` on first start."""
    path = data_dir / META_PROPERTIES
    if path.exists():
        props = {}
        for line in path.read_text("utf-8").splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                k, v = line.split("=", 1)
                props[k.strip()] = v.strip()
        if props.get("version") != "1":
            raise UnsupportedFormatVersionError(f"{path} has version {props.get('version')}, expected 1")
        if int(props.get("node.id", -1)) != node_id:
            raise ConfigError(f"data directory {data_dir} belongs to node {props.get('node.id')}, "
                              f"not node.id={node_id}")
        return props["cluster.id"]
    cluster_id = uuid.uuid4().hex[:22]
    data_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(path, f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n".encode("utf-8"))
    return cluster_id


class MetadataStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / METADATA_FILE
        self._lock = threading.RLock()
        self._topics: dict[str, TopicMetadata] = {}
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        try:
            doc = json.loads(self.path.read_bytes())
        except ValueError:
            raise CorruptRecordError("node metadata is not valid JSON", file=str(self.path)) from None
        if doc.get("version") != METADATA_VERSION:
            raise UnsupportedFormatVersionError(f"{self.path} has version {doc.get('version')}")
        image = doc.get("image", {})
        if crc32c(_canonical(image)) != doc.get("crc32c"):
            raise CorruptRecordError("node metadata checksum mismatch", file=str(self.path))
        self._topics = {n: TopicMetadata.from_json(n, t) for n, t in image.get("topics", {}).items()}

    def _persist(self) -> None:
        image = {"topics": {n: t.to_json() for n, t in sorted(self._topics.items())}}
        doc = {"version": METADATA_VERSION, "crc32c": crc32c(_canonical(image)), "image": image}
        atomic_write(self.path, json.dumps(doc, indent=1, sort_keys=True).encode("utf-8"))

    def topics(self) -> list[TopicMetadata]:
        with self._lock:
            return [self._topics[n] for n in sorted(self._topics)]

    def topic(self, name: str) -> TopicMetadata:
        with self._lock:
            t = self._topics.get(name)
            if t is None:
                raise TopicNotFoundError(f"Topic {name} not found.")
            return t

    def has_topic(self, name: str) -> bool:
        with self._lock:
            return name in self._topics

    def create_topic(self, name: str, partitions: int, replication_factor: int,
                     configs: dict[str, str], replicas: list[list[int]]) -> TopicMetadata:
        with self._lock:
            if name in self._topics:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            t = TopicMetadata(name, str(uuid.uuid4()), partitions, replication_factor, dict(configs), replicas)
            self._topics[name] = t
            try:
                self._persist()
            except BaseException:
                del self._topics[name]
                raise
            return t

    def delete_topic(self, name: str) -> TopicMetadata:
        with self._lock:
            t = self.topic(name)
            del self._topics[name]
            try:
                self._persist()
            except BaseException:
                self._topics[name] = t  # memory follows the file: the topic still exists
                raise
            return t

    def set_configs(self, name: str, configs: dict[str, str]) -> TopicMetadata:
        with self._lock:
            t = self.topic(name)
            previous, t.configs = t.configs, dict(configs)
            try:
                self._persist()
            except BaseException:
                t.configs = previous
                raise
            return t


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode("utf-8")
