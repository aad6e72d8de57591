"""A deterministic discrete-event simulation of a Raft controller quorum, with a safety checker.

Everything random comes from one `random.Random(seed)`: message drops, delays (hence reordering),
duplicates, network partitions, crashes and restarts (also in the middle of a step's effects, e.g.
after a vote is persisted but before the response is sent), client proposals and every voter's
election timeouts. Time is a virtual tick counter. A crash throws away the core, the state machine
and every undelivered message to the voter; a restart rebuilds them from durable state only
(`MemoryStorage`, which keeps exactly what Persist* effects wrote, or the real `RaftStorage`).

Group commit (core.py, "Group commit"): in half the random runs (`group_commit`, decided by its own
RNG so the other runs replay as before) a voter queues its events and steps a group of them at once
(up to a random size, and at the end of every tick), then executes the group's effects with every
Persist* first; a crash mid-step cuts that reordered list. Clients also propose several payloads in
one `ProposeMany` (always, not only in group runs).

Messages cross the network as JSON (`message_to_dict` -> json -> `message_from_dict`) in a quarter of
the random runs and every disk-backed one; the others hand over the immutable message objects.

`Checker` is told about every step (once the step's writes are durable) and every effect, and
raises `SafetyViolation` as soon as one of these stops holding:
  * election safety: at most one voter is leader in a term (over the whole run, not just at once);
  * log matching: an (index, term) pair names one entry, and that entry's predecessor term, on
    every voter (so by induction logs that agree on (index, term) agree on the whole prefix); a
    full pairwise comparison of the logs runs periodically and at the end;
  * leader completeness: an entry committed in term T (the term of the leader that first committed
    it) is in the log of every leader of a term above T when it takes office, and no entry of term
    T or later is ever written at its index unless it is that entry (a stale leader of an older
    term may still write there, in its own log; that never commits);
  * state-machine safety: no two voters apply different entries at an index; every voter applies
    indexes in order, once; snapshots at an index are identical; the final state of every voter
    equals a replay of the applied entries;
  * liveness, after the chaos: with the network healed and every voter up, a leader is elected,
    a new proposal commits, and every voter applies every entry a client was told was committed.

Run one seed with a trace:  python -m tests.sim.raft_sim --seed 17 --voters 5 --chaos-ticks 60
"""

from __future__ import annotations

import argparse
import collections
import heapq
import json
import random
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from lakelog.ingest_api.raft.core import RaftCore
from lakelog.ingest_api.raft.messages import (
    Apply,
    CompactLog,
    DurableState,
    Entry,
    Message,
    PersistEntries,
    PersistSnapshot,
    PersistState,
    Propose,
    ProposeMany,
    ProposalRefused,
    Proposed,
    RaftConfig,
    Receive,
    RestoreSnapshot,
    Role,
    Send,
    Snapshot,
    Tick,
    message_from_dict,
    message_to_dict,
)
from lakelog.ingest_api.raft.state_machine import KeyValueStateMachine
from lakelog.ingest_api.raft.storage import RaftStorage


PERSIST_EFFECTS = (PersistState, PersistEntries, PersistSnapshot)


class SafetyViolation(AssertionError):
    """A Raft safety or liveness property did not hold in a simulated run."""


# ---------------------------------------------------------------------------------------------
# Durable state kept in memory: exactly what the Persist* effects wrote, nothing else.

class MemoryStorage:
    def __init__(self) -> None:
        self.term = 0
        self.voted_for = -1
        self.snapshot: Snapshot | None = None
        self.entries: list[Entry] = []

    def persist(self, effect) -> None:
        if isinstance(effect, PersistState):
            self.term, self.voted_for = effect.term, effect.voted_for
        elif isinstance(effect, PersistEntries):
            base = self.snapshot.last_index if self.snapshot else 0
            del self.entries[effect.first_index - base - 1:]
            self.entries.extend(effect.entries)
        elif isinstance(effect, PersistSnapshot):
            s = effect.snapshot
            self.entries = [e for e in self.entries if e.index > s.last_index] if effect.keep_log_after else []
            self.snapshot = s

    def load(self) -> DurableState:
        return DurableState(self.term, self.voted_for, self.snapshot, tuple(self.entries))

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# Faults

@dataclass(frozen=True)
class Faults:
    drop: float = 0.0  # per message
    duplicate: float = 0.0  # per message
    min_delay: int = 1  # ticks
    max_delay: int = 1
    crash: float = 0.0  # per live voter per tick
    restart: float = 0.0  # per down voter per tick
    crash_mid_step: float = 0.0  # per step: crash after a random prefix of its effects
    partition: float = 0.0  # per tick: split the voters in two groups
    heal: float = 0.0  # per tick
    propose: float = 0.0  # per tick: a client proposes (mostly to a voter that thinks it leads)
    propose_many: float = 0.0  # per proposal: it carries 2..6 payloads (one ProposeMany)
    compact_every: int = 0  # a voter snapshots after this many applied entries (0: never)

    @classmethod
    def random(cls, rng: random.Random) -> Faults:
        return cls(drop=rng.choice([0.0, 0.02, 0.1, 0.3]), duplicate=rng.choice([0.0, 0.05, 0.2]),
                   max_delay=rng.choice([1, 2, 4, 8]), crash=rng.choice([0.0, 0.005, 0.02]),
                   restart=rng.choice([0.05, 0.2]), crash_mid_step=rng.choice([0.0, 0.01, 0.05]),
                   partition=rng.choice([0.0, 0.01, 0.05]), heal=rng.choice([0.02, 0.1]),
                   propose=rng.choice([0.1, 0.4, 1.0]), compact_every=rng.choice([0, 3, 10]))

    def with_batches(self, rng: random.Random) -> Faults:
        return replace(self, propose_many=rng.choice([0.0, 0.3, 1.0]))


CALM = Faults(max_delay=3)


def random_config(rng: random.Random) -> RaftConfig:
    return RaftConfig(election_timeout_ticks=10, heartbeat_interval_ticks=rng.choice([1, 2, 3]),
                      max_entries_per_append=rng.choice([1, 3, 64]), pre_vote=rng.random() < 0.8,
                      check_quorum=rng.random() < 0.8)


# ---------------------------------------------------------------------------------------------
# The checker

class Checker:
    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # term -> voter
        self.entry_of: dict[tuple[int, int], tuple] = {}  # (index, term) -> (kind, payload, prev term)
        self.committed: dict[int, Entry] = {}
        self.commit_term: dict[int, int] = {}  # index -> term of the leader that committed it first
        self.applied: dict[int, Entry] = {}
        self.snapshots: dict[int, bytes] = {}
        self.acked: dict[int, bytes] = {}  # index -> payload a client was told is committed

    def fail(self, message: str) -> None:
        raise SafetyViolation(message)

    def after_step(self, node: SimNode) -> None:
        core = node.core
        if core.role == Role.LEADER:
            holder = self.leaders.setdefault(core.term, core.node_id)
            if holder != core.node_id:
                self.fail(f"election safety: voters {holder} and {core.node_id} both lead term {core.term}")
            if not node.checked_leadership:
                node.checked_leadership = True
                for idx, e in self.committed.items():
                    if self.commit_term[idx] < core.term and idx > core.snapshot_index and core.entry(idx) != e:
                        self.fail(f"leader completeness: leader {core.node_id} of term {core.term} has "
                                  f"{core.entry(idx)} at {idx}, committed was {e}")
        else:
            node.checked_leadership = False
        for idx in range(max(node.seen_commit, core.snapshot_index) + 1, core.commit_index + 1):
            self._committed(core.node_id, core.entry(idx), core.term)
        node.seen_commit = max(node.seen_commit, core.commit_index)

    def _committed(self, node_id: int, e: Entry, term: int) -> None:
        # The leader sees a commit first (followers learn it from it), so the smallest term seen is
        # the committing leader's.
        known = self.committed.setdefault(e.index, e)
        if known != e:
            self.fail(f"voter {node_id} committed {e}, another committed {known}")
        self.commit_term[e.index] = min(term, self.commit_term.get(e.index, term))

    def leader_seen(self, node_id: int, term: int) -> None:
        holder = self.leaders.setdefault(term, node_id)
        if holder != node_id:
            self.fail(f"election safety: voters {holder} and {node_id} both lead term {term}")

    def on_entries(self, node: SimNode, effect: PersistEntries, prev_term: int | None) -> None:
        """`prev_term`: the durable log's term at first_index - 1 (the core may have moved on in a group)."""
        core = node.core
        for e in effect.entries:
            key = (e.index, e.term)
            desc = (e.kind, e.payload, prev_term)
            prev_term = e.term
            known = self.entry_of.setdefault(key, desc)
            if known != desc:
                self.fail(f"log matching: voter {core.node_id} holds {e} after term {desc[2]}, another "
                          f"holds (kind, payload, prev term) {known} at the same index and term")
            # An entry of the commit term or later was made by a leader that had to hold the
            # committed entry at that index.
            c = self.committed.get(e.index)
            if c is not None and c != e and e.term >= self.commit_term[e.index]:
                self.fail(f"leader completeness: voter {core.node_id} wrote {e} where {c} is committed")

    def on_apply(self, node: SimNode, e: Entry) -> None:
        if e.index != node.applied + 1:
            self.fail(f"voter {node.id} applied {e.index} after {node.applied}")
        node.applied = e.index
        known = self.applied.setdefault(e.index, e)
        if known != e:
            self.fail(f"state-machine safety: voter {node.id} applied {e}, another applied {known}")
        self._committed(node.id, e, node.core.term)

    def on_snapshot(self, node_id: int, s: Snapshot) -> None:
        known = self.snapshots.setdefault(s.last_index, s.data)
        if known != s.data:
            self.fail(f"voter {node_id} snapshot at {s.last_index} differs from another's")
        c = self.committed.get(s.last_index)
        if c is not None and c.term != s.last_term:
            self.fail(f"voter {node_id} snapshot at {s.last_index} has term {s.last_term}, committed {c.term}")

    def check_logs(self, nodes: list[SimNode]) -> None:
        """Log matching over every pair of live voters: agree at (index, term) -> agree before it."""
        cores = [n.core for n in nodes if n.core is not None]
        for i, a in enumerate(cores):
            for b in cores[i + 1:]:
                lo = max(a.snapshot_index, b.snapshot_index) + 1
                top = min(a.last_index, b.last_index)
                while top >= lo and a.term_at(top) != b.term_at(top):
                    top -= 1
                for idx in range(lo, top + 1):
                    if a.entry(idx) != b.entry(idx):
                        self.fail(f"log matching: voters {a.node_id} and {b.node_id} agree at {top} "
                                  f"but differ at {idx}: {a.entry(idx)} vs {b.entry(idx)}")

    def check_final_states(self, nodes: list[SimNode]) -> None:
        for n in nodes:
            replay = KeyValueStateMachine()
            for idx in range(1, n.applied + 1):
                if idx not in self.applied:
                    self.fail(f"voter {n.id} applied up to {n.applied} but nobody applied {idx}")
                replay.apply(self.applied[idx])
            if replay.data != n.sm.data:
                self.fail(f"voter {n.id} state differs from a replay of entries 1..{n.applied}")
        for idx, payload in self.acked.items():
            if self.applied[idx].payload != payload:
                self.fail(f"acknowledged proposal at {idx} was replaced by {self.applied[idx]}")


# ---------------------------------------------------------------------------------------------
# Voters and the cluster

@dataclass(eq=False)
class SimNode:
    id: int
    storage: object
    core: RaftCore | None = None
    sm: KeyValueStateMachine = field(default_factory=KeyValueStateMachine)
    applied: int = 0
    seen_commit: int = 0
    checked_leadership: bool = False
    pending: dict[int, tuple[int, bytes]] = field(default_factory=dict)  # index -> (term, payload)
    proposing: collections.deque = field(default_factory=collections.deque)  # payloads awaiting an outcome
    queued: list = field(default_factory=list)  # group commit: events not stepped yet
    group_written: dict = field(default_factory=dict)  # index -> term of a group's entries not yet on storage


class Cluster:
    def __init__(self, seed: int, voters: int = 3, *, config: RaftConfig | None = None,
                 faults: Faults | None = None, disk: bool = False,
                 core_factory: Callable[..., RaftCore] = RaftCore, send_before_persist: bool = False,
                 json_wire: bool = True, group_commit: bool | None = None) -> None:
        """`faults=None` is manual mode: nothing happens unless a test calls tick / deliver / crash.

        `json_wire=False` hands the (immutable) message objects over instead of their JSON, for speed.
        `group_commit` (None: half the random runs, never in manual mode) steps queued events in groups.
        """
        self.seed = seed
        self.rng = random.Random(seed)
        self.config = config or random_config(self.rng)
        self.faults = faults
        self.manual = faults is None
        self.core_factory = core_factory
        self.send_before_persist = send_before_persist  # a deliberately broken host, for tests
        self.json_wire = json_wire
        if group_commit is None:  # its own RNG: a run without group commit replays as before
            group_commit = faults is not None and random.Random(seed * 7919 + 1).random() < 0.5
        self.group_commit = group_commit
        self._group_rng = random.Random(seed * 104729 + 3)
        self.ids = list(range(1, voters + 1))
        self.time = 0
        self.checker = Checker()
        self.trace: collections.deque = collections.deque(maxlen=400)
        self._queue: list = []  # (deliver at, tie-break, seq, src, dst, message dict)
        self._seq = 0
        self._groups: dict[int, int] = {i: 0 for i in self.ids}
        self._proposals = 0
        self._crash_plans: dict[int, Callable[[object], bool]] = {}
        self._tmp = Path(tempfile.mkdtemp(prefix="raft-sim-")) if disk else None
        self.nodes = {i: SimNode(i, self._open_storage(i)) for i in self.ids}
        for i in self.ids:
            self.restart(i)

    # --- voters

    def _open_storage(self, i: int):
        if self._tmp is None:
            return MemoryStorage()
        return RaftStorage(self._tmp / f"voter-{i}", i, fsync=False)

    def close(self) -> None:
        for n in self.nodes.values():
            n.storage.close()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    def live(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.core is not None]

    def crash(self, i: int) -> None:
        n = self.nodes[i]
        self.trace.append((self.time, i, "CRASH", None))
        n.core = None
        n.pending.clear()
        n.proposing.clear()
        n.queued.clear()
        n.storage.close()

    def restart(self, i: int) -> None:
        n = self.nodes[i]
        if self._tmp is not None:
            n.storage.close()
            n.storage = self._open_storage(i)  # runs recovery
        durable = n.storage.load()
        n.core = self.core_factory(i, self.ids, self.config, random.Random(self.rng.random()), durable)
        n.sm = KeyValueStateMachine()
        if durable.snapshot is not None:
            n.sm.restore(durable.snapshot.data)
            self.checker.on_snapshot(i, durable.snapshot)
        n.applied = n.seen_commit = n.core.snapshot_index
        n.checked_leadership = False
        self.trace.append((self.time, i, "RESTART", durable.term))

    def step(self, i: int, event) -> None:
        n = self.nodes[i]
        if n.core is None:
            return
        if self.group_commit and not isinstance(event, CompactLog):
            n.queued.append(event)
            if len(n.queued) >= self._group_rng.randint(1, 8):
                self.flush(i)
            return
        self._step_group(i, [event])

    def flush(self, i: int) -> None:
        """Group commit: step the voter's queued events as one group."""
        n = self.nodes[i]
        events, n.queued = n.queued, []
        if events and n.core is not None:
            self._step_group(i, events)

    def _step_group(self, i: int, events: list) -> None:
        n = self.nodes[i]
        effects: list = []
        leader_terms = []
        for event in events:
            if isinstance(event, Propose):
                n.proposing.append(event.payload)
            elif isinstance(event, ProposeMany):
                n.proposing.extend(event.payloads)
            out = n.core.step(event)
            if n.core.role == Role.LEADER:
                leader_terms.append(n.core.term)
            if out:  # only timers moved otherwise: every other change of role, term, log or commit has an effect
                self.trace.append((self.time, i, event, out))
                effects.extend(out)
        if not effects:
            return
        # Every persist of the group first, in order (a single step's list is already in that order).
        effects = ([e for e in effects if isinstance(e, PERSIST_EFFECTS)]
                   + [e for e in effects if not isinstance(e, PERSIST_EFFECTS)])
        if self.send_before_persist:
            effects = [e for e in effects if isinstance(e, Send)] + [e for e in effects if not isinstance(e, Send)]
        cut = len(effects)  # crash after this many effects
        if self.faults and self.rng.random() < self.faults.crash_mid_step:
            cut = self.rng.randrange(len(effects))
        planned = self._crash_plans.get(i)
        hit = next((k + 1 for k, e in enumerate(effects) if planned(e)), None) if planned else None
        if hit is not None:
            del self._crash_plans[i]
            cut = min(cut, hit)
        done = effects[:cut]
        n.group_written.clear()
        if len(events) > 1 and hasattr(n.storage, "persist_many"):
            # The real storage's group write (one fsync for a run of entries), as the host does it.
            persists = [e for e in done if isinstance(e, PERSIST_EFFECTS)]
            if not self.send_before_persist and persists == done[:len(persists)]:
                for e in persists:
                    self._check_persist(n, e)
                n.storage.persist_many(persists)
                done = done[len(persists):]
        for e in done:
            self._execute(n, e)
        # What the core did becomes real once its writes are durable (a commit before that is only
        # an intention, lost in a crash): then check it.
        if not any(isinstance(e, PERSIST_EFFECTS) for e in effects[cut:]):
            for term in leader_terms:  # a leadership that began and ended inside the group too
                self.checker.leader_seen(i, term)
            self.checker.after_step(n)
        if cut < len(effects) or hit is not None:
            self.crash(i)
            return
        fc = self.faults.compact_every if self.faults else 0
        if fc and n.applied - n.core.snapshot_index >= fc:
            self.step(i, CompactLog(Snapshot(n.applied, n.core.term_at(n.applied), n.sm.snapshot())))

    def _check_persist(self, n: SimNode, e) -> None:
        if isinstance(e, PersistEntries):
            # Entries of a group's earlier effects count: the durable log is checked as written.
            prev = (_durable_term_at(n.storage, e.first_index - 1) if not n.group_written
                    else n.group_written.get(e.first_index - 1, _durable_term_at(n.storage, e.first_index - 1)))
            self.checker.on_entries(n, e, prev)
            for k in [k for k in n.group_written if k >= e.first_index]:
                del n.group_written[k]
            n.group_written.update((x.index, x.term) for x in e.entries)
        elif isinstance(e, PersistSnapshot):
            self.checker.on_snapshot(n.id, e.snapshot)
            n.group_written.clear()
            n.group_written[e.snapshot.last_index] = e.snapshot.last_term

    def _execute(self, n: SimNode, e) -> None:
        if isinstance(e, Send):
            self._send(n.id, e.to, e.message)
        elif isinstance(e, PERSIST_EFFECTS):
            n.group_written.clear()
            self._check_persist(n, e)
            n.group_written.clear()
            n.storage.persist(e)
        elif isinstance(e, Apply):
            self.checker.on_apply(n, e.entry)
            n.sm.apply(e.entry)
            mine = n.pending.pop(e.entry.index, None)
            if mine is not None and mine == (e.entry.term, e.entry.payload):
                self.checker.acked[e.entry.index] = e.entry.payload  # the client hears "committed"
        elif isinstance(e, RestoreSnapshot):
            n.sm.restore(e.snapshot.data)
            n.applied = e.snapshot.last_index
            n.pending = {k: v for k, v in n.pending.items() if k > n.applied}
        elif isinstance(e, Proposed):
            n.pending[e.index] = (e.term, n.proposing.popleft())
        elif isinstance(e, ProposalRefused):
            n.proposing.popleft()

    def crash_after(self, i: int, effect_matches: Callable[[object], bool]) -> None:
        """Crash voter `i` right after it carries out the next effect matching `effect_matches`."""
        self._crash_plans[i] = effect_matches

    def propose(self, i: int, payload: bytes | None = None) -> None:
        self.step(i, Propose(payload or self._next_payload()))

    def propose_many(self, i: int, count: int) -> None:
        self.step(i, ProposeMany(tuple(self._next_payload() for _ in range(count))))

    def _next_payload(self) -> bytes:
        self._proposals += 1
        return KeyValueStateMachine.put(f"k{self._proposals % 7}", f"v{self._proposals}")

    # --- the network

    def _send(self, src: int, dst: int, m: Message) -> None:
        wire = json.dumps(message_to_dict(m)) if self.json_wire else m
        f = self.faults
        if self.manual:
            self._push(0, src, dst, wire)
            return
        if self.rng.random() < f.drop:
            return
        for _ in range(2 if self.rng.random() < f.duplicate else 1):
            self._push(self.time + self.rng.randint(f.min_delay, f.max_delay), src, dst, wire)

    def _push(self, at: int, src: int, dst: int, wire: str) -> None:
        self._seq += 1
        tie = self._seq if self.manual else self.rng.random()
        heapq.heappush(self._queue, (at, tie, self._seq, src, dst, wire))

    def _deliver(self, src: int, dst: int, wire: str) -> None:
        if self.nodes[dst].core is None or self._groups[src] != self._groups[dst]:
            return
        self.step(dst, Receive(self._decode(wire)))

    def _decode(self, wire) -> Message:
        return message_from_dict(json.loads(wire)) if self.json_wire else wire

    def deliver(self, where: Callable[[int, int, Message], bool] = lambda s, d, m: True,
                *, limit: int = 10_000) -> int:
        """Manual mode: deliver queued messages matching `where` (in send order), until none is left."""
        count = 0
        while count < limit:
            keep, hit = [], None
            while self._queue:
                item = heapq.heappop(self._queue)
                if hit is None and where(item[3], item[4], self._decode(item[5])):
                    hit = item
                else:
                    keep.append(item)
            for item in keep:
                heapq.heappush(self._queue, item)
            if hit is None:
                return count
            count += 1
            self._deliver(hit[3], hit[4], hit[5])
        raise SafetyViolation(f"deliver did not settle after {limit} messages")

    def drop(self, where: Callable[[int, int, Message], bool] = lambda s, d, m: True) -> None:
        self._queue = [q for q in self._queue if not where(q[3], q[4], self._decode(q[5]))]
        heapq.heapify(self._queue)

    def partition(self, *groups: list[int]) -> None:
        self._groups = {i: g for g, members in enumerate(groups) for i in members}
        for i in self.ids:
            self._groups.setdefault(i, len(groups) + i)  # not named: alone

    def heal(self) -> None:
        self._groups = {i: 0 for i in self.ids}

    # --- time

    def tick(self, ids: list[int] | None = None) -> None:
        """One tick: faults, a client, every (or the given) voter's clock, due messages."""
        self.time += 1
        f = self.faults
        if f is not None:
            self._random_faults(f)
        for i in self._shuffled(ids if ids is not None else self.ids):
            self.step(i, Tick())
        while self._queue and self._queue[0][0] <= self.time and not self.manual:
            _, _, _, src, dst, wire = heapq.heappop(self._queue)
            self._deliver(src, dst, wire)
        for i in self.ids:
            self.flush(i)
        if self.time % 10 == 0:
            self.checker.check_logs(self.live())

    def _shuffled(self, ids: list[int]) -> list[int]:
        if self.manual:
            return list(ids)
        ids = list(ids)
        self.rng.shuffle(ids)
        return ids

    def _random_faults(self, f: Faults) -> None:
        rng = self.rng
        for i in self.ids:
            if self.nodes[i].core is not None:
                if rng.random() < f.crash:
                    self.crash(i)
            elif rng.random() < f.restart:
                self.restart(i)
        if rng.random() < f.partition:
            side = {i: rng.randrange(2) for i in self.ids}
            self.partition([i for i in self.ids if side[i] == 0], [i for i in self.ids if side[i] == 1])
            self.trace.append((self.time, 0, "PARTITION", dict(self._groups)))
        elif rng.random() < f.heal:
            self.heal()
        if rng.random() < f.propose:
            live = self.live()
            if live:
                leaders = [n for n in live if n.core.role == Role.LEADER]
                target = rng.choice(leaders if leaders and rng.random() < 0.9 else live)
                if f.propose_many and self._group_rng.random() < f.propose_many:
                    self.propose_many(target.id, self._group_rng.randint(2, 6))
                else:
                    self.propose(target.id)

    def leader(self) -> SimNode | None:
        """The leader every live voter agrees on (same term, same leader), if any."""
        live = self.live()
        leaders = [n for n in live if n.core.role == Role.LEADER]
        if len(live) != len(self.ids) or len(leaders) != 1:
            return None
        ld = leaders[0].core
        if all(n.core.term == ld.term and n.core.leader_id == ld.node_id for n in live):
            return leaders[0]
        return None

    # --- a whole run

    def run(self, chaos_ticks: int, calm_stall_ticks: int = 200, calm_max_ticks: int = 5000) -> None:
        """Chaos, then calm: heal, restart everyone, stop the faults, and check that the cluster recovers.

        Recovery is: a leader every voter agrees on gets a probe proposal committed, and every voter
        applies it and every acknowledged entry. A backlog may take long to replicate, so the calm
        period fails when no voter's log or applied index grows for `calm_stall_ticks` (or after
        `calm_max_ticks`).
        """
        try:
            for _ in range(chaos_ticks):
                self.tick()
            self.faults = replace(CALM, compact_every=self.faults.compact_every)
            self.heal()
            for i in self.ids:
                if self.nodes[i].core is None:
                    self.restart(i)
            probe: tuple[int, int] | None = None  # (term, index) of the calm-period proposal
            best, progress_at, recovered = -1, self.time, False
            for _ in range(calm_max_ticks):
                self.tick()
                ld = self.leader()
                if ld is not None and (probe is None or probe[0] < ld.core.term and probe[1] not in self.checker.acked):
                    self.propose(ld.id, KeyValueStateMachine.put("probe", f"term {ld.core.term}"))
                    self.flush(ld.id)
                    if ld.core is not None:
                        probe = (ld.core.term, ld.core.last_index)
                low = min(n.applied for n in self.live())
                # Replicating a backlog of older terms commits nothing until the new term's no-op
                # arrives, so log growth counts as progress too.
                marker = sum(n.applied + n.core.last_index for n in self.live())
                if marker > best:
                    best, progress_at = marker, self.time
                recovered = probe is not None and probe[1] in self.checker.acked and low >= max(self.checker.acked)
                if recovered or self.time - progress_at > calm_stall_ticks:
                    break
            if not recovered:
                raise SafetyViolation(f"liveness: not recovered after {self.time - chaos_ticks} calm ticks, the "
                                      f"last {self.time - progress_at} without progress (probe {probe}, "
                                      f"applied {[n.applied for n in self.live()]})")
            self.checker.check_logs(self.live())
            self.checker.check_final_states(self.live())
        except SafetyViolation as e:
            raise SafetyViolation(f"seed {self.seed}: {e}\n{self.format_trace(60)}") from e
        except Exception as e:
            raise SafetyViolation(f"seed {self.seed}: {type(e).__name__}: {e}\n{self.format_trace(60)}") from e
        finally:
            self.close()

    def format_trace(self, last: int) -> str:
        lines = [f"config {self.config}", f"faults {self.faults}"]
        for t, i, ev, out in list(self.trace)[-last:]:
            lines.append(f"  t={t} voter {i}: {ev} -> {out}")
        return "\n".join(lines)


def _durable_term_at(storage, index: int) -> int | None:
    """The term at `index` of what a storage holds durably (0 at index 0), None if it holds none there."""
    if isinstance(storage, MemoryStorage):
        base = storage.snapshot.last_index if storage.snapshot else 0
        if index == base:
            return storage.snapshot.last_term if storage.snapshot else 0
        k = index - base - 1
        return storage.entries[k].term if 0 <= k < len(storage.entries) else None
    return storage._term_at(index)


def run_seed(seed: int, voters: int | None = None, *, chaos_ticks: int = 60, disk: bool = False) -> Cluster:
    """One random run; odd seeds use 5 voters, even ones 3, unless `voters` says."""
    rng = random.Random(seed ^ 0x5EED)
    voters = voters or (5 if seed % 2 else 3)
    cluster = Cluster(seed, voters, faults=Faults.random(rng).with_batches(random.Random(seed ^ 0xBA7C)), disk=disk,
                      json_wire=disk or seed % 4 == 0)  # JSON on a quarter of the runs: it costs a third
    try:
        cluster.run(chaos_ticks)
    except SafetyViolation as e:
        replay = f"python -m tests.sim.raft_sim --seed {seed} --voters {voters} --chaos-ticks {chaos_ticks}"
        raise SafetyViolation(f"{e}\nreplay: {replay}{' --disk' if disk else ''}") from None
    return cluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--voters", type=int)
    ap.add_argument("--chaos-ticks", type=int, default=60)
    ap.add_argument("--disk", action="store_true")
    args = ap.parse_args()
    c = run_seed(args.seed, args.voters, chaos_ticks=args.chaos_ticks, disk=args.disk)
    print(c.format_trace(200))
    print(f"seed {args.seed}: ok, {len(c.checker.committed)} entries committed, "
          f"leaders by term {c.checker.leaders}")


if __name__ == "__main__":
    main()
