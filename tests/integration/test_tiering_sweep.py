"""A real node on moto's S3 server over HTTP: many tiered partitions upload through the remote log
manager's pool, and the remote data of a topic deleted while the store was down is removed by the
deleted-topics sweep once the store is back."""

from __future__ import annotations

import base64
import uuid

import httpx
import pytest

from tests.support.s3server import DEFAULT_REGION, S3Server
from tests.support.faults import wait_for
from tests.support.nodes import start_node
from lakelog.tiering.errors import ObjectNotFoundError
from lakelog.tiering.layout import parse_segment_file
from lakelog.tiering.manifest_codec import decode
from lakelog.tiering.s3_store import S3Store

BINARY = "application/vnd.kafka.binary.v2+json"
TIERED = {"remote.storage.enable": "true", "segment.bytes": "2048", "index.interval.bytes": "256",
          "retention.ms": "-1"}
NODE = {"remote.log.manager.task.interval.ms": "100", "remote.segment.delete.delay.ms": "0",
        "remote.log.metadata.max.age.ms": "0", "remote.storage.max.attempts": "1",
        "remote.storage.connect.timeout.ms": "500", "remote.storage.request.timeout.ms": "2000",
        "remote.log.manager.thread.pool.size": "4",
        "remote.log.deleted.topics.sweep.interval.ms": "300", "remote.log.deleted.topics.grace.ms": "500"}


@pytest.fixture
def s3(monkeypatch):
    server = S3Server().start()
    try:
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        yield server
    finally:
        server.stop()


def create_topic(url: str, name: str, partitions: int) -> None:
    cid = httpx.get(f"{url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
    r = httpx.post(f"{url}/v3/clusters/{cid}/topics", timeout=30, json={
        "topic_name": name, "partitions_count": partitions, "replication_factor": 1,
        "configs": [{"name": k, "value": v} for k, v in TIERED.items()]})
    assert r.status_code == 201, r.text


def produce(url: str, topic: str, partition: int, n: int) -> None:
    for i in range(0, n, 20):
        r = httpx.post(f"{url}/topics/{topic}/partitions/{partition}", timeout=30, headers={"Content-Type": BINARY},
                       json={"records": [{"value": base64.b64encode(f"{topic}-{partition}-{j:05d}-{'x' * 80}"
                                                                   .encode()).decode()} for j in range(i, i + 20)]})
        assert r.status_code == 200, r.text


def segment_objects(store: S3Store, topic: str, partition: int) -> list[str]:
    return [o.key for o in store.list(f"{topic}-{partition}/")
            if parse_segment_file(o.key.rsplit("/", 1)[-1]) is not None]


def committed_objects(store: S3Store, topic: str, partition: int) -> set[str]:
    """The objects of the segments the manifest says finished copying: a copy still in flight when the
    store pauses may fail and be cleaned up (then uploaded again under a new id), which is correct."""
    try:
        manifest = decode(store.get(f"{topic}-{partition}/manifest.json")[0])
    except ObjectNotFoundError:
        return set()
    stems = {s.stem for s in manifest.copy_finished}
    return {k for k in segment_objects(store, topic, partition) if k.rsplit("/", 1)[-1].rsplit(".", 1)[0] in stems}


def test_many_partitions_upload_and_a_deletion_during_an_outage_is_swept(tmp_path, s3):
    bucket = f"lakelog-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    env = s3.env()
    store = S3Store(bucket, "tier", endpoint_url=s3.endpoint_url, region=DEFAULT_REGION,
                    access_key_id=env["AWS_ACCESS_KEY_ID"], secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    node = start_node(tmp_path, **NODE, **{"remote.storage.url": f"s3://{bucket}/tier"})
    try:
        url = node.url
        create_topic(url, "many", 6)
        create_topic(url, "doomed", 1)
        for p in range(6):
            produce(url, "many", p, 100)
        produce(url, "doomed", 0, 100)
        wait_for(lambda: all(committed_objects(store, "many", p) for p in range(6)) and
                 segment_objects(store, "doomed", 0), what="every partition uploaded")
        kept = {p: committed_objects(store, "many", p) for p in range(6)}
        assert all(kept.values())

        s3.pause()  # every attempt of the node handling the deletion fails
        cid = httpx.get(f"{url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
        assert httpx.delete(f"{url}/v3/clusters/{cid}/topics/doomed", timeout=60).status_code == 204
        assert "deleting the remote data failed; it stays in the remote tier" in node.read_log()
        s3.resume()

        wait_for(lambda: not segment_objects(store, "doomed", 0), what="the sweep deletes the left-over data")
        manifest, _ = store.get("doomed-0/manifest.json")
        assert b'"deleted":true' in manifest  # a tombstone fences the deleted incarnation's writers
        for p in range(6):  # the live topic's data is untouched
            assert kept[p] <= set(segment_objects(store, "many", p))
        assert "deleted the remote data of doomed-0" in node.read_log()
    finally:
        node.stop()
        store.close()
