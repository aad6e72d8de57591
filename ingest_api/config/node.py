"""The ingest node's configuration: Kafka's broker key names, declared once, loaded from TOML.

A `node.toml` holds flat dotted keys or tables that flatten to them — these are equivalent:

    "log.dirs" = "./data"            |   [log]
    "node.id" = 1                    |   dirs = "./data"

Broker-level `log.*` keys give the defaults of the topic keys (`log.segment.bytes` ->
`segment.bytes`), as in Kafka; a topic's own configs override them. They are not declared here:
each is derived from its topic key (`infra.config.broker_synonyms`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlsplit

from lakelog.infra.config import (
    DAY_MS,
    INT_MAX,
    LOG_CONFIG,
    ConfigDef,
    ConfigError,
    LogConfig,
    TypedConfig,
    broker_synonyms,
    synonym_map,
)
from lakelog.ingest_api.config.console_sql import CONSOLE_SQL_CONFIG
from lakelog.ingest_api.config.groups import GROUP_CONFIG
from lakelog.ingest_api.config.security import SECURITY_CONFIG
from lakelog.ingest_api.config.transactions import TRANSACTION_CONFIG
from lakelog.ingest_api.config.kafka import KAFKA_CONFIG, KafkaListener, parse_listeners, split_listeners
from lakelog.tiering.config import TIERING_CONFIG

NODE_CONFIG = (
    ConfigDef()
    .define("node.id", int, 1, "This node's id, unique in the cluster.", min=0, max=INT_MAX)
    .define("listeners", str, "http://127.0.0.1:8082",
            "Where the node listens, comma-separated: one http://host:port (or https://) for the HTTP "
            "API, and any Kafka listeners as NAME://host:port (NAME in listener.security.protocol.map, "
            "e.g. PLAINTEXT://127.0.0.1:9092).")
    .define("advertised.listeners", str, "",
            "The addresses clients are told to use, in the form of listeners (the HTTP entry, and one "
            "per Kafka listener name); empty = listeners.")
    .define("log.dirs", str, "./data", "Directory holding the partition logs and node metadata.")
    .define("num.partitions", int, 1, "Partitions of a topic created without partitions_count.", min=1, max=100000)
    .define("default.replication.factor", int, 1, "Replicas of a topic created without replication_factor.",
            min=1, max=32)
    .define("max.request.bytes", int, 16 * 1024 * 1024, "Largest HTTP request body accepted.", min=1024,
            max=INT_MAX, unit="bytes")
    .define("max.records.per.request", int, 10000, "Most records in one JSON produce request.", min=1, max=10**7)
    .define("max.partitions.per.topic", int, 10000, "Most partitions a topic may have.", min=1, max=100000)
    .define("fetch.max.wait.ms", int, 30000, "Upper bound on a fetch's long-poll `timeout`.", min=0,
            max=10 * 60 * 1000, unit="ms")
    .define("fetch.max.bytes", int, 50 * 1024 * 1024, "Upper bound on a fetch's `max_bytes`.", min=1024,
            max=INT_MAX, unit="bytes")
    .define("fetch.default.bytes", int, 1024 * 1024, "A fetch's `max_bytes` when the client gives none.",
            min=1, max=INT_MAX, unit="bytes")
    .define("request.timeout.ms", int, 30000, "How long acks=all produce waits for the high watermark.",
            min=1, max=10 * 60 * 1000, unit="ms")
    .define("log.cleaner.enable", bool, True, "Run the background cleaner (retention and compaction).")
    .define("log.cleaner.backoff.ms", int, 15000, "Sleep between cleaner passes.", min=10, max=60 * 60 * 1000,
            unit="ms")
    .define("log.flush.scheduler.interval.ms", int, 1000, "How often flush.ms is checked.", min=10,
            max=DAY_MS, unit="ms")
    .define("shutdown.timeout.ms", int, 10000, "Most time a clean shutdown may take.", min=100,
            max=10 * 60 * 1000, unit="ms")
    # Cluster membership and the controller quorum.
    .define("cluster.id", str, "", "The cluster's id; empty = derived from controller.quorum.voters.")
    .define("cluster.secret", str, "",
            "Shared secret (at least 16 bytes) that signs internal traffic (Raft, replica fetch, forwarding); "
            "prefer cluster.secret.file. Required with authentication or the authorizer on, and on "
            "multi-node clusters; a lone node without security makes and keeps its own.")
    .define("controller.quorum.voters", str, "",
            "Controller voters as id@host:port,...; empty = this node alone.")
    .define("controller.quorum.election.timeout.ms", int, 1000, "Raft election timeout (randomised up to 2x).",
            min=50, max=60000, unit="ms")
    .define("controller.quorum.tick.ms", int, 50, "The Raft clock's tick.", min=5, max=1000, unit="ms")
    .define("controller.quorum.append.max.entries", int, 512,
            "Group commit of the metadata log: at most this many queued events (proposals, Raft messages) "
            "are stepped together and their entries written with one fsync; 1 = one entry per append.",
            min=1, max=10000)
    .define("controller.quorum.request.timeout.ms", int, 500,
            "One Raft message POST to a voter; an unanswered one is dropped (Raft resends).", min=1,
            max=60000, unit="ms")
    .define("controller.quorum.message.max.bytes", int, 16 * 1024 * 1024,
            "Largest Raft message body sent or received (a snapshot travels whole); must carry a full "
            "AppendEntries of controller.quorum.append.request.max.bytes.", min=64 * 1024, max=1 << 30,
            unit="bytes")
    .define("controller.quorum.append.request.max.entries", int, 512,
            "Entries in one AppendEntries (controller.quorum.append.request.max.bytes bounds it too).",
            min=1, max=100000)
    .define("controller.quorum.append.request.max.bytes", int, 1024 * 1024,
            "Payload bytes in one AppendEntries.", min=1024, max=256 * 1024 * 1024, unit="bytes")
    .define("controller.quorum.entry.max.bytes", int, 1024 * 1024,
            "Largest metadata log entry (one proposal).", min=1024, max=256 * 1024 * 1024, unit="bytes")
    .define("controller.quorum.peer.max.inflight.sends", int, 8,
            "Raft sends to one slow peer beyond this are dropped (Raft resends).", min=1, max=1024)
    .define("controller.quorum.max.pending.events", int, 4096,
            "Bound of a voter's inbox: received messages, ticks and proposals.", min=16, max=1 << 20)
    .define("metadata.fetch.max.entries", int, 1000,
            "Metadata log entries in one answer to a broker's metadata fetch.", min=1, max=100000)
    .define("metadata.fetch.max.bytes", int, 4 * 1024 * 1024,
            "Payload bytes in one answer to a metadata fetch (at least one entry).", min=1024,
            max=256 * 1024 * 1024, unit="bytes")
    .define("metadata.fetch.max.wait.ms", int, 5000, "Longest long-poll of a metadata fetch.", min=0,
            max=60000, unit="ms")
    .define("controller.tick.ms", int, 200, "How often the active controller checks sessions and elections.",
            min=10, max=60000, unit="ms")
    .define("metadata.log.dir", str, "", "Directory of the metadata log; empty = <log.dirs>/__cluster_metadata-0.")
    .define("metadata.snapshot.interval.entries", int, 1000, "Snapshot the metadata image every N entries.",
            min=10, max=10**7)
    .define("broker.rack", str, "", "This node's rack, for rack-aware replica placement.")
    .define("broker.session.timeout.ms", int, 9000, "A node without a heartbeat for this long is fenced.",
            min=100, max=10 * 60 * 1000, unit="ms")
    .define("broker.heartbeat.interval.ms", int, 2000, "Heartbeats to the controller.", min=10,
            max=60 * 1000, unit="ms")
    .define("controlled.shutdown.enable", bool, True, "Move leaderships away before stopping.")
    .define("controlled.shutdown.timeout.ms", int, 10000, "Most time a controlled shutdown may take.",
            min=0, max=10 * 60 * 1000, unit="ms")
    .define("auto.leader.rebalance.enable", bool, True, "Move leadership back to the preferred replica.")
    .define("leader.imbalance.check.interval.seconds", int, 300, "How often the controller rebalances leaders.",
            min=1, max=7 * 24 * 3600, unit="s")
    # Replication.
    .define("replica.lag.time.max.ms", int, 30000, "A follower not caught up for this long leaves the ISR.",
            min=10, max=DAY_MS, unit="ms")
    .define("replica.fetch.wait.max.ms", int, 500, "Most time a replica fetch waits for data.", min=0,
            max=60 * 1000, unit="ms")
    .define("replica.fetch.max.bytes", int, 1024 * 1024, "Bytes a replica fetch asks per partition.",
            min=1024, max=INT_MAX, unit="bytes")
    .define("replica.fetch.response.max.bytes", int, 10 * 1024 * 1024, "Bytes of one replica fetch response.",
            min=1024, max=INT_MAX, unit="bytes")
    .define("replica.fetch.backoff.ms", int, 1000, "Wait after a failed replica fetch.", min=0,
            max=60 * 1000, unit="ms")
    # The remote tier (topics with remote.storage.enable=true); the other remote.* keys are
    # tiering/config.py's, declared below.
    .define("remote.storage.url", str, "",
            "The remote tier shared by every node: s3://bucket/prefix or file:///path; empty = "
            "file://<log.dirs>/remote-tier (a lone node).")
    .define("remote.log.manager.task.interval.ms", int, 30000,
            "How often a node uploads sealed segments of the partitions it leads, applies remote "
            "retention, and local retention on every replica of tiered topics.", min=10, max=DAY_MS, unit="ms")
    .define("remote.log.manager.thread.pool.size", int, 4,
            "Threads of the remote log manager: how many partitions upload, apply retention and read "
            "manifests at once in each round.", min=1, max=64)
    # The web console (ingest_api/console/): what one download of a range of records may hold.
    .define("console.download.max.records", int, 100_000,
            "Most records the console's message browser downloads as one file (a range across pages).",
            min=1, max=10_000_000)
    .define("console.download.max.bytes", int, 64 * 1024 * 1024,
            "Most bytes of keys and values the console's message browser downloads as one file.",
            min=1024 * 1024, max=1024 * 1024 * 1024, unit="bytes")
)
# Broker-level defaults of the topic keys (`log.segment.bytes` -> `segment.bytes`, and
# `min.insync.replicas` itself), derived from the topic keys' declarations in infra/config.py.
NODE_CONFIG.include(broker_synonyms(LOG_CONFIG))
NODE_CONFIG.include(TIERING_CONFIG)  # the remote tier's library settings (tiering/config.py)
NODE_CONFIG.include(GROUP_CONFIG)  # consumer groups and consumer instances (ingest_api/config/groups.py)
NODE_CONFIG.include(SECURITY_CONFIG)  # authentication, ACLs, TLS, quotas (ingest_api/config/security.py)
NODE_CONFIG.include(CONSOLE_SQL_CONFIG)  # the console's SQL page (ingest_api/http/console_sql.py)
NODE_CONFIG.include(KAFKA_CONFIG)  # the Kafka listener (ingest_api/config/kafka.py)
NODE_CONFIG.include(TRANSACTION_CONFIG)  # the transaction coordinator (ingest_api/config/transactions.py)

#: Broker key -> the topic key it gives the default of.
BROKER_TO_TOPIC = synonym_map(LOG_CONFIG)


class NodeConfig(TypedConfig):
    """One node's validated configuration."""

    DEFINITION = NODE_CONFIG

    @classmethod
    def from_toml(cls, path: str | Path, overrides: Mapping[str, Any] | None = None) -> "NodeConfig":
        try:
            with open(path, "rb") as f:
                raw = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"config file {path} is not valid TOML: {e}") from None
        values = _flatten(raw)
        values.update(overrides or {})
        return cls(values)

    @property
    def http_listener(self) -> str:
        """The HTTP entry of `listeners` (http://host:port or https://host:port)."""
        return split_listeners(self.listeners)[0]

    @property
    def host(self) -> str:
        return _listener(self.http_listener)[0]

    @property
    def port(self) -> int:
        return _listener(self.http_listener)[1]

    @property
    def advertised_url(self) -> str:
        return split_listeners(self.advertised_listeners or self.listeners)[0].rstrip("/")

    @property
    def kafka_listeners(self) -> list[KafkaListener]:
        """The Kafka listeners this node binds (none unless `listeners` names one)."""
        return parse_listeners(self.listeners, self.listener_security_protocol_map)

    @property
    def advertised_kafka_listeners(self) -> list[KafkaListener]:
        """Where clients reach each Kafka listener: its `advertised.listeners` entry, else its bind address."""
        bound = self.kafka_listeners
        told = {lst.name: lst for lst in parse_listeners(self.advertised_listeners, self.listener_security_protocol_map)
                } if self.advertised_listeners else {}
        return [told.get(lst.name, lst) for lst in bound]

    @property
    def advertised_host_port(self) -> tuple[str, int]:
        return _listener(self.advertised_url)

    @property
    def data_dir(self) -> Path:
        return Path(self.log_dirs)

    @property
    def remote_url(self) -> str:
        """The remote tier's URL (the default: a directory next to this node's logs)."""
        return self.remote_storage_url or (self.data_dir.resolve() / "remote-tier").as_uri()

    def tiering_config(self) -> dict[str, Any]:
        """The tiering library's settings (tiering/config.py keys) from this node's config."""
        return {k.name: self.get(k.name) for k in TIERING_CONFIG}

    def topic_defaults(self) -> dict[str, Any]:
        """Topic config defaults derived from the broker's `log.*` keys."""
        return {topic_key: self.get(broker_key) for broker_key, topic_key in BROKER_TO_TOPIC.items()}

    def log_config(self, topic_overrides: Mapping[str, Any] | None = None) -> LogConfig:
        values = self.topic_defaults()
        values.update(topic_overrides or {})
        return LogConfig(values)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _listener(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or not parts.port:
        raise ConfigError(f"listeners: {url!r} must look like http://host:port")
    return parts.hostname, parts.port
