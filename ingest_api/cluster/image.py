"""The cluster metadata image: the replicated state machine of the controller quorum's metadata log.

Every controller voter (and every broker following the log) applies the same committed entries in
the same order and ends with the same `ClusterImage`: the registered brokers, the topics with the
state of each partition (replicas, ISR, leader, leader epoch, partition epoch), and the producer-id
high-water mark. The active controller (`controller.py`) reads the image to decide, and proposes
records; only `apply` changes the image.

Records
-------
An entry's payload is one record: UTF-8 JSON of an object with a `"type"` (`encode_record` writes
it canonically). `apply` re-checks each record against the image and skips it — identically on
every voter — when it does not fit (unknown topic, stale epoch, a duplicate); the controller
validated it already, so a skip means a duplicate or stale proposal, or a bug. Fields:

    register_broker            node_id, broker_epoch, incarnation_id, host, port, rack (str|null)
                               -> a new registration, fenced; broker_epoch must exceed the node's
                                  current one. Replaces an existing registration (the node restarted).
    unfence_broker             node_id, broker_epoch            fenced -> unfenced
    fence_broker               node_id, broker_epoch            unfenced -> fenced
    broker_controlled_shutdown node_id, broker_epoch            sets in_controlled_shutdown
    unregister_broker          node_id, broker_epoch            removes the registration
    create_topic               name, topic_id, configs {str: str},
                               partitions [{replicas, isr, leader, leader_epoch, partition_epoch}]
    create_partitions          name, topic_id, partitions [...]  appended to the topic's partitions
    delete_topic               name, topic_id
    alter_configs              name, topic_id, configs           the full new map
    partition_change           topic, topic_id, partition, [leader], [isr], [replicas],
                               [adding_replicas], [removing_replicas],
                               leader_epoch, partition_epoch     the resulting epochs, explicitly
    allocate_producer_ids      node_id, broker_epoch, first_id, count
    user_credential, delete_user, create_api_key, delete_api_key, create_acls, delete_acls
                               users, API keys and ACLs: `image.security`
                               (ingest_api/security/records.py)
    schema_register, schema_delete, schema_config, schema_mode
                               the Schema Registry: `image.schemas` (ingest_api/schemas/state.py)
    broker_configs             broker (-1 = cluster-wide), configs: dynamic broker configs,
                               `image.broker_configs` (ingest_api/cluster/broker_configs.py)
    alter_broker_configs       the dynamic replication throttle rates: `image.throttles`
                               (ingest_api/cluster/throttles.py)

Broker records name the registration they act on by `broker_epoch`; topic records name the topic by
`topic_id` too, so a record meant for a deleted topic never lands on a re-created one of that name.
`partition_change` is a compare-and-swap: its `partition_epoch` must be the current one + 1, and its
`leader_epoch` the current one + 1 when the leader changes (to -1 and back included), else equal.
A duplicate proposal therefore applies once; the second copy is skipped.

Reassignment (Kafka's KIP-455, as its PartitionRecord / PartitionChangeRecord carry it): while a
partition moves, `replicas` is the target followed by the original replicas that are leaving,
`adding_replicas` the target's new members and `removing_replicas` the leaving ones; the target is
`replicas` minus `removing_replicas`. Both lists are absent (empty) when no reassignment is in
progress, so the state of a partition that never moved is written as before. The controller's
steps are in `reassignment.py`.

Invariants (checked with `invariant()` on every partition a record produces)
----------------------------------------------------------------------------
* replicas are distinct and non-empty; ISR ⊆ replicas, distinct, never empty (when the last ISR
  member dies it stays in the ISR with leader -1, Kafka's KIP-841, so it can lead again);
* leader ∈ ISR unless leader == -1 (no leader: the partition is offline);
* adding and removing replicas are disjoint subsets of the replicas, and the target (replicas minus
  removing) is not empty;
* leader epoch and partition epoch only grow;
* the producer-id high-water mark only grows; a broker's epoch only grows while it is registered.

A record that would break one is skipped, not applied: `apply` must not fail on a committed entry
(a voter that raised would stop applying and stall the quorum), and skipping is deterministic, so
every voter still has the same image. Skips are counted in `skipped_records` (part of the state)
and the last few are kept, with reasons, in `recent_skips` (not part of the state) for debugging;
a host that needs to know whether its proposal took effect checks `skipped_at(index)`.

Snapshot
--------
Canonical JSON (keys sorted, no spaces, ASCII):

    {"crc32c": <CRC-32C of the canonical JSON of "image">, "image": {<to_dict() state>}, "version": 1}

with brokers sorted by node id and topics by name, so equal images give equal bytes. `restore`
refuses another version, a CRC mismatch or any structural error with `SnapshotFormatError`, and
replaces the state only once the whole snapshot has been checked.

Concurrency: not thread-safe. The Raft host applies entries from one thread; readers on other
threads take `copy()` under the host's lock (cheap: registrations, topics and partition states are
immutable values, replaced on change, so a copy shares them).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lakelog.infra.errors import InvariantViolation, invariant
from lakelog.ingest_api.errors import InvalidTopicError
from lakelog.ingest_api.names import validate_topic_name
from lakelog.ingest_api.raft.messages import Entry, EntryKind
from lakelog.ingest_api.raft.state_machine import SnapshotFormatError
from lakelog.ingest_api.cluster.broker_configs import RECORD_TYPES as BROKER_CONFIG_RECORD_TYPES, BrokerConfigState
from lakelog.ingest_api.schemas.errors import SchemaRegistryError
from lakelog.ingest_api.schemas.state import RECORD_TYPES as SCHEMA_RECORD_TYPES, SchemaRegistryState
from lakelog.ingest_api.security.records import RECORD_TYPES as SECURITY_RECORD_TYPES, SecurityState
from lakelog.ingest_api.cluster.throttles import RECORD_TYPES as THROTTLE_RECORD_TYPES, BrokerThrottles
from lakelog.logstore.record_batch import crc32c

SNAPSHOT_VERSION = 1
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
RECENT_SKIPS_KEPT = 32


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

    def to_dict(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "broker_epoch": self.broker_epoch,
                "incarnation_id": self.incarnation_id, "host": self.host, "port": self.port,
                "rack": self.rack, "fenced": self.fenced,
                "in_controlled_shutdown": self.in_controlled_shutdown,
                "registration_index": self.registration_index}


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
    """The invariants every partition state must hold (raises InvariantViolation)."""
    invariant(0 < len(state.replicas) <= MAX_REPLICAS,
              f"{where}: {len(state.replicas)} replicas, not 1..{MAX_REPLICAS}")
    invariant(len(set(state.replicas)) == len(state.replicas), f"{where}: replicas {state.replicas} repeat")
    invariant(all(0 <= r <= MAX_NODE_ID for r in state.replicas), f"{where}: a replica id is out of range")
    invariant(len(state.isr) > 0, f"{where}: the ISR is empty")
    invariant(len(set(state.isr)) == len(state.isr), f"{where}: ISR {state.isr} repeats")
    invariant(set(state.isr) <= set(state.replicas), f"{where}: ISR {state.isr} ⊄ replicas {state.replicas}")
    invariant(state.leader == NO_LEADER or state.leader in state.isr,
              f"{where}: leader {state.leader} is not in ISR {state.isr}")
    invariant(0 <= state.leader_epoch <= MAX_EPOCH and 0 <= state.partition_epoch <= MAX_EPOCH,
              f"{where}: an epoch is out of range")
    adding, removing = set(state.adding), set(state.removing)
    invariant(len(adding) == len(state.adding) and len(removing) == len(state.removing),
              f"{where}: adding {state.adding} or removing {state.removing} repeats")
    invariant(adding <= set(state.replicas) and removing <= set(state.replicas),
              f"{where}: adding {state.adding} or removing {state.removing} ⊄ replicas {state.replicas}")
    invariant(not adding & removing, f"{where}: replicas {sorted(adding & removing)} are both adding and removing")
    invariant(len(removing) < len(state.replicas), f"{where}: every replica is removing")


def encode_record(record: Mapping[str, Any]) -> bytes:
    """A record as an entry payload: canonical UTF-8 JSON."""
    return _canonical(record)


def decode_record(payload: bytes) -> dict[str, Any]:
    """An entry payload as a record dict; raises ValueError when it is not one."""
    record = json.loads(payload.decode("utf-8"))
    if not isinstance(record, dict) or not isinstance(record.get("type"), str):
        raise ValueError("a metadata record is a JSON object with a string \"type\"")
    return record


def _observe(observer: Any, method: str, *args: Any) -> Any:
    """Call the image's observer, if any; whatever it raises is logged, never passed on."""
    if observer is None:
        return None
    try:
        return getattr(observer, method)(*args)
    except Exception:  # the observer only informs (the console's events); the apply goes on
        logging.getLogger("lakelog.metadata").exception("the metadata image's observer failed")
        return None


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


# ---------------------------------------------------------------------------------------------
# Strict field readers: a record or snapshot of the wrong shape is refused, never half-read.

class _Rejected(Exception):
    """A record does not fit the image (malformed, stale, duplicate); it is skipped."""


def _int(d: Mapping[str, Any], key: str, lo: int, hi: int) -> int:
    v = d.get(key)
    if type(v) is not int or not lo <= v <= hi:  # `type` and not isinstance: refuse booleans
        raise _Rejected(f"field {key!r} must be an integer in [{lo}, {hi}], not {v!r}")
    return v


def _str(d: Mapping[str, Any], key: str, max_length: int) -> str:
    v = d.get(key)
    if not isinstance(v, str) or not 0 < len(v) <= max_length:
        raise _Rejected(f"field {key!r} must be a string of 1..{max_length} characters")
    return v


def _opt_str(d: Mapping[str, Any], key: str, max_length: int) -> str | None:
    return None if d.get(key) is None else _str(d, key, max_length)


def _bool(d: Mapping[str, Any], key: str) -> bool:
    v = d.get(key)
    if not isinstance(v, bool):
        raise _Rejected(f"field {key!r} must be a boolean")
    return v


def _node_list(d: Mapping[str, Any], key: str) -> tuple[int, ...]:
    v = d.get(key)
    if not isinstance(v, list) or len(v) > MAX_REPLICAS:
        raise _Rejected(f"field {key!r} must be a list of at most {MAX_REPLICAS} node ids")
    if not all(type(x) is int and 0 <= x <= MAX_NODE_ID for x in v):
        raise _Rejected(f"field {key!r} holds something other than node ids")
    return tuple(v)


def _configs(d: Mapping[str, Any], key: str) -> dict[str, str]:
    v = d.get(key)
    if not isinstance(v, dict) or len(v) > MAX_CONFIG_ENTRIES:
        raise _Rejected(f"field {key!r} must be an object of at most {MAX_CONFIG_ENTRIES} entries")
    for k, val in v.items():
        if not (isinstance(k, str) and 0 < len(k) <= MAX_CONFIG_KEY_LENGTH
                and isinstance(val, str) and len(val) <= MAX_CONFIG_VALUE_LENGTH):
            raise _Rejected(f"config {k!r} is not a string key with a string value within limits")
    return dict(v)


def _partition(d: Any, where: str) -> PartitionState:
    if not isinstance(d, dict):
        raise _Rejected(f"{where} is not an object")
    state = PartitionState(_node_list(d, "replicas"), _node_list(d, "isr"),
                           _int(d, "leader", NO_LEADER, MAX_NODE_ID),
                           _int(d, "leader_epoch", 0, MAX_EPOCH), _int(d, "partition_epoch", 0, MAX_EPOCH),
                           _node_list(d, "adding_replicas") if "adding_replicas" in d else (),
                           _node_list(d, "removing_replicas") if "removing_replicas" in d else ())
    check_partition_state(state, where)
    return state


def _partition_list(d: Mapping[str, Any], key: str, where: str) -> tuple[PartitionState, ...]:
    v = d.get(key)
    if not isinstance(v, list) or len(v) > MAX_PARTITIONS_PER_TOPIC:
        raise _Rejected(f"field {key!r} must be a list of at most {MAX_PARTITIONS_PER_TOPIC} partitions")
    return tuple(_partition(p, f"{where} partition {i}") for i, p in enumerate(v))


def _topic_name(d: Mapping[str, Any], key: str) -> str:
    name = _str(d, key, 249)
    try:
        return validate_topic_name(name)
    except InvalidTopicError as e:
        raise _Rejected(str(e)) from None


# ---------------------------------------------------------------------------------------------
# The image

class ClusterImage:
    """The metadata state machine: brokers, topics and partitions, producer ids (see module docstring)."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[str, TopicImage] = {}
        self.next_producer_id = 0
        self.controller_epoch = 0  # the Raft term of the last applied command entry
        self.last_applied_index = 0
        self.last_applied_term = 0
        self.skipped_records = 0
        self.recent_skips: collections.deque[tuple[int, str]] = collections.deque(maxlen=RECENT_SKIPS_KEPT)
        self.security = SecurityState()  # users, API keys, ACLs (an immutable value)
        self.schemas = SchemaRegistryState()  # the Schema Registry (an immutable value)
        self.broker_configs = BrokerConfigState()  # dynamic broker configs (an immutable value)
        self.throttles = BrokerThrottles()  # dynamic replication throttle rates (an immutable value)
        #: Told of each applied record (`before(image, record)` -> token, `after(image, record, token)`),
        #: e.g. the console's cluster events (ingest_api/cluster_events.py). Not part of the state;
        #: its errors are swallowed, so it can never fail or change an apply.
        self.observer: Any = None

    # --- reads ---------------------------------------------------------------------------------

    def broker(self, node_id: int) -> BrokerRegistration | None:
        return self.brokers.get(node_id)

    def topic(self, name: str) -> TopicImage | None:
        return self.topics.get(name)

    def partition(self, topic: str, partition: int) -> PartitionState | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return None
        return t.partitions[partition]

    def is_live(self, node_id: int) -> bool:
        """Registered and unfenced (a broker in controlled shutdown is still live)."""
        reg = self.brokers.get(node_id)
        return reg is not None and not reg.fenced

    def live_brokers(self) -> list[BrokerRegistration]:
        """Registered, unfenced brokers, by node id."""
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]

    def serving_brokers(self) -> list[int]:
        """Registered, unfenced and not in controlled shutdown: the nodes that may take leaderships."""
        return [n for n, b in sorted(self.brokers.items()) if not b.fenced and not b.in_controlled_shutdown]

    def iter_partitions(self) -> Iterator[tuple[TopicImage, int, PartitionState]]:
        """Every partition, topics by name, in a deterministic order."""
        for name in sorted(self.topics):
            t = self.topics[name]
            for i, state in enumerate(t.partitions):
                yield t, i, state

    def skipped_at(self, index: int) -> str | None:
        """Why the entry at `index` was skipped, if it was one of the last few skipped; else None."""
        for i, reason in self.recent_skips:
            if i == index:
                return reason
        return None

    def copy(self) -> ClusterImage:
        """An independent image with the same state (shares the immutable values)."""
        other = ClusterImage()
        other.brokers = dict(self.brokers)
        other.topics = dict(self.topics)
        other.next_producer_id = self.next_producer_id
        other.controller_epoch = self.controller_epoch
        other.last_applied_index = self.last_applied_index
        other.last_applied_term = self.last_applied_term
        other.skipped_records = self.skipped_records
        other.security = self.security
        other.schemas = self.schemas
        other.broker_configs = self.broker_configs
        other.throttles = self.throttles
        other.recent_skips = collections.deque(self.recent_skips, maxlen=RECENT_SKIPS_KEPT)
        return other

    def state_dict(self) -> dict[str, Any]:
        """The replicated state as plain JSON-able data (the snapshot's `image`)."""
        state = {"last_applied_index": self.last_applied_index, "last_applied_term": self.last_applied_term,
                "controller_epoch": self.controller_epoch, "next_producer_id": self.next_producer_id,
                "skipped_records": self.skipped_records,
                "brokers": [b.to_dict() for _, b in sorted(self.brokers.items())],
                "topics": [self.topics[n].to_dict() for n in sorted(self.topics)]}
        if not self.security.empty:  # absent while unused: snapshots of clusters without security are unchanged
            state["security"] = self.security.to_dict()
        if not self.schemas.empty:  # likewise
            state["schemas"] = self.schemas.to_dict()
        if not self.broker_configs.empty:  # likewise
            state["broker_configs"] = self.broker_configs.to_dict()
        if not self.throttles.empty:  # likewise
            state["throttles"] = self.throttles.to_dict()
        return state

    def to_dict(self) -> dict[str, Any]:
        """The state plus the recent skips, for the HTTP / debug view."""
        d = self.state_dict()
        d["recent_skips"] = [{"index": i, "reason": r} for i, r in self.recent_skips]
        return d

    # --- StateMachine --------------------------------------------------------------------------

    def apply(self, entry: Entry) -> None:
        """Apply one committed entry; never raises on a bad record (it is skipped and counted)."""
        if entry.index <= self.last_applied_index:
            # Already applied (a host replaying over a snapshot): ignore. Not counted in
            # `skipped_records`, which must be equal on every voter; a host bug should not skew it.
            self.recent_skips.append((entry.index, f"entry {entry.index} is at or below the applied "
                                                   f"index {self.last_applied_index}"))
            return
        self.last_applied_index = entry.index
        self.last_applied_term = entry.term
        if entry.kind != EntryKind.COMMAND:
            return
        self.controller_epoch = entry.term
        try:
            record = decode_record(entry.payload)
            handler = _HANDLERS.get(record["type"])
            if handler is None:
                raise _Rejected(f"unknown record type {record['type']!r}")
            token = _observe(self.observer, "before", self, record)
            handler(self, record, entry.index)
            _observe(self.observer, "after", self, record, token)
        except (_Rejected, InvariantViolation, ValueError, RecursionError) as e:  # bad UTF-8 / JSON
            self._skip(entry.index, str(e))

    def apply_record(self, record: Mapping[str, Any], index: int | None = None, term: int | None = None) -> None:
        """Apply one record as the next command entry (tests and tools; the host uses `apply`)."""
        self.apply(Entry(self.last_applied_index + 1 if index is None else index,
                         self.last_applied_term if term is None else term, EntryKind.COMMAND,
                         encode_record(record)))

    def snapshot(self) -> bytes:
        state = self.state_dict()
        return _canonical({"version": SNAPSHOT_VERSION, "crc32c": crc32c(_canonical(state)), "image": state})

    def restore(self, data: bytes) -> None:
        try:
            doc = json.loads(data)
        except (ValueError, RecursionError) as e:
            raise SnapshotFormatError(f"metadata snapshot is not JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("version") != SNAPSHOT_VERSION:
            version = doc.get("version") if isinstance(doc, dict) else None
            raise SnapshotFormatError(f"metadata snapshot version {version!r} is not {SNAPSHOT_VERSION}")
        state = doc.get("image")
        if not isinstance(state, dict):
            raise SnapshotFormatError("metadata snapshot has no image object")
        crc = crc32c(_canonical(state))
        if doc.get("crc32c") != crc:
            raise SnapshotFormatError(f"metadata snapshot CRC-32C {doc.get('crc32c')!r} does not match "
                                      f"its content ({crc})")
        try:
            fresh = _image_from_state(state)
        except (_Rejected, InvariantViolation) as e:
            raise SnapshotFormatError(f"metadata snapshot is malformed: {e}") from None
        self.__dict__.update(fresh.__dict__)

    # --- record handlers (validate fully, then mutate) -----------------------------------------

    def _skip(self, index: int, reason: str) -> None:
        self.skipped_records += 1
        self.recent_skips.append((index, reason))

    def _registration(self, rec: Mapping[str, Any]) -> BrokerRegistration:
        node_id = _int(rec, "node_id", 0, MAX_NODE_ID)
        epoch = _int(rec, "broker_epoch", 0, MAX_LONG)
        reg = self.brokers.get(node_id)
        if reg is None:
            raise _Rejected(f"node {node_id} is not registered")
        if reg.broker_epoch != epoch:
            raise _Rejected(f"broker epoch {epoch} of node {node_id} is not the current {reg.broker_epoch}")
        return reg

    def _topic(self, rec: Mapping[str, Any], key: str) -> TopicImage:
        name = _str(rec, key, 249)
        topic_id = _str(rec, "topic_id", MAX_TOPIC_ID_LENGTH)
        t = self.topics.get(name)
        if t is None or t.topic_id != topic_id:
            raise _Rejected(f"no topic {name!r} with id {topic_id}")
        return t

    def _register_broker(self, rec: Mapping[str, Any], index: int) -> None:
        node_id = _int(rec, "node_id", 0, MAX_NODE_ID)
        epoch = _int(rec, "broker_epoch", 1, MAX_LONG)
        old = self.brokers.get(node_id)
        if old is not None and epoch <= old.broker_epoch:
            raise _Rejected(f"broker epoch {epoch} of node {node_id} does not exceed the current {old.broker_epoch}")
        self.brokers[node_id] = BrokerRegistration(
            node_id, epoch, _str(rec, "incarnation_id", MAX_INCARNATION_ID_LENGTH),
            _str(rec, "host", MAX_HOST_LENGTH), _int(rec, "port", 0, 65535),
            _opt_str(rec, "rack", MAX_RACK_LENGTH), fenced=True, in_controlled_shutdown=False,
            registration_index=index)

    def _unfence_broker(self, rec: Mapping[str, Any], index: int) -> None:
        reg = self._registration(rec)
        if not reg.fenced or reg.in_controlled_shutdown:
            raise _Rejected(f"node {reg.node_id} is not fenced, or is shutting down")
        self.brokers[reg.node_id] = dataclasses.replace(reg, fenced=False)

    def _fence_broker(self, rec: Mapping[str, Any], index: int) -> None:
        reg = self._registration(rec)
        if reg.fenced:
            raise _Rejected(f"node {reg.node_id} is already fenced")
        self.brokers[reg.node_id] = dataclasses.replace(reg, fenced=True)

    def _broker_controlled_shutdown(self, rec: Mapping[str, Any], index: int) -> None:
        reg = self._registration(rec)
        if reg.in_controlled_shutdown:
            raise _Rejected(f"node {reg.node_id} is already in controlled shutdown")
        self.brokers[reg.node_id] = dataclasses.replace(reg, in_controlled_shutdown=True)

    def _unregister_broker(self, rec: Mapping[str, Any], index: int) -> None:
        reg = self._registration(rec)
        del self.brokers[reg.node_id]

    def _create_topic(self, rec: Mapping[str, Any], index: int) -> None:
        name = _topic_name(rec, "name")
        topic_id = _str(rec, "topic_id", MAX_TOPIC_ID_LENGTH)
        if name in self.topics:
            raise _Rejected(f"topic {name!r} exists")
        if any(t.topic_id == topic_id for t in self.topics.values()):
            raise _Rejected(f"topic id {topic_id} is taken")
        partitions = _partition_list(rec, "partitions", f"topic {name!r}")
        if not partitions:
            raise _Rejected(f"topic {name!r} has no partitions")
        self.topics[name] = TopicImage(name, topic_id, _configs(rec, "configs"), partitions)

    def _create_partitions(self, rec: Mapping[str, Any], index: int) -> None:
        t = self._topic(rec, "name")
        added = _partition_list(rec, "partitions", f"topic {t.name!r}")
        if not added or len(t.partitions) + len(added) > MAX_PARTITIONS_PER_TOPIC:
            raise _Rejected(f"cannot add {len(added)} partitions to topic {t.name!r}")
        self.topics[t.name] = dataclasses.replace(t, partitions=t.partitions + added)

    def _delete_topic(self, rec: Mapping[str, Any], index: int) -> None:
        t = self._topic(rec, "name")
        del self.topics[t.name]

    def _alter_configs(self, rec: Mapping[str, Any], index: int) -> None:
        t = self._topic(rec, "name")
        self.topics[t.name] = dataclasses.replace(t, configs=_configs(rec, "configs"))

    def _partition_change(self, rec: Mapping[str, Any], index: int) -> None:
        t = self._topic(rec, "topic")
        p = _int(rec, "partition", 0, MAX_PARTITIONS_PER_TOPIC)
        if p >= len(t.partitions):
            raise _Rejected(f"topic {t.name!r} has no partition {p}")
        old = t.partitions[p]
        if not any(k in rec for k in ("leader", "isr", "replicas", "adding_replicas", "removing_replicas")):
            raise _Rejected("a partition_change changes none of leader, isr, replicas, adding/removing replicas")
        new = PartitionState(
            _node_list(rec, "replicas") if "replicas" in rec else old.replicas,
            _node_list(rec, "isr") if "isr" in rec else old.isr,
            _int(rec, "leader", NO_LEADER, MAX_NODE_ID) if "leader" in rec else old.leader,
            _int(rec, "leader_epoch", 0, MAX_EPOCH), _int(rec, "partition_epoch", 0, MAX_EPOCH),
            _node_list(rec, "adding_replicas") if "adding_replicas" in rec else old.adding,
            _node_list(rec, "removing_replicas") if "removing_replicas" in rec else old.removing)
        where = f"{t.name}-{p}"
        if new.partition_epoch != old.partition_epoch + 1:
            raise _Rejected(f"{where}: partition epoch {new.partition_epoch} is not {old.partition_epoch} + 1")
        want_leader_epoch = old.leader_epoch + (1 if new.leader != old.leader else 0)
        if new.leader_epoch != want_leader_epoch:
            raise _Rejected(f"{where}: leader epoch {new.leader_epoch} is not {want_leader_epoch}")
        if ((new.replicas, new.isr, new.leader, new.adding, new.removing)
                == (old.replicas, old.isr, old.leader, old.adding, old.removing)):
            raise _Rejected(f"{where}: the partition_change changes nothing")
        check_partition_state(new, where)
        invariant(new.leader_epoch >= old.leader_epoch and new.partition_epoch > old.partition_epoch,
                  f"{where}: epochs went backwards")
        parts = list(t.partitions)
        parts[p] = new
        self.topics[t.name] = dataclasses.replace(t, partitions=tuple(parts))

    def _allocate_producer_ids(self, rec: Mapping[str, Any], index: int) -> None:
        _int(rec, "node_id", 0, MAX_NODE_ID)
        first = _int(rec, "first_id", 0, MAX_LONG)
        count = _int(rec, "count", 1, MAX_PRODUCER_ID_BLOCK)
        # The broker epoch is not re-checked: the block is consumed either way, so an id is never
        # handed out twice even if the broker re-registered meanwhile.
        if first < self.next_producer_id:
            raise _Rejected(f"producer ids from {first} overlap the block below {self.next_producer_id}")
        if first + count > MAX_LONG:
            raise _Rejected("producer ids are exhausted")
        self.next_producer_id = first + count

    def _security_record(self, rec: Mapping[str, Any], index: int) -> None:
        try:
            self.security = self.security.apply(rec)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise _Rejected(f"security record: {e}") from None

    def _throttle_record(self, rec: Mapping[str, Any], index: int) -> None:
        try:
            self.throttles = self.throttles.apply(rec)
        except (ValueError, TypeError, AttributeError) as e:
            raise _Rejected(f"throttle record: {e}") from None

    def _schema_record(self, rec: Mapping[str, Any], index: int) -> None:
        try:
            self.schemas = self.schemas.apply(rec)
        except (ValueError, TypeError, KeyError, AttributeError, SchemaRegistryError) as e:
            raise _Rejected(f"schema registry record: {e}") from None

    def _broker_configs_record(self, rec: Mapping[str, Any], index: int) -> None:
        try:
            self.broker_configs = self.broker_configs.apply(rec)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise _Rejected(f"broker configs record: {e}") from None


_HANDLERS: dict[str, Callable[[ClusterImage, Mapping[str, Any], int], None]] = {
    "register_broker": ClusterImage._register_broker,
    "unfence_broker": ClusterImage._unfence_broker,
    "fence_broker": ClusterImage._fence_broker,
    "broker_controlled_shutdown": ClusterImage._broker_controlled_shutdown,
    "unregister_broker": ClusterImage._unregister_broker,
    "create_topic": ClusterImage._create_topic,
    "create_partitions": ClusterImage._create_partitions,
    "delete_topic": ClusterImage._delete_topic,
    "alter_configs": ClusterImage._alter_configs,
    "partition_change": ClusterImage._partition_change,
    "allocate_producer_ids": ClusterImage._allocate_producer_ids,
    **{t: ClusterImage._security_record for t in SECURITY_RECORD_TYPES},
    **{t: ClusterImage._schema_record for t in SCHEMA_RECORD_TYPES},
    **{t: ClusterImage._broker_configs_record for t in BROKER_CONFIG_RECORD_TYPES},
    **{t: ClusterImage._throttle_record for t in THROTTLE_RECORD_TYPES},
}

#: The record types `apply` understands.
RECORD_TYPES = frozenset(_HANDLERS)


def _image_from_state(state: Mapping[str, Any]) -> ClusterImage:
    """Rebuild an image from `state_dict()` output, checking everything (raises _Rejected / InvariantViolation)."""
    img = ClusterImage()
    img.last_applied_index = _int(state, "last_applied_index", 0, MAX_LONG)
    img.last_applied_term = _int(state, "last_applied_term", 0, MAX_LONG)
    img.controller_epoch = _int(state, "controller_epoch", 0, MAX_LONG)
    img.next_producer_id = _int(state, "next_producer_id", 0, MAX_LONG)
    img.skipped_records = _int(state, "skipped_records", 0, MAX_LONG)
    brokers, topics = state.get("brokers"), state.get("topics")
    if not isinstance(brokers, list) or not isinstance(topics, list):
        raise _Rejected("brokers and topics must be lists")
    for b in brokers:
        if not isinstance(b, dict):
            raise _Rejected("a broker is not an object")
        reg = BrokerRegistration(
            _int(b, "node_id", 0, MAX_NODE_ID), _int(b, "broker_epoch", 1, MAX_LONG),
            _str(b, "incarnation_id", MAX_INCARNATION_ID_LENGTH), _str(b, "host", MAX_HOST_LENGTH),
            _int(b, "port", 0, 65535), _opt_str(b, "rack", MAX_RACK_LENGTH), _bool(b, "fenced"),
            _bool(b, "in_controlled_shutdown"), _int(b, "registration_index", 0, MAX_LONG))
        if reg.node_id in img.brokers:
            raise _Rejected(f"node {reg.node_id} is listed twice")
        img.brokers[reg.node_id] = reg
    topic_ids: set[str] = set()
    for t in topics:
        if not isinstance(t, dict):
            raise _Rejected("a topic is not an object")
        name = _topic_name(t, "name")
        topic_id = _str(t, "topic_id", MAX_TOPIC_ID_LENGTH)
        if name in img.topics or topic_id in topic_ids:
            raise _Rejected(f"topic {name!r} or its id {topic_id} is listed twice")
        topic_ids.add(topic_id)
        partitions = _partition_list(t, "partitions", f"topic {name!r}")
        if not partitions:
            raise _Rejected(f"topic {name!r} has no partitions")
        img.topics[name] = TopicImage(name, topic_id, _configs(t, "configs"), partitions)
    if "security" in state:
        try:
            img.security = SecurityState.from_dict(state["security"])
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise _Rejected(f"security state: {e}") from None
    if "schemas" in state:
        try:
            img.schemas = SchemaRegistryState.from_dict(state["schemas"])
        except (ValueError, TypeError, KeyError, AttributeError, SchemaRegistryError) as e:
            raise _Rejected(f"schema registry state: {e}") from None
    if "broker_configs" in state:
        try:
            img.broker_configs = BrokerConfigState.from_dict(state["broker_configs"])
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise _Rejected(f"broker configs state: {e}") from None
    if "throttles" in state:
        try:
            img.throttles = BrokerThrottles.from_dict(state["throttles"])
        except (ValueError, TypeError, AttributeError) as e:
            raise _Rejected(f"throttles state: {e}") from None
    return img
