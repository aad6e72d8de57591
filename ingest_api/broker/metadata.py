"""A node's data directory identity (`meta.properties`) and the topic view the admin API renders.

`<log.dirs>/meta.properties` holds `version=1`, `cluster.id` and `node.id`, as a Kafka data
directory does; a node refuses a directory that belongs to another node id or another cluster.
Written crash-safely (temp file, fsync, rename, fsync dir).

Topic metadata itself lives in the replicated cluster metadata log (`ingest_api/cluster/`);
`TopicMetadata` is the read-only view of one topic the routers use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakelog.infra.config import ConfigError
from lakelog.logstore.errors import UnsupportedFormatVersionError
from lakelog.logstore.fileutil import atomic_write

META_PROPERTIES = "meta.properties"


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


def load_or_create_meta_properties(data_dir: Path, node_id: int, cluster_id: str) -> str:
    """Return the cluster id, creating `meta.properties` with `cluster_id` on first start.

    A directory formatted for another cluster is refused, as Kafka refuses it."""
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
        if props.get("cluster.id") != cluster_id:
            raise ConfigError(f"data directory {data_dir} belongs to cluster {props.get('cluster.id')}, "
                              f"not {cluster_id}")
        return props["cluster.id"]
    data_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(path, f"version=1\ncluster.id={cluster_id}\nnode.id={node_id}\n".encode("utf-8"))
    return cluster_id
