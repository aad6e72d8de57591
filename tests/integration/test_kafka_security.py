"""The Kafka door of a secured node (authentication and the authorizer on), with confluent-kafka over
SASL_PLAINTEXT: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 clients of the users the node stores produce and consume; a
wrong password is refused with SASL_AUTHENTICATION_FAILED; a principal that may not READ a topic is
refused it over Kafka (TOPIC_AUTHORIZATION_FAILED) and over HTTP (403), by the same ACL; quotas answer
with a throttle time; SASL_SSL with the node's certificate."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import time

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from kio.schema.errors import ErrorCode
from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from lakelog.ingest_api.kafka import codec
from lakelog.ingest_api.security.cluster_auth import ClusterAuth
from lakelog.logstore.record_batch import Record, build_batch
from tests.support.kafka_wire import WireClient
from tests.support.nodes import NodeProcess, free_port
from tests.support.security import seed_secured_node
from tests.support.tls import make_pki

SECRET = "kafka-security-test-secret-8d2e"
PASSWORDS = {"alice": "alice-pw-Zx81", "mallory": "mallory-pw-Qp05"}
WAIT_S = 60
MALLORY_RATE = 2000  # produce bytes/s of User:mallory


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A node with SASL_PLAINTEXT as its Kafka listener; alice may do anything to orders*, READ g-alice."""
    root = tmp_path_factory.mktemp("kafkasec")
    http_port, kafka_port = free_port(), free_port()
    node = NodeProcess(root / "data", http_port, kafka_port=kafka_port, overrides={
        "listeners": f"http://127.0.0.1:{http_port},SASL_PLAINTEXT://127.0.0.1:{kafka_port}",
        "authentication.enabled": "true", "authorizer.enabled": "true", "super.users": "User:admin",
        "cluster.secret": SECRET, "offsets.topic.num.partitions": "2", "group.initial.rebalance.delay.ms": "0",
        "fetch.max.wait.ms": "200",
        "quota.overrides": json.dumps({"User:mallory": {"producer.byte.rate": MALLORY_RATE}})})
    node.start()
    try:
        seed_secured_node(node.url, SECRET, PASSWORDS, ("orders", "payroll", "bulk"), (
            {"principal": "User:alice", "resource_type": "TOPIC", "resource_name": "orders",
             "pattern_type": "PREFIXED", "operation": "ALL", "permission": "ALLOW"},
            {"principal": "User:alice", "resource_type": "GROUP", "resource_name": "g-alice",
             "pattern_type": "LITERAL", "operation": "READ", "permission": "ALLOW"},
            {"principal": "User:mallory", "resource_type": "TOPIC", "resource_name": "bulk",
             "pattern_type": "LITERAL", "operation": "WRITE", "permission": "ALLOW"},
            {"principal": "User:mallory", "resource_type": "GROUP", "resource_name": "g-mallory",
             "pattern_type": "LITERAL", "operation": "READ", "permission": "ALLOW"}))
        yield node
    finally:
        try:
            node.stop()
        finally:
            node.kill()


def _sasl(node: NodeProcess, user: str, mechanism: str, password: str | None = None) -> dict[str, str]:
    return {"bootstrap.servers": node.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": PASSWORDS[user] if password is None else password}


def test_plain_and_scram_clients_produce_and_consume_as_stored_users(secure):
    delivered, errors = [], []
    p = Producer({**_sasl(secure, "alice", "PLAIN"), "acks": "all"})
    for i in range(10):
        p.produce("orders", value=f"v{i}".encode(),
                  on_delivery=lambda err, msg: (errors if err else delivered).append(err or msg.offset()))
    assert p.flush(WAIT_S) == 0
    assert not errors and len(delivered) == 10, errors
    c = Consumer({**_sasl(secure, "alice", "SCRAM-SHA-256"), "group.id": "g-alice", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["orders"])
        got = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < 10 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and not m.error():
                got.append(m.value())
        assert sorted(got) == sorted(f"v{i}".encode() for i in range(10))
        c.commit(asynchronous=False)
    finally:
        c.close()


def test_scram_sha_512_clients_of_users_made_over_http(secure):
    """A password set over HTTP stores a SCRAM-SHA-512 credential beside the SHA-256 one."""
    delivered = []
    p = Producer({**_sasl(secure, "alice", "SCRAM-SHA-512"), "acks": "all"})
    p.produce("orders", value=b"sha-512", on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
    assert p.flush(WAIT_S) == 0
    assert len(delivered) == 1 and isinstance(delivered[0], int), delivered  # authenticated, and written
    seen = []
    wrong = Producer({**_sasl(secure, "alice", "SCRAM-SHA-512", "not-the-password"), "error_cb": seen.append})
    deadline = time.monotonic() + WAIT_S
    while not any(e.code() == KafkaError._AUTHENTICATION for e in seen) and time.monotonic() < deadline:
        wrong.poll(0.5)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen


def test_a_wrong_password_is_refused_and_the_connection_closed(secure):
    seen = []
    p = Producer({**_sasl(secure, "alice", "SCRAM-SHA-256", "not-the-password"), "error_cb": seen.append})
    deadline = time.monotonic() + WAIT_S
    while not any(e.code() == KafkaError._AUTHENTICATION for e in seen) and time.monotonic() < deadline:
        p.poll(0.5)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in seen), seen
    with WireClient("127.0.0.1", secure.kafka_port) as c:
        _, hs = c.request(SaslHandshakeRequest(mechanism="PLAIN"))
        assert hs.error_code == ErrorCode.none and "SCRAM-SHA-256" in hs.mechanisms
        _, auth = c.request(SaslAuthenticateRequest(auth_bytes=b"\0alice\0wrong-password"))
        assert auth.error_code == ErrorCode.sasl_authentication_failed
        with pytest.raises(ConnectionError):
            c.read_frame()
    with WireClient("127.0.0.1", secure.kafka_port) as c:  # a request before authentication closes it
        c.send_raw(codec.encode_request(HeartbeatRequest(group_id="g-alice", generation_id=1, member_id="m",
                                                         group_instance_id=None), 1))
        with pytest.raises(ConnectionError):
            c.read_frame()


def _as_mallory(node: NodeProcess) -> WireClient:
    c = WireClient("127.0.0.1", node.kafka_port)
    c.request(SaslHandshakeRequest(mechanism="PLAIN"))
    _, auth = c.request(SaslAuthenticateRequest(auth_bytes=b"\0mallory\0" + PASSWORDS["mallory"].encode()))
    assert auth.error_code == ErrorCode.none
    return c


def test_each_refusal_names_its_resource_and_listings_leave_out_what_may_not_be_seen(secure):
    with _as_mallory(secure) as c:
        _, md = c.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                          include_topic_authorized_operations=False))
        assert {t.name for t in md.topics} == {"bulk"}  # WRITE implies DESCRIBE; orders, payroll left out
        _, md = c.request(MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name="payroll"),),
                                          allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        assert md.topics[0].error_code == ErrorCode.topic_authorization_failed
        batch = build_batch([Record(0, 1_700_000_000_000, None, b"x")])
        _, res = c.request(ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=10),
                                          topic_data=(TopicProduceData(name="payroll", partition_data=(
                                              PartitionProduceData(index=0, records=batch),)),)))
        assert res.responses[0].partition_responses[0].error_code == ErrorCode.topic_authorization_failed
        _, fc = c.request(FindCoordinatorRequest(key_type=0, coordinator_keys=("g-alice",)))
        assert fc.coordinators[0].error_code == ErrorCode.group_authorization_failed
        _, dc = c.request(DescribeClusterRequest(include_cluster_authorized_operations=False))
        assert dc.error_code == ErrorCode.cluster_authorization_failed


def _fetch_payroll() -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                        session_epoch=-1, topics=(FetchTopic(topic="payroll", partitions=(
                            FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                           log_start_offset=-1, partition_max_bytes=1 << 20),)),),
                        forgotten_topics_data=(), rack_id="")


def test_a_principal_without_read_is_refused_the_topic_over_kafka_and_http(secure):
    with _as_mallory(secure) as c:
        _, fetched = c.request(_fetch_payroll())
        assert fetched.responses[0].partitions[0].error_code == ErrorCode.topic_authorization_failed
    seen = []
    c = Consumer({**_sasl(secure, "mallory", "SCRAM-SHA-256"), "group.id": "g-mallory",
                  "auto.offset.reset": "earliest", "error_cb": seen.append})
    try:
        c.subscribe(["payroll"])
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in seen):
            m = c.poll(0.5)
            assert m is None or m.error() is not None  # never a record
            if m is not None:
                seen.append(m.error())
        assert any(e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED for e in seen), seen
    finally:
        c.close()
    basic = base64.b64encode(f"mallory:{PASSWORDS['mallory']}".encode()).decode()
    r = httpx.get(f"{secure.url}/topics/payroll/partitions/0/records?offset=0&timeout=0", timeout=30,
                  headers={"Authorization": f"Basic {basic}", "Accept": "application/vnd.kafka.binary.v2+json"})
    assert r.status_code == 403 and r.json()["error_code"] == 40301


def test_a_principal_over_its_produce_quota_is_answered_with_a_throttle_time(secure):
    batch = build_batch([Record(i, 1_700_000_000_000, None, b"x" * 1000) for i in range(4)])
    produce = ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=10), topic_data=(
        TopicProduceData(name="bulk", partition_data=(PartitionProduceData(index=0, records=batch),)),))
    with _as_mallory(secure) as c:
        answers = [c.request(produce)[1] for _ in range(2)]  # twice the per-second rate in one go
    assert all(a.responses[0].partition_responses[0].error_code == ErrorCode.none for a in answers)  # served ...
    assert answers[-1].throttle_time > datetime.timedelta(0)  # ... and told to slow down


def test_sasl_ssl_with_the_nodes_certificate(tmp_path):
    pki = make_pki(tmp_path / "pki")
    http_port, kafka_port = free_port(), free_port()
    node = NodeProcess(tmp_path / "data", http_port, kafka_port=kafka_port, tls_ca=pki.ca_cert, overrides={
        "listeners": f"https://127.0.0.1:{http_port},SASL_SSL://127.0.0.1:{kafka_port}",
        "ssl.certfile": pki.server_cert, "ssl.keyfile": pki.server_key, "ssl.cafile": pki.ca_cert,
        "authentication.enabled": "true", "authorizer.enabled": "true", "super.users": "User:alice",
        "cluster.secret": SECRET, "offsets.topic.num.partitions": "1"})
    node.start()
    try:
        with httpx.Client(base_url=node.url, auth=ClusterAuth(SECRET.encode(), 0, principal="User:__cluster"),
                          timeout=30, verify=ssl.create_default_context(cafile=pki.ca_cert)) as root_client:
            cid = root_client.get("/v3/clusters").json()["data"][0]["cluster_id"]
            r = root_client.post(f"/v3/clusters/{cid}/users", json={"name": "alice", "password": PASSWORDS["alice"]})
            assert r.status_code == 201, r.text
            r = root_client.post(f"/v3/clusters/{cid}/topics", json={"topic_name": "secret-orders",
                                                                     "partitions_count": 1})
            assert r.status_code == 201, r.text
        conf = {**_sasl(node, "alice", "SCRAM-SHA-256"), "security.protocol": "SASL_SSL",
                "ssl.ca.location": pki.ca_cert}
        p = Producer(conf)
        p.produce("secret-orders", value=b"over TLS")
        assert p.flush(WAIT_S) == 0
        c = Consumer({**conf, "group.id": "g-tls", "auto.offset.reset": "earliest"})
        try:
            c.subscribe(["secret-orders"])
            deadline = time.monotonic() + WAIT_S
            got = None
            while got is None and time.monotonic() < deadline:
                m = c.poll(1.0)
                if m is not None and not m.error():
                    got = m.value()
            assert got == b"over TLS"
        finally:
            c.close()
    finally:
        try:
            node.stop()
        finally:
            node.kill()
