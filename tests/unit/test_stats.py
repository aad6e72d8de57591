"""The console's cluster figures (ingest_api/http/stats.py) over a fake node: partition health, paging."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from lakelog.ingest_api.http import stats
from lakelog.ingest_api.cluster.image_values import BrokerRegistration, PartitionState, TopicImage


def _node(topics: dict[str, list[PartitionState]], fenced: set[int] = frozenset(), min_isr: int = 2):
    brokers = {i: BrokerRegistration(i, 1, "x", "127.0.0.1", 9000 + i, fenced=i in fenced) for i in (1, 2, 3)}
    image = SimpleNamespace(brokers=brokers,
                            topics={n: TopicImage(n, f"id-{n}", {}, tuple(ps)) for n, ps in topics.items()})
    config = SimpleNamespace(log_config=lambda overrides=None: SimpleNamespace(
        to_dict=lambda: {"min.insync.replicas": min_isr}))
    return SimpleNamespace(image=image, node_id=1, cluster_id="c", controller_id=2, ready=True, config=config,
                           admin=SimpleNamespace(topic_config=lambda name: {
                               "min.insync.replicas": min_isr, "cleanup.policy": "delete", "retention.ms": 1000,
                               "remote.storage.enable": False}),
                           partitions=lambda: [])


def test_partition_health_counts_offline_under_replicated_and_at_min_isr():
    node = _node({"a": [PartitionState((1, 2, 3), (1, 2, 3), leader=1),   # healthy
                        PartitionState((2, 3, 1), (2, 3), leader=2),      # under-replicated, at min ISR
                        PartitionState((3, 1, 2), (3,), leader=3)],       # leader fenced: offline, under-replicated
                  "b": [PartitionState((1,), (1,), leader=-1)]},          # no leader: offline
                 fenced={3})
    h = stats.partition_health(node)
    assert (h["total"], h["offline"], h["under_replicated"], h["at_min_isr"]) == (4, 2, 2, 1)
    assert [(x["topic"], x["partition"], x["problems"]) for x in h["listed"]] == [
        ("a", 1, ["under-replicated", "at-min-isr"]), ("a", 2, ["offline", "under-replicated"]),
        ("b", 0, ["offline"])]


def test_a_topic_override_of_min_insync_replicas_counts():
    node = _node({"a": [PartitionState((1, 2, 3), (1, 2, 3), leader=1)]}, min_isr=2)
    assert stats.partition_health(node)["at_min_isr"] == 0
    node.image.topics["a"] = TopicImage("a", "id-a", {"min.insync.replicas": "3"},
                                        (PartitionState((1, 2, 3), (1, 2, 3), leader=1),))
    assert stats.partition_health(node)["at_min_isr"] == 1


def test_the_listed_partitions_are_capped():
    node = _node({f"t{i:04d}": [PartitionState((1, 2), (1,), leader=1)] for i in range(stats.MAX_LISTED_PARTITIONS + 50)})
    h = stats.partition_health(node)
    assert h["under_replicated"] == stats.MAX_LISTED_PARTITIONS + 50
    assert len(h["listed"]) == stats.MAX_LISTED_PARTITIONS


def test_topic_page_filters_and_pages_and_sums_sizes_over_the_nodes(monkeypatch):
    names = [f"orders-{i:03d}" for i in range(120)] + ["payments"]
    node = _node({n: [PartitionState((1, 2), (1, 2), leader=1)] for n in names})

    async def fake_gather(node, metrics, topic=None, *, counters_only=False):
        return {1: {"topics": {"orders-100": {"local_bytes": 10, "remote_bytes": 5, "partitions_led": 1}}},
                2: {"topics": {"orders-100": {"local_bytes": 7, "remote_bytes": 0, "partitions_led": 1}}},
                3: None}

    monkeypatch.setattr(stats, "gather", fake_gather)
    page = asyncio.run(stats.topic_page(node, None, sorted(names), 100, 50, "ORDERS"))
    assert page["total"] == 120 and page["unreachable_nodes"] == [3]
    assert [t["topic"] for t in page["topics"]] == [f"orders-{i:03d}" for i in range(100, 120)]
    first = page["topics"][0]
    assert (first["local_bytes"], first["remote_bytes"], first["replication_factor"]) == (17, 5, 2)
    assert first["configs"] == {"cleanup.policy": "delete", "retention.ms": 1000, "remote.storage.enable": "false",
                                "min.insync.replicas": 2}
