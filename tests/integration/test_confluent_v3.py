"""Confluent REST Proxy v3 parity against one real node: every operation of Confluent's own OpenAPI
description (api/v3/openapi.yaml of confluentinc/kafka-rest 8.5, written down below as data) is
called, with real topics, records, a group with a member and committed offsets; then the v3 produce
(single, streaming, a connection cut halfway, batch) and bad input on each new endpoint."""

from __future__ import annotations

import base64
import json
import re
import socket
import time
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.support.faults import cluster_id, wait_for
from tests.support.nodes import NodeProcess, start_node

JSON = "application/json"
V2 = {"Content-Type": "application/vnd.kafka.v2+json"}
MAX_REQUEST_BYTES = 64 * 1024

#: Every operation of Confluent's v3 OpenAPI: (method, path relative to /v3, operation, Confluent's
#: success status). Paths keep Confluent's parameter names.
CONFLUENT_V3_OPERATIONS = [
    ("GET", "/clusters", "listKafkaClusters", 200),
    ("GET", "/clusters/{cluster_id}", "getKafkaCluster", 200),
    ("POST", "/clusters/{cluster_id}/acls:batch", "batchCreateKafkaAcls", 201),
    ("GET", "/clusters/{cluster_id}/acls", "getKafkaAcls", 200),
    ("POST", "/clusters/{cluster_id}/acls", "createKafkaAcls", 201),
    ("DELETE", "/clusters/{cluster_id}/acls", "deleteKafkaAcls", 200),
    ("GET", "/clusters/{cluster_id}/broker-configs", "listKafkaClusterConfigs", 200),
    ("POST", "/clusters/{cluster_id}/broker-configs:alter", "updateKafkaClusterConfigs", 204),
    ("GET", "/clusters/{cluster_id}/broker-configs/{name}", "getKafkaClusterConfig", 200),
    ("PUT", "/clusters/{cluster_id}/broker-configs/{name}", "updateKafkaClusterConfig", 204),
    ("DELETE", "/clusters/{cluster_id}/broker-configs/{name}", "deleteKafkaClusterConfig", 204),
    ("GET", "/clusters/{cluster_id}/brokers", "listKafkaBrokers", 200),
    ("GET", "/clusters/{cluster_id}/brokers/{broker_id}", "getKafkaBroker", 200),
    ("GET", "/clusters/{cluster_id}/brokers/-/configs", "listKafkaAllBrokerConfigs", 200),
    ("GET", "/clusters/{cluster_id}/brokers/{broker_id}/configs", "listKafkaBrokerConfigs", 200),
    ("POST", "/clusters/{cluster_id}/brokers/{broker_id}/configs:alter", "updateKafkaBrokerConfigBatch", 204),
    ("GET", "/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", "getKafkaBrokerConfig", 200),
    ("PUT", "/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", "updateKafkaBrokerConfig", 204),
    ("DELETE", "/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", "deleteKafkaBrokerConfig", 204),
    ("GET", "/clusters/{cluster_id}/brokers/{broker_id}/partition-replicas", "listKafkaReplicasByBroker", 200),
    ("GET", "/clusters/{cluster_id}/consumer-groups", "listKafkaConsumerGroups", 200),
    ("GET", "/clusters/{cluster_id}/consumer-groups/{consumer_group_id}", "getKafkaConsumerGroup", 200),
    ("GET", "/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers", "listKafkaConsumers", 200),
    ("GET", "/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lag-summary",
     "getKafkaConsumerGroupLagSummary", 200),
    ("GET", "/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lags", "listKafkaConsumerLags", 200),
    ("GET", "/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lags/{topic_name}/partitions/{partition_id}",
     "getKafkaConsumerLag", 200),
    ("GET", "/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}", "getKafkaConsumer", 200),
    ("GET", "/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments",
     "listKafkaConsumerAssignment", 200),
    ("GET", "/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments"
     "/{topic_name}/partitions/{partition_id}", "getKafkaConsumerAssignment", 200),
    ("GET", "/clusters/{cluster_id}/topics", "listKafkaTopics", 200),
    ("POST", "/clusters/{cluster_id}/topics", "createKafkaTopic", 201),
    ("GET", "/clusters/{cluster_id}/topics/{topic_name}", "getKafkaTopic", 200),
    ("PATCH", "/clusters/{cluster_id}/topics/{topic_name}", "updatePartitionCountKafkaTopic", 200),
    ("GET", "/clusters/{cluster_id}/topics/{topic_name}/configs", "listKafkaTopicConfigs", 200),
    ("POST", "/clusters/{cluster_id}/topics/{topic_name}/configs:alter", "updateKafkaTopicConfigBatch", 204),
    ("GET", "/clusters/{cluster_id}/topics/{topic_name}/configs/{name}", "getKafkaTopicConfig", 200),
    ("PUT", "/clusters/{cluster_id}/topics/{topic_name}/configs/{name}", "updateKafkaTopicConfig", 204),
    ("DELETE", "/clusters/{cluster_id}/topics/{topic_name}/configs/{name}", "deleteKafkaTopicConfig", 204),
    ("GET", "/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/offset",
     "listKafkaPartitionOffsets", 200),
    ("GET", "/clusters/{cluster_id}/topics/{topic_name}/partitions", "listKafkaPartitions", 200),
    ("GET", "/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}", "getKafkaPartition", 200),
    ("GET", "/clusters/{cluster_id}/topics/-/partitions/-/reassignment", "listKafkaAllReassignments", 200),
    ("GET", "/clusters/{cluster_id}/topics/{topic_name}/partitions/-/reassignment", "searchKafkaReassignmentsByTopic",
     200),
    ("GET", "/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/reassignment",
     "getKafkaReassignment", 200),
    ("GET", "/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/replicas", "listKafkaReplicas", 200),
    ("GET", "/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/replicas/{broker_id}",
     "getKafkaReplica", 200),
    ("GET", "/clusters/{cluster_id}/topics/-/configs", "listKafkaAllTopicConfigs", 200),
    ("POST", "/clusters/{cluster_id}/topics/{topic_name}/records", "produceRecord", 200),
    ("POST", "/clusters/{cluster_id}/topics/{topic_name}/records:batch", "produceRecordsBatch", 207),
    ("DELETE", "/clusters/{cluster_id}/topics/{topic_name}", "deleteKafkaTopic", 204),
]
#: Served by Confluent's resources but not in its OpenAPI document.
CONFLUENT_V3_EXTRA = [("POST", "/clusters/{cluster_id}/topics/-/configs:alter", "alterMultipleTopicsConfigs", 204)]
#: A partition that is not being moved has no reassignment: Confluent answers 404.
NO_REASSIGNMENT = {"getKafkaReassignment"}

ACL = {"resource_type": "TOPIC", "resource_name": "walk", "pattern_type": "LITERAL", "principal": "User:alice",
       "host": "*", "operation": "READ", "permission": "ALLOW"}
BODIES = {
    "batchCreateKafkaAcls": {"data": [ACL, {**ACL, "operation": "WRITE"}]},
    "createKafkaAcls": {**ACL, "operation": "DESCRIBE"},
    "updateKafkaClusterConfigs": {"data": []},
    "updateKafkaClusterConfig": {"value": "2"},
    "updateKafkaBrokerConfigBatch": {"data": []},
    "updateKafkaBrokerConfig": {"value": "2"},
    "createKafkaTopic": {"topic_name": "walk-created", "partitions_count": 1},
    "updatePartitionCountKafkaTopic": {"partitions_count": 3},
    "updateKafkaTopicConfigBatch": {"data": [{"name": "retention.ms", "value": "3600000"},
                                             {"name": "segment.ms", "operation": "DELETE"}]},
    "updateKafkaTopicConfig": {"value": "7200000"},
    "produceRecord": {"partition_id": 0, "key": {"type": "STRING", "data": "k"},
                      "value": {"type": "JSON", "data": {"n": 1}}},
    "produceRecordsBatch": {"entries": [{"id": "a", "value": {"type": "STRING", "data": "x"}}]},
    "alterMultipleTopicsConfigs": {"data": [{"topic_name": "walk", "configs": [{"name": "retention.ms",
                                                                                "value": "5400000"}]}]},
}
QUERIES = {"deleteKafkaAcls": {k: ACL[k] for k in ("resource_type", "resource_name", "pattern_type", "principal",
                                                    "host", "permission")} | {"operation": "DESCRIBE"}}


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> NodeProcess:
    n = start_node(tmp_path_factory.mktemp("v3"), **{
        "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500",
        "group.coordinator.tick.ms": "50", "offsets.topic.num.partitions": "4",
        "max.request.bytes": str(MAX_REQUEST_BYTES), "max.records.per.request": "100"})
    try:
        yield n
    finally:
        try:
            n.stop()
        finally:
            n.kill()


def _v3(node: NodeProcess) -> str:
    return f"{node.url}/v3/clusters/{cluster_id(node.url)}"


def _error(r: httpx.Response, status: int, code: int | None = None) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers["content-type"].startswith(JSON), r.headers
    body = r.json()
    assert set(body) == {"error_code", "message"} and body["message"], body
    assert body["error_code"] == (status if code is None else code), body
    return body["message"]


@pytest.fixture(scope="module")
def group_member(node):
    """Topic `walk` (2 partitions, records), group `walkers` with one subscribed member and commits."""
    base = _v3(node)
    assert httpx.post(f"{base}/topics", json={"topic_name": "walk", "partitions_count": 2}, timeout=30).status_code == 201
    for p in range(2):
        r = httpx.post(f"{node.url}/topics/walk/partitions/{p}", timeout=30,
                       headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
                       json={"records": [{"value": i} for i in range(6)]})
        assert r.status_code == 200, r.text
    r = httpx.post(f"{node.url}/consumers/walkers", headers=V2, timeout=30, json={
        "name": "m1", "format": "json", "auto.offset.reset": "earliest", "auto.commit.enable": "false",
        "session.timeout.ms": 5000, "heartbeat.interval.ms": 500})
    assert r.status_code == 200, r.text
    inst = r.json()["base_uri"]
    assert httpx.post(f"{inst}/subscription", json={"topics": ["walk"]}, headers=V2, timeout=10).status_code == 204
    got: list = []

    def polled():
        r = httpx.get(f"{inst}/records", params={"timeout": 200}, timeout=30,
                      headers={"Accept": "application/vnd.kafka.json.v2+json"})
        got.extend(r.json())
        return len(got) >= 12

    wait_for(polled, 30, "12 records for the group member")
    # Commit: partition 0 consumed through offset 3 (stores 4), partition 1 through 1 (stores 2).
    r = httpx.post(f"{inst}/offsets", headers=V2, timeout=30, json={"offsets": [
        {"topic": "walk", "partition": 0, "offset": 3}, {"topic": "walk", "partition": 1, "offset": 1}]})
    assert r.status_code == 200, r.text
    members = httpx.get(f"{base}/consumer-groups/walkers/consumers", timeout=30).json()["data"]
    assert len(members) == 1
    yield members[0]["consumer_id"]
    httpx.delete(inst, timeout=30)


def _fill(path: str, params: dict[str, str]) -> str:
    return re.sub(r"\{([a-z_]+)\}", lambda m: str(params[m.group(1)]), path)


def test_every_confluent_v3_operation_is_served(node, group_member):
    """Walk Confluent's operation list; each answers Confluent's success status (or the documented
    exception), with a JSON body of the right `kind` where there is one."""
    params = {"cluster_id": cluster_id(node.url), "broker_id": "1", "name": "retention.ms", "topic_name": "walk",
              "partition_id": "0", "consumer_group_id": "walkers", "consumer_id": group_member}
    broker_config = {"name": "log.flush.interval.messages"}  # dynamic (and harmless at "2")
    called = 0
    for method, path, op, status in CONFLUENT_V3_OPERATIONS + CONFLUENT_V3_EXTRA:
        p = dict(params, **(broker_config if "broker" in path and "{name}" in path else {}))
        if op in ("updatePartitionCountKafkaTopic", "produceRecord", "produceRecordsBatch", "deleteKafkaTopic"):
            p["topic_name"] = "walk-created"  # leave `walk` (the group's topic) as it is
        url = f"{node.url}/v3{_fill(path, p)}"
        r = httpx.request(method, url, json=BODIES.get(op), params=QUERIES.get(op), timeout=30)
        called += 1
        if op == "getKafkaClusterConfig" or op in NO_REASSIGNMENT:  # not set yet (the PUT comes next in the
            _error(r, 404)                                          # list); no partition is moving
            continue
        assert r.status_code == status, (op, r.status_code, r.text)
        if r.content:
            assert r.headers["content-type"].startswith(JSON), (op, r.headers)
            doc = r.json()
            if op not in ("produceRecord", "produceRecordsBatch"):
                assert doc.get("kind", "").startswith("Kafka"), (op, doc)
    assert called == len(CONFLUENT_V3_OPERATIONS) + len(CONFLUENT_V3_EXTRA)
    # The node documents every one of them (parameter names aside).
    spec = httpx.get(f"{node.url}/openapi.json", timeout=30).json()
    served = {(m.upper(), re.sub(r"\{[a-z_]+\}", "{}", p)) for p, ops in spec["paths"].items() for m in ops}
    wanted = {(m, re.sub(r"\{[a-z_]+\}", "{}", "/v3" + p)) for m, p, op, _ in CONFLUENT_V3_OPERATIONS + CONFLUENT_V3_EXTRA}
    assert wanted <= served, sorted(wanted - served)


def test_consumer_group_views_show_members_assignments_and_lag(node, group_member):
    base = f"{_v3(node)}/consumer-groups/walkers"
    g = httpx.get(base, timeout=30).json()
    assert (g["consumer_group_id"], g["state"], g["is_simple"], g["partition_assignor"]) == (
        "walkers", "STABLE", False, "range")
    assert g["coordinator"]["related"].endswith("/brokers/1")
    listed = httpx.get(f"{_v3(node)}/consumer-groups", timeout=30).json()["data"]
    assert "walkers" in {x["consumer_group_id"] for x in listed}
    c = httpx.get(f"{base}/consumers/{group_member}", timeout=30).json()
    assert c["consumer_id"] == group_member and c["assignments"]["related"].endswith("/assignments")
    assigned = httpx.get(f"{base}/consumers/{group_member}/assignments", timeout=30).json()["data"]
    assert sorted((a["topic_name"], a["partition_id"]) for a in assigned) == [("walk", 0), ("walk", 1)]
    lags = {x["partition_id"]: x for x in httpx.get(f"{base}/lags", timeout=30).json()["data"]}
    assert {p: (x["current_offset"], x["log_end_offset"], x["lag"], x["consumer_id"]) for p, x in lags.items()} == {
        0: (4, 6, 2, group_member), 1: (2, 6, 4, group_member)}
    one = httpx.get(f"{base}/lags/walk/partitions/1", timeout=30).json()
    assert one["lag"] == 4 and one["kind"] == "KafkaConsumerLag"
    s = httpx.get(f"{base}/lag-summary", timeout=30).json()
    assert (s["max_lag"], s["total_lag"], s["max_lag_topic_name"], s["max_lag_partition_id"],
            s["max_lag_consumer_id"]) == (4, 6, "walk", 1, group_member)
    # Unknown group, consumer, assignment, lag: 404 / 404.
    _error(httpx.get(f"{_v3(node)}/consumer-groups/nobody", timeout=30), 404)
    _error(httpx.get(f"{base}/consumers/ghost", timeout=30), 404)
    _error(httpx.get(f"{base}/consumers/ghost/assignments", timeout=30), 404)
    _error(httpx.get(f"{base}/consumers/{group_member}/assignments/walk/partitions/7", timeout=30), 404)
    _error(httpx.get(f"{base}/lags/walk/partitions/7", timeout=30), 404)
    _error(httpx.get(f"{base}/lags/walk/partitions/x", timeout=30), 404)  # JAX-RS: no such resource
    _error(httpx.get(f"{node.url}/v3/clusters/other/consumer-groups/walkers", timeout=30), 404)
    _error(httpx.get(f"{_v3(node)}/consumer-groups/bad%20name", timeout=30), 422)


def _fetch_values(node: NodeProcess, topic: str, partition: int) -> list[bytes]:
    r = httpx.get(f"{node.url}/topics/{topic}/partitions/{partition}/records", params={"offset": 0, "timeout": 0},
                  headers={"Accept": "application/vnd.kafka.binary.v2+json"}, timeout=30)
    assert r.status_code == 200, r.text
    return [base64.b64decode(x["value"]) if x["value"] is not None else None for x in r.json()]


def test_v3_produce_single_streaming_and_batch(node):
    base = _v3(node)
    assert httpx.post(f"{base}/topics", json={"topic_name": "v3p", "partitions_count": 2}, timeout=30).status_code == 201
    r = httpx.post(f"{base}/topics/v3p/records", timeout=30, json={
        "partition_id": 1, "headers": [{"name": "h", "value": base64.b64encode(b"hv").decode()}],
        "key": {"type": "BINARY", "data": base64.b64encode(b"\x00k").decode()},
        "value": {"type": "STRING", "data": "one"}, "timestamp": "2026-01-02T03:04:05.678Z"})
    assert r.status_code == 200, r.text
    rep = r.json()
    assert (rep["error_code"], rep["partition_id"], rep["offset"], rep["timestamp"]) == (200, 1, 0,
                                                                                       "2026-01-02T03:04:05.678Z")
    assert rep["key"] == {"type": "BINARY", "size": 2} and rep["value"] == {"type": "STRING", "size": 3}
    got = httpx.get(f"{node.url}/topics/v3p/partitions/1/records", params={"offset": 0}, timeout=30,
                    headers={"Accept": "application/vnd.kafka.binary.v2+json"}).json()[0]
    assert base64.b64decode(got["key"]) == b"\x00k" and got["timestamp"] == 1767323045678
    assert got["headers"] == [{"key": "h", "value": base64.b64encode(b"hv").decode()}]

    # Streaming: a chunked body of concatenated JSON records, one report each, in order; a bad
    # record in the middle is reported and the stream goes on.
    def chunks():
        yield b'{"partition_id": 0, "value": {"type": "JSON", "data": 1}}\n{"partition_id": 0, "val'
        yield b'ue": {"type": "JSON", "data": 2}}'
        yield b'{"partition_id": 0, "value": {"type": "BINARY", "data": "!!"}}'
        yield b' {"partition_id": 9, "value": null}{"partition_id": 0, "value": {"type": "STRING", "data": "\xc3'
        yield b'\xa9"}}'
    r = httpx.post(f"{base}/topics/v3p/records", content=chunks(), headers={"Content-Type": JSON}, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith(JSON)
    reports = [json.loads(line) for line in r.text.splitlines()]
    assert [x["error_code"] for x in reports] == [200, 200, 400, 404, 200]
    assert [x.get("offset") for x in reports if x["error_code"] == 200] == [0, 1, 2]
    assert _fetch_values(node, "v3p", 0) == [b"1", b"2", "é".encode()]

    # A batch: 207 with successes and failures by id.
    r = httpx.post(f"{base}/topics/v3p/records:batch", timeout=30, json={"entries": [
        {"id": "a", "partition_id": 0, "value": {"type": "STRING", "data": "x"}},
        {"id": "b", "partition_id": 0, "value": {"type": "BINARY", "data": "not base64"}},
        {"id": "c", "partition_id": 0, "value": {"type": "JSON", "data": [1]}}]})
    assert r.status_code == 207, r.text
    doc = r.json()
    assert [(s["id"], s["offset"]) for s in doc["successes"]] == [("a", 3), ("c", 4)]
    assert [(f["id"], f["error_code"]) for f in doc["failures"]] == [("b", 400)]


def test_v3_streaming_produce_cut_halfway_keeps_what_was_acknowledged(node):
    base = _v3(node)
    assert httpx.post(f"{base}/topics", json={"topic_name": "cut", "partitions_count": 1}, timeout=30).status_code == 201
    parts = urlsplit(node.url)
    path = f"/v3/clusters/{cluster_id(node.url)}/topics/cut/records"
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as s:
        s.sendall((f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}\r\nContent-Type: application/json\r\n"
                   "Transfer-Encoding: chunked\r\n\r\n").encode())

        def chunk(data: bytes) -> None:
            s.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")

        records = b"".join(json.dumps({"value": {"type": "STRING", "data": f"r{i}"}}).encode() for i in range(3))
        chunk(records)
        received = b""
        deadline = time.monotonic() + 30
        while received.count(b'"error_code":200') < 3 and time.monotonic() < deadline:
            received += s.recv(65536)
        assert received.startswith(b"HTTP/1.1 200"), received
        assert received.count(b'"error_code":200') == 3, received
        chunk(b'{"value": {"type": "STRING", "data": "half')  # then the connection drops
    # What was acknowledged stays; the cut record was never written.
    wait_for(lambda: httpx.get(f"{node.url}/readyz", timeout=10).status_code == 200, 10, "the node")
    assert _fetch_values(node, "cut", 0) == [b"r0", b"r1", b"r2"]
    r = httpx.post(f"{base}/topics/cut/records", json={"value": {"type": "STRING", "data": "after"}}, timeout=30)
    assert r.json()["offset"] == 3


def test_bad_input_on_the_new_endpoints(node, group_member):
    base = _v3(node)
    other = f"{node.url}/v3/clusters/not-this-one"
    big = b'{"value": {"type": "STRING", "data": "' + b"x" * MAX_REQUEST_BYTES + b'"}}'
    h = {"Content-Type": JSON}
    # v3 produce
    _error(httpx.post(f"{other}/topics/walk/records", json={"value": None}, timeout=30), 404)
    _error(httpx.post(f"{base}/topics/nope/records", json={"value": None}, timeout=30), 404)
    _error(httpx.post(f"{base}/topics/walk/records", json={"partition_id": 7, "value": None}, timeout=30), 404)
    _error(httpx.post(f"{base}/topics/walk/records", content=b"{nope", headers=h, timeout=30), 400)
    _error(httpx.post(f"{base}/topics/walk/records", content=b"", headers=h, timeout=30), 422)
    _error(httpx.post(f"{base}/topics/walk/records", json={"partition_id": "0"}, timeout=30), 400)
    # AVRO without a schema: the subject's latest version, and walk-value has none (Confluent: 42207)
    _error(httpx.post(f"{base}/topics/walk/records", json={"value": {"type": "AVRO", "data": 1}}, timeout=30),
           422, 42207)
    _error(httpx.post(f"{base}/topics/walk/records", json={"timestamp": "yesterday"}, timeout=30), 400)
    _error(httpx.post(f"{base}/topics/walk/records", json={"headers": [{"value": "AA=="}]}, timeout=30), 400)
    _error(httpx.post(f"{base}/topics/walk/records", content=b"{}", headers={"Content-Type": "text/plain"},
                      timeout=30), 415)
    _error(httpx.post(f"{base}/topics/walk/records", content=big, headers=h, timeout=30), 413)
    r = httpx.post(f"{base}/topics/walk/records", content=iter([big]), headers=h, timeout=30)  # streaming
    assert r.status_code == 200 and [json.loads(x)["error_code"] for x in r.text.splitlines()] == [413]
    # records:batch
    _error(httpx.post(f"{base}/topics/nope/records:batch", json={"entries": [{"id": "1"}]}, timeout=30), 404)
    _error(httpx.post(f"{base}/topics/walk/records:batch", content=b"[", headers=h, timeout=30), 400)
    _error(httpx.post(f"{base}/topics/walk/records:batch", json={"entries": {}}, timeout=30), 400)
    _error(httpx.post(f"{base}/topics/walk/records:batch", json={"entries": []}, timeout=30), 422)
    _error(httpx.post(f"{base}/topics/walk/records:batch", json={"entries": [{"id": 1}]}, timeout=30), 400)
    _error(httpx.post(f"{base}/topics/walk/records:batch", json={"entries": [{"id": "a"}, {"id": "a"}]},
                      timeout=30), 400)
    _error(httpx.post(f"{base}/topics/walk/records:batch", json={"entries": [{"id": str(i)} for i in range(101)]},
                      timeout=30), 413)
    _error(httpx.post(f"{base}/topics/walk/records:batch", content=big, headers=h, timeout=30), 413)
    # configs
    _error(httpx.get(f"{base}/brokers/9/configs", timeout=30), 404)
    _error(httpx.get(f"{base}/brokers/1/configs/no.such", timeout=30), 404)
    _error(httpx.get(f"{base}/brokers/x/configs", timeout=30), 404)
    _error(httpx.put(f"{base}/brokers/1/configs/no.such", json={"value": "1"}, timeout=30), 404)
    _error(httpx.put(f"{base}/brokers/1/configs/num.partitions", json={"value": 1}, timeout=30), 400)
    _error(httpx.post(f"{base}/brokers/1/configs:alter", content=b"{", headers=h, timeout=30), 400)
    _error(httpx.post(f"{base}/broker-configs:alter", json={"data": "x"}, timeout=30), 400)
    _error(httpx.post(f"{base}/broker-configs:alter", content=big, headers=h, timeout=30), 413)
    _error(httpx.get(f"{other}/broker-configs", timeout=30), 404)
    _error(httpx.get(f"{other}/topics/-/configs", timeout=30), 404)
    r = httpx.post(f"{base}/topics/-/configs:alter", timeout=30, json={"data": [
        {"topic_name": "walk", "configs": [{"name": "retention.ms", "value": "not a number"}]},
        {"topic_name": "nope", "configs": [{"name": "retention.ms", "value": "1"}]},
        {"topic_name": "walk-created", "configs": [{"name": "no.such", "value": "1"}]}]})
    assert r.status_code == 207, r.text
    assert [(f["topic_name"], f["error_code"]) for f in r.json()["failures"]] == [
        ("walk", 40001), ("nope", 404), ("walk-created", 404)]
    r = httpx.post(f"{base}/topics/-/configs:alter", timeout=30, json={"validate_only": True, "data": [
        {"topic_name": "walk", "configs": [{"name": "retention.ms", "value": "1234"}]}]})
    assert r.status_code == 204
    assert httpx.get(f"{base}/topics/walk/configs/retention.ms", timeout=30).json()["value"] != "1234"
    r = httpx.post(f"{base}/topics/walk/configs:alter", timeout=30, json={"validate_only": True, "data": [
        {"name": "retention.ms", "value": "4321"}]})
    assert r.status_code == 204
    assert httpx.get(f"{base}/topics/walk/configs/retention.ms", timeout=30).json()["value"] != "4321"
    _error(httpx.post(f"{base}/topics/walk/configs:alter", timeout=30, json={"validate_only": True, "data": [
        {"name": "retention.ms", "value": "soon"}]}), 400, 40001)
    _error(httpx.post(f"{base}/topics/-/configs:alter", json={"data": [{"topic_name": 5, "configs": []}]},
                      timeout=30), 400)
    # replicas, partition offsets, partition replicas
    _error(httpx.get(f"{base}/topics/walk/partitions/0/replicas/9", timeout=30), 404)
    _error(httpx.get(f"{base}/topics/walk/partitions/9/replicas/1", timeout=30), 404)
    _error(httpx.get(f"{base}/topics/nope/partitions/0/replicas/1", timeout=30), 404)
    _error(httpx.get(f"{base}/brokers/9/partition-replicas", timeout=30), 404)
    _error(httpx.get(f"{base}/topics/walk/partitions/9/offset", timeout=30), 404)
    # acls:batch
    _error(httpx.post(f"{base}/acls:batch", json={"data": []}, timeout=30), 400, 40003)
    _error(httpx.post(f"{base}/acls:batch", json={"data": [{**ACL, "operation": "EAT"}]}, timeout=30), 400, 40003)
    _error(httpx.post(f"{base}/acls:batch", content=b"{", headers=h, timeout=30), 422)
    _error(httpx.post(f"{other}/acls:batch", json={"data": [ACL]}, timeout=30), 404)
    # the root
    assert httpx.get(f"{node.url}/", headers={"Accept": JSON}, timeout=30).json() == {}
    assert httpx.post(f"{node.url}/", json={"a": "b"}, timeout=30).json() == {}
    r = httpx.post(f"{node.url}/", json={"a": 1}, timeout=30)
    assert r.status_code == 422 and r.json()["error_code"] == 42201


def _walk_pages(url: str, page_size: int) -> tuple[list, int]:
    """Every item of a paged v3 list, following `metadata.next`, and how many pages it took."""
    items, pages, next_url = [], 0, f"{url}?page_size={page_size}"
    while next_url is not None:
        body = httpx.get(next_url, timeout=30).json()
        assert len(body["data"]) <= page_size
        items += body["data"]
        pages += 1
        next_url = body["metadata"]["next"]
    return items, pages


def test_topic_and_partition_lists_page_with_page_size_and_token(node, group_member):
    base = _v3(node)
    for name in ("paged-a", "paged-b", "paged-c"):
        r = httpx.post(f"{base}/topics", json={"topic_name": name, "partitions_count": 7}, timeout=30)
        assert r.status_code == 201, r.text
    whole = httpx.get(f"{base}/topics", timeout=30).json()
    assert whole["metadata"]["next"] is None  # without page_size the list is complete, as the spec has it
    names = [t["topic_name"] for t in whole["data"]]
    paged, pages = _walk_pages(f"{base}/topics", 2)
    assert [t["topic_name"] for t in paged] == names and pages == -(-len(names) // 2)

    partitions, pages = _walk_pages(f"{base}/topics/paged-b/partitions", 3)
    assert [p["partition_id"] for p in partitions] == list(range(7)) and pages == 3
    full = httpx.get(f"{base}/topics/paged-b/partitions", timeout=30).json()
    assert [p["partition_id"] for p in full["data"]] == list(range(7)) and full["metadata"]["next"] is None

    # A token names the last key of its page: deleting a topic between two pages skips nothing else.
    first = httpx.get(f"{base}/topics?page_size=1", timeout=30).json()
    assert first["data"][0]["topic_name"] == names[0]
    _error(httpx.get(f"{base}/topics?page_size=1&page_token=bm9wZQ", timeout=30), 422)  # not a token of this list
    token = parse_qs(urlsplit(first["metadata"]["next"]).query)["page_token"][0]
    _error(httpx.get(f"{base}/topics", params={"page_token": token}, timeout=30), 422)  # a token needs page_size
    _error(httpx.get(f"{base}/topics?page_size=0", timeout=30), 404)  # a bad query parameter, as elsewhere in v3
