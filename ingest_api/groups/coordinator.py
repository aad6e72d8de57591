"""The group coordinator as a pure state machine: events in, new state and effects out.

One `GroupCoordinator` holds the groups of the `__consumer_offsets` partitions a node leads. It does
no I/O and reads no clock: every event carries `now_ms`, member ids come from the `new_member_id`
function given at construction. The node's `GroupService` feeds it HTTP requests and timer ticks,
delivers the effects (delayed JoinGroup / SyncGroup answers) and appends commits to the log.

Clocks: `now_ms` is the monotonic clock (milliseconds) of the node feeding the events — every
membership time is a duration (session timeouts, rebalance and sync deadlines, how long a group has
been empty), so a step of the wall clock neither expires members nor keeps dead ones. Only commit
timestamps (`CommittedOffset.commit_timestamp_ms`, read back by the next coordinator) are wall
clock; `expired_offsets` takes both clocks.

Group lifecycle (Kafka's states):

    Empty --join--> PreparingRebalance --all members joined / rebalance timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join, leave, session timeout--> PreparingRebalance
    PreparingRebalance --no member left--> Empty (the generation still moves on)

A rebalance (the two steps of the design documents):
  1. JoinGroup: every member sends its supported assignment strategies and subscription. The
     answer is delayed until every known member has rejoined (or the rebalance timeout removes the
     ones that did not); then the generation id grows, the group's strategy is chosen by vote among
     the strategies every member supports, the group leader is kept if it rejoined (else the first
     member), and every member gets the generation, the strategy and the leader's id; the leader
     also gets every member's metadata.
  2. SyncGroup: the leader runs the assignor and sends the assignment; the others send nothing and
     wait. The coordinator answers every member with its own part, and the group is Stable.
Members heartbeat; a heartbeat during a rebalance answers REBALANCE_IN_PROGRESS (rejoin); a member
silent for its `session.timeout.ms` is removed and the others rebalance. A member waiting for its
JoinGroup / SyncGroup answer is alive (it cannot heartbeat then); the rebalance timeout bounds that.

Committed offsets: `check_commit` validates a commit against the group's membership (a member of the
current generation; or, with generation -1 and no member id, only while the group has no members —
the stateless API); the service appends it to the log with acks=all and then calls `apply_offset`,
which is also how a new coordinator rebuilds its cache from the partition. `expired_offsets` lists
the offsets of empty groups older than `offsets.retention.minutes`. Transactional commits
(TxnOffsetCommit) are held apart per producer id (`apply_txn_offset`) until the transaction's
marker lands in the group's partition (`complete_txn`): visible on COMMIT, dropped on ABORT.

Invariants (checked by `check_invariants`): generation ids never go back; a Stable / Completing
group has a leader that is a member; an Empty group has no members; members <= group.max.size.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable

from lakelog.infra.config import check_keyed, from_keys, keyed
from lakelog.infra.errors import invariant
from lakelog.ingest_api.config.groups import GROUP_CONFIG
from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.errors import (
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentProtocolError,
    InvalidSessionTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from lakelog.ingest_api.groups.offsets_codec import CommittedOffset


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, set[GroupState]] = {
    GroupState.EMPTY: {GroupState.EMPTY, GroupState.PREPARING_REBALANCE},
    GroupState.PREPARING_REBALANCE: {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE,
                                     GroupState.PREPARING_REBALANCE},
    GroupState.COMPLETING_REBALANCE: {GroupState.PREPARING_REBALANCE},
    GroupState.STABLE: {GroupState.COMPLETING_REBALANCE, GroupState.STABLE},
    GroupState.DEAD: set(GroupState),
}


_KEY = GROUP_CONFIG.keys


@dataclass(frozen=True)
class CoordinatorConfig:
    """The coordinator's settings, each from its declared key (ingest_api/config/groups.py)."""

    min_session_timeout_ms: int = keyed(_KEY["group.min.session.timeout.ms"])
    max_session_timeout_ms: int = keyed(_KEY["group.max.session.timeout.ms"])
    max_size: int = keyed(_KEY["group.max.size"])
    initial_rebalance_delay_ms: int = keyed(_KEY["group.initial.rebalance.delay.ms"])
    offsets_retention_ms: int = keyed(_KEY["offsets.retention.minutes"], lambda minutes: minutes * 60_000)
    offset_metadata_max_bytes: int = keyed(_KEY["offset.metadata.max.bytes"])

    def __post_init__(self) -> None:
        check_keyed(self)

    @classmethod
    def from_keys(cls, config: Any, **overrides: Any) -> "CoordinatorConfig":
        """From a node's parsed configuration (`NodeConfig`)."""
        return from_keys(cls, config, **overrides)


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, Any]]
    last_heartbeat_ms: int
    assignment: Any = None
    awaiting_join: bool = False
    awaiting_sync: bool = False

    def protocol_names(self) -> list[str]:
        return [p for p, _ in self.protocols]

    def metadata_for(self, protocol: str) -> Any:
        return next(m for p, m in self.protocols if p == protocol)


@dataclass
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str = "consumer"
    protocol: str | None = None
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    rebalance_deadline_ms: int = 0
    initial_delay_until_ms: int = 0
    sync_deadline_ms: int = 0
    empty_since_ms: int = 0
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)

    def transition(self, to: GroupState) -> None:
        invariant(self.state in _VALID_PREVIOUS[to], f"group {self.group_id}: {self.state.value} -> {to.value}")
        self.state = to

    def candidate_protocols(self, extra: list[str] | None = None) -> set[str]:
        sets = [set(m.protocol_names()) for m in self.members.values()]
        if extra is not None:
            sets.append(set(extra))
        return set.intersection(*sets) if sets else set()


@dataclass(frozen=True)
class JoinResult:
    """The (possibly delayed) answer to a member's JoinGroup."""

    group_id: str
    member_id: str
    generation: int
    protocol: str | None
    leader_id: str | None
    #: Every member's metadata for the chosen protocol: only in the leader's answer.
    members: tuple[tuple[str, Any], ...] = ()
    error: type[Exception] | None = None


@dataclass(frozen=True)
class SyncResult:
    """The (possibly delayed) answer to a member's SyncGroup: its assignment."""

    group_id: str
    member_id: str
    generation: int
    assignment: Any = None
    error: type[Exception] | None = None


Effect = JoinResult | SyncResult


class GroupCoordinator:
    """Groups and their committed offsets. Concurrency: not thread-safe; one event at a time."""

    def __init__(self, config: CoordinatorConfig, new_member_id: Callable[[str], str]) -> None:
        self.config = config
        self.new_member_id = new_member_id
        self.groups: dict[str, Group] = {}
        #: Transactional commits (TxnOffsetCommit) not yet decided: producer id -> (group, topic-partition)
        #: -> (log offset of the commit, the offset). They become committed offsets when the COMMIT
        #: marker lands in the group's partition, and are dropped on ABORT.
        self.pending_txn_offsets: dict[int, dict[tuple[str, TopicPartition], tuple[int, CommittedOffset]]] = {}

    # ------------------------------------------------------------------ membership

    def join(self, group_id: str, member_id: str, *, client_id: str, client_host: str, session_timeout_ms: int,
             rebalance_timeout_ms: int, protocol_type: str, protocols: list[tuple[str, Any]],
             now_ms: int) -> tuple[str, list[Effect]]:
        """A JoinGroup; returns the member id (a new one for member_id "") and the answers now due."""
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            raise InvalidSessionTimeoutError(
                f"session.timeout.ms={session_timeout_ms} is outside [group.min.session.timeout.ms="
                f"{cfg.min_session_timeout_ms}, group.max.session.timeout.ms={cfg.max_session_timeout_ms}]")
        if not protocols:
            raise InconsistentProtocolError("a member must support at least one assignment strategy")
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            if member_id:
                raise UnknownMemberIdError(f"group {group_id} does not know member {member_id}")
            group = self.groups[group_id] = Group(group_id, empty_since_ms=now_ms)
        names = [p for p, _ in protocols]
        if group.members and (group.protocol_type != protocol_type or not group.candidate_protocols(names)):
            raise InconsistentProtocolError(
                f"group {group_id} uses {group.protocol_type} strategies {sorted(group.candidate_protocols())}; "
                f"this member supports {names}")
        rebalance_timeout_ms = max(rebalance_timeout_ms, session_timeout_ms)
        if not member_id:
            if len(group.members) >= cfg.max_size:
                raise GroupMaxSizeReachedError(f"group {group_id} has group.max.size={cfg.max_size} members")
            member_id = self.new_member_id(client_id)
            m = Member(member_id, client_id, client_host, session_timeout_ms, rebalance_timeout_ms,
                       list(protocols), now_ms)
            group.members[member_id] = m
        else:
            m = group.members.get(member_id)
            if m is None:
                raise UnknownMemberIdError(f"group {group_id} does not know member {member_id}")
            m.protocols = list(protocols)
            m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
            m.last_heartbeat_ms = now_ms
        group.protocol_type = protocol_type
        m.awaiting_join = True
        m.awaiting_sync = False
        effects: list[Effect] = []
        if group.state != GroupState.PREPARING_REBALANCE:
            effects += self._prepare_rebalance(group, now_ms)
        effects += self._try_complete_join(group, now_ms)
        return member_id, effects

    def sync(self, group_id: str, member_id: str, generation: int, assignments: dict[str, Any] | None,
             now_ms: int) -> list[Effect]:
        """A SyncGroup (`assignments` from the leader, None from the others)."""
        group, m = self._member(group_id, member_id)
        if generation != group.generation:
            raise IllegalGenerationError(f"generation {generation} is not group {group_id}'s {group.generation}")
        if group.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {group_id} is rebalancing: rejoin")
        m.last_heartbeat_ms = now_ms
        if group.state == GroupState.STABLE:
            return [SyncResult(group_id, member_id, group.generation, m.assignment)]
        # CompletingRebalance
        m.awaiting_sync = True
        if member_id != group.leader_id or assignments is None:
            return []
        for mid, member in group.members.items():
            member.assignment = assignments.get(mid)
        group.transition(GroupState.STABLE)
        out: list[Effect] = []
        for member in group.members.values():
            if member.awaiting_sync:
                member.awaiting_sync = False
                member.last_heartbeat_ms = now_ms
                out.append(SyncResult(group_id, member.member_id, group.generation, member.assignment))
        return out

    def heartbeat(self, group_id: str, member_id: str, generation: int, now_ms: int) -> None:
        group, m = self._member(group_id, member_id)
        if generation != group.generation:
            raise IllegalGenerationError(f"generation {generation} is not group {group_id}'s {group.generation}")
        m.last_heartbeat_ms = now_ms
        if group.state == GroupState.PREPARING_REBALANCE:
            raise RebalanceInProgressError(f"group {group_id} is rebalancing: rejoin")

    def leave(self, group_id: str, member_id: str, now_ms: int) -> list[Effect]:
        group, m = self._member(group_id, member_id)
        return self._remove_member(group, m, now_ms)

    def tick(self, now_ms: int) -> list[Effect]:
        """Timers: session timeouts, the rebalance timeout, a leader that never syncs."""
        out: list[Effect] = []
        for group in list(self.groups.values()):
            for m in list(group.members.values()):
                waiting = m.awaiting_join or (m.awaiting_sync and group.state == GroupState.COMPLETING_REBALANCE)
                if not waiting and now_ms - m.last_heartbeat_ms > m.session_timeout_ms and m.member_id in group.members:
                    out += self._remove_member(group, m, now_ms)
            if group.state == GroupState.PREPARING_REBALANCE:
                out += self._try_complete_join(group, now_ms)
            elif group.state == GroupState.COMPLETING_REBALANCE and now_ms >= group.sync_deadline_ms:
                # Members that never sent their SyncGroup (the leader above all) are gone.
                for m in [m for m in group.members.values() if not m.awaiting_sync]:
                    group.members.pop(m.member_id, None)
                if group.leader_id not in group.members:
                    group.leader_id = None
                out += self._prepare_rebalance(group, now_ms)
                out += self._try_complete_join(group, now_ms)
        return out

    def _member(self, group_id: str, member_id: str) -> tuple[Group, Member]:
        group = self.groups.get(group_id)
        m = group.members.get(member_id) if group is not None else None
        if group is None or m is None:
            raise UnknownMemberIdError(f"group {group_id} does not know member {member_id!r}")
        return group, m

    def _remove_member(self, group: Group, m: Member, now_ms: int) -> list[Effect]:
        group.members.pop(m.member_id, None)
        if group.leader_id == m.member_id:
            group.leader_id = None
        out: list[Effect] = []
        if m.awaiting_join:
            out.append(JoinResult(group.group_id, m.member_id, -1, None, None, (), UnknownMemberIdError))
        if m.awaiting_sync:
            out.append(SyncResult(group.group_id, m.member_id, -1, None, UnknownMemberIdError))
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            out += self._prepare_rebalance(group, now_ms)
        out += self._try_complete_join(group, now_ms)
        return out

    def _prepare_rebalance(self, group: Group, now_ms: int) -> list[Effect]:
        out: list[Effect] = []
        if group.state == GroupState.COMPLETING_REBALANCE:
            # Members waiting on the leader's assignment must rejoin instead.
            for m in group.members.values():
                m.assignment = None
                if m.awaiting_sync:
                    m.awaiting_sync = False
                    out.append(SyncResult(group.group_id, m.member_id, group.generation, None,
                                          RebalanceInProgressError))
        was_empty = group.state == GroupState.EMPTY
        group.transition(GroupState.PREPARING_REBALANCE)
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        group.rebalance_deadline_ms = now_ms + timeout
        group.initial_delay_until_ms = (now_ms + min(self.config.initial_rebalance_delay_ms, timeout)
                                        if was_empty else 0)
        return out

    def _try_complete_join(self, group: Group, now_ms: int) -> list[Effect]:
        if group.state != GroupState.PREPARING_REBALANCE or now_ms < group.initial_delay_until_ms:
            return []
        if not all(m.awaiting_join for m in group.members.values()):
            if now_ms < group.rebalance_deadline_ms:
                return []
            for m in [m for m in group.members.values() if not m.awaiting_join]:
                group.members.pop(m.member_id)
                if group.leader_id == m.member_id:
                    group.leader_id = None
        group.generation += 1
        if not group.members:
            group.transition(GroupState.EMPTY)
            group.protocol, group.leader_id, group.empty_since_ms = None, None, now_ms
            return []
        group.protocol = self._select_protocol(group)
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE)
        group.sync_deadline_ms = now_ms + max(m.rebalance_timeout_ms for m in group.members.values())
        everyone = tuple((mid, m.metadata_for(group.protocol)) for mid, m in group.members.items())
        out: list[Effect] = []
        for m in group.members.values():
            m.awaiting_join = False
            m.last_heartbeat_ms = now_ms
            out.append(JoinResult(group.group_id, m.member_id, group.generation, group.protocol, group.leader_id,
                                  everyone if m.member_id == group.leader_id else ()))
        return out

    @staticmethod
    def _select_protocol(group: Group) -> str:
        """Kafka's vote: each member votes for its most preferred strategy that all members support."""
        candidates = group.candidate_protocols()
        invariant(bool(candidates), f"group {group.group_id} has no common strategy")
        votes: dict[str, int] = {}
        for m in group.members.values():
            choice = next(p for p in m.protocol_names() if p in candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(group.members.values())).protocol_names()
        return max(votes, key=lambda p: (votes[p], -first.index(p) if p in first else -len(first)))

    # ------------------------------------------------------------------ committed offsets

    def check_commit(self, group_id: str, member_id: str, generation: int) -> None:
        """Raise if this member / generation may not commit for the group now."""
        group = self.groups.get(group_id)
        if generation < 0 and not member_id:
            if group is not None and group.members:
                raise RebalanceInProgressError(
                    f"group {group_id} has active members: only they commit (stop them first)")
            return
        if group is None or member_id not in group.members:
            raise UnknownMemberIdError(f"group {group_id} does not know member {member_id!r}")
        if group.state == GroupState.COMPLETING_REBALANCE:
            raise RebalanceInProgressError(f"group {group_id} is rebalancing")
        if generation != group.generation:
            raise IllegalGenerationError(f"generation {generation} is not group {group_id}'s {group.generation}")

    def apply_offset(self, group_id: str, tp: TopicPartition, value: CommittedOffset | None, now_ms: int) -> None:
        """A commit that is in the log (appended, or read back by a new coordinator); None deletes it."""
        group = self.groups.get(group_id)
        if group is None:
            if value is None:
                return
            group = self.groups[group_id] = Group(group_id, empty_since_ms=now_ms)
        if value is None:
            group.offsets.pop(tp, None)
            if group.state == GroupState.EMPTY and not group.offsets and not group.members:
                del self.groups[group_id]
        else:
            group.offsets[tp] = value

    def apply_txn_offset(self, producer_id: int, group_id: str, tp: TopicPartition, log_offset: int,
                         value: CommittedOffset) -> None:
        """A transactional commit that is in the log: pending until its transaction's marker."""
        self.pending_txn_offsets.setdefault(producer_id, {})[(group_id, tp)] = (log_offset, value)

    def complete_txn(self, producer_id: int, commit: bool, in_partition: Callable[[str], bool]
                     ) -> list[tuple[str, TopicPartition, int, CommittedOffset]]:
        """The producer's marker landed in a partition: its pending commits of the groups
        `in_partition` selects are decided. Returns the commits that became visible (on COMMIT),
        for the caller to apply in log order against later plain commits."""
        pending = self.pending_txn_offsets.get(producer_id, {})
        decided = [(k, v) for k, v in pending.items() if in_partition(k[0])]
        for k, _ in decided:
            del pending[k]
        if not pending:
            self.pending_txn_offsets.pop(producer_id, None)
        return [(g, tp, pos, value) for (g, tp), (pos, value) in decided] if commit else []

    def pending_txn_partitions(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions with a transactional commit not yet decided (KIP-447's unstable offsets)."""
        return {tp for pending in self.pending_txn_offsets.values() for (g, tp) in pending if g == group_id}

    def committed(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        group = self.groups.get(group_id)
        return dict(group.offsets) if group is not None else {}

    def expired_offsets(self, now_ms: int, *, wall_ms: int) -> list[tuple[str, TopicPartition]]:
        """Offsets of empty groups committed more than offsets.retention.minutes ago (`wall_ms`, the
        wall clock of commit timestamps) and empty for that long (`now_ms`, monotonic): the service
        writes tombstones for them."""
        out = []
        retention = self.config.offsets_retention_ms
        for g in self.groups.values():
            if g.state != GroupState.EMPTY or g.empty_since_ms + retention > now_ms:
                continue
            for tp, v in g.offsets.items():
                if v.commit_timestamp_ms + retention <= wall_ms:
                    out.append((g.group_id, tp))
        return out

    def remove_groups(self, predicate: Callable[[str], bool]) -> list[Effect]:
        """Forget the groups (this node stopped coordinating them): pending answers fail NOT_COORDINATOR."""
        from lakelog.ingest_api.groups.errors import NotCoordinatorError
        out: list[Effect] = []
        for pid in list(self.pending_txn_offsets):
            pending = self.pending_txn_offsets[pid]
            for k in [k for k in pending if predicate(k[0])]:
                del pending[k]
            if not pending:
                del self.pending_txn_offsets[pid]
        for gid in [g for g in self.groups if predicate(g)]:
            group = self.groups.pop(gid)
            for m in group.members.values():
                if m.awaiting_join:
                    out.append(JoinResult(gid, m.member_id, -1, None, None, (), NotCoordinatorError))
                if m.awaiting_sync:
                    out.append(SyncResult(gid, m.member_id, -1, None, NotCoordinatorError))
        return out

    # ------------------------------------------------------------------ inspection

    def describe(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def check_invariants(self) -> None:
        for g in self.groups.values():
            invariant(len(g.members) <= self.config.max_size, f"group {g.group_id} exceeds group.max.size")
            if g.state == GroupState.EMPTY:
                invariant(not g.members, f"empty group {g.group_id} has members")
            if g.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                invariant(g.leader_id in g.members, f"group {g.group_id} has no leader among its members")
