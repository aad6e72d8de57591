"""Typed configuration, declared once: every key with its type, default, bounds, unit and doc.

Topic (log) keys keep Kafka's names (`segment.bytes`, `retention.ms`, `cleanup.policy`, ...); the
Python attribute is the name with dots turned to underscores (`cfg.segment_bytes`). Values come
from a mapping of strings or typed values; anything unknown, mistyped or out of bounds raises
ConfigError naming the key.

A topic key may name its broker-level synonym (`define(..., synonym="log.segment.bytes")`, Kafka's
`ServerTopicConfigSynonyms`): the broker key that gives the topic key's default on a node is
derived from the topic key (`broker_synonyms`), with its type, default and bounds, never declared
a second time.

Components (the controller, the group coordinator, the quorum host) keep their settings in frozen
dataclasses; a field that a key configures is declared `keyed(KEY)`: its default is the key's, its
bounds are checked against the key's (`check_keyed`), and `from_keys(cls, config)` fills every such
field from a parsed configuration. No component carries a second default for a declared key.
"""

from __future__ import annotations

import re
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, TypeVar

from lakelog.infra.errors import ErrorKind, LakelogError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1
DAY_MS = 24 * 60 * 60 * 1000


class ConfigError(LakelogError):
    """A configuration key is unknown, mistyped or out of bounds."""

    kind = ErrorKind.CONFIGURATION


@dataclass(frozen=True)
class ConfigKey:
    """One declared configuration key."""

    name: str
    type: type
    default: Any
    doc: str
    min: int | float | None = None
    max: int | float | None = None
    choices: tuple[str, ...] | None = None
    unit: str = ""
    validator: Callable[[Any], None] | None = None
    #: The broker-level key that gives this topic key's default on a node (Kafka's synonym), if any.
    synonym: str | None = None

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    def parse(self, raw: Any) -> Any:
        try:
            if self.type is bool:
                if isinstance(raw, str):
                    if raw.lower() not in ("true", "false"):
                        raise ValueError(raw)
                    value: Any = raw.lower() == "true"
                else:
                    value = bool(raw)
            elif self.type is int:
                if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                    raise ValueError(raw)
                value = int(raw)
            elif self.type is float:
                value = float(raw)
            else:
                value = str(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{self.name}: {raw!r} is not a valid {self.type.__name__}") from None
        if self.min is not None and value < self.min:
            raise ConfigError(f"{self.name}: {value} is below the minimum {self.min}")
        if self.max is not None and value > self.max:
            raise ConfigError(f"{self.name}: {value} is above the maximum {self.max}")
        if self.choices is not None:
            parts = [p.strip() for p in value.split(",")] if self.type is str else [value]
            for p in parts:
                if p not in self.choices:
                    raise ConfigError(f"{self.name}: {p!r} is not one of {', '.join(self.choices)}")
        if self.validator is not None:
            self.validator(value)
        return value


class ConfigDef:
    """An ordered set of keys: `define(...)` each once, then `parse(mapping)`."""

    def __init__(self) -> None:
        self.keys: dict[str, ConfigKey] = {}

    def define(self, name: str, type_: type, default: Any, doc: str, **kw: Any) -> "ConfigDef":
        if name in self.keys:
            raise ValueError(f"config key {name} defined twice")
        key = ConfigKey(name, type_, default, doc, **kw)
        if default is not None:
            key.parse(default)  # defaults must satisfy their own bounds
        self.keys[name] = key
        return self

    def parse(self, values: Mapping[str, Any] | None) -> dict[str, Any]:
        out = {k.name: k.default for k in self.keys.values()}
        for name, raw in (values or {}).items():
            key = self.keys.get(name)
            if key is None:
                raise ConfigError(f"unknown configuration key {name!r}")
            out[name] = key.parse(raw)
        return out

    def include(self, keys: Iterable[ConfigKey]) -> "ConfigDef":
        """Add keys declared elsewhere (another package's ConfigDef); a name already here is refused."""
        for key in keys:
            if key.name in self.keys:
                raise ValueError(f"config key {key.name} defined twice")
            self.keys[key.name] = key
        return self

    def __iter__(self) -> Iterable[ConfigKey]:
        return iter(self.keys.values())


def broker_synonyms(topic_keys: ConfigDef) -> list[ConfigKey]:
    """The broker-level keys derived from the topic keys that name a synonym (`log.segment.bytes`).

    Same type, default, bounds and unit as the topic key. Where the broker key has the topic key's
    own name (`min.insync.replicas`), the topic key itself is the broker key.
    """
    out = []
    for key in topic_keys:
        if key.synonym is None:
            continue
        if key.synonym == key.name:
            out.append(key)
        else:
            out.append(dataclasses.replace(key, name=key.synonym, synonym=None,
                                           doc=f"Node-wide default of the topic key {key.name}: {key.doc}"))
    return out


def synonym_map(topic_keys: ConfigDef) -> dict[str, str]:
    """Broker key -> the topic key it gives the default of."""
    return {key.synonym: key.name for key in topic_keys if key.synonym is not None}


_C = TypeVar("_C")


def keyed(key: ConfigKey, convert: Callable[[Any], Any] | None = None) -> Any:
    """A component dataclass field configured by `key`: its default is the key's (through `convert`,
    e.g. seconds to ms), never a number of its own."""
    default = key.default if convert is None else convert(key.default)
    return dataclasses.field(default=default, metadata={"config_key": key, "convert": convert})


def keyed_fields(cls: type) -> dict[str, tuple[ConfigKey, Callable[[Any], Any] | None]]:
    """Field name -> (its key, its conversion) for every `keyed` field of a dataclass."""
    return {f.name: (f.metadata["config_key"], f.metadata["convert"])
            for f in dataclasses.fields(cls) if "config_key" in f.metadata}


def check_keyed(obj: Any) -> None:
    """Check every `keyed` field of a component's settings against its key's type and bounds (a
    converted field: its type; its key's bounds were checked when the key was parsed)."""
    for name, (key, convert) in keyed_fields(type(obj)).items():
        value = getattr(obj, name)
        if convert is None:
            if type(value) is not key.type and not (key.type is float and type(value) is int):
                raise ConfigError(f"{key.name} ({name}): {value!r} is not a {key.type.__name__}")
            key.parse(value)
            continue
        # A converted field (minutes -> ms) is bounded where its key is parsed; here only its type.
        if type(value) is not type(convert(key.default)):
            raise ConfigError(f"{key.name} ({name}): {value!r} is not a {type(convert(key.default)).__name__}")


def from_keys(cls: type[_C], config: "TypedConfig | Mapping[str, Any]", **overrides: Any) -> _C:
    """`cls` with every `keyed` field read from a parsed configuration (by key name), then `overrides`."""
    get = config.get if isinstance(config, TypedConfig) else config.__getitem__
    values = {}
    for name, (key, convert) in keyed_fields(cls).items():
        raw = get(key.name)
        values[name] = raw if convert is None else convert(raw)
    values.update(overrides)
    return cls(**values)


_THROTTLED_REPLICAS = re.compile(r"\s*(\*|(\d+\s*:\s*\d+\s*(,\s*\d+\s*:\s*\d+\s*)*)?)\s*")


def _throttled_replicas(value: str) -> None:
    if not _THROTTLED_REPLICAS.fullmatch(value):
        raise ConfigError(f"throttled replicas {value!r}: \"*\" or a list partition:broker,partition:broker,...")


def _cleanup_policy(value: str) -> None:
    if not value.strip():
        raise ConfigError("cleanup.policy: must name delete, compact or both")


LOG_CONFIG = (
    ConfigDef()
    .define("segment.bytes", int, 1024 * 1024 * 1024, "Roll a new segment when the active one reaches this size.",
            min=14 + 61, max=INT_MAX, unit="bytes", synonym="log.segment.bytes")
    .define("segment.ms", int, 7 * DAY_MS, "Roll a new segment when the active one's first batch is this old.",
            min=1, unit="ms", synonym="log.roll.ms")
    .define("segment.index.bytes", int, 10 * 1024 * 1024,
            "Most bytes an offset or time index may hold; a full index rolls the segment.", min=12, max=INT_MAX,
            unit="bytes", synonym="log.index.size.max.bytes")
    .define("index.interval.bytes", int, 4096, "Bytes of batches between two offset index entries.",
            min=0, max=INT_MAX, unit="bytes", synonym="log.index.interval.bytes")
    .define("max.message.bytes", int, 1024 * 1024 + 12, "Largest batch (after compression) a producer may append.",
            min=61, max=INT_MAX, unit="bytes", synonym="message.max.bytes")
    .define("max.uncompressed.batch.bytes", int, 64 * 1024 * 1024,
            "Largest size a compressed batch may inflate to while it is validated or read.",
            min=61, max=INT_MAX, unit="bytes")
    .define("message.timestamp.type", str, "CreateTime", "Timestamp kept for records: the producer's or the log's.",
            choices=("CreateTime", "LogAppendTime"), synonym="log.message.timestamp.type")
    .define("retention.ms", int, 7 * DAY_MS, "Delete whole segments whose newest record is older than this; -1 keeps forever.",
            min=-1, unit="ms", synonym="log.retention.ms")
    .define("retention.bytes", int, -1, "Delete the oldest segments while the partition is larger than this; -1 is no limit.",
            min=-1, unit="bytes", synonym="log.retention.bytes")
    .define("local.retention.ms", int, -2, "Local retention for tiered topics; -2 follows retention.ms.",
            min=-2, unit="ms")
    .define("local.retention.bytes", int, -2, "Local size limit for tiered topics; -2 follows retention.bytes.",
            min=-2, unit="bytes")
    .define("remote.storage.enable", bool, False, "Upload sealed segments to the remote tier.")
    .define("cleanup.policy", str, "delete", "delete, compact, or compact,delete.",
            choices=("delete", "compact"), validator=_cleanup_policy, synonym="log.cleanup.policy")
    .define("delete.retention.ms", int, DAY_MS, "How long tombstones are kept after their segment was cleaned.",
            min=0, unit="ms")
    .define("min.compaction.lag.ms", int, 0, "Records younger than this are never compacted.", min=0, unit="ms")
    .define("max.compaction.lag.ms", int, LONG_MAX, "Records older than this make their log eligible regardless of the dirty ratio.",
            min=1, unit="ms")
    .define("min.cleanable.dirty.ratio", float, 0.5, "Compact only when dirty bytes / total bytes reaches this.",
            min=0.0, max=1.0)
    .define("flush.messages", int, LONG_MAX, "fsync after this many records (1 = every append); default leaves it to the page cache.",
            min=1, synonym="log.flush.interval.messages")
    .define("flush.ms", int, LONG_MAX, "fsync when the last fsync is this old; default leaves it to the page cache.",
            min=0, unit="ms", synonym="log.flush.interval.ms")
    .define("min.insync.replicas", int, 1, "acks=all produce needs at least this many replicas in the ISR.", min=1, synonym="min.insync.replicas")
    .define("unclean.leader.election.enable", bool, False, "Allow an out-of-sync replica to become leader.", synonym="unclean.leader.election.enable")
    .define("leader.replication.throttled.replicas", str, "", "partition:broker,... (or *): while broker b "
            "leads partition p it sends to out-of-ISR followers at most leader.replication.throttled.rate.",
            validator=_throttled_replicas)
    .define("follower.replication.throttled.replicas", str, "", "partition:broker,... (or *): broker b's "
            "replica of p, while out of the ISR, fetches at most follower.replication.throttled.rate.",
            validator=_throttled_replicas)
    .define("value.schema", str, "", "Spark DDL of JSON record values (e.g. 'id BIGINT, amount DOUBLE'): "
            "sync-tables adds them as typed columns to the topic's Delta table; empty: values stay binary.")
    .define("schema.registry.url", str, "", "A node URL (any node serves the Schema Registry): sync-tables "
            "decodes values in Confluent's wire format by their schema ids into typed columns (Avro); "
            "takes precedence over value.schema; empty: off.")
)


class TypedConfig:
    """Validated values of one ConfigDef, read as attributes (`segment.bytes` -> `segment_bytes`).

    Immutable: a change builds a new instance.
    """

    DEFINITION: ConfigDef

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        values = self.DEFINITION.parse(overrides)
        object.__setattr__(self, "_values", values)
        # Plain instance attributes: config reads sit on hot paths (every append reads several).
        for name, value in values.items():
            object.__setattr__(self, name.replace(".", "_"), value)

    def __setattr__(self, attr: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable; build a new one")

    def get(self, name: str) -> Any:
        return self._values[name]

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def with_overrides(self, overrides: Mapping[str, Any]) -> "TypedConfig":
        merged = dict(self._values)
        merged.update(overrides)
        return type(self)(merged)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._values == self._values  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._values!r})"


class LogConfig(TypedConfig):
    """The typed, validated log (topic) configuration of one partition."""

    DEFINITION = LOG_CONFIG

    @property
    def compact(self) -> bool:
        return "compact" in [p.strip() for p in self.cleanup_policy.split(",")]

    @property
    def delete(self) -> bool:
        return "delete" in [p.strip() for p in self.cleanup_policy.split(",")]

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"
