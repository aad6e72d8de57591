"""1,000 partitions on 3 real nodes: SIGKILL one node, and every partition takes an acks=all produce again.

Ten topics of 100 partitions, replication factor 3 (every node holds all 1,000 replicas and leads
about a third). Once every ISR is full, a node that is not the active controller is killed; the
test then produces one acks=all record to each partition through the live nodes (a non-leader
forwards to the leader) until every partition has taken one, within a bounded wait. No assertion
on how fast: the bound only keeps a broken cluster from hanging the suite.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.support.faults import wait_for
from tests.support.nodes import Cluster

TOPICS = 10
PARTITIONS = 100
JSON_V2 = "application/vnd.kafka.json.v2+json"
#: Bounds on the waits (a loaded 2-core CI machine opens 3,000 logs slowly); not speed assertions.
SETTLE_S = 600.0
WRITABLE_S = 600.0
#: Sessions and elections longer than the suite's fast settings: opening 3,000 logs on a loaded
#: machine must not look like a dead node or a dead Raft leader.
OVERRIDES = {"broker.session.timeout.ms": "10000", "broker.heartbeat.interval.ms": "1000",
             "controller.quorum.election.timeout.ms": "3000", "replica.lag.time.max.ms": "10000",
             "log.cleaner.enable": "false"}


def _views(client: httpx.Client, url: str, topic: str) -> list[dict] | None:
    try:
        r = client.get(f"{url}/topics/{topic}/partitions", timeout=30)
    except httpx.HTTPError:
        return None
    return r.json() if r.status_code == 200 else None


def _controller(client: httpx.Client, url: str) -> int:
    cid = client.get(f"{url}/v3/clusters").json()["data"][0]["cluster_id"]
    related = client.get(f"{url}/v3/clusters/{cid}").json()["controller"]["related"]
    return int(related.rstrip("/").rsplit("/", 1)[1])


def test_every_partition_is_writable_again_after_one_of_three_nodes_is_killed(tmp_path):
    cluster = Cluster(tmp_path, 3, overrides=OVERRIDES).start(timeout_s=120)
    topics = [f"many-{i}" for i in range(TOPICS)]
    try:
        with httpx.Client(timeout=120) as client:
            url = cluster.node(1).url
            cid = client.get(f"{url}/v3/clusters").json()["data"][0]["cluster_id"]
            for t in topics:
                body = {"topic_name": t, "partitions_count": PARTITIONS, "replication_factor": 3,
                        "configs": [{"name": "min.insync.replicas", "value": "2"}]}
                for attempt in range(120):
                    r = client.post(f"{cluster.nodes[attempt % 3].url}/v3/clusters/{cid}/topics", json=body)
                    if r.status_code == 201 or "already exists" in r.text:
                        break
                    # A node busy opening the last topic's logs may answer 503, or be fenced a moment.
                    assert r.status_code == 503 or "available broker" in r.text, r.text
                    time.sleep(1.0)

            def settled() -> bool:
                for n in cluster.nodes:
                    for t in topics:
                        v = _views(client, n.url, t)
                        if v is None or any(p["leader"] < 0 or not all(r["in_sync"] for r in p["replicas"])
                                            for p in v):
                            return False
                return True

            wait_for(settled, SETTLE_S, "every ISR full on every node", interval_s=1.0)
            victim = next(n for n in reversed(cluster.nodes) if n.node_id != _controller(client, url))
            live = [n for n in cluster.nodes if n is not victim]
            victim.kill()

            pending = {(t, p) for t in topics for p in range(PARTITIONS)}
            refused: dict[int, int] = {}
            rounds = [0]

            def produce(key: tuple[str, int], node_url: str) -> tuple[tuple[str, int], int]:
                try:
                    r = client.post(f"{node_url}/topics/{key[0]}/partitions/{key[1]}?acks=all",
                                    content=b'{"records":[{"value":1}]}', headers={"Content-Type": JSON_V2},
                                    timeout=30)
                    return key, r.status_code
                except httpx.HTTPError:
                    return key, 0

            def all_writable() -> bool:
                node_url = live[rounds[0] % len(live)].url
                rounds[0] += 1
                with ThreadPoolExecutor(8) as pool:
                    for key, status in pool.map(lambda k: produce(k, node_url), sorted(pending)):
                        if status == 200:
                            pending.discard(key)
                        else:
                            refused[status] = refused.get(status, 0) + 1
                return not pending

            wait_for(all_writable, WRITABLE_S, f"every partition writable after SIGKILL of node {victim.node_id}",
                     interval_s=1.0)
            assert not pending, f"still failing: {len(pending)}, refusals by status: {refused}"
            # The dead node leads nothing any more, as every live node sees it.
            for n in live:
                for t in topics:
                    v = _views(client, n.url, t)
                    assert v is not None and all(p["leader"] not in (victim.node_id, -1) for p in v)
    finally:
        cluster.stop()
