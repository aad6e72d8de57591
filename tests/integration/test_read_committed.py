"""read_committed on real nodes: transactions written by confluent-kafka's transactional producer
(markers through the coordinator's WriteTxnMarkers to the leader), read back over HTTP
(`?isolation=read_committed` on records, v2 consumer instances with `isolation.level`) and over
Kafka, the last stable offset in the offsets JSON while a transaction is open, a torn `.txnindex`
rebuilt across a restart, `dump-log` of the markers and the index, and aborted transactions read
from the remote tier's `.txnindex` below the local log start."""

from __future__ import annotations

import base64
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from lakelog.logstore.record_batch import iter_batches
from tests.support.faults import wait_for
from tests.support.nodes import running_node, start_node

WAIT_S = 120
SMALL = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "2",
         "transaction.state.log.num.partitions": "2"}
BINARY = "application/vnd.kafka.binary.v2+json"
RECORDBATCH = "application/vnd.kafka.recordbatch"
V2 = "application/vnd.kafka.v2+json"


@pytest.fixture
def knode(tmp_path):
    with running_node(tmp_path, kafka=True, **SMALL) as n:
        yield n


def _create(bootstrap: str, name: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(name, 1, 1, config=config)]).values():
        f.result(WAIT_S)


def _txn_producer(bootstrap: str) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{uuid.uuid4().hex[:8]}",
                  "transaction.timeout.ms": 60_000, "linger.ms": 0})
    p.init_transactions(WAIT_S)
    return p


def _transaction(p: Producer, topic: str, values: list[str], *, commit: bool | None) -> None:
    """One transaction of `values`; committed, aborted, or (None) left open."""
    p.begin_transaction()
    for v in values:
        p.produce(topic, value=v.encode(), partition=0)
    p.flush(WAIT_S)
    if commit is True:
        p.commit_transaction(WAIT_S)
    elif commit is False:
        p.abort_transaction(WAIT_S)


def _offsets(url: str, topic: str) -> dict:
    r = httpx.get(f"{url}/topics/{topic}/partitions/0/offsets", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _http_values(url: str, topic: str, isolation: str | None) -> tuple[list[str], httpx.Response]:
    params = {"offset": 0, "timeout": 0, "max_bytes": 1 << 20}
    if isolation:
        params["isolation"] = isolation
    r = httpx.get(f"{url}/topics/{topic}/partitions/0/records", params=params, headers={"Accept": BINARY},
                  timeout=30)
    assert r.status_code == 200, r.text
    return [base64.b64decode(rec["value"]).decode() for rec in r.json()], r


def _kafka_values(bootstrap: str, topic: str, isolation: str, expected: int) -> list[str]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got: list[str] = []

        def more() -> bool:
            m = c.poll(1.0)
            if m is not None and not m.error():
                got.append(m.value().decode())
            return len(got) >= expected

        wait_for(more, WAIT_S, f"{expected} records of {topic}", interval_s=0)
        return got
    finally:
        c.close()


def _v2_consumer_values(url: str, topic: str, expected: int) -> list[str]:
    group = f"g-{uuid.uuid4().hex[:6]}"
    r = httpx.post(f"{url}/consumers/{group}", json={"name": "c1", "format": "binary", "auto.offset.reset": "earliest",
                                                     "isolation.level": "read_committed"},
                   headers={"Content-Type": V2}, timeout=30)
    assert r.status_code == 200, r.text
    base = r.json()["base_uri"]
    try:
        r = httpx.post(f"{base}/assignments", json={"partitions": [{"topic": topic, "partition": 0}]},
                       headers={"Content-Type": V2}, timeout=30)
        assert r.status_code == 204, r.text
        got: list[str] = []

        def more() -> bool:
            rr = httpx.get(f"{base}/records", params={"timeout": 500}, headers={"Accept": BINARY}, timeout=30)
            assert rr.status_code == 200, rr.text
            got.extend(base64.b64decode(rec["value"]).decode() for rec in rr.json())
            return len(got) >= expected

        wait_for(more, WAIT_S, f"{expected} records through a read_committed consumer instance")
        return got
    finally:
        httpx.delete(base, timeout=30)


def test_http_and_kafka_read_committed_with_an_open_transaction_and_a_torn_txnindex(knode):
    topic = "ledger"
    _create(knode.bootstrap, topic)
    p = _txn_producer(knode.bootstrap)
    _transaction(p, topic, ["c1", "c2"], commit=True)
    _transaction(p, topic, ["a1", "a2", "a3"], commit=False)
    _transaction(p, topic, ["c3"], commit=True)
    committed = ["c1", "c2", "c3"]
    # A transaction left open holds the LSO back at its first offset.
    _transaction(p, topic, ["o1"], commit=None)
    doc = _offsets(knode.url, topic)
    # 2 + marker, 3 + marker, 1 + marker, then the open one at 9
    assert doc["end_offset"] == 10 and doc["last_stable_offset"] == 9, doc
    values, r = _http_values(knode.url, topic, "read_committed")
    assert values == committed
    assert r.headers["X-Lakelog-Last-Stable-Offset"] == "9" and r.headers["X-Lakelog-Next-Offset"] == "9"
    uncommitted, r = _http_values(knode.url, topic, None)
    # Every data record, never a control record, in read_uncommitted.
    assert uncommitted == ["c1", "c2", "a1", "a2", "a3", "c3", "o1"]
    raw = httpx.get(f"{knode.url}/topics/{topic}/partitions/0/records",
                    params={"offset": 0, "timeout": 0, "isolation": "read_committed"},
                    headers={"Accept": RECORDBATCH}, timeout=30)
    batches = [b for _, b in iter_batches(raw.content)]
    assert [r.value.decode() for b in batches if not b.is_control for r in b.records()] == committed
    assert sum(b.is_control for b in batches) == 3  # markers stay for a batch reader to skip
    assert _v2_consumer_values(knode.url, topic, 3) == committed
    assert _kafka_values(knode.bootstrap, topic, "read_committed", 3) == committed
    # A read_committed instance that starts at "latest" starts at the LSO, not the HW: the open
    # transaction's record is still ahead of it.
    r = httpx.post(f"{knode.url}/consumers/late", json={"name": "c1", "format": "binary", "auto.offset.reset": "latest",
                                                       "isolation.level": "read_committed"},
                   headers={"Content-Type": V2}, timeout=30)
    late = r.json()["base_uri"]
    httpx.post(f"{late}/assignments", json={"partitions": [{"topic": topic, "partition": 0}]},
               headers={"Content-Type": V2}, timeout=30)
    assert httpx.get(f"{late}/records", params={"timeout": 0}, headers={"Accept": BINARY}, timeout=30).json() == []
    p.commit_transaction(WAIT_S)
    wait_for(lambda: _offsets(knode.url, topic)["last_stable_offset"] == 11, WAIT_S, "the LSO after the commit")
    got_late = httpx.get(f"{late}/records", params={"timeout": 2000}, headers={"Accept": BINARY}, timeout=30).json()
    assert [base64.b64decode(rec["value"]).decode() for rec in got_late] == ["o1"]
    httpx.delete(late, timeout=30)
    assert _http_values(knode.url, topic, "read_committed")[0] == committed + ["o1"]
    metrics = httpx.get(f"{knode.url}/metrics", timeout=30).text
    assert f'lakelog_partition_last_stable_offset{{partition="0",topic="{topic}"}} 11.0' in metrics

    # Tear the .txnindex behind the node's back: on the next open it is rebuilt from the log.
    knode.stop()
    txnindex = knode.data_dir / f"{topic}-0" / f"{0:020d}.txnindex"
    good = txnindex.read_bytes()
    assert len(good) == 34
    txnindex.write_bytes(good[:20])
    knode.start()
    assert txnindex.read_bytes() == good
    assert _kafka_values(knode.bootstrap, topic, "read_committed", 4) == committed + ["o1"]
    assert _http_values(knode.url, topic, "read_committed")[0] == committed + ["o1"]

    lakelog = Path(sys.executable).with_name("lakelog")
    dumped = subprocess.run([str(lakelog), "dump-log", str(txnindex), str(txnindex.with_suffix(".log"))],
                            capture_output=True, text=True, timeout=60)
    assert dumped.returncode == 0, dumped.stderr
    assert "producerId:" in dumped.stdout and "firstOffset: 3 lastOffset: 6" in dumped.stdout
    assert dumped.stdout.count("endTxnMarker: COMMIT") == 3 and dumped.stdout.count("endTxnMarker: ABORT") == 1
    p.flush(WAIT_S)


def _local_log_start(url: str, topic: str) -> int:
    end = _offsets(url, topic)["end_offset"]
    r = httpx.get(f"{url}/topics/{topic}/partitions/0/records", params={"offset": end, "timeout": 0},
                  headers={"Accept": BINARY}, timeout=30)
    return int(r.headers["X-Lakelog-Log-Start-Offset"])


def test_aborted_transactions_below_the_local_log_start_come_from_the_remote_txnindex(tmp_path):
    node = start_node(tmp_path, kafka=True, **SMALL, **{
        "remote.storage.url": (tmp_path / "remote").as_uri(), "remote.log.manager.task.interval.ms": "100",
        "remote.segment.delete.delay.ms": "0", "remote.log.metadata.max.age.ms": "0"})
    try:
        topic = "tiered"
        _create(node.bootstrap, topic, **{"remote.storage.enable": "true", "segment.bytes": "1024",
                                          "local.retention.bytes": "1", "retention.ms": "-1"})
        p = _txn_producer(node.bootstrap)
        expected = []
        for i in range(12):
            values = [f"t{i}-{j}-" + "x" * 100 for j in range(3)]
            _transaction(p, topic, values, commit=i % 3 != 1)
            if i % 3 != 1:
                expected += values
        wait_for(lambda: _local_log_start(node.url, topic) > 20, WAIT_S, "local segments deleted after upload")
        objects = [q.name for q in (tmp_path / "remote" / f"{topic}-0").iterdir()]
        assert any(name.endswith(".txnindex") for name in objects)
        assert _kafka_values(node.bootstrap, topic, "read_committed", len(expected)) == expected
        values, _ = _http_values(node.url, topic, "read_committed")
        assert values == expected[:len(values)] and values  # one fetch's worth, from the remote tier
        assert not [v for v in values if v.startswith(("t1-", "t4-", "t7-", "t10-"))]
    finally:
        try:
            node.stop()
        finally:
            node.kill()


def test_followers_keep_their_own_txnindex_and_a_new_leader_answers_read_committed(tmp_path):
    from tests.support.nodes import Cluster

    cluster = Cluster(tmp_path, size=3, kafka=True, overrides={
        **SMALL, "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3"}).start()
    try:
        topic = "replicated"
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for f in admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})]).values():
            try:
                f.result(WAIT_S)
            except KafkaException as e:  # the admin client retried a create that had succeeded
                assert e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, e
        p = _txn_producer(cluster.bootstrap)
        _transaction(p, topic, ["c1", "c2"], commit=True)
        _transaction(p, topic, ["a1", "a2"], commit=False)
        _transaction(p, topic, ["c3"], commit=True)
        leader = admin.list_topics(topic, timeout=WAIT_S).topics[topic].partitions[0].leader
        # EndTxn returns once the commit is decided; the markers land just after.
        # c1 c2 COMMIT a1 a2 ABORT c3 COMMIT
        want = {"beginning_offset": 0, "end_offset": 8, "last_stable_offset": 8}
        wait_for(lambda: _offsets(cluster.node(leader).url, topic) == want, WAIT_S, "the last marker")

        def replicated() -> bool:  # every replica wrote the same .txnindex from the markers it fetched
            files = [n.data_dir / f"{topic}-0" / f"{0:020d}.txnindex" for n in cluster.nodes]
            return all(f.exists() for f in files) and len({f.read_bytes() for f in files}) == 1

        wait_for(replicated, WAIT_S, "the .txnindex on every replica")
        cluster.node(leader).kill()
        live = ",".join(n.bootstrap for n in cluster.live())

        def new_leader() -> int | None:
            md = AdminClient({"bootstrap.servers": live}).list_topics(topic, timeout=10)
            got = md.topics[topic].partitions[0].leader
            return got if got not in (-1, leader) else None

        successor = cluster.node(int(wait_for(new_leader, WAIT_S, "a new leader")))
        wait_for(lambda: _offsets(successor.url, topic)["last_stable_offset"] == 8, WAIT_S, "the new leader's LSO")
        assert _http_values(successor.url, topic, "read_committed")[0] == ["c1", "c2", "c3"]
        assert _kafka_values(live, topic, "read_committed", 3) == ["c1", "c2", "c3"]
    finally:
        cluster.stop()
