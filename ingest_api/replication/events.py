"""The events and effects of the replication state machine (`core.py`), and the values they carry.

Events say what happened to a replica; effects say what its host must do. All are immutable values
with no behaviour, so a simulation can record, compare and replay them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Union

UNKNOWN_LEO = -1


class Role(enum.IntEnum):
    NONE = 0  # not (yet) told its role, or the partition is offline
    LEADER = 1
    FOLLOWER = 2


class ProduceOutcome(enum.Enum):
    COMMITTED = "committed"
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = "not_enough_replicas_after_append"
    NOT_LEADER = "not_leader"  # this replica stopped leading before the HW passed the records
    ABORTED = "aborted"  # the host dropped the replica (deleted, moved, shutting down)


@dataclass
class RemoteReplica:
    """What a leader knows of one follower."""

    leo: int = UNKNOWN_LEO
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN_LEO
    last_fetch_ms: int = 0


@dataclass(frozen=True)
class ReplicationRules:
    """Switches of the rules. Kafka's are the defaults; the simulation turns one off to show the bug it fixes."""

    #: A follower rejoins the ISR only once its LEO also reaches the start of the leader's epoch (KAFKA-7128).
    isr_join_requires_epoch_start: bool = True


# ---------------------------------------------------------------------------------------------
# Events


@dataclass(frozen=True)
class BecomeLeader:
    """The metadata says this replica leads (a new epoch, or a new ISR / partition epoch in the same one)."""

    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leo: int
    log_start_offset: int
    now_ms: int


@dataclass(frozen=True)
class BecomeFollower:
    """The metadata says `leader_id` leads (-1: no leader, the partition is offline)."""

    leader_id: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leo: int
    log_start_offset: int


@dataclass(frozen=True)
class Appended:
    """The leader's log grew to `leo` (an append as leader)."""

    leo: int


@dataclass(frozen=True)
class FollowerFetch:
    """Follower `replica_id` fetched at `fetch_offset` (within [log start, LEO]) when the leader's LEO was `leo`.

    `isr_eligible`: the leader's metadata shows the follower's broker unfenced and not shutting down
    (KIP-841): only then may a caught-up follower be proposed into the ISR. A broker that died keeps
    a fetch session that looks caught up on an idle partition for up to replica.lag.time.max.ms;
    proposing it back into the ISR right after the controller fenced it would hold every acks=all
    produce of the partition (the maximal ISR counts a pending expansion) until the controller
    refused the change."""

    replica_id: int
    fetch_offset: int
    leo: int
    now_ms: int
    isr_eligible: bool = True


@dataclass(frozen=True)
class Tick:
    """Time passed: check ISR members' lag against `lag_max_ms`."""

    now_ms: int
    lag_max_ms: int


@dataclass(frozen=True)
class IsrChangeAnswered:
    """The controller answered the ISR change proposed in `partition_epoch` (accepted or refused)."""

    partition_epoch: int
    accepted: bool


@dataclass(frozen=True)
class AwaitCommit:
    """An acks=all produce (host id `request_id`) waits until the HW reaches `required_offset`."""

    request_id: int
    required_offset: int
    min_isr: int


@dataclass(frozen=True)
class ForgetProduce:
    """The host stopped waiting for produce `request_id` (it timed out)."""

    request_id: int


@dataclass(frozen=True)
class AbortProduces:
    """The host drops the replica: every waiting produce ends (ABORTED)."""


@dataclass(frozen=True)
class FollowerAppended:
    """A follower appended the leader's records (maybe none) and learnt the leader's HW and log start."""

    leo: int
    log_start_offset: int
    leader_hw: int
    leader_log_start_offset: int


@dataclass(frozen=True)
class Truncated:
    """A follower's log was truncated to `leo` (and may start at `log_start_offset`); `final`: no more rounds."""

    leo: int
    log_start_offset: int
    final: bool = True


@dataclass(frozen=True)
class MustTruncate:
    """The leader answered OFFSET_OUT_OF_RANGE above its LEO: ask OffsetsForLeaderEpoch again."""


Event = Union[BecomeLeader, BecomeFollower, Appended, FollowerFetch, Tick, IsrChangeAnswered, AwaitCommit,
              ForgetProduce, AbortProduces, FollowerAppended, Truncated, MustTruncate]


# ---------------------------------------------------------------------------------------------
# Effects


@dataclass(frozen=True)
class NewLeaderEpoch:
    """This step started a new leadership or followership term (a new leader epoch or leader)."""

    role: Role
    leader_epoch: int


@dataclass(frozen=True)
class StampLeaderEpoch:
    """Record (epoch, start offset) in the log's leader-epoch cache now (before the first append of the epoch)."""

    leader_epoch: int
    start_offset: int


@dataclass(frozen=True)
class HighWatermarkAdvanced:
    """The leader's HW moved up: wake fetches waiting for data."""

    old: int
    new: int


@dataclass(frozen=True)
class WakeAll:
    """The role or epoch changed: release every waiting fetch (they re-check)."""


@dataclass(frozen=True)
class CompleteProduce:
    request_id: int
    outcome: ProduceOutcome
    isr: tuple[int, ...]
    min_isr: int


@dataclass(frozen=True)
class ProposeIsr:
    """Ask the controller for `new_isr` (AlterPartition) in these epochs; answer with `IsrChangeAnswered`."""

    new_isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int
    reason: str


@dataclass(frozen=True)
class IncrementLogStart:
    """A follower follows the leader's log start offset forward."""

    offset: int


Effect = Union[NewLeaderEpoch, StampLeaderEpoch, HighWatermarkAdvanced, WakeAll, CompleteProduce, ProposeIsr,
               IncrementLogStart]


