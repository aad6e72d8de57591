"""Transactions over HTTP on a real node: begin (the transactional id's producer id and epoch),
produce into the transaction, commit and abort, read_committed over HTTP and over Kafka, a fenced
holder of an older epoch, and a group's offsets committed inside a transaction."""

from __future__ import annotations

import base64

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.faults import wait_for
from tests.support.nodes import running_node

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
WAIT_S = 60


@pytest.fixture
def node(tmp_path):
    with running_node(tmp_path, kafka=True, **{"transaction.state.log.num.partitions": "3",
                                            "offsets.topic.num.partitions": "3"}) as n:
        yield n


def _b64(v: str) -> str:
    return base64.b64encode(v.encode()).decode()


def test_http_transactions_commit_abort_fence_and_offsets(node):
    http = httpx.Client(base_url=node.url, timeout=WAIT_S)
    cluster = http.get("/v3/clusters").json()["data"][0]["cluster_id"]
    r = http.post(f"/v3/clusters/{cluster}/topics", json={"topic_name": "ht", "partitions_count": 1})
    assert r.status_code in (200, 201), r.text
    txns = f"/v3/clusters/{cluster}/transactions"

    r = http.post(txns, json={"transactional_id": "h1", "transaction_timeout_ms": 30_000})
    assert r.status_code == 200, r.text
    pid, epoch = r.json()["producer_id"], r.json()["producer_epoch"]
    seq = 0

    def produce(values: list[str], producer_epoch: int) -> httpx.Response:
        nonlocal seq
        resp = http.post("/topics/ht/partitions/0", headers={"Content-Type": BINARY_V2}, json={
            "transactional_id": "h1", "producer_id": pid, "producer_epoch": producer_epoch, "sequence": seq,
            "records": [{"value": _b64(v)} for v in values]})
        if resp.status_code == 200:
            seq += len(values)
        return resp

    def end(action: str, producer_epoch: int) -> httpx.Response:
        return http.post(f"{txns}/h1:{action}", json={"producer_id": pid, "producer_epoch": producer_epoch})

    assert produce(["a", "b"], epoch).status_code == 200
    described = http.get(f"{txns}/h1").json()
    assert described["state"] == "Ongoing" and described["partitions"] == [{"topic": "ht", "partition": 0}]
    assert end("commit", epoch).status_code == 200
    assert produce(["x"], epoch).status_code == 200
    assert end("abort", epoch).status_code == 200
    assert produce(["c"], epoch).status_code == 200
    assert end("commit", epoch).status_code == 200
    # EndTxn is answered once PrepareCommit is stored; the markers and CompleteCommit follow.
    wait_for(lambda: http.get(f"{txns}/h1").json()["state"] == "CompleteCommit", WAIT_S, "CompleteCommit")
    assert end("frobnicate", epoch).status_code == 422

    def values(isolation: str) -> list[str]:
        r = http.get("/topics/ht/partitions/0/records", params={"offset": 0, "timeout": 0, "isolation": isolation},
                     headers={"Accept": BINARY_V2})
        assert r.status_code == 200, r.text
        return [base64.b64decode(rec["value"]).decode() for rec in r.json()]

    assert values("read_committed") == ["a", "b", "c"]
    assert values("read_uncommitted") == ["a", "b", "x", "c"]

    # A second holder of the id: the first one's epoch is fenced.
    r = http.post(txns, json={"transactional_id": "h1"})
    assert r.json()["producer_id"] == pid and r.json()["producer_epoch"] == epoch + 1
    stale = produce(["zombie"], epoch)
    assert stale.status_code == 409 and stale.json()["error_code"] in (40909, 40942), stale.text
    refused = end("commit", epoch)
    assert refused.status_code == 409 and refused.json()["error_code"] == 40942, refused.text

    # A group's offsets inside the transaction: visible on commit, never on abort.
    epoch += 1
    seq = 0
    offsets = f"{txns}/h1/offsets"
    r = http.post(offsets, json={"producer_id": pid, "producer_epoch": epoch, "group_id": "hg",
                                 "offsets": [{"topic": "ht", "partition": 0, "offset": 3}]})
    assert r.status_code == 200, r.text
    assert end("commit", epoch).status_code == 200
    r = http.post(offsets, json={"producer_id": pid, "producer_epoch": epoch, "group_id": "hg",
                                 "offsets": [{"topic": "ht", "partition": 0, "offset": 1}]})
    assert r.status_code == 200, r.text
    assert end("abort", epoch).status_code == 200
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "hg"})
    try:
        (tp,) = consumer.committed([TopicPartition("ht", 0)], timeout=WAIT_S)
        assert tp.offset == 3
    finally:
        consumer.close()
    assert "Traceback" not in node.read_log()


def test_python_client_transactional_producer(node):
    from lakelog.client import Producer, TransactionError

    http = httpx.Client(base_url=node.url, timeout=WAIT_S)
    cluster = http.get("/v3/clusters").json()["data"][0]["cluster_id"]
    for name in ("pt", "pt-in"):
        r = http.post(f"/v3/clusters/{cluster}/topics", json={"topic_name": name, "partitions_count": 2})
        assert r.status_code in (200, 201), r.text
    conf = {"bootstrap.servers": node.url, "transactional.id": "py-1", "linger.ms": 1}
    p = Producer(conf)
    with pytest.raises(TransactionError):  # before init_transactions / begin_transaction
        p.produce("pt", b"early")
    p.init_transactions()
    p.begin_transaction()
    for i in range(6):
        p.produce("pt", f"c{i}".encode(), partition=i % 2)
    p.commit_transaction()
    p.begin_transaction()
    for i in range(3):
        p.produce("pt", f"a{i}".encode(), partition=i % 2)
    p.flush()
    p.abort_transaction()
    p.begin_transaction()
    p.produce("pt", b"d0", partition=0)
    p.send_offsets_to_transaction([("pt-in", 0, 5), ("pt-in", 1, 7)], "py-group")
    p.commit_transaction()

    def committed_values(partition: int) -> list[str]:
        r = http.get(f"/topics/pt/partitions/{partition}/records",
                     params={"offset": 0, "timeout": 0, "isolation": "read_committed"}, headers={"Accept": BINARY_V2})
        return [base64.b64decode(rec["value"]).decode() for rec in r.json()]

    # A commit is answered once PrepareCommit is stored; its markers (and so the LSO) follow.
    want = sorted([f"c{i}" for i in range(6)] + ["d0"])
    wait_for(lambda: sorted(committed_values(0) + committed_values(1)) == want, WAIT_S, "the committed records")
    consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "py-group"})
    try:
        got = consumer.committed([TopicPartition("pt-in", 0), TopicPartition("pt-in", 1)], timeout=WAIT_S)
        assert [tp.offset for tp in got] == [5, 7]
    finally:
        consumer.close()

    # Another instance takes the id: this one is fenced for good.
    other = Producer(conf)
    other.init_transactions()
    p.begin_transaction()
    p.produce("pt", b"zombie", partition=0)
    with pytest.raises(TransactionError) as fenced:
        p.commit_transaction()
    with pytest.raises(TransactionError):
        p.begin_transaction()
    other.begin_transaction()
    other.produce("pt", b"fresh", partition=0)
    other.commit_transaction()
    wait_for(lambda: "fresh" in committed_values(0), WAIT_S, "the fresh instance's commit")
    assert "zombie" not in committed_values(0)
    assert fenced.value is not None
    p.close()
    other.close()
