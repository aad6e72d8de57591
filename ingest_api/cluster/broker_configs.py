"""Dynamic broker configs: the replicated part of the brokers' configuration (Kafka's
`DynamicBrokerConfig`, whose values live in the KRaft metadata log as ConfigRecords).

`BrokerConfigState` is part of the cluster metadata image (`image.broker_configs`): written by the
active controller (`controller_records`), applied identically on every node, kept in metadata
snapshots. It is an immutable value: each applied record makes a new one.

Which keys: `DYNAMIC_BROKER_CONFIGS`, the keys Kafka lets `kafka-configs --alter --entity-type
brokers` change at runtime and that Lakelog applies live:
  - the broker-level defaults of the topic keys (Kafka's DynamicLogConfig: `log.retention.ms`,
    `log.segment.bytes`, `message.max.bytes`, `min.insync.replicas`,
    `unclean.leader.election.enable`, ...): node keys, laid over node.toml (`node_overrides`);
  - the replication throttle rates `leader.replication.throttled.rate` and
    `follower.replication.throttled.rate` (bytes/s, ingest_api/cluster/throttles.py): dynamic only,
    as in Kafka (no node.toml key), read by the replica manager through `rate`.
Every other node key is read-only (node.toml; a change needs a restart) and is refused.

Precedence, as Kafka's: this broker's dynamic value (DYNAMIC_BROKER_CONFIG) > the cluster-wide
dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG, entity `<default>`, here broker -1) > node.toml
(STATIC_BROKER_CONFIG) > the declared default (DEFAULT_CONFIG). `effective(broker)` is the merged
dynamic map a node lays over its node.toml (ingest_api/broker/dynamic_config.py applies it).

Record (JSON, like every metadata record):

    broker_configs   broker (int: a node id, or -1 = the cluster-wide default),
                     configs {name: value string}   the entity's full new map ({} = none left)

One mechanism: the throttle rates used to have their own record and controller op
(`alter_broker_configs` {node_id, configs {rate key: value | null}}, a delta, in `image.throttles`).
Both now live here, written as `broker_configs` by `alter_dynamic_broker_configs`. A metadata log
or snapshot written before still replays: an `alter_broker_configs` record is applied as the delta
it was (`apply_throttle_record`: only the two rate keys, null removes), and a snapshot's `throttles`
section is merged into the entities (`merge_throttles`). Nothing writes either any more.

`apply` checks each name is dynamic and each value parses as its key's type and bounds, so every
voter applies or skips a record alike. Bounds: at most MAX_ENTITIES entities and, per entity, the
number of dynamic keys; values at most MAX_VALUE_LENGTH characters.

Invariants: every stored name is in DYNAMIC_BROKER_CONFIGS and its value parses; no entity has an
empty map (an entity whose last key is removed is dropped).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lakelog.infra.config import ConfigError
from lakelog.ingest_api.cluster.throttles import RATE_KEYS, check_rate
from lakelog.ingest_api.config.node import BROKER_TO_TOPIC, NODE_CONFIG
from lakelog.ingest_api.errors import InvalidRequestError

#: The node keys that may change at runtime (Kafka's DynamicLogConfig keys that Lakelog has): laid
#: over node.toml.
NODE_DYNAMIC_CONFIGS = frozenset(BROKER_TO_TOPIC)
#: Every broker config that may be set dynamically: those, and the throttle rates (dynamic only).
DYNAMIC_BROKER_CONFIGS = NODE_DYNAMIC_CONFIGS | frozenset(RATE_KEYS)
#: The entity of the cluster-wide defaults (Kafka's `<default>` broker).
CLUSTER_DEFAULT = -1
MAX_ENTITIES = 10_000
MAX_VALUE_LENGTH = 4096
MAX_NODE_ID = (1 << 31) - 1

RECORD_TYPES = ("broker_configs",)
#: The throttle rates' own record before the two mechanisms became one: still read on replay.
LEGACY_THROTTLE_RECORD_TYPES = ("alter_broker_configs",)
CONTROLLER_OPS = ("alter_dynamic_broker_configs",)


class ReadOnlyBrokerConfigError(InvalidRequestError):
    """A change to a broker config that is not dynamic (Kafka: "Cannot update these configs dynamically")."""


class InvalidBrokerConfigError(InvalidRequestError):
    """A dynamic broker config value that does not parse or is out of bounds."""


def check_value(name: str, value: Any) -> str:
    """The value as stored (a string), or raises ReadOnlyBrokerConfigError / InvalidBrokerConfigError."""
    if name not in DYNAMIC_BROKER_CONFIGS:
        raise ReadOnlyBrokerConfigError(f"Cannot update these configs dynamically: {name} (read-only: set it in "
                                        "node.toml and restart the node)")
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if len(text) > MAX_VALUE_LENGTH:
        raise InvalidBrokerConfigError(f"the value of {name} is over {MAX_VALUE_LENGTH} characters")
    if name in RATE_KEYS:
        try:
            return str(check_rate(name, text))
        except ValueError as e:
            raise InvalidBrokerConfigError(str(e)) from None
    try:
        NODE_CONFIG.keys[name].parse(text)
    except ConfigError as e:
        raise InvalidBrokerConfigError(f"Invalid value {text} for configuration {name}: {e}") from None
    return text


@dataclass(frozen=True)
class BrokerConfigState:
    """broker id (-1: cluster-wide default) -> {name: value}; immutable."""

    entities: Mapping[int, Mapping[str, str]] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.entities

    def of(self, broker: int) -> dict[str, str]:
        """The entity's own map (no merging)."""
        return dict(self.entities.get(broker, {}))

    def effective(self, broker: int) -> dict[str, str]:
        """Broker `broker`'s dynamic configs: cluster-wide defaults, then its own values."""
        return {**self.entities.get(CLUSTER_DEFAULT, {}), **self.entities.get(broker, {})}

    def node_overrides(self, broker: int) -> dict[str, str]:
        """What broker `broker` lays over its node.toml: the effective node keys (no throttle rate)."""
        return {k: v for k, v in self.effective(broker).items() if k in NODE_DYNAMIC_CONFIGS}

    def rate(self, broker: int, key: str) -> int | None:
        """The throttle rate `key` in force on `broker` (its own, else the cluster-wide one), or None."""
        own = self.entities.get(broker)
        value = own.get(key) if own is not None else None
        if value is None:
            value = self.entities.get(CLUSTER_DEFAULT, {}).get(key)
        return None if value is None else int(value)

    def apply_throttle_record(self, rec: Mapping[str, Any]) -> "BrokerConfigState":
        """A legacy `alter_broker_configs` record: {node_id, configs {rate key: value | null}}, a
        delta on that entity. Raises ValueError for what the old record type skipped."""
        broker = rec.get("node_id")
        if type(broker) is not int or not CLUSTER_DEFAULT <= broker <= MAX_NODE_ID:
            raise ValueError(f"node_id must be -1 or a node id, not {broker!r}")
        changes = rec.get("configs")
        if not isinstance(changes, Mapping) or not changes:
            raise ValueError("configs must be a non-empty object")
        merged = self.of(broker)
        for key, value in changes.items():
            if key not in RATE_KEYS:
                raise ValueError(f"{key!r} is not a replication throttle rate")
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = str(check_rate(key, value))
        return self.apply({"type": "broker_configs", "broker": broker, "configs": merged})

    def merge_throttles(self, d: Any) -> "BrokerConfigState":
        """A legacy snapshot's `throttles` section ({"brokers": [{"node_id", "configs"}]}) merged in."""
        if not isinstance(d, dict) or not isinstance(d.get("brokers"), list):
            raise ValueError("throttles must be an object with a list of brokers")
        state = self
        for b in d["brokers"]:
            if not isinstance(b, dict):
                raise ValueError("a throttle entry is not an object")
            state = state.apply_throttle_record({"node_id": b.get("node_id"), "configs": b.get("configs")})
        return state

    def to_dict(self) -> dict[str, Any]:
        return {"entities": [{"broker": b, "configs": dict(sorted(c.items()))} for b, c in sorted(self.entities.items())]}

    @classmethod
    def from_dict(cls, d: Any) -> "BrokerConfigState":
        state = cls()
        for e in d["entities"]:
            state = state.apply({"type": "broker_configs", "broker": e["broker"], "configs": e["configs"]})
        return state

    def apply(self, rec: Mapping[str, Any]) -> "BrokerConfigState":
        """The state after one record; raises ValueError (the image skips the record) when it does not fit."""
        broker = rec["broker"]
        if not isinstance(broker, int) or isinstance(broker, bool) or not CLUSTER_DEFAULT <= broker <= MAX_NODE_ID:
            raise ValueError(f"broker {broker!r} is not a node id or -1")
        configs = rec["configs"]
        if not isinstance(configs, Mapping) or len(configs) > len(DYNAMIC_BROKER_CONFIGS):
            raise ValueError("configs must be a map of dynamic broker configs")
        checked: dict[str, str] = {}
        for name, value in configs.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise ValueError("config names and values are strings")
            try:
                checked[name] = check_value(name, value)
            except InvalidRequestError as e:
                raise ValueError(str(e)) from None
        entities = dict(self.entities)
        if checked:
            if broker not in entities and len(entities) >= MAX_ENTITIES:
                raise ValueError(f"more than {MAX_ENTITIES} broker config entities")
            entities[broker] = checked
        else:
            entities.pop(broker, None)
        return BrokerConfigState(entities)


def controller_records(op: str, args: Mapping[str, Any], state: BrokerConfigState) -> tuple[list[dict], dict]:
    """`alter_dynamic_broker_configs` {broker, set: {name: value}, delete: [name], validate_only} -> the record
    of the entity's new map (none when nothing changes or only validating). Raises the request's error."""
    if op != "alter_dynamic_broker_configs":
        raise InvalidRequestError(f"unknown broker config op {op!r}")
    broker = int(args["broker"])
    merged = state.of(broker)
    for name in args.get("delete") or ():
        if name not in DYNAMIC_BROKER_CONFIGS:
            check_value(str(name), "")  # raises read-only
        merged.pop(str(name), None)
    for name, value in (args.get("set") or {}).items():
        merged[str(name)] = check_value(str(name), value)
    if args.get("validate_only") or merged == state.of(broker):
        return [], {}
    return [{"type": "broker_configs", "broker": broker, "configs": merged}], {}
