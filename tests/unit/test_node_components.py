"""The node's components without HTTP: the controller-op table and the broker session's state machine."""

from __future__ import annotations

import time

import pytest

from lakelog.infra.errors import InvariantViolation
from lakelog.ingest_api.broker.broker_session import BrokerSession, BrokerState
from lakelog.ingest_api.cluster.controller import Controller
from lakelog.ingest_api.cluster.controller_config import ControllerConfig
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.image_values import encode_record
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.broker.controller_host import OPS
from lakelog.ingest_api.errors import TopicExistsError
from lakelog.ingest_api.raft.messages import Entry, EntryKind
from lakelog.ingest_api.security.records import CONTROLLER_OPS as SECURITY_OPS
from lakelog.ingest_api.schemas.state import CONTROLLER_OPS as SCHEMA_OPS
from lakelog.ingest_api.cluster.broker_configs import CONTROLLER_OPS as BROKER_CONFIG_OPS


def _commit(image: ClusterImage, records: list[dict]) -> None:
    for record in records:
        image.apply(Entry(image.last_applied_index + 1, 1, EntryKind.COMMAND, encode_record(record)))


def _controller(image: ClusterImage) -> Controller:
    ctrl = Controller(image, ControllerConfig())
    ctrl.activate(0)
    return ctrl


def test_every_controller_op_is_in_the_table():
    assert set(OPS) == {"register_broker", "heartbeat", "create_topic", "delete_topic", "alter_configs",
                        "create_partitions", "alter_partition", "alter_partitions", "allocate_producer_ids", "alter_partition_reassignments",
                        "unregister_broker",
                        "elect_leaders", *SECURITY_OPS, *SCHEMA_OPS, *BROKER_CONFIG_OPS}


def test_ops_turn_arguments_into_records_and_result_fields():
    image = ClusterImage()
    ctrl = _controller(image)
    records, result = OPS["register_broker"].run(ctrl, image, {"node_id": 1, "incarnation_id": "x", "host": "h",
                                                               "port": 1}, 0)
    assert result["broker_epoch"] >= 1 and records
    _commit(image, records)
    epoch = result["broker_epoch"]
    records, result = OPS["heartbeat"].run(ctrl, image, {"node_id": 1, "broker_epoch": epoch,
                                                         "caught_up_offset": image.last_applied_index}, 0)
    assert result == {"fenced": False, "in_controlled_shutdown": False, "should_shut_down": False}
    _commit(image, records)
    args = {"name": "t", "partitions": 2, "replication_factor": 1}
    records, result = OPS["create_topic"].run(ctrl, image, args, 0)
    _commit(image, records)
    OPS["create_topic"].check(image, args, result)  # created with that id: passes
    assert len(image.topics["t"].partitions) == 2
    # A concurrent creation of the same name won: its id is not ours, so the request failed.
    with pytest.raises(TopicExistsError):
        OPS["create_topic"].check(image, args, {"topic_id": "another"})


def _session() -> BrokerSession:
    return BrokerSession(NodeConfig({}), ClusterImage(), "inc")


def test_broker_session_transitions_are_checked():
    s = _session()
    assert s.state == BrokerState.UNREGISTERED and not s.ready
    s.transition(BrokerState.REGISTERED)
    s.broker_epoch = 7
    s.transition(BrokerState.REGISTERED)  # a repeated transition is allowed (retries)
    s.transition(BrokerState.UNREGISTERED)  # fenced: register again
    assert s.broker_epoch == -1
    s.transition(BrokerState.SHUTTING_DOWN)
    with pytest.raises(InvariantViolation):
        s.transition(BrokerState.REGISTERED)
    s.transition(BrokerState.STOPPED)
    assert s.stopped.is_set()
    with pytest.raises(InvariantViolation):
        s.transition(BrokerState.SHUTTING_DOWN)
    s.shut_down()  # a stopped session stays stopped
    assert s.state == BrokerState.STOPPED


def test_ready_needs_registration_a_live_lease_caught_up_metadata_and_an_unfenced_broker():
    s = _session()
    ctrl = _controller(s.image)
    records, epoch = ctrl.register_broker(s.node_id, "inc", "h", 1, None, 0)
    _commit(s.image, records)
    s.transition(BrokerState.REGISTERED)
    s.broker_epoch = epoch
    s.session_valid_until = time.monotonic() + 60
    assert not s.ready  # registered but still fenced
    records, _ = ctrl.heartbeat(s.node_id, epoch, 0, caught_up_offset=s.image.last_applied_index)
    _commit(s.image, records)
    assert s.ready
    s.catch_up_index = s.image.last_applied_index + 1
    assert not s.ready  # a lapsed session must apply the metadata up to the renewing heartbeat first
    s.catch_up_index = 0
    s.session_valid_until = time.monotonic() - 1
    assert not s.ready  # the lease ran out
    s.session_valid_until = time.monotonic() + 60
    s.shut_down()
    assert not s.ready


def _registered_pair(config: dict) -> BrokerSession:
    """A registered session of node 1 in an image where node 2 is a serving broker too."""
    s = BrokerSession(NodeConfig({"node.id": 1, **config}), ClusterImage(), "inc")
    ctrl = _controller(s.image)
    for node_id in (1, 2):
        records, epoch = ctrl.register_broker(node_id, "inc", "h", node_id, None, 0)
        _commit(s.image, records)
        records, _ = ctrl.heartbeat(node_id, epoch, 0, caught_up_offset=s.image.last_applied_index)
        _commit(s.image, records)
        if node_id == 1:
            s.broker_epoch = epoch
    s.transition(BrokerState.REGISTERED)
    assert s.image.serving_brokers() == [1, 2]
    return s


def test_controlled_shutdown_stops_waiting_once_the_controller_quorum_is_gone(caplog):
    """The rest of the cluster stopped first: no Raft leader, no one to move the leaderships to."""
    import asyncio
    import logging

    s = _registered_pair({"controller.quorum.election.timeout.ms": 100, "controlled.shutdown.timeout.ms": 600_000})
    calls = []

    async def call(op, args, **kwargs):
        calls.append(op)
        await asyncio.sleep(3600)  # no controller answers

    async def run():
        await asyncio.wait_for(s.controlled_shutdown(call, lambda: False), 60)  # a hang guard, not a speed bound
    with caplog.at_level(logging.INFO, logger="lakelog.node"):
        asyncio.run(run())
    assert s.state == BrokerState.SHUTTING_DOWN and calls == ["heartbeat"]
    assert any("no controller quorum" in r.getMessage() for r in caplog.records)


def test_controlled_shutdown_keeps_asking_while_a_controller_is_known(caplog):
    """A known leader that has not answered yet is waited for (here until the shutdown's own timeout)."""
    import asyncio
    import logging

    s = _registered_pair({"controller.quorum.election.timeout.ms": 100, "controlled.shutdown.timeout.ms": 1500})

    async def call(op, args, **kwargs):
        await asyncio.sleep(3600)

    with caplog.at_level(logging.INFO, logger="lakelog.node"):
        asyncio.run(asyncio.wait_for(s.controlled_shutdown(call, lambda: True), 60))
    messages = [r.getMessage() for r in caplog.records]
    assert any("controlled shutdown timed out" in m for m in messages)
    assert not any("no controller quorum" in m for m in messages)


def test_a_node_that_is_not_ready_refuses_only_the_partitions_it_would_serve_itself(tmp_path):
    """Readiness is per partition: a node catching up names a live leader elsewhere (its produce is
    forwarded there) and refuses, as not ready, what it would serve itself, a partition whose
    leader is not live in its view, and a topic it does not know yet."""
    from lakelog.ingest_api.errors import NotReadyError
    from lakelog.ingest_api.node import Node

    node = Node(NodeConfig({"node.id": 1, "log.dirs": str(tmp_path)}))
    ctrl = _controller(node.image)
    for n in (1, 2, 3):
        records, epoch = ctrl.register_broker(n, "inc", "h", 8080 + n, None, 0)
        _commit(node.image, records)
        if n != 3:  # node 3 stays fenced
            records, _ = ctrl.heartbeat(n, epoch, 0, caught_up_offset=node.image.last_applied_index)
            _commit(node.image, records)
    _commit(node.image, [{"type": "create_topic", "name": "t", "topic_id": "id-t", "configs": {}, "partitions": [
        {"replicas": [r, o], "isr": [r, o], "leader": r, "leader_epoch": 0, "partition_epoch": 0}
        for r, o in ((2, 1), (1, 2), (3, 1))]}])
    assert not node.ready
    assert node.leader_of("t", 0) == 2  # led by live node 2: forwarded there
    for partition in (1, 2):  # led by this node, or by fenced node 3
        with pytest.raises(NotReadyError):
            node.leader_of("t", partition)
    with pytest.raises(NotReadyError):
        node.leader_of("unknown", 0)
    assert node.producible_topic("t").partitions == 3  # a produce to the topic is routed per partition
    with pytest.raises(NotReadyError):
        node.producible_topic("unknown")


def test_the_isr_changes_of_many_partitions_are_one_request_and_one_metadata_entry():
    from lakelog.ingest_api.cluster.partition_change import batch_changes

    image = ClusterImage()
    ctrl = _controller(image)
    epochs = {}
    for n in (1, 2):
        records, epochs[n] = ctrl.register_broker(n, "inc", "h", 8080 + n, None, 0)
        _commit(image, records)
        records, _ = ctrl.heartbeat(n, epochs[n], 0, caught_up_offset=image.last_applied_index)
        _commit(image, records)
    _commit(image, [{"type": "create_topic", "name": "t", "topic_id": "id-t", "configs": {}, "partitions": [
        {"replicas": [1, 2], "isr": [1, 2], "leader": 1, "leader_epoch": 0, "partition_epoch": 0}
        for _ in range(300)]}])
    shrinks = [{"topic": "t", "partition": p, "leader_epoch": 0, "partition_epoch": 0, "new_isr": [1]}
               for p in range(300)]
    stale = {"topic": "t", "partition": 0, "leader_epoch": 0, "partition_epoch": 7, "new_isr": [1]}
    records, outcomes = ctrl.alter_partitions(1, epochs[1], shrinks + [stale])
    assert outcomes[:300] == [None] * 300
    assert "InvalidUpdateVersionError" in outcomes[300]  # refused alone; the others go ahead
    entries = batch_changes(records)
    assert len(entries) == 1 and len(entries[0]["changes"]) == 300
    _commit(image, entries)
    assert all(st.isr == (1,) and st.partition_epoch == 1 for st in image.topics["t"].partitions)
