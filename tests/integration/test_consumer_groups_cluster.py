"""Consumer groups on a real 3-node cluster: two members split the partitions; one member's node freezes
(the coordinator drops it after its session timeout, the other member takes its partitions over from the
committed offsets, and it rejoins when the node thaws); then the node holding one member and coordinating
the group is killed: the other member owns every partition and resumes from the committed offsets, which
survived the coordinator (nothing lost, re-delivery only of what was not committed)."""

from __future__ import annotations

import httpx
import pytest

from lakelog.ingest_api.groups.hashing import coordinator_partition
from tests.integration.test_consumer_groups import FAST_GROUPS, JSON_V2, V2, assignment, new_consumer
from tests.support.faults import cluster_id, wait_for
from tests.support.nodes import Cluster

OFFSETS_PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, 3, overrides={**FAST_GROUPS, "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)})
    try:
        yield c.start()
    finally:
        c.stop()


def produce(url: str, topic: str, partition: int, values: list[str]) -> None:
    r = httpx.post(f"{url}/topics/{topic}/partitions/{partition}", timeout=30, headers={"Content-Type": JSON_V2},
                   json={"records": [{"value": v} for v in values]})
    assert r.status_code == 200, r.text


def poll_exactly(base: str, want: int, timeout_s: float = 30) -> list[str]:
    got: list[str] = []

    def more():
        r = httpx.get(f"{base}/records", params={"timeout": 200}, headers={"Accept": JSON_V2}, timeout=30)
        assert r.status_code == 200, r.text
        got.extend(rec["value"] for rec in r.json())
        return len(got) >= want

    wait_for(more, timeout_s, f"{want} records from {base}", interval_s=0)
    # Nothing more than expected is pending.
    r = httpx.get(f"{base}/records", params={"timeout": 300}, headers={"Accept": JSON_V2}, timeout=30)
    assert r.status_code == 200, r.text
    got.extend(rec["value"] for rec in r.json())
    assert len(got) == want, got
    return got


def leaders(url: str, topic: str) -> dict[int, int]:
    r = httpx.get(f"{url}/topics/{topic}/partitions", timeout=10)
    assert r.status_code == 200, r.text
    return {p["partition"]: p["leader"] for p in r.json()}


def test_members_split_partitions_and_survive_a_node_and_coordinator_kill(cluster):
    n1, n2, n3 = cluster.nodes
    r = httpx.post(f"{n1.url}/v3/clusters/{cluster_id(n1.url)}/topics", timeout=30,
                   json={"topic_name": "events", "partitions_count": 4, "replication_factor": 3})
    assert r.status_code == 201, r.text
    # First group use creates __consumer_offsets; pick a group that node 2 coordinates.
    assert httpx.get(f"{n1.url}/groups/probe", timeout=30).status_code == 404
    offsets_leaders = wait_for(lambda: (lambda ls: ls if len(ls) == OFFSETS_PARTITIONS and min(ls.values()) > 0
                                        else None)(leaders(n1.url, "__consumer_offsets")), 30, "offsets leaders")
    assert len(set(offsets_leaders.values())) == 3  # spread over the nodes, replicated like any topic
    meta = httpx.get(f"{n1.url}/topics/__consumer_offsets", timeout=10).json()
    assert meta["configs"]["cleanup.policy"] == "compact" and meta["configs"]["min.insync.replicas"] == "2"
    assert all(len(p["replicas"]) == 3 for p in meta["partitions"])
    group = next(g for g in (f"workers-{i}" for i in range(1000))
                 if offsets_leaders[coordinator_partition(g, OFFSETS_PARTITIONS)] == 2)

    # Member A lives on node 2, member B on node 3.
    a = new_consumer(n2.url, group, "a")
    b = new_consumer(n3.url, group, "b")
    assert a.startswith(n2.url) and b.startswith(n3.url)
    a_via_lb = f"{n1.url}/consumers/{group}/instances/a"  # any node forwards to the one holding it
    for base in (a_via_lb, b):
        r = httpx.post(f"{base}/subscription", json={"topics": ["events"]}, headers=V2, timeout=10)
        assert r.status_code == 204, r.text

    def split():
        pa, pb = assignment(a_via_lb), assignment(b)
        return (pa, pb) if len(pa) == len(pb) == 2 and set(pa) | set(pb) == {("events", p) for p in range(4)} else None

    pa, pb = wait_for(split, 30, "the two members to split the four partitions")
    assert {p for _, p in pa} == {0, 1} and {p for _, p in pb} == {2, 3}  # range: a < b
    describe = httpx.get(f"{n3.url}/groups/{group}", timeout=30).json()
    assert describe["coordinator"] == 2 and describe["state"] == "Stable" and len(describe["members"]) == 2

    for p in range(4):
        produce(n1.url, "events", p, [f"{p}-{i}" for i in range(30)])
    got_a = poll_exactly(a_via_lb, 60)
    got_b = poll_exactly(b, 60)
    assert sorted(got_a) == sorted(f"{p}-{i}" for p in (0, 1) for i in range(30))
    assert sorted(got_b) == sorted(f"{p}-{i}" for p in (2, 3) for i in range(30))
    for base in (a_via_lb, b):
        assert httpx.post(f"{base}/offsets", headers=V2, timeout=30).status_code == 200

    # Node 3 freezes: member B stops heartbeating; within its session timeout the coordinator (alive,
    # on node 2) drops it and A takes B's partitions over from B's committed offsets.
    n3.pause()
    try:
        wait_for(lambda: assignment(a_via_lb) == [("events", p) for p in range(4)], 30, "a to own all partitions")
        # (Produce once the frozen node's leaderships have moved: a request forwarded to it would hang.)
        wait_for(lambda: 3 not in leaders(n1.url, "events").values(), 30, "leaders off the frozen node")
        for p in range(4):
            produce(n1.url, "events", p, [f"{p}-{i}" for i in range(30, 35)])
        got_a_alone = poll_exactly(a_via_lb, 20)
        assert sorted(got_a_alone) == sorted(f"{p}-{i}" for p in range(4) for i in range(30, 35))
        assert httpx.post(f"{a_via_lb}/offsets", headers=V2, timeout=30).status_code == 200
    finally:
        n3.resume()
    # B comes back as a new member (its old one expired): the group splits again, and B starts its
    # partitions from A's commits, not from where it had stopped.
    wait_for(lambda: split() == (pa, pb), 30, "the two members to split the partitions again")
    assert poll_exactly(b, 0) == []

    # A reads 20 more per partition but crashes before committing them: its uncommitted window.
    for p in range(4):
        produce(n1.url, "events", p, [f"{p}-{i}" for i in range(35, 55)])
    uncommitted_a = poll_exactly(f"{n2.url}/consumers/{group}/instances/a", 40)
    got_b2 = poll_exactly(b, 40)
    assert httpx.post(f"{b}/offsets", headers=V2, timeout=30).status_code == 200

    n2.kill()  # member A and the group's coordinator die together

    # Within the session timeout the survivor owns every partition (after the coordinator moved).
    wait_for(lambda: assignment(b) == [("events", p) for p in range(4)], 30, "b to own all partitions")
    # The committed offsets survived the coordinator: b resumes A's partitions at 35, so it gets
    # exactly A's uncommitted records again, and none of its own.
    redelivered = poll_exactly(b, 40)
    assert sorted(redelivered) == sorted(uncommitted_a)
    for p in range(4):
        produce(n1.url, "events", p, [f"{p}-{i}" for i in range(55, 60)])
    tail = poll_exactly(b, 20)
    assert httpx.post(f"{b}/offsets", headers=V2, timeout=30).status_code == 200
    # No record lost: everything produced was delivered to some member.
    delivered = (set(got_a) | set(got_b) | set(got_a_alone) | set(uncommitted_a) | set(got_b2) | set(redelivered)
                 | set(tail))
    assert delivered == {f"{p}-{i}" for p in range(4) for i in range(60)}
    offsets = httpx.get(f"{n1.url}/groups/{group}/offsets", timeout=30).json()["offsets"]
    assert {o["partition"]: o["offset"] for o in offsets} == {p: 60 for p in range(4)}
    describe = httpx.get(f"{n1.url}/groups/{group}", timeout=30).json()
    assert describe["coordinator"] in (1, 3) and [m["client_id"] for m in describe["members"]] == ["b"]
    assert all(row["lag"] == 0 for row in describe["partitions"])
    # The instance on the dead node is gone for good.
    r = httpx.get(a_via_lb + "/assignments", timeout=30)
    assert r.status_code == 404 and r.json()["error_code"] == 40403
