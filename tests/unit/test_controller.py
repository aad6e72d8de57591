"""The active controller and replica placement, driven through the metadata image as the Raft host will."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.infra.config import ConfigError
from lakelog.ingest_api.cluster.controller import Controller
from lakelog.ingest_api.cluster.controller_brokers import HeartbeatReply
from lakelog.ingest_api.cluster.controller_config import ControllerConfig
from lakelog.ingest_api.cluster.errors import (
    BrokerNotRegisteredError,
    FencedBrokerError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidIsrError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicIdError,
    InvalidUpdateVersionError,
    NotControllerError,
    NotPartitionLeaderError,
)
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.image_values import (
    NO_LEADER,
    PartitionState,
    check_partition_state,
    encode_record,
)
from lakelog.ingest_api.cluster.placement import assign_replicas, rack_alternated
from lakelog.ingest_api.errors import (
    InvalidRequestError,
    InvalidTopicError,
    RequestTooLargeError,
    TopicExistsError,
    TopicNotFoundError,
)
from lakelog.ingest_api.error_table import http_error
from lakelog.ingest_api.raft.messages import Entry, EntryKind

SESSION_MS = 9_000


class Cluster:
    """An image, its active controller, a clock, and brokers that heartbeat on request."""

    def __init__(self, brokers: int = 0, racks: list[str] | None = None, **config) -> None:
        config.setdefault("leader_imbalance_check_interval_ms", 10**12)  # rebalance only when a test asks
        self.config = ControllerConfig(broker_session_timeout_ms=SESSION_MS, **config)
        self.image = ClusterImage()
        self.term = 1
        self.now = 1_000
        self.image.apply(Entry(1, self.term, EntryKind.NO_OP))
        self.controller = Controller(self.image, self.config)
        self.controller.activate(self.now)
        self.epochs: dict[int, int] = {}
        for n in range(brokers):
            self.add_broker(n, racks[n] if racks else None)

    def commit(self, records: list[dict]) -> list[dict]:
        """Propose, commit and apply, as the Raft host does; every record must take effect."""
        for record in records:
            index = self.image.last_applied_index + 1
            self.image.apply(Entry(index, self.term, EntryKind.COMMAND, encode_record(record)))
            assert self.image.skipped_at(index) is None, (record, self.image.skipped_at(index))
        check_invariants(self.image)
        return records

    def add_broker(self, node_id: int, rack: str | None = None, incarnation: str = "inc-1") -> int:
        records, epoch = self.controller.register_broker(node_id, incarnation, f"node{node_id}", 8080, rack, self.now)
        self.commit(records)
        self.epochs[node_id] = epoch
        assert self.image.broker(node_id).fenced
        records, reply = self.heartbeat(node_id)
        assert reply == HeartbeatReply(False, False, False)
        return epoch

    def heartbeat(self, node_id: int, **kw) -> tuple[list[dict], HeartbeatReply]:
        kw.setdefault("caught_up_offset", self.image.last_applied_index)
        records, reply = self.controller.heartbeat(node_id, self.epochs[node_id], self.now, **kw)
        self.commit(records)
        return records, reply

    def advance(self, ms: int, *, alive: tuple[int, ...] = ()) -> list[dict]:
        """Move the clock in heartbeat-sized steps, `alive` brokers heartbeating, ticking each step."""
        records: list[dict] = []
        step = 1_000
        while ms > 0:
            self.now += min(step, ms)
            ms -= step
            for n in alive:
                self.heartbeat(n)
            records += self.commit(self.controller.tick(self.now))
        return records

    def create(self, name: str, partitions: int, rf: int, configs: dict | None = None) -> list[PartitionState]:
        self.commit(self.controller.create_topic(name, partitions, rf, configs or {}, f"id-{name}", self.now))
        return list(self.image.topic(name).partitions)

    def state(self, topic: str = "t", p: int = 0) -> PartitionState:
        return self.image.partition(topic, p)

    def alter_isr(self, topic: str, p: int, isr: list[int]) -> PartitionState:
        s = self.state(topic, p)
        records, new = self.controller.alter_partition(s.leader, self.epochs[s.leader], topic, p, s.leader_epoch,
                                                       s.partition_epoch, isr)
        self.commit(records)
        assert self.state(topic, p) == new
        return new


def check_invariants(image: ClusterImage) -> None:
    for t, p, state in image.iter_partitions():
        check_partition_state(state, f"{t.name}-{p}")


# --- placement -----------------------------------------------------------------------------------

def test_placement_matches_kafka_admin_utils() -> None:
    # Kafka's AdminUtilsTest.testReplicaAssignment and AdminRackAwareTest expectations.
    assert assign_replicas([(i, None) for i in range(5)], 10, 3, 0, 0) == [
        [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1],
        [0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2]]
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated(racks) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated({k: v for k, v in racks.items() if k != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas(list(racks.items()), 7, 3, 0, 0) == [
        [0, 3, 1], [3, 1, 5], [1, 5, 4], [5, 4, 2], [4, 2, 0], [2, 0, 3], [0, 4, 2]]


def test_placement_refuses_bad_replication_factors() -> None:
    brokers = [(1, None), (2, None)]
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(brokers, 3, 3, 0, 0)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas(brokers, 3, 0, 0, 0)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas([], 1, 1, 0, 0)
    with pytest.raises(InvalidPartitionsError):
        assign_replicas(brokers, -1, 1, 0, 0)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_placement_properties(data) -> None:
    ids = data.draw(st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True))
    rack_aware = data.draw(st.booleans())
    racks = [data.draw(st.sampled_from("abcd")) if rack_aware else None for _ in ids]
    brokers = list(zip(ids, racks))
    partitions = data.draw(st.integers(1, 60))
    rf = data.draw(st.integers(1, len(ids)))
    start, shift = data.draw(st.integers(0, 10**6)), data.draw(st.integers(0, 10**6))
    out = assign_replicas(brokers, partitions, rf, start, shift)
    assert out == assign_replicas(list(reversed(brokers)), partitions, rf, start, shift)  # deterministic
    assert len(out) == partitions
    rack_of = dict(brokers)
    for replicas in out:
        assert len(replicas) == rf and len(set(replicas)) == rf and set(replicas) <= set(ids)
        if rack_aware:
            assert len({rack_of[r] for r in replicas}) == min(rf, len(set(racks)))
    leaders = Counter(r[0] for r in out)
    counts = [leaders.get(i, 0) for i in ids]
    assert max(counts) - min(counts) <= 1


def test_placement_spreads_followers_too() -> None:
    out = assign_replicas([(i, None) for i in range(6)], 60, 3, 2, 5)
    load = Counter(r for replicas in out for r in replicas)
    assert set(load.values()) == {30}


# --- topics --------------------------------------------------------------------------------------

def test_create_topic_spreads_leaders_and_starts_fully_in_sync() -> None:
    c = Cluster(brokers=3)
    states = c.create("t", 6, 3)
    assert Counter(s.leader for s in states) == {0: 2, 1: 2, 2: 2}
    for s in states:
        assert s.leader == s.replicas[0] and s.isr == s.replicas and len(set(s.replicas)) == 3
        assert (s.leader_epoch, s.partition_epoch) == (0, 0)
    # Topics start on different brokers (the start offset comes from the name).
    firsts = {c.create(f"topic-{i}", 1, 1)[0].leader for i in range(12)}
    assert len(firsts) > 1


def test_create_topic_validates() -> None:
    c = Cluster(brokers=3, max_partitions_per_topic=100)
    c.create("t", 1, 1)
    with pytest.raises(TopicExistsError):
        c.controller.create_topic("t", 1, 1, {}, "id-other", c.now)
    with pytest.raises(InvalidTopicIdError):
        c.controller.create_topic("u", 1, 1, {}, "id-t", c.now)
    with pytest.raises(InvalidTopicError):
        c.controller.create_topic("bad name", 1, 1, {}, "id-x", c.now)
    with pytest.raises(InvalidPartitionsError):
        c.controller.create_topic("u", 0, 1, {}, "id-u", c.now)
    with pytest.raises(InvalidPartitionsError):
        c.controller.create_topic("u", 101, 1, {}, "id-u", c.now)
    with pytest.raises(InvalidReplicationFactorError):
        c.controller.create_topic("u", 1, 4, {}, "id-u", c.now)
    c.commit(c.controller.heartbeat(2, c.epochs[2], c.now, caught_up_offset=0, want_fence=True)[0])
    with pytest.raises(InvalidReplicationFactorError):  # only unfenced brokers count
        c.controller.create_topic("u", 1, 3, {}, "id-u", c.now)
    assert all(2 not in s.replicas for s in c.create("u", 4, 2))
    # Defaults from the config.
    c2 = Cluster(brokers=2, num_partitions=3, default_replication_factor=2)
    c2.commit(c2.controller.create_topic("d", None, None, {}, "id-d", c2.now))
    assert [len(s.replicas) for s in c2.image.topic("d").partitions] == [2, 2, 2]


def test_create_topic_refuses_a_record_above_the_size_limit() -> None:
    c = Cluster(brokers=3, max_record_bytes=2_000)
    with pytest.raises(RequestTooLargeError):
        c.controller.create_topic("t", 100, 3, {}, "id-t", c.now)


def test_delete_alter_configs_and_create_partitions() -> None:
    c = Cluster(brokers=3)
    c.create("t", 2, 2, {"retention.ms": "1"})
    c.commit(c.controller.alter_configs("t", {"cleanup.policy": "compact"}))
    assert c.image.topic("t").configs == {"cleanup.policy": "compact"}
    assert c.controller.alter_configs("t", {"cleanup.policy": "compact"}) == []
    c.commit(c.controller.create_partitions("t", 5))
    states = c.image.topic("t").partitions
    assert len(states) == 5 and all(len(s.replicas) == 2 and s.isr == s.replicas for s in states)
    assert Counter(s.leader for s in states).most_common(1)[0][1] <= 2
    with pytest.raises(InvalidPartitionsError):
        c.controller.create_partitions("t", 5)
    c.commit(c.controller.delete_topic("t"))
    assert c.image.topic("t") is None
    for call in (lambda: c.controller.delete_topic("t"), lambda: c.controller.alter_configs("t", {}),
                 lambda: c.controller.create_partitions("t", 9)):
        with pytest.raises(TopicNotFoundError):
            call()


# --- sessions, fencing, elections ----------------------------------------------------------------

def test_session_timeout_fences_and_elects_the_next_isr_member_in_replica_order() -> None:
    c = Cluster(brokers=3)
    c.commit(c.controller.create_topic("t", 1, 3, {}, "id-t", c.now))
    s = c.state()
    a, b, d = s.replicas
    # Reorder the ISR so ISR order and replica order differ: shrink to [a, d], then add b back last.
    c.alter_isr("t", 0, [a, d])
    c.alter_isr("t", 0, [a, d, b])
    assert c.state().isr == (a, d, b)
    survivors = (b, d)
    assert not c.advance(SESSION_MS, alive=survivors)  # not expired yet: nothing happens
    records = c.advance(1_000, alive=survivors)
    assert {"type": "fence_broker", "node_id": a, "broker_epoch": c.epochs[a]} in records
    s = c.state()
    assert c.image.broker(a).fenced
    assert s.leader == b  # first in replica order, not ISR order
    assert s.isr == (d, b) and s.leader_epoch == 1 and s.partition_epoch == 3


def test_last_isr_member_dies_partition_goes_offline_and_it_regains_leadership_on_return() -> None:
    c = Cluster(brokers=3)
    c.create("t", 1, 3)
    a, b, d = c.state().replicas
    c.alter_isr("t", 0, [a])
    c.advance(SESSION_MS + 1_000, alive=(b, d))
    s = c.state()
    assert (s.leader, s.isr, s.leader_epoch) == (NO_LEADER, (a,), 1)  # KIP-841: a stays in the ISR
    # b and d are live but out of the ISR: no clean election, however long we wait.
    c.advance(5_000, alive=(b, d))
    assert c.state().leader == NO_LEADER
    # a comes back (same process, same epoch): once caught up, it is unfenced and leads again.
    _, reply = c.heartbeat(a, caught_up_offset=0)
    assert reply.fenced
    _, reply = c.heartbeat(a)
    assert not reply.fenced
    s = c.state()
    assert (s.leader, s.isr, s.leader_epoch) == (a, (a,), 2)


def test_when_the_whole_isr_dies_at_once_the_leader_is_the_member_kept() -> None:
    c = Cluster(brokers=3)
    c.create("t", 1, 3)
    a, b, d = c.state().replicas
    c.alter_isr("t", 0, [a, d])
    c.advance(SESSION_MS + 1_000, alive=(b,))
    assert (c.state().leader, c.state().isr) == (NO_LEADER, (a,))
    c.heartbeat(d)  # d is back first, but it is out of the ISR now: still offline
    c.advance(1_000, alive=(b, d))
    assert c.state().leader == NO_LEADER
    c.heartbeat(a)
    assert (c.state().leader, c.state().isr) == (a, (a,))


def test_unclean_election_elects_the_first_live_replica_with_an_isr_of_one() -> None:
    for broker_default, topic_config, expect_unclean in [(True, None, True), (False, "true", True),
                                                         (True, "false", False), (False, None, False)]:
        c = Cluster(brokers=3, unclean_leader_election_enable=broker_default)
        configs = {"unclean.leader.election.enable": topic_config} if topic_config else {}
        c.create("t", 1, 3, configs)
        a, b, d = c.state().replicas
        c.alter_isr("t", 0, [a])
        c.advance(SESSION_MS + 1_000, alive=(d, b))
        s = c.state()
        if expect_unclean:
            assert (s.leader, s.isr) == (b, (b,)), (broker_default, topic_config)
        else:
            assert (s.leader, s.isr) == (NO_LEADER, (a,)), (broker_default, topic_config)


def test_fenced_followers_leave_the_isr_and_the_leader_stays() -> None:
    c = Cluster(brokers=3)
    c.create("t", 1, 3)
    a, b, d = c.state().replicas
    c.advance(SESSION_MS + 1_000, alive=(a, b))
    s = c.state()
    assert (s.leader, s.isr, s.leader_epoch) == (a, (a, b), 0)


def test_a_new_controller_grants_every_broker_a_full_session() -> None:
    c = Cluster(brokers=3)
    c.create("t", 3, 2)
    c.now += 10 * SESSION_MS  # nobody heartbeated for ages (the old controller's view is lost)
    c.controller.deactivate()
    c.term = 2
    c.image.apply(Entry(c.image.last_applied_index + 1, c.term, EntryKind.NO_OP))
    c.controller = Controller(c.image, c.config)
    c.controller.activate(c.now)
    assert c.commit(c.controller.tick(c.now)) == []
    assert not c.advance(SESSION_MS)  # still within the granted session
    records = c.advance(SESSION_MS, alive=(0, 1))
    assert [r["node_id"] for r in records if r["type"] == "fence_broker"] == [2]
    assert [b.node_id for b in c.image.live_brokers()] == [0, 1]


def test_a_controller_that_did_not_run_for_a_while_fences_nobody_for_that_silence() -> None:
    c = Cluster(brokers=3)
    c.create("t", 3, 3)
    assert not c.advance(2_000, alive=(0, 1, 2))
    # The controller's process stops for longer than a session: the brokers' heartbeats of that
    # time wait unread in its sockets, so it heard nothing. Its first check after the gap fences
    # nobody; every broker's session restarts from then.
    c.now += 2 * SESSION_MS
    assert c.commit(c.controller.tick(c.now)) == []
    assert [b.node_id for b in c.image.live_brokers()] == [0, 1, 2]
    # A broker that is really gone is fenced a session later; the others heartbeat on.
    assert not c.advance(SESSION_MS - 1_000, alive=(0, 1))
    records = c.advance(2_000, alive=(0, 1))
    assert [r["node_id"] for r in records if r["type"] == "fence_broker"] == [2]


def test_tick_does_not_propose_twice_while_its_records_are_in_flight() -> None:
    c = Cluster(brokers=3)
    c.create("t", 3, 3)
    c.now += SESSION_MS + 1
    for n in (1, 2):
        c.heartbeat(n)
    first = c.controller.tick(c.now)
    assert first and c.controller.tick(c.now + 100) == []  # nothing applied yet: no rescan, no duplicate
    c.commit(first)
    assert c.controller.tick(c.now + 200) == []
    # Had the host proposed them twice anyway, the second copy is skipped by apply.
    index = c.image.last_applied_index + 1
    c.image.apply(Entry(index, c.term, EntryKind.COMMAND, encode_record(first[-1])))
    assert c.image.skipped_at(index) is not None


def test_max_records_per_tick_defers_the_rest() -> None:
    c = Cluster(brokers=2, max_records_per_tick=3)
    c.create("t", 8, 2)
    records = c.advance(SESSION_MS + 1_000, alive=(1,))
    assert len(records) == 3 and records[0]["type"] == "fence_broker"  # the tick that fenced node 0
    assert [s.partition_epoch for s in c.image.topic("t").partitions] == [1, 1, 0, 0, 0, 0, 0, 0]
    c.advance(3_000, alive=(1,))
    assert all(s.isr == (1,) and s.leader == 1 for s in c.image.topic("t").partitions)


# --- registration and heartbeats -----------------------------------------------------------------

def test_registration_epochs_grow_and_retries_are_idempotent() -> None:
    c = Cluster(brokers=2)
    e0 = c.epochs[0]
    records, again = c.controller.register_broker(0, "inc-1", "node0", 8080, None, c.now)
    assert (records, again) == ([], e0)
    # Two new registrations in flight at once still get distinct, growing epochs.
    r1, e1 = c.controller.register_broker(5, "inc-a", "h", 1, None, c.now)
    r2, e2 = c.controller.register_broker(6, "inc-b", "h", 1, None, c.now)
    assert e0 < e1 < e2
    c.commit(r1 + r2)
    c.commit(c.controller.unregister_broker(5))
    r3, e3 = c.controller.register_broker(5, "inc-a", "h", 1, None, c.now)
    assert e3 > e2
    c.commit(r3)
    with pytest.raises(InvalidRequestError):
        c.controller.register_broker(7, "", "h", 1, None, c.now)


def test_a_registration_carries_the_nodes_kafka_listeners() -> None:
    c = Cluster(brokers=1)
    listeners = [["PLAINTEXT", "kafka5.example", 9096]]
    records, epoch = c.controller.register_broker(5, "inc-a", "h", 1, None, c.now, listeners)
    assert records[0]["kafka_listeners"] == listeners
    c.commit(records)
    assert c.image.brokers[5].kafka_listeners == (("PLAINTEXT", "kafka5.example", 9096),)
    assert c.controller.register_broker(5, "inc-a", "h", 1, None, c.now, listeners) == ([], epoch)  # a retry
    moved, _ = c.controller.register_broker(5, "inc-a", "h", 1, None, c.now, [["PLAINTEXT", "k", 9097]])
    assert moved  # a listener that moved is a new registration
    restored = type(c.image)()
    restored.restore(c.image.snapshot())
    assert restored.brokers[5].kafka_listeners == (("PLAINTEXT", "kafka5.example", 9096),)
    with pytest.raises(InvalidRequestError):
        c.controller.register_broker(6, "inc-b", "h", 1, None, c.now, [["PLAINTEXT", "h", 0]])
    with pytest.raises(InvalidRequestError):
        c.controller.register_broker(7, "i", "h", 0, None, c.now)


def test_unfencing_waits_until_the_broker_has_caught_up_to_its_registration() -> None:
    c = Cluster()
    records, epoch = c.controller.register_broker(3, "i", "h", 1, "r", c.now)
    c.commit(records)
    c.epochs[3] = epoch
    reg_index = c.image.broker(3).registration_index
    assert reg_index == c.image.last_applied_index
    assert c.heartbeat(3, caught_up_offset=reg_index - 1) == ([], HeartbeatReply(True, False, False))
    assert c.heartbeat(3, caught_up_offset=reg_index, want_fence=True)[1].fenced
    records, reply = c.heartbeat(3, caught_up_offset=reg_index)
    assert records == [{"type": "unfence_broker", "node_id": 3, "broker_epoch": epoch}] and not reply.fenced
    assert c.image.is_live(3)


def test_heartbeats_with_a_stale_epoch_are_fenced() -> None:
    c = Cluster(brokers=1)
    with pytest.raises(FencedBrokerError):
        c.controller.heartbeat(0, c.epochs[0] - 1, c.now, caught_up_offset=0)
    with pytest.raises(BrokerNotRegisteredError):
        c.controller.heartbeat(9, 1, c.now, caught_up_offset=0)
    assert isinstance(BrokerNotRegisteredError("x"), FencedBrokerError)
    assert http_error(FencedBrokerError("x"))[:2] == (409, 40907)


def test_a_restarted_node_replaces_its_registration_and_loses_its_leaderships() -> None:
    c = Cluster(brokers=3)
    c.create("t", 3, 3)
    led = [p for p, s in enumerate(c.image.topic("t").partitions) if s.leader == 0]
    assert led
    old_epoch = c.epochs[0]
    records, epoch = c.controller.register_broker(0, "inc-2", "node0", 8080, None, c.now)
    assert epoch > old_epoch and records[0]["type"] == "register_broker"
    c.commit(records)
    c.epochs[0] = epoch
    assert c.image.broker(0).fenced and c.image.broker(0).incarnation_id == "inc-2"
    for s in c.image.topic("t").partitions:
        assert s.leader != 0 and 0 not in s.isr
    with pytest.raises(FencedBrokerError):  # the old incarnation is fenced out
        c.controller.heartbeat(0, old_epoch, c.now, caught_up_offset=10**6)
    c.heartbeat(0)
    assert c.image.is_live(0)


# --- alter_partition -----------------------------------------------------------------------------

def test_alter_partition_is_a_compare_and_swap() -> None:
    c = Cluster(brokers=3)
    c.create("t", 1, 3)
    s = c.state()
    leader, f1, f2 = s.replicas
    ep = c.epochs[leader]
    records, new = c.controller.alter_partition(leader, ep, "t", 0, s.leader_epoch, s.partition_epoch, [leader, f1])
    assert new == PartitionState(s.replicas, (leader, f1), leader, 0, 1)
    assert records == [{"type": "partition_change", "topic": "t", "topic_id": "id-t", "partition": 0,
                        "isr": [leader, f1], "leader_epoch": 0, "partition_epoch": 1}]
    c.commit(records)
    # The same request again: its partition epoch is stale now.
    with pytest.raises(InvalidUpdateVersionError):
        c.controller.alter_partition(leader, ep, "t", 0, 0, 0, [leader])
    with pytest.raises(FencedLeaderEpochError):
        c.controller.alter_partition(leader, ep, "t", 0, 1, 1, [leader])
    with pytest.raises(NotPartitionLeaderError):
        c.controller.alter_partition(f1, c.epochs[f1], "t", 0, 0, 1, [f1])
    with pytest.raises(FencedBrokerError):
        c.controller.alter_partition(leader, ep - 1, "t", 0, 0, 1, [leader])
    with pytest.raises(InvalidIsrError):
        c.controller.alter_partition(leader, ep, "t", 0, 0, 1, [f1])  # lacks the leader
    with pytest.raises(InvalidIsrError):
        c.controller.alter_partition(leader, ep, "t", 0, 0, 1, [leader, 7])  # not a replica
    with pytest.raises(InvalidIsrError):
        c.controller.alter_partition(leader, ep, "t", 0, 0, 1, [leader, leader])
    with pytest.raises(TopicNotFoundError):
        c.controller.alter_partition(leader, ep, "nope", 0, 0, 1, [leader])
    # The same set again: nothing to do.
    assert c.controller.alter_partition(leader, ep, "t", 0, 0, 1, [f1, leader]) == ([], c.state())
    # A fenced broker cannot join the ISR; once back and unfenced, it can.
    c.commit(c.controller.heartbeat(f2, c.epochs[f2], c.now, caught_up_offset=0, want_fence=True)[0])
    with pytest.raises(IneligibleReplicaError):
        c.controller.alter_partition(leader, ep, "t", 0, 0, 1, [leader, f1, f2])
    assert http_error(IneligibleReplicaError("x"))[0] == 422
    c.heartbeat(f2)
    assert c.alter_isr("t", 0, [leader, f1, f2]).partition_epoch == 2
    # Removing a member is always allowed, even a fenced one.
    assert c.alter_isr("t", 0, [leader]).isr == (leader,)


# --- controlled shutdown -------------------------------------------------------------------------

def test_controlled_shutdown_moves_leaderships_then_lets_the_node_go() -> None:
    c = Cluster(brokers=3)
    c.create("t", 6, 2)
    c.create("solo", 1, 1)
    node = c.image.topic("solo").partitions[0].leader
    led = [p for p, s in enumerate(c.image.topic("t").partitions) if s.leader == node]
    assert led
    records, reply = c.heartbeat(node, want_shutdown=True)
    assert reply == HeartbeatReply(False, True, False)
    assert records[0] == {"type": "broker_controlled_shutdown", "node_id": node, "broker_epoch": c.epochs[node]}
    for p, s in enumerate(c.image.topic("t").partitions):
        assert s.leader != node and node not in s.isr  # moved away, and out of every ISR
        if p in led:
            assert s.leader == [r for r in s.replicas if r != node][0] and s.leader_epoch == 1
    # Its only-ISR-member partition keeps it as leader while it shuts down (nobody can take over).
    assert c.state("solo").leader == node
    assert c.image.broker(node).in_controlled_shutdown and c.image.is_live(node)
    with pytest.raises(IneligibleReplicaError):  # a shutting-down broker may not rejoin an ISR
        p = next(p for p, s in enumerate(c.image.topic("t").partitions) if node in s.replicas)
        s = c.state("t", p)
        c.controller.alter_partition(s.leader, c.epochs[s.leader], "t", p, s.leader_epoch, s.partition_epoch,
                                     list(s.isr) + [node])
    records, reply = c.heartbeat(node)  # the next heartbeat: nothing left to move
    assert reply == HeartbeatReply(True, True, True)
    assert c.image.broker(node).fenced
    assert c.state("solo") == PartitionState((node,), (node,), NO_LEADER, 1, 1)
    assert c.heartbeat(node, want_shutdown=True) == ([], HeartbeatReply(True, True, True))


def test_controlled_shutdown_of_a_node_that_leads_nothing() -> None:
    c = Cluster(brokers=2)
    _, reply = c.heartbeat(1, want_shutdown=True)
    assert reply == HeartbeatReply(False, True, False)
    _, reply = c.heartbeat(1, want_shutdown=True)
    assert reply.should_shut_down


# --- preferred leaders ---------------------------------------------------------------------------

def test_preferred_leader_rebalance_moves_leadership_back() -> None:
    c = Cluster(brokers=3, leader_imbalance_check_interval_ms=60_000)
    c.create("t", 3, 3)
    preferred = {p: s.replicas[0] for p, s in enumerate(c.image.topic("t").partitions)}
    c.advance(SESSION_MS + 1_000, alive=(1, 2))  # broker 0 dies
    assert all(s.leader != 0 for s in c.image.topic("t").partitions)
    c.heartbeat(0)  # back, unfenced, but not in any ISR yet: no move
    c.advance(60_000, alive=(0, 1, 2))
    assert all(s.leader != 0 for s in c.image.topic("t").partitions)
    for p, s in enumerate(c.image.topic("t").partitions):  # the leaders let it back in
        c.alter_isr("t", p, list(s.isr) + [0])
    records = c.advance(60_000, alive=(0, 1, 2))
    assert [s.leader for s in c.image.topic("t").partitions] == [preferred[p] for p in range(3)]
    assert len(records) == 1  # only the one partition whose preferred leader is 0 moved


def test_a_preferred_leader_back_in_the_isr_gets_its_leadership_back_soon() -> None:
    """Not at the next periodic check (5 minutes by default): preferred_leader_return_delay_ms after
    the ISR expansion that brought it back."""
    c = Cluster(brokers=3, leader_imbalance_check_interval_ms=300_000, preferred_leader_return_delay_ms=1_000)
    c.create("t", 3, 3)
    preferred = [s.replicas[0] for s in c.image.topic("t").partitions]
    c.advance(SESSION_MS + 1_000, alive=(1, 2))  # broker 0 dies
    c.heartbeat(0)
    c.advance(5_000, alive=(0, 1, 2))
    assert all(s.leader != 0 for s in c.image.topic("t").partitions)  # not in any ISR yet: no move
    for p, s in enumerate(c.image.topic("t").partitions):
        c.alter_isr("t", p, list(s.isr) + [0])
    c.advance(2_000, alive=(0, 1, 2))
    assert [s.leader for s in c.image.topic("t").partitions] == preferred
    # A burst of expansions pushes the rebalance back until it is over.
    c.advance(SESSION_MS + 1_000, alive=(1, 2))  # broker 0 dies again
    c.heartbeat(0)
    for p, s in enumerate(c.image.topic("t").partitions):
        c.alter_isr("t", p, list(s.isr) + [0])
        c.advance(600, alive=(0, 1, 2))
        assert all(s.leader != 0 for s in c.image.topic("t").partitions)
    c.advance(1_000, alive=(0, 1, 2))
    assert [s.leader for s in c.image.topic("t").partitions] == preferred


def test_a_rebalance_moves_a_few_leaders_per_tick() -> None:
    """Heartbeats wait while the controller commits its moves: a big rebalance is spread over ticks."""
    c = Cluster(brokers=3, leader_imbalance_check_interval_ms=300_000, preferred_leader_return_delay_ms=1_000,
                rebalance_moves_per_tick=4)
    c.create("t", 30, 3)
    preferred = [s.replicas[0] for s in c.image.topic("t").partitions]
    c.advance(SESSION_MS + 1_000, alive=(1, 2))
    c.heartbeat(0)
    for p, s in enumerate(c.image.topic("t").partitions):
        c.alter_isr("t", p, list(s.isr) + [0])
    c.now += 1_000
    for h in (0, 1, 2):
        c.heartbeat(h)
    assert len(c.commit(c.controller.tick(c.now))) == 4
    assert len(c.commit(c.controller.tick(c.now + 100))) == 4
    c.advance(5_000, alive=(0, 1, 2))
    assert [s.leader for s in c.image.topic("t").partitions] == preferred


def test_no_rebalance_when_disabled_but_operators_can_elect() -> None:
    c = Cluster(brokers=2, auto_leader_rebalance_enable=False, leader_imbalance_check_interval_ms=0)
    c.create("t", 2, 2)
    c.commit(c.controller.heartbeat(0, c.epochs[0], c.now, caught_up_offset=0, want_fence=True)[0])
    c.heartbeat(0)
    for p, s in enumerate(c.image.topic("t").partitions):
        c.alter_isr("t", p, [1, 0])
    c.advance(5_000, alive=(0, 1))
    assert [s.leader for s in c.image.topic("t").partitions] == [1, 1]
    c.commit(c.controller.elect_preferred_leaders("t"))
    assert sorted(s.leader for s in c.image.topic("t").partitions) == [0, 1]
    with pytest.raises(TopicNotFoundError):
        c.controller.elect_preferred_leaders("nope")


# --- producer ids --------------------------------------------------------------------------------

def test_producer_id_blocks_never_overlap() -> None:
    c = Cluster(brokers=2, producer_id_block_size=100)
    blocks = []
    pending = []
    for i in range(5):  # some in flight at once
        records, first, count = c.controller.allocate_producer_ids(i % 2, c.epochs[i % 2])
        blocks.append((first, count))
        pending += records
        if i % 2:
            c.commit(pending)
            pending = []
    c.commit(pending)
    # A new controller continues above every committed block.
    c.controller = Controller(c.image, c.config)
    c.controller.activate(c.now)
    _, first, count = c.controller.allocate_producer_ids(0, c.epochs[0])
    blocks.append((first, count))
    ranges = sorted(blocks)
    assert all(a + n <= b for (a, n), (b, _) in zip(ranges, ranges[1:]))
    assert c.image.next_producer_id == 500
    with pytest.raises(FencedBrokerError):
        c.controller.allocate_producer_ids(0, c.epochs[0] + 1)


# --- misc ----------------------------------------------------------------------------------------

def test_an_inactive_controller_refuses_everything() -> None:
    c = Cluster(brokers=1)
    c.controller.deactivate()
    for call in (lambda: c.controller.tick(c.now), lambda: c.controller.create_topic("t", 1, 1, {}, "i", c.now),
                 lambda: c.controller.heartbeat(0, c.epochs[0], c.now, caught_up_offset=0),
                 lambda: c.controller.register_broker(1, "i", "h", 1, None, c.now)):
        with pytest.raises(NotControllerError) as e:
            call()
        assert http_error(e.value)[:2] == (421, 42102)


def test_config_bounds() -> None:
    with pytest.raises(ConfigError):
        ControllerConfig(broker_session_timeout_ms=0)
    with pytest.raises(ConfigError):
        ControllerConfig(num_partitions=10, max_partitions_per_topic=5)
    with pytest.raises(ConfigError):
        ControllerConfig(producer_id_block_size=True)


def test_random_failures_keep_invariants_and_leaders_live() -> None:
    seed = 20240601
    print(f"seed={seed}")
    rng = random.Random(seed)
    c = Cluster(brokers=5, racks=["a", "a", "b", "b", "c"], leader_imbalance_check_interval_ms=20_000,
                unclean_leader_election_enable=False)
    for i in range(4):
        c.create(f"t{i}", 4, 3)
    up = set(range(5))
    last_epochs: dict[tuple[str, int], tuple[int, int]] = {}
    for _ in range(300):
        action = rng.random()
        if action < 0.05 and len(up) > 1:
            up.discard(rng.choice(sorted(up)))  # crash
        elif action < 0.12:
            n = rng.randrange(5)
            if n not in up:
                up.add(n)
                if rng.random() < 0.5:  # restart with a new incarnation
                    records, c.epochs[n] = c.controller.register_broker(n, f"inc-{rng.random()}", f"node{n}",
                                                                         8080, c.image.broker(n).rack, c.now)
                    c.commit(records)
        elif action < 0.3:  # a leader grows its ISR with every live replica, as followers catch up
            t, p, s = rng.choice(list(c.image.iter_partitions()))
            if s.leader != NO_LEADER and s.leader in up:
                isr = list(s.isr) + [r for r in s.replicas if r not in s.isr and c.image.is_live(r)
                                     and not c.image.broker(r).in_controlled_shutdown]
                c.alter_isr(t.name, p, isr)
        c.advance(rng.choice([500, 1_000, 3_000]), alive=tuple(sorted(up)))
        for t, p, s in c.image.iter_partitions():
            if s.leader != NO_LEADER:
                assert c.image.is_live(s.leader), (t.name, p, s)
            elif any(c.image.is_live(r) for r in s.isr):
                raise AssertionError(f"{t.name}-{p} is offline with a live ISR member: {s}")
            key = (t.name, p)
            assert (s.leader_epoch, s.partition_epoch) >= last_epochs.get(key, (0, 0))
            last_epochs[key] = (s.leader_epoch, s.partition_epoch)
