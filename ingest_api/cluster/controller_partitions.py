"""The active controller's partition changes: leader elections, ISR changes, reassignments, rebalancing.

`PartitionReconciler` is the one place where the controller (controller.py) decides a partition's
leader and ISR and builds its `partition_change` records:

* `reconcile` / `changes`: every partition of a broker (or of all brokers) brought to its target
  state under partition_change.py's rules, given a `LivenessView` that may lay fences and shutdowns
  over the image (the callers: `BrokerRegistry` after a broker-state change, `tick`);
* `tick`: the periodic scan, with the preferred-leader rebalance paced (`rebalance_moves_per_tick`)
  and scheduled (`leader.imbalance.check.interval.seconds`, or `preferred_leader_return_delay_ms`
  after a preferred leader rejoined an ISR);
* `alter_partition` (a leader's ISR change), `alter_partition_reassignments` (reassignment.py's
  steps), `elect_leaders` and `elect_preferred_leaders`;
* `records`: the records for a list of changes — every partition change goes through it;
* what is in flight: the fences and partition changes proposed and not seen applied yet
  (`proposed`, `fence_in_flight`), so `tick` does not propose them twice before
  `proposal_timeout_ms`.

Its state is soft and dropped on `activate` / `deactivate`. It reads the image, never changes it.
Pure, and not thread-safe: calls come from one thread (the controller checks it is active first).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from lakelog.ingest_api.cluster import reassignment
from lakelog.ingest_api.cluster.controller_config import UNCLEAN_LEADER_ELECTION_KEY, ControllerConfig
from lakelog.ingest_api.cluster.controller_topics import find_topic
from lakelog.ingest_api.cluster.errors import (
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidIsrError,
    InvalidUpdateVersionError,
    NotPartitionLeaderError,
)
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.image_values import NO_LEADER, BrokerRegistration, PartitionState, TopicImage
from lakelog.ingest_api.cluster.partition_change import LivenessView, change_record, target_state
from lakelog.ingest_api.errors import InvalidRequestError, PartitionNotFoundError

#: One partition change: (topic, partition, state now, state wanted).
Change = tuple[TopicImage, int, PartitionState, PartitionState]


class PartitionReconciler:
    """Leader elections, ISR changes and reassignment steps of the active controller (module doc)."""

    def __init__(self, image: ClusterImage, config: ControllerConfig) -> None:
        self._image = image
        self._config = config
        # What this controller proposed and has not seen applied yet, so `tick` does not propose it
        # again: ("fence", node_id) -> (broker epoch, proposed at) and
        # ("partition", topic_id, partition) -> (target partition epoch, proposed at).
        self._in_flight: dict[tuple[Any, ...], tuple[int, int]] = {}
        self._now_ms = 0  # the latest time any call brought
        self._scanned_index = -1  # image index of the last complete reconcile (-1: rescan)
        self._scanned_ms = 0
        self._last_rebalance_ms = 0
        self._rebalance_due_ms: int | None = None  # an earlier rebalance, see preferred_leader_return_delay_ms

    # --- leadership and time -------------------------------------------------------------------

    def activate(self, now_ms: int) -> None:
        """A new term of the controller: rescan everything, nothing in flight, the rebalance clock from now."""
        self._now_ms = now_ms
        self._scanned_index = -1
        self._scanned_ms = now_ms
        self._last_rebalance_ms = now_ms
        self._rebalance_due_ms = None
        self._in_flight.clear()

    def deactivate(self) -> None:
        self._in_flight.clear()

    def observe(self, now_ms: int) -> None:
        """A call brought the time `now_ms` (time never goes back here)."""
        self._now_ms = max(self._now_ms, now_ms)

    # --- in flight -----------------------------------------------------------------------------

    def proposed(self, records: list[dict[str, Any]], now_ms: int | None = None) -> list[dict[str, Any]]:
        """Remember the fences and partition changes in `records` as in flight; returns `records`."""
        if now_ms is not None:
            self.observe(now_ms)
        for r in records:
            if r["type"] == "fence_broker":
                self._in_flight[("fence", r["node_id"])] = (r["broker_epoch"], self._now_ms)
            elif r["type"] == "partition_change":
                self._in_flight[("partition", r["topic_id"], r["partition"])] = (r["partition_epoch"], self._now_ms)
        return records

    def fence_in_flight(self, reg: BrokerRegistration) -> bool:
        """Whether this controller proposed fencing `reg` (this broker epoch) and has not seen it applied."""
        return self._in_flight.get(("fence", reg.node_id), (None,))[0] == reg.broker_epoch

    def expire_in_flight(self, now_ms: int) -> None:
        """Forget proposals older than `proposal_timeout_ms` (lost without a leadership change)."""
        self.observe(now_ms)
        timeout = self._config.proposal_timeout_ms
        for key in [k for k, (_, at) in self._in_flight.items() if now_ms - at >= timeout]:
            del self._in_flight[key]

    def _is_in_flight(self, change: Change) -> bool:
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

    # --- reconciliation ------------------------------------------------------------------------

    def records(self, changes: Iterable[Change]) -> list[dict[str, Any]]:
        """The records that make `changes`, in order (one `partition_change` each)."""
        return [change_record(t, p, old, new) for t, p, old, new in changes]

    def reconcile(self, view: LivenessView, *, nodes: set[int] | None = None, rebalance: bool = False,
                  topic: str | None = None) -> list[dict[str, Any]]:
        """The records of `changes(...)`."""
        return self.records(self.changes(view, nodes=nodes, rebalance=rebalance, topic=topic))

    def changes(self, view: LivenessView, *, nodes: set[int] | None = None, rebalance: bool = False,
                topic: str | None = None) -> list[Change]:
        """Each partition (of `topic`, with a replica on `nodes`) whose target state differs from its state."""
        out: list[Change] = []
        names = [topic] if topic is not None else sorted(self._image.topics)
        for t in [self._image.topics[n] for n in names]:
            unclean = self._unclean(t)
            for p, state in enumerate(t.partitions):
                if nodes is not None and nodes.isdisjoint(state.replicas):
                    continue
                new = target_state(state, view, unclean=unclean, rebalance=rebalance)
                if new != state:
                    out.append((t, p, state, new))
        return out

    def tick(self, view: LivenessView, now_ms: int, *, fenced_now: bool, room: int) -> list[dict[str, Any]]:
        """The periodic reconcile: at most `room` records, none for a change still in flight.

        A full scan costs O(partitions); it is skipped while nothing changed (no broker fenced now,
        no rebalance due, no record applied, and less than `proposal_timeout_ms` since the last).
        """
        cfg = self._config
        rebalance = (cfg.auto_leader_rebalance_enable
                     and (now_ms - self._last_rebalance_ms >= cfg.leader_imbalance_check_interval_ms
                          or (self._rebalance_due_ms is not None and now_ms >= self._rebalance_due_ms)))
        if not (fenced_now or rebalance or self._image.last_applied_index != self._scanned_index
                or now_ms - self._scanned_ms >= cfg.proposal_timeout_ms):
            return []
        if rebalance:
            self._last_rebalance_ms = now_ms
            self._rebalance_due_ms = None
        changes = [c for c in self.changes(view, rebalance=rebalance) if not self._is_in_flight(c)]
        if rebalance:
            changes = self._pace_rebalance(changes, view, now_ms)
        self._scanned_index = self._image.last_applied_index if len(changes) <= room else -1
        self._scanned_ms = now_ms
        return self.records(changes[:room])

    def _pace_rebalance(self, changes: list[Change], view: LivenessView, now_ms: int) -> list[Change]:
        """At most `rebalance_moves_per_tick` moves made only to restore preferred leaders; the rest
        on the next ticks. Every leader move is a Raft entry the controller waits for while holding
        its lock, and heartbeats wait on that lock: a few hundred moves at once would make brokers'
        sessions lapse. Changes that are needed anyway (elections, ISR) are never held back."""
        needed: list[Change] = []
        moves: list[Change] = []
        for c in changes:
            t, _, old, _ = c
            (moves if target_state(old, view, unclean=self._unclean(t), rebalance=False) == old else needed).append(c)
        if len(moves) > self._config.rebalance_moves_per_tick:
            moves = moves[:self._config.rebalance_moves_per_tick]
            self._rebalance_due_ms = now_ms  # the next tick moves the next ones
        return needed + moves

    def _unclean(self, topic: TopicImage) -> bool:
        value = topic.configs.get(UNCLEAN_LEADER_ELECTION_KEY)
        if value is None:
            return self._config.unclean_leader_election_enable
        return value.strip().lower() == "true"

    # --- requests ------------------------------------------------------------------------------

    def alter_partition(self, node_id: int, topic: str, partition: int, leader_epoch: int, partition_epoch: int,
                        new_isr: Iterable[int]) -> tuple[list[dict[str, Any]], PartitionState]:
        """A leader's ISR change, a compare-and-swap on (leader epoch, partition epoch); see
        `Controller.alter_partition` (the broker epoch is checked there)."""
        t, state = self._partition(topic, partition)
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
        view = LivenessView(self._image)
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
            self._rebalance_due_ms = self._now_ms + self._config.preferred_leader_return_delay_ms
        return self.proposed(self.records([(t, partition, state, new)])), new

    def alter_partition_reassignments(self, changes: Iterable[tuple[str, int, list[int] | None]]
                                      ) -> list[dict[str, Any]]:
        """Start, change (a target replica list) or cancel (None) partition reassignments (Kafka's
        AlterPartitionReassignments); all are checked before any record is returned."""
        out: list[Change] = []
        seen: set[tuple[str, int]] = set()
        for topic, partition, target in changes:
            t, state = self._partition(topic, partition)
            where = f"{topic}-{partition}"
            if (topic, partition) in seen:
                raise InvalidRequestError(f"{where} is named twice")
            seen.add((topic, partition))
            if target is None:
                new = reassignment.cancel(state, where)
            else:
                new = reassignment.start(state, reassignment.check_target(target, self._image.brokers, where))
            if new != state:
                out.append((t, partition, state, new))
        return self.proposed(self.records(out))

    def elect_leaders(self, partitions: Iterable[tuple[str, int]], *, unclean: bool = False) -> list[dict[str, Any]]:
        """Kafka's ElectLeaders for the named partitions. PREFERRED: leadership to each one's first
        replica where it is eligible, in the ISR and not leading already (else unchanged). UNCLEAN
        (`unclean`): a partition without a leader gets one from its ISR, or else from any eligible
        replica (which may lose acknowledged records), whatever `unclean.leader.election.enable` says."""
        view = LivenessView(self._image)
        out: list[Change] = []
        for topic, partition in partitions:
            t, state = self._partition(topic, partition)
            if unclean:
                if state.leader == NO_LEADER:
                    new = target_state(state, view, unclean=True, rebalance=False)
                    if new.leader != NO_LEADER:
                        out.append((t, partition, state, new))
                continue
            preferred = state.preferred_leader
            if preferred != state.leader and preferred in state.isr and view.eligible(preferred):
                new = dataclasses.replace(state, leader=preferred, leader_epoch=state.leader_epoch + 1,
                                          partition_epoch=state.partition_epoch + 1)
                out.append((t, partition, state, new))
        return self.proposed(self.records(out))

    def elect_preferred_leaders(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Move leadership back to each partition's first replica where it is eligible and in the ISR."""
        if topic is not None:
            find_topic(self._image, topic)
        return self.proposed(self.reconcile(LivenessView(self._image), rebalance=True, topic=topic))

    def _partition(self, topic: str, partition: int) -> tuple[TopicImage, PartitionState]:
        t = find_topic(self._image, topic)
        if type(partition) is not int or not 0 <= partition < len(t.partitions):
            raise PartitionNotFoundError(f"Partition {partition} of topic '{topic}' not found.")
        return t, t.partitions[partition]
