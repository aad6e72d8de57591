"""A real 3-node cluster on loopback: membership, replicated topics, forwarding, acks, ISR."""

from __future__ import annotations

import base64

import httpx
import pytest

from lakelog.logstore.record_batch import build_batch, Record, iter_batches
from tests.support.nodes import Cluster
from tests.support.faults import wait_for

BINARY = "application/vnd.kafka.binary.v2+json"
RECORDBATCH = "application/vnd.kafka.recordbatch"


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, 3)
    try:
        yield c.start()
    finally:
        c.stop()


def _cluster_id(url: str) -> str:
    return httpx.get(f"{url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]


def create_topic(url: str, name: str, partitions: int = 1, rf: int = 3, **configs: str) -> None:
    cid = _cluster_id(url)
    r = httpx.post(f"{url}/v3/clusters/{cid}/topics", timeout=30, json={
        "topic_name": name, "partitions_count": partitions, "replication_factor": rf,
        "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()]})
    assert r.status_code == 201, r.text


def partition_state(url: str, topic: str, p: int = 0) -> dict:
    r = httpx.get(f"{url}/topics/{topic}/partitions/{p}", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()




def produce(url: str, topic: str, values: list[str], partition: int | None = 0, acks: str = "all") -> httpx.Response:
    path = f"/topics/{topic}" if partition is None else f"/topics/{topic}/partitions/{partition}"
    return httpx.post(f"{url}{path}?acks={acks}", timeout=30, headers={"Content-Type": BINARY}, json={
        "records": [{"value": base64.b64encode(v.encode()).decode()} for v in values]})


def consume_all(url: str, topic: str, partition: int = 0) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    offset = 0
    while True:
        r = httpx.get(f"{url}/topics/{topic}/partitions/{partition}/records", timeout=30,
                      params={"offset": offset, "timeout": 0}, headers={"Accept": BINARY})
        assert r.status_code == 200, r.text
        recs = r.json()
        if not recs:
            return out
        for rec in recs:
            out.append((rec["offset"], base64.b64decode(rec["value"]).decode()))
        offset = recs[-1]["offset"] + 1


def test_three_nodes_form_one_cluster(cluster):
    ids = {_cluster_id(n.url) for n in cluster.nodes}
    assert len(ids) == 1
    brokers = httpx.get(f"{cluster.node(2).url}/brokers", timeout=10).json()["brokers"]
    assert sorted(brokers) == [1, 2, 3]
    cid = ids.pop()
    controller = httpx.get(f"{cluster.node(3).url}/v3/clusters/{cid}", timeout=10).json()["controller"]["related"]
    assert controller.rsplit("/", 1)[1] in {"1", "2", "3"}


def test_replicated_topic_any_node_serves_any_request(cluster):
    n1, n2, n3 = cluster.nodes
    create_topic(n1.url, "orders", partitions=3, rf=3)
    # Every node knows the topic; leaders spread over the nodes; ISR starts full.
    states = [wait_for(lambda p=p: partition_state(n2.url, "orders", p)) for p in range(3)]
    assert sorted(s["leader"] for s in states) == [1, 2, 3]
    for s in states:
        assert sorted(r["broker"] for r in s["replicas"]) == [1, 2, 3]
    wait_for(lambda: all(all(r["in_sync"] for r in partition_state(n3.url, "orders", p)["replicas"])
                         for p in range(3)), what="full ISR")
    # Produce through every node (forwarded to each partition's leader), acks=all.
    expected: dict[int, list[str]] = {0: [], 1: [], 2: []}
    for i in range(30):
        node = cluster.nodes[i % 3]
        p = i % 3
        r = produce(node.url, "orders", [f"v{i}"], partition=p)
        assert r.status_code == 200, r.text
        assert r.json()["offsets"][0]["offset"] == len(expected[p])
        expected[p].append(f"v{i}")
    # A topic-level produce spreading records over partitions led by different nodes.
    r = httpx.post(f"{n3.url}/topics/orders", timeout=30, headers={"Content-Type": BINARY}, json={
        "records": [{"value": base64.b64encode(f"k{p}".encode()).decode(), "partition": p} for p in range(3)]})
    assert r.status_code == 200, r.text
    for o in r.json()["offsets"]:
        assert o["offset"] == len(expected[o["partition"]])
        expected[o["partition"]].append(f"k{o['partition']}")
    for node in cluster.nodes:
        for p in range(3):
            assert [v for _, v in consume_all(node.url, "orders", p)] == expected[p]
    # Replicas converge: same log end offset on all three (the leader's HW reaches it).
    for p in range(3):
        wait_for(lambda p=p: httpx.get(f"{n1.url}/topics/orders/partitions/{p}/offsets", timeout=10)
                 .json()["end_offset"] == len(expected[p]), what="HW at the end")


def test_replicas_hold_identical_logs(cluster):
    n1 = cluster.node(1)
    create_topic(n1.url, "same", partitions=1, rf=3)
    for i in range(20):
        batch = build_batch([Record(j, 1_700_000_000_000 + i, None, f"b{i}r{j}".encode()) for j in range(5)])
        r = httpx.post(f"{n1.url}/topics/same/partitions/0?acks=all", content=batch, timeout=30,
                       headers={"Content-Type": RECORDBATCH})
        assert r.status_code == 200, r.text
    cluster.stop()
    crcs = []
    for n in cluster.nodes:
        seqs = []
        for f in sorted((n.data_dir / "same-0").glob("*.log")):
            seqs += [(b.base_offset, b.crc) for _, b in iter_batches(f.read_bytes())]
        crcs.append(seqs)
    assert len(crcs[0]) == 20
    assert crcs[0] == crcs[1] == crcs[2]


def test_min_insync_replicas_refuses_acks_all_and_isr_shrinks(cluster):
    n1 = cluster.node(1)
    create_topic(n1.url, "safe", partitions=1, rf=3, min_insync_replicas="3")
    leader = wait_for(lambda: partition_state(n1.url, "safe")["leader"], what="a leader")
    wait_for(lambda: all(r["in_sync"] for r in partition_state(n1.url, "safe")["replicas"]), what="full ISR")
    assert produce(n1.url, "safe", ["a"]).status_code == 200
    follower = next(n for n in cluster.nodes if n.node_id != leader)
    follower.kill()
    lead = cluster.node(leader)
    # The leader shrinks the ISR after replica.lag.time.max.ms (the controller still has a quorum) ...
    wait_for(lambda: follower.node_id not in [r["broker"] for r in partition_state(lead.url, "safe")["replicas"]
                                              if r["in_sync"]], what="ISR shrink", timeout_s=30)
    # ... and then refuses acks=all (nothing appended) but takes acks=1.
    r = produce(lead.url, "safe", ["b"])
    assert r.status_code == 503 and r.json()["error_code"] == 50303, r.text
    r = produce(lead.url, "safe", ["c"], acks="1")
    assert r.status_code == 200, r.text
    assert [v for _, v in consume_all(lead.url, "safe")] == ["a", "c"]
    # The follower comes back, catches up and rejoins the ISR; acks=all works again.
    follower.start(wait=False)
    wait_for(lambda: all(r["in_sync"] for r in partition_state(lead.url, "safe")["replicas"]),
             what="ISR expansion", timeout_s=30)
    r = produce(n1.url, "safe", ["d"])
    assert r.status_code == 200, r.text
    assert [v for _, v in consume_all(follower.url, "safe")] == ["a", "c", "d"]


def test_internal_endpoints_refuse_unsigned_requests(cluster):
    n1 = cluster.node(1)
    for path in ("/internal/replication/fetch", "/internal/controller/create_topic", "/internal/raft/messages"):
        r = httpx.post(f"{n1.url}{path}", json={"replica_id": 2, "partitions": []}, timeout=10)
        assert r.status_code == 401, (path, r.text)
        assert r.json()["error_code"] == 40101


def test_controlled_shutdown_moves_leadership_first_and_the_preferred_leader_returns(tmp_path):
    c = Cluster(tmp_path, 3, {"leader.imbalance.check.interval.seconds": "2"})
    try:
        c.start()
        n1 = c.node(1)
        create_topic(n1.url, "moving", partitions=3, rf=3)
        wait_for(lambda: all(all(r["in_sync"] for r in partition_state(n1.url, "moving", p)["replicas"])
                             for p in range(3)), what="full ISR")
        preferred = {p: partition_state(n1.url, "moving", p)["leader"] for p in range(3)}
        victim = c.node(preferred[0])
        for i in range(10):
            assert produce(n1.url, "moving", [f"v{i}"], partition=0).status_code == 200
        # SIGTERM: the node hands its leaderships over before it exits, and exits 0.
        assert victim.stop() == 0
        survivor = next(n for n in c.nodes if n is not victim)
        state = partition_state(survivor.url, "moving", 0)
        assert state["leader"] not in (-1, victim.node_id), state
        assert victim.node_id not in [r["broker"] for r in state["replicas"] if r["in_sync"]]
        assert "controlled shutdown done" in victim.read_log()
        assert produce(survivor.url, "moving", ["after"], partition=0).status_code == 200
        # Back again: it catches up, rejoins the ISR, and becomes leader of its partitions again.
        victim.start()
        wait_for(lambda: {p: partition_state(survivor.url, "moving", p)["leader"] for p in range(3)} == preferred,
                 timeout_s=30, what="preferred leaders back")
        assert [v for _, v in consume_all(victim.url, "moving", 0)] == [f"v{i}" for i in range(10)] + ["after"]
    finally:
        c.stop()
