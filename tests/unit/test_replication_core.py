"""The pure replication state machine (ingest_api/replication/core.py): events in, effects out.

The simulation (tests/sim/replication_sim.py) drives the same machine at random over the real
storage engine; these are its rules one by one, with worked examples.
"""

from __future__ import annotations

import pytest

from lakelog.infra.errors import InvariantViolation
from lakelog.ingest_api.replication import core as rc
from lakelog.ingest_api.replication.core import ReplicaCore
from lakelog.ingest_api.replication.events import ProduceOutcome, ReplicationRules, Role

LEADER, F1, F2 = 1, 2, 3
REPLICAS = (LEADER, F1, F2)


def leader(isr=REPLICAS, *, leo=10, hw=0, epoch=1, partition_epoch=1, now=0, **kw) -> tuple[ReplicaCore, list]:
    c = ReplicaCore(LEADER, high_watermark=hw, leo=leo, **kw)
    effects = c.step(rc.BecomeLeader(epoch, partition_epoch, REPLICAS, tuple(isr), leo, 0, now))
    return c, effects


def of(effects, kind):
    return [e for e in effects if isinstance(e, kind)]


def test_a_new_leader_stamps_its_epoch_at_the_leo_and_waits_for_every_isr_member():
    c, effects = leader(leo=10, hw=4)
    assert of(effects, rc.StampLeaderEpoch) == [rc.StampLeaderEpoch(1, 10)]
    assert of(effects, rc.NewLeaderEpoch) == [rc.NewLeaderEpoch(Role.LEADER, 1)]
    assert c.epoch_start_offset == 10 and c.high_watermark == 4
    # F1 fetched, F2's LEO is still unknown: the HW holds.
    assert c.step(rc.FollowerFetch(F1, 10, 10, 1)) == []
    effects = c.step(rc.FollowerFetch(F2, 7, 10, 2))
    assert of(effects, rc.HighWatermarkAdvanced) == [rc.HighWatermarkAdvanced(4, 7)]
    assert c.high_watermark == 7


def test_the_same_epoch_again_is_not_a_new_term():
    c, _ = leader()
    effects = c.step(rc.BecomeLeader(1, 2, REPLICAS, REPLICAS, 10, 0, 5))
    assert not of(effects, rc.StampLeaderEpoch) and not of(effects, rc.NewLeaderEpoch)
    assert c.partition_epoch == 2


def test_an_append_advances_the_hw_of_a_lone_leader_and_completes_produces():
    c, _ = leader(isr=(LEADER,))
    c.step(rc.AwaitCommit(7, required_offset=12, min_isr=1))
    assert c.step(rc.Appended(11)) == [rc.HighWatermarkAdvanced(10, 11)]
    effects = c.step(rc.Appended(12))
    assert of(effects, rc.CompleteProduce) == [rc.CompleteProduce(7, ProduceOutcome.COMMITTED, (LEADER,), 1)]
    assert c.waiting_produces() == 0


def test_a_produce_committed_below_min_isr_is_not_enough_replicas_after_append():
    c, _ = leader(isr=(LEADER,))
    c.step(rc.AwaitCommit(1, required_offset=11, min_isr=2))
    effects = c.step(rc.Appended(11))
    assert of(effects, rc.CompleteProduce)[0].outcome is ProduceOutcome.NOT_ENOUGH_REPLICAS_AFTER_APPEND


def test_losing_the_leadership_fails_waiting_produces_and_wakes_fetches():
    c, _ = leader()
    c.step(rc.AwaitCommit(1, required_offset=11, min_isr=1))
    effects = c.step(rc.BecomeFollower(F1, 2, 2, REPLICAS, REPLICAS, 10, 0))
    assert of(effects, rc.CompleteProduce)[0].outcome is ProduceOutcome.NOT_LEADER
    assert of(effects, rc.WakeAll) and c.needs_truncation and c.role == Role.FOLLOWER


def test_append_refusals():
    c, _ = leader(isr=(LEADER, F1))
    assert c.append_refusal("all", 2) is None
    assert c.append_refusal("all", 3) == "not_enough_replicas"
    assert c.append_refusal("1", 3) is None
    c.step(rc.BecomeFollower(-1, 2, 2, REPLICAS, (F1,), 10, 0))
    assert c.append_refusal("1", 1) == "no_leader"


def test_a_lagging_follower_is_proposed_out_once_and_the_answer_reopens_proposals():
    c, _ = leader(now=0)
    c.step(rc.FollowerFetch(F1, 10, 10, 100))  # caught up at 100
    c.step(rc.FollowerFetch(F2, 10, 10, 100))
    assert c.step(rc.Tick(now_ms=150, lag_max_ms=100)) == []
    c.step(rc.Appended(20))
    c.step(rc.FollowerFetch(F1, 20, 20, 250))  # F1 keeps up, F2 does not
    (shrink,) = c.step(rc.Tick(now_ms=300, lag_max_ms=100))
    assert shrink == rc.ProposeIsr((LEADER, F1), 1, 1, "lagging: [3]")
    assert c.pending_isr == (LEADER, F1)
    assert c.step(rc.Tick(now_ms=400, lag_max_ms=100)) == []  # one change in flight
    c.step(rc.IsrChangeAnswered(1, accepted=False))  # refused: the pending ISR goes
    assert c.pending_isr is None and not c.isr_change_in_flight
    assert c.step(rc.Tick(now_ms=500, lag_max_ms=100))  # proposed again
    # Committed: the metadata brings the new ISR and partition epoch.
    c.step(rc.BecomeLeader(1, 2, REPLICAS, (LEADER, F1), 20, 0, 600))
    assert c.isr == (LEADER, F1) and c.pending_isr is None and not c.isr_change_in_flight


def test_a_shrink_in_flight_still_counts_the_member_it_removes():
    c, _ = leader(isr=(LEADER, F1))
    c.step(rc.FollowerFetch(F1, 5, 10, 0))
    assert c.high_watermark == 5
    c.step(rc.Appended(20))
    c.step(rc.Tick(now_ms=10_000, lag_max_ms=100))  # propose [LEADER]: F1 still holds the HW back
    assert c.step(rc.Appended(21)) == [] and c.high_watermark == 5
    c.step(rc.BecomeLeader(1, 2, REPLICAS, (LEADER,), 21, 0, 10_001))
    assert c.high_watermark == 21


def test_a_follower_rejoins_at_the_hw_and_the_epoch_start():
    # KAFKA-7128: HW 4 is stale, the epoch started at 10; reaching the HW alone is not enough.
    c, _ = leader(isr=(LEADER, F1), leo=10, hw=4)
    c.step(rc.FollowerFetch(F1, 4, 10, 0))  # the ISR member lags: the HW stays 4
    assert c.high_watermark == 4
    assert c.step(rc.FollowerFetch(F2, 4, 10, 0)) == []
    (expand,) = of(c.step(rc.FollowerFetch(F2, 10, 10, 1)), rc.ProposeIsr)
    assert expand.new_isr == REPLICAS
    # With the rule off (the simulation shows the loss it allows), the stale HW suffices.
    c, _ = leader(isr=(LEADER, F1), leo=10, hw=4, rules=ReplicationRules(isr_join_requires_epoch_start=False))
    c.step(rc.FollowerFetch(F1, 4, 10, 0))
    assert of(c.step(rc.FollowerFetch(F2, 4, 10, 0)), rc.ProposeIsr)


def test_follower_hw_is_min_of_leader_hw_and_own_leo_and_follows_the_log_start():
    c = ReplicaCore(F1, leo=5)
    c.step(rc.BecomeFollower(LEADER, 1, 1, REPLICAS, REPLICAS, 5, 0))
    assert c.needs_truncation
    c.step(rc.Truncated(4, 0, final=True))
    assert not c.needs_truncation
    effects = c.step(rc.FollowerAppended(leo=8, log_start_offset=0, leader_hw=12, leader_log_start_offset=3))
    assert effects == [rc.IncrementLogStart(3)] and c.high_watermark == 8
    c.step(rc.FollowerAppended(leo=9, log_start_offset=3, leader_hw=6, leader_log_start_offset=3))
    assert c.high_watermark == 6
    c.step(rc.MustTruncate())
    assert c.needs_truncation


def test_invariants_are_checked_every_step():
    with pytest.raises(InvariantViolation, match="not in ISR"):
        leader(isr=(F1, F2))
    c, _ = leader(epoch=3)
    with pytest.raises(InvariantViolation, match="below"):
        c.step(rc.BecomeFollower(F1, 2, 2, REPLICAS, REPLICAS, 10, 0))
    c, _ = leader(isr=(LEADER,))
    with pytest.raises(InvariantViolation, match="LEO went back"):
        c.step(rc.Appended(5))
    with pytest.raises(TypeError):
        c.step(object())  # type: ignore[arg-type]


def test_a_caught_up_follower_of_a_fenced_broker_is_not_proposed_into_the_isr():
    # KIP-841: the controller fenced F2 (dead: its last fetch session still looks caught up on an
    # idle partition) and shrank the ISR. Proposing it back in would count it in the maximal ISR,
    # holding every acks=all produce until the controller refused the change.
    c, _ = leader(isr=(LEADER, F1), leo=10, hw=10)
    c.step(rc.FollowerFetch(F1, 10, 10, 0))
    assert c.step(rc.FollowerFetch(F2, 10, 10, 1, isr_eligible=False)) == []
    assert c.maximal_isr() == (LEADER, F1) and not c.isr_change_in_flight
    c.step(rc.Appended(11))
    c.step(rc.FollowerFetch(F1, 11, 11, 2))
    assert c.high_watermark == 11  # F2 holds nothing back
    # Unfenced again: its next caught-up fetch proposes it.
    (expand,) = of(c.step(rc.FollowerFetch(F2, 11, 11, 3)), rc.ProposeIsr)
    assert expand.new_isr == REPLICAS
