"""TransactionalId ACLs on a secured node (authentication and the authorizer on), over Kafka with
confluent-kafka and over HTTP: a transactional producer without WRITE on its transactional.id is
refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED and works once an ACL is granted (through the
Kafka door's CreateAcls); a PREFIXED binding covers the ids that start with it; ListTransactions
lists only the ids the principal may DESCRIBE and DescribeTransactions refuses the others; the HTTP
transactions resource answers the same refusal as a 403 with error_code 40302."""

from __future__ import annotations

import base64
import json
import struct

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v0.request import ListTransactionsRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from lakelog.ingest_api.kafka import codec
from tests.support.kafka_wire import WireClient
from tests.support.nodes import NodeProcess, free_port
from tests.support.security import seed_secured_node

SECRET = "txn-acl-test-secret-41c7"
PASSWORDS = {"admin": "admin-pw-Hq20", "alice": "alice-pw-Lm33", "bob": "bob-pw-Rt84"}
WAIT_S = 60
TXN_REFUSED = 53  # Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """alice: ALL on topics tx*, READ on group g-*, WRITE on transactional ids app-* (PREFIXED);
    bob: ALL on topics tx* and nothing on any transactional id."""
    root = tmp_path_factory.mktemp("txnacl")
    http_port, kafka_port = free_port(), free_port()
    node = NodeProcess(root / "data", http_port, kafka_port=kafka_port, overrides={
        "listeners": f"http://127.0.0.1:{http_port},SASL_PLAINTEXT://127.0.0.1:{kafka_port}",
        "authentication.enabled": "true", "authorizer.enabled": "true", "super.users": "User:admin",
        "cluster.secret": SECRET, "offsets.topic.num.partitions": "2", "transaction.state.log.num.partitions": "2",
        "group.initial.rebalance.delay.ms": "0", "fetch.max.wait.ms": "200"})
    node.start()
    try:
        acl = {"pattern_type": "PREFIXED", "permission": "ALLOW"}
        cid = seed_secured_node(node.url, SECRET, PASSWORDS, ("txa", "txb"), (
            {**acl, "principal": "User:alice", "resource_type": "TOPIC", "resource_name": "tx", "operation": "ALL"},
            {**acl, "principal": "User:alice", "resource_type": "GROUP", "resource_name": "g-", "operation": "READ"},
            {**acl, "principal": "User:alice", "resource_type": "TRANSACTIONAL_ID", "resource_name": "app-",
             "operation": "WRITE"},
            {**acl, "principal": "User:bob", "resource_type": "TOPIC", "resource_name": "tx", "operation": "ALL"}))
        node.cluster_id = cid
        yield node
    finally:
        try:
            node.stop()
        finally:
            node.kill()


def _sasl(node: NodeProcess, user: str) -> dict[str, str]:
    return {"bootstrap.servers": node.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": user, "sasl.password": PASSWORDS[user]}


def _commit_one(node: NodeProcess, user: str, tid: str, topic: str, value: bytes) -> None:
    """A whole transaction of one record; raises the KafkaException a refusal makes."""
    p = Producer({**_sasl(node, user), "transactional.id": tid, "transaction.timeout.ms": 30_000})
    p.init_transactions(WAIT_S)
    p.begin_transaction()
    p.produce(topic, value=value)
    p.commit_transaction(WAIT_S)


def _refused(node: NodeProcess, user: str, tid: str) -> KafkaError:
    with pytest.raises(KafkaException) as e:
        _commit_one(node, user, tid, "txa", b"never")
    return e.value.args[0]


def _committed_values(node: NodeProcess, topic: str) -> list[bytes]:
    c = Consumer({**_sasl(node, "admin"), "group.id": f"g-check-{topic}", "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got: list[bytes] = []
        idle = 0
        while idle < 6:
            m = c.poll(1.0)
            if m is None:
                idle += 1 if got else 0.25
            elif not m.error():
                got.append(m.value())
        return got
    finally:
        c.close()


def test_a_transactional_producer_is_refused_until_an_acl_grants_its_id(secure):
    err = _refused(secure, "bob", "bob-1")
    assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, err
    admin = AdminClient(_sasl(secure, "admin"))
    binding = AclBinding(ResourceType.TRANSACTIONAL_ID, "bob-1", ResourcePatternType.LITERAL, "User:bob", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    for f in admin.create_acls([binding], request_timeout=WAIT_S).values():
        assert f.result(WAIT_S) is None
    listed = admin.describe_acls(AclBindingFilter(ResourceType.TRANSACTIONAL_ID, None, ResourcePatternType.ANY,
                                                  None, None, AclOperation.ANY, AclPermissionType.ANY),
                                 request_timeout=WAIT_S).result(WAIT_S)
    assert {(b.name, b.principal, b.resource_pattern_type) for b in listed} == {
        ("bob-1", "User:bob", ResourcePatternType.LITERAL), ("app-", "User:alice", ResourcePatternType.PREFIXED)}
    _commit_one(secure, "bob", "bob-1", "txa", b"bob-after-grant")
    assert b"bob-after-grant" in _committed_values(secure, "txa")
    deleted = admin.delete_acls([AclBindingFilter(ResourceType.TRANSACTIONAL_ID, "bob-1", ResourcePatternType.LITERAL,
                                                  None, None, AclOperation.ANY, AclPermissionType.ANY)],
                                request_timeout=WAIT_S)
    assert [len(f.result(WAIT_S)) for f in deleted.values()] == [1]
    err = _refused(secure, "bob", "bob-1")
    assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, err


def test_a_prefixed_binding_covers_the_ids_that_start_with_it(secure):
    _commit_one(secure, "alice", "app-orders", "txb", b"alice-prefixed")
    assert b"alice-prefixed" in _committed_values(secure, "txb")
    err = _refused(secure, "alice", "other-orders")
    assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, err


def _as(node: NodeProcess, user: str) -> WireClient:
    c = WireClient("127.0.0.1", node.kafka_port)
    c.request(SaslHandshakeRequest(mechanism="PLAIN"))
    _, auth = c.request(SaslAuthenticateRequest(auth_bytes=f"\0{user}\0{PASSWORDS[user]}".encode()))
    assert auth.error_code == ErrorCode.none
    return c


def _describe_error_code(c: WireClient, transactional_id: str) -> int:
    """The error code of DescribeTransactions v0 for one id, read from the frame itself: a refused id's
    (and a completed transaction's) start time is -1 on the wire, which the test's decoder refuses."""
    c.correlation_id += 1
    c.send_raw(codec.encode_request(DescribeTransactionsRequest(transactional_ids=(transactional_id,)),
                                    c.correlation_id))
    frame = c.read_frame()
    # correlation id (int32), header tags (0), throttle time (int32), compact array length (1 + 1)
    assert frame[4] == 0 and frame[9] == 2, frame[:12]
    return struct.unpack_from(">h", frame, 10)[0]


def test_listing_and_describing_transactions_need_describe_on_the_id(secure):
    _commit_one(secure, "alice", "app-listed", "txa", b"listed")
    _commit_one(secure, "admin", "admin-only", "txa", b"admin")
    listing = ListTransactionsRequest(state_filters=(), producer_id_filters=())
    with _as(secure, "alice") as c:
        seen = {t.transactional_id for t in c.request(listing)[1].transaction_states}
        allowed, refused = _describe_error_code(c, "app-listed"), _describe_error_code(c, "admin-only")
    assert "app-listed" in seen and "admin-only" not in seen, seen
    assert (allowed, refused) == (0, TXN_REFUSED)
    with _as(secure, "admin") as c:
        seen = {t.transactional_id for t in c.request(listing)[1].transaction_states}
    assert {"app-listed", "admin-only"} <= seen


def test_http_transactions_need_write_on_the_transactional_id(secure):
    def basic(user: str) -> dict[str, str]:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{PASSWORDS[user]}".encode()).decode()}

    txns = f"/v3/clusters/{secure.cluster_id}/transactions"
    with httpx.Client(base_url=secure.url, timeout=WAIT_S) as http:
        r = http.post(txns, json={"transactional_id": "bob-http"}, headers=basic("bob"))
        assert r.status_code == 403 and r.json()["error_code"] == 40302, r.text
        r = http.get(f"{txns}/bob-http", headers=basic("bob"))
        assert r.status_code == 403 and r.json()["error_code"] == 40302, r.text
        r = http.post(f"/v3/clusters/{secure.cluster_id}/acls", headers=basic("admin"), json={
            "principal": "User:bob", "resource_type": "TRANSACTIONAL_ID", "resource_name": "bob-http",
            "pattern_type": "LITERAL", "operation": "WRITE", "permission": "ALLOW"})
        assert r.status_code == 201, r.text
        r = http.post(txns, json={"transactional_id": "bob-http"}, headers=basic("bob"))
        assert r.status_code == 200, r.text
        ids = {"producer_id": r.json()["producer_id"], "producer_epoch": r.json()["producer_epoch"]}
        r = http.post("/topics/txa/partitions/0", headers={**basic("bob"), "Content-Type":
                                                         "application/vnd.kafka.binary.v2+json"},
                      content=json.dumps({"transactional_id": "bob-http", **ids, "sequence": 0,
                                          "records": [{"value": base64.b64encode(b"over-http").decode()}]}))
        assert r.status_code == 200, r.text
        # alice may write to the topic but not to bob's transaction
        r = http.post("/topics/txa/partitions/0", headers={**basic("alice"), "Content-Type":
                                                           "application/vnd.kafka.binary.v2+json"},
                      content=json.dumps({"transactional_id": "bob-http", **ids, "sequence": 1,
                                          "records": [{"value": base64.b64encode(b"intruder").decode()}]}))
        assert r.status_code == 403 and r.json()["error_code"] == 40302, r.text
        assert http.get(f"{txns}/bob-http", headers=basic("bob")).json()["state"] == "Ongoing"
        r = http.post(f"{txns}/bob-http:commit", json=ids, headers=basic("alice"))
        assert r.status_code == 403 and r.json()["error_code"] == 40302, r.text
        r = http.post(f"{txns}/bob-http:commit", json=ids, headers=basic("bob"))
        assert r.status_code == 200, r.text
    assert b"over-http" in _committed_values(secure, "txa")
    assert b"intruder" not in _committed_values(secure, "txa")
