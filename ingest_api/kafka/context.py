"""What a Kafka API handler reaches: the node's core services, and where each node's Kafka door is.

Handlers (metadata_apis, records_apis, group_apis, admin_apis) are plain functions of a
`KafkaContext`, the request and its connection. They call the same services the HTTP routers call —
the node's produce and fetch entry points, `node.admin`, `node.replicas`, the group coordinator's
`GroupService` — and never the HTTP routers. `allowed` asks the node's authorizer (the same ACLs
and super users the HTTP door checks) for the connection's principal.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from lakelog.infra.error_codes import KafkaCode
from lakelog.ingest_api.config.kafka import KafkaListener
from lakelog.ingest_api.error_table import kafka_code
from lakelog.ingest_api.kafka.fetch_sessions import FetchSessionCache
from lakelog.ingest_api.security.acl import Operation, ResourceType
from lakelog.ingest_api.security.errors import AuthorizationFailedError, TransactionalIdAuthorizationFailedError

#: The Kafka code of an ACL refusal by resource type: the error table's row of an authorization
#: failure for a topic; a group or the cluster answer Kafka's codes for those resources.
REFUSED: dict[ResourceType, int] = {
    ResourceType.TOPIC: int(kafka_code(AuthorizationFailedError("refused"))),
    ResourceType.GROUP: int(KafkaCode.GROUP_AUTHORIZATION_FAILED),
    ResourceType.CLUSTER: int(KafkaCode.CLUSTER_AUTHORIZATION_FAILED),
    ResourceType.TRANSACTIONAL_ID: int(kafka_code(TransactionalIdAuthorizationFailedError("refused"))),
}


@dataclass
class KafkaContext:
    node: Any  # ingest_api.node.Node (Any: the node wires this package, not the reverse)
    groups: Any  # ingest_api.groups.service.GroupService
    fetch_sessions: FetchSessionCache  # consumers' fetch sessions (KIP-227)
    #: Kafka topic id -> topic name, rebuilt when a lookup misses or names a topic since replaced.
    _names_by_id: dict[uuid.UUID, str] = field(default_factory=dict)

    def allowed(self, principal: str | None, operation: Operation, rtype: ResourceType, name: str, api: str,
                client: str, *, audit: bool = True) -> bool:
        """Whether the node's authorizer (the one HTTP uses) lets `principal` do this; a refusal is audited
        unless `audit` is off (a listing that leaves out what may not be seen)."""
        security = self.node.security
        if not security.authorizer_enabled:
            return True
        if principal is not None and security.authorizer().authorize(principal, operation, rtype, name):
            return True
        if audit:
            security.audit.refusal("authorization_failed", principal=principal, operation=operation.value,
                                   resource_type=rtype.value, resource_name=name, api=api, client=client)
        return False

    def topic_name(self, topic_id: uuid.UUID | None) -> str | None:
        """The name of the topic with this Kafka topic id (requests of Fetch v13+, Produce v13+), or None."""
        if topic_id is None:
            return None
        topics = self.node.image.topics
        name = self._names_by_id.get(topic_id)
        t = topics.get(name) if name is not None else None
        if t is None or kafka_topic_id(t.topic_id) != topic_id:
            self._names_by_id = {kafka_topic_id(ti.topic_id): n for n, ti in topics.items()}
            name = self._names_by_id.get(topic_id)
        return name

    def topic_id(self, name: str) -> uuid.UUID:
        """The Kafka topic id of a topic (the zero UUID for one this node does not know)."""
        t = self.node.image.topics.get(name)
        return kafka_topic_id(t.topic_id) if t is not None else uuid.UUID(int=0)

    def endpoint(self, node_id: int, listener_name: str) -> tuple[str, int] | None:
        """Where clients of `listener_name` reach node `node_id`'s Kafka door (None: it has none)."""
        node = self.node
        if node_id == node.node_id:
            for lst in node.config.advertised_kafka_listeners:
                if lst.name == listener_name:
                    return lst.host, lst.port
            return None
        reg = node.image.brokers.get(node_id)
        for name, host, port in getattr(reg, "kafka_listeners", ()) or ():
            if name == listener_name:
                return host, port
        return None

    def live_brokers(self, listener: KafkaListener) -> list[dict[str, Any]]:
        """Every unfenced node with a door on this listener: node_id, host, port, rack."""
        out = []
        for node_id in sorted(self.node.image.brokers):
            reg = self.node.image.brokers[node_id]
            ep = self.endpoint(node_id, listener.name)
            if ep is not None and (not reg.fenced or node_id == self.node.node_id):
                out.append({"node_id": node_id, "host": ep[0], "port": ep[1], "rack": reg.rack})
        if not any(b["node_id"] == self.node.node_id for b in out):  # before registration: this node alone
            ep = self.endpoint(self.node.node_id, listener.name)
            if ep is not None:
                out.append({"node_id": self.node.node_id, "host": ep[0], "port": ep[1],
                            "rack": self.node.config.broker_rack or None})
        return out


def kafka_topic_id(topic_id: str) -> uuid.UUID:
    """A topic's id as Kafka's UUID (ids are uuid4 hex strings)."""
    try:
        return uuid.UUID(hex=topic_id)
    except ValueError:
        return uuid.UUID(int=0)
