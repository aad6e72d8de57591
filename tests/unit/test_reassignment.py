"""Partition reassignment in the controller (Kafka's KIP-455), driven through the metadata image."""

from __future__ import annotations

import random

import pytest

from lakelog.ingest_api.cluster.controller import Controller
from lakelog.ingest_api.cluster.errors import (
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
)
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.image_values import PartitionState
from lakelog.ingest_api.error_table import http_error
from lakelog.ingest_api.errors import InvalidRequestError, PartitionNotFoundError, TopicNotFoundError
from tests.unit.test_controller import Cluster


def reassign(c: Cluster, target: list[int] | None, topic: str = "t", p: int = 0) -> list[dict]:
    return c.commit(c.controller.alter_partition_reassignments([(topic, p, target)]))


def catch_up(c: Cluster, topic: str = "t", p: int = 0) -> None:
    """The leader adds every replica to the ISR (they fetched up to the high watermark)."""
    s = c.state(topic, p)
    c.alter_isr(topic, p, list(s.replicas))


def test_a_move_adds_catches_up_moves_leadership_then_removes() -> None:
    c = Cluster(brokers=4)
    c.create("t", 1, 3)
    s = c.state()
    old = list(s.replicas)
    new_node = next(n for n in range(4) if n not in old)
    target = [new_node] + old[1:]  # replace the leader (old[0]) by the new node, which is preferred
    records = reassign(c, target)
    assert records[0]["adding_replicas"] == [new_node] and records[0]["removing_replicas"] == [old[0]]
    s = c.state()
    assert s.replicas == tuple(target + [old[0]]) and s.adding == (new_node,) and s.removing == (old[0],)
    assert s.leader == old[0] and s.isr == tuple(old)  # nothing else moved
    assert s.target == tuple(target) and sorted(s.original) == sorted(old)  # Kafka's revert keeps the current order
    # The new replica is not in the ISR yet: ticks wait.
    assert c.advance(2_000, alive=(0, 1, 2, 3)) == []
    # It catches up; the leader adds it to the ISR; the next tick moves leadership to the first target.
    catch_up(c)
    c.advance(1_000, alive=(0, 1, 2, 3))
    s = c.state()
    assert s.leader == new_node and s.reassigning
    # ...and the one after drops the old replica.
    c.advance(1_000, alive=(0, 1, 2, 3))
    s = c.state()
    assert s == PartitionState(tuple(target), tuple(r for r in s.isr), new_node, s.leader_epoch, s.partition_epoch)
    assert not s.reassigning and set(s.isr) == set(target)
    assert c.advance(1_000, alive=(0, 1, 2, 3)) == []


def test_a_move_that_keeps_the_leader_completes_in_one_step() -> None:
    c = Cluster(brokers=4)
    c.create("t", 1, 2)
    s = c.state()
    spare = [n for n in range(4) if n not in s.replicas]
    target = [s.leader, spare[0]]
    reassign(c, target)
    catch_up(c)
    c.advance(1_000, alive=(0, 1, 2, 3))
    s2 = c.state()
    assert s2.replicas == tuple(target) and s2.leader == s.leader and s2.leader_epoch == s.leader_epoch
    assert not s2.reassigning


def test_cancel_reverts_to_the_original_replicas() -> None:
    c = Cluster(brokers=4)
    c.create("t", 1, 2)
    s = c.state()
    spare = [n for n in range(4) if n not in s.replicas]
    reassign(c, spare)  # both replicas move
    catch_up(c)  # the new ones are in sync, but the tick has not run yet
    reassign(c, None)
    s2 = c.state()
    assert s2.replicas == s.replicas and s2.isr == s.isr and s2.leader == s.leader and not s2.reassigning
    with pytest.raises(NoReassignmentInProgressError):
        c.controller.alter_partition_reassignments([("t", 0, None)])
    assert http_error(NoReassignmentInProgressError("x"))[:2] == (404, 40411)


def test_a_cancel_that_would_leave_no_in_sync_replica_is_refused() -> None:
    c = Cluster(brokers=4)
    c.create("t", 1, 1)
    s = c.state()
    new = next(n for n in range(4) if n != s.leader)
    reassign(c, [new])
    catch_up(c)
    c.advance(1_000, alive=(0, 1, 2, 3))  # leadership moved to the new replica
    assert c.state().leader == new and c.state().reassigning
    c.commit(c.controller.alter_partition(new, c.epochs[new], "t", 0, c.state().leader_epoch,
                                          c.state().partition_epoch, [new])[0])  # the old one fell out
    with pytest.raises(InvalidReplicaAssignmentError):
        c.controller.alter_partition_reassignments([("t", 0, None)])


def test_a_leader_in_the_new_replicas_moves_back_on_cancel() -> None:
    c = Cluster(brokers=4)
    c.create("t", 1, 2)
    s = c.state()
    spare = [n for n in range(4) if n not in s.replicas]
    reassign(c, spare)
    catch_up(c)
    c.advance(1_000, alive=(0, 1, 2, 3))
    moved = c.state()
    assert moved.leader == spare[0] and moved.reassigning
    reassign(c, None)
    back = c.state()
    assert back.replicas == s.replicas and back.leader in s.replicas and back.leader_epoch == moved.leader_epoch + 1


def test_requests_are_validated_before_anything_is_proposed() -> None:
    c = Cluster(brokers=3)
    c.create("t", 2, 2)
    ctrl = c.controller
    for bad in ([], [0, 0], [0, 9], ["a"], [-1]):
        with pytest.raises(InvalidReplicaAssignmentError):
            ctrl.alter_partition_reassignments([("t", 0, bad)])
    assert http_error(InvalidReplicaAssignmentError("x"))[:2] == (422, 42213)
    with pytest.raises(TopicNotFoundError):
        ctrl.alter_partition_reassignments([("nope", 0, [0])])
    with pytest.raises(PartitionNotFoundError):
        ctrl.alter_partition_reassignments([("t", 2, [0])])
    with pytest.raises(InvalidRequestError):
        ctrl.alter_partition_reassignments([("t", 0, [0]), ("t", 0, [1])])
    # One bad entry: nothing at all is proposed.
    with pytest.raises(InvalidReplicaAssignmentError):
        ctrl.alter_partition_reassignments([("t", 0, [1, 2]), ("t", 1, [7])])
    # The same replicas again: nothing to do.
    assert ctrl.alter_partition_reassignments([("t", 0, list(c.state().replicas))]) == []


def test_a_new_target_while_moving_starts_from_the_current_replicas() -> None:
    c = Cluster(brokers=5)
    c.create("t", 1, 2)
    s = c.state()
    spare = [n for n in range(5) if n not in s.replicas]
    reassign(c, [s.replicas[0], spare[0]])
    reassign(c, [s.replicas[0], spare[1]])
    s2 = c.state()
    assert s2.target == (s.replicas[0], spare[1])
    assert set(s2.removing) == {s.replicas[1], spare[0]} and s2.adding == (spare[1],)


def test_the_unclean_election_never_picks_a_new_replica() -> None:
    c = Cluster(brokers=3, unclean_leader_election_enable=True)
    c.create("t", 1, 1)
    s = c.state()
    new = next(n for n in range(3) if n != s.leader)
    reassign(c, [new])
    others = tuple(n for n in range(3) if n != s.leader)
    c.advance(10_000, alive=others)  # the only in-sync replica dies
    after = c.state()
    assert after.leader != new and after.reassigning


def test_the_reassignment_survives_a_controller_failover_through_the_log() -> None:
    c = Cluster(brokers=4)
    c.create("t", 3, 2)
    targets = {p: [n for n in range(4) if n not in c.state("t", p).replicas] for p in range(3)}
    c.commit(c.controller.alter_partition_reassignments([("t", p, tgt) for p, tgt in targets.items()]))
    # A new controller on a voter that replays the same log (here: a snapshot of it).
    image = ClusterImage()
    image.restore(c.image.snapshot())
    assert image.partition("t", 1).adding == tuple(targets[1])
    c.image = image
    c.term += 1
    c.controller = Controller(image, c.config)
    c.controller.activate(c.now)
    for p in range(3):
        catch_up(c, "t", p)
    c.advance(3_000, alive=(0, 1, 2, 3))
    for p in range(3):
        s = c.state("t", p)
        assert s.replicas == tuple(targets[p]) and s.leader == targets[p][0] and not s.reassigning


def test_random_moves_and_cancels_keep_the_invariants() -> None:
    rng = random.Random(18)
    c = Cluster(brokers=5)
    c.create("t", 4, 3)
    for _ in range(200):
        p = rng.randrange(4)
        s = c.state("t", p)
        action = rng.random()
        if action < 0.35:
            reassign(c, rng.sample(range(5), rng.randint(1, 4)), p=p)
        elif action < 0.5 and s.reassigning:
            try:
                reassign(c, None, p=p)
            except InvalidReplicaAssignmentError:
                pass
        elif action < 0.8 and s.leader >= 0:
            catch_up(c, "t", p)
        else:
            c.advance(1_000, alive=(0, 1, 2, 3, 4))  # commit() checks every invariant on every record
    for p in range(4):
        catch_up(c, "t", p)
    c.advance(3_000, alive=(0, 1, 2, 3, 4))
    assert not any(c.state("t", p).reassigning for p in range(4))


def test_preferred_leader_election_of_named_partitions() -> None:
    c = Cluster(brokers=3)
    c.create("t", 2, 3)
    s = c.state("t", 0)
    # Leadership first (as `nodes drain` does): the leader goes last, then the first replica leads.
    reordered = list(s.replicas[1:]) + [s.leader]
    reassign(c, reordered)
    assert c.state("t", 0).replicas == tuple(reordered) and not c.state("t", 0).reassigning
    assert c.state("t", 0).leader == s.leader  # a reorder alone moves nothing
    other = c.state("t", 1)
    c.commit(c.controller.elect_leaders([("t", 0)]))
    after = c.state("t", 0)
    assert after.leader == reordered[0] and after.leader_epoch == s.leader_epoch + 1
    assert c.state("t", 1) == other  # only the named partitions
    assert c.controller.elect_leaders([("t", 0)]) == []  # already there
    # A preferred replica out of the ISR does not lead.
    c.alter_isr("t", 0, [after.leader])
    reassign(c, [reordered[1], reordered[0], reordered[2]])
    assert c.controller.elect_leaders([("t", 0)]) == []
    with pytest.raises(PartitionNotFoundError):
        c.controller.elect_leaders([("t", 5)])


def test_unclean_election_of_named_partitions_leads_from_outside_the_isr() -> None:
    c = Cluster(brokers=3)
    c.create("t", 2, 3)
    s = c.state("t", 0)
    c.alter_isr("t", 0, [s.leader])  # the followers fell out of the ISR
    others = tuple(n for n in range(3) if n != s.leader)
    c.advance(60_000, alive=others)  # the only ISR member dies: no clean leader
    lost = c.state("t", 0)
    assert lost.leader == -1
    # A partition that has a leader needs no election; PREFERRED does not elect from outside the ISR.
    assert c.controller.elect_leaders([("t", 1)], unclean=True) == []
    assert c.controller.elect_leaders([("t", 0)]) == []
    c.commit(c.controller.elect_leaders([("t", 0)], unclean=True))
    after = c.state("t", 0)
    assert after.leader in others and after.isr == (after.leader,) and after.leader_epoch > lost.leader_epoch
