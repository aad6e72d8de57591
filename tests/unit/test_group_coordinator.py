"""The group coordinator state machine, driven without HTTP: join / sync / heartbeat / leave / tick / commit."""

from __future__ import annotations

import itertools

import pytest

from lakelog.ingest_api.groups.assignors import TopicPartition as TP
from lakelog.ingest_api.groups.coordinator import CoordinatorConfig, GroupCoordinator, GroupState, JoinResult, SyncResult
from lakelog.ingest_api.groups.errors import (
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentProtocolError,
    InvalidSessionTimeoutError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from lakelog.ingest_api.groups.offsets_codec import CommittedOffset

SESSION = 10_000


def coordinator(**kw) -> GroupCoordinator:
    ids = itertools.count(1)
    # No initial rebalance delay unless a test asks for one (the key's default is 3000 ms).
    kw.setdefault("initial_rebalance_delay_ms", 0)
    c = GroupCoordinator(CoordinatorConfig(min_session_timeout_ms=1000, **kw), lambda client: f"{client}-{next(ids)}")
    return c


def join(c, member="", client="c", now=0, protocols=(("range", {"topics": ["t"]}),), group="g"):
    return c.join(group, member, client_id=client, client_host="h", session_timeout_ms=SESSION,
                  rebalance_timeout_ms=SESSION, protocol_type="consumer", protocols=list(protocols), now_ms=now)


def joins(effects) -> dict[str, JoinResult]:
    return {e.member_id: e for e in effects if isinstance(e, JoinResult)}


def syncs(effects) -> dict[str, SyncResult]:
    return {e.member_id: e for e in effects if isinstance(e, SyncResult)}


def test_first_member_joins_leads_and_syncs():
    c = coordinator()
    m1, eff = join(c, client="a")
    j = joins(eff)[m1]
    assert (j.generation, j.leader_id, j.protocol) == (1, m1, "range")
    assert j.members == ((m1, {"topics": ["t"]}),)
    eff = c.sync("g", m1, 1, {m1: ["t-0"]}, 1)
    assert syncs(eff)[m1].assignment == ["t-0"]
    assert c.groups["g"].state == GroupState.STABLE
    c.check_invariants()


def test_second_member_triggers_rebalance_and_both_get_assignments():
    c = coordinator()
    m1, _ = join(c, client="a")
    c.sync("g", m1, 1, {m1: "all"}, 1)
    m2, eff = join(c, client="b", now=2)
    assert eff == []  # waits for m1 to rejoin
    with pytest.raises(RebalanceInProgressError):
        c.heartbeat("g", m1, 1, 3)
    _, eff = join(c, member=m1, now=4)
    js = joins(eff)
    assert set(js) == {m1, m2} and js[m1].generation == js[m2].generation == 2
    assert js[m1].leader_id == m1 and len(js[m1].members) == 2 and js[m2].members == ()
    assert c.sync("g", m2, 2, None, 5) == []  # the follower waits for the leader
    eff = syncs(c.sync("g", m1, 2, {m1: "x", m2: "y"}, 6))
    assert eff[m1].assignment == "x" and eff[m2].assignment == "y"
    c.heartbeat("g", m2, 2, 7)
    with pytest.raises(IllegalGenerationError):
        c.heartbeat("g", m2, 1, 7)


def test_session_timeout_removes_a_silent_member():
    c = coordinator()
    m1, _ = join(c, client="a")
    m2, _ = join(c, client="b")  # m1 must rejoin before the rebalance completes
    assert c.tick(0) == []
    assert set(joins(join(c, member=m1)[1])) == {m1, m2}
    assert c.groups["g"].state == GroupState.COMPLETING_REBALANCE
    c.sync("g", m2, 2, None, 1)
    leader = c.groups["g"].leader_id
    c.sync("g", leader, 2, {m1: 1, m2: 2}, 1)
    assert c.groups["g"].state == GroupState.STABLE
    c.heartbeat("g", m1, 2, SESSION)  # m1 keeps heartbeating, m2 goes silent
    assert c.tick(SESSION + 2) == []
    assert set(c.groups["g"].members) == {m1}
    assert c.groups["g"].state == GroupState.PREPARING_REBALANCE
    with pytest.raises(UnknownMemberIdError):
        c.heartbeat("g", m2, 2, SESSION + 3)
    with pytest.raises(RebalanceInProgressError):
        c.heartbeat("g", m1, 2, SESSION + 3)
    j = joins(join(c, member=m1, now=SESSION + 4)[1])[m1]
    assert j.generation == 3 and j.leader_id == m1


def test_rebalance_timeout_drops_members_that_do_not_rejoin():
    c = coordinator()
    m1, _ = join(c, client="a")
    c.sync("g", m1, 1, {m1: 1}, 0)
    m2, _ = join(c, client="b", now=1)
    # m1 never rejoins (nor heartbeats): at the rebalance deadline the join completes without it.
    eff = joins(c.tick(1 + SESSION))
    assert set(eff) == {m2} and eff[m2].leader_id == m2 and eff[m2].generation == 2


def test_leave_rebalances_and_last_leave_empties_the_group():
    c = coordinator()
    m1, _ = join(c, client="a")
    c.sync("g", m1, 1, {m1: 1}, 0)
    c.leave("g", m1, 5)
    g = c.groups["g"]
    assert g.state == GroupState.EMPTY and g.generation == 2 and not g.members and g.empty_since_ms == 5
    c.check_invariants()


def test_leader_that_never_syncs_is_removed():
    c = coordinator()
    m1, _ = join(c, client="a")
    m2, _ = join(c, client="b")
    joins(join(c, member=m1)[1])
    leader = c.groups["g"].leader_id
    other = m2 if leader == m1 else m1
    c.sync("g", other, 2, None, 1)
    eff = c.tick(2 + SESSION)
    # The leader is gone; the follower, still waiting for its sync, is told to rejoin.
    assert leader not in c.groups["g"].members
    assert syncs(eff)[other].error is RebalanceInProgressError


def test_protocol_vote_and_inconsistent_protocols():
    c = coordinator()
    m1, _ = join(c, client="a", protocols=(("roundrobin", {}), ("range", {})))
    m2, _ = join(c, client="b", protocols=(("range", {}), ("roundrobin", {})))
    m3, _ = join(c, client="c", protocols=(("roundrobin", {}),))
    eff = joins(join(c, member=m1, protocols=(("roundrobin", {}), ("range", {})))[1])
    assert {j.protocol for j in eff.values()} == {"roundrobin"}
    with pytest.raises(InconsistentProtocolError):
        join(c, client="d", protocols=(("sticky", {}),))


def test_bounds_session_timeout_and_group_size():
    c = coordinator(max_size=1)
    with pytest.raises(InvalidSessionTimeoutError):
        c.join("g", "", client_id="a", client_host="h", session_timeout_ms=10, rebalance_timeout_ms=10,
               protocol_type="consumer", protocols=[("range", {})], now_ms=0)
    join(c, client="a")
    with pytest.raises(GroupMaxSizeReachedError):
        join(c, client="b")


def test_commit_rules_and_offsets_expiry():
    c = coordinator(offsets_retention_ms=1000)
    # Stateless commit (generation -1, no member) is allowed while the group has no members.
    c.check_commit("g", "", -1)
    c.apply_offset("g", TP("t", 0), CommittedOffset(5, "m", 100), 100)
    assert c.committed("g")[TP("t", 0)].offset == 5
    m1, _ = join(c, client="a", now=200)
    with pytest.raises(RebalanceInProgressError):
        c.check_commit("g", "", -1)
    with pytest.raises(RebalanceInProgressError):
        c.check_commit("g", m1, 1)  # completing: no commits until the sync
    c.sync("g", m1, 1, {m1: 1}, 201)
    c.check_commit("g", m1, 1)
    with pytest.raises(IllegalGenerationError):
        c.check_commit("g", m1, 0)
    with pytest.raises(UnknownMemberIdError):
        c.check_commit("g", "nobody", 1)
    assert c.expired_offsets(10_000, wall_ms=10_000) == []  # the group is not empty
    c.leave("g", m1, 300)
    assert c.expired_offsets(1299, wall_ms=1299) == []  # retention counts from the group becoming empty
    assert c.expired_offsets(1300, wall_ms=1300) == [("g", TP("t", 0))]
    c.apply_offset("g", TP("t", 0), None, 1300)
    assert "g" not in c.groups


def test_remove_groups_fails_pending_answers():
    from lakelog.ingest_api.groups.errors import NotCoordinatorError
    c = coordinator()
    m1, _ = join(c, client="a")
    c.sync("g", m1, 1, {m1: 1}, 0)
    m2, _ = join(c, client="b", now=1)
    eff = joins(c.remove_groups(lambda g: g == "g"))
    assert eff[m2].error is NotCoordinatorError and "g" not in c.groups


def test_transactional_offsets_wait_for_their_marker():
    c = coordinator()
    c.apply_offset("g", TP("t", 0), CommittedOffset(5), 0)
    c.apply_txn_offset(7, "g", TP("t", 0), 10, CommittedOffset(9))
    c.apply_txn_offset(7, "h", TP("t", 1), 11, CommittedOffset(3))
    c.apply_txn_offset(8, "g", TP("t", 2), 12, CommittedOffset(4))
    assert c.committed("g")[TP("t", 0)].offset == 5  # pending: not visible
    assert c.pending_txn_partitions("g") == {TP("t", 0), TP("t", 2)}
    # Producer 7's COMMIT marker lands in g's partition only: g's commit is decided, h's waits.
    assert c.complete_txn(7, True, lambda group: group == "g") == [("g", TP("t", 0), 10, CommittedOffset(9))]
    assert c.pending_txn_partitions("h") == {TP("t", 1)}
    assert c.complete_txn(8, False, lambda group: True) == []  # ABORT: dropped
    assert c.pending_txn_partitions("g") == set()
    c.remove_groups(lambda group: group == "h")  # the coordinator moved: its pending commits go too
    assert c.pending_txn_offsets == {}
