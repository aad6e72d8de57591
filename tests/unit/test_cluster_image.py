"""The cluster metadata image: every record type through apply, skips, snapshots, determinism."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.ingest_api.cluster.image import SNAPSHOT_VERSION, ClusterImage
from lakelog.ingest_api.cluster.image_values import (
    NO_LEADER,
    BrokerRegistration,
    PartitionState,
    check_partition_state,
    encode_record,
)
from lakelog.ingest_api.raft.messages import Entry, EntryKind
from lakelog.ingest_api.raft.state_machine import SnapshotFormatError
from lakelog.logstore.record_batch import crc32c


def command(image: ClusterImage, record: dict | bytes, term: int = 1) -> int:
    """Apply a record (or raw payload) as the next committed command entry; returns its index."""
    index = image.last_applied_index + 1
    payload = record if isinstance(record, bytes) else encode_record(record)
    image.apply(Entry(index, term, EntryKind.COMMAND, payload))
    return index


def applied(image: ClusterImage, record: dict, term: int = 1) -> int:
    index = command(image, record, term)
    assert image.skipped_at(index) is None, image.skipped_at(index)
    return index


def register(node_id: int, epoch: int, rack: str | None = None, incarnation: str = "inc") -> dict:
    return {"type": "register_broker", "node_id": node_id, "broker_epoch": epoch, "incarnation_id": incarnation,
            "host": f"node{node_id}", "port": 8080 + node_id, "rack": rack}


def part(replicas, isr=None, leader=None, leader_epoch=0, partition_epoch=0) -> dict:
    isr = replicas if isr is None else isr
    return {"replicas": list(replicas), "isr": list(isr), "leader": isr[0] if leader is None else leader,
            "leader_epoch": leader_epoch, "partition_epoch": partition_epoch}


def create(name: str, topic_id: str, *partitions: dict, configs: dict | None = None) -> dict:
    return {"type": "create_topic", "name": name, "topic_id": topic_id, "configs": configs or {},
            "partitions": list(partitions)}


def populated() -> ClusterImage:
    img = ClusterImage()
    for n in (1, 2, 3):
        applied(img, register(n, 10 + n, rack=f"r{n % 2}"))
        applied(img, {"type": "unfence_broker", "node_id": n, "broker_epoch": 10 + n})
    applied(img, create("orders", "id-orders", part([1, 2, 3]), part([2, 3, 1]), configs={"retention.ms": "1000"}))
    applied(img, create("audit", "id-audit", part([3, 1])))
    applied(img, {"type": "allocate_producer_ids", "node_id": 1, "broker_epoch": 11, "first_id": 0, "count": 1000})
    return img


# --- every record type ---------------------------------------------------------------------------

def test_broker_records_round_trip() -> None:
    img = ClusterImage()
    i = applied(img, register(1, 5, rack="a", incarnation="x"))
    assert img.broker(1) == BrokerRegistration(1, 5, "x", "node1", 8081, "a", fenced=True,
                                               in_controlled_shutdown=False, registration_index=i)
    assert img.live_brokers() == []
    applied(img, {"type": "unfence_broker", "node_id": 1, "broker_epoch": 5})
    assert not img.broker(1).fenced and [b.node_id for b in img.live_brokers()] == [1]
    applied(img, {"type": "broker_controlled_shutdown", "node_id": 1, "broker_epoch": 5})
    assert img.broker(1).in_controlled_shutdown and img.is_live(1)
    applied(img, {"type": "fence_broker", "node_id": 1, "broker_epoch": 5})
    assert img.broker(1).fenced and not img.is_live(1)
    # A restart: a new registration replaces the old one, fenced and out of controlled shutdown.
    j = applied(img, register(1, 9, rack=None, incarnation="y"))
    reg = img.broker(1)
    assert (reg.broker_epoch, reg.incarnation_id, reg.rack, reg.fenced, reg.in_controlled_shutdown,
            reg.registration_index) == (9, "y", None, True, False, j)
    applied(img, {"type": "unregister_broker", "node_id": 1, "broker_epoch": 9})
    assert img.broker(1) is None and img.brokers == {}


def test_topic_records_round_trip() -> None:
    img = populated()
    t = img.topic("orders")
    assert t.topic_id == "id-orders" and t.configs == {"retention.ms": "1000"}
    assert img.partition("orders", 1) == PartitionState([2, 3, 1], [2, 3, 1], 2, 0, 0)
    assert img.partition("orders", 2) is None and img.partition("nope", 0) is None

    applied(img, {"type": "alter_configs", "name": "orders", "topic_id": "id-orders",
                  "configs": {"cleanup.policy": "compact"}})
    assert img.topic("orders").configs == {"cleanup.policy": "compact"}

    applied(img, {"type": "create_partitions", "name": "orders", "topic_id": "id-orders",
                  "partitions": [part([3, 1, 2])]})
    assert len(img.topic("orders").partitions) == 3 and img.partition("orders", 2).leader == 3

    applied(img, {"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
                  "isr": [1, 3], "leader_epoch": 0, "partition_epoch": 1})
    assert img.partition("orders", 0) == PartitionState([1, 2, 3], [1, 3], 1, 0, 1)
    applied(img, {"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
                  "leader": 3, "isr": [3], "leader_epoch": 1, "partition_epoch": 2})
    assert img.partition("orders", 0) == PartitionState([1, 2, 3], [3], 3, 1, 2)
    applied(img, {"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
                  "leader": NO_LEADER, "leader_epoch": 2, "partition_epoch": 3})
    assert img.partition("orders", 0) == PartitionState([1, 2, 3], [3], NO_LEADER, 2, 3)
    applied(img, {"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
                  "leader": 3, "leader_epoch": 3, "partition_epoch": 4})
    assert img.partition("orders", 0).leader == 3
    applied(img, {"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
                  "replicas": [3, 2, 1], "leader_epoch": 3, "partition_epoch": 5})
    assert img.partition("orders", 0).replicas == (3, 2, 1)

    applied(img, {"type": "delete_topic", "name": "orders", "topic_id": "id-orders"})
    assert img.topic("orders") is None and list(img.topics) == ["audit"]


def test_producer_id_blocks_only_grow() -> None:
    img = populated()
    assert img.next_producer_id == 1000
    applied(img, {"type": "allocate_producer_ids", "node_id": 2, "broker_epoch": 12, "first_id": 1000, "count": 500})
    assert img.next_producer_id == 1500
    i = command(img, {"type": "allocate_producer_ids", "node_id": 2, "broker_epoch": 12, "first_id": 1200,
                      "count": 10})
    assert img.skipped_at(i) and img.next_producer_id == 1500


def test_no_op_moves_only_the_applied_index_and_the_term_is_the_controller_epoch() -> None:
    img = populated()
    before = img.state_dict()
    img.apply(Entry(img.last_applied_index + 1, 7, EntryKind.NO_OP))
    after = img.state_dict()
    assert after["last_applied_index"] == before["last_applied_index"] + 1 and after["last_applied_term"] == 7
    assert after["controller_epoch"] == before["controller_epoch"] == 1
    for key in ("brokers", "topics", "next_producer_id", "skipped_records"):
        assert after[key] == before[key]
    command(img, {"type": "fence_broker", "node_id": 1, "broker_epoch": 11}, term=7)
    assert img.controller_epoch == 7


def test_entries_at_or_below_the_applied_index_are_ignored() -> None:
    img = populated()
    before = img.snapshot()
    img.apply(Entry(img.last_applied_index, 1, EntryKind.COMMAND,
                    encode_record({"type": "fence_broker", "node_id": 1, "broker_epoch": 11})))
    assert img.snapshot() == before and not img.broker(1).fenced


# --- skips ---------------------------------------------------------------------------------------

SKIPPED = [
    pytest.param(b"\xff\xfe", id="not-utf8"),
    pytest.param(b"{not json", id="not-json"),
    pytest.param(b"[1, 2]", id="not-an-object"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, id="deeply-nested"),
    pytest.param({"type": "make_coffee"}, id="unknown-type"),
    pytest.param({"node_id": 1}, id="no-type"),
    pytest.param({"type": "fence_broker", "node_id": 1}, id="missing-field"),
    pytest.param({"type": "fence_broker", "node_id": True, "broker_epoch": 11}, id="bool-for-int"),
    pytest.param({"type": "fence_broker", "node_id": 1, "broker_epoch": 10}, id="stale-broker-epoch"),
    pytest.param({"type": "fence_broker", "node_id": 9, "broker_epoch": 1}, id="unknown-broker"),
    pytest.param({"type": "unfence_broker", "node_id": 1, "broker_epoch": 11}, id="already-unfenced"),
    pytest.param(register(1, 11), id="register-not-newer"),
    pytest.param(register(-1, 100), id="negative-node-id"),
    pytest.param(create("orders", "id-new", part([1])), id="topic-exists"),
    pytest.param(create("other", "id-orders", part([1])), id="topic-id-taken"),
    pytest.param(create("bad/name", "id-x", part([1])), id="illegal-topic-name"),
    pytest.param(create("empty", "id-x"), id="no-partitions"),
    pytest.param(create("t", "id-x", part([1, 1])), id="duplicate-replicas"),
    pytest.param(create("t", "id-x", part([1, 2], isr=[1, 3])), id="isr-not-subset"),
    pytest.param(create("t", "id-x", part([1, 2], isr=[1], leader=2)), id="leader-not-in-isr"),
    pytest.param(create("t", "id-x", {"replicas": [1], "isr": [], "leader": -1, "leader_epoch": 0,
                                      "partition_epoch": 0}), id="empty-isr"),
    pytest.param(create("t", "id-x", part([1]), configs={"k": 5}), id="non-string-config"),
    pytest.param({"type": "delete_topic", "name": "orders", "topic_id": "id-other"}, id="topic-id-mismatch"),
    pytest.param({"type": "delete_topic", "name": "nope", "topic_id": "id-orders"}, id="unknown-topic"),
    pytest.param({"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 5,
                  "isr": [1], "leader_epoch": 0, "partition_epoch": 1}, id="unknown-partition"),
    pytest.param({"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
                  "isr": [1, 2], "leader_epoch": 0, "partition_epoch": 2}, id="partition-epoch-cas"),
    pytest.param({"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
                  "leader": 2, "leader_epoch": 0, "partition_epoch": 1}, id="leader-change-without-epoch"),
    pytest.param({"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
                  "isr": [1, 2], "leader_epoch": 1, "partition_epoch": 1}, id="leader-epoch-without-change"),
    pytest.param({"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
                  "isr": [2, 3], "leader_epoch": 0, "partition_epoch": 1}, id="isr-without-leader"),
    pytest.param({"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
                  "isr": [1, 2, 3], "leader_epoch": 0, "partition_epoch": 1}, id="no-change"),
    pytest.param({"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
                  "leader_epoch": 0, "partition_epoch": 1}, id="no-field-changed"),
    pytest.param({"type": "allocate_producer_ids", "node_id": 1, "broker_epoch": 11, "first_id": 999,
                  "count": 10}, id="producer-ids-overlap"),
    pytest.param({"type": "allocate_producer_ids", "node_id": 1, "broker_epoch": 11, "first_id": 2000,
                  "count": 0}, id="empty-producer-id-block"),
]


@pytest.mark.parametrize("record", SKIPPED)
def test_bad_records_are_skipped_and_counted(record: dict | bytes) -> None:
    img = populated()
    before = img.state_dict()
    index = command(img, record, term=2)
    after = img.state_dict()
    assert img.skipped_at(index) is not None
    assert after["skipped_records"] == before["skipped_records"] + 1
    assert after["last_applied_index"] == index and after["controller_epoch"] == 2
    for key in ("brokers", "topics", "next_producer_id"):
        assert after[key] == before[key]
    assert img.to_dict()["recent_skips"][-1]["index"] == index


def test_a_duplicate_partition_change_applies_once() -> None:
    img = populated()
    change = {"type": "partition_change", "topic": "orders", "topic_id": "id-orders", "partition": 0,
              "leader": 2, "isr": [2, 3], "leader_epoch": 1, "partition_epoch": 1}
    applied(img, change)
    i = command(img, change)
    assert img.skipped_at(i) and img.partition("orders", 0) == PartitionState([1, 2, 3], [2, 3], 2, 1, 1)


def test_a_change_meant_for_a_deleted_topic_does_not_land_on_its_successor() -> None:
    img = populated()
    applied(img, {"type": "delete_topic", "name": "audit", "topic_id": "id-audit"})
    applied(img, create("audit", "id-audit-2", part([3, 1])))
    i = command(img, {"type": "partition_change", "topic": "audit", "topic_id": "id-audit", "partition": 0,
                      "isr": [3], "leader_epoch": 0, "partition_epoch": 1})
    assert img.skipped_at(i) and img.partition("audit", 0).isr == (3, 1)


# --- snapshots -----------------------------------------------------------------------------------

def test_snapshot_restore_round_trip() -> None:
    img = populated()
    command(img, b"junk")
    data = img.snapshot()
    other = ClusterImage()
    other.restore(data)
    assert other.snapshot() == data
    assert other.state_dict() == img.state_dict()
    assert other.topic("orders") == img.topic("orders") and other.brokers == img.brokers
    copy = img.copy()
    assert copy.snapshot() == data
    applied(copy, {"type": "fence_broker", "node_id": 1, "broker_epoch": 11})
    assert img.snapshot() == data  # the copy is independent


def test_snapshot_is_canonical() -> None:
    a, b = ClusterImage(), ClusterImage()
    applied(a, create("x", "id-x", part([1])))
    applied(a, create("y", "id-y", part([2])))
    applied(b, create("y", "id-y", part([2])))
    applied(b, create("x", "id-x", part([1])))
    assert a.snapshot() == b.snapshot()
    doc = json.loads(a.snapshot())
    assert doc["version"] == SNAPSHOT_VERSION == 1
    canonical = json.dumps(doc["image"], sort_keys=True, separators=(",", ":")).encode()
    assert doc["crc32c"] == crc32c(canonical)
    assert a.snapshot() == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    assert ClusterImage().snapshot() == ClusterImage().snapshot()


def _resealed(doc: dict) -> bytes:
    doc["crc32c"] = crc32c(json.dumps(doc["image"], sort_keys=True, separators=(",", ":")).encode())
    return json.dumps(doc).encode()


@pytest.mark.parametrize("mutate", [
    pytest.param(lambda d: d.update(version=2) or json.dumps(d).encode(), id="unknown-version"),
    pytest.param(lambda d: d.pop("version") and json.dumps(d).encode(), id="no-version"),
    pytest.param(lambda d: d["image"].update(next_producer_id=5) or json.dumps(d).encode(), id="bad-crc"),
    pytest.param(lambda d: d.pop("crc32c") and json.dumps(d).encode(), id="no-crc"),
    pytest.param(lambda d: b"not json", id="not-json"),
    pytest.param(lambda d: b"[]", id="not-an-object"),
    pytest.param(lambda d: d["image"]["topics"][0]["partitions"][0].update(leader=9) or _resealed(d),
                 id="leader-not-in-isr"),
    pytest.param(lambda d: d["image"]["brokers"].append(d["image"]["brokers"][0]) or _resealed(d),
                 id="duplicate-broker"),
    pytest.param(lambda d: d["image"].pop("topics") and _resealed(d), id="missing-topics"),
    pytest.param(lambda d: d["image"]["brokers"][0].update(fenced="no") or _resealed(d), id="wrong-type"),
])
def test_restore_refuses_bad_snapshots(mutate) -> None:
    img = populated()
    doc = json.loads(img.snapshot())
    data = mutate(doc)
    target = populated()
    applied(target, {"type": "fence_broker", "node_id": 2, "broker_epoch": 12})
    before = target.snapshot()
    with pytest.raises(SnapshotFormatError):
        target.restore(data)
    assert target.snapshot() == before  # a refused snapshot changes nothing


# --- properties ----------------------------------------------------------------------------------

_nodes = st.integers(0, 4)
_record = st.one_of(
    st.builds(lambda n, e, r: register(n, e, rack=r), _nodes, st.integers(1, 30), st.sampled_from([None, "a", "b"])),
    st.builds(lambda t, n, e: {"type": t, "node_id": n, "broker_epoch": e},
              st.sampled_from(["unfence_broker", "fence_broker", "broker_controlled_shutdown", "unregister_broker"]),
              _nodes, st.integers(1, 30)),
    st.builds(lambda name, reps, isr_n, lead: create(name, f"id-{name}", part(reps, reps[:isr_n],
                                                                            reps[lead % min(isr_n, len(reps))])),
              st.sampled_from(["a", "b"]), st.lists(_nodes, min_size=1, max_size=3, unique=True),
              st.integers(1, 3), st.integers(0, 2)),
    st.builds(lambda name: {"type": "delete_topic", "name": name, "topic_id": f"id-{name}"},
              st.sampled_from(["a", "b"])),
    st.builds(lambda name, leader, isr, le, pe: {"type": "partition_change", "topic": name, "topic_id": f"id-{name}",
                                                 "partition": 0, "leader": leader, "isr": isr,
                                                 "leader_epoch": le, "partition_epoch": pe},
              st.sampled_from(["a", "b"]), st.integers(-1, 4), st.lists(_nodes, max_size=3),
              st.integers(0, 4), st.integers(0, 4)),
    st.builds(lambda first, count: {"type": "allocate_producer_ids", "node_id": 0, "broker_epoch": 1,
                                    "first_id": first, "count": count},
              st.integers(0, 3000), st.integers(0, 1000)),
    st.binary(max_size=20),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_record, max_size=40), st.integers(0, 40))
def test_apply_never_raises_keeps_invariants_and_snapshots_replay_equal(records, cut) -> None:
    direct, resumed = ClusterImage(), ClusterImage()
    epochs: dict[tuple[str, int], tuple[int, int]] = {}
    for i, record in enumerate(records):
        if i == cut:
            resumed.restore(direct.snapshot())
        previous_pid = direct.next_producer_id
        command(direct, record)
        if i >= cut:
            command(resumed, record)
        assert direct.next_producer_id >= previous_pid
        previous, epochs = epochs, {}
        for t, p, state in direct.iter_partitions():
            check_partition_state(state, f"{t.name}-{p}")
            key = (t.topic_id, p)
            epochs[key] = (state.leader_epoch, state.partition_epoch)
            if key in previous:  # epochs only grow while the topic lives
                assert epochs[key][0] >= previous[key][0] and epochs[key][1] >= previous[key][1]
    if cut >= len(records):
        resumed.restore(direct.snapshot())
    assert resumed.snapshot() == direct.snapshot()
