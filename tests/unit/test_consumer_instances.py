"""Consumer instance settings and limits, without a node process."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.consumer import ConsumerManager
from lakelog.ingest_api.groups.consumer_records import InstanceRecords
from lakelog.ingest_api.groups.consumer_subscription import SubscriptionState
from lakelog.ingest_api.groups.consumer_config import validate_name
from lakelog.ingest_api.groups.errors import ConsumerAlreadyExistsError, ConsumerInstanceNotFoundError, TooManyInstancesError


def manager(**config: str) -> ConsumerManager:
    node = SimpleNamespace(node_id=1, config=NodeConfig(config), image=SimpleNamespace(topics={}, brokers={}))
    return ConsumerManager(node, groups=None)  # type: ignore[arg-type]


def test_defaults_and_bounds_of_instance_settings():
    m = manager(**{"group.min.session.timeout.ms": "1000", "consumer.max.poll.records": "100"})
    cfg = m.parse_config({})
    assert (cfg.format, cfg.auto_offset_reset, cfg.auto_commit_enable, cfg.strategies) == (
        "binary", "latest", True, ("range",))
    assert cfg.session_timeout_ms == 10_000 and cfg.heartbeat_interval_ms == 3000 and cfg.max_poll_records == 100
    cfg = m.parse_config({"format": "JSON", "auto.offset.reset": "smallest", "auto.commit.enable": "false",
                          "session.timeout.ms": 1500, "partition.assignment.strategy": "sticky,roundrobin"})
    assert (cfg.format, cfg.auto_offset_reset, cfg.auto_commit_enable, cfg.strategies) == (
        "json", "earliest", False, ("sticky", "roundrobin"))
    assert cfg.heartbeat_interval_ms == 500  # a third of the session when the default would not fit
    for bad in ({"format": "thrift"}, {"auto.offset.reset": "never"}, {"auto.commit.enable": "yes"},
                {"session.timeout.ms": 999}, {"session.timeout.ms": True}, {"max.poll.records": 101},
                {"heartbeat.interval.ms": 0}, {"partition.assignment.strategy": "fair"}):
        with pytest.raises(InvalidRequestError):
            m.parse_config(bad)


def test_instance_limits_and_names():
    m = manager(**{"consumer.max.instances": "2"})
    cfg = m.parse_config({})
    m.create("g", "a", cfg)
    with pytest.raises(ConsumerAlreadyExistsError):
        m.create("g", "a", cfg)
    m.create("other-group", "a", cfg)  # names are per group
    with pytest.raises(TooManyInstancesError):
        m.create("g", "b", cfg)
    assert m.get("g", "a").name == "a"
    with pytest.raises(ConsumerInstanceNotFoundError):
        m.get("g", "b")
    assert m.new_name() != m.new_name()
    for bad in ("", "a/b", "x" * 250, "caf\u00e9", "a b"):
        with pytest.raises(InvalidRequestError):
            validate_name(bad, "name")


class _WaitingNode:
    """A node whose partitions never get records: each fetch waits its whole `wait_ms` (or is cancelled)."""

    def __init__(self) -> None:
        self.node_id = 1
        self.config = NodeConfig({})
        self.fetches: list[tuple[int, int]] = []  # (partition, wait_ms)
        self.cancelled = 0

    def leader_of(self, topic: str, partition: int) -> int:
        return self.node_id

    async def fetch_wait(self, topic: str, partition: int, offset: int, max_bytes: int, wait_ms: int):
        self.fetches.append((partition, wait_ms))
        try:
            await asyncio.sleep(wait_ms / 1000)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        return SimpleNamespace(records=b"")


def _records(node: _WaitingNode, state: SubscriptionState) -> InstanceRecords:
    cfg = manager().parse_config({})
    return InstanceRecords(node, None, "g", "a", cfg, None, state)  # type: ignore[arg-type]


def test_a_records_long_poll_is_one_wait_per_partition_not_a_loop_of_rounds():
    node, state = _WaitingNode(), SubscriptionState()
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    state.set_assignment(tps)
    state.positions.update({tp: 0 for tp in tps})
    assert asyncio.run(_records(node, state).records(1500, 1 << 20)) == []
    # One look that does not wait, then one wait per partition for the rest of the timeout.
    assert sorted(p for p, _ in node.fetches) == [0, 0, 1, 1]
    assert sorted(w for _, w in node.fetches)[:2] == [0, 0] and min(w for _, w in node.fetches if w) > 1000


def test_a_replaced_assignment_ends_the_wait_and_the_new_partitions_are_fetched():
    node, state = _WaitingNode(), SubscriptionState()
    state.set_assignment([TopicPartition("t", 0)])
    state.positions[TopicPartition("t", 0)] = 0

    async def scenario() -> list:
        call = asyncio.ensure_future(_records(node, state).records(60_000, 1 << 20))
        while len(node.fetches) < 2:  # the long wait has begun
            await asyncio.sleep(0.01)
        state.set_assignment([TopicPartition("t", 5)])
        state.positions[TopicPartition("t", 5)] = 0
        while not any(p == 5 for p, _ in node.fetches):
            await asyncio.sleep(0.01)
        call.cancel()
        return node.fetches

    fetches = asyncio.run(scenario())
    assert node.cancelled >= 1 and fetches[:2] == [(0, 0), (0, fetches[1][1])] and fetches[1][1] > 0
