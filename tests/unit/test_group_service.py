"""The coordinator on a node, over real partition logs but without HTTP: commits go to the log with
acks=all, a new leader rebuilds the offsets from the log, leadership loss forgets the groups, and
offsets of empty groups expire as tombstones."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from lakelog.infra import error_codes
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.errors import RemoteError, TopicExistsError
from lakelog.ingest_api.groups.assignors import TopicPartition as TP
from lakelog.ingest_api.groups.errors import CoordinatorLoadInProgressError, NotCoordinatorError, RebalanceInProgressError
from lakelog.ingest_api.groups.hashing import OFFSETS_TOPIC, coordinator_partition
from lakelog.ingest_api.groups.service import GroupService
from lakelog.ingest_api.groups.offsets_codec import CommittedOffset, decode_key, decode_value
from lakelog.ingest_api.replication.partition import Partition, PartitionKey
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import iter_batches

PARTITIONS = 3


class FakeNode:
    """Just what GroupService uses of a Node: the metadata image, local replicas, produce."""

    def __init__(self, root, **config: str) -> None:
        self.node_id = 1
        self.config = NodeConfig({"offsets.topic.num.partitions": str(PARTITIONS), "group.min.session.timeout.ms": "10",
                                  **config})
        self.image = SimpleNamespace(brokers={}, topics={OFFSETS_TOPIC: SimpleNamespace(
            partitions=[SimpleNamespace(leader=1) for _ in range(PARTITIONS)])})
        self.parts: dict[int, Partition] = {}
        self.root = root
        for p in range(PARTITIONS):
            self.lead(p, epoch=1)

    def lead(self, p: int, epoch: int) -> None:
        key = PartitionKey(OFFSETS_TOPIC, p)
        part = self.parts.get(p) or Partition(key, PartitionLog(self.root / f"{OFFSETS_TOPIC}-{p}"), 1)
        part.make_leader(epoch, epoch, [1], [1])
        self.parts[p] = part

    def local_partition(self, key: PartitionKey):
        return self.parts.get(key.partition)

    async def produce_batches(self, topic, partition, data, acks="all"):
        part = self.parts[partition]
        info = part.append_as_leader(data, required_acks=acks, min_isr=1)
        await part.wait_for_commit(info.last_offset + 1, 5, 1)
        return info


def records_in_log(part: Partition) -> list:
    res = part.log.read(0, 1 << 20)
    return [(decode_key(r.key), decode_value(r.value)) for _, b in iter_batches(res.records) for r in b.records()]


async def loaded(svc: GroupService, group: str) -> None:
    for _ in range(200):
        svc.hosting.check_leadership()
        if svc.hosting.is_loaded(svc.partition_for(group)):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not loaded")


def test_commits_survive_a_coordinator_move(tmp_path):
    async def main():
        node = FakeNode(tmp_path)
        svc = GroupService(node)
        group = "payments"
        p = coordinator_partition(group, PARTITIONS)
        with pytest.raises(CoordinatorLoadInProgressError):  # led, not loaded yet
            svc._require(group)
        await loaded(svc, group)
        doc = await svc.handle("commit", {"group_id": group, "offsets": [
            {"topic": "t", "partition": 0, "offset": 7, "metadata": "m"}, {"topic": "t", "partition": 1, "offset": 3}]})
        assert doc["error"] is None
        doc = await svc.handle("commit", {"group_id": group, "offsets": [{"topic": "t", "partition": 0, "offset": 9}]})
        # Every commit is a record of the coordinator partition's log.
        assert [(k.topic, k.partition, v.offset) for k, v in records_in_log(node.parts[p])] == [
            ("t", 0, 7), ("t", 1, 3), ("t", 0, 9)]
        # Another coordinator (a fresh service on the same logs, as after a leader change) reads them back.
        other = GroupService(node)
        node.lead(p, epoch=2)
        await loaded(other, group)
        doc = await other.handle("offset_fetch", {"group_id": group})
        assert {(o["partition"], o["offset"], o["metadata"]) for o in doc["offsets"]} == {(0, 9, ""), (1, 3, "")}
        # The old one notices the new epoch, forgets the groups and loads again.
        svc.hosting.check_leadership()
        assert not svc.hosting.is_loaded(p)
        # Losing the leadership: NOT_COORDINATOR.
        node.parts[p].make_follower(2, 3, 3, [1, 2], [2])
        other.hosting.check_leadership()
        assert (await other.handle("offset_fetch", {"group_id": group}))["error"] == NotCoordinatorError.kafka_name

    asyncio.run(main())


def test_members_commit_and_empty_groups_expire(tmp_path):
    async def main():
        node = FakeNode(tmp_path, **{"offsets.retention.minutes": "1", "group.initial.rebalance.delay.ms": "0"})
        svc = GroupService(node)
        group = "reports"
        await loaded(svc, group)
        join = await svc.handle("join", {"group_id": group, "member_id": "", "client_id": "c", "session_timeout_ms": 1000,
                                         "protocols": [["range", {"topics": ["t"]}]]})
        mid, gen = join["member_id"], join["generation"]
        assert join["error"] is None and join["leader_id"] == mid
        # Not yet synced: commits wait for the assignment.
        r = await svc.handle("commit", {"group_id": group, "member_id": mid, "generation": gen,
                                        "offsets": [{"topic": "t", "partition": 0, "offset": 1}]})
        assert r["error"] == RebalanceInProgressError.kafka_name
        sync = await svc.handle("sync", {"group_id": group, "member_id": mid, "generation": gen,
                                         "assignments": {mid: [["t", 0]]}})
        assert sync["assignment"] == [["t", 0]]
        r = await svc.handle("commit", {"group_id": group, "member_id": mid, "generation": gen,
                                        "offsets": [{"topic": "t", "partition": 0, "offset": 5}]})
        assert r["error"] is None
        assert (await svc.handle("leave", {"group_id": group, "member_id": mid}))["error"] is None
        # A minute after the group became empty its offsets get tombstones and leave the cache.
        await svc.offsets.expire()
        assert (await svc.handle("offset_fetch", {"group_id": group}))["offsets"][0]["offset"] == 5  # not yet
        g = svc.coordinator.groups[group]
        g.empty_since_ms -= 61_000
        g.offsets[TP("t", 0)] = CommittedOffset(5, "", g.offsets[TP("t", 0)].commit_timestamp_ms - 61_000)
        await svc.offsets.expire()
        assert (await svc.handle("offset_fetch", {"group_id": group}))["offsets"] == []
        last_key, last_value = records_in_log(node.parts[svc.partition_for(group)])[-1]
        assert (last_key.group, last_key.topic, last_key.partition, last_value) == (group, "t", 0, None)

    asyncio.run(main())


def test_delete_removes_an_empty_group_and_its_offsets_and_refuses_one_with_members(tmp_path):
    async def main():
        node = FakeNode(tmp_path, **{"group.initial.rebalance.delay.ms": "0"})
        svc = GroupService(node)
        group = "archive"
        await loaded(svc, group)
        assert (await svc.handle("delete", {"group_id": group}))["error"] == "GROUP_ID_NOT_FOUND"
        await svc.handle("commit", {"group_id": group, "offsets": [{"topic": "t", "partition": 0, "offset": 4}]})
        join = await svc.handle("join", {"group_id": group, "member_id": "", "client_id": "c", "session_timeout_ms": 1000,
                                         "protocols": [["range", {"topics": ["t"]}]]})
        assert (await svc.handle("delete", {"group_id": group}))["error"] == "NON_EMPTY_GROUP"
        await svc.handle("leave", {"group_id": group, "member_id": join["member_id"]})
        assert (await svc.handle("delete", {"group_id": group}))["error"] is None
        assert group not in svc.coordinator.groups
        last_key, last_value = records_in_log(node.parts[svc.partition_for(group)])[-1]
        assert (last_key.group, last_key.topic, last_key.partition, last_value) == (group, "t", 0, None)
        # A coordinator that loads the partition afresh does not see the deleted offsets.
        other = GroupService(node)
        await loaded(other, group)
        assert (await other.handle("offset_fetch", {"group_id": group}))["offsets"] == []

    asyncio.run(main())


def test_the_offsets_topic_created_first_by_another_node_is_not_an_error(tmp_path):
    """Two nodes create `__consumer_offsets` at once: the one whose request the controller (on a third
    node) refuses gets the refusal as a RemoteError with TopicExistsError's code, before it has applied
    the other's record. The group request that asked for the topic goes on; other refusals do not."""
    topic_exists = error_codes.code(TopicExistsError.__name__).error_code

    async def main():
        node = FakeNode(tmp_path)
        node.image.topics = {}
        node.image.brokers = {1: SimpleNamespace(fenced=False)}
        refusals = [RemoteError(409, topic_exists, f"Topic '{OFFSETS_TOPIC}' already exists."),
                    RemoteError(400, 40002, "invalid replication factor")]
        asked: list[str] = []

        async def create_topic(name, **kwargs):
            asked.append(name)
            raise refusals.pop(0)

        node.admin = SimpleNamespace(create_topic=create_topic)
        svc = GroupService(node)
        await svc.start()
        try:
            await svc.ensure_offsets_topic()
            assert asked == [OFFSETS_TOPIC]
            with pytest.raises(RemoteError, match="replication factor"):
                await svc.ensure_offsets_topic()
        finally:
            await svc.stop()

    asyncio.run(main())
