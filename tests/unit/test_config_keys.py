"""One declaration per configuration key: broker synonyms derived from topic keys, component settings
built from the declared keys (same defaults, same bounds)."""

from __future__ import annotations

import dataclasses

import pytest

from lakelog.infra.config import LOG_CONFIG, ConfigDef, ConfigError, broker_synonyms, keyed_fields
from lakelog.ingest_api.cluster.controller_config import ControllerConfig
from lakelog.ingest_api.cluster.quorum_config import QuorumConfig
from lakelog.ingest_api.config.node import BROKER_TO_TOPIC, NODE_CONFIG, NodeConfig
from lakelog.ingest_api.groups.coordinator import CoordinatorConfig

#: Every component dataclass whose fields are configured by declared keys.
COMPONENTS = (CoordinatorConfig, ControllerConfig, QuorumConfig)

#: Kafka's broker-level synonyms of topic keys (ServerTopicConfigSynonyms).
KAFKA_SYNONYMS = {
    "log.segment.bytes": "segment.bytes", "log.roll.ms": "segment.ms",
    "log.index.interval.bytes": "index.interval.bytes", "log.index.size.max.bytes": "segment.index.bytes",
    "message.max.bytes": "max.message.bytes", "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes", "log.cleanup.policy": "cleanup.policy",
    "log.flush.interval.messages": "flush.messages", "log.flush.interval.ms": "flush.ms",
    "log.message.timestamp.type": "message.timestamp.type", "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.__name__)
def test_every_component_default_is_its_keys_default(component) -> None:
    fields = {f.name: f for f in dataclasses.fields(component)}
    keyed = keyed_fields(component)
    assert keyed, f"{component.__name__} has no keyed field"
    for name, (key, convert) in keyed.items():
        assert NODE_CONFIG.keys.get(key.name) is key, f"{key.name} is not the node's declared key"
        expected = key.default if convert is None else convert(key.default)
        assert fields[name].default == expected, (component.__name__, name, key.name)


@pytest.mark.parametrize("component", (CoordinatorConfig, ControllerConfig), ids=lambda c: c.__name__)
def test_a_component_built_from_a_node_config_reads_every_keyed_field(component) -> None:
    assert component.from_keys(NodeConfig()) == component()  # the node's defaults are the keys' defaults
    overrides = {}
    for name, (key, convert) in keyed_fields(component).items():
        if key.type is bool:
            overrides[key.name] = not key.default
        elif key.type is int:
            overrides[key.name] = key.default + 1 if key.max is None or key.default < key.max else key.default - 1
    overrides["max.partitions.per.topic"] = 20_000  # stays above num.partitions
    built = component.from_keys(NodeConfig(overrides))
    for name, (key, convert) in keyed_fields(component).items():
        raw = overrides[key.name]
        assert getattr(built, name) == (raw if convert is None else convert(raw)), name


def test_the_drifted_defaults_and_bounds_are_the_keys() -> None:
    assert CoordinatorConfig().initial_rebalance_delay_ms == 3000 == NodeConfig().group_initial_rebalance_delay_ms
    assert ControllerConfig(broker_session_timeout_ms=100).broker_session_timeout_ms == 100
    assert ControllerConfig(broker_session_timeout_ms=600_000).broker_session_timeout_ms == 600_000
    for out_of_bounds in (99, 600_001, 3_600_000):
        with pytest.raises(ConfigError, match="broker.session.timeout.ms"):
            ControllerConfig(broker_session_timeout_ms=out_of_bounds)
    with pytest.raises(ConfigError, match="default.replication.factor"):
        ControllerConfig(default_replication_factor=33)  # the key's bound (was 64 here)
    with pytest.raises(ConfigError, match="group.max.size"):
        CoordinatorConfig(max_size=0)
    with pytest.raises(ConfigError, match="unclean.leader.election.enable"):
        ControllerConfig(unclean_leader_election_enable=1)


def test_broker_log_keys_are_derived_from_the_topic_keys() -> None:
    assert BROKER_TO_TOPIC == KAFKA_SYNONYMS
    for broker_name, topic_name in KAFKA_SYNONYMS.items():
        broker, topic = NODE_CONFIG.keys[broker_name], LOG_CONFIG.keys[topic_name]
        assert (broker.type, broker.default, broker.min, broker.max, broker.choices, broker.unit) == \
               (topic.type, topic.default, topic.min, topic.max, topic.choices, topic.unit), broker_name
        assert broker.validator is topic.validator
    # the same name at both levels is one declaration, not two
    assert NODE_CONFIG.keys["min.insync.replicas"] is LOG_CONFIG.keys["min.insync.replicas"]
    assert NODE_CONFIG.keys["unclean.leader.election.enable"] is LOG_CONFIG.keys["unclean.leader.election.enable"]
    assert sorted(k.name for k in broker_synonyms(LOG_CONFIG)) == sorted(KAFKA_SYNONYMS)


def test_broker_keys_give_the_topic_defaults_and_keep_the_topic_bounds() -> None:
    node = NodeConfig({"log.segment.bytes": 4096, "log.cleanup.policy": "compact", "min.insync.replicas": 2})
    log = node.log_config()
    assert (log.segment_bytes, log.compact, log.min_insync_replicas) == (4096, True, 2)
    assert node.log_config({"segment.bytes": 8192}).segment_bytes == 8192  # a topic's own config wins
    with pytest.raises(ConfigError, match="log.segment.bytes"):
        NodeConfig({"log.segment.bytes": 10})  # below segment.bytes' minimum
    with pytest.raises(ConfigError, match="log.cleanup.policy"):
        NodeConfig({"log.cleanup.policy": " "})  # the topic key's validator applies too


def test_a_key_is_declared_once() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        ConfigDef().define("a.b", int, 1, "doc").define("a.b", int, 2, "doc")
    with pytest.raises(ValueError, match="defined twice"):
        ConfigDef().define("segment.bytes", int, 1024, "doc", min=75).include(LOG_CONFIG)
