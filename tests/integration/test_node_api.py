"""The ingest node's HTTP API against a real `lakelog node` process on loopback.

One node serves the whole module (each test works in its own topics); tests that need another
node configuration start their own and stop it. Bytes are cross-checked with an independent Kafka
implementation (kafka-python): its RecordBatch reader and its default partitioner's murmur2.
"""

from __future__ import annotations

import base64
import json
import random
import re
import resource
import struct
import threading
import time
import uuid

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_murmur2
from kafka.record.memory_records import MemoryRecords
from prometheus_client.parser import text_string_to_metric_families

from lakelog.logstore.compression import Compression
from lakelog.logstore.record_batch import Record, build_batch, crc32c
from tests.support.faults import wait_for
from tests.support.nodes import NodeProcess, start_node

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"
RECORDBATCH = "application/vnd.kafka.recordbatch"

#: Generous: a slow 2-core machine running the whole suite must never trip these.
HTTP_TIMEOUT_S = 30.0


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def api_node(tmp_path_factory) -> NodeProcess:
    """One real node for the module, stopped (SIGTERM, then SIGKILL) at the end."""
    n = start_node(tmp_path_factory.mktemp("api-node"))
    try:
        yield n
    finally:
        try:
            n.stop()
        finally:
            n.kill()


@pytest.fixture(scope="module")
def client(api_node) -> httpx.Client:
    with httpx.Client(base_url=api_node.url, timeout=HTTP_TIMEOUT_S) as c:
        yield c


@pytest.fixture(scope="module")
def cluster_id(client) -> str:
    r = client.get("/v3/clusters")
    assert r.status_code == 200, r.text
    return r.json()["data"][0]["cluster_id"]


@pytest.fixture
def new_topic(client, cluster_id, request):
    """Factory: create a fresh topic (unique name) and return its name."""

    def create(partitions: int = 1, configs: dict[str, str] | None = None) -> str:
        stem = re.sub(r"[^a-zA-Z0-9._-]", "-", request.node.name)[:60]
        name = f"{stem}-{uuid.uuid4().hex[:8]}"
        body = {"topic_name": name, "partitions_count": partitions,
                "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}
        r = client.post(f"/v3/clusters/{cluster_id}/topics", json=body)
        assert r.status_code == 201, r.text
        return name

    return create


# ------------------------------------------------------------------------------------------ helpers


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def produce(client: httpx.Client, topic: str, records: list[dict], *, partition: int | None = None,
            fmt: str = JSON_V2, acks: str | None = None) -> httpx.Response:
    path = f"/topics/{topic}" if partition is None else f"/topics/{topic}/partitions/{partition}"
    params = {"acks": acks} if acks is not None else None
    return client.post(path, content=json.dumps({"records": records}).encode(), params=params,
                       headers={"Content-Type": fmt})


def produce_ok(client: httpx.Client, topic: str, records: list[dict], **kw) -> list[dict]:
    r = produce(client, topic, records, **kw)
    assert r.status_code == 200, r.text
    return r.json()["offsets"]


def produce_batches(client: httpx.Client, topic: str, partition: int, body: bytes) -> httpx.Response:
    return client.post(f"/topics/{topic}/partitions/{partition}", content=body,
                       headers={"Content-Type": RECORDBATCH})


def fetch(client: httpx.Client, topic: str, partition: int, offset: int, *, accept: str = JSON_V2,
          timeout_ms: int = 0, max_bytes: int | None = None) -> httpx.Response:
    params = {"offset": offset, "timeout": timeout_ms}
    if max_bytes is not None:
        params["max_bytes"] = max_bytes
    return client.get(f"/topics/{topic}/partitions/{partition}/records", params=params,
                      headers={"Accept": accept})


def offsets(client: httpx.Client, topic: str, partition: int, **params) -> dict:
    r = client.get(f"/topics/{topic}/partitions/{partition}/offsets", params=params)
    assert r.status_code == 200, r.text
    return r.json()


def end_offsets(client: httpx.Client, topic: str, partitions: int) -> list[int]:
    return [offsets(client, topic, p)["end_offset"] for p in range(partitions)]


def fetch_all(client: httpx.Client, topic: str, partition: int, *, accept: str = BINARY_V2) -> list[dict]:
    """Every record of a partition (below the HW), following the offsets."""
    end = offsets(client, topic, partition)["end_offset"]
    out: list[dict] = []
    offset = offsets(client, topic, partition)["beginning_offset"]
    while offset < end:
        r = fetch(client, topic, partition, offset, accept=accept)
        assert r.status_code == 200, r.text
        got = r.json()
        assert got, f"no progress at offset {offset} below end offset {end}"
        out.extend(got)
        offset = got[-1]["offset"] + 1
    return out


def split_batches(data: bytes) -> list[bytes]:
    """Raw batch slices, by the length field (independent of the project's reader)."""
    out, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        out.append(data[pos:pos + 12 + length])
        pos += 12 + length
    assert pos == len(data), "trailing bytes after the last batch"
    return out


def kafka_decode(data: bytes) -> list[tuple]:
    """Decode with kafka-python: [(base offset, leader epoch, [records])], every CRC validated."""
    mr = MemoryRecords(data)
    out = []
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.magic == 2
        assert batch.validate_crc(), f"CRC of batch at offset {batch.base_offset} does not match"
        out.append((batch.base_offset, batch.leader_epoch, list(batch)))
    assert mr.valid_bytes() == len(data), "kafka-python found a partial batch"
    return out


def assert_error(r: httpx.Response, status: int, error_code: int | None = None) -> dict:
    assert r.status_code == status, f"expected {status}, got {r.status_code}: {r.text}"
    body = r.json()
    assert set(body) == {"error_code", "message"}, body
    assert isinstance(body["message"], str) and body["message"]
    # v2: the first three digits of error_code are the status; v3 (Confluent): the status itself.
    assert body["error_code"] // 100 == status or body["error_code"] == status, body
    if error_code is not None:
        assert body["error_code"] == error_code, body
    return body


def kafka_partition(key: bytes, partitions: int) -> int:
    return (kafka_murmur2(key) & 0x7FFFFFFF) % partitions


def compact_json(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def now_ms() -> int:
    return int(time.time() * 1000)


# ------------------------------------------------------------------------------------------ JSON v2

json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
header_lists = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=24)), max_size=3)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(st.tuples(json_values, json_values, header_lists), min_size=1, max_size=6))
def test_json_round_trip_any_json(client, new_topic, records):
    topic = new_topic(1)
    body = [{"key": k, "value": v, "headers": [{"key": hk, "value": b64(hv)} for hk, hv in hs]}
            for k, v, hs in records]
    acked = produce_ok(client, topic, body, partition=0)
    assert [o["offset"] for o in acked] == list(range(len(records)))
    assert all(o["partition"] == 0 and o["error_code"] is None and o["error"] is None for o in acked)

    r = fetch(client, topic, 0, 0, accept=JSON_V2)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith(JSON_V2)
    got = r.json()
    assert len(got) == len(records)
    for i, ((k, v, hs), rec) in enumerate(zip(records, got)):
        assert rec["topic"] == topic and rec["partition"] == 0 and rec["offset"] == i
        # json.dumps tells 1 from 1.0 and True from 1, which == does not.
        assert json.dumps(rec["key"]) == json.dumps(k)
        assert json.dumps(rec["value"]) == json.dumps(v)
        assert [(h["key"], h["value"]) for h in rec["headers"]] == [(hk, b64(hv)) for hk, hv in hs]


def test_json_null_value_is_a_tombstone_and_values_are_stored_as_compact_json(client, new_topic):
    topic = new_topic(1)
    sent = [{"key": "k1", "value": None},
            {"key": {"b": [1, 2.5, "é"], "a": None}, "value": {"x": True}},
            {"value": "only a value"},
            {"key": None, "value": 0, "headers": [{"key": "h", "value": b64(b"\x00\xff")},
                                                  {"key": "empty", "value": None}]}]
    acked = produce_ok(client, topic, sent, partition=0)
    assert [o["offset"] for o in acked] == [0, 1, 2, 3]

    got = fetch(client, topic, 0, 0).json()
    assert [g["key"] for g in got] == ["k1", {"b": [1, 2.5, "é"], "a": None}, None, None]
    assert [g["value"] for g in got] == [None, {"x": True}, "only a value", 0]
    assert got[3]["headers"] == [{"key": "h", "value": b64(b"\x00\xff")}, {"key": "empty", "value": None}]

    # The raw batch: a tombstone has a null value (length -1), not the bytes `null`.
    raw = fetch(client, topic, 0, 0, accept=RECORDBATCH).content
    [(base, _, recs)] = kafka_decode(raw)
    assert base == 0
    assert recs[0].key == b'"k1"' and recs[0].value is None
    assert recs[1].key == compact_json({"b": [1, 2.5, "é"], "a": None})
    assert recs[1].value == b'{"x":true}'
    assert recs[2].key is None and recs[2].value == b'"only a value"'
    assert recs[3].headers == [("h", b"\x00\xff"), ("empty", None)]


def test_media_type_parameters_and_plain_json(client, new_topic):
    topic = new_topic(1)
    acked = produce_ok(client, topic, [{"value": {"n": 1}}], partition=0, fmt="application/json")
    assert acked[0]["offset"] == 0
    assert fetch(client, topic, 0, 0, accept="application/json").json()[0]["value"] == {"n": 1}
    acked = produce_ok(client, topic, [{"value": b64(b"\x01")}], partition=0, fmt=f"{BINARY_V2}; charset=utf-8")
    assert acked[0]["offset"] == 1
    got = fetch(client, topic, 0, 1, accept=f"text/html, {BINARY_V2};q=0.9").json()
    assert [x["value"] for x in got] == [b64(b"\x01")]


# ------------------------------------------------------------------------------------------ binary v2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(st.tuples(st.none() | st.binary(max_size=64), st.none() | st.binary(max_size=600),
                                   header_lists), min_size=1, max_size=8))
def test_binary_round_trip_arbitrary_bytes(client, new_topic, records):
    topic = new_topic(1)
    body = [{"key": b64(k), "value": b64(v), "headers": [{"key": hk, "value": b64(hv)} for hk, hv in hs]}
            for k, v, hs in records]
    acked = produce_ok(client, topic, body, partition=0, fmt=BINARY_V2)
    assert [o["offset"] for o in acked] == list(range(len(records)))

    r = fetch(client, topic, 0, 0, accept=BINARY_V2)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith(BINARY_V2)
    got = r.json()
    assert [(g["offset"], g["key"], g["value"]) for g in got] == [
        (i, b64(k), b64(v)) for i, (k, v, _) in enumerate(records)]
    assert [[(h["key"], h["value"]) for h in g["headers"]] for g in got] == [
        [(hk, b64(hv)) for hk, hv in hs] for _, _, hs in records]

    # kafka-python reads the same bytes back from the raw batch.
    [(_, _, recs)] = kafka_decode(fetch(client, topic, 0, 0, accept=RECORDBATCH).content)
    assert [(x.offset, x.key, x.value, list(x.headers)) for x in recs] == [
        (i, k, v, list(hs)) for i, (k, v, hs) in enumerate(records)]


def test_binary_records_that_are_not_json_are_refused_as_json_but_served_as_binary(client, new_topic):
    topic = new_topic(1)
    produce_ok(client, topic, [{"value": b64(b"\xff\xfe not json")}], partition=0, fmt=BINARY_V2)
    assert_error(fetch(client, topic, 0, 0, accept=JSON_V2), 406, 40602)
    assert fetch(client, topic, 0, 0, accept=BINARY_V2).json()[0]["value"] == b64(b"\xff\xfe not json")
    assert_error(fetch(client, topic, 0, 0, accept="text/plain"), 406, 40601)


# ------------------------------------------------------------------------------------------ RecordBatch


def make_batch(n: int, *, tag: str, ts: int, compression: Compression = Compression.NONE,
               producer_base_offset: int = 0) -> tuple[bytes, list[Record]]:
    records = [Record(producer_base_offset + i, ts + i, f"{tag}-k{i}".encode() if i % 3 else None,
                      (f"{tag}-v{i}-".encode() * (i + 1)) if i % 5 != 4 else None,
                      (("trace", f"{tag}{i}".encode()), ("nil", None)) if i % 2 else ())
               for i in range(n)]
    return build_batch(records, compression=compression), records


@pytest.mark.parametrize("codec", list(Compression), ids=[c.name.lower() for c in Compression])
def test_recordbatch_round_trip_stored_as_received(client, new_topic, codec):
    topic = new_topic(2)
    ts = now_ms()
    # Producers' base offsets are rewritten by the node, whatever they were.
    sent = [make_batch(n, tag=f"b{j}", ts=ts + 100 * j, compression=codec, producer_base_offset=base)
            for j, (n, base) in enumerate([(3, 0), (1, 77), (7, 5), (4, 0)])]
    # Something already in the partition, so assigned offsets do not start at 0.
    produce_ok(client, topic, [{"value": "first"}, {"value": "second"}], partition=1)

    r = produce_batches(client, topic, 1, b"".join(b for b, _ in sent))
    assert r.status_code == 200, r.text
    acked = r.json()["offsets"]
    expected_bases = [2, 5, 6, 13]
    assert acked == [{"partition": 1, "offset": o, "error_code": None, "error": None} for o in expected_bases]
    assert offsets(client, topic, 1)["end_offset"] == 17
    assert offsets(client, topic, 0)["end_offset"] == 0

    r = fetch(client, topic, 1, 2, accept=RECORDBATCH)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith(RECORDBATCH)
    assert r.headers["x-lakelog-high-watermark"] == "17"
    fetched = split_batches(r.content)
    assert len(fetched) == len(sent)
    decoded = kafka_decode(r.content)
    for (orig, recs), raw, (base, epoch, got), expected_base in zip(sent, fetched, decoded, expected_bases):
        assert raw[16:] == orig[16:], "payload after offset/length/epoch must be stored as received"
        assert raw[8:12] == orig[8:12]
        assert base == expected_base and struct.unpack_from(">q", raw)[0] == expected_base
        assert epoch >= 0, "the leader stamps its epoch over the producer's -1"
        assert [(x.offset, x.timestamp, x.key, x.value, list(x.headers)) for x in got] == [
            (expected_base + i, rec.timestamp, rec.key, rec.value, list(rec.headers)) for i, rec in enumerate(recs)]

    # The same records through the binary JSON view, offsets continuous after the JSON ones.
    as_binary = fetch_all(client, topic, 1)
    assert [x["offset"] for x in as_binary] == list(range(17))
    assert [x["value"] for x in as_binary[2:]] == [b64(rec.value) for _, recs in sent for rec in recs]


def test_recordbatch_fetch_from_inside_a_batch_returns_the_whole_batch(client, new_topic):
    topic = new_topic(1)
    b1, _ = make_batch(5, tag="x", ts=now_ms())
    b2, _ = make_batch(5, tag="y", ts=now_ms())
    assert produce_batches(client, topic, 0, b1 + b2).status_code == 200

    raw = fetch(client, topic, 0, 3, accept=RECORDBATCH).content
    assert [base for base, _, _ in kafka_decode(raw)] == [0, 5]
    # The JSON views leave out the records below the asked offset.
    assert [x["offset"] for x in fetch(client, topic, 0, 3, accept=BINARY_V2).json()] == [3, 4, 5, 6, 7, 8, 9]
    # max_bytes is a soft limit: at least one whole batch comes back.
    one = fetch(client, topic, 0, 0, accept=RECORDBATCH, max_bytes=1).content
    assert split_batches(one) == [one] and kafka_decode(one)[0][0] == 0


def test_recordbatch_produce_is_refused_on_the_topic_endpoint(client, new_topic):
    topic = new_topic(1)
    batch, _ = make_batch(2, tag="t", ts=now_ms())
    r = client.post(f"/topics/{topic}", content=batch, headers={"Content-Type": RECORDBATCH})
    assert_error(r, 415, 41501)
    assert offsets(client, topic, 0)["end_offset"] == 0


# ------------------------------------------------------------------------------------------ shapes


def test_produce_offsets_come_back_in_request_order(client, new_topic):
    topic = new_topic(4)
    targets = [3, 0, 3, 1, 0, 3, 2, 1, 3]
    acked = produce_ok(client, topic, [{"value": f"v{i}", "partition": p} for i, p in enumerate(targets)])
    assert all(set(o) == {"partition", "offset", "error_code", "error"} for o in acked)
    assert [o["partition"] for o in acked] == targets
    # Within a partition, offsets follow request order.
    for p in range(4):
        mine = [o["offset"] for o in acked if o["partition"] == p]
        assert mine == list(range(len(mine)))
    for i, o in enumerate(acked):
        got = fetch(client, topic, o["partition"], o["offset"]).json()
        assert got[0]["offset"] == o["offset"] and got[0]["value"] == f"v{i}"

    # A partition in the path overrides the topic endpoint's choice.
    acked = produce_ok(client, topic, [{"key": "k", "value": 1}, {"value": 2}], partition=2)
    assert [(o["partition"], o["offset"]) for o in acked] == [(2, 1), (2, 2)]


def test_acks_values(client, new_topic):
    topic = new_topic(1)
    assert produce_ok(client, topic, [{"value": 1}], partition=0, acks="1")[0]["offset"] == 0
    assert produce_ok(client, topic, [{"value": 2}], partition=0, acks="all")[0]["offset"] == 1
    assert produce_ok(client, topic, [{"value": 3}], partition=0, acks="-1")[0]["offset"] == 2
    assert produce_ok(client, topic, [{"value": 4}], partition=0, acks="0")[0]["offset"] == -1
    assert_error(produce(client, topic, [{"value": 5}], partition=0, acks="2"), 422)
    assert [x["value"] for x in fetch(client, topic, 0, 0).json()] == [1, 2, 3, 4]


def test_v3_cluster_topics_partitions_brokers(client, cluster_id, api_node):
    base = f"/v3/clusters/{cluster_id}"
    r = client.get("/v3/clusters")
    assert r.status_code == 200
    clusters = r.json()
    assert clusters["kind"] == "KafkaClusterList" and len(clusters["data"]) == 1
    assert clusters["data"][0]["cluster_id"] == cluster_id
    assert client.get(base).json()["cluster_id"] == cluster_id
    assert_error(client.get("/v3/clusters/not-this-cluster"), 404)

    name = f"v3-topic-{uuid.uuid4().hex[:8]}"
    r = client.post(f"{base}/topics", json={"topic_name": name, "partitions_count": 3, "replication_factor": 1,
                                            "configs": [{"name": "retention.ms", "value": "3600000"}]})
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["kind"] == "KafkaTopic" and created["topic_name"] == name
    assert created["partitions_count"] == 3 and created["replication_factor"] == 1
    assert created["cluster_id"] == cluster_id and created["is_internal"] is False
    assert created["partitions"]["related"].endswith(f"{base}/topics/{name}/partitions")

    listed = client.get(f"{base}/topics").json()
    assert listed["kind"] == "KafkaTopicList"
    assert name in [t["topic_name"] for t in listed["data"]]
    got = client.get(f"{base}/topics/{name}").json()
    assert got["topic_id"] == created["topic_id"] and got["partitions_count"] == 3

    parts = client.get(f"{base}/topics/{name}/partitions").json()
    assert parts["kind"] == "KafkaPartitionList"
    assert [p["partition_id"] for p in parts["data"]] == [0, 1, 2]
    for p in parts["data"]:
        assert p["topic_name"] == name
        assert p["leader"]["related"].endswith("/brokers/1")
    one = client.get(f"{base}/topics/{name}/partitions/2").json()
    assert one["partition_id"] == 2 and one["leader"]["related"].endswith("/brokers/1")
    assert_error(client.get(f"{base}/topics/{name}/partitions/3"), 404, 404)

    brokers = client.get(f"{base}/brokers").json()
    assert brokers["kind"] == "KafkaBrokerList"
    [broker] = brokers["data"]
    assert broker["broker_id"] == 1
    assert (broker["host"], broker["port"]) == ("127.0.0.1", api_node.port)
    assert client.get(f"{base}/brokers/1").json()["port"] == api_node.port
    assert_error(client.get(f"{base}/brokers/7"), 404)

    # Delete: gone from every view; the name can be used again, with empty partitions.
    produce_ok(client, name, [{"value": "old"}], partition=0)
    r = client.delete(f"{base}/topics/{name}")
    assert r.status_code == 204
    assert_error(client.get(f"{base}/topics/{name}"), 404, 404)
    assert name not in [t["topic_name"] for t in client.get(f"{base}/topics").json()["data"]]
    assert_error(client.delete(f"{base}/topics/{name}"), 404, 404)
    assert client.post(f"{base}/topics", json={"topic_name": name, "partitions_count": 1}).status_code == 201
    assert offsets(client, name, 0) == {"beginning_offset": 0, "end_offset": 0, "last_stable_offset": 0}
    assert fetch(client, name, 0, 0).json() == []


def test_v3_topic_configs(client, cluster_id, new_topic):
    topic = new_topic(1, {"retention.ms": "3600000"})
    base = f"/v3/clusters/{cluster_id}/topics/{topic}/configs"

    listed = client.get(base).json()
    assert listed["kind"] == "KafkaTopicConfigList"
    by_name = {c["name"]: c for c in listed["data"]}
    assert {"retention.ms", "segment.bytes", "cleanup.policy", "max.message.bytes"} <= set(by_name)
    assert by_name["retention.ms"]["value"] == "3600000" and by_name["retention.ms"]["is_default"] is False
    assert by_name["cleanup.policy"]["value"] == "delete" and by_name["cleanup.policy"]["is_default"] is True

    one = client.get(f"{base}/segment.bytes").json()
    assert one["kind"] == "KafkaTopicConfig" and one["name"] == "segment.bytes" and one["topic_name"] == topic
    assert_error(client.get(f"{base}/no.such.config"), 404)

    assert client.put(f"{base}/segment.bytes", json={"value": "1048576"}).status_code == 204
    one = client.get(f"{base}/segment.bytes").json()
    assert one["value"] == "1048576" and one["is_default"] is False and one["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert_error(client.put(f"{base}/segment.bytes", json={"value": "not a number"}), 400)
    assert_error(client.put(f"{base}/no.such.config", json={"value": "1"}), 404)
    assert client.get(f"{base}/segment.bytes").json()["value"] == "1048576"

    assert client.delete(f"{base}/segment.bytes").status_code == 204
    one = client.get(f"{base}/segment.bytes").json()
    assert one["is_default"] is True and one["value"] == str(1024 * 1024 * 1024)

    r = client.post(f"{base}:alter", json={"data": [{"name": "cleanup.policy", "value": "compact"},
                                                     {"name": "retention.ms", "operation": "DELETE"},
                                                     {"name": "flush.messages", "value": "5", "operation": "SET"}]})
    assert r.status_code == 204, r.text
    by_name = {c["name"]: c for c in client.get(base).json()["data"]}
    assert by_name["cleanup.policy"]["value"] == "compact" and by_name["cleanup.policy"]["is_default"] is False
    assert by_name["retention.ms"]["is_default"] is True
    assert by_name["flush.messages"]["value"] == "5"
    # The v2 view shows the same effective configs.
    assert client.get(f"/topics/{topic}").json()["configs"]["cleanup.policy"] == "compact"


def test_v2_metadata(client, new_topic):
    topic = new_topic(3)
    r = client.get("/topics")
    assert r.status_code == 200 and r.headers["content-type"].startswith(V2)
    assert topic in r.json()
    t = client.get(f"/topics/{topic}").json()
    assert t["name"] == topic
    assert t["configs"]["cleanup.policy"] == "delete"
    assert [p["partition"] for p in t["partitions"]] == [0, 1, 2]
    for p in t["partitions"]:
        assert p["leader"] == 1
        assert p["replicas"] == [{"broker": 1, "leader": True, "in_sync": True}]
    assert client.get(f"/topics/{topic}/partitions").json() == t["partitions"]
    assert client.get(f"/topics/{topic}/partitions/1").json() == t["partitions"][1]
    assert client.get("/brokers").json() == {"brokers": [1]}


# ------------------------------------------------------------------------------------------ partitioner


def test_json_keys_go_where_kafkas_default_partitioner_puts_them(client, new_topic):
    partitions = 7
    topic = new_topic(partitions)
    rng = random.Random(7001)
    alphabet = "abcxyz0189 _-/\"\\é漢🙂"
    keys: list = []
    for i in range(300):
        kind = i % 4
        if kind == 0:
            keys.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20))))
        elif kind == 1:
            keys.append(rng.randint(-(2**40), 2**40))
        elif kind == 2:
            keys.append({"id": rng.randint(0, 999), "tags": [rng.random() < 0.5, None]})
        else:
            keys.append([rng.randint(0, 9) for _ in range(rng.randint(0, 5))])
    acked = produce_ok(client, topic, [{"key": k, "value": i} for i, k in enumerate(keys)])
    assert len(acked) == len(keys)
    for key, o in zip(keys, acked):
        assert o["partition"] == kafka_partition(compact_json(key), partitions), key
    # The key hashed is the key stored: compact JSON ("a" is the 3 bytes `"a"`).
    assert compact_json("a") == b'"a"'
    for p in range(partitions):
        raw = fetch(client, topic, p, 0, accept=RECORDBATCH).content
        for _, _, recs in kafka_decode(raw):
            for rec in recs:
                assert kafka_partition(rec.key, partitions) == p
                assert json.loads(rec.key) == keys[json.loads(rec.value)]


def test_binary_keys_go_where_kafkas_default_partitioner_puts_them(client, new_topic):
    partitions = 5
    topic = new_topic(partitions)
    rng = random.Random(7002)
    keys = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40))) for _ in range(300)]
    acked = produce_ok(client, topic, [{"key": b64(k), "value": b64(b"%d" % i)} for i, k in enumerate(keys)],
                       fmt=BINARY_V2)
    assert [o["partition"] for o in acked] == [kafka_partition(k, partitions) for k in keys]
    seen = 0
    for p in range(partitions):
        for rec in fetch_all(client, topic, p):
            assert base64.b64decode(rec["key"]) == keys[int(base64.b64decode(rec["value"]))]
            seen += 1
    assert seen == len(keys)
    assert len({o["partition"] for o in acked}) == partitions  # 300 random keys reach every partition


def test_null_keys_stick_to_one_partition_per_request(client, new_topic):
    partitions = 8
    topic = new_topic(partitions)
    chosen = set()
    for req in range(20):
        records = [{"key": (f"k{req}-{i}" if i % 4 == 0 else None), "value": i} for i in range(40)]
        acked = produce_ok(client, topic, records)
        null_parts = {o["partition"] for r, o in zip(records, acked) if r["key"] is None}
        assert len(null_parts) == 1, null_parts
        for r, o in zip(records, acked):
            if r["key"] is not None:
                assert o["partition"] == kafka_partition(compact_json(r["key"]), partitions)
        chosen |= null_parts
    # Sticky per request, not stuck forever: 20 requests over 8 partitions use more than one
    # (all on one partition would happen with probability 8**-19).
    assert len(chosen) > 1


# ------------------------------------------------------------------------------------------ errors


def test_unknown_topic_and_partition(client, new_topic, cluster_id):
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    assert_error(produce(client, missing, [{"value": 1}]), 404, 40401)
    assert_error(produce(client, missing, [{"value": 1}], partition=0), 404, 40401)
    assert_error(fetch(client, missing, 0, 0), 404, 40401)
    assert_error(client.get(f"/topics/{missing}/partitions/0/offsets"), 404, 40401)
    assert_error(client.get(f"/topics/{missing}"), 404, 40401)
    r = assert_error(client.get(f"/v3/clusters/{cluster_id}/topics/{missing}"), 404, 404)  # Confluent v3
    assert client.get(f"/v3/clusters/{cluster_id}/topics/{missing}").headers["content-type"] == "application/json"
    batch, _ = make_batch(2, tag="m", ts=now_ms())
    assert_error(produce_batches(client, missing, 0, batch), 404, 40401)

    topic = new_topic(2)
    produce_ok(client, topic, [{"value": "a", "partition": 0}, {"value": "b", "partition": 1}])
    assert_error(produce(client, topic, [{"value": 1}], partition=2), 404, 40402)
    assert_error(produce_batches(client, topic, 5, batch), 404, 40402)
    assert_error(fetch(client, topic, 2, 0), 404, 40402)
    assert_error(client.get(f"/topics/{topic}/partitions/9/offsets"), 404, 40402)
    assert_error(client.get(f"/topics/{topic}/partitions/2"), 404, 40402)
    # One bad target refuses the whole request: nothing reaches the good partitions either.
    assert_error(produce(client, topic, [{"value": 1, "partition": 0}, {"value": 2, "partition": 1},
                                         {"value": 3, "partition": 2}]), 404, 40402)
    assert end_offsets(client, topic, 2) == [1, 1]


def test_topic_exists_and_invalid_names(client, cluster_id, new_topic, api_node):
    topic = new_topic(2)
    url = f"/v3/clusters/{cluster_id}/topics"
    # Confluent v3: an existing topic is 400 / 40002.
    assert_error(client.post(url, json={"topic_name": topic, "partitions_count": 5}), 400, 40002)
    assert client.get(f"{url}/{topic}").json()["partitions_count"] == 2
    # validate_only: every check runs, nothing is created; 200 (not 201).
    dry = f"dry-{uuid.uuid4().hex[:8]}"
    r = client.post(url, json={"topic_name": dry, "partitions_count": 3, "validate_only": True,
                               "configs": [{"name": "retention.ms", "value": "60000"}]})
    assert r.status_code == 200, r.text
    assert (r.json()["topic_name"], r.json()["partitions_count"]) == (dry, 3)
    assert_error(client.get(f"{url}/{dry}"), 404, 404)
    assert dry not in client.get("/topics").json()
    assert_error(client.post(url, json={"topic_name": topic, "validate_only": True}), 400, 40002)
    assert_error(client.post(url, json={"topic_name": dry, "validate_only": True, "replication_factor": 5}), 400, 40002)
    assert_error(client.post(url, json={"topic_name": dry, "validate_only": True,
                                        "configs": [{"name": "no.such.config", "value": "1"}]}), 400, 40001)
    assert dry not in client.get("/topics").json()

    before = sorted(client.get("/topics").json())
    for bad in ["../x", "a" * 250, "bad name", "..", ".", "", "x/y", "ünï", "x\x00y"]:
        r = client.post(url, json={"topic_name": bad, "partitions_count": 1})
        assert 400 <= r.status_code < 500, (bad, r.status_code, r.text)
        assert_error(r, r.status_code)
    assert sorted(client.get("/topics").json()) == before
    data_dir = api_node.data_dir
    assert not (data_dir.parent / "x-0").exists() and not (data_dir / "x-0").exists()
    # The longest legal name is fine.
    assert client.post(url, json={"topic_name": "b" * 249, "partitions_count": 1}).status_code == 201
    for bad_count in [0, -1]:
        assert_error(client.post(url, json={"topic_name": f"c-{uuid.uuid4().hex[:6]}",
                                            "partitions_count": bad_count}), 422)
    assert_error(client.post(url, json={"topic_name": f"d-{uuid.uuid4().hex[:6]}", "replication_factor": 3}), 400, 40002)


def test_wrong_content_type_is_415_and_appends_nothing(client, new_topic):
    topic = new_topic(1)
    produce_ok(client, topic, [{"value": "x"}], partition=0)
    body = json.dumps({"records": [{"value": "y"}]}).encode()
    for ctype in ["text/plain", "application/octet-stream", "application/vnd.kafka.thrift.v2+json"]:
        assert_error(client.post(f"/topics/{topic}", content=body, headers={"Content-Type": ctype}), 415, 41501)
        assert_error(client.post(f"/topics/{topic}/partitions/0", content=body, headers={"Content-Type": ctype}),
                     415, 41501)
    assert_error(client.post(f"/topics/{topic}/partitions/0", content=body), 415, 41501)  # no Content-Type
    assert offsets(client, topic, 0)["end_offset"] == 1


def corrupt_crc(batch: bytes) -> bytes:
    b = bytearray(batch)
    b[-1] ^= 0x01  # a payload byte: covered by the CRC
    return bytes(b)


def test_malformed_bodies_are_422_and_append_nothing(client, new_topic):
    topic = new_topic(1)
    produce_ok(client, topic, [{"value": "keep"}], partition=0)
    good, _ = make_batch(3, tag="g", ts=now_ms())
    good_gzip, _ = make_batch(3, tag="z", ts=now_ms(), compression=Compression.GZIP)
    control = build_batch([Record(0, now_ms(), b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], is_control=True)
    gapped = build_batch([Record(0, now_ms(), None, b"a"), Record(2, now_ms(), None, b"b")])
    magic1 = bytearray(good)
    magic1[16] = 1
    wrong_count = bytearray(good)
    struct.pack_into(">i", wrong_count, 57, 4)  # record count, then a fresh CRC: well-framed but a lie
    struct.pack_into(">I", wrong_count, 17, crc32c(bytes(wrong_count[21:])))
    gzip_garbage = bytearray(good_gzip)
    gzip_garbage[61:] = b"\x1f\x8b" + b"\x00" * (len(good_gzip) - 63)
    struct.pack_into(">I", gzip_garbage, 17, crc32c(bytes(gzip_garbage[21:])))

    json_cases = {
        "not json": (JSON_V2, b'{"records": ['),
        "not an object": (JSON_V2, b'[1, 2]'),
        "records not a list": (JSON_V2, b'{"records": {"value": 1}}'),
        "no records": (JSON_V2, b'{"records": []}'),
        "record not an object": (JSON_V2, b'{"records": [1]}'),
        "partition not an int": (JSON_V2, b'{"records": [{"value": 1, "partition": "0"}]}'),
        "negative partition": (JSON_V2, b'{"records": [{"value": 1, "partition": -1}]}'),
        "headers not a list": (JSON_V2, b'{"records": [{"value": 1, "headers": {"a": "b"}}]}'),
        "header without key": (JSON_V2, b'{"records": [{"value": 1, "headers": [{"value": "AA=="}]}]}'),
        "bad base64 header": (JSON_V2, b'{"records": [{"value": 1, "headers": [{"key": "h", "value": "**"}]}]}'),
        "bad base64 value": (BINARY_V2, b'{"records": [{"value": "not base64!"}]}'),
        "bad base64 key": (BINARY_V2, b'{"records": [{"key": "QQ", "value": null}]}'),
        "value not a string": (BINARY_V2, b'{"records": [{"value": 12}]}'),
        "invalid utf-8": (JSON_V2, b'{"records": [{"value": "\xff"}]}'),
    }
    for label, (fmt, body) in json_cases.items():
        r = client.post(f"/topics/{topic}/partitions/0", content=body, headers={"Content-Type": fmt})
        assert r.status_code == 422, (label, r.status_code, r.text)
        assert_error(r, 422)
        r = client.post(f"/topics/{topic}", content=body, headers={"Content-Type": fmt})
        assert r.status_code == 422, (label, r.status_code, r.text)
        assert offsets(client, topic, 0)["end_offset"] == 1, label

    batch_cases = {
        "corrupted CRC": corrupt_crc(good),
        "good then corrupted CRC": good + corrupt_crc(good),
        "truncated": good[:-5],
        "good then truncated": good + good[:-1],
        "shorter than a header": good[:11],
        "length field too small": good[:8] + struct.pack(">i", 10) + good[12:],
        "empty body": b"",
        "magic 1": bytes(magic1),
        "record count mismatch": bytes(wrong_count),
        "control batch": control,
        "offsets not consecutive": gapped,
        "undecompressable gzip": bytes(gzip_garbage),
    }
    for label, body in batch_cases.items():
        r = produce_batches(client, topic, 0, body)
        assert r.status_code == 422, (label, r.status_code, r.text)
        assert_error(r, 422)
        assert offsets(client, topic, 0)["end_offset"] == 1, label

    # After all that, the partition still takes and serves good data.
    assert produce_batches(client, topic, 0, good).json()["offsets"][0]["offset"] == 1
    assert [x["offset"] for x in fetch_all(client, topic, 0)] == [0, 1, 2, 3]


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_non_json_number_tokens_are_refused(api_node, new_topic, token):
    """RFC 8259 has no NaN / Infinity: such a body is malformed JSON, and must not poison the log."""
    topic = new_topic(1)
    # A client of its own: a 500 makes the server drop the keep-alive connection.
    with httpx.Client(base_url=api_node.url, timeout=HTTP_TIMEOUT_S) as c:
        produce_ok(c, topic, [{"value": "keep"}], partition=0)
        body = ('{"records": [{"key": "k", "value": %s}]}' % token).encode()
        problems = []
        r = c.post(f"/topics/{topic}/partitions/0", content=body, headers={"Content-Type": JSON_V2})
        if r.status_code != 422:
            problems.append(f"produce of {token} answered {r.status_code} {r.text}")
        r = c.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0, "timeout": 0},
                  headers={"Accept": JSON_V2})
        if r.status_code != 200:
            problems.append(f"JSON fetch of the partition then answered {r.status_code} {r.text}")
        else:
            problems += [f"stored record {x}" for x in r.json() if x["value"] != "keep"]
    assert not problems, problems


def test_batch_over_max_message_bytes_is_413_and_appends_nothing(client, new_topic, cluster_id):
    topic = new_topic(1, {"max.message.bytes": "1024"})
    small = build_batch([Record(0, now_ms(), b"k", b"v" * 500)])
    big = build_batch([Record(0, now_ms(), b"k", b"v" * 1500)])
    assert len(small) <= 1024 < len(big)
    assert_error(produce_batches(client, topic, 0, big), 413, 41302)
    assert_error(produce_batches(client, topic, 0, small + big), 413, 41302)
    assert_error(produce(client, topic, [{"value": b64(b"x" * 1500)}], partition=0, fmt=BINARY_V2), 413)
    assert offsets(client, topic, 0)["end_offset"] == 0
    assert produce_batches(client, topic, 0, small).status_code == 200
    assert offsets(client, topic, 0)["end_offset"] == 1

    # A config change applies to the live partition at once.
    base = f"/v3/clusters/{cluster_id}/topics/{topic}/configs"
    assert client.put(f"{base}/max.message.bytes", json={"value": "4096"}).status_code == 204
    assert produce_batches(client, topic, 0, big).status_code == 200
    assert offsets(client, topic, 0)["end_offset"] == 2


def test_body_over_max_request_bytes_is_413(tmp_path):
    small_node = start_node(tmp_path, **{"max.request.bytes": "2048"})
    try:
        with httpx.Client(base_url=small_node.url, timeout=HTTP_TIMEOUT_S) as c:
            cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
            r = c.post(f"/v3/clusters/{cid}/topics", json={"topic_name": "t", "partitions_count": 1})
            assert r.status_code == 201, r.text
            fits = json.dumps({"records": [{"value": "v" * 1500}]}).encode()
            too_big = json.dumps({"records": [{"value": "v" * 3000}]}).encode()
            assert len(fits) <= 2048 < len(too_big)

            for path in ["/topics/t", "/topics/t/partitions/0"]:
                assert_error(c.post(path, content=too_big, headers={"Content-Type": JSON_V2}), 413, 41301)
                # Without Content-Length (chunked): refused while streaming.
                r = c.post(path, content=iter([too_big[:1000], too_big[1000:2000], too_big[2000:]]),
                           headers={"Content-Type": JSON_V2})
                assert_error(r, 413, 41301)
            big_batch = build_batch([Record(0, now_ms(), None, b"x" * 2500)])
            assert_error(c.post("/topics/t/partitions/0", content=big_batch,
                                headers={"Content-Type": RECORDBATCH}), 413, 41301)
            r = c.get("/topics/t/partitions/0/offsets")
            assert r.json()["end_offset"] == 0

            r = c.post("/topics/t/partitions/0", content=fits, headers={"Content-Type": JSON_V2})
            assert r.status_code == 200, r.text
            assert c.get("/topics/t/partitions/0/offsets").json()["end_offset"] == 1
            # The refusals did not upset the node.
            assert c.get("/readyz").status_code == 200
    finally:
        try:
            small_node.stop()
        finally:
            small_node.kill()


def test_topic_beyond_the_file_descriptor_budget_fails_cleanly(tmp_path):
    """A topic within max.partitions.per.topic (10000) but beyond what the process can open must be
    refused cleanly: no 500, no half-created topic, and the node keeps serving. The node's fd limit
    is lowered (to 256) so that 200 partitions are enough to show it; the default ulimit of 20000
    fails the same way from ~3,700 partitions on (4 files each)."""
    n = start_node(tmp_path)
    try:
        _, hard = resource.prlimit(n.proc.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(n.proc.pid, resource.RLIMIT_NOFILE, (256, hard))
        problems = []

        def status(method: str, path: str, **kw) -> int | str:
            # A new connection per request: after a 500 the server drops the connection.
            try:
                return httpx.request(method, f"{n.url}{path}", timeout=HTTP_TIMEOUT_S, **kw).status_code
            except httpx.HTTPError as e:
                return repr(e)

        cid = httpx.get(f"{n.url}/v3/clusters", timeout=HTTP_TIMEOUT_S).json()["data"][0]["cluster_id"]
        created = status("POST", f"/v3/clusters/{cid}/topics", json={"topic_name": "wide", "partitions_count": 200})
        if created != 201 and not (isinstance(created, int) and 400 <= created < 500):
            problems.append(f"create answered {created}")
        if status("GET", "/readyz") != 200:
            problems.append("node not ready after the create")
        if status("GET", f"/v3/clusters/{cid}/topics/wide") == 200:
            # A few probes only: with its descriptors gone, the node accepts a connection a second.
            for p in (0, 199):
                answer = status("GET", f"/topics/wide/partitions/{p}/offsets")
                if answer != 200:
                    problems.append(f"topic listed with 200 partitions, but partition {p} answers {answer}")
            deleted = status("DELETE", f"/v3/clusters/{cid}/topics/wide")
            if deleted != 204:
                problems.append(f"delete of the topic answered {deleted}")
        assert not problems, problems
    finally:
        try:
            n.stop()
        finally:
            n.kill()


def fetch_waiters(url: str, topic: str, partition: int = 0) -> int:
    """Fetches long-polling on a partition now (the lakelog_partition_fetch_waiters gauge)."""
    text = httpx.get(f"{url}/metrics", timeout=HTTP_TIMEOUT_S).text
    m = re.search(r'^lakelog_partition_fetch_waiters\{partition="%d",topic="%s"\} (\S+)$' % (partition, re.escape(topic)),
                  text, re.M)
    return int(float(m.group(1))) if m else 0


def test_fetch_waiting_on_a_deleted_topic_is_told_the_topic_is_gone(api_node, client, cluster_id, new_topic):
    topic = new_topic(1)
    result: dict = {}

    def poll() -> None:
        with httpx.Client(base_url=api_node.url, timeout=HTTP_TIMEOUT_S) as c:
            result["response"] = fetch(c, topic, 0, 0, timeout_ms=5000)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    wait_for(lambda: fetch_waiters(api_node.url, topic) == 1, HTTP_TIMEOUT_S, "the fetch to park")
    assert client.delete(f"/v3/clusters/{cluster_id}/topics/{topic}").status_code == 204
    poller.join(HTTP_TIMEOUT_S)
    assert not poller.is_alive()
    r = result["response"]
    # Not a transient 503 ("retry later") naming a file: the topic is gone for good.
    assert r.status_code in (200, 404), (r.status_code, r.text)
    if r.status_code == 404:
        assert_error(r, 404, 40401)
    else:
        assert r.json() == []


# ------------------------------------------------------------------------------------------ fetch


@pytest.mark.parametrize("index_interval_bytes", ["4096", "0", "100"])
def test_reads_across_many_segments(client, new_topic, index_interval_bytes):
    topic = new_topic(1, {"segment.bytes": "1024", "index.interval.bytes": index_interval_bytes})
    rng = random.Random(7003)
    sent: list[tuple[int, int]] = []  # (base offset, record count) of each batch
    expected_values: list[bytes] = []
    for j in range(40):
        n = rng.randint(1, 6)
        values = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 120))) for _ in range(n)]
        batch = build_batch([Record(i, now_ms(), None, v) for i, v in enumerate(values)],
                            compression=rng.choice([Compression.NONE, Compression.LZ4]))
        r = produce_batches(client, topic, 0, batch)
        assert r.status_code == 200, r.text
        sent.append((r.json()["offsets"][0]["offset"], n))
        expected_values.extend(values)
    total = len(expected_values)
    assert [b for b, _ in sent] == [sum(n for _, n in sent[:j]) for j in range(len(sent))]
    assert offsets(client, topic, 0) == {"beginning_offset": 0, "end_offset": total, "last_stable_offset": total}

    everything = fetch(client, topic, 0, 0, accept=RECORDBATCH).content
    decoded = kafka_decode(everything)
    assert [(base, len(recs)) for base, _, recs in decoded] == sent
    assert [rec.value for _, _, recs in decoded for rec in recs] == expected_values
    for offset in range(total):
        one = kafka_decode(fetch(client, topic, 0, offset, accept=RECORDBATCH, max_bytes=1).content)
        assert len(one) == 1
        base, _, recs = one[0]
        assert base <= offset <= recs[-1].offset, (offset, base)
    for offset in range(0, total, 7):
        got = fetch(client, topic, 0, offset, accept=BINARY_V2).json()
        assert got[0]["offset"] == offset
        assert [base64.b64decode(x["value"]) for x in got] == expected_values[offset:offset + len(got)]


def test_long_poll_wakes_up_on_produce(client, api_node, new_topic):
    topic = new_topic(1)
    produce_ok(client, topic, [{"value": "before"}], partition=0)
    result: dict = {}

    def poll() -> None:
        # The long-poll may last fetch.max.wait.ms (30 s), longer than this client waits: only the
        # append can answer it in time.
        with httpx.Client(base_url=api_node.url, timeout=HTTP_TIMEOUT_S / 2) as c:
            result["response"] = fetch(c, topic, 0, 1, timeout_ms=30_000)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    wait_for(lambda: fetch_waiters(api_node.url, topic) == 1, HTTP_TIMEOUT_S, "the fetch to park")
    produce_ok(client, topic, [{"value": "wake"}], partition=0)
    poller.join(HTTP_TIMEOUT_S)
    assert not poller.is_alive()
    r = result["response"]
    assert r.status_code == 200, r.text
    assert [(x["offset"], x["value"]) for x in r.json()] == [(1, "wake")]
    assert fetch_waiters(api_node.url, topic) == 0


def test_long_poll_times_out_empty(client, api_node, new_topic):
    topic = new_topic(1)
    for accept in (JSON_V2, RECORDBATCH):
        result: dict = {}

        def poll() -> None:
            with httpx.Client(base_url=api_node.url, timeout=HTTP_TIMEOUT_S) as c:
                result["response"] = fetch(c, topic, 0, 0, accept=accept, timeout_ms=5000)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        # It waits (parks) instead of answering at once, then answers empty when its timeout passes.
        wait_for(lambda: fetch_waiters(api_node.url, topic) == 1, HTTP_TIMEOUT_S, "the fetch to park")
        poller.join(HTTP_TIMEOUT_S)
        assert not poller.is_alive()
        r = result["response"]
        assert r.status_code == 200, r.text
        assert r.content in (b"[]", b"")


def test_consumers_read_below_the_high_watermark_only(client, new_topic):
    topic = new_topic(1)
    produce_ok(client, topic, [{"value": i} for i in range(5)], partition=0)
    assert offsets(client, topic, 0) == {"beginning_offset": 0, "end_offset": 5, "last_stable_offset": 5}
    r = fetch(client, topic, 0, 5)
    assert r.status_code == 200 and r.json() == []
    assert r.headers["x-lakelog-high-watermark"] == "5"
    assert r.headers["x-lakelog-log-start-offset"] == "0"
    assert fetch(client, topic, 0, 5, accept=RECORDBATCH).content == b""
    assert_error(fetch(client, topic, 0, 6), 416, 41601)
    assert_error(fetch(client, topic, 0, 10**12, accept=RECORDBATCH), 416)
    assert_error(fetch(client, topic, 0, -1), 422)
    assert [x["value"] for x in fetch(client, topic, 0, 2).json()] == [2, 3, 4]


def test_concurrent_producers_get_distinct_contiguous_offsets(api_node, client, new_topic):
    topic = new_topic(1)
    threads, per_thread, per_request = 4, 10, 5
    acked: list[tuple[int, str]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            with httpx.Client(base_url=api_node.url, timeout=HTTP_TIMEOUT_S) as c:
                for i in range(per_thread):
                    values = [f"t{t}-r{i}-{j}" for j in range(per_request)]
                    got = produce_ok(c, topic, [{"value": v} for v in values], partition=0)
                    with lock:
                        acked.extend((o["offset"], v) for o, v in zip(got, values))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(HTTP_TIMEOUT_S * 2)
    assert not errors, errors
    total = threads * per_thread * per_request
    assert sorted(o for o, _ in acked) == list(range(total))
    stored = {x["offset"]: x["value"] for x in fetch_all(client, topic, 0, accept=JSON_V2)}
    assert stored == dict(acked)


# ------------------------------------------------------------------------------------------ offsets


@pytest.mark.parametrize("configs", [{}, {"index.interval.bytes": "0"},
                                     {"index.interval.bytes": "0", "segment.bytes": "200"}],
                         ids=["sparse-index", "dense-index", "many-segments"])
def test_offset_for_timestamp(client, new_topic, configs):
    topic = new_topic(1, configs)
    windows = []  # (ms before, ms after, first offset) of each request
    for i in range(3):
        before = now_ms()
        acked = produce_ok(client, topic, [{"value": f"r{i}-{j}"} for j in range(4)], partition=0)
        after = now_ms()
        windows.append((before, after, acked[0]["offset"]))
        time.sleep(0.25)
    assert [w[2] for w in windows] == [0, 4, 8]
    assert windows[0][1] < windows[1][0] and windows[1][1] < windows[2][0]

    stored = {x["offset"]: x["timestamp"] for x in fetch(client, topic, 0, 0).json()}
    for before, after, first in windows:
        assert before <= stored[first] <= after

    def lookup(ts: int) -> tuple:
        body = offsets(client, topic, 0, timestamp=ts)
        assert (body["beginning_offset"], body["end_offset"]) == (0, 12)
        return body["offset"], body["timestamp"]

    assert lookup(windows[0][0] - 60_000) == (0, stored[0])
    assert lookup(stored[0]) == (0, stored[0])
    assert lookup(windows[0][1] + 1) == (4, stored[4])
    assert lookup(stored[4]) == (4, stored[4])
    assert lookup(windows[1][1] + 1) == (8, stored[8])
    assert lookup(windows[2][1] + 60_000) == (None, None)


def test_offsets_beginning_and_end(client, new_topic):
    topic = new_topic(2)
    assert offsets(client, topic, 0) == {"beginning_offset": 0, "end_offset": 0, "last_stable_offset": 0}
    produce_ok(client, topic, [{"value": i, "partition": 1} for i in range(6)])
    assert offsets(client, topic, 1) == {"beginning_offset": 0, "end_offset": 6, "last_stable_offset": 6}
    assert offsets(client, topic, 0) == {"beginning_offset": 0, "end_offset": 0, "last_stable_offset": 0}


# ------------------------------------------------------------------------------------------ operations


def test_metrics_health_readiness(client, new_topic, cluster_id):
    topic = new_topic(2)
    produce_ok(client, topic, [{"value": i} for i in range(3)], partition=1)

    r = client.get("/metrics")
    assert r.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            if s.labels.get("topic") == topic and "partition" in s.labels:
                samples[(s.name, s.labels["partition"])] = s.value
    assert samples[("lakelog_partition_log_end_offset", "1")] == 3
    assert samples[("lakelog_partition_log_end_offset", "0")] == 0
    assert samples[("lakelog_partition_high_watermark", "1")] == 3
    assert "lakelog_http_requests_total" in r.text

    r = client.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"
    r = client.get("/readyz")
    assert r.status_code == 200
    assert r.json()["status"] == "ready" and r.json()["cluster_id"] == cluster_id


def test_docs_page_and_its_assets_come_from_the_node_itself(client):
    page = client.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert "/docs/assets/swagger-ui-bundle.js" in assets and "/docs/assets/swagger-ui.css" in assets
    assert not [a for a in assets if a.startswith(("http:", "https:", "//"))], assets  # nothing from a CDN
    for a in assets:
        r = client.get(a)
        assert r.status_code == 200 and len(r.content) > 500, a
    assert "SwaggerUIBundle" in client.get("/docs/assets/swagger-ui-bundle.js").text
    assert "'/openapi.json'" in page.text or '"/openapi.json"' in page.text
    r = client.get("/docs/assets/index.html")
    assert r.status_code == 404 and r.json()["error_code"] == 404


def test_openapi_lists_every_route(client):
    spec = client.get("/openapi.json").json()
    listed = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
    expected = {
        ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"),
        ("GET", "/topics"), ("GET", "/topics/{topic}"), ("POST", "/topics/{topic}"),
        ("GET", "/topics/{topic}/partitions"), ("GET", "/topics/{topic}/partitions/{partition}"),
        ("POST", "/topics/{topic}/partitions/{partition}"),
        ("GET", "/topics/{topic}/partitions/{partition}/records"),
        ("GET", "/topics/{topic}/partitions/{partition}/offsets"),
        ("GET", "/brokers"),
        ("GET", "/v3/clusters"), ("GET", "/v3/clusters/{cluster_id}"),
        ("GET", "/v3/clusters/{cluster_id}/topics"), ("POST", "/v3/clusters/{cluster_id}/topics"),
        ("GET", "/v3/clusters/{cluster_id}/topics/{topic}"), ("DELETE", "/v3/clusters/{cluster_id}/topics/{topic}"),
        ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/configs"),
        ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}"),
        ("PUT", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}"),
        ("DELETE", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}"),
        ("POST", "/v3/clusters/{cluster_id}/topics/{topic}/configs:alter"),
        ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions"),
        ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}"),
        ("GET", "/v3/clusters/{cluster_id}/brokers"), ("GET", "/v3/clusters/{cluster_id}/brokers/{broker_id}"),
    }
    assert expected <= listed, sorted(expected - listed)
    # The produce endpoints document all their media types.
    post = spec["paths"]["/topics/{topic}/partitions/{partition}"]["post"]
    assert {JSON_V2, BINARY_V2, RECORDBATCH} <= set(post["requestBody"]["content"])


# ------------------------------------------------------------------------------------------ idempotent produce

def test_idempotent_produce_answers_retries_with_original_offsets_and_refuses_gaps(client, new_topic):
    topic = new_topic()
    r = client.post("/producers")
    assert r.status_code == 200, r.text
    pid, epoch = r.json()["producer_id"], r.json()["producer_epoch"]
    other = client.post("/producers").json()["producer_id"]
    assert other != pid and epoch == 0

    def send(seq: int, values: list[str], producer_epoch: int = epoch) -> httpx.Response:
        return client.post(f"/topics/{topic}/partitions/0", headers={"Content-Type": BINARY_V2}, json={
            "producer_id": pid, "producer_epoch": producer_epoch, "sequence": seq,
            "records": [{"value": base64.b64encode(v.encode()).decode()} for v in values]})

    first = send(0, ["a", "b"])
    assert [o["offset"] for o in first.json()["offsets"]] == [0, 1]
    second = send(2, ["c"])
    assert [o["offset"] for o in second.json()["offsets"]] == [2]
    # A retry of either request (the client never saw the answer) gets the original offsets back.
    assert [o["offset"] for o in send(0, ["a", "b"]).json()["offsets"]] == [0, 1]
    assert [o["offset"] for o in send(2, ["c"]).json()["offsets"]] == [2]
    # A gap is refused, and so is an older epoch once a newer one wrote.
    assert_error(send(7, ["x"]), 409, 40908)
    assert send(0, ["d"], producer_epoch=1).status_code == 200
    assert_error(send(1, ["y"], producer_epoch=0), 409, 40909)
    # Half the producer fields are a malformed request.
    r = client.post(f"/topics/{topic}/partitions/0", headers={"Content-Type": BINARY_V2},
                    json={"producer_id": pid, "records": [{"value": None}]})
    assert_error(r, 422)
    fetched = client.get(f"/topics/{topic}/partitions/0/records", params={"offset": 0},
                         headers={"Accept": BINARY_V2}).json()
    assert [base64.b64decode(x["value"]).decode() for x in fetched] == ["a", "b", "c", "d"]
