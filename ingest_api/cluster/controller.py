"""The active controller's logic: from the metadata image and a request, the records to propose.

Runs on the Raft leader of the controller quorum only (its term is the controller epoch). Pure:
no I/O, no clock (time comes in as `now_ms`), no randomness (topic ids come in from the host,
placement offsets are derived from the topic name). Every method validates against the current
`ClusterImage` and returns records (dicts, see `image.py` for their schemas) — it never mutates
the image. The only state of its own is soft, and dropped on (de)activation: broker sessions (last
heartbeat per node), the high-water marks of the broker epochs and producer ids it has handed out
but may not see applied yet, and the fences and partition changes it proposed that are in flight.

Contract with the host (the Raft node that owns the image):

* `activate(now_ms)` once this node is Raft leader *and* its image has applied the leader's first
  entry of the term (so every entry of an earlier term that will ever commit is in the image);
  `deactivate()` when leadership is lost. Methods of an inactive controller raise
  `NotControllerError`.
* Propose the returned records in order, one per entry. Answer the caller only once they are
  committed and applied; a record the image skipped (`image.skipped_at(index)`) did not take
  effect (a concurrent request got there first) — answer with a retriable error, or compare the
  image with the returned value (`image.partition(...) == state`, `image.topic(name).topic_id`).
* Not thread-safe: calls come from one thread. They may overlap with proposals still in flight,
  and that is safe: broker epochs and producer-id blocks come from in-memory high-water marks
  (never handed out twice), every other record is a compare-and-swap in `apply` (a duplicate is
  skipped), and `tick` does not re-propose a change of its own until it is applied or
  `proposal_timeout_ms` has passed (a proposal lost without a leadership change).
* Call `tick(now_ms)` periodically (every few hundred ms); it fences expired sessions and moves
  leaderships.

Invariants (also in `image.py`, checked there on every applied record):
  leader ∈ ISR ⊆ replicas unless leader == -1; the ISR is never empty; leader and partition epochs
  only grow; a node's broker epoch only grows; producer-id blocks never overlap.

Broker epochs: a registration gets `max(image.last_applied_index + 1, previous epoch of the node + 1,
last epoch this controller handed out + 1)`. The register record lands at an index above the
applied index, so the epoch of every earlier registration of any node — itself at most its own
record's index — is smaller, even across unregister / re-register and controller failover.

Liveness: a broker is *alive* when registered and unfenced; it is *eligible* (may lead, may join an
ISR, receives new replicas) when alive and not in controlled shutdown. A broker is fenced when its
session expires — no heartbeat for `broker_session_timeout_ms` since the later of its last heartbeat
and this controller's activation (a new controller grants everyone a full session) — or when it asks
(`want_fence`), or when its controlled shutdown completes. A fenced broker is unfenced by a heartbeat
that shows it has applied the metadata log up to its own register record.

Partition reconciliation (`tick`, and after every broker-state change, for that broker's partitions)
follows the rules in `partition_change.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from lakelog.infra.config import LOG_CONFIG, ConfigError, check_keyed, from_keys, keyed
from lakelog.infra.errors import invariant
from lakelog.ingest_api.cluster.errors import (
    BrokerNotRegisteredError,
    FencedBrokerError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidIsrError,
    InvalidPartitionsError,
    InvalidTopicIdError,
    InvalidUpdateVersionError,
    NotControllerError,
    NotPartitionLeaderError,
)
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.image_values import (
    MAX_CONFIG_ENTRIES,
    MAX_CONFIG_KEY_LENGTH,
    MAX_CONFIG_VALUE_LENGTH,
    MAX_HOST_LENGTH,
    MAX_INCARNATION_ID_LENGTH,
    MAX_LONG,
    MAX_NODE_ID,
    MAX_PARTITIONS_PER_TOPIC,
    MAX_PRODUCER_ID_BLOCK,
    MAX_RACK_LENGTH,
    MAX_TOPIC_ID_LENGTH,
    BrokerRegistration,
    PartitionState,
    TopicImage,
    encode_record,
)
from lakelog.ingest_api.cluster.partition_change import LivenessView, change_record, fresh_partition, target_state
from lakelog.ingest_api.cluster.placement import assign_replicas
from lakelog.ingest_api.cluster import reassignment
from lakelog.ingest_api.errors import (
    InvalidRequestError,
    PartitionNotFoundError,
    RequestTooLargeError,
    TopicExistsError,
    TopicNotFoundError,
)
from lakelog.ingest_api.config import NODE_CONFIG
from lakelog.ingest_api.names import validate_topic_name
from lakelog.logstore.record_batch import crc32c

UNCLEAN_LEADER_ELECTION_KEY = "unclean.leader.election.enable"
MIN_INSYNC_REPLICAS_KEY = "min.insync.replicas"


_KEY = NODE_CONFIG.keys


@dataclass(frozen=True)
class ControllerConfig:
    """The controller's settings; keyed fields take their default and bounds from their declared key.

    The others are the controller's own limits, not configuration keys.
    """

    broker_session_timeout_ms: int = keyed(_KEY["broker.session.timeout.ms"])
    default_replication_factor: int = keyed(_KEY["default.replication.factor"])
    num_partitions: int = keyed(_KEY["num.partitions"])
    max_partitions_per_topic: int = keyed(_KEY["max.partitions.per.topic"])  # also bounded by max_record_bytes
    default_min_insync_replicas: int = keyed(LOG_CONFIG.keys["min.insync.replicas"])
    unclean_leader_election_enable: bool = keyed(LOG_CONFIG.keys["unclean.leader.election.enable"])
    auto_leader_rebalance_enable: bool = keyed(_KEY["auto.leader.rebalance.enable"])
    leader_imbalance_check_interval_ms: int = keyed(_KEY["leader.imbalance.check.interval.seconds"],
                                                    lambda seconds: seconds * 1000)
    #: When an ISR expansion brings back a partition's preferred leader while another replica leads,
    #: the leader rebalance runs this long after the last such expansion (not at the next periodic
    #: check): a restarted node gets its leaderships back once it has caught up, not minutes later.
    preferred_leader_return_delay_ms: int = 5_000
    #: Leader moves a rebalance proposes per tick (see Controller._pace_rebalance).
    rebalance_moves_per_tick: int = 8
    producer_id_block_size: int = 1_000
    max_record_bytes: int = 1_000_000  # below the Raft max_entry_bytes (1 MiB)
    max_records_per_tick: int = 10_000  # a tick proposes at most this many; the rest next tick
    proposal_timeout_ms: int = 10_000  # a proposed change not applied after this long is proposed again

    def __post_init__(self) -> None:
        check_keyed(self)
        bounds = {
            "leader_imbalance_check_interval_ms": (0, MAX_LONG),
            "preferred_leader_return_delay_ms": (0, MAX_LONG), "rebalance_moves_per_tick": (1, 1_000_000),
            "producer_id_block_size": (1, MAX_PRODUCER_ID_BLOCK), "max_record_bytes": (1_024, 1 << 30),
            "max_records_per_tick": (1, 1_000_000), "proposal_timeout_ms": (1, MAX_LONG),
        }
        for key, (lo, hi) in bounds.items():
            value = getattr(self, key)
            if type(value) is not int or not lo <= value <= hi:
                raise ConfigError(f"controller setting {key} = {value!r} is not an integer in [{lo}, {hi}]")
        if self.num_partitions > self.max_partitions_per_topic:
            raise ConfigError("num_partitions is above max_partitions_per_topic")
        if self.max_partitions_per_topic > MAX_PARTITIONS_PER_TOPIC:
            raise ConfigError(f"max_partitions_per_topic is above {MAX_PARTITIONS_PER_TOPIC}")

    @classmethod
    def from_keys(cls, config: Any, **overrides: Any) -> "ControllerConfig":
        """From a node's parsed configuration (`NodeConfig`)."""
        return from_keys(cls, config, **overrides)


@dataclass(frozen=True)
class HeartbeatReply:
    """What a heartbeat tells the broker (valid once the heartbeat's records are applied)."""

    fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


class Controller:
    """The active controller: validates requests against the image and returns the records to propose."""

    def __init__(self, image: ClusterImage, config: ControllerConfig | None = None) -> None:
        self.image = image
        self.config = config or ControllerConfig()
        self.active = False
        self._active_since_ms = 0
        self._last_contact_ms: dict[int, int] = {}
        self._next_broker_epoch = 1
        self._next_producer_id = 0
        self._scanned_index = -1  # image index of the last complete reconcile (-1: rescan)
        self._scanned_ms = 0
        # What this controller proposed and has not seen applied yet, so `tick` does not propose it
        # again: ("fence", node_id) -> (broker epoch, proposed at) and
        # ("partition", topic_id, partition) -> (target partition epoch, proposed at).
        self._in_flight: dict[tuple[Any, ...], tuple[int, int]] = {}
        self._now_ms = 0  # the latest time any call brought
        self._last_rebalance_ms = 0
        self._rebalance_due_ms: int | None = None  # an earlier rebalance, see preferred_leader_return_delay_ms

    # --- leadership ----------------------------------------------------------------------------

    def activate(self, now_ms: int) -> None:
        """Become the active controller: every registered broker gets a full session from `now_ms`."""
        self.active = True
        self._active_since_ms = now_ms
        self._now_ms = now_ms
        self._last_contact_ms.clear()
        self._next_broker_epoch = self.image.last_applied_index + 1
        self._next_producer_id = self.image.next_producer_id
        self._scanned_index = -1
        self._scanned_ms = now_ms
        self._last_rebalance_ms = now_ms
        self._rebalance_due_ms = None
        self._in_flight.clear()

    def deactivate(self) -> None:
        """Stop being the active controller (leadership lost); the soft state is dropped."""
        self.active = False
        self._last_contact_ms.clear()
        self._in_flight.clear()

    def _require_active(self) -> None:
        if not self.active:
            raise NotControllerError("this node is not the active controller")

    # --- brokers -------------------------------------------------------------------------------

    def register_broker(self, node_id: int, incarnation_id: str, host: str, port: int, rack: str | None,
                        now_ms: int) -> tuple[list[dict[str, Any]], int]:
        """Register (or re-register) a node; returns the records and its new broker epoch.

        The same incarnation, host, port and rack as the current registration is a retry: no
        records, the current epoch. A new incarnation replaces the registration (the node
        restarted): the new one starts fenced, and the old incarnation's leaderships and ISR places
        are dropped in the same records, as if its session had expired.
        """
        self._require_active()
        _check_int("node_id", node_id, 0, MAX_NODE_ID)
        _check_int("port", port, 1, 65535)
        _check_str("incarnation_id", incarnation_id, MAX_INCARNATION_ID_LENGTH)
        _check_str("host", host, MAX_HOST_LENGTH)
        if rack is not None:
            _check_str("rack", rack, MAX_RACK_LENGTH)
        old = self.image.brokers.get(node_id)
        self._last_contact_ms[node_id] = now_ms
        if old is not None and (old.incarnation_id, old.host, old.port, old.rack) == (incarnation_id, host, port, rack):
            return [], old.broker_epoch
        epoch = max(self.image.last_applied_index + 1, self._next_broker_epoch,
                    old.broker_epoch + 1 if old is not None else 1)
        self._next_broker_epoch = epoch + 1
        records: list[dict[str, Any]] = [{
            "type": "register_broker", "node_id": node_id, "broker_epoch": epoch,
            "incarnation_id": incarnation_id, "host": host, "port": port, "rack": rack}]
        if old is not None:
            view = LivenessView(self.image)
            view.fence(node_id)
            records += self._reconcile(view, nodes={node_id})
        return self._proposed(records, now_ms), epoch

    def unregister_broker(self, node_id: int) -> list[dict[str, Any]]:
        """Remove a node's registration (operator action); its leaderships and ISR places go too."""
        self._require_active()
        reg = self.image.brokers.get(node_id)
        if reg is None:
            raise BrokerNotRegisteredError(f"node {node_id} is not registered")
        view = LivenessView(self.image)
        view.fence(node_id)
        self._last_contact_ms.pop(node_id, None)
        return self._proposed([_broker_record("unregister_broker", reg)] + self._reconcile(view, nodes={node_id}))

    def heartbeat(self, node_id: int, broker_epoch: int, now_ms: int, *, caught_up_offset: int,
                  want_fence: bool = False, want_shutdown: bool = False
                  ) -> tuple[list[dict[str, Any]], HeartbeatReply]:
        """A broker's heartbeat: renews its session; may unfence it, fence it, or drive its controlled shutdown.

        `caught_up_offset` is the broker's last applied metadata-log index. `want_shutdown` starts
        (and each later heartbeat continues) a controlled shutdown: leaderships move to other ISR
        members, the node leaves the ISRs, and once it leads nothing that could move,
        `should_shut_down` is True and the node is fenced.
        """
        self._require_active()
        reg = self._check_broker(node_id, broker_epoch)
        self._last_contact_ms[node_id] = now_ms
        self._now_ms = max(self._now_ms, now_ms)
        view = LivenessView(self.image)
        if reg.fenced:
            if want_shutdown or reg.in_controlled_shutdown:
                return [], HeartbeatReply(True, reg.in_controlled_shutdown, True)
            if want_fence or caught_up_offset < reg.registration_index:
                return [], HeartbeatReply(True, False, False)
            view.unfence(node_id)
            return (self._proposed([_broker_record("unfence_broker", reg)] + self._reconcile(view, nodes={node_id})),
                    HeartbeatReply(False, False, False))
        if want_shutdown or reg.in_controlled_shutdown:
            records: list[dict[str, Any]] = []
            if not reg.in_controlled_shutdown:
                records.append(_broker_record("broker_controlled_shutdown", reg))
            view.shut_down(node_id)
            moves = self._reconcile_changes(view, nodes={node_id})
            moved_leadership = any(old.leader == node_id and new.leader != node_id for _, _, old, new in moves)
            if reg.in_controlled_shutdown and not moved_leadership:
                # Nothing it leads can move any more: it may go. Fence it now, as Kafka does at
                # SHUTDOWN_NOW, so its ISR places go before its process does.
                view.fence(node_id)
                records.append(_broker_record("fence_broker", reg))
                records += self._reconcile(view, nodes={node_id})
                return self._proposed(records), HeartbeatReply(True, True, True)
            records += [change_record(t, p, old, new) for t, p, old, new in moves]
            return self._proposed(records), HeartbeatReply(False, True, False)
        if want_fence:
            view.fence(node_id)
            return (self._proposed([_broker_record("fence_broker", reg)] + self._reconcile(view, nodes={node_id})),
                    HeartbeatReply(True, False, False))
        return [], HeartbeatReply(False, False, False)

    def tick(self, now_ms: int) -> list[dict[str, Any]]:
        """Fence brokers whose session expired and reconcile partitions (elections, ISR, rebalance).

        Changes this controller proposed and has not seen applied are not proposed again until
        `proposal_timeout_ms` has passed; at most `max_records_per_tick` records, the rest next tick.
        """
        self._require_active()
        self._expire_in_flight(now_ms)
        records: list[dict[str, Any]] = []
        view = LivenessView(self.image)
        fenced_now = False
        for node_id, reg in sorted(self.image.brokers.items()):
            if reg.fenced:
                continue
            last = max(self._last_contact_ms.get(node_id, self._active_since_ms), self._active_since_ms)
            if now_ms - last > self.config.broker_session_timeout_ms:
                view.fence(node_id)  # in flight or not, decide the partitions as if it were fenced
                fenced_now = True
                if self._in_flight.get(("fence", node_id), (None,))[0] != reg.broker_epoch:
                    records.append(_broker_record("fence_broker", reg))
        for node_id in [n for n in self._last_contact_ms if n not in self.image.brokers]:
            del self._last_contact_ms[node_id]  # unregistered: forget the session
        rebalance = (self.config.auto_leader_rebalance_enable
                     and (now_ms - self._last_rebalance_ms >= self.config.leader_imbalance_check_interval_ms
                          or (self._rebalance_due_ms is not None and now_ms >= self._rebalance_due_ms)))
        # A full scan costs O(partitions); skip it while nothing changed.
        if (fenced_now or rebalance or self.image.last_applied_index != self._scanned_index
                or now_ms - self._scanned_ms >= self.config.proposal_timeout_ms):
            if rebalance:
                self._last_rebalance_ms = now_ms
                self._rebalance_due_ms = None
            room = max(0, self.config.max_records_per_tick - len(records))
            changes = [c for c in self._reconcile_changes(view, rebalance=rebalance) if not self._is_in_flight(c)]
            if rebalance:
                changes = self._pace_rebalance(changes, view, now_ms)
            records += [change_record(t, p, old, new) for t, p, old, new in changes[:room]]
            self._scanned_index = self.image.last_applied_index if len(changes) <= room else -1
            self._scanned_ms = now_ms
        return self._proposed(records, now_ms)

    def _pace_rebalance(self, changes: list, view: LivenessView, now_ms: int) -> list:
        """At most `rebalance_moves_per_tick` moves made only to restore preferred leaders; the rest
        on the next ticks. Every leader move is a Raft entry the controller waits for while holding
        its lock, and heartbeats wait on that lock: a few hundred moves at once would make brokers'
        sessions lapse. Changes that are needed anyway (elections, ISR) are never held back."""
        needed, moves = [], []
        for c in changes:
            t, p, old, new = c
            (moves if target_state(old, view, unclean=self._unclean(t), rebalance=False) == old else needed).append(c)
        if len(moves) > self.config.rebalance_moves_per_tick:
            moves = moves[:self.config.rebalance_moves_per_tick]
            self._rebalance_due_ms = now_ms  # the next tick moves the next ones
        return needed + moves

    def elect_preferred_leaders(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Move leadership back to each partition's first replica where it is eligible and in the ISR."""
        self._require_active()
        if topic is not None and topic not in self.image.topics:
            raise TopicNotFoundError(f"Topic '{topic}' not found.")
        return self._proposed(self._reconcile(LivenessView(self.image), rebalance=True, topic=topic))

    # --- topics --------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                     configs: Mapping[str, str], topic_id: str, now_ms: int) -> list[dict[str, Any]]:
        """A new topic placed over the eligible brokers; leader = first replica, ISR = replicas."""
        self._require_active()
        validate_topic_name(name)
        if name in self.image.topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        self._check_topic_id(topic_id)
        partitions = self.config.num_partitions if partitions is None else partitions
        rf = self.config.default_replication_factor if replication_factor is None else replication_factor
        if type(partitions) is not int or not 1 <= partitions <= self.config.max_partitions_per_topic:
            raise InvalidPartitionsError(
                f"partitions must be in [1, {self.config.max_partitions_per_topic}], not {partitions!r}")
        configs = _check_configs(configs)
        # Kafka draws the start offset at random; a hash of the name is as even and repeatable.
        h = crc32c(name.encode("utf-8"))
        assignment = assign_replicas(self._placement_brokers(), partitions, rf, start_index=h & 0xFFFF,
                                     next_replica_shift=h >> 16)
        record = {"type": "create_topic", "name": name, "topic_id": topic_id, "configs": configs,
                  "partitions": [fresh_partition(replicas).to_dict() for replicas in assignment]}
        self._check_size(record, f"topic {name!r} with {partitions} partitions")
        return [record]

    def create_partitions(self, name: str, total: int) -> list[dict[str, Any]]:
        """Grow a topic to `total` partitions (Kafka's `--alter --partitions`); never shrinks."""
        self._require_active()
        t = self._topic(name)
        current = len(t.partitions)
        if type(total) is not int or not current < total <= self.config.max_partitions_per_topic:
            raise InvalidPartitionsError(
                f"topic '{name}' has {current} partitions; the new count must be in "
                f"({current}, {self.config.max_partitions_per_topic}], not {total!r}")
        brokers = self._placement_brokers()
        ids = sorted(node_id for node_id, _ in brokers)
        # Kafka's addPartitions: continue the pattern from partition 0's preferred leader.
        first = t.partitions[0].preferred_leader
        start = next((i for i, node_id in enumerate(ids) if node_id >= first), 0)
        assignment = assign_replicas(brokers, total - current, len(t.partitions[0].replicas),
                                     start_index=start, next_replica_shift=start, start_partition_id=current)
        record = {"type": "create_partitions", "name": name, "topic_id": t.topic_id,
                  "partitions": [fresh_partition(replicas).to_dict() for replicas in assignment]}
        self._check_size(record, f"{total - current} new partitions of topic {name!r}")
        return [record]

    def delete_topic(self, name: str) -> list[dict[str, Any]]:
        """Delete a topic."""
        self._require_active()
        t = self._topic(name)
        return [{"type": "delete_topic", "name": name, "topic_id": t.topic_id}]

    def alter_configs(self, name: str, configs: Mapping[str, str]) -> list[dict[str, Any]]:
        """Replace a topic's config overrides with `configs` (keys and values validated by the caller)."""
        self._require_active()
        t = self._topic(name)
        configs = _check_configs(configs)
        if configs == t.configs:
            return []
        record = {"type": "alter_configs", "name": name, "topic_id": t.topic_id, "configs": configs}
        self._check_size(record, f"configs of topic {name!r}")
        return [record]

    def min_insync_replicas(self, name: str) -> int:
        """The topic's effective min.insync.replicas (its override, else the controller default)."""
        value = self._topic(name).configs.get(MIN_INSYNC_REPLICAS_KEY)
        try:
            return int(value) if value is not None else self.config.default_min_insync_replicas
        except ValueError:
            return self.config.default_min_insync_replicas

    # --- partitions ----------------------------------------------------------------------------

    def alter_partition(self, node_id: int, broker_epoch: int, topic: str, partition: int,
                        leader_epoch: int, partition_epoch: int, new_isr: Iterable[int]
                        ) -> tuple[list[dict[str, Any]], PartitionState]:
        """A leader's ISR change, a compare-and-swap on (leader epoch, partition epoch).

        Refused unless the requester is the leader of `leader_epoch` (FencedLeaderEpochError,
        NotPartitionLeaderError) and `partition_epoch` is current (InvalidUpdateVersionError); the
        new ISR must hold the leader and only replicas (InvalidIsrError), and every member it adds
        must be eligible (IneligibleReplicaError). Returns the records (none if the ISR is already
        that set) and the resulting partition state.
        """
        self._require_active()
        self._check_broker(node_id, broker_epoch)
        t = self._topic(topic)
        if type(partition) is not int or not 0 <= partition < len(t.partitions):
            raise PartitionNotFoundError(f"Partition {partition} of topic '{topic}' not found.")
        state = t.partitions[partition]
        where = f"{topic}-{partition}"
        if leader_epoch != state.leader_epoch:
            raise FencedLeaderEpochError(
                f"{where}: leader epoch {leader_epoch} is not the current {state.leader_epoch}")
        if state.leader != node_id:
            raise NotPartitionLeaderError(f"{where}: node {node_id} is not the leader (node {state.leader} is)")
        if partition_epoch != state.partition_epoch:
            raise InvalidUpdateVersionError(
                f"{where}: partition epoch {partition_epoch} is not the current {state.partition_epoch}")
        isr = tuple(new_isr)
        if not all(type(r) is int for r in isr) or len(set(isr)) != len(isr):
            raise InvalidIsrError(f"{where}: ISR {list(isr)} must be distinct node ids")
        if node_id not in isr:
            raise InvalidIsrError(f"{where}: ISR {list(isr)} lacks the leader {node_id}")
        if not set(isr) <= set(state.replicas):
            raise InvalidIsrError(f"{where}: ISR {list(isr)} names nodes outside replicas {list(state.replicas)}")
        view = LivenessView(self.image)
        ineligible = [r for r in isr if r not in state.isr and not view.eligible(r)]
        if ineligible:
            raise IneligibleReplicaError(f"{where}: replicas {ineligible} are fenced, shutting down or "
                                         f"unregistered and cannot join the ISR")
        if set(isr) == set(state.isr):
            return [], state
        new = dataclasses.replace(state, isr=isr, partition_epoch=state.partition_epoch + 1)
        preferred = state.replicas[0] if state.replicas else -1
        if preferred != state.leader and preferred in isr and preferred not in state.isr:
            # Each such expansion pushes the rebalance back: after a restart they come in a burst,
            # and the leaderships move once, when it is over, in one tick.
            self._rebalance_due_ms = self._now_ms + self.config.preferred_leader_return_delay_ms
        return self._proposed([change_record(t, partition, state, new)]), new

    def alter_partition_reassignments(self, changes: Iterable[tuple[str, int, list[int] | None]]
                                      ) -> list[dict[str, Any]]:
        """Start, change (a target replica list) or cancel (None) partition reassignments (Kafka's
        AlterPartitionReassignments); all are checked before any record is returned."""
        self._require_active()
        records: list[dict[str, Any]] = []
        seen: set[tuple[str, int]] = set()
        for topic, partition, target in changes:
            t = self._topic(topic)
            if type(partition) is not int or not 0 <= partition < len(t.partitions):
                raise PartitionNotFoundError(f"Partition {partition} of topic '{topic}' not found.")
            where = f"{topic}-{partition}"
            if (topic, partition) in seen:
                raise InvalidRequestError(f"{where} is named twice")
            seen.add((topic, partition))
            state = t.partitions[partition]
            if target is None:
                new = reassignment.cancel(state, where)
            else:
                new = reassignment.start(state, reassignment.check_target(target, self.image.brokers, where))
            if new != state:
                records.append(change_record(t, partition, state, new))
        return self._proposed(records)

    def elect_leaders(self, partitions: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
        """Kafka's ElectLeaders (PREFERRED) for the named partitions: leadership to each one's first
        replica where it is eligible, in the ISR and not leading already (else unchanged)."""
        self._require_active()
        view = LivenessView(self.image)
        records: list[dict[str, Any]] = []
        for topic, partition in partitions:
            t = self._topic(topic)
            if type(partition) is not int or not 0 <= partition < len(t.partitions):
                raise PartitionNotFoundError(f"Partition {partition} of topic '{topic}' not found.")
            state = t.partitions[partition]
            preferred = state.preferred_leader
            if preferred != state.leader and preferred in state.isr and view.eligible(preferred):
                new = dataclasses.replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1,
                                          partition_epoch=state.partition_epoch + 1)
                records.append(change_record(t, partition, state, new))
        return self._proposed(records)

    # --- producer ids --------------------------------------------------------------------------

    def allocate_producer_ids(self, node_id: int, broker_epoch: int) -> tuple[list[dict[str, Any]], int, int]:
        """A block of producer ids for a broker: (records, first id, count); blocks never overlap."""
        self._require_active()
        reg = self._check_broker(node_id, broker_epoch)
        first = max(self.image.next_producer_id, self._next_producer_id)
        count = self.config.producer_id_block_size
        invariant(first + count <= MAX_LONG, "producer ids are exhausted")
        self._next_producer_id = first + count
        return ([{"type": "allocate_producer_ids", "node_id": node_id, "broker_epoch": reg.broker_epoch,
                  "first_id": first, "count": count}], first, count)

    # --- helpers -------------------------------------------------------------------------------

    def _proposed(self, records: list[dict[str, Any]], now_ms: int | None = None) -> list[dict[str, Any]]:
        """Remember the fences and partition changes in `records` as in flight; returns `records`."""
        if now_ms is not None:
            self._now_ms = max(self._now_ms, now_ms)
        for r in records:
            if r["type"] == "fence_broker":
                self._in_flight[("fence", r["node_id"])] = (r["broker_epoch"], self._now_ms)
            elif r["type"] == "partition_change":
                self._in_flight[("partition", r["topic_id"], r["partition"])] = (r["partition_epoch"], self._now_ms)
        return records

    def _is_in_flight(self, change: tuple[TopicImage, int, PartitionState, PartitionState]) -> bool:
        """Whether a change of ours to that partition is proposed and not applied yet."""
        t, p, old, _ = change
        key = ("partition", t.topic_id, p)
        pending = self._in_flight.get(key)
        if pending is None:
            return False
        if old.partition_epoch >= pending[0]:  # landed (or lost to another change): decide afresh
            del self._in_flight[key]
            return False
        return True

    def _expire_in_flight(self, now_ms: int) -> None:
        self._now_ms = max(self._now_ms, now_ms)
        timeout = self.config.proposal_timeout_ms
        for key in [k for k, (_, at) in self._in_flight.items() if now_ms - at >= timeout]:
            del self._in_flight[key]


    def _check_broker(self, node_id: int, broker_epoch: int) -> BrokerRegistration:
        reg = self.image.brokers.get(node_id)
        if reg is None:
            raise BrokerNotRegisteredError(f"node {node_id} is not registered")
        if broker_epoch != reg.broker_epoch:
            raise FencedBrokerError(f"broker epoch {broker_epoch} of node {node_id} is stale "
                                    f"(current: {reg.broker_epoch}); register again")
        return reg

    def _topic(self, name: str) -> TopicImage:
        t = self.image.topics.get(name)
        if t is None:
            raise TopicNotFoundError(f"Topic '{name}' not found.")
        return t

    def _check_topic_id(self, topic_id: str) -> None:
        if not isinstance(topic_id, str) or not 0 < len(topic_id) <= MAX_TOPIC_ID_LENGTH:
            raise InvalidTopicIdError(f"topic id must be a string of 1..{MAX_TOPIC_ID_LENGTH} characters")
        if any(t.topic_id == topic_id for t in self.image.topics.values()):
            raise InvalidTopicIdError(f"topic id {topic_id} is taken")

    def _check_size(self, record: Mapping[str, Any], what: str) -> None:
        size = len(encode_record(record))
        if size > self.config.max_record_bytes:
            raise RequestTooLargeError(f"{what} takes a {size}-byte metadata record, above the limit of "
                                       f"{self.config.max_record_bytes} bytes")

    def _placement_brokers(self) -> list[tuple[int, str | None]]:
        view = LivenessView(self.image)
        return [(n, reg.rack) for n, reg in sorted(self.image.brokers.items()) if view.eligible(n)]

    def _unclean(self, topic: TopicImage) -> bool:
        value = topic.configs.get(UNCLEAN_LEADER_ELECTION_KEY)
        if value is None:
            return self.config.unclean_leader_election_enable
        return value.strip().lower() == "true"

    def _reconcile(self, view: LivenessView, *, nodes: set[int] | None = None, rebalance: bool = False,
                   topic: str | None = None) -> list[dict[str, Any]]:
        return [change_record(t, p, old, new)
                for t, p, old, new in self._reconcile_changes(view, nodes=nodes, rebalance=rebalance, topic=topic)]

    def _reconcile_changes(self, view: LivenessView, *, nodes: set[int] | None = None, rebalance: bool = False,
                           topic: str | None = None
                           ) -> list[tuple[TopicImage, int, PartitionState, PartitionState]]:
        """(topic, partition, old, new) for each partition whose target state differs from its state."""
        out: list[tuple[TopicImage, int, PartitionState, PartitionState]] = []
        names = [topic] if topic is not None else sorted(self.image.topics)
        topics = [self.image.topics[n] for n in names]
        for t in topics:
            unclean = self._unclean(t)
            for p, state in enumerate(t.partitions):
                if nodes is not None and nodes.isdisjoint(state.replicas):
                    continue
                new = target_state(state, view, unclean=unclean, rebalance=rebalance)
                if new != state:
                    out.append((t, p, state, new))
        return out


def _broker_record(kind: str, reg: BrokerRegistration) -> dict[str, Any]:
    return {"type": kind, "node_id": reg.node_id, "broker_epoch": reg.broker_epoch}


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if type(value) is not int or not lo <= value <= hi:
        raise InvalidRequestError(f"{name} must be an integer in [{lo}, {hi}], not {value!r}")


def _check_str(name: str, value: Any, max_length: int) -> None:
    if not isinstance(value, str) or not 0 < len(value) <= max_length:
        raise InvalidRequestError(f"{name} must be a string of 1..{max_length} characters")


def _check_configs(configs: Mapping[str, str]) -> dict[str, str]:
    if len(configs) > MAX_CONFIG_ENTRIES:
        raise InvalidRequestError(f"at most {MAX_CONFIG_ENTRIES} config entries")
    for k, v in configs.items():
        if not (isinstance(k, str) and 0 < len(k) <= MAX_CONFIG_KEY_LENGTH
                and isinstance(v, str) and len(v) <= MAX_CONFIG_VALUE_LENGTH):
            raise InvalidRequestError(f"config {k!r} must be a string key with a string value of at most "
                                      f"{MAX_CONFIG_VALUE_LENGTH} characters")
    return dict(configs)
