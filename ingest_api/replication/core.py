"""Replication's rules for one partition replica: a pure, deterministic state machine, no I/O.

`ReplicaCore.step(event) -> list[Effect]` is the only way to change it. Events say what happened
(the metadata made this replica leader or follower, the leader appended, a follower fetched, a
follower appended or truncated, a produce waits for commit, an ISR change was answered, time
passed); effects say what the host must do (stamp the leader epoch in the log's cache, advance the
log start offset, wake fetches because the HW moved, complete produces waiting in the purgatory,
propose an ISR change to the controller); `events.py` declares both. The log's facts — log end
offset (LEO) and log start offset — come in with the events; the clock comes in as `now_ms`. The
host (`ingest_api/replication/partition.py` on a node, `tests/sim/replication_sim.py` in the simulation) owns
the log, the futures, the locks and the clock, and runs the effects of one step in order before
the next step.

Leader: HW = min LEO over the *maximal* ISR — the committed ISR plus members a pending ISR
expansion adds, and, while a shrink is pending, the members it would remove (Kafka's rule: an ISR
change is applied to the HW only once the controller committed it, and an addition is counted at
once, which can only hold the HW back). A follower's LEO is its fetch offset: a fetch from offset
O proves it holds everything below O. A follower that has not fetched since this replica became
leader has an unknown LEO and holds the HW where it is.

Catching up (replica.lag.time.max.ms): a follower's `last_caught_up_ms` is the time of a fetch at
or past the leader's LEO, or — when it reaches the LEO the leader had at its previous fetch — that
previous fetch's time. On `Tick`, ISR members lagging longer are proposed out; a follower whose LEO
reaches the HW and the start of the current leader epoch (KAFKA-7128) is proposed back in, if its
broker is eligible (unfenced, not shutting down: KIP-841, `FollowerFetch.isr_eligible`). One ISR
change is in flight at a time; the committed ISR arrives with the next `BecomeLeader`.

Follower: HW = max(log start, min(leader HW, own LEO)); a new leader epoch means the follower must
ask OffsetsForLeaderEpoch and truncate (`needs_truncation`) before it fetches.

Produce purgatory: an acks=all produce completes once the HW reaches its last offset + 1:
COMMITTED, or NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR is below its min.insync.replicas then;
NOT_LEADER when this replica stops leading first.

Invariants (checked with `invariant()` after every step):
  * log start offset <= HW <= LEO (as the events last told them);
  * the HW never goes backwards while this replica leads in one leader epoch;
  * a leader is always in its own ISR; leader epochs only grow;
  * a leader's followers' LEOs are at most its own LEO, and it tracks exactly the other replicas.

Concurrency: not thread-safe and not reentrant; the host serialises `step` calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lakelog.infra.errors import invariant

from lakelog.ingest_api.replication.events import (  # noqa: F401  (re-exported: the machine's vocabulary)
    UNKNOWN_LEO,
    Role,
    ProduceOutcome,
    RemoteReplica,
    ReplicationRules,
    BecomeLeader,
    BecomeFollower,
    Appended,
    FollowerFetch,
    Tick,
    IsrChangeAnswered,
    AwaitCommit,
    ForgetProduce,
    AbortProduces,
    FollowerAppended,
    Truncated,
    MustTruncate,
    Event,
    NewLeaderEpoch,
    StampLeaderEpoch,
    HighWatermarkAdvanced,
    WakeAll,
    CompleteProduce,
    ProposeIsr,
    IncrementLogStart,
    Effect,
)

@dataclass
class _Waiting:
    request_id: int
    required_offset: int
    min_isr: int


# ---------------------------------------------------------------------------------------------
# The state machine


@dataclass
class ReplicaCore:
    """One replica's replication state; change it only through `step`."""

    node_id: int
    high_watermark: int = 0
    leo: int = 0
    log_start_offset: int = 0
    rules: ReplicationRules = field(default_factory=ReplicationRules)
    role: Role = Role.NONE
    leader_id: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    #: The ISR an in-flight AlterPartition asks for (None when none is pending).
    pending_isr: tuple[int, ...] | None = None
    #: An ISR change was proposed and not answered (or not yet seen committed) in this leadership.
    isr_change_in_flight: bool = False
    remote: dict[int, RemoteReplica] = field(default_factory=dict)
    #: The LEO when this replica became leader in its current epoch (KIP-207, KAFKA-7128).
    epoch_start_offset: int = 0
    #: Set when this replica must ask its leader where to truncate before fetching.
    needs_truncation: bool = False
    _waiting: list[_Waiting] = field(default_factory=list)
    _out: list[Effect] = field(default_factory=list)
    _epoch_floor: int = -1
    _hw_floor: tuple[int, int] = (-1, 0)  # (leader epoch, HW) while leading

    def __post_init__(self) -> None:
        self.high_watermark = max(self.log_start_offset, min(self.high_watermark, self.leo))
        self._check()

    # ------------------------------------------------------------------ queries (pure reads)

    @property
    def is_leader(self) -> bool:
        return self.role == Role.LEADER

    def maximal_isr(self) -> tuple[int, ...]:
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr if r not in self.isr)

    def out_of_sync_replicas(self, lag_max_ms: int, now_ms: int) -> list[int]:
        """ISR members (not the leader) that have not caught up within `lag_max_ms`."""
        out = []
        for r in self.isr:
            if r == self.node_id:
                continue
            state = self.remote.get(r)
            if state is None or now_ms - state.last_caught_up_ms > lag_max_ms:
                out.append(r)
        return out

    def waiting_produces(self) -> int:
        return len(self._waiting)

    # ------------------------------------------------------------------ the one way in

    def step(self, event: Event) -> list[Effect]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not a replication event: {event!r}")
        handler(self, event)
        self._check()
        out, self._out = self._out, []
        return out

    # ------------------------------------------------------------------ role changes

    def _on_become_leader(self, e: BecomeLeader) -> None:
        invariant(self.node_id in e.isr, f"leader {self.node_id} not in ISR {list(e.isr)}")
        self.leo, self.log_start_offset = e.leo, e.log_start_offset
        new_term = self.role != Role.LEADER or e.leader_epoch != self.leader_epoch
        if new_term:
            invariant(e.leader_epoch >= self.leader_epoch, f"leader epoch {e.leader_epoch} below {self.leader_epoch}")
            # Stamp the epoch at the LEO now, so OffsetsForLeaderEpoch answers correctly before the
            # first append of this term.
            self._out.append(StampLeaderEpoch(e.leader_epoch, e.leo))
            self.epoch_start_offset = e.leo
            # ISR members get a full lag window from now; their LEO is unknown until they fetch.
            self.remote = {r: RemoteReplica(last_caught_up_ms=e.now_ms if r in e.isr else 0)
                           for r in e.replicas if r != self.node_id}
            self.pending_isr = None
            self.needs_truncation = False
            # A new leader's HW starts at its own (it only moves up from here in this epoch).
            self.high_watermark = max(e.log_start_offset, min(self.high_watermark, e.leo))
            self._hw_floor = (e.leader_epoch, self.high_watermark)
            self._out.append(NewLeaderEpoch(Role.LEADER, e.leader_epoch))
        self.role, self.leader_id, self.leader_epoch = Role.LEADER, self.node_id, e.leader_epoch
        if e.partition_epoch != self.partition_epoch:
            self.pending_isr = None
        # The metadata moved: a change this leader proposed was committed or overtaken.
        self.isr_change_in_flight = False
        self.partition_epoch = e.partition_epoch
        self.replicas, self.isr = tuple(e.replicas), tuple(e.isr)
        for r in e.replicas:
            if r != self.node_id and r not in self.remote:
                self.remote[r] = RemoteReplica()
        for r in [r for r in self.remote if r not in e.replicas]:
            del self.remote[r]
        self._maybe_advance_high_watermark()
        self._complete_produces()

    def _on_become_follower(self, e: BecomeFollower) -> None:
        self.leo, self.log_start_offset = e.leo, e.log_start_offset
        new_term = self.role != Role.FOLLOWER or e.leader_epoch != self.leader_epoch or e.leader_id != self.leader_id
        if new_term:
            invariant(e.leader_epoch >= self.leader_epoch, f"leader epoch {e.leader_epoch} below {self.leader_epoch}")
            self.needs_truncation = e.leader_id >= 0
            self.remote = {}
            self.pending_isr = None
        was_leader = self.role == Role.LEADER
        self.role = Role.FOLLOWER if e.leader_id >= 0 else Role.NONE
        self.leader_id, self.leader_epoch, self.partition_epoch = e.leader_id, e.leader_epoch, e.partition_epoch
        self.replicas, self.isr = tuple(e.replicas), tuple(e.isr)
        self.high_watermark = max(e.log_start_offset, min(self.high_watermark, e.leo))
        if was_leader or new_term:
            self._end_produces(ProduceOutcome.NOT_LEADER)
            self._out.append(WakeAll())
        if new_term:
            self._out.append(NewLeaderEpoch(self.role, e.leader_epoch))

    # ------------------------------------------------------------------ leader

    def append_refusal(self, required_acks: str, min_isr: int) -> str | None:
        """Why an append as leader must be refused now: "not_leader", "no_leader", "not_enough_replicas" or None."""
        if self.role != Role.LEADER:
            return "no_leader" if self.leader_id < 0 else "not_leader"
        if required_acks == "all" and len(self.isr) < min_isr:
            return "not_enough_replicas"
        return None

    def _on_appended(self, e: Appended) -> None:
        invariant(e.leo >= self.leo or self.role != Role.LEADER, f"a leader's LEO went back: {self.leo} -> {e.leo}")
        self.leo = e.leo
        self._maybe_advance_high_watermark()

    def _on_follower_fetch(self, e: FollowerFetch) -> None:
        self.leo = max(self.leo, e.leo)
        state = self.remote.get(e.replica_id)
        if self.role != Role.LEADER or state is None:
            return
        if e.fetch_offset >= e.leo:
            state.last_caught_up_ms = e.now_ms
        elif state.last_fetch_leader_leo != UNKNOWN_LEO and e.fetch_offset >= state.last_fetch_leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.leo = min(e.fetch_offset, e.leo)
        state.last_fetch_leader_leo = e.leo
        state.last_fetch_ms = e.now_ms
        self._maybe_advance_high_watermark()
        current = self.pending_isr if self.pending_isr is not None else self.isr
        if (e.replica_id not in current and e.isr_eligible and state.leo >= self.high_watermark
                and (state.leo >= self.epoch_start_offset or not self.rules.isr_join_requires_epoch_start)):
            new_isr = tuple(r for r in self.replicas if r in current or r == e.replica_id)
            self._propose_isr(new_isr, f"node {e.replica_id} caught up at {state.leo}")

    def _on_tick(self, e: Tick) -> None:
        if self.role != Role.LEADER or self.isr_change_in_flight:
            return
        out = self.out_of_sync_replicas(e.lag_max_ms, e.now_ms)
        if out:
            self._propose_isr(tuple(r for r in self.isr if r not in out), f"lagging: {out}")

    def _propose_isr(self, new_isr: tuple[int, ...], reason: str) -> None:
        if self.isr_change_in_flight:
            return
        self.isr_change_in_flight = True
        self.pending_isr = new_isr
        self._out.append(ProposeIsr(new_isr, self.leader_epoch, self.partition_epoch, reason))

    def _on_isr_change_answered(self, e: IsrChangeAnswered) -> None:
        if not e.accepted:
            if self.partition_epoch == e.partition_epoch:
                self.pending_isr = None
            self.isr_change_in_flight = False
        elif self.partition_epoch != e.partition_epoch:
            # Already applied; otherwise the committed change arrives with the next BecomeLeader.
            self.isr_change_in_flight = False
        self._maybe_advance_high_watermark()

    def _maybe_advance_high_watermark(self) -> None:
        """HW = min LEO over the maximal ISR; wakes waiting fetches and produces when it moves."""
        if self.role != Role.LEADER:
            return
        new_hw = self.leo
        for r in self.maximal_isr():
            if r == self.node_id:
                continue
            state = self.remote.get(r)
            if state is None or state.leo == UNKNOWN_LEO:
                return
            new_hw = min(new_hw, state.leo)
        if new_hw <= self.high_watermark:
            return
        old, self.high_watermark = self.high_watermark, new_hw
        self._out.append(HighWatermarkAdvanced(old, new_hw))
        self._complete_produces()

    # ------------------------------------------------------------------ produce purgatory

    def _on_await_commit(self, e: AwaitCommit) -> None:
        self._waiting.append(_Waiting(e.request_id, e.required_offset, e.min_isr))
        self._complete_produces()

    def _on_forget_produce(self, e: ForgetProduce) -> None:
        self._waiting = [w for w in self._waiting if w.request_id != e.request_id]

    def _on_abort_produces(self, e: AbortProduces) -> None:
        self._end_produces(ProduceOutcome.ABORTED)
        self._out.append(WakeAll())

    def _complete_produces(self) -> None:
        keep = []
        for w in self._waiting:
            if self.role != Role.LEADER:
                self._out.append(CompleteProduce(w.request_id, ProduceOutcome.NOT_LEADER, self.isr, w.min_isr))
            elif self.high_watermark >= w.required_offset:
                outcome = (ProduceOutcome.COMMITTED if len(self.isr) >= w.min_isr
                           else ProduceOutcome.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
                self._out.append(CompleteProduce(w.request_id, outcome, self.isr, w.min_isr))
            else:
                keep.append(w)
        self._waiting = keep

    def _end_produces(self, outcome: ProduceOutcome) -> None:
        for w in self._waiting:
            self._out.append(CompleteProduce(w.request_id, outcome, self.isr, w.min_isr))
        self._waiting = []

    # ------------------------------------------------------------------ follower

    def _on_follower_appended(self, e: FollowerAppended) -> None:
        log_start = e.log_start_offset
        if log_start < e.leader_log_start_offset <= e.leo:
            self._out.append(IncrementLogStart(e.leader_log_start_offset))
            log_start = e.leader_log_start_offset
        self.leo, self.log_start_offset = e.leo, log_start
        self.high_watermark = max(log_start, min(e.leader_hw, e.leo))

    def _on_truncated(self, e: Truncated) -> None:
        self.leo, self.log_start_offset = e.leo, e.log_start_offset
        self.high_watermark = max(e.log_start_offset, min(self.high_watermark, e.leo))
        if e.final:
            self.needs_truncation = False

    def _on_must_truncate(self, e: MustTruncate) -> None:
        if self.role == Role.FOLLOWER:
            self.needs_truncation = True

    # ------------------------------------------------------------------ invariants

    def _check(self) -> None:
        broken = self._broken_invariant()
        invariant(broken is None, f"replica {self.node_id} in leader epoch {self.leader_epoch}: {broken}")
        self._epoch_floor = self.leader_epoch
        if self.role == Role.LEADER:
            self._hw_floor = (self.leader_epoch, self.high_watermark)

    def _broken_invariant(self) -> str | None:
        if not self.log_start_offset <= self.high_watermark <= self.leo:
            return f"HW {self.high_watermark} outside [log start {self.log_start_offset}, LEO {self.leo}]"
        if self.leader_epoch < self._epoch_floor:
            return f"leader epoch went back from {self._epoch_floor} to {self.leader_epoch}"
        if self.role != Role.LEADER:
            return None
        if self.node_id not in self.isr:
            return f"the leader is not in its ISR {list(self.isr)}"
        epoch, hw = self._hw_floor
        if epoch == self.leader_epoch and self.high_watermark < hw:
            return f"the HW went back from {hw} to {self.high_watermark}"
        if set(self.remote) != {r for r in self.replicas if r != self.node_id}:
            return f"tracks followers {sorted(self.remote)}, replicas are {list(self.replicas)}"
        for r, s in self.remote.items():
            if s.leo > self.leo:
                return f"follower {r}'s LEO {s.leo} is above the leader's {self.leo}"
        return None


_HANDLERS = {
    BecomeLeader: ReplicaCore._on_become_leader,
    BecomeFollower: ReplicaCore._on_become_follower,
    Appended: ReplicaCore._on_appended,
    FollowerFetch: ReplicaCore._on_follower_fetch,
    Tick: ReplicaCore._on_tick,
    IsrChangeAnswered: ReplicaCore._on_isr_change_answered,
    AwaitCommit: ReplicaCore._on_await_commit,
    ForgetProduce: ReplicaCore._on_forget_produce,
    AbortProduces: ReplicaCore._on_abort_produces,
    FollowerAppended: ReplicaCore._on_follower_appended,
    Truncated: ReplicaCore._on_truncated,
    MustTruncate: ReplicaCore._on_must_truncate,
}
