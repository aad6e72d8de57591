"""The node with the remote tier, end to end (real node processes): tiered topics offload sealed
segments, delete them locally once tiered, and serve consumers from offset 0 as if nothing moved;
against the filesystem store (one node) and moto's S3 server (a 3-node cluster losing its leader,
a store outage)."""

from __future__ import annotations

import base64
import re
import uuid

import httpx
import pytest

from tests.support.s3server import S3Server
from tests.support.nodes import Cluster, start_node
from tests.support.faults import wait_for

BINARY = "application/vnd.kafka.binary.v2+json"
TIERED = {"remote.storage.enable": "true", "segment.bytes": "2048", "index.interval.bytes": "256",
          "local.retention.bytes": "1", "retention.ms": "-1"}
FAST_TIER = {"remote.log.manager.task.interval.ms": "100", "remote.segment.delete.delay.ms": "0",
             "remote.log.metadata.max.age.ms": "0", "remote.storage.max.attempts": "1",
             "remote.storage.connect.timeout.ms": "500", "remote.storage.request.timeout.ms": "2000"}



def create_topic(url: str, name: str, rf: int = 1, **configs: str) -> None:
    cid = httpx.get(f"{url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
    r = httpx.post(f"{url}/v3/clusters/{cid}/topics", timeout=30, json={
        "topic_name": name, "partitions_count": 1, "replication_factor": rf,
        "configs": [{"name": k, "value": v} for k, v in configs.items()]})
    assert r.status_code == 201, r.text


def produce(url: str, topic: str, values: list[str]) -> list[int]:
    r = httpx.post(f"{url}/topics/{topic}/partitions/0?acks=all", timeout=30, headers={"Content-Type": BINARY},
                   json={"records": [{"value": base64.b64encode(v.encode()).decode()} for v in values]})
    assert r.status_code == 200, r.text
    return [o["offset"] for o in r.json()["offsets"]]


def offsets(url: str, topic: str, **params) -> dict:
    r = httpx.get(f"{url}/topics/{topic}/partitions/0/offsets", params=params, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def local_log_start(url: str, topic: str) -> int:
    """The leader's local log start offset (a local read at the end reports it)."""
    end = offsets(url, topic)["end_offset"]
    r = httpx.get(f"{url}/topics/{topic}/partitions/0/records", params={"offset": end, "timeout": 0},
                  headers={"Accept": BINARY}, timeout=30)
    assert r.status_code == 200, r.text
    return int(r.headers["X-Lakelog-Log-Start-Offset"])


def consume_all(url: str, topic: str) -> list[tuple[int, str, int]]:
    out: list[tuple[int, str, int]] = []
    offset = 0
    while True:
        r = httpx.get(f"{url}/topics/{topic}/partitions/0/records", timeout=30,
                      params={"offset": offset, "timeout": 0, "max_bytes": 1500}, headers={"Accept": BINARY})
        assert r.status_code == 200, r.text
        recs = r.json()
        if not recs:
            return out
        for rec in recs:
            out.append((rec["offset"], base64.b64decode(rec["value"]).decode(), rec["timestamp"]))
        offset = recs[-1]["offset"] + 1


def metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    m = re.search(rf"^{name}(?:_total)?(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def values(prefix: str, n: int) -> list[str]:
    return [f"{prefix}-{i:05d}-" + "x" * 80 for i in range(n)]


@pytest.fixture(scope="module")
def s3():
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_env(s3, monkeypatch):
    """A fresh bucket; the node processes inherit the AWS settings."""
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)
    bucket = f"lakelog-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    yield f"s3://{bucket}/tier"
    if s3.paused:
        s3.resume()


def test_filesystem_tier_single_node(tmp_path):
    node = start_node(tmp_path, **FAST_TIER, **{"remote.storage.url": (tmp_path / "remote").as_uri()})
    try:
        url, topic = node.url, "tiered"
        cid = httpx.get(f"{url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
        r = httpx.post(f"{url}/v3/clusters/{cid}/topics", timeout=30, json={
            "topic_name": "compacted", "partitions_count": 1, "configs": [
                {"name": "remote.storage.enable", "value": "true"}, {"name": "cleanup.policy", "value": "compact"}]})
        # Unlike Kafka, a compacted topic can be tiered: the Spark job compacts its remote tier.
        assert r.status_code == 201, r.text
        create_topic(url, topic, **TIERED)
        sent = values("a", 300)
        for i in range(0, len(sent), 20):
            assert produce(url, topic, sent[i:i + 20])[0] == i
        wait_for(lambda: local_log_start(url, topic) > 100, what="local segments deleted after upload")
        remote_logs = sorted((tmp_path / "remote").rglob("*.log"))
        assert remote_logs, "nothing in the remote tier"
        # A flipped byte in a remote segment: a clear 5xx, never wrong data.
        first = remote_logs[0]
        data = bytearray(first.read_bytes())
        data[len(data) // 2] ^= 0xFF
        first.write_bytes(bytes(data))
        r = httpx.get(f"{url}/topics/{topic}/partitions/0/records", params={"offset": 0, "timeout": 0},
                      headers={"Accept": BINARY}, timeout=30)
        assert r.status_code == 500 and r.json()["error_code"] == 50003, r.text
        data[len(data) // 2] ^= 0xFF
        first.write_bytes(bytes(data))
        got = consume_all(url, topic)
        assert [(o, v) for o, v, _ in got] == list(enumerate(sent))
        assert offsets(url, topic) == {"beginning_offset": 0, "end_offset": 300, "last_stable_offset": 300}
        # Timestamp lookups over tiered data.
        ts = {o: t for o, _, t in got}
        for o in (0, 5, 57, 150):
            if o < local_log_start(url, topic):
                found = offsets(url, topic, timestamp=ts[o])["offset"]
                assert found is not None and found <= o and ts[found] == ts[o]
        assert metric(url, "lakelog_remote_segments_uploaded") > 0
        assert metric(url, "lakelog_remote_fetches") > 0
        # Deleting the topic deletes its remote data.
        assert httpx.delete(f"{url}/v3/clusters/{cid}/topics/{topic}", timeout=30).status_code == 204
        assert not list((tmp_path / "remote").rglob("*.log"))
    finally:
        node.stop()


def test_s3_outage_produce_keeps_working_and_uploads_resume(tmp_path, s3, s3_env):
    node = start_node(tmp_path, **FAST_TIER, **{"remote.storage.url": s3_env})
    try:
        url, topic = node.url, "outage"
        create_topic(url, topic, **TIERED)
        for i in range(0, 60, 10):
            produce(url, topic, values("a", 60)[i:i + 10])
        wait_for(lambda: metric(url, "lakelog_remote_segments_uploaded") > 0, what="a first upload")
        s3.pause()
        start_before = local_log_start(url, topic)
        failures_before = metric(url, "lakelog_remote_upload_failures")
        sent = values("a", 60) + values("b", 200)
        for i in range(60, len(sent), 20):
            produce(url, topic, sent[i:i + 20])
        # Wait for state: an upload round has tried (and failed) during the outage.
        wait_for(lambda: metric(url, "lakelog_remote_upload_failures") > failures_before,
                 what="an upload failing during the outage")
        # Nothing new could be tiered: the local segments holding "b" stay.
        assert local_log_start(url, topic) <= max(start_before, 60)
        s3.resume()
        wait_for(lambda: local_log_start(url, topic) > 200, what="uploads resumed and local retention ran")
        assert [(o, v) for o, v, _ in consume_all(url, topic)] == list(enumerate(sent))
        assert offsets(url, topic)["beginning_offset"] == 0
    finally:
        node.stop()


def test_s3_three_nodes_leader_killed_mid_stream(tmp_path, s3, s3_env):
    cluster = Cluster(tmp_path, 3, overrides={**FAST_TIER, "remote.storage.url": s3_env,
                                              "min.insync.replicas": "2"})
    cluster.start()
    try:
        url, topic = cluster.nodes[0].url, "replicated"
        create_topic(url, topic, rf=3, **TIERED)
        wait_for(lambda: all(r["in_sync"] for r in httpx.get(f"{url}/topics/{topic}/partitions/0", timeout=10)
                             .json()["replicas"]), what="full ISR")
        sent = values("a", 150)
        for i in range(0, len(sent), 15):
            produce(url, topic, sent[i:i + 15])
        leader = httpx.get(f"{url}/topics/{topic}/partitions/0", timeout=10).json()["leader"]
        wait_for(lambda: local_log_start(cluster.node(leader).url, topic) > 50, what="first uploads")
        cluster.node(leader).kill()
        alive = [n for n in cluster.nodes if n.node_id != leader]
        url = alive[0].url
        new_leader = wait_for(lambda: (lambda l: l if l not in (-1, leader) else None)(
            httpx.get(f"{url}/topics/{topic}/partitions/0", timeout=10).json()["leader"]), what="a new leader")
        more = values("b", 150)
        for i in range(0, len(more), 15):
            wait_for(lambda i=i: produce(url, topic, more[i:i + 15]), what="produce after failover")
        sent += more
        wait_for(lambda: local_log_start(cluster.node(new_leader).url, topic) > 200,
                 what="the new leader uploads")
        got = consume_all(url, topic)
        assert [(o, v) for o, v, _ in got] == list(enumerate(sent))
        assert offsets(url, topic)["beginning_offset"] == 0
    finally:
        cluster.stop()
