"""`AdminClient`: a cluster's topics, topic configs and consumer groups, over a node's HTTP API.

    from lakelog.client import AdminClient

    with AdminClient("http://127.0.0.1:8082") as admin:
        admin.create_topic("orders", partitions=3, replication_factor=1, configs={"retention.ms": "86400000"})
        admin.list_topics()                          # ["orders", ...]
        admin.describe_topic("orders")               # TopicDescription(name, partitions, replication_factor, ...)
        admin.alter_configs("orders", {"cleanup.policy": "compact"}, delete=["retention.ms"])
        admin.describe_configs("orders")             # {"cleanup.policy": "compact", ...}
        admin.list_groups(); admin.describe_group("billing")
        admin.delete_topic("orders")

The calls are those of Kafka's `Admin` for the same things, made through the node's REST API (v3 for
topics and configs, `/groups` for groups) by `LakelogClient` (client/node_client.py), the same HTTP
calls the `lakelog topics` and `lakelog groups` commands make. A refusal raises the node's error as
`RequestFailedError` (HTTP status and Confluent `error_code`, client/node_client.py); an unreachable
node, `NodeUnreachableError`.

Concurrency: one AdminClient per thread (it holds one HTTP connection pool).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import httpx

from lakelog.client.node_client import (
    CONNECT_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    ClientSecurity,
    LakelogClient,
    PartitionReplicas,
)


@dataclass(frozen=True)
class TopicDescription:
    """A topic as the cluster describes it: leader, replicas and ISR per partition."""

    name: str
    topic_id: str | None
    internal: bool
    replication_factor: int
    partitions: list[PartitionReplicas]


@dataclass(frozen=True)
class GroupDescription:
    """A consumer group: its state and members, and per partition the committed offset, end and lag.

    `members`: `{"member_id", "client_id", "host", "assignment": [{"topic", "partition"}]}` each;
    `partitions`: `{"topic", "partition", "current_offset", "log_end_offset", "lag", "consumer_id",
    "client_id", "host", "metadata"}` each (None where there is nothing: no commit, no member).
    """

    group_id: str
    state: str
    partition_assignor: str | None
    generation: int
    coordinator: Any
    members: list[dict[str, Any]]
    partitions: list[dict[str, Any]]


class AdminClient:
    """Topics, configs and consumer groups of the cluster a node belongs to. Use as a context manager,
    or call `close()`."""

    def __init__(self, url: str | None = None, *, security: ClientSecurity | None = None,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, timeout_s: float = REQUEST_TIMEOUT_S,
                 transport: httpx.BaseTransport | None = None) -> None:
        """`url`: a node's base URL (`$LAKELOG_URL`, else http://127.0.0.1:8082); `security`:
        credentials and TLS files (`ClientSecurity.from_env()` reads them from the environment)."""
        self._node = LakelogClient(url, security=security, connect_timeout_s=connect_timeout_s,
                                   timeout_s=timeout_s, transport=transport)

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._node.close()

    @property
    def url(self) -> str:
        return self._node.url

    # ------------------------------------------------------------------ topics

    def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                     configs: Mapping[str, str] | None = None) -> None:
        """Create a topic; partitions and replication factor default to the cluster's `num.partitions`
        and `default.replication.factor`. TopicExistsError's code (409) if it exists."""
        self._node.create_topic(name, partitions, replication_factor, dict(configs or {}))

    def list_topics(self) -> list[str]:
        """The names of the cluster's topics, sorted."""
        return sorted(str(t["topic_name"]) for t in self._node.list_topics())

    def describe_topic(self, name: str) -> TopicDescription:
        doc = self._node.get_topic(name)
        return TopicDescription(name=str(doc["topic_name"]), topic_id=doc.get("topic_id"),
                                internal=bool(doc.get("is_internal", False)),
                                replication_factor=int(doc.get("replication_factor", 0)),
                                partitions=self._node.partition_replicas(name))

    def delete_topic(self, name: str) -> None:
        self._node.delete_topic(name)

    # ------------------------------------------------------------------ configs

    def describe_configs(self, topic: str) -> dict[str, str | None]:
        """Every config of a topic with its value (the topic's own or the default it takes)."""
        return {str(c["name"]): c.get("value") for c in self._node.topic_configs(topic)}

    def alter_configs(self, topic: str, set_configs: Mapping[str, str] | None = None,
                      delete: Iterable[str] = ()) -> None:
        """Set some configs of a topic and return others to their defaults, in one change."""
        self._node.alter_topic_configs(topic, dict(set_configs or {}), list(delete))

    # ------------------------------------------------------------------ consumer groups

    def list_groups(self) -> list[str]:
        """The ids of the cluster's consumer groups, sorted."""
        return sorted(self._node.list_groups())

    def describe_group(self, group: str) -> GroupDescription:
        """GroupNotFoundError's code (404 / 40405) for a group that has no members and no offsets."""
        doc = self._node.describe_group(group)
        return GroupDescription(group_id=str(doc["group_id"]), state=str(doc["state"]),
                                partition_assignor=doc.get("partition_assignor"),
                                generation=int(doc.get("generation", -1)), coordinator=doc.get("coordinator"),
                                members=list(doc.get("members", [])), partitions=list(doc.get("partitions", [])))
