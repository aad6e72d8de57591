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

Where the code is: `Controller` (this module) holds the leadership (`activate`, `deactivate`) and
checks it before every request, then hands the request to one of three objects it holds, each
owning its own state: `BrokerRegistry` (controller_brokers.py: registration, heartbeats, sessions
and fencing, producer ids; `HeartbeatReply`), `PartitionReconciler` (controller_partitions.py: every
leader election, ISR change and reassignment step, the tick's scan and the rebalance, what is in
flight) and `TopicManager` (controller_topics.py: the topic records). The registry asks the
reconciler what a broker-state change does to partitions; neither knows the topics' code. The
settings are `ControllerConfig` (controller_config.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from lakelog.ingest_api.cluster.controller_brokers import BrokerRegistry, HeartbeatReply
from lakelog.ingest_api.cluster.controller_config import ControllerConfig
from lakelog.ingest_api.cluster.controller_partitions import PartitionReconciler
from lakelog.ingest_api.cluster.controller_topics import TopicManager
from lakelog.ingest_api.cluster.errors import NotControllerError
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.image_values import PartitionState
from lakelog.ingest_api.cluster.partition_change import LivenessView
from lakelog.ingest_api.errors import NodeError


class Controller:
    """The active controller: validates requests against the image and returns the records to propose."""

    def __init__(self, image: ClusterImage, config: ControllerConfig | None = None) -> None:
        self.image = image
        self.config = config or ControllerConfig()
        self.active = False
        self._partitions = PartitionReconciler(image, self.config)
        self._brokers = BrokerRegistry(image, self.config, self._partitions)
        self._topics = TopicManager(image, self.config)

    # --- leadership ----------------------------------------------------------------------------

    def activate(self, now_ms: int) -> None:
        """Become the active controller: every registered broker gets a full session from `now_ms`."""
        self.active = True
        self._brokers.activate(now_ms)
        self._partitions.activate(now_ms)

    def deactivate(self) -> None:
        """Stop being the active controller (leadership lost); the soft state is dropped."""
        self.active = False
        self._brokers.deactivate()
        self._partitions.deactivate()

    def _require_active(self) -> None:
        if not self.active:
            raise NotControllerError("this node is not the active controller")

    # --- brokers -------------------------------------------------------------------------------

    def register_broker(self, node_id: int, incarnation_id: str, host: str, port: int, rack: str | None,
                        now_ms: int, kafka_listeners: Any = None) -> tuple[list[dict[str, Any]], int]:
        """Register (or re-register) a node; the records and its new broker epoch (`BrokerRegistry`)."""
        self._require_active()
        return self._brokers.register_broker(node_id, incarnation_id, host, port, rack, now_ms, kafka_listeners)

    def unregister_broker(self, node_id: int) -> list[dict[str, Any]]:
        """Remove a node's registration (operator action); its leaderships and ISR places go too."""
        self._require_active()
        return self._brokers.unregister_broker(node_id)

    def heartbeat(self, node_id: int, broker_epoch: int, now_ms: int, *, caught_up_offset: int,
                  want_fence: bool = False, want_shutdown: bool = False
                  ) -> tuple[list[dict[str, Any]], HeartbeatReply]:
        """A broker's heartbeat: renews its session; may unfence it, fence it, or drive its controlled
        shutdown (`BrokerRegistry.heartbeat`)."""
        self._require_active()
        return self._brokers.heartbeat(node_id, broker_epoch, now_ms, caught_up_offset=caught_up_offset,
                                       want_fence=want_fence, want_shutdown=want_shutdown)

    def allocate_producer_ids(self, node_id: int, broker_epoch: int) -> tuple[list[dict[str, Any]], int, int]:
        """A block of producer ids for a broker: (records, first id, count); blocks never overlap."""
        self._require_active()
        return self._brokers.allocate_producer_ids(node_id, broker_epoch)

    def tick(self, now_ms: int) -> list[dict[str, Any]]:
        """Fence brokers whose session expired and reconcile partitions (elections, ISR, rebalance).

        Changes this controller proposed and has not seen applied are not proposed again until
        `proposal_timeout_ms` has passed; at most `max_records_per_tick` records, the rest next tick.
        """
        self._require_active()
        self._partitions.expire_in_flight(now_ms)
        view = LivenessView(self.image)
        records, fenced_now = self._brokers.expire_sessions(view, now_ms)
        room = max(0, self.config.max_records_per_tick - len(records))
        records += self._partitions.tick(view, now_ms, fenced_now=fenced_now, room=room)
        return self._partitions.proposed(records, now_ms)

    # --- topics --------------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int | None, replication_factor: int | None,
                     configs: Mapping[str, str], topic_id: str, now_ms: int) -> list[dict[str, Any]]:
        """A new topic placed over the eligible brokers; leader = first replica, ISR = replicas."""
        self._require_active()
        return self._topics.create_topic(name, partitions, replication_factor, configs, topic_id, now_ms)

    def create_partitions(self, name: str, total: int) -> list[dict[str, Any]]:
        """Grow a topic to `total` partitions (Kafka's `--alter --partitions`); never shrinks."""
        self._require_active()
        return self._topics.create_partitions(name, total)

    def delete_topic(self, name: str) -> list[dict[str, Any]]:
        """Delete a topic."""
        self._require_active()
        return self._topics.delete_topic(name)

    def alter_configs(self, name: str, configs: Mapping[str, str]) -> list[dict[str, Any]]:
        """Replace a topic's config overrides with `configs` (keys and values validated by the caller)."""
        self._require_active()
        return self._topics.alter_configs(name, configs)

    def min_insync_replicas(self, name: str) -> int:
        """The topic's effective min.insync.replicas (its override, else the controller default)."""
        return self._topics.min_insync_replicas(name)

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
        self._brokers.check_broker(node_id, broker_epoch)
        return self._partitions.alter_partition(node_id, topic, partition, leader_epoch, partition_epoch, new_isr)

    def alter_partitions(self, node_id: int, broker_epoch: int, requests: Iterable[Mapping[str, Any]]
                         ) -> tuple[list[dict[str, Any]], list[str | None]]:
        """A leader's ISR changes of many partitions in one request (each as `alter_partition`, with
        `topic`, `partition`, `leader_epoch`, `partition_epoch`, `new_isr`): the records of the
        accepted ones, for one controller round, and per request None (accepted) or why it was
        refused. The broker epoch is checked once, for all."""
        self._require_active()
        self._brokers.check_broker(node_id, broker_epoch)
        records: list[dict[str, Any]] = []
        outcomes: list[str | None] = []
        for r in requests:
            try:
                recs, _ = self._partitions.alter_partition(
                    node_id, str(r["topic"]), int(r["partition"]), int(r["leader_epoch"]),
                    int(r["partition_epoch"]), [int(x) for x in r["new_isr"]])
            except NodeError as e:  # this partition's change is refused; the others go ahead
                outcomes.append(f"{type(e).__name__}: {e}")
                continue
            records += recs
            outcomes.append(None)
        return records, outcomes

    def alter_partition_reassignments(self, changes: Iterable[tuple[str, int, list[int] | None]]
                                      ) -> list[dict[str, Any]]:
        """Start, change (a target replica list) or cancel (None) partition reassignments (Kafka's
        AlterPartitionReassignments); all are checked before any record is returned."""
        self._require_active()
        return self._partitions.alter_partition_reassignments(changes)

    def elect_leaders(self, partitions: Iterable[tuple[str, int]], *, unclean: bool = False) -> list[dict[str, Any]]:
        """Kafka's ElectLeaders for the named partitions: PREFERRED (leadership to each one's first
        replica where it is eligible, in the ISR and not leading already) or UNCLEAN (a leader for
        partitions without one, from outside the ISR if need be); see ControllerPartitions."""
        self._require_active()
        return self._partitions.elect_leaders(partitions, unclean=unclean)

    def elect_preferred_leaders(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Move leadership back to each partition's first replica where it is eligible and in the ISR."""
        self._require_active()
        return self._partitions.elect_preferred_leaders(topic)
