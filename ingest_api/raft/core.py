"""The Raft state machine of one controller voter: pure, deterministic, no I/O.

`RaftCore.step(event) -> list[Effect]` is the only way in. Events are a logical clock `Tick`, a
`Receive`d message, a client `Propose` and a host `CompactLog`; effects tell the host what to make
durable, what to send, what to apply and what changed. The clock is the count of `Tick`s and the
randomised election timeouts come from the `random.Random` passed in, so a seed replays a run
exactly (see tests/sim/raft_sim.py). The values it speaks in (entries, snapshots, messages, events,
effects) are in `raft/messages.py`.

The Raft term is what the design calls the controller epoch: the leader of term T is the active
controller of epoch T, and anything stamped with an older epoch is fenced.

Roles (`Role`): a FOLLOWER whose election timer fires becomes a PRE_CANDIDATE and asks the voters
whether they *would* vote for it in term+1 (pre-vote, Raft thesis §9.6); voters say yes only if its
log is up to date and they have not heard from a leader for an election timeout. Only with a quorum
of yeses does it become a CANDIDATE, bump and persist the term and ask for real votes. So a voter
cut off from the others cannot inflate its term and depose a healthy leader when it rejoins. A
LEADER that has not heard from a quorum for an election timeout steps down (check quorum), so an
isolated controller stops acting as one.

Effect ordering (the durability contract). The host executes the effects of one step in list order,
completely (a Persist* effect has been fsynced when it returns), before it calls `step` again. Every
Persist* effect of a step comes before every other effect of that step, so a message never leaves
before the vote, term or entries it vouches for are durable. If the host crashes part-way through
the list it restarts from its durable state only; the in-memory core is thrown away. If a Persist*
effect fails, the host must stop (fail-stop); it must not carry on with the remaining effects.

Group commit. A host may instead step several events in a row and then execute the effects of the
whole group: every Persist* effect of the group first, in the order the steps produced them (so the
files end as after the last step; the host may write a run of PersistEntries with one fsync), then
every other effect, in order. Nothing leaves before all the group's writes are durable, and a message
of an earlier step that leaves after a later step's writes is only a delayed message, which Raft
tolerates; a crash part-way leaves the files as after some prefix of the persists, which is a state
the core went through (or part of one step's persists, as above). `ProposeMany` appends several
proposals as consecutive entries in one PersistEntries and one AppendEntries per peer.

Invariants (checked with `invariant()` after every step):
  * the term never decreases; a vote (voted_for) is given at most once per term;
  * log indexes are contiguous from snapshot_index + 1; terms along the log never decrease and never
    exceed the current term;
  * snapshot_index <= applied_index <= commit_index <= last_index, and commit_index never decreases;
  * an entry at or below commit_index is never truncated;
  * at most one leader per term: a leader never receives AppendEntries of its own term;
  * a leader has voted for itself, and for every peer match_index < next_index <= last_index + 1;
  * a leader commits only entries of its own term by counting replicas (Raft §5.4.2); earlier
    entries commit with them.

Concurrency: not thread-safe and not reentrant; the host serialises `step` calls.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from lakelog.infra.errors import invariant
from lakelog.ingest_api.raft.messages import (
    AppendEntries,
    AppendEntriesResponse,
    Apply,
    CompactLog,
    DurableState,
    Effect,
    Entry,
    EntryKind,
    EntryTooLargeError,
    Event,
    InstallSnapshot,
    InstallSnapshotResponse,
    Message,
    NO_NODE,
    PersistEntries,
    PersistSnapshot,
    PersistState,
    ProposalRefused,
    Propose,
    ProposeMany,
    Proposed,
    RaftConfig,
    Receive,
    RequestVote,
    RequestVoteResponse,
    RestoreSnapshot,
    Role,
    RoleChanged,
    Send,
    Snapshot,
    StepDown,
    Tick,
    _PERSIST,
)


# ---------------------------------------------------------------------------------------------
# The core

@dataclass
class _Peer:
    next_index: int
    match_index: int = 0


class RaftCore:
    def __init__(self, node_id: int, voters: list[int] | tuple[int, ...], config: RaftConfig,
                 rng: random.Random, durable: DurableState = DurableState()) -> None:
        invariant(node_id in voters and len(set(voters)) == len(voters), "node must be one of distinct voters")
        self.node_id = node_id
        self.voters = tuple(sorted(voters))
        self.peers = tuple(v for v in self.voters if v != node_id)
        self.quorum = len(self.voters) // 2 + 1
        self.config = config
        self._rng = rng
        # persistent
        self.term = durable.term
        self.voted_for = durable.voted_for
        self._set_snapshot(durable.snapshot)
        self._log: list[Entry] = list(durable.entries)
        # volatile
        self.role = Role.FOLLOWER
        self.leader_id = NO_NODE
        self.commit_index = self.snapshot_index  # a snapshot holds only committed entries
        self.applied_index = self.snapshot_index  # the host restores the state machine from it
        self._commit_floor = self.commit_index
        self._votes: set[int] = set()
        self._progress: dict[int, _Peer] = {}
        self._active: set[int] = set()  # peers heard from in this check-quorum window
        self._elapsed = 0
        self._heartbeat_elapsed = 0
        self._timeout = self._random_timeout()
        self._out: list[Effect] = []
        self._check()

    # --- read-only views

    @property
    def snapshot_index(self) -> int:
        return self._snap_index

    @property
    def snapshot_term(self) -> int:
        return self._snap_term

    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    @property
    def last_index(self) -> int:
        return self._log[-1].index if self._log else self._snap_index

    @property
    def last_term(self) -> int:
        return self._log[-1].term if self._log else self._snap_term

    def term_at(self, index: int) -> int | None:
        """The term of the entry at `index`; 0 for index 0, None if compacted away or beyond the log."""
        if index == self._snap_index:
            return self._snap_term
        k = index - self._snap_index - 1
        return self._log[k].term if 0 <= k < len(self._log) else None

    def entry(self, index: int) -> Entry | None:
        """The entry at `index`, None if compacted into the snapshot or beyond the log."""
        k = index - self._snap_index - 1
        return self._log[k] if 0 <= k < len(self._log) else None

    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._log)

    def match_index(self, peer: int) -> int:
        return self._progress[peer].match_index if peer in self._progress else 0

    # --- the one way in

    def step(self, event: Event) -> list[Effect]:
        if isinstance(event, Tick):
            self._on_tick()
        elif isinstance(event, Receive):
            self._on_message(event.message)
        elif isinstance(event, Propose):
            self._on_propose((event.payload,))
        elif isinstance(event, ProposeMany):
            self._on_propose(event.payloads)
        elif isinstance(event, CompactLog):
            self._on_compact(event.snapshot)
        elif isinstance(event, StepDown):
            if self.role == Role.LEADER:
                self._become_follower(self.term, NO_NODE)
        else:
            raise TypeError(f"not a Raft event: {event!r}")
        self._apply_committed()
        self._check()
        out, self._out = self._out, []
        # The durability contract: every persist of this step before anything that depends on it.
        return [e for e in out if isinstance(e, _PERSIST)] + [e for e in out if not isinstance(e, _PERSIST)]

    # --- timers

    def _random_timeout(self) -> int:
        t = self.config.election_timeout_ticks
        return self._rng.randrange(t, 2 * t)

    def _reset_election_timer(self) -> None:
        self._elapsed = 0
        self._timeout = self._random_timeout()

    def _on_tick(self) -> None:
        self._elapsed += 1
        if self.role != Role.LEADER:
            if self._elapsed >= self._timeout:
                self._campaign()
            return
        self._heartbeat_elapsed += 1
        if self._heartbeat_elapsed >= self.config.heartbeat_interval_ticks:
            self._heartbeat_elapsed = 0
            for p in self.peers:
                self._send_append(p)
        if self._elapsed >= self.config.election_timeout_ticks:
            self._elapsed = 0
            heard = len(self._active) + 1
            self._active = set()
            if self.config.check_quorum and heard < self.quorum:
                self._become_follower(self.term, NO_NODE)

    # --- role changes

    def _set_role(self, role: Role, leader_id: int) -> None:
        if (role, leader_id) != (self.role, self.leader_id):
            self.role, self.leader_id = role, leader_id
            self._out.append(RoleChanged(role, self.term, leader_id))

    def _set_term(self, term: int, voted_for: int) -> None:
        invariant(term >= self.term, f"term must not go back from {self.term} to {term}")
        if (term, voted_for) != (self.term, self.voted_for):
            self.term, self.voted_for = term, voted_for
            if self._out and isinstance(self._out[-1], PersistState):
                self._out.pop()  # one write for a new term and the vote in it
            self._out.append(PersistState(term, voted_for))

    def _become_follower(self, term: int, leader_id: int) -> None:
        if term > self.term:
            self._set_term(term, NO_NODE)
        if self.role != Role.FOLLOWER:
            self._reset_election_timer()
        self._progress = {}
        self._votes = set()
        self._set_role(Role.FOLLOWER, leader_id)

    def _campaign(self) -> None:
        self._reset_election_timer()
        if not self.config.pre_vote:
            self._start_election()
            return
        self._votes = {self.node_id}
        self._set_role(Role.PRE_CANDIDATE, NO_NODE)
        if len(self._votes) >= self.quorum:
            self._start_election()
            return
        for p in self.peers:
            self._out.append(Send(p, RequestVote(self.term + 1, self.node_id, self.last_index,
                                                 self.last_term, pre_vote=True)))

    def _start_election(self) -> None:
        self._set_term(self.term + 1, self.node_id)
        self._reset_election_timer()
        self._votes = {self.node_id}
        self._set_role(Role.CANDIDATE, NO_NODE)
        if len(self._votes) >= self.quorum:
            self._become_leader()
            return
        for p in self.peers:
            self._out.append(Send(p, RequestVote(self.term, self.node_id, self.last_index, self.last_term)))

    def _become_leader(self) -> None:
        invariant(self.voted_for == self.node_id, "a leader has voted for itself")
        self._progress = {p: _Peer(next_index=self.last_index + 1) for p in self.peers}
        self._active = set()
        self._elapsed = self._heartbeat_elapsed = 0
        self._set_role(Role.LEADER, self.node_id)
        # A no-op of the new term: entries of earlier terms commit once it does (§5.4.2, §8).
        self._append(Entry(self.last_index + 1, self.term, EntryKind.NO_OP))
        self._advance_commit()  # a single voter commits at once
        for p in self.peers:
            self._send_append(p)

    # --- messages

    def _on_message(self, m: Message) -> None:
        if m.sender not in self.peers:
            return  # not a voter of this quorum (the host should not have passed it on)
        if m.term > self.term:
            # A pre-vote request, or a granted pre-vote, speaks of a term nobody has entered yet.
            hypothetical = (isinstance(m, RequestVote) and m.pre_vote) or (
                isinstance(m, RequestVoteResponse) and m.pre_vote and m.granted)
            if not hypothetical:
                leader = m.sender if isinstance(m, (AppendEntries, InstallSnapshot)) else NO_NODE
                self._become_follower(m.term, leader)
        elif m.term < self.term:
            # A stale epoch is fenced: requests are answered with our term so the sender steps down,
            # responses are dropped.
            if isinstance(m, RequestVote):
                self._reply(m.sender, RequestVoteResponse(self.term, self.node_id, False, m.pre_vote))
            elif isinstance(m, AppendEntries):
                self._reply(m.sender, AppendEntriesResponse(self.term, self.node_id, False, 0))
            elif isinstance(m, InstallSnapshot):
                self._reply(m.sender, InstallSnapshotResponse(self.term, self.node_id, 0))
            return
        if isinstance(m, RequestVote):
            self._on_request_vote(m)
        elif isinstance(m, RequestVoteResponse):
            self._on_vote_response(m)
        elif isinstance(m, AppendEntries):
            self._on_append_entries(m)
        elif isinstance(m, AppendEntriesResponse):
            self._on_append_response(m)
        elif isinstance(m, InstallSnapshot):
            self._on_install_snapshot(m)
        elif isinstance(m, InstallSnapshotResponse):
            self._on_snapshot_response(m)
        else:
            raise TypeError(f"not a Raft message: {m!r}")

    def _reply(self, to: int, m: Message) -> None:
        self._out.append(Send(to, m))

    def _log_up_to_date(self, m: RequestVote) -> bool:
        return (m.last_log_term, m.last_log_index) >= (self.last_term, self.last_index)

    def _on_request_vote(self, m: RequestVote) -> None:
        if m.pre_vote:
            # Refuse while we believe a leader is alive, so a rejoining voter cannot depose it.
            in_lease = self.role == Role.LEADER or (
                self.leader_id != NO_NODE and self._elapsed < self.config.election_timeout_ticks)
            granted = m.term > self.term and not in_lease and self._log_up_to_date(m)
            self._reply(m.sender, RequestVoteResponse(m.term if granted else self.term, self.node_id,
                                                      granted, pre_vote=True))
            return
        granted = self.voted_for in (NO_NODE, m.sender) and self._log_up_to_date(m)
        if granted:
            self._set_term(self.term, m.sender)  # persisted before the response below leaves
            self._reset_election_timer()
        self._reply(m.sender, RequestVoteResponse(self.term, self.node_id, granted))

    def _on_vote_response(self, m: RequestVoteResponse) -> None:
        if not m.granted:
            return
        if m.pre_vote:
            if self.role == Role.PRE_CANDIDATE and m.term == self.term + 1:
                self._votes.add(m.sender)
                if len(self._votes) >= self.quorum:
                    self._start_election()
        elif self.role == Role.CANDIDATE and m.term == self.term:
            self._votes.add(m.sender)
            if len(self._votes) >= self.quorum:
                self._become_leader()

    def _accept_leader(self, leader_id: int) -> None:
        invariant(self.role != Role.LEADER, f"two leaders in term {self.term}: {self.node_id} and {leader_id}")
        self._become_follower(self.term, leader_id)
        self._reset_election_timer()

    def _on_append_entries(self, m: AppendEntries) -> None:
        self._accept_leader(m.sender)
        prev, prev_term, entries = m.prev_log_index, m.prev_log_term, m.entries
        if prev < self.snapshot_index:
            # Our snapshot holds committed entries, which match the leader's: skip what it covers.
            skip = min(self.snapshot_index - prev, len(entries))
            if skip:
                prev, prev_term, entries = entries[skip - 1].index, entries[skip - 1].term, entries[skip:]
            if prev < self.snapshot_index:
                self._reply(m.sender, AppendEntriesResponse(self.term, self.node_id, True, prev))
                return
        if prev == self.snapshot_index:
            invariant(prev_term == self.snapshot_term, f"leader {m.sender} has term {prev_term} at "
                                                       f"{prev}, our committed snapshot {self.snapshot_term}")
        if prev > self.last_index:
            self._reply(m.sender, AppendEntriesResponse(self.term, self.node_id, False, 0,
                                                        conflict_index=self.last_index + 1))
            return
        our_term = self.term_at(prev)
        if our_term != prev_term:
            first = prev  # the first index of our conflicting term: the leader may skip the whole term
            while first - 1 > self.snapshot_index and self.term_at(first - 1) == our_term:
                first -= 1
            self._reply(m.sender, AppendEntriesResponse(self.term, self.node_id, False, 0,
                                                        conflict_index=first, conflict_term=our_term or 0))
            return
        # Skip entries we already hold; truncate only at the first real conflict, never on a stale
        # (shorter, reordered) AppendEntries whose entries all match.
        for i, e in enumerate(entries):
            if e.index > self.last_index or self.term_at(e.index) != e.term:
                self._append(*entries[i:])
                break
        last_new = prev + len(entries)
        if m.leader_commit > self.commit_index:
            # Only up to what this message proved equal to the leader's log, not our own last index.
            self.commit_index = max(self.commit_index, min(m.leader_commit, last_new))
        self._reply(m.sender, AppendEntriesResponse(self.term, self.node_id, True, last_new))

    def _on_install_snapshot(self, m: InstallSnapshot) -> None:
        self._accept_leader(m.sender)
        s = m.snapshot
        if s.last_index > self.commit_index:
            keep = self.term_at(s.last_index) == s.last_term
            self._log = [e for e in self._log if e.index > s.last_index] if keep else []
            self._set_snapshot(s)
            self.commit_index = self.applied_index = s.last_index
            self._out.append(PersistSnapshot(s, keep_log_after=keep))
            self._out.append(RestoreSnapshot(s))
        # Below our commit index our log equals the leader's, so its last index matches either way.
        self._reply(m.sender, InstallSnapshotResponse(self.term, self.node_id, s.last_index))

    def _on_append_response(self, m: AppendEntriesResponse) -> None:
        if self.role != Role.LEADER:
            return
        self._active.add(m.sender)
        peer = self._progress[m.sender]
        if m.success:
            self._acknowledged(m.sender, m.match_index)
            return
        retry = m.conflict_index
        if m.conflict_term:
            # If we hold the follower's conflicting term, resume after our last entry of it.
            i = self.last_index
            while i > self.snapshot_index and (self.term_at(i) or 0) > m.conflict_term:
                i -= 1
            if i > self.snapshot_index and self.term_at(i) == m.conflict_term:
                retry = i + 1
        retry = max(peer.match_index + 1, min(retry, self.last_index + 1))
        if retry != peer.next_index:  # a stale or repeated rejection changes nothing: no new send
            peer.next_index = retry
            self._send_append(m.sender)

    def _on_snapshot_response(self, m: InstallSnapshotResponse) -> None:
        if self.role == Role.LEADER:
            self._active.add(m.sender)
            self._acknowledged(m.sender, m.match_index)

    def _acknowledged(self, peer_id: int, match_index: int) -> None:
        invariant(match_index <= self.last_index, f"peer {peer_id} acknowledged {match_index} beyond "
                                                  f"the leader's last index {self.last_index}")
        peer = self._progress[peer_id]
        if match_index <= peer.match_index:
            return  # reordered or repeated: nothing new, and no new send (or sends would multiply)
        peer.match_index = match_index
        peer.next_index = max(peer.next_index, match_index + 1)
        self._advance_commit()
        if peer.next_index <= self.last_index:
            self._send_append(peer_id)

    def _send_append(self, peer_id: int) -> None:
        peer = self._progress[peer_id]
        if peer.next_index <= self.snapshot_index:
            self._out.append(Send(peer_id, InstallSnapshot(self.term, self.node_id, self._snapshot)))  # type: ignore[arg-type]
            return
        prev = peer.next_index - 1
        batch: list[Entry] = []
        size = 0
        k = peer.next_index - self.snapshot_index - 1
        for e in self._log[k:k + self.config.max_entries_per_append]:
            size += len(e.payload)
            if batch and size > self.config.max_append_bytes:
                break
            batch.append(e)
        self._out.append(Send(peer_id, AppendEntries(self.term, self.node_id, prev, self.term_at(prev),  # type: ignore[arg-type]
                                                     tuple(batch), self.commit_index)))

    # --- the log

    def _append(self, *entries: Entry) -> None:
        first = entries[0].index
        invariant(first > self.commit_index, f"truncating at {first} would lose committed entries "
                                             f"(commit index {self.commit_index})")
        invariant(self.snapshot_index < first <= self.last_index + 1, f"append at {first} leaves a gap")
        prev_term = self.term_at(first - 1) or 0
        for i, e in enumerate(entries):
            invariant(e.index == first + i and prev_term <= e.term <= self.term,
                      f"entry {e.index} at position {i} after {first - 1} has term {e.term} outside "
                      f"[{prev_term}, {self.term}]")
            prev_term = e.term
        del self._log[first - self.snapshot_index - 1:]
        self._log.extend(entries)
        self._out.append(PersistEntries(first, tuple(entries)))

    def _advance_commit(self) -> None:
        """Commit the highest entry of the current term held by a quorum (Raft §5.4.2)."""
        for n in range(self.last_index, self.commit_index, -1):
            if self.term_at(n) != self.term:
                return  # entries of earlier terms are never committed by counting replicas
            if 1 + sum(1 for p in self._progress.values() if p.match_index >= n) >= self.quorum:
                self.commit_index = n
                return

    def _apply_committed(self) -> None:
        while self.applied_index < self.commit_index:
            self.applied_index += 1
            self._out.append(Apply(self.entry(self.applied_index)))  # type: ignore[arg-type]

    # --- client and host events

    def _on_propose(self, payloads: tuple[bytes, ...]) -> None:
        for payload in payloads:  # all checked before anything changes: the whole group is refused
            if len(payload) > self.config.max_entry_bytes:
                raise EntryTooLargeError(f"proposal of {len(payload)} bytes exceeds max_entry_bytes "
                                         f"{self.config.max_entry_bytes}")
        if self.role != Role.LEADER:
            self._out.extend(ProposalRefused(self.term, self.leader_id) for _ in payloads)
            return
        if not payloads:
            return
        first = self.last_index + 1
        entries = [Entry(first + i, self.term, EntryKind.COMMAND, bytes(p)) for i, p in enumerate(payloads)]
        self._append(*entries)  # one PersistEntries for the group
        self._out.extend(Proposed(e.term, e.index) for e in entries)
        self._advance_commit()  # a single voter commits at once
        for p in self.peers:
            if self._progress[p].next_index == first:  # a lagging peer is already being fed
                self._send_append(p)

    def _on_compact(self, s: Snapshot) -> None:
        if s.last_index <= self.snapshot_index:
            return  # already compacted further (a repeated request is harmless)
        invariant(s.last_index <= self.applied_index, f"snapshot at {s.last_index} is beyond the "
                                                      f"applied index {self.applied_index}")
        invariant(self.term_at(s.last_index) == s.last_term, f"snapshot term {s.last_term} differs "
                                                            f"from the log's at {s.last_index}")
        self._log = self._log[s.last_index - self.snapshot_index:]
        self._set_snapshot(s)
        self._out.append(PersistSnapshot(s, keep_log_after=True))

    def _set_snapshot(self, s: Snapshot | None) -> None:
        self._snapshot = s
        self._snap_index, self._snap_term = (s.last_index, s.last_term) if s else (0, 0)

    # --- invariants

    def _check(self) -> None:
        broken = self._broken_invariant()
        invariant(broken is None, f"voter {self.node_id} in term {self.term}: {broken}")
        self._commit_floor = self.commit_index

    def _broken_invariant(self) -> str | None:
        """The first invariant of the module docstring that does not hold (the cheap ones, every step)."""
        log, snap_index = self._log, self._snap_index
        if not snap_index <= self.applied_index <= self.commit_index <= self.last_index:
            return (f"snapshot {snap_index} <= applied {self.applied_index} <= commit {self.commit_index} "
                    f"<= last {self.last_index} does not hold")
        if self.commit_index < self._commit_floor:
            return f"commit index went back from {self._commit_floor} to {self.commit_index}"
        if log and (log[0].index != snap_index + 1 or log[-1].index != snap_index + len(log)):
            return f"log indexes {log[0].index}..{log[-1].index} are not contiguous after snapshot {snap_index}"
        if log and (log[0].term < self._snap_term or log[-1].term > self.term):
            return f"log terms {log[0].term}..{log[-1].term} not in [snapshot term, current term]"
        if self.role == Role.LEADER:
            if self.leader_id != self.node_id or self.voted_for != self.node_id:
                return "a leader must lead and have voted for itself"
            for p, pr in self._progress.items():
                if not pr.match_index < pr.next_index <= self.last_index + 1:
                    return f"peer {p} has match {pr.match_index}, next {pr.next_index}"
        elif self.role == Role.CANDIDATE and self.voted_for != self.node_id:
            return "a candidate must have voted for itself"
        return None
