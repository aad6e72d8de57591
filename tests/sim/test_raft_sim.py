"""Raft core under the deterministic simulation: thousands of random seeds, then one test per classic bug.

Random runs: `LAKELOG_RAFT_SEEDS` seeds (default 2000; odd seeds run 5 voters, even ones 3) starting
at `LAKELOG_RAFT_SEED_START` (default 0), each with `LAKELOG_RAFT_CHAOS_TICKS` ticks of faults
(default 60) before the calm period. A failure names its seed; replay it with
`python -m tests.sim.raft_sim --seed N --chaos-ticks 60`.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakelog.ingest_api.raft.core import RaftCore
from lakelog.ingest_api.raft.messages import (
    NO_NODE,
    AppendEntries,
    AppendEntriesResponse,
    Apply,
    DurableState,
    Entry,
    EntryKind,
    EntryTooLargeError,
    InstallSnapshot,
    InstallSnapshotResponse,
    MessageFormatError,
    PersistEntries,
    PersistState,
    Propose,
    ProposalRefused,
    RaftConfig,
    Receive,
    RequestVote,
    RequestVoteResponse,
    RestoreSnapshot,
    Role,
    Send,
    Snapshot,
    Tick,
    message_from_dict,
    message_to_dict,
)
from lakelog.ingest_api.raft.state_machine import KeyValueStateMachine, SnapshotFormatError
from tests.sim.raft_sim import Cluster, Faults, SafetyViolation, run_seed

SEEDS = int(os.environ.get("LAKELOG_RAFT_SEEDS", "2000"))
SEED_START = int(os.environ.get("LAKELOG_RAFT_SEED_START", "0"))
CHAOS_TICKS = int(os.environ.get("LAKELOG_RAFT_CHAOS_TICKS", "60"))
BATCH = 100


# ---------------------------------------------------------------------------------------------
# Random runs

@pytest.mark.parametrize("batch", range((SEEDS + BATCH - 1) // BATCH))
def test_random_runs_keep_raft_safe_and_live(batch):
    first = SEED_START + batch * BATCH
    for seed in range(first, min(first + BATCH, SEED_START + SEEDS)):
        run_seed(seed, chaos_ticks=CHAOS_TICKS)  # raises SafetyViolation naming the seed and the last steps


@pytest.mark.parametrize("seed", range(12))
def test_random_runs_on_real_storage(seed):
    """Crashes reopen `RaftStorage` directories (recovery included) instead of the in-memory store."""
    run_seed(10_000 + seed, chaos_ticks=60, disk=True)


def test_single_voter_runs():
    for seed in range(20):
        run_seed(20_000 + seed, voters=1, chaos_ticks=60)


def test_same_seed_same_run():
    a, b = run_seed(7, chaos_ticks=CHAOS_TICKS), run_seed(7, chaos_ticks=CHAOS_TICKS)
    assert a.checker.committed == b.checker.committed and a.checker.leaders == b.checker.leaders
    assert [t[:2] for t in a.trace] == [t[:2] for t in b.trace]


def test_a_host_that_sends_before_persisting_is_caught():
    """The simulation has teeth: a host that breaks the persist-then-send order fails a seed soon."""
    for seed in range(1000):
        try:
            run_seed_with(seed, send_before_persist=True)
        except SafetyViolation as e:
            assert str(e).startswith(f"seed {seed}: ")  # every report names its seed
            return
    pytest.fail("breaking the persist-before-send order went unnoticed for 1000 seeds")


@pytest.mark.parametrize("disk", [False, True])
def test_group_commit_runs_keep_raft_safe_and_live(disk):
    """Every voter steps its queued events in groups (persists of the group first, one `persist_many`
    on real storage) and clients propose several payloads at once (`ProposeMany`)."""
    for seed in range(30_000, 30_000 + (12 if disk else 300)):
        rng = random.Random(seed ^ 0x5EED)
        faults = replace(Faults.random(rng), propose_many=0.7)
        c = Cluster(seed, 5 if seed % 2 else 3, faults=faults, disk=disk, json_wire=disk, group_commit=True)
        c.run(CHAOS_TICKS)
        assert c.checker.acked  # clients were told of commits: the runs did something


def test_a_grouping_host_that_sends_before_persisting_is_caught():
    """The group mode has teeth too: sending a group's messages before its writes fails a seed soon."""
    for seed in range(1000):
        try:
            run_seed_with(seed, send_before_persist=True, group_commit=True)
        except SafetyViolation:
            return
    pytest.fail("a grouping host that sends before persisting went unnoticed for 1000 seeds")


def run_seed_with(seed, **kwargs):
    rng = random.Random(seed ^ 0x5EED)
    Cluster(seed, 5 if seed % 2 else 3, faults=Faults.random(rng), json_wire=False, **kwargs).run(100)


# ---------------------------------------------------------------------------------------------
# Manual scenarios: nothing happens unless the test ticks, delivers, drops or crashes.

MANUAL = RaftConfig(election_timeout_ticks=10, heartbeat_interval_ticks=2, pre_vote=False,
                    check_quorum=False, max_entries_per_append=1)


def campaign(c: Cluster, i: int) -> None:
    """Tick voter `i` alone until it starts an election in a new term."""
    core = c.nodes[i].core
    term = core.term
    while core.term == term or core.role != Role.CANDIDATE:
        c.tick([i])


def between(*pairs, kinds=None):
    want = {frozenset(p) for p in pairs}
    return lambda s, d, m: frozenset((s, d)) in want and (kinds is None or isinstance(m, kinds))


VOTES = (RequestVote, RequestVoteResponse)


def run_ticks(c: Cluster, n: int) -> None:
    for _ in range(n):
        c.tick()
        c.deliver()


def elect(c: Cluster, i: int) -> None:
    campaign(c, i)
    c.deliver()
    assert c.nodes[i].core.role == Role.LEADER


class CountsOldTerms(RaftCore):
    """The Figure 8 bug: commit whatever a majority holds, whatever its term."""

    def _advance_commit(self) -> None:
        for n in range(self.last_index, self.commit_index, -1):
            if 1 + sum(1 for p in self._progress.values() if p.match_index >= n) >= self.quorum:
                self.commit_index = n
                return


def figure_8(core_factory) -> Cluster:
    """Raft paper, Figure 8, with our no-op entries (terms shifted: entry (2, 1) plays (2, 2))."""
    c = Cluster(8, 5, config=MANUAL, core_factory=core_factory)
    elect(c, 1)  # (a) S1 leads term 1; (1, 1) on everyone
    c.propose(1)  # (2, 1) reaches S2 only
    c.deliver(between((1, 2)))
    c.drop()
    c.crash(1)
    campaign(c, 5)  # (b) S5 leads term 2 with S3 and S4, writes (2, 2) only in its own log
    c.deliver(between((5, 3), (5, 4), kinds=VOTES))
    assert c.nodes[5].core.role == Role.LEADER and c.nodes[5].core.entry(2).term == 2
    c.drop()
    c.crash(5)
    c.restart(1)  # (c) S1 comes back; S3 and S4 voted for S5 in term 2, so it needs term 3
    campaign(c, 1)
    c.deliver(between((1, 2), kinds=VOTES))
    c.drop()
    campaign(c, 1)
    c.deliver(between((1, 2), (1, 3), kinds=VOTES))
    assert c.nodes[1].core.role == Role.LEADER and c.nodes[1].core.term == 3
    # S1 replicates (2, 1) to S3 (one entry per message) but its no-op (3, 3) only to S2.
    s3 = c.nodes[3].core
    c.deliver(lambda s, d, m: {s, d} in ({1, 2}, {1, 3}) and not (
        d == 3 and s3.last_index >= 2 and isinstance(m, AppendEntries) and m.entries))
    assert [c.nodes[i].core.term_at(2) for i in (1, 2, 3)] == [1, 1, 1]
    c.drop()
    c.crash(1)  # (d) S1 fails before (3, 3) is on a majority
    c.restart(5)
    campaign(c, 5)  # term 3: S2 and S3 already voted for S1
    c.deliver(between((5, 4), kinds=VOTES))
    c.drop()
    campaign(c, 5)  # term 4: S3 and S4 vote for S5, whose last entry (2, 2) beats their (2, 1)
    c.deliver(between((5, 3), (5, 4), kinds=VOTES))
    assert c.nodes[5].core.role == Role.LEADER
    c.deliver(lambda s, d, m: 1 not in (s, d))  # S5 overwrites index 2 with (2, 2) and commits it
    return c


def test_figure_8_leader_does_not_commit_an_earlier_terms_entry_by_counting():
    c = figure_8(RaftCore)
    assert c.checker.committed[2] == Entry(2, 2, EntryKind.NO_OP)
    c.restart(1)
    run_ticks(c, 40)
    assert {n.core.term_at(2) for n in c.live()} == {2}
    c.checker.check_logs(c.live())


def test_figure_8_bug_is_caught_by_the_checker():
    with pytest.raises(SafetyViolation, match="leader completeness|committed"):
        figure_8(CountsOldTerms)


@pytest.mark.parametrize("broken_host", [False, True])
def test_vote_is_durable_before_it_is_sent(broken_host):
    """S2 crashes right after its vote leaves; restarted, it must not vote again in the same term."""
    c = Cluster(3, 3, config=MANUAL, send_before_persist=broken_host)
    campaign(c, 1)
    c.drop(lambda s, d, m: d == 3)
    c.crash_after(2, lambda e: isinstance(e, Send))
    c.deliver(lambda s, d, m: d == 2)
    assert c.nodes[2].core is None
    c.restart(2)
    c.deliver(between((1, 2), kinds=VOTES))  # S2's vote reaches S1: leader of term 1
    assert c.nodes[1].core.role == Role.LEADER and c.nodes[1].core.term == 1
    c.drop()
    campaign(c, 3)  # S3 asks S2 for a vote in term 1 too
    if broken_host:
        with pytest.raises(SafetyViolation, match="election safety: voters 1 and 3 both lead term 1"):
            c.deliver(lambda s, d, m: isinstance(m, VOTES))
    else:
        c.deliver(lambda s, d, m: isinstance(m, VOTES))
        assert c.nodes[3].core.role == Role.CANDIDATE and c.nodes[2].core.voted_for == 1


def test_acknowledged_entries_survive_a_leader_crash_between_persist_and_send():
    c = Cluster(4, 3, config=MANUAL)
    elect(c, 1)
    run_ticks(c, 3)
    c.propose(1)
    c.deliver()
    assert 2 in c.checker.acked
    c.crash_after(1, lambda e: isinstance(e, PersistEntries))  # the next append never leaves S1
    c.propose(1)
    assert c.nodes[1].core is None
    run_ticks(c, 60)
    c.restart(1)
    run_ticks(c, 60)
    assert all(n.applied >= 2 for n in c.live()) and len(c.checker.leaders) >= 2
    c.checker.check_logs(c.live())


def test_pre_vote_keeps_an_isolated_voter_from_deposing_the_leader():
    config = RaftConfig(election_timeout_ticks=10, heartbeat_interval_ticks=2, pre_vote=True)
    c = Cluster(5, 3, config=config)
    run_ticks(c, 40)
    leader = next(n for n in c.live() if n.core.role == Role.LEADER)
    term = leader.core.term
    loner = next(i for i in c.ids if i != leader.id)
    c.partition([i for i in c.ids if i != loner], [loner])
    run_ticks(c, 100)
    assert c.nodes[loner].core.term == term  # it kept asking, never a real election
    c.heal()
    run_ticks(c, 40)
    assert leader.core.role == Role.LEADER and leader.core.term == term


def test_without_pre_vote_the_rejoining_voter_forces_a_new_term():
    config = RaftConfig(election_timeout_ticks=10, heartbeat_interval_ticks=2, pre_vote=False)
    c = Cluster(5, 3, config=config)
    run_ticks(c, 40)
    leader = next(n for n in c.live() if n.core.role == Role.LEADER)
    term = leader.core.term
    loner = next(i for i in c.ids if i != leader.id)
    c.partition([i for i in c.ids if i != loner], [loner])
    run_ticks(c, 100)
    assert c.nodes[loner].core.term > term
    c.heal()
    run_ticks(c, 40)
    assert max(n.core.term for n in c.live()) > term  # the contrast with pre-vote above


def test_check_quorum_makes_an_isolated_leader_step_down():
    c = Cluster(6, 5, config=RaftConfig(election_timeout_ticks=10, heartbeat_interval_ticks=2))
    run_ticks(c, 40)
    old = next(n for n in c.live() if n.core.role == Role.LEADER)
    c.partition([old.id], [i for i in c.ids if i != old.id])
    run_ticks(c, 60)
    assert old.core.role != Role.LEADER
    new = [n for n in c.live() if n.core.role == Role.LEADER]
    assert len(new) == 1 and new[0].core.term > old.core.term


def test_lagging_voter_catches_up_through_install_snapshot():
    c = Cluster(9, 3, config=RaftConfig(election_timeout_ticks=10, heartbeat_interval_ticks=2),
                faults=Faults(compact_every=4))
    for _ in range(40):
        c.tick()
    leader = next(n for n in c.live() if n.core.role == Role.LEADER)
    lagging = next(i for i in c.ids if i != leader.id)
    c.crash(lagging)
    for k in range(30):
        c.propose(leader.id, KeyValueStateMachine.put(f"k{k}", str(k)))
        c.tick()
    assert leader.core.snapshot_index > 10
    c.restart(lagging)
    for _ in range(30):
        c.tick()
    installed = [out for t, i, ev, out in c.trace if i == lagging and isinstance(ev, Receive)
                 and isinstance(ev.message, InstallSnapshot)]
    assert any(isinstance(e, RestoreSnapshot) for out in installed for e in out)
    assert c.nodes[lagging].sm.data == leader.sm.data and c.nodes[lagging].applied == leader.applied
    c.checker.check_final_states(c.live())


# ---------------------------------------------------------------------------------------------
# One core, messages by hand

def core(node_id=1, voters=(1, 2, 3), durable=DurableState(), **config) -> RaftCore:
    return RaftCore(node_id, list(voters), RaftConfig(**config), random.Random(0), durable)


def entries(*terms: int, start: int = 1) -> tuple[Entry, ...]:
    return tuple(Entry(start + k, t, EntryKind.COMMAND, b"%d" % (start + k)) for k, t in enumerate(terms))


def sent(effects) -> list:
    return [e.message for e in effects if isinstance(e, Send)]


def test_a_stale_shorter_append_does_not_truncate_matching_entries():
    f = core(durable=DurableState(term=1))
    f.step(Receive(AppendEntries(1, 2, 0, 0, entries(1, 1, 1), 0)))
    out = f.step(Receive(AppendEntries(1, 2, 0, 0, entries(1), 0)))  # delivered late
    assert f.last_index == 3 and not [e for e in out if isinstance(e, PersistEntries)]
    assert sent(out) == [AppendEntriesResponse(1, 1, True, 1)]


def test_follower_commits_only_what_the_message_proved():
    f = core(durable=DurableState(term=1, entries=entries(1, 1, 1)))  # (3, 1) is stale
    out = f.step(Receive(AppendEntries(2, 2, 2, 1, (), leader_commit=4)))
    assert f.commit_index == 2 and [e.entry.index for e in out if isinstance(e, Apply)] == [1, 2]


def test_conflicting_suffix_is_replaced_and_persisted_before_the_answer():
    f = core(durable=DurableState(term=1, entries=entries(1, 1, 1)))
    out = f.step(Receive(AppendEntries(2, 2, 1, 1, entries(2, start=2), 0)))
    assert out[:2] == [PersistState(2, NO_NODE), PersistEntries(2, entries(2, start=2))]
    assert f.entries() == entries(1) + entries(2, start=2)
    assert sent(out) == [AppendEntriesResponse(2, 1, True, 2)]


def test_rejection_carries_a_conflict_hint():
    f = core(durable=DurableState(term=3, entries=entries(1, 2, 2, 2)))
    out = f.step(Receive(AppendEntries(3, 2, 4, 3, (), 0)))
    assert sent(out) == [AppendEntriesResponse(3, 1, False, 0, conflict_index=2, conflict_term=2)]
    out = f.step(Receive(AppendEntries(3, 2, 9, 3, (), 0)))
    assert sent(out) == [AppendEntriesResponse(3, 1, False, 0, conflict_index=5, conflict_term=0)]


def test_stale_epoch_is_fenced():
    f = core(durable=DurableState(term=3))
    f.step(Receive(AppendEntries(3, 2, 0, 0, (), 0)))
    out = f.step(Receive(AppendEntries(2, 3, 0, 0, entries(2), 0)))
    assert sent(out) == [AppendEntriesResponse(3, 1, False, 0)] and f.leader_id == 2 and f.last_index == 0
    out = f.step(Receive(RequestVote(2, 3, 9, 2)))
    assert sent(out) == [RequestVoteResponse(3, 1, False)]


def test_vote_only_for_an_up_to_date_log_once_per_term():
    v = core(durable=DurableState(term=2, entries=entries(1, 2)))
    out = v.step(Receive(RequestVote(3, 2, 5, 1)))  # longer log, older last term
    assert out[0] == PersistState(3, NO_NODE) and sent(out) == [RequestVoteResponse(3, 1, False)]
    out = v.step(Receive(RequestVote(3, 3, 2, 2)))
    assert out[0] == PersistState(3, 3) and sent(out) == [RequestVoteResponse(3, 1, True)]
    out = v.step(Receive(RequestVote(3, 2, 9, 3)))
    assert sent(out) == [RequestVoteResponse(3, 1, False)]
    assert v.step(Receive(RequestVote(3, 3, 2, 2))) == [Send(3, RequestVoteResponse(3, 1, True))]


def test_duplicate_votes_count_once():
    c5 = core(voters=(1, 2, 3, 4, 5), pre_vote=False)
    while c5.role != Role.CANDIDATE:
        c5.step(Tick())
    vote = Receive(RequestVoteResponse(c5.term, 2, True))
    c5.step(vote)
    c5.step(vote)
    assert c5.role == Role.CANDIDATE
    c5.step(Receive(RequestVoteResponse(c5.term, 3, True)))
    assert c5.role == Role.LEADER


def test_pre_vote_changes_no_term_and_is_refused_while_a_leader_is_heard():
    v = core(durable=DurableState(term=4))
    v.step(Receive(AppendEntries(4, 2, 0, 0, (), 0)))
    out = v.step(Receive(RequestVote(5, 3, 0, 0, pre_vote=True)))
    assert out == [Send(3, RequestVoteResponse(4, 1, False, pre_vote=True))]
    for _ in range(10):
        v.step(Tick())
    out = v.step(Receive(RequestVote(5, 3, 0, 0, pre_vote=True)))
    assert out == [Send(3, RequestVoteResponse(5, 1, True, pre_vote=True))] and v.term == 4


def test_new_leader_appends_a_no_op_and_followers_refuse_proposals():
    solo = core(voters=(1,))
    out = []
    while solo.role != Role.LEADER:
        out += solo.step(Tick())
    assert Apply(Entry(1, 1, EntryKind.NO_OP)) in out and solo.commit_index == 1
    f = core(durable=DurableState(term=1))
    f.step(Receive(AppendEntries(1, 2, 0, 0, (), 0)))
    assert f.step(Propose(b"x")) == [ProposalRefused(1, 2)]
    with pytest.raises(EntryTooLargeError):
        core(max_entry_bytes=3).step(Propose(b"four"))


def test_stale_install_snapshot_below_commit_changes_nothing():
    f = core(durable=DurableState(term=2, entries=entries(1, 2, 2)))
    f.step(Receive(AppendEntries(2, 2, 3, 2, (), 3)))
    out = f.step(Receive(InstallSnapshot(2, 2, Snapshot(2, 2, b"{}"))))
    assert sent(out) == [InstallSnapshotResponse(2, 1, 2)] and f.snapshot_index == 0


# ---------------------------------------------------------------------------------------------
# The wire and the state machine

ids = st.integers(0, 2**31)
ents = st.lists(st.tuples(st.sampled_from(list(EntryKind)), st.binary(max_size=40)), max_size=5)


@st.composite
def messages(draw):
    term, sender = draw(st.integers(1, 2**40)), draw(ids)
    kind = draw(st.sampled_from(range(6)))
    if kind == 0:
        return RequestVote(term, sender, draw(ids), draw(ids), draw(st.booleans()))
    if kind == 1:
        return RequestVoteResponse(term, sender, draw(st.booleans()), draw(st.booleans()))
    if kind == 2:
        prev = draw(st.integers(0, 1000))
        es = tuple(Entry(prev + 1 + k, term, kd, p) for k, (kd, p) in enumerate(draw(ents)))
        return AppendEntries(term, sender, prev, draw(st.integers(0, term)), es, draw(ids))
    if kind == 3:
        return AppendEntriesResponse(term, sender, draw(st.booleans()), draw(ids), draw(ids), draw(ids))
    if kind == 4:
        return InstallSnapshot(term, sender, Snapshot(draw(st.integers(1, 10**9)), term, draw(st.binary(max_size=50))))
    return InstallSnapshotResponse(term, sender, draw(ids))


@given(messages())
def test_messages_round_trip_through_json(m):
    assert message_from_dict(json.loads(json.dumps(message_to_dict(m)))) == m


@pytest.mark.parametrize("broken", [
    "not a dict", {"type": "Pickle"}, {"type": "RequestVote", "term": 1},
    {"type": "RequestVoteResponse", "term": 1, "sender": 2, "granted": 1, "pre_vote": False},
    {"type": "InstallSnapshotResponse", "term": -1, "sender": 2, "match_index": 0},
    {"type": "InstallSnapshotResponse", "term": 2**63, "sender": 2, "match_index": 0},
    {"type": "InstallSnapshotResponse", "term": 1.0, "sender": 2, "match_index": 0},
    {"type": "InstallSnapshot", "term": 1, "sender": 2, "snapshot": {"last_index": 1, "last_term": 1, "data": "%%"}},
    {"type": "AppendEntries", "term": 1, "sender": 2, "prev_log_index": 0, "prev_log_term": 0, "leader_commit": 0,
     "entries": [{"index": 2, "term": 1, "kind": 1, "payload": ""}]},
    {"type": "AppendEntries", "term": 1, "sender": 2, "prev_log_index": 0, "prev_log_term": 0, "leader_commit": 0,
     "entries": [{"index": 1, "term": 1, "kind": 7, "payload": ""}]},
])
def test_malformed_messages_are_refused(broken):
    with pytest.raises(MessageFormatError):
        message_from_dict(broken)


def test_key_value_state_machine_snapshot_round_trip():
    sm = KeyValueStateMachine()
    for i, cmd in enumerate([sm.put("a", "1"), sm.put("b", "2"), sm.delete("a"), b"not json"], start=1):
        sm.apply(Entry(i, 1, EntryKind.COMMAND, cmd))
    sm.apply(Entry(5, 2, EntryKind.NO_OP))
    other = KeyValueStateMachine()
    other.restore(sm.snapshot())
    assert other.data == {"b": "2"} and other.snapshot() == sm.snapshot()
    with pytest.raises(SnapshotFormatError):
        other.restore(b'{"version": 2, "data": {}}')
