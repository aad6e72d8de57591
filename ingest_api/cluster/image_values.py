"""The values of the cluster metadata image and the strict reading of its records.

`BrokerRegistration`, `PartitionState` and `TopicImage` are immutable: a record that changes one
replaces it. The bounds below are part of the state machine's definition (a record or snapshot
outside them is refused): change them only together with a new record version, or voters on
different code could disagree. The readers (`read_int`, `read_partition`, ...) refuse a record or snapshot
of the wrong shape rather than half-read it. The image itself, and what each record does, is
`image.py`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lakelog.infra.errors import invariant
from lakelog.ingest_api.errors import InvalidTopicError
from lakelog.ingest_api.cluster.names import validate_topic_name

NO_LEADER = -1

# Bounds a record's fields must respect. They are part of the state machine's definition: change
# them only together with a new record version, or voters on different code could disagree.
MAX_NODE_ID = (1 << 31) - 1
MAX_EPOCH = (1 << 31) - 1  # leader and partition epochs are int32 in Kafka
MAX_LONG = (1 << 63) - 1  # broker epochs and producer ids are int64
MAX_PARTITIONS_PER_TOPIC = 100_000
MAX_REPLICAS = 64
MAX_CONFIG_ENTRIES = 1_000
MAX_CONFIG_KEY_LENGTH = 255
MAX_CONFIG_VALUE_LENGTH = 32_768
MAX_TOPIC_ID_LENGTH = 64
MAX_INCARNATION_ID_LENGTH = 64
MAX_HOST_LENGTH = 255
MAX_RACK_LENGTH = 255
MAX_PRODUCER_ID_BLOCK = 1 << 20


# ---------------------------------------------------------------------------------------------
# Values (immutable: a change replaces them)

@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """One node's registration: where it serves HTTP, its rack, and whether it may hold leaderships."""

    node_id: int
    broker_epoch: int
    incarnation_id: str
    host: str
    port: int
    rack: str | None = None
    fenced: bool = True
    in_controlled_shutdown: bool = False
    registration_index: int = 0  # metadata-log index of its register_broker record
    #: Its Kafka listeners as clients reach them: (listener name, host, port), none without a Kafka door.
    kafka_listeners: tuple[tuple[str, str, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d = {"node_id": self.node_id, "broker_epoch": self.broker_epoch,
             "incarnation_id": self.incarnation_id, "host": self.host, "port": self.port,
             "rack": self.rack, "fenced": self.fenced,
             "in_controlled_shutdown": self.in_controlled_shutdown,
             "registration_index": self.registration_index}
        if self.kafka_listeners:  # absent otherwise: registrations without a Kafka door keep their bytes
            d["kafka_listeners"] = [list(x) for x in self.kafka_listeners]
        return d


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Replicas (preferred leader first), ISR, leader (-1: none) and the two epochs of a partition."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding: tuple[int, ...] = ()  # a reassignment's new replicas (KIP-455 addingReplicas)
    removing: tuple[int, ...] = ()  # a reassignment's leaving replicas (removingReplicas)

    def __post_init__(self) -> None:
        # Accept lists from callers; keep tuples so the value is really immutable and hashable.
        object.__setattr__(self, "replicas", tuple(self.replicas))
        object.__setattr__(self, "isr", tuple(self.isr))
        object.__setattr__(self, "adding", tuple(self.adding))
        object.__setattr__(self, "removing", tuple(self.removing))

    @property
    def preferred_leader(self) -> int:
        return self.replicas[0]

    @property
    def reassigning(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target(self) -> tuple[int, ...]:
        """The replicas once the reassignment in progress (if any) completes."""
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def original(self) -> tuple[int, ...]:
        """The replicas before the reassignment in progress (if any): what a cancel reverts to."""
        return tuple(r for r in self.replicas if r not in self.adding)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"replicas": list(self.replicas), "isr": list(self.isr), "leader": self.leader,
                             "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch}
        if self.reassigning:  # absent otherwise: states of partitions that never moved keep their bytes
            d["adding_replicas"] = list(self.adding)
            d["removing_replicas"] = list(self.removing)
        return d


@dataclass(frozen=True, slots=True)
class TopicImage:
    """A topic: its id, its config overrides (read-only by convention) and its partitions' states."""

    name: str
    topic_id: str
    configs: dict[str, str] = field(default_factory=dict)
    partitions: tuple[PartitionState, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "partitions", tuple(self.partitions))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "topic_id": self.topic_id, "configs": dict(self.configs),
                "partitions": [p.to_dict() for p in self.partitions]}


def check_partition_state(state: PartitionState, where: str) -> None:
    """The invariants every partition state must hold (raises InvariantViolation).

    Runs for every partition of every snapshot load and create record (10,000 at a time), so the
    conditions are checked first and a message is formatted only for the one that fails.
    """
    problem = _partition_state_problem(state)
    if problem is not None:
        invariant(False, f"{where}: {problem}")


def _partition_state_problem(state: PartitionState) -> str | None:
    """What is wrong with `state` (the first broken invariant), or None."""
    replicas, isr = state.replicas, state.isr
    replica_set, isr_set = set(replicas), set(isr)
    if not 0 < len(replicas) <= MAX_REPLICAS:
        return f"{len(replicas)} replicas, not 1..{MAX_REPLICAS}"
    if len(replica_set) != len(replicas):
        return f"replicas {replicas} repeat"
    if min(replicas) < 0 or max(replicas) > MAX_NODE_ID:
        return "a replica id is out of range"
    if not isr:
        return "the ISR is empty"
    if len(isr_set) != len(isr):
        return f"ISR {isr} repeats"
    if not isr_set <= replica_set:
        return f"ISR {isr} ⊄ replicas {replicas}"
    if state.leader != NO_LEADER and state.leader not in isr_set:
        return f"leader {state.leader} is not in ISR {isr}"
    if not (0 <= state.leader_epoch <= MAX_EPOCH and 0 <= state.partition_epoch <= MAX_EPOCH):
        return "an epoch is out of range"
    if not (state.adding or state.removing):
        return None  # no reassignment in progress: the rest holds trivially
    adding, removing = set(state.adding), set(state.removing)
    if len(adding) != len(state.adding) or len(removing) != len(state.removing):
        return f"adding {state.adding} or removing {state.removing} repeats"
    if not (adding <= replica_set and removing <= replica_set):
        return f"adding {state.adding} or removing {state.removing} ⊄ replicas {replicas}"
    if adding & removing:
        return f"replicas {sorted(adding & removing)} are both adding and removing"
    if len(removing) >= len(replicas):
        return "every replica is removing"
    return None


def encode_record(record: Mapping[str, Any]) -> bytes:
    """A record as an entry payload: canonical UTF-8 JSON."""
    return canonical_json(record)


def decode_record(payload: bytes) -> dict[str, Any]:
    """An entry payload as a record dict; raises ValueError when it is not one."""
    record = json.loads(payload.decode("utf-8"))
    if not isinstance(record, dict) or not isinstance(record.get("type"), str):
        raise ValueError("a metadata record is a JSON object with a string \"type\"")
    return record


def canonical_json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


# ---------------------------------------------------------------------------------------------
# Strict field readers: a record or snapshot of the wrong shape is refused, never half-read.

class RecordRejected(Exception):
    """A record does not fit the image (malformed, stale, duplicate); it is skipped."""


def read_int(d: Mapping[str, Any], key: str, lo: int, hi: int) -> int:
    v = d.get(key)
    if type(v) is not int or not lo <= v <= hi:  # `type` and not isinstance: refuse booleans
        raise RecordRejected(f"field {key!r} must be an integer in [{lo}, {hi}], not {v!r}")
    return v


def read_str(d: Mapping[str, Any], key: str, max_length: int) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not 0 < len(v) <= max_length:
        raise RecordRejected(f"field {key!r} must be a string of 1..{max_length} characters")
    return v


def read_opt_str(d: Mapping[str, Any], key: str, max_length: int) -> str | None:
    return None if d.get(key) is None else read_str(d, key, max_length)


#: Most Kafka listeners one node registers, and the longest listener name.
MAX_KAFKA_LISTENERS, MAX_LISTENER_NAME_LENGTH = 16, 64


def read_kafka_listeners(d: Mapping[str, Any], key: str) -> tuple[tuple[str, str, int], ...]:
    """An optional list of [listener name, host, port] (absent: none)."""
    v = d.get(key)
    if v is None:
        return ()
    if not isinstance(v, list) or len(v) > MAX_KAFKA_LISTENERS:
        raise RecordRejected(f"field {key!r} must be a list of at most {MAX_KAFKA_LISTENERS} listeners")
    out = []
    for item in v:
        if not isinstance(item, list) or len(item) != 3:
            raise RecordRejected(f"field {key!r}: a listener must be [name, host, port]")
        entry = {"name": item[0], "host": item[1], "port": item[2]}
        out.append((read_str(entry, "name", MAX_LISTENER_NAME_LENGTH), read_str(entry, "host", MAX_HOST_LENGTH),
                    read_int(entry, "port", 1, 65535)))
    return tuple(out)


def read_bool(d: Mapping[str, Any], key: str) -> bool:
    v = d.get(key)
    if not isinstance(v, bool):
        raise RecordRejected(f"field {key!r} must be a boolean")
    return v


_INT_TYPE = frozenset({int})


def read_node_list(d: Mapping[str, Any], key: str) -> tuple[int, ...]:
    v = d.get(key)
    if not isinstance(v, list) or len(v) > MAX_REPLICAS:
        raise RecordRejected(f"field {key!r} must be a list of at most {MAX_REPLICAS} node ids")
    # `type` and not isinstance: refuse booleans; map/min/max keep the loop in C (10,000 partitions a snapshot).
    if v and (not set(map(type, v)) <= _INT_TYPE or min(v) < 0 or max(v) > MAX_NODE_ID):
        raise RecordRejected(f"field {key!r} holds something other than node ids")
    return tuple(v)


def read_configs(d: Mapping[str, Any], key: str) -> dict[str, str]:
    v = d.get(key)
    if not isinstance(v, dict) or len(v) > MAX_CONFIG_ENTRIES:
        raise RecordRejected(f"field {key!r} must be an object of at most {MAX_CONFIG_ENTRIES} entries")
    for k, val in v.items():
        if not (isinstance(k, str) and 0 < len(k) <= MAX_CONFIG_KEY_LENGTH
                and isinstance(val, str) and len(val) <= MAX_CONFIG_VALUE_LENGTH):
            raise RecordRejected(f"config {k!r} is not a string key with a string value within limits")
    return dict(v)


def read_partition(d: Any, where: str) -> PartitionState:
    if not isinstance(d, dict):
        raise RecordRejected(f"{where} is not an object")
    state = PartitionState(read_node_list(d, "replicas"), read_node_list(d, "isr"),
                           read_int(d, "leader", NO_LEADER, MAX_NODE_ID),
                           read_int(d, "leader_epoch", 0, MAX_EPOCH), read_int(d, "partition_epoch", 0, MAX_EPOCH),
                           read_node_list(d, "adding_replicas") if "adding_replicas" in d else (),
                           read_node_list(d, "removing_replicas") if "removing_replicas" in d else ())
    check_partition_state(state, where)
    return state


def read_partition_list(d: Mapping[str, Any], key: str, where: str) -> tuple[PartitionState, ...]:
    v = d.get(key)
    if not isinstance(v, list) or len(v) > MAX_PARTITIONS_PER_TOPIC:
        raise RecordRejected(f"field {key!r} must be a list of at most {MAX_PARTITIONS_PER_TOPIC} partitions")
    return tuple(read_partition(p, f"{where} partition {i}") for i, p in enumerate(v))


def read_topic_name(d: Mapping[str, Any], key: str) -> str:
    name = read_str(d, key, 249)
    try:
        return validate_topic_name(name)
    except InvalidTopicError as e:
        raise RecordRejected(str(e)) from None
