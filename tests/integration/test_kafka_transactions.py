"""Kafka transactions against real node processes on loopback, driven by confluent-kafka's
transactional producer (librdkafka) and read_committed consumers: commits visible, aborts never, a
fenced zombie refused, consume-transform-produce with send_offsets_to_transaction, the coordinator's
APIs on the wire, and a coordinator killed between a transaction's begin and its commit."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.errors import ErrorCode
from kio.schema.list_transactions.v1.request import ListTransactionsRequest

from tests.support.faults import wait_for
from tests.support.kafka_wire import WireClient, transaction_coordinator
from tests.support.nodes import Cluster, running_node, start_node

WAIT_S = 120
#: librdkafka's codes of a fenced producer: its own fatal _FENCED, or the broker's two.
FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
SMALL = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
         "transaction.state.log.num.partitions": "3"}


@pytest.fixture
def knode(tmp_path):
    with running_node(tmp_path, kafka=True, **SMALL) as n:
        yield n


def _create(bootstrap: str, *topics: tuple[str, int, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, p, rf) for n, p, rf in topics]).values():
        f.result(WAIT_S)


def _txn_producer(bootstrap: str, tid: str, **conf) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 60_000,
                  "linger.ms": 5, **conf})
    p.init_transactions(WAIT_S)
    return p


def _read_until_sentinels(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value of `topic` up to the `end-<p>` sentinel of each partition (records of one
    partition arrive in order, so whatever could precede a sentinel has been delivered by then)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                  "isolation.level": isolation, "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: list[bytes] = []
        seen: set[bytes] = set()
        wanted = {f"end-{p}".encode() for p in range(partitions)}

        def more() -> bool:
            m = c.poll(1.0)
            if m is not None and not m.error():
                values.append(m.value())
                if m.value() in wanted:
                    seen.add(m.value())
            return seen == wanted

        wait_for(more, WAIT_S, f"the sentinels of {topic}", interval_s=0)
        return [v for v in values if v not in wanted]
    finally:
        c.close()


def _sentinels(p: Producer, topic: str, partitions: int) -> None:
    for part in range(partitions):
        p.produce(topic, value=f"end-{part}".encode(), partition=part)


def test_commit_abort_fencing_and_consume_transform_produce(knode):
    bs = knode.bootstrap
    _create(bs, ("tx-out", 2, 1), ("tx-in", 1, 1), ("tx-ctp", 1, 1))

    p = _txn_producer(bs, "t1")
    p.begin_transaction()
    for i in range(10):
        p.produce("tx-out", value=f"c{i}".encode(), partition=i % 2)
    p.commit_transaction(WAIT_S)
    p.begin_transaction()
    for i in range(5):
        p.produce("tx-out", value=f"a{i}".encode(), partition=i % 2)
    p.flush(WAIT_S)  # in the log, then aborted
    p.abort_transaction(WAIT_S)
    p.begin_transaction()
    for i in range(4):
        p.produce("tx-out", value=f"d{i}".encode(), partition=i % 2)
    _sentinels(p, "tx-out", 2)
    p.commit_transaction(WAIT_S)

    committed = sorted([f"c{i}".encode() for i in range(10)] + [f"d{i}".encode() for i in range(4)])
    assert sorted(_read_until_sentinels(bs, "tx-out", 2, "read_committed")) == committed
    # The aborted records are in the log: a read_uncommitted reader gets them.
    raw = _read_until_sentinels(bs, "tx-out", 2, "read_uncommitted")
    assert sorted(raw) == sorted(committed + [f"a{i}".encode() for i in range(5)])

    # The coordinator's view over the wire.
    with WireClient("127.0.0.1", knode.kafka_port) as w:
        _, listed = w.request(ListTransactionsRequest(state_filters=(), producer_id_filters=(), duration_filter=-1))
        states = {t.transactional_id: t.transaction_state for t in listed.transaction_states}
        assert states["t1"] == "CompleteCommit"

    # A zombie: a second instance with the same transactional id fences the first.
    zombie = _txn_producer(bs, "z")
    zombie.begin_transaction()
    zombie.produce("tx-out", value=b"zombie", partition=0)
    zombie.flush(WAIT_S)
    with WireClient("127.0.0.1", knode.kafka_port) as w:
        # (Kafka answers start time -1 for an id without a transaction, which this test's codec cannot read.)
        _, described = w.request(DescribeTransactionsRequest(transactional_ids=("z",)))
        (z,) = described.transaction_states
        assert (z.error_code, z.transaction_state) == (ErrorCode.none, "Ongoing")
        assert [(t.topic, t.partitions) for t in z.topics] == [("tx-out", (0,))]
        _, producers = w.request(DescribeProducersRequest(topics=(TopicRequest(name="tx-out", partition_indexes=(0,)),)))
        (part,) = producers.topics[0].partitions
        assert part.error_code == ErrorCode.none
        active = {s.producer_id: s.current_txn_start_offset for s in part.active_producers}
        assert active[z.producer_id] >= 0 and len(active) == 2  # t1's (decided) and z's (open)
    fresh = _txn_producer(bs, "z")  # aborts the zombie's open transaction
    with pytest.raises(KafkaException) as refused:
        zombie.commit_transaction(WAIT_S)
    assert refused.value.args[0].code() in FENCED or refused.value.args[0].fatal()
    fresh.begin_transaction()
    fresh.produce("tx-out", value=b"fresh", partition=0)
    _sentinels(fresh, "tx-out", 2)
    fresh.commit_transaction(WAIT_S)
    after = _read_until_sentinels(bs, "tx-out", 2, "read_committed")
    assert b"fresh" in after and b"zombie" not in after

    # Consume-transform-produce: the input offsets commit with the output, once.
    plain = Producer({"bootstrap.servers": bs})
    for i in range(20):
        plain.produce("tx-in", value=f"in-{i}".encode())
    assert plain.flush(WAIT_S) == 0
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "ctp", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["tx-in"])
        ctp = _txn_producer(bs, "ctp-1")
        ctp.begin_transaction()
        got = []

        def twenty() -> bool:
            m = consumer.poll(1.0)
            if m is not None and not m.error():
                got.append(m)
            return len(got) >= 20

        wait_for(twenty, WAIT_S, "the input records", interval_s=0)
        for m in got:
            ctp.produce("tx-ctp", value=m.value().upper())
        ctp.produce("tx-ctp", value=b"end-0")
        ctp.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(),
                                        WAIT_S)
        ctp.commit_transaction(WAIT_S)
        (tp,) = consumer.committed([TopicPartition("tx-in", 0)], timeout=WAIT_S)
        assert tp.offset == 20
        # Offsets sent in an aborted transaction never become the group's.
        ctp.begin_transaction()
        ctp.send_offsets_to_transaction([TopicPartition("tx-in", 0, 5)], consumer.consumer_group_metadata(), WAIT_S)
        ctp.abort_transaction(WAIT_S)
        (tp,) = consumer.committed([TopicPartition("tx-in", 0)], timeout=WAIT_S)
        assert tp.offset == 20
    finally:
        consumer.close()
    out = _read_until_sentinels(bs, "tx-ctp", 1, "read_committed")
    assert sorted(out) == sorted(f"IN-{i}".encode() for i in range(20))
    assert "Traceback" not in knode.read_log()


def _coordinator_of(cluster: Cluster, tid: str) -> int:
    return transaction_coordinator(cluster, tid, WAIT_S)


def test_the_coordinator_dies_between_begin_and_commit(tmp_path):
    cluster = Cluster(tmp_path, size=3, kafka=True, overrides={
        **SMALL, "offsets.topic.replication.factor": "3", "transaction.state.log.replication.factor": "3"}).start()
    try:
        bs = cluster.bootstrap
        _create(bs, ("fo", 3, 3))
        p = _txn_producer(bs, "fo-1", **{"request.timeout.ms": 10_000})
        victim = _coordinator_of(cluster, "fo-1")
        p.begin_transaction()
        values = [f"v{i}".encode() for i in range(30)]
        for i, v in enumerate(values):
            p.produce("fo", value=v, partition=i % 3)
        p.flush(WAIT_S)
        cluster.node(victim).kill()
        try:
            p.commit_transaction(WAIT_S)
        except KafkaException as e:  # the producer's retry: abort if it must, then the whole transaction again
            err = e.args[0]
            assert not err.fatal(), err
            if err.txn_requires_abort():
                p.abort_transaction(WAIT_S)
            p.begin_transaction()
            for i, v in enumerate(values):
                p.produce("fo", value=v, partition=i % 3)
            p.commit_transaction(WAIT_S)
        assert _coordinator_of(cluster, "fo-1") != victim
        p.begin_transaction()
        _sentinels(p, "fo", 3)
        p.commit_transaction(WAIT_S)
        live = ",".join(n.bootstrap for n in cluster.live())
        got = _read_until_sentinels(live, "fo", 3, "read_committed")
        assert sorted(got) == sorted(values)  # each record once: no duplicate, none lost
    finally:
        cluster.stop()


def _describe(port: int, tid: str):
    with WireClient("127.0.0.1", port) as w:
        _, res = w.request(DescribeTransactionsRequest(transactional_ids=(tid,)))
    (state,) = res.transaction_states
    return state


def _listed(port: int) -> dict[str, str]:
    with WireClient("127.0.0.1", port) as w:
        _, res = w.request(ListTransactionsRequest(state_filters=(), producer_id_filters=(), duration_filter=-1))
    return {t.transactional_id: t.transaction_state for t in res.transaction_states}


def test_state_survives_a_restart_and_a_timed_out_transaction_is_aborted(tmp_path):
    node = start_node(tmp_path, kafka=True, **SMALL, **{
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300"})
    try:
        bs = node.bootstrap
        _create(bs, ("rs", 1, 1))
        p = _txn_producer(bs, "r1")
        p.begin_transaction()
        p.produce("rs", value=b"before", partition=0)
        p.commit_transaction(WAIT_S)
        p.begin_transaction()
        p.produce("rs", value=b"open", partition=0)
        p.flush(WAIT_S)
        before = _describe(node.kafka_port, "r1")
        node.restart()
        # The coordinator reads __transaction_state back: the open transaction, its epoch, its partition.

        def reloaded():
            state = _describe(node.kafka_port, "r1")
            return state if state.error_code == ErrorCode.none else None

        after = wait_for(reloaded, WAIT_S, "the reloaded transaction")
        assert (after.transaction_state, after.producer_id, after.producer_epoch) == (
            "Ongoing", before.producer_id, before.producer_epoch)
        assert [(t.topic, t.partitions) for t in after.topics] == [("rs", (0,))]
        p.produce("rs", value=b"after", partition=0)
        _sentinels(p, "rs", 1)
        p.commit_transaction(WAIT_S)
        assert sorted(_read_until_sentinels(bs, "rs", 1, "read_committed")) == [b"after", b"before", b"open"]

        # A transaction left open past transaction.timeout.ms is aborted by the coordinator, which
        # fences its producer; read_committed readers move past it.
        slow = _txn_producer(bs, "slow", **{"transaction.timeout.ms": 2000})
        slow.begin_transaction()
        slow.produce("rs", value=b"never", partition=0)
        slow.flush(WAIT_S)
        wait_for(lambda: _listed(node.kafka_port).get("slow") == "CompleteAbort", WAIT_S,
                 "the coordinator's abort of the timed-out transaction")
        with pytest.raises(KafkaException):
            slow.commit_transaction(WAIT_S)
        p.begin_transaction()
        _sentinels(p, "rs", 1)
        p.commit_transaction(WAIT_S)
        assert b"never" not in _read_until_sentinels(bs, "rs", 1, "read_committed")
        assert "Traceback" not in node.read_log()
    finally:
        try:
            node.stop()
        finally:
            node.kill()
