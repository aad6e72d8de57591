"""Dynamic broker configs applied live on a node (Kafka's `DynamicBrokerConfig.updateBrokerConfig`).

The values live in the cluster metadata (`image.broker_configs`, ingest_api/cluster/broker_configs.py):
written through the active controller, replicated by Raft, kept in snapshots — so they survive
restarts and reach nodes that were down. After every applied metadata entry the node calls
`refresh()`: when this node's effective dynamic map changed, it builds the node config again as
node.toml (kept here as `static`) overlaid with that map, hands the new config to the components
that read it (admin, replica manager, broker session, remote log manager, controller host and the
active controller), and gives every local partition log its config again (the topic keys without a
topic override follow the broker defaults, e.g. `log.retention.ms`, `message.max.bytes`,
`min.insync.replicas`), so the next append, roll, cleaner pass and election use the new values.

Configs are immutable values: a component holding the old one keeps a consistent view until it
reads the new attribute. Concurrency: on the node's event loop (like the metadata callbacks).
"""

from __future__ import annotations

import logging
from typing import Any

from lakelog.ingest_api.cluster.broker_configs import CLUSTER_DEFAULT, BrokerConfigState
from lakelog.ingest_api.cluster.controller_config import ControllerConfig
from lakelog.ingest_api.config.node import NodeConfig

log = logging.getLogger("lakelog.node")

#: The sources of a broker config value, highest precedence first (Kafka's ConfigSource names).
DYNAMIC_BROKER_CONFIG = "DYNAMIC_BROKER_CONFIG"
DYNAMIC_DEFAULT_BROKER_CONFIG = "DYNAMIC_DEFAULT_BROKER_CONFIG"
STATIC_BROKER_CONFIG = "STATIC_BROKER_CONFIG"
DEFAULT_CONFIG = "DEFAULT_CONFIG"


class DynamicConfigs:
    def __init__(self, node: Any) -> None:
        self.node = node
        self.static: NodeConfig = node.config  # node.toml and --set, as started
        self._seen: BrokerConfigState | None = None
        self._applied: dict[str, str] = {}

    def refresh(self) -> bool:
        """Apply this node's dynamic configs if they changed; True when the node config changed."""
        state = self.node.image.broker_configs
        if state is self._seen:
            return False
        self._seen = state
        wanted = state.node_overrides(self.node.node_id)
        if wanted == self._applied:
            return False
        new = self.static.with_overrides(wanted)
        self._applied = wanted
        self._install(new)
        log.info("dynamic broker configs now %s", wanted or "none (node.toml only)")
        return True

    def synonyms(self, name: str) -> list[tuple[str, Any]]:
        """(source, value) of every place `name` is set, highest precedence first; the first is in force."""
        state = self.node.image.broker_configs
        out: list[tuple[str, Any]] = []
        own = state.of(self.node.node_id)
        if name in own:
            out.append((DYNAMIC_BROKER_CONFIG, own[name]))
        cluster = state.of(CLUSTER_DEFAULT)
        if name in cluster:
            out.append((DYNAMIC_DEFAULT_BROKER_CONFIG, cluster[name]))
        key = self.static.DEFINITION.keys[name]
        value = self.static.get(name)
        if value != key.default:
            out.append((STATIC_BROKER_CONFIG, value))
        out.append((DEFAULT_CONFIG, key.default))
        return out

    def _install(self, config: NodeConfig) -> None:
        node = self.node
        node.config = config
        for component in (node.admin, node.replicas, node.session, node.remote_logs):
            component.config = config
        node.controller_config = ControllerConfig.from_keys(config)
        host = node.controller_host
        host.config = node.controller_config
        if host.controller is not None:
            host.controller.config = node.controller_config
        image = node.image
        for part in node.replicas.partitions():
            topic = image.topics.get(part.key.topic)
            if topic is not None:
                part.log.update_config(config.log_config(topic.configs))
