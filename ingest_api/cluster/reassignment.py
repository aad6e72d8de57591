"""Partition reassignment: the pure steps of Kafka's KIP-455 over one partition's state.

A reassignment lives in the partition's state in the metadata log (`PartitionState.adding` /
`.removing`, written by `partition_change` records), so a new controller picks it up where the old
one left it. Its life, for a target replica list T over the original replicas O:

1. `start(state, T)`: replicas = T followed by the members of O not in T; adding = T - O,
   removing = O - T. The new replicas appear in the metadata, open an empty log and fetch from the
   leader like any follower (under the replication throttle, `throttle.py`); the leader adds each
   to the ISR once it has caught up (the usual ISR rule: its LEO reached the high watermark).
2. `progress(state, eligible)`, called by the controller for every partition it reconciles: once
   every target replica is in the ISR, if the leader is leaving, leadership moves first to the
   first target replica that is in the ISR and eligible (the preferred leader is T[0]);
3. then, with the leader in T, the reassignment completes: replicas = T, ISR = ISR ∩ T, adding and
   removing cleared. The leaving replicas see themselves gone from the metadata and delete their
   logs.

`cancel(state)` reverts to O: replicas = O, ISR = ISR - adding, leadership moves to an original
replica if an adding one led. A cancel that would leave the ISR empty (only new replicas are in
sync) is refused — Kafka refuses it unless unclean leader election is enabled; Lakelog refuses it
always, since it would lose acknowledged records. A new target for a partition already moving
starts over from its current replicas (all of them, as Kafka does).

Why nothing acknowledged is lost: a replica leaves only once every target replica is in the ISR,
and the ISR only ever holds replicas that had every record below the high watermark; the leader
moves only to an ISR member. The ISR stays a subset of replicas at every step (image invariants).

Invariants (checked by `image.check_partition_state` on every record): adding and removing are
disjoint subsets of replicas; the target is never empty; leader ∈ ISR ⊆ replicas.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

from lakelog.ingest_api.cluster.errors import InvalidReplicaAssignmentError, NoReassignmentInProgressError
from lakelog.ingest_api.cluster.image_values import MAX_NODE_ID, MAX_REPLICAS, NO_LEADER, PartitionState


def check_target(target: Sequence[int], registered: Iterable[int], where: str) -> tuple[int, ...]:
    """A target replica list as Kafka accepts it: 1..MAX_REPLICAS distinct registered node ids."""
    if not isinstance(target, (list, tuple)) or not 0 < len(target) <= MAX_REPLICAS:
        raise InvalidReplicaAssignmentError(f"{where}: the target replicas must be a list of 1..{MAX_REPLICAS} "
                                            f"node ids")
    if not all(type(r) is int and 0 <= r <= MAX_NODE_ID for r in target):
        raise InvalidReplicaAssignmentError(f"{where}: {list(target)} holds something other than node ids")
    if len(set(target)) != len(target):
        raise InvalidReplicaAssignmentError(f"{where}: the target replicas {list(target)} repeat a node")
    unknown = sorted(set(target) - set(registered))
    if unknown:
        raise InvalidReplicaAssignmentError(f"{where}: nodes {unknown} are not registered brokers")
    return tuple(target)


def start(state: PartitionState, target: Sequence[int]) -> PartitionState:
    """The state that starts moving a partition to `target` (checked already); `state` if it is there."""
    current = state.replicas
    target = tuple(target)
    if target == current and not state.reassigning:
        return state
    adding = tuple(r for r in target if r not in current)
    removing = tuple(r for r in current if r not in target)
    replicas = target + removing
    return dataclasses.replace(state, replicas=replicas, adding=adding, removing=removing,
                               partition_epoch=state.partition_epoch + 1)


def cancel(state: PartitionState, where: str) -> PartitionState:
    """The state that reverts a reassignment in progress to the original replicas."""
    if not state.reassigning:
        raise NoReassignmentInProgressError(f"{where}: no reassignment is in progress")
    replicas = state.original
    isr = tuple(r for r in state.isr if r not in state.adding)
    if not isr:
        raise InvalidReplicaAssignmentError(
            f"{where}: cancelling would leave no in-sync replica (only the new replicas {list(state.adding)} "
            f"are in the ISR); let the reassignment finish, or move it again")
    leader = state.leader
    if leader not in isr:
        leader = next(iter(r for r in replicas if r in isr), NO_LEADER)
        # Any ISR member will do: the controller's next reconcile moves it off an ineligible one.
    return dataclasses.replace(state, replicas=replicas, isr=isr, leader=leader, adding=(), removing=(),
                               leader_epoch=state.leader_epoch + (1 if leader != state.leader else 0),
                               partition_epoch=state.partition_epoch + 1)


def progress(state: PartitionState, eligible: Callable[[int], bool]) -> PartitionState:
    """The next step of a reassignment in progress (steps 2 and 3 above), or `state` when it must wait."""
    if not state.reassigning:
        return state
    target = state.target
    if not all(r in state.isr for r in target):
        return state  # new replicas still catching up
    if state.leader not in target:
        # Step 2: leadership first, to the first target replica in the ISR that may lead.
        candidates = [r for r in target if r in state.isr and eligible(r)]
        if not candidates:
            return state  # none may lead now (fenced, shutting down): wait
        return dataclasses.replace(state, leader=candidates[0], leader_epoch=state.leader_epoch + 1,
                                   partition_epoch=state.partition_epoch + 1)
    # Step 3: the old replicas leave.
    return dataclasses.replace(state, replicas=target, isr=tuple(r for r in state.isr if r in target),
                               adding=(), removing=(), partition_epoch=state.partition_epoch + 1)
