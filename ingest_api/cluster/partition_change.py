"""Where a partition should be, given which brokers are alive: the active controller's reconciliation
rules (Kafka's PartitionChangeBuilder), pure functions of a partition's state and a liveness view.

Partition reconciliation (`tick`, and after every broker-state change, for that broker's partitions):
  1. dead ISR members leave the ISR, except the last one (Kafka's KIP-841): it stays, with leader
     -1, so that when it comes back it leads again without losing the records only it had;
  2. shutting-down ISR members leave the ISR when an eligible member remains;
  3. a leader that is not eligible is replaced by the first replica, in replica-list order, that is
     in the ISR and eligible; if none, a shutting-down leader keeps leading (Kafka), else the
     partition goes offline (leader -1) — unless unclean leader election is enabled (topic config
     `unclean.leader.election.enable` over the controller's default): then the first eligible
     replica leads with ISR = [it];
  4. when preferred-leader rebalancing is due, leadership moves back to the first replica when it is
     eligible, in the ISR and not leading;
  5. when none of that changes anything, a reassignment in progress takes its next step
     (`reassignment.progress`: leadership off a leaving replica, then the leaving replicas go).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lakelog.ingest_api.cluster import reassignment
from lakelog.ingest_api.cluster.image import MAX_CHANGES_PER_RECORD, ClusterImage
from lakelog.ingest_api.cluster.image_values import NO_LEADER, PartitionState, TopicImage


class LivenessView:
    """The image's broker states with the changes of the records being built laid over them."""

    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self._fenced: dict[int, bool] = {}
        self._shutting_down: set[int] = set()

    def fence(self, node_id: int) -> None:
        self._fenced[node_id] = True

    def unfence(self, node_id: int) -> None:
        self._fenced[node_id] = False

    def shut_down(self, node_id: int) -> None:
        self._shutting_down.add(node_id)

    def alive(self, node_id: int) -> bool:
        reg = self.image.brokers.get(node_id)
        return reg is not None and not self._fenced.get(node_id, reg.fenced)

    def eligible(self, node_id: int) -> bool:
        if not self.alive(node_id):
            return False
        return node_id not in self._shutting_down and not self.image.brokers[node_id].in_controlled_shutdown


def target_state(state: PartitionState, view: LivenessView, *, unclean: bool, rebalance: bool) -> PartitionState:
    """Where a partition should be given broker liveness (the rules in the module docstring)."""
    isr = tuple(r for r in state.isr if view.alive(r))
    if not isr:
        # KIP-841: the last ISR member stays (the leader, if it was one) so it can lead again.
        isr = (state.leader,) if state.leader in state.isr else state.isr[:1]
    ready = tuple(r for r in isr if view.eligible(r))
    if ready:
        isr = ready  # shutting-down members leave while someone eligible remains
    leader = state.leader
    if not (leader in isr and view.eligible(leader)):
        candidates = [r for r in state.replicas if r in isr and view.eligible(r)]
        if candidates:
            leader = candidates[0]
        elif leader in isr and view.alive(leader):
            pass  # shutting down, nobody can take over: it keeps leading until it must stop
        elif unclean:
            live = [r for r in state.replicas if view.eligible(r) and r not in state.adding]
            leader, isr = (live[0], (live[0],)) if live else (NO_LEADER, isr)
        else:
            leader = NO_LEADER
    if rebalance and leader != NO_LEADER:
        preferred = state.preferred_leader
        if preferred != leader and preferred in isr and view.eligible(preferred):
            leader = preferred
    if (leader, isr) == (state.leader, state.isr):
        return reassignment.progress(state, view.eligible)
    return dataclasses.replace(state, isr=isr, leader=leader,
                               leader_epoch=state.leader_epoch + (1 if leader != state.leader else 0),
                               partition_epoch=state.partition_epoch + 1)


def fresh_partition(replicas: list[int]) -> PartitionState:
    return PartitionState(replicas, replicas, replicas[0], 0, 0)


def change_record(t: TopicImage, partition: int, old: PartitionState, new: PartitionState) -> dict[str, Any]:
    """The `partition_change` record taking `t`'s partition from `old` to `new`: only the fields that change."""
    record: dict[str, Any] = {"type": "partition_change", "topic": t.name, "topic_id": t.topic_id,
                              "partition": partition, "leader_epoch": new.leader_epoch,
                              "partition_epoch": new.partition_epoch}
    if new.leader != old.leader:
        record["leader"] = new.leader
    if new.isr != old.isr:
        record["isr"] = list(new.isr)
    if new.replicas != old.replicas:
        record["replicas"] = list(new.replicas)
    if (new.adding, new.removing) != (old.adding, old.removing):
        record["adding_replicas"] = list(new.adding)
        record["removing_replicas"] = list(new.removing)
    return record


def batch_changes(records: list[dict[str, Any]], max_changes: int = MAX_CHANGES_PER_RECORD) -> list[dict[str, Any]]:
    """`records` with each run of two or more consecutive `partition_change` records packed into
    `partition_changes` records of at most `max_changes` (one metadata entry, applied change by
    change in order): a failover moving a thousand leaderships is a few entries, not a thousand.
    Other records keep their places."""
    out: list[dict[str, Any]] = []
    run: list[dict[str, Any]] = []

    def flush() -> None:
        for i in range(0, len(run), max_changes):
            chunk = run[i:i + max_changes]
            if len(chunk) == 1:
                out.append(chunk[0])
            else:
                out.append({"type": "partition_changes",
                            "changes": [{k: v for k, v in c.items() if k != "type"} for c in chunk]})
        run.clear()

    for r in records:
        if r.get("type") == "partition_change":
            run.append(r)
            continue
        flush()
        out.append(r)
    flush()
    return out
