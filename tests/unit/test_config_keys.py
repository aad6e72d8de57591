"""One declaration per configuration key: broker synonyms derived from topic keys, component settings
built from the declared keys (same defaults, same bounds), and no second default anywhere in the tree."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import tomllib
from pathlib import Path

import pytest

from lakelog.compaction.cleaner import LogCleaner
from lakelog.infra.config import LOG_CONFIG, ConfigDef, ConfigError, ConfigKey, broker_synonyms, keyed_fields
from lakelog.tiering.metadata import ManifestStore
from lakelog.ingest_api.cluster.controller_config import ControllerConfig
from lakelog.ingest_api.cluster.quorum_config import QuorumConfig
from lakelog.ingest_api.config.node import BROKER_TO_TOPIC, NODE_CONFIG, NodeConfig
from lakelog.ingest_api.groups.coordinator import CoordinatorConfig
from lakelog.ingest_api.transactions.coordinator import TxnCoordinatorConfig

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = sorted({name.split(".")[1] for name in tomllib.loads((ROOT / "pyproject.toml").read_text())
                   ["tool"]["setuptools"]["package-dir"]})

#: Every component dataclass whose fields are configured by declared keys.
COMPONENTS = (CoordinatorConfig, ControllerConfig, QuorumConfig, TxnCoordinatorConfig)
#: Number fields of those dataclasses that no key configures: the component's own limits, listed so that
#: a new number is a decision (a declared key, or a limit named here), not a second default by accident.
UNKEYED_NUMBERS = {
    "QuorumConfig.max_clock_skew_ms",  # the cluster signature check's bound (cluster/auth.py)
    "ControllerConfig.preferred_leader_return_delay_ms", "ControllerConfig.rebalance_moves_per_tick",
    "ControllerConfig.producer_id_block_size", "ControllerConfig.max_record_bytes",
    "ControllerConfig.max_records_per_tick", "ControllerConfig.proposal_timeout_ms",
}
#: Component parameters set from a key whose name they do not repeat: (callable, parameter, key).
KEYED_PARAMETERS = (
    (ManifestStore, "max_attempts", "remote.log.metadata.commit.max.attempts"),
    (LogCleaner, "interval_ms", "log.cleaner.backoff.ms"),
)
#: "Off" or "none": a default that names no setting (0 = unlimited, no cluster id, ...).
NEUTRAL = (0, False, "", None)

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


def _declared_keys() -> dict[str, ConfigKey]:
    """Every key of every `ConfigDef` the product declares, found by reading the tree."""
    keys: dict[str, ConfigKey] = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if "ConfigDef()" not in path.read_text():
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            module = importlib.import_module("lakelog." + ".".join(parts[:-1] if parts[-1] == "__init__" else parts))
            for value in vars(module).values():
                if isinstance(value, ConfigDef):
                    keys.update(value.keys)
    return keys


def _constant(node: ast.expr):
    """The value of a default written as a constant expression (`16 << 20`, `-1`), else None."""
    if not all(isinstance(n, (ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop))
               for n in ast.walk(node)):
        return None
    return eval(compile(ast.Expression(node), "<default>", "eval"), {"__builtins__": {}})


def _component_defaults(path: Path):
    """(class, name, default node) of every `__init__` parameter and class-level field with a default."""
    for cls in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in cls.body:
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                yield cls.name, node.target.id, node.value
            elif isinstance(node, ast.FunctionDef) and node.name == "__init__":
                a = node.args
                positional = a.posonlyargs + a.args
                yield from ((cls.name, p.arg, d) for p, d in zip(positional[len(positional) - len(a.defaults):],
                                                                  a.defaults))
                yield from ((cls.name, p.arg, d) for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None)


def test_no_component_repeats_a_keys_default() -> None:
    """A constructor parameter or settings field named as a key (its full name, or its last two words
    or more: `max_attempts` of `remote.log.metadata.commit.max.attempts`) must not write the key's
    default again: it takes it from the key (`keyed`, `KEY.default`) or has none."""
    by_suffix: dict[str, list[ConfigKey]] = {}
    for key in _declared_keys().values():
        words = key.attr.split("_")
        for i in range(len(words) - 1):
            by_suffix.setdefault("_".join(words[i:]), []).append(key)
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for cls, name, node in _component_defaults(path):
                value = _constant(node)
                if any(value is n or (type(value) is type(n) and value == n) for n in NEUTRAL):
                    continue
                for key in by_suffix.get(name, ()):
                    if type(value) is type(key.default) and value == key.default:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {cls}.{name} = {value!r} "
                                     f"repeats {key.name}")
    assert not found, found


def test_the_second_default_check_finds_a_repeated_default(tmp_path) -> None:
    path = tmp_path / "component.py"
    path.write_text("class Store:\n    def __init__(self, *, max_attempts: int = 10) -> None:\n        pass\n")
    [(cls, name, node)] = list(_component_defaults(path))
    assert (cls, name, _constant(node)) == ("Store", "max_attempts", 10)
    key = _declared_keys()["remote.log.metadata.commit.max.attempts"]
    assert key.attr.endswith("_" + name) and key.default == 10


@pytest.mark.parametrize("component, parameter, key", KEYED_PARAMETERS, ids=lambda v: getattr(v, "__name__", v))
def test_component_parameters_take_their_keys_defaults(component, parameter, key) -> None:
    default = inspect.signature(component).parameters[parameter].default
    assert default is inspect.Parameter.empty or default == _declared_keys()[key].default


@pytest.mark.parametrize("component", COMPONENTS, ids=lambda c: c.__name__)
def test_component_numbers_are_keyed(component) -> None:
    keyed = keyed_fields(component)
    for f in dataclasses.fields(component):
        if f.default is dataclasses.MISSING or type(f.default) not in (int, float):
            continue
        assert f.name in keyed or f"{component.__name__}.{f.name}" in UNKEYED_NUMBERS, \
            f"{component.__name__}.{f.name} = {f.default}: a default of its own, not a declared key's"


def test_the_node_builds_its_quorum_config_from_the_keys() -> None:
    overrides = {"controller.quorum.request.timeout.ms": 700, "metadata.fetch.max.wait.ms": 900,
                 "controller.quorum.max.pending.events": 100}
    built = QuorumConfig.from_keys(NodeConfig(overrides), node_id=1, voters={1: ("127.0.0.1", 9)},
                                   secret=b"s" * 16, data_dir=Path("/tmp"))
    assert (built.request_timeout_ms, built.metadata_fetch_max_wait_ms, built.max_pending_events) == (700, 900, 100)
    assert built.heartbeat_interval_ms == NodeConfig().controller_quorum_election_timeout_ms // 10
