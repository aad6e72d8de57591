"""The controller lease (ingest_api/raft/lease.py) under the Raft simulation, with pauses.

Each voter of tests/sim/raft_sim.py's cluster gets a `LeaderLease` driven as QuorumHost drives it:
observed at every step, renewed by AppendEntries / InstallSnapshot responses of its term, and a
pause (the voter neither ticks nor receives; messages to it wait, as in its sockets) steps the core
down through `StepDown` when the voter resumes. The clock is the simulation's tick (1 tick = 1 ms);
the election timeout is 10 ticks, the lease 5 and the pause threshold 10 (the host: T, at least 2 s);
acknowledgements count from their send time, as the host reads it from the signed timestamp.

Checked at every tick: at most one running voter holds a valid lease (the property the controller
relies on to answer without a commit: no two controllers at once), and a voter that resumed from
a pause holds none before a quorum has answered it again. Seeds: `LAKELOG_LEASE_SEEDS` (default 300).
"""

from __future__ import annotations

import os
import random

import pytest

from lakelog.ingest_api.raft.messages import (
    AppendEntriesResponse,
    InstallSnapshotResponse,
    RaftConfig,
    Receive,
    Role,
    StepDown,
)
from lakelog.ingest_api.raft.lease import ClockGap, LeaderLease
from tests.sim.raft_sim import Cluster, Faults, SafetyViolation

ELECTION_TICKS = 10
LEASE_TICKS = ELECTION_TICKS // 2
SEEDS = int(os.environ.get("LAKELOG_LEASE_SEEDS", "300"))


class LeasedCluster(Cluster):
    """The simulated cluster, each voter with the lease its host would keep, and pauses."""

    def __init__(self, seed: int, voters: int, **kw) -> None:
        self.leases: dict[int, LeaderLease] = {}
        self.paused: dict[int, int] = {}  # voter -> tick it resumes at
        self.step_downs = 0
        #: A voter that gets only answers to its own requests (its successor's messages lost or not
        #: yet retried): after a pause, the worst case, stale acknowledgements alone.
        self.hears_only_answers: int | None = None
        self.sent_at: dict[int, int] = {}  # id(message) -> tick it was sent (the signed send time)
        super().__init__(seed, voters, **kw)

    def restart(self, i: int) -> None:
        super().restart(i)
        self.paused.pop(i, None)
        self.leases[i] = LeaderLease(i, self.ids, LEASE_TICKS, ELECTION_TICKS, self.time)

    def step(self, i: int, event) -> None:
        n, lease = self.nodes[i], self.leases.get(i)
        if n.core is None or lease is None:
            return super().step(i, event)
        lease.observe(self.time)
        if lease.take_step_down():
            self.step_downs += 1
            super().step(i, StepDown())
        if isinstance(event, Receive) and isinstance(event.message, (AppendEntriesResponse, InstallSnapshotResponse)):
            lease.acknowledged(event.message.sender, event.message.term,
                               self.sent_at.get(id(event.message), self.time))
        super().step(i, event)
        core = self.nodes[i].core
        if core is not None:  # the host's role-change callback
            if core.role == Role.LEADER and (not lease.leading or lease.term != core.term):
                lease.became_leader(core.term, self.time)
            elif core.role != Role.LEADER and lease.leading:
                lease.stepped_down()

    def _send(self, src: int, dst: int, m) -> None:
        self.sent_at[id(m)] = self.time
        super()._send(src, dst, m)

    def _deliver(self, src: int, dst: int, wire) -> None:
        if dst == self.hears_only_answers and not isinstance(self._decode(wire), (AppendEntriesResponse,
                                                                                   InstallSnapshotResponse)):
            return
        if dst in self.paused:  # waits in the paused voter's socket
            self._push(self.paused[dst], src, dst, wire)
            return
        super()._deliver(src, dst, wire)

    def pause(self, i: int, ticks: int) -> None:
        self.paused[i] = self.time + ticks

    def tick_all(self) -> None:
        for i in [i for i, until in self.paused.items() if until <= self.time + 1]:
            del self.paused[i]
        self.tick([i for i in self.ids if i not in self.paused])

    def lease_holders(self) -> list[int]:
        return [i for i in self.ids if self.nodes[i].core is not None and i not in self.paused
                and self.leases[i].valid(self.time)]


def run_leased(seed: int, chaos_ticks: int = 300) -> LeasedCluster:
    rng = random.Random(seed)
    voters = 5 if seed % 2 else 3
    faults = Faults(drop=rng.choice([0.0, 0.05, 0.2]), duplicate=rng.choice([0.0, 0.1]),
                    max_delay=rng.choice([1, 2, 4, 8]), crash=rng.choice([0.0, 0.005]),
                    restart=0.1, partition=rng.choice([0.0, 0.02]), heal=0.1, propose=0.3)
    config = RaftConfig(election_timeout_ticks=ELECTION_TICKS, heartbeat_interval_ticks=rng.choice([1, 2]),
                        pre_vote=True, check_quorum=True)
    c = LeasedCluster(seed, voters, config=config, faults=faults, json_wire=False)
    try:
        for _ in range(chaos_ticks):
            if rng.random() < 0.03:
                leader = c.leader()
                target = leader.id if leader is not None and rng.random() < 0.8 else rng.choice(c.ids)
                if c.nodes[target].core is not None and target not in c.paused:
                    c.pause(target, rng.choice([3, LEASE_TICKS + 1, ELECTION_TICKS, 3 * ELECTION_TICKS]))
            c.tick_all()
            holders = c.lease_holders()
            if len(holders) > 1:
                raise SafetyViolation(f"seed {seed} tick {c.time}: voters {holders} all hold a lease "
                                      f"(terms {[c.nodes[i].core.term for i in holders]})")
    finally:
        c.close()
    return c


@pytest.mark.parametrize("chunk", range(4))
def test_at_most_one_voter_holds_a_lease_through_pauses_crashes_and_partitions(chunk):
    step_downs = 0
    for seed in range(chunk, SEEDS, 4):
        step_downs += run_leased(seed).step_downs
    assert step_downs > 0  # pauses of a leader did happen, and ended its leadership


def test_a_resumed_leader_holds_no_lease_and_answers_to_its_successor():
    """The measured bug: the active controller paused past the session timeout resumes as leader."""
    config = RaftConfig(election_timeout_ticks=ELECTION_TICKS, heartbeat_interval_ticks=1, pre_vote=True,
                        check_quorum=True)
    c = LeasedCluster(7, 3, config=config, faults=Faults(max_delay=1), json_wire=False)
    try:
        for _ in range(100):
            c.tick_all()
            if c.leader() is not None and c.lease_holders():
                break
        old = c.leader().id
        assert c.lease_holders() == [old]
        c.hears_only_answers = old
        c.pause(old, 4 * ELECTION_TICKS)
        for _ in range(4 * ELECTION_TICKS - 1):
            c.tick_all()
        successor = [i for i in c.ids if i != old and c.nodes[i].core.role == Role.LEADER]
        assert len(successor) == 1 and c.lease_holders() == successor
        term = c.nodes[successor[0]].core.term
        # Resumed: its clock jumped, so it steps down before it acts on anything, stale
        # acknowledgements waiting in its sockets included.
        c.tick_all()
        assert c.lease_holders() == successor  # the resume tick: the stale answers were delivered
        c.tick_all()
        assert c.nodes[old].core.role != Role.LEADER and not c.leases[old].valid(c.time)
        assert c.lease_holders() == successor
        c.hears_only_answers = None
        for _ in range(5):
            c.tick_all()
        assert c.leader() is not None and c.leader().id == successor[0] and c.nodes[old].core.term == term
    finally:
        c.close()


def test_clock_gap_and_lease_rules():
    gap = ClockGap(100, now_ms=0)
    assert not gap.observe(50) and not gap.observe(150) and gap.observe(400) and gap.last_gap_at == 400
    lease = LeaderLease(1, {1, 2, 3}, lease_ms=500, max_gap_ms=100, now_ms=0)
    assert not lease.valid(10)
    lease.became_leader(4, 20)
    assert not lease.valid(30)  # no quorum has answered yet
    lease.acknowledged(2, 3, 40)  # an older term's answer vouches for nothing
    assert not lease.valid(50)
    lease.acknowledged(2, 4, 60)
    assert lease.valid(70) and lease.valid(150) and not lease.take_step_down()
    for t in (250, 350, 450, 550):
        lease.observe(t)  # the host's ticks
    assert not lease.valid(640)  # expired: the freshest quorum answer is 580 ms old
    lease.acknowledged(3, 4, 700)
    assert lease.valid(720)
    assert not lease.valid(970) and lease.take_step_down() and not lease.take_step_down()  # a 250 ms jump
    lease.acknowledged(2, 4, 980)  # waited in a socket during the pause: the leadership is over
    assert not lease.valid(990)
    solo = LeaderLease(1, {1}, lease_ms=500, max_gap_ms=100, now_ms=0)
    solo.became_leader(1, 0)
    assert solo.valid(5000) and not solo.take_step_down()  # a lone voter has no successor
