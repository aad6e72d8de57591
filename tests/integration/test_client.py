"""The Python client (`lakelog.client.Producer`, `Consumer`) against a real node process."""

from __future__ import annotations

import socket

import httpx
import pytest
from kafka.partitioner.default import murmur2

from lakelog.client import Consumer, ProduceError, Producer, RecordMetadata
from lakelog.logstore.record_batch import iter_batches
from tests.support.faults import cluster_id
from tests.support.nodes import NodeProcess, start_node


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> NodeProcess:
    n = start_node(tmp_path_factory.mktemp("client"), **{
        "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "500",
        "group.coordinator.tick.ms": "50", "offsets.topic.num.partitions": "4"})
    try:
        yield n
    finally:
        try:
            n.stop()
        finally:
            n.kill()


def _topic(node: NodeProcess, name: str, partitions: int) -> None:
    r = httpx.post(f"{node.url}/v3/clusters/{cluster_id(node.url)}/topics", timeout=30,
                   json={"topic_name": name, "partitions_count": partitions})
    assert r.status_code == 201, r.text


def _batches(node: NodeProcess, topic: str, partition: int) -> list:
    r = httpx.get(f"{node.url}/topics/{topic}/partitions/{partition}/records", params={"offset": 0, "timeout": 0},
                  headers={"Accept": "application/vnd.kafka.recordbatch"}, timeout=30)
    assert r.status_code == 200
    return [b for _, b in iter_batches(r.content)]


def _values(node: NodeProcess, topic: str, partition: int) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for b in _batches(node, topic, partition) for r in b.records()]


def test_producer_batches_per_partition_with_kafka_partitioning_and_futures(node):
    _topic(node, "pclicks", 4)
    delivered: list = []
    with Producer({"bootstrap.servers": node.url, "linger.ms": 50, "batch.size": 4096,
                   "compression.type": "lz4"}) as p:
        futures = [p.produce("pclicks", value=f"v{i}".encode(), key=f"user-{i % 13}".encode(),
                             headers=[("n", str(i).encode())], on_delivery=lambda e, md: delivered.append((e, md)))
                   for i in range(300)]
        assert p.flush(30) == 0
        mds = [f.result(5) for f in futures]
    assert all(isinstance(md, RecordMetadata) for md in mds) and len(delivered) == 300
    assert all(f.done() and f.exception() is None for f in futures)
    later: list = []
    futures[0].add_done_callback(later.append)  # already done: runs at once
    assert later == [futures[0]]
    assert all(e is None for e, _ in delivered)
    for i, md in enumerate(mds):
        assert md.partition == (murmur2(f"user-{i % 13}".encode()) & 0x7FFFFFFF) % 4
    for part in range(4):
        stored = _values(node, "pclicks", part)
        mine = [(md.offset, f"user-{i % 13}".encode(), f"v{i}".encode()) for i, md in enumerate(mds) if md.partition == part]
        assert sorted(stored) == sorted(mine)
        # Batched, compressed with lz4, carrying a producer id (idempotence is on by default).
        batches = _batches(node, "pclicks", part)
        assert len(batches) < len(stored) and all(int(b.compression) == 3 and b.producer_id >= 0 for b in batches)
        seqs = [(b.base_sequence, b.last_offset_delta + 1) for b in batches]
        assert all(s == prev_s + prev_n for (prev_s, prev_n), (s, _) in zip(seqs, seqs[1:]))  # consecutive


def test_keyless_records_stick_to_a_partition_per_batch_and_acks_zero(node):
    _topic(node, "sticky", 3)
    with Producer({"bootstrap.servers": node.url, "linger.ms": 1000, "batch.size": 1 << 20, "acks": "0",
                   "enable.idempotence": False}) as p:
        futures = [p.produce("sticky", value=b"x" * 10) for _ in range(50)]
        p.flush(30)
    mds = [f.result(5) for f in futures]
    assert len({md.partition for md in mds}) == 1  # one batch: one partition
    assert all(md.offset == -1 for md in mds)  # acks=0 answers no offsets
    assert sum(len(_values(node, "sticky", q)) for q in range(3)) == 50


def test_retries_go_to_another_node_with_the_same_sequence_and_write_once(node):
    _topic(node, "retried", 1)
    with socket.socket() as s:  # a port nothing listens on: the first node of bootstrap.servers
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    with Producer({"bootstrap.servers": f"{dead},{node.url}", "linger.ms": 0, "retry.backoff.ms": 10}) as p:
        p._node = 0
        assert p.partitions_for("retried") == 1  # asked past the dead node; requests still start at it
        assert p._node == 0
        f = p.produce("retried", value=b"once", partition=0)
        assert f.result(30).offset == 0
        # A retry of a batch that was in fact written (its answer lost) is answered with the
        # original offset and not written again: send the same bytes once more.
        f2 = p.produce("retried", value=b"twice?", partition=0)
        md = f2.result(30)
    stored = _values(node, "retried", 0)
    assert stored == [(0, None, b"once"), (md.offset, None, b"twice?")]
    # Replay the stored second batch (same producer id, epoch, sequence) as a lost-answer retry would.
    raw = httpx.get(f"{node.url}/topics/retried/partitions/0/records", params={"offset": md.offset},
                    headers={"Accept": "application/vnd.kafka.recordbatch"}, timeout=30).content
    r = httpx.post(f"{node.url}/topics/retried/partitions/0", content=raw, timeout=30,
                   headers={"Content-Type": "application/vnd.kafka.recordbatch"})
    assert r.status_code == 200 and r.json()["offsets"][0]["offset"] == md.offset
    assert len(_values(node, "retried", 0)) == 2


def test_producer_errors(node):
    with Producer({"bootstrap.servers": node.url}) as p:
        with pytest.raises(ProduceError) as e:
            p.produce("no-such-topic", value=b"x")
        assert e.value.status == 404 and "not found" in str(e.value)
        _topic(node, "small", 1)
        with pytest.raises(ProduceError) as e:
            p.produce("small", value=b"x", partition=3)
        assert e.value.error_code == 40402
        with pytest.raises(ProduceError):
            p.produce("small", value=b"x" * (2 << 20))  # over max.request.size
    with pytest.raises(ValueError):
        Producer({"bootstrap.servers": node.url, "compression.type": "brotli"})
    with pytest.raises(ValueError):
        Producer({"no.such.config": 1})


def test_consumer_joins_polls_commits_seeks_and_a_new_member_resumes(node):
    _topic(node, "ctopic", 2)
    with Producer({"bootstrap.servers": node.url, "linger.ms": 0}) as p:
        for i in range(20):
            p.produce("ctopic", value=f"m{i}".encode(), partition=i % 2)
        p.flush(30)
    cfg = {"bootstrap.servers": node.url, "group.id": "readers", "auto.offset.reset": "earliest",
           "enable.auto.commit": False, "session.timeout.ms": 2000, "heartbeat.interval.ms": 200}
    c = Consumer(cfg)
    c.subscribe(["ctopic"])
    got: list = []
    for _ in range(100):
        got.extend(c.poll(0.3))
        if len(got) >= 20:
            break
    assert sorted(m.value for m in got) == sorted(f"m{i}".encode() for i in range(20))
    assert c.assignment() == [("ctopic", 0), ("ctopic", 1)]
    # Commit the first 3 of partition 0 (Kafka's next offset 3) and everything of partition 1.
    c.commit(offsets={("ctopic", 0): 3})
    c.commit(messages=[m for m in got if m.partition == 1])
    assert c.committed([("ctopic", 0), ("ctopic", 1)]) == {("ctopic", 0): 3, ("ctopic", 1): 10}
    c.seek("ctopic", 0, 8)
    again: list = []
    for _ in range(50):
        again.extend(c.poll(0.3))
        if len(again) >= 2:
            break
    assert [m.offset for m in again] == [8, 9]
    c.close()
    c2 = Consumer(cfg)
    c2.subscribe(["ctopic"])
    resumed: list = []
    for _ in range(100):
        resumed.extend(c2.poll(0.3))
        if len(resumed) >= 7:
            break
    assert sorted((m.partition, m.offset) for m in resumed) == [(0, o) for o in range(3, 10)]
    c2.close()


def _poll_until(consumers: list, done, rounds: int = 200) -> dict:
    got: dict = {id(c): [] for c in consumers}
    for _ in range(rounds):
        for c in consumers:
            got[id(c)].extend(c.poll(0.1))
        if done(got):
            return got
    raise AssertionError(f"not done after {rounds} rounds: {[len(v) for v in got.values()]}")


def test_consumer_reads_the_binary_path_and_the_group_splits_commits_and_hands_over(node):
    _topic(node, "gsplit", 4)
    with Producer({"bootstrap.servers": node.url, "linger.ms": 20, "compression.type": "zstd"}) as p:
        for i in range(200):
            p.produce("gsplit", value=None if i == 7 else f"v{i}".encode(), key=None if i % 5 == 0 else b"k%d" % i,
                      partition=i % 4, headers=[("n", str(i).encode()), ("nil", None)])
        p.flush(30)
    paths: list = []
    hooks = {"event_hooks": {"request": [lambda req: paths.append((req.method, req.url.path,
                                                                   req.headers.get("accept")))]}}
    cfg = {"bootstrap.servers": node.url, "group.id": "splitters", "auto.offset.reset": "earliest",
           "enable.auto.commit": False, "session.timeout.ms": 2000, "heartbeat.interval.ms": 100}
    c1 = Consumer(cfg, http_options=hooks)
    c1.subscribe(["gsplit"])
    got = _poll_until([c1], lambda g: sum(map(len, g.values())) >= 200)[id(c1)]
    assert sorted((m.partition, m.offset) for m in got) == sorted((i % 4, i // 4) for i in range(200))  # once each
    by_n = {int(dict(m.headers)["n"]): m for m in got}
    assert by_n[7].value is None and by_n[5].key is None and by_n[6].key == b"k6" and by_n[6].value == b"v6"
    assert by_n[6].headers == [("n", b"6"), ("nil", None)] and by_n[6].timestamp > 0
    # Order within a partition is the log's.
    for part in range(4):
        offs = [m.offset for m in got if m.partition == part]
        assert offs == sorted(offs)
    # Records came over the binary fetch path, never through the REST instance's records endpoint.
    assert not [p for p in paths if p[1].startswith("/consumers/") and p[1].endswith("/records")]
    fetches = [p for p in paths if p[1].startswith("/topics/gsplit/partitions/") and p[1].endswith("/records")]
    assert fetches and all(a == "application/vnd.kafka.recordbatch" for _, _, a in fetches)
    assert c1.commit() and c1.committed() == {("gsplit", q): 50 for q in range(4)}

    c2 = Consumer(cfg)
    c2.subscribe(["gsplit"])

    def split(_):
        a, b = set(c1.assignment()), set(c2.assignment())
        return a and b and not a & b and len(a | b) == 4
    _poll_until([c1, c2], split)
    mine1, mine2 = set(c1.assignment()), set(c2.assignment())
    with Producer({"bootstrap.servers": node.url, "linger.ms": 0}) as p:
        for i in range(40):
            p.produce("gsplit", value=b"late%d" % i, partition=i % 4)
        p.flush(30)
    g = _poll_until([c1, c2], lambda g: sum(map(len, g.values())) >= 40)
    assert {(m.topic, m.partition) for m in g[id(c1)]} <= mine1 and {(m.topic, m.partition) for m in g[id(c2)]} <= mine2
    assert sorted((m.partition, m.offset) for v in g.values() for m in v) == sorted((i % 4, 50 + i // 4) for i in range(40))
    c1.commit()
    c2.close()  # without committing: its partitions' new records go to c1 again (at least once)
    handed = _poll_until([c1], lambda g: len(g[id(c1)]) >= 10 * len(mine2))[id(c1)]
    assert sorted((m.partition, m.offset) for m in handed) == sorted((q, o) for _, q in mine2 for o in range(50, 60))
    assert set(c1.assignment()) == {("gsplit", q) for q in range(4)}
    c1.close()


def test_consumer_auto_commits_resets_out_of_range_and_refuses_unassigned_seeks(node):
    from lakelog.client import ConsumeError

    _topic(node, "auto", 1)
    with Producer({"bootstrap.servers": node.url, "linger.ms": 0}) as p:
        for i in range(10):
            p.produce("auto", value=b"a%d" % i, partition=0)
        p.flush(30)
    cfg = {"bootstrap.servers": node.url, "group.id": "autos", "auto.offset.reset": "earliest",
           "enable.auto.commit": True, "auto.commit.interval.ms": 60000, "session.timeout.ms": 2000,
           "heartbeat.interval.ms": 100, "max.poll.records": 4}
    with Consumer(cfg) as c:
        c.subscribe(["auto"])
        first = _poll_until([c], lambda g: len(g[id(c)]) >= 1)[id(c)]
        assert [m.offset for m in first] == [0, 1, 2, 3]  # max.poll.records; the rest stays buffered
        assert [m.offset for m in c.poll(1)] == [4, 5, 6, 7]
        assert c.position("auto", 0) == 8
        with pytest.raises(ConsumeError) as e:
            c.seek("auto", 5, 0)
        assert e.value.error_code == 40903
        c.seek("auto", 0, 1000)  # past the end: the fetch answers out of range, reset to earliest
        again = _poll_until([c], lambda g: len(g[id(c)]) >= 1)[id(c)]
        assert again[0].offset == 0
        c.seek("auto", 0, 6)
        assert [m.offset for m in c.poll(1)] == [6, 7, 8, 9]
    # close() committed the positions (auto-commit): a new member starts after the last record.
    with Consumer({**cfg, "group.id": "autos"}) as c:
        c.subscribe(["auto"])
        _poll_until([c], lambda g: c.assignment() == [("auto", 0)])
        assert c.committed() == {("auto", 0): 10} and c.position("auto", 0) == 10
