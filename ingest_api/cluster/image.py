"""The cluster metadata image: the replicated state machine of the controller quorum's metadata log.

Every controller voter (and every broker following the log) applies the same committed entries in
the same order and ends with the same `ClusterImage`: the registered brokers, the topics with the
state of each partition (replicas, ISR, leader, leader epoch, partition epoch), and the producer-id
high-water mark. The active controller (`controller.py`) reads the image to decide, and proposes
records; only `apply` changes the image. The values it holds, the bounds of a record's fields
and the strict readers of records are in `image_values.py`.

Records
-------
An entry's payload is one record: UTF-8 JSON of an object with a `"type"` (`encode_record` writes
it canonically). `apply` re-checks each record against the image and skips it — identically on
every voter — when it does not fit (unknown topic, stale epoch, a duplicate); the controller
validated it already, so a skip means a duplicate or stale proposal, or a bug. Fields:

    register_broker            node_id, broker_epoch, incarnation_id, host, port, rack (str|null),
                               [kafka_listeners [[name, host, port], ...]]
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
    partition_changes          changes [{partition_change's fields, no type}]: many partition
                               changes of one controller round in one entry, each applied (or
                               skipped and counted) as its own `partition_change`, in order
    allocate_producer_ids      node_id, broker_epoch, first_id, count
    user_credential, delete_user, create_api_key, delete_api_key, create_acls, delete_acls
    delete_user_credential
                               users, API keys and ACLs: `image.security`
                               (ingest_api/security/records.py)
    schema_register, schema_delete, schema_config, schema_mode
                               the Schema Registry: `image.schemas` (ingest_api/schemas/state.py)
    broker_configs             broker (-1 = cluster-wide), configs: dynamic broker configs, the
                               replication throttle rates among them: `image.broker_configs`
                               (ingest_api/cluster/broker_configs.py)
    alter_broker_configs       legacy: the throttle rates' former own record, still replayed into
                               `image.broker_configs` (a snapshot's former `throttles` section too)

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
from typing import Any

from lakelog.infra.errors import InvariantViolation, invariant
from lakelog.ingest_api.raft.messages import Entry, EntryKind
from lakelog.ingest_api.raft.state_machine import SnapshotFormatError
from lakelog.ingest_api.cluster.image_values import (
    BrokerRegistration,
    MAX_EPOCH,
    MAX_HOST_LENGTH,
    MAX_INCARNATION_ID_LENGTH,
    MAX_LONG,
    MAX_NODE_ID,
    MAX_PARTITIONS_PER_TOPIC,
    MAX_PRODUCER_ID_BLOCK,
    MAX_RACK_LENGTH,
    MAX_TOPIC_ID_LENGTH,
    NO_LEADER,
    PartitionState,
    RecordRejected,
    TopicImage,
    canonical_json,
    check_partition_state,
    decode_record,
    encode_record,
    read_bool,
    read_configs,
    read_int,
    read_kafka_listeners,
    read_node_list,
    read_opt_str,
    read_partition_list,
    read_str,
    read_topic_name,
)
from lakelog.ingest_api.cluster.broker_configs import LEGACY_THROTTLE_RECORD_TYPES
from lakelog.ingest_api.cluster.broker_configs import RECORD_TYPES as BROKER_CONFIG_RECORD_TYPES, BrokerConfigState
from lakelog.ingest_api.schemas.errors import SchemaRegistryError
from lakelog.ingest_api.schemas.state import RECORD_TYPES as SCHEMA_RECORD_TYPES, SchemaRegistryState
from lakelog.ingest_api.security.records import RECORD_TYPES as SECURITY_RECORD_TYPES, SecurityState
from lakelog.logstore.record_batch import crc32c

SNAPSHOT_VERSION = 1

RECENT_SKIPS_KEPT = 32


def _observe(observer: Any, method: str, *args: Any) -> Any:
    """Call the image's observer, if any; whatever it raises is logged, never passed on."""
    if observer is None:
        return None
    try:
        return getattr(observer, method)(*args)
    except Exception:  # the observer only informs (the console's events); the apply goes on
        logging.getLogger("lakelog.metadata").exception("the metadata image's observer failed")
        return None


#: Most partition changes one `partition_changes` record carries (each at most ~400 bytes of JSON:
#: well under `max_entry_bytes`).
MAX_CHANGES_PER_RECORD = 1000


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
        self.broker_configs = BrokerConfigState()  # dynamic broker configs, throttle rates included (immutable)
        #: Told of each applied record (`before(image, record)` -> token, `after(image, record, token)`),
        #: e.g. the console's cluster events (ingest_api/cluster/events.py). Not part of the state;
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
                raise RecordRejected(f"unknown record type {record['type']!r}")
            token = _observe(self.observer, "before", self, record)
            handler(self, record, entry.index)
            _observe(self.observer, "after", self, record, token)
        except (RecordRejected, InvariantViolation, ValueError, RecursionError) as e:  # bad UTF-8 / JSON
            self._skip(entry.index, str(e))

    def apply_record(self, record: Mapping[str, Any], index: int | None = None, term: int | None = None) -> None:
        """Apply one record as the next command entry (tests and tools; the host uses `apply`)."""
        self.apply(Entry(self.last_applied_index + 1 if index is None else index,
                         self.last_applied_term if term is None else term, EntryKind.COMMAND,
                         encode_record(record)))

    def snapshot(self) -> bytes:
        state = self.state_dict()
        return canonical_json({"version": SNAPSHOT_VERSION, "crc32c": crc32c(canonical_json(state)), "image": state})

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
        crc = crc32c(canonical_json(state))
        if doc.get("crc32c") != crc:
            raise SnapshotFormatError(f"metadata snapshot CRC-32C {doc.get('crc32c')!r} does not match "
                                      f"its content ({crc})")
        try:
            fresh = _image_from_state(state)
        except (RecordRejected, InvariantViolation) as e:
            raise SnapshotFormatError(f"metadata snapshot is malformed: {e}") from None
        self.__dict__.update(fresh.__dict__)

    # --- record handlers (validate fully, then mutate) -----------------------------------------

    def _skip(self, index: int, reason: str) -> None:
        self.skipped_records += 1
        self.recent_skips.append((index, reason))

    def _registration(self, rec: Mapping[str, Any]) -> BrokerRegistration:
        node_id = read_int(rec, "node_id", 0, MAX_NODE_ID)
        epoch = read_int(rec, "broker_epoch", 0, MAX_LONG)
        reg = self.brokers.get(node_id)
        if reg is None:
            raise RecordRejected(f"node {node_id} is not registered")
        if reg.broker_epoch != epoch:
            raise RecordRejected(f"broker epoch {epoch} of node {node_id} is not the current {reg.broker_epoch}")
        return reg

    def _topic(self, rec: Mapping[str, Any], key: str) -> TopicImage:
        name = read_str(rec, key, 249)
        topic_id = read_str(rec, "topic_id", MAX_TOPIC_ID_LENGTH)
        t = self.topics.get(name)
        if t is None or t.topic_id != topic_id:
            raise RecordRejected(f"no topic {name!r} with id {topic_id}")
        return t

    def _register_broker(self, rec: Mapping[str, Any], index: int) -> None:
        node_id = read_int(rec, "node_id", 0, MAX_NODE_ID)
        epoch = read_int(rec, "broker_epoch", 1, MAX_LONG)
        old = self.brokers.get(node_id)
        if old is not None and epoch <= old.broker_epoch:
            raise RecordRejected(f"broker epoch {epoch} of node {node_id} does not exceed the current {old.broker_epoch}")
        self.brokers[node_id] = BrokerRegistration(
            node_id, epoch, read_str(rec, "incarnation_id", MAX_INCARNATION_ID_LENGTH),
            read_str(rec, "host", MAX_HOST_LENGTH), read_int(rec, "port", 0, 65535),
            read_opt_str(rec, "rack", MAX_RACK_LENGTH), fenced=True, in_controlled_shutdown=False,
            registration_index=index, kafka_listeners=read_kafka_listeners(rec, "kafka_listeners"))

    def _unfence_broker(self, rec: Mapping[str, Any], index: int) -> None:
        reg = self._registration(rec)
        if not reg.fenced or reg.in_controlled_shutdown:
            raise RecordRejected(f"node {reg.node_id} is not fenced, or is shutting down")
        self.brokers[reg.node_id] = dataclasses.replace(reg, fenced=False)

    def _fence_broker(self, rec: Mapping[str, Any], index: int) -> None:
        reg = self._registration(rec)
        if reg.fenced:
            raise RecordRejected(f"node {reg.node_id} is already fenced")
        self.brokers[reg.node_id] = dataclasses.replace(reg, fenced=True)

    def _broker_controlled_shutdown(self, rec: Mapping[str, Any], index: int) -> None:
        reg = self._registration(rec)
        if reg.in_controlled_shutdown:
            raise RecordRejected(f"node {reg.node_id} is already in controlled shutdown")
        self.brokers[reg.node_id] = dataclasses.replace(reg, in_controlled_shutdown=True)

    def _unregister_broker(self, rec: Mapping[str, Any], index: int) -> None:
        reg = self._registration(rec)
        del self.brokers[reg.node_id]

    def _create_topic(self, rec: Mapping[str, Any], index: int) -> None:
        name = read_topic_name(rec, "name")
        topic_id = read_str(rec, "topic_id", MAX_TOPIC_ID_LENGTH)
        if name in self.topics:
            raise RecordRejected(f"topic {name!r} exists")
        if any(t.topic_id == topic_id for t in self.topics.values()):
            raise RecordRejected(f"topic id {topic_id} is taken")
        partitions = read_partition_list(rec, "partitions", f"topic {name!r}")
        if not partitions:
            raise RecordRejected(f"topic {name!r} has no partitions")
        self.topics[name] = TopicImage(name, topic_id, read_configs(rec, "configs"), partitions)

    def _create_partitions(self, rec: Mapping[str, Any], index: int) -> None:
        t = self._topic(rec, "name")
        added = read_partition_list(rec, "partitions", f"topic {t.name!r}")
        if not added or len(t.partitions) + len(added) > MAX_PARTITIONS_PER_TOPIC:
            raise RecordRejected(f"cannot add {len(added)} partitions to topic {t.name!r}")
        self.topics[t.name] = dataclasses.replace(t, partitions=t.partitions + added)

    def _delete_topic(self, rec: Mapping[str, Any], index: int) -> None:
        t = self._topic(rec, "name")
        del self.topics[t.name]

    def _alter_configs(self, rec: Mapping[str, Any], index: int) -> None:
        t = self._topic(rec, "name")
        self.topics[t.name] = dataclasses.replace(t, configs=read_configs(rec, "configs"))

    def _partition_change(self, rec: Mapping[str, Any], index: int) -> None:
        t = self._topic(rec, "topic")
        p = read_int(rec, "partition", 0, MAX_PARTITIONS_PER_TOPIC)
        if p >= len(t.partitions):
            raise RecordRejected(f"topic {t.name!r} has no partition {p}")
        old = t.partitions[p]
        if not any(k in rec for k in ("leader", "isr", "replicas", "adding_replicas", "removing_replicas")):
            raise RecordRejected("a partition_change changes none of leader, isr, replicas, adding/removing replicas")
        new = PartitionState(
            read_node_list(rec, "replicas") if "replicas" in rec else old.replicas,
            read_node_list(rec, "isr") if "isr" in rec else old.isr,
            read_int(rec, "leader", NO_LEADER, MAX_NODE_ID) if "leader" in rec else old.leader,
            read_int(rec, "leader_epoch", 0, MAX_EPOCH), read_int(rec, "partition_epoch", 0, MAX_EPOCH),
            read_node_list(rec, "adding_replicas") if "adding_replicas" in rec else old.adding,
            read_node_list(rec, "removing_replicas") if "removing_replicas" in rec else old.removing)
        where = f"{t.name}-{p}"
        if new.partition_epoch != old.partition_epoch + 1:
            raise RecordRejected(f"{where}: partition epoch {new.partition_epoch} is not {old.partition_epoch} + 1")
        want_leader_epoch = old.leader_epoch + (1 if new.leader != old.leader else 0)
        if new.leader_epoch != want_leader_epoch:
            raise RecordRejected(f"{where}: leader epoch {new.leader_epoch} is not {want_leader_epoch}")
        if ((new.replicas, new.isr, new.leader, new.adding, new.removing)
                == (old.replicas, old.isr, old.leader, old.adding, old.removing)):
            raise RecordRejected(f"{where}: the partition_change changes nothing")
        check_partition_state(new, where)
        invariant(new.leader_epoch >= old.leader_epoch and new.partition_epoch > old.partition_epoch,
                  f"{where}: epochs went backwards")
        parts = list(t.partitions)
        parts[p] = new
        self.topics[t.name] = dataclasses.replace(t, partitions=tuple(parts))

    def _partition_changes(self, rec: Mapping[str, Any], index: int) -> None:
        changes = rec.get("changes")
        if not isinstance(changes, list) or not changes or len(changes) > MAX_CHANGES_PER_RECORD:
            raise RecordRejected(f"a partition_changes record carries 1 to {MAX_CHANGES_PER_RECORD} changes")
        for c in changes:
            if not isinstance(c, Mapping):
                self._skip(index, "a partition_changes entry is not an object")
                continue
            one = {**c, "type": "partition_change"}
            token = _observe(self.observer, "before", self, one)
            try:
                self._partition_change(one, index)
            except (RecordRejected, InvariantViolation, ValueError) as e:
                self._skip(index, str(e))
                continue
            _observe(self.observer, "after", self, one, token)

    def _allocate_producer_ids(self, rec: Mapping[str, Any], index: int) -> None:
        read_int(rec, "node_id", 0, MAX_NODE_ID)
        first = read_int(rec, "first_id", 0, MAX_LONG)
        count = read_int(rec, "count", 1, MAX_PRODUCER_ID_BLOCK)
        # The broker epoch is not re-checked: the block is consumed either way, so an id is never
        # handed out twice even if the broker re-registered meanwhile.
        if first < self.next_producer_id:
            raise RecordRejected(f"producer ids from {first} overlap the block below {self.next_producer_id}")
        if first + count > MAX_LONG:
            raise RecordRejected("producer ids are exhausted")
        self.next_producer_id = first + count

    def _security_record(self, rec: Mapping[str, Any], index: int) -> None:
        try:
            self.security = self.security.apply(rec)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise RecordRejected(f"security record: {e}") from None

    def _throttle_record(self, rec: Mapping[str, Any], index: int) -> None:
        # A legacy record (before the throttle rates joined the dynamic broker configs).
        try:
            self.broker_configs = self.broker_configs.apply_throttle_record(rec)
        except (ValueError, TypeError, AttributeError) as e:
            raise RecordRejected(f"throttle record: {e}") from None

    def _schema_record(self, rec: Mapping[str, Any], index: int) -> None:
        try:
            self.schemas = self.schemas.apply(rec)
        except (ValueError, TypeError, KeyError, AttributeError, SchemaRegistryError) as e:
            raise RecordRejected(f"schema registry record: {e}") from None

    def _broker_configs_record(self, rec: Mapping[str, Any], index: int) -> None:
        try:
            self.broker_configs = self.broker_configs.apply(rec)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise RecordRejected(f"broker configs record: {e}") from None


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
    "partition_changes": ClusterImage._partition_changes,
    "allocate_producer_ids": ClusterImage._allocate_producer_ids,
    **{t: ClusterImage._security_record for t in SECURITY_RECORD_TYPES},
    **{t: ClusterImage._schema_record for t in SCHEMA_RECORD_TYPES},
    **{t: ClusterImage._broker_configs_record for t in BROKER_CONFIG_RECORD_TYPES},
    **{t: ClusterImage._throttle_record for t in LEGACY_THROTTLE_RECORD_TYPES},
}

#: The record types `apply` understands.
RECORD_TYPES = frozenset(_HANDLERS)


def _image_from_state(state: Mapping[str, Any]) -> ClusterImage:
    """Rebuild an image from `state_dict()` output, checking everything (raises RecordRejected / InvariantViolation)."""
    img = ClusterImage()
    img.last_applied_index = read_int(state, "last_applied_index", 0, MAX_LONG)
    img.last_applied_term = read_int(state, "last_applied_term", 0, MAX_LONG)
    img.controller_epoch = read_int(state, "controller_epoch", 0, MAX_LONG)
    img.next_producer_id = read_int(state, "next_producer_id", 0, MAX_LONG)
    img.skipped_records = read_int(state, "skipped_records", 0, MAX_LONG)
    brokers, topics = state.get("brokers"), state.get("topics")
    if not isinstance(brokers, list) or not isinstance(topics, list):
        raise RecordRejected("brokers and topics must be lists")
    for b in brokers:
        if not isinstance(b, dict):
            raise RecordRejected("a broker is not an object")
        reg = BrokerRegistration(
            read_int(b, "node_id", 0, MAX_NODE_ID), read_int(b, "broker_epoch", 1, MAX_LONG),
            read_str(b, "incarnation_id", MAX_INCARNATION_ID_LENGTH), read_str(b, "host", MAX_HOST_LENGTH),
            read_int(b, "port", 0, 65535), read_opt_str(b, "rack", MAX_RACK_LENGTH), read_bool(b, "fenced"),
            read_bool(b, "in_controlled_shutdown"), read_int(b, "registration_index", 0, MAX_LONG),
            read_kafka_listeners(b, "kafka_listeners"))
        if reg.node_id in img.brokers:
            raise RecordRejected(f"node {reg.node_id} is listed twice")
        img.brokers[reg.node_id] = reg
    topic_ids: set[str] = set()
    for t in topics:
        if not isinstance(t, dict):
            raise RecordRejected("a topic is not an object")
        name = read_topic_name(t, "name")
        topic_id = read_str(t, "topic_id", MAX_TOPIC_ID_LENGTH)
        if name in img.topics or topic_id in topic_ids:
            raise RecordRejected(f"topic {name!r} or its id {topic_id} is listed twice")
        topic_ids.add(topic_id)
        partitions = read_partition_list(t, "partitions", f"topic {name!r}")
        if not partitions:
            raise RecordRejected(f"topic {name!r} has no partitions")
        img.topics[name] = TopicImage(name, topic_id, read_configs(t, "configs"), partitions)
    if "security" in state:
        try:
            img.security = SecurityState.from_dict(state["security"])
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise RecordRejected(f"security state: {e}") from None
    if "schemas" in state:
        try:
            img.schemas = SchemaRegistryState.from_dict(state["schemas"])
        except (ValueError, TypeError, KeyError, AttributeError, SchemaRegistryError) as e:
            raise RecordRejected(f"schema registry state: {e}") from None
    if "broker_configs" in state:
        try:
            img.broker_configs = BrokerConfigState.from_dict(state["broker_configs"])
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise RecordRejected(f"broker configs state: {e}") from None
    if "throttles" in state:  # a snapshot written before the rates joined the broker configs
        try:
            img.broker_configs = img.broker_configs.merge_throttles(state["throttles"])
        except (ValueError, TypeError, AttributeError) as e:
            raise RecordRejected(f"throttles state: {e}") from None
    return img
