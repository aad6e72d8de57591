"""What a Kafka API handler reaches: the node's core services, and where each node's Kafka door is.

Handlers (metadata_apis, records_apis, group_apis, admin_apis) are plain functions of a
`KafkaContext`, the request and its connection. They call the same services the HTTP routers call —
the node's produce and fetch entry points, `node.admin`, `node.replicas`, the group coordinator's
`GroupService` — and never the HTTP routers.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from lakelog.ingest_api.config.kafka import KafkaListener


@dataclass
class KafkaContext:
    node: Any  # ingest_api.node.Node (Any: the node wires this package, not the reverse)
    groups: Any  # ingest_api.groups.service.GroupService

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
