"""Local retention and compaction of a user topic, through a real node's background cleaner.

The pure rules are unit-tested (tests/unit/test_retention.py, test_compactor.py) and the cleaner
in process (test_cleaner.py); here a real `lakelog node` applies a topic's `retention.ms`,
`retention.bytes` and `cleanup.policy=compact` to what was produced over HTTP, and a consumer sees
the result: the log start offset moves past whole expired segments, and a compacted partition keeps
the latest value of every key at its original offset. Each test waits for that state, not for time.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from lakelog.logstore.record_batch import Record, build_batch
from tests.integration.test_node_api import JSON_V2, RECORDBATCH, fetch_all, offsets
from tests.support.faults import wait_for
from tests.support.nodes import NodeProcess, start_node

DAY_MS = 24 * 3600 * 1000


@pytest.fixture(scope="module")
def cleaner_node(tmp_path_factory) -> NodeProcess:
    n = start_node(tmp_path_factory.mktemp("cleanup"), **{"log.cleaner.backoff.ms": "100"})
    try:
        yield n
    finally:
        try:
            n.stop()
        finally:
            n.kill()


@pytest.fixture(scope="module")
def client(cleaner_node):
    with httpx.Client(base_url=cleaner_node.url, timeout=30) as c:
        cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
        c.cluster_id = cid
        yield c


def create(client: httpx.Client, name: str, configs: dict[str, str]) -> None:
    r = client.post(f"/v3/clusters/{client.cluster_id}/topics", json={
        "topic_name": name, "partitions_count": 1, "configs": [{"name": k, "value": v} for k, v in configs.items()]})
    assert r.status_code == 201, r.text


def partition_gauge(url: str, name: str, topic: str) -> int:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    for line in text.splitlines():
        if line.startswith(name + "{") and f'topic="{topic}"' in line:
            return int(float(line.rsplit(" ", 1)[1]))
    raise AssertionError(f"no {name} for {topic}")


def test_retention_ms_deletes_expired_segments(client, cleaner_node):
    create(client, "expiring", {"segment.bytes": "1024", "retention.ms": str(DAY_MS)})
    old_ts = 1_600_000_000_000  # 2020: far past retention.ms
    for i in range(20):  # 20 old batches of ~230 bytes: several sealed segments
        batch = build_batch([Record(0, old_ts + i, f"k{i}".encode(), b"o" * 150)])
        r = client.post("/topics/expiring/partitions/0", content=batch, headers={"Content-Type": RECORDBATCH})
        assert r.status_code == 200, r.text
    fresh = build_batch([Record(0, int(time.time() * 1000), b"fresh", b"f" * 150)])
    r = client.post("/topics/expiring/partitions/0", content=fresh, headers={"Content-Type": RECORDBATCH})
    assert r.status_code == 200, r.text
    assert offsets(client, "expiring", 0)["end_offset"] == 21
    # Every sealed segment is older than retention.ms; the active segment (holding "fresh") stays.
    wait_for(lambda: offsets(client, "expiring", 0)["beginning_offset"] >= 15, 60, "expired segments deleted")
    left = fetch_all(client, "expiring", 0)
    assert left and left[-1]["offset"] == 20 and offsets(client, "expiring", 0)["end_offset"] == 21
    assert [r["offset"] for r in left] == list(range(left[0]["offset"], 21))  # whole segments, from the start


def test_retention_bytes_keeps_the_newest_segments(client, cleaner_node):
    create(client, "bounded", {"segment.bytes": "1024", "retention.bytes": "2048"})
    for i in range(40):
        r = client.post("/topics/bounded/partitions/0", content=json.dumps({"records": [{"value": "b" * 150}]}),
                        headers={"Content-Type": JSON_V2})
        assert r.status_code == 200, r.text
    # Wait for the settled state: what is left locally is retention.bytes of sealed segments at most,
    # plus the active segment (a pass may delete segment by segment).
    wait_for(lambda: partition_gauge(cleaner_node.url, "lakelog_partition_size_bytes", "bounded") <= 2048 + 1024,
             60, "segments over retention.bytes deleted")
    start = offsets(client, "bounded", 0)["beginning_offset"]
    left = fetch_all(client, "bounded", 0)
    assert start > 0 and [r["offset"] for r in left] == list(range(start, 40))  # the newest, none skipped


def test_compaction_keeps_the_latest_value_of_each_key_at_its_offset(client, cleaner_node):
    create(client, "compacted", {"cleanup.policy": "compact", "segment.bytes": "1024",
                                 "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": str(DAY_MS)})
    latest: dict[str, tuple[int, str]] = {}
    for round_ in range(15):
        for k in range(5):
            r = client.post("/topics/compacted/partitions/0", headers={"Content-Type": JSON_V2}, content=json.dumps(
                {"records": [{"key": f"key-{k}", "value": f"r{round_}-" + "c" * 60}]}))
            assert r.status_code == 200, r.text
            latest[f"key-{k}"] = (r.json()["offsets"][0]["offset"], f"r{round_}-" + "c" * 60)
    total = offsets(client, "compacted", 0)["end_offset"]
    assert total == 75

    def compacted():
        recs = fetch_all(client, "compacted", 0, accept=JSON_V2)
        return recs if len(recs) < total else None

    recs = wait_for(compacted, 60, "the cleaner to compact sealed segments")
    offs = [r["offset"] for r in recs]
    assert offs == sorted(set(offs)) and offs[-1] == total - 1  # original offsets, the last one kept
    by_key: dict[str, tuple[int, str]] = {}
    for r in recs:
        by_key[r["key"]] = (r["offset"], r["value"])
    assert by_key == latest  # every key's latest value survives, at its offset
    assert offsets(client, "compacted", 0)["beginning_offset"] == 0  # compaction never moves the log start
