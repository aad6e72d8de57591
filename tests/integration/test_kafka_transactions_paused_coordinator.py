"""A transaction coordinator paused (SIGSTOP) in the middle of a transaction, on 3 real nodes.

confluent-kafka's transactional producer copies an input partition into a 3-partition output,
consume-transform-produce with the consumer's offsets sent in each transaction. At a seeded
transaction the node that coordinates the transactional id is paused — after the transaction's
records were sent and before its commit, or (the second case) just after the commit was sent —
so its `__transaction_state` partition moves to another node; it is resumed a seeded while later,
while the copy goes on. The producer either commits each transaction exactly once, or is told to
abort (or is fenced) and redoes it from the committed offsets. Then: a read_committed reader sees
each input exactly once and no aborted record; and in every replica's log of the output, the
coordinator epochs of each producer's markers never go down — the resumed, deposed coordinator wrote
no stale marker (a partition refuses a marker of a lower coordinator epoch).
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from lakelog.logstore.control_record import batch_marker
from lakelog.logstore.log import PartitionLog
from tests.support.faults import wait_for
from tests.support.kafka_wire import transaction_coordinator
from tests.support.nodes import Cluster

SEED = 2907
WAIT_S = 120
INPUTS = 120
PER_TXN = 8
TID = "paused-1"
GROUP = "paused-copier"
#: At most this many times a transaction is redone (aborted, or the producer fenced) before the test gives up.
MAX_REDOS = 10


def _coordinator_of(cluster: Cluster, tid: str) -> int:
    return transaction_coordinator(cluster, tid, WAIT_S)


class Copier:
    """Consume-transform-produce with a transactional producer; redoes a transaction from the
    committed offsets when it must abort or is fenced (a new producer, as an application would)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
        self.consumer.assign([TopicPartition("pc-in", 0, 0)])
        self.producer = self._new_producer()
        self.committed = 0  # inputs committed (the group's offset)
        self.redos = 0

    def _new_producer(self) -> Producer:
        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": TID, "transaction.timeout.ms": 60_000,
                      "request.timeout.ms": 5_000, "linger.ms": 5})
        p.init_transactions(WAIT_S)
        return p

    def _take(self, n: int) -> list:
        got: list = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < n and time.monotonic() < deadline:
            m = self.consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m)
        assert len(got) == n, f"read {len(got)} of {n} inputs"
        return got

    def send(self) -> list:
        """Begin a transaction and send the next inputs' copies (not yet committed)."""
        msgs = self._take(min(PER_TXN, INPUTS - self.committed))
        self.producer.begin_transaction()
        for m in msgs:
            v = int(m.value())
            self.producer.produce("pc-out", value=f"out-{v}".encode(), partition=v % 3)
        self.producer.flush(WAIT_S)
        return msgs

    def commit(self, msgs: list) -> bool:
        """Send the offsets and commit; False (after aborting, or with a new producer) when it must be redone."""
        try:
            self.producer.send_offsets_to_transaction(
                [TopicPartition("pc-in", 0, msgs[-1].offset() + 1)], self.consumer.consumer_group_metadata(), WAIT_S)
            self._commit_retrying()
        except KafkaException as e:
            self._recover(e.args[0])
            return False
        self.committed += len(msgs)
        return True

    def _commit_retrying(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                self.producer.commit_transaction(WAIT_S)
                return
            except KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() > deadline:
                    raise

    def _recover(self, err) -> None:
        self.redos += 1
        assert self.redos <= MAX_REDOS, f"redone {self.redos} times; last: {err}"
        print(f"redo after {err} (fatal={err.fatal()}, abortable={err.txn_requires_abort()})")
        if err.fatal():  # fenced: a new producer takes the id over (aborting what was open)
            self.producer = self._new_producer()
        else:
            self.producer.abort_transaction(WAIT_S)
        self.consumer.seek(TopicPartition("pc-in", 0, self.committed))

    def step(self, before_commit=None) -> None:
        msgs = self.send()
        if before_commit is not None:
            before_commit()
        self.commit(msgs)

    def close(self) -> None:
        self.consumer.close()


def _marker_epochs_of_replicas(cluster: Cluster) -> dict[str, list[tuple[int, int, int]]]:
    """(offset, producer id, coordinator epoch) of every marker in each replica's log of pc-out."""
    out = {}
    for n in cluster.nodes:
        for p in range(3):
            d = n.data_dir / f"pc-out-{p}"
            if not d.is_dir():
                continue
            log = PartitionLog(d)
            try:
                out[f"node {n.node_id} pc-out-{p}"] = [
                    (b.base_offset, b.producer_id, m.coordinator_epoch)
                    for b in log.batches() if (m := batch_marker(b)) is not None]
            finally:
                log.close()
    return out


@pytest.mark.parametrize("during_commit", [False, True], ids=["before-commit", "during-commit"])
def test_a_paused_coordinator_moves_and_its_resumed_node_writes_no_stale_marker(tmp_path, during_commit):
    seed = int(os.environ.get("LAKELOG_FAULT_SEED") or SEED + during_commit)
    rng = random.Random(seed)
    pause_at = rng.randrange(3, INPUTS // PER_TXN - 6)
    paused_s = rng.uniform(8.0, 12.0)  # past broker.session.timeout.ms: the coordinator moves
    print(f"seed {seed}: pause at transaction {pause_at}, {'during' if during_commit else 'before'} its "
          f"commit, for {paused_s:.1f} s")
    cluster = Cluster(tmp_path, size=3, kafka=True, overrides={
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3", "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3",
        # Slower than FAST_CLUSTER: on a busy machine a 1.5 s session makes every node flap.
        "controller.quorum.election.timeout.ms": "2000", "broker.session.timeout.ms": "5000",
        "replica.lag.time.max.ms": "3000"}).start()
    copier: Copier | None = None
    timers: list[threading.Timer] = []
    try:
        bs = cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.create_topics([NewTopic("pc-in", 1, 3), NewTopic("pc-out", 3, 3)]).values():
            f.result(WAIT_S)
        p = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
        for i in range(INPUTS):
            p.produce("pc-in", value=str(i).encode(), partition=0)
        assert p.flush(WAIT_S) == 0
        copier = Copier(bs)
        victim = -1

        def pause() -> None:
            nonlocal victim
            victim = _coordinator_of(cluster, TID)
            node = cluster.node(victim)
            if during_commit:  # SIGSTOP lands while the commit is on its way
                t = threading.Timer(rng.uniform(0.0, 0.05), node.pause)
                t.start()
                timers.append(t)
            else:
                node.pause()
            t = threading.Timer(paused_s, node.resume)
            t.start()
            timers.append(t)

        txn = 0
        while copier.committed < INPUTS:
            copier.step(pause if txn == pause_at else None)
            txn += 1
        for t in timers:
            t.join(30)
        assert victim > 0 and _coordinator_of(cluster, TID) in {n.node_id for n in cluster.nodes}
        # One more transaction after the resume: the sentinels a reader stops at.
        copier.producer.begin_transaction()
        for part in range(3):
            copier.producer.produce("pc-out", value=f"end-{part}".encode(), partition=part)
        copier.producer.commit_transaction(WAIT_S)
        committed = copier.consumer.committed([TopicPartition("pc-in", 0)], WAIT_S)[0].offset
        assert committed == INPUTS

        reader = Consumer({"bootstrap.servers": bs, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                           "isolation.level": "read_committed", "enable.auto.commit": False})
        try:
            reader.assign([TopicPartition("pc-out", p, 0) for p in range(3)])
            got: list[bytes] = []
            ends: set[bytes] = set()

            def all_read() -> bool:
                m = reader.poll(1.0)
                if m is not None and not m.error():
                    if m.value().startswith(b"end-"):
                        ends.add(m.value())
                    else:
                        got.append(m.value())
                return len(ends) == 3

            wait_for(all_read, WAIT_S, "the sentinels of pc-out", interval_s=0)
        finally:
            reader.close()
        values = sorted(int(v[4:]) for v in got)
        duplicates = sorted({v for v in values if values.count(v) > 1})
        assert (duplicates, sorted(set(range(INPUTS)) - set(values)), len(values)) == ([], [], INPUTS)
    finally:
        for t in timers:
            t.cancel()
        if copier is not None:
            copier.close()
        cluster.stop()
    replicas = _marker_epochs_of_replicas(cluster)
    assert len(replicas) == 9 and all(replicas.values()), replicas
    stale = {}
    for replica, markers in replicas.items():
        last: dict[int, int] = {}
        for offset, pid, epoch in markers:
            if epoch < last.get(pid, -1):
                stale.setdefault(replica, []).append((offset, pid, epoch, last[pid]))
            last[pid] = max(epoch, last.get(pid, -1))
    assert stale == {}, stale  # no marker of a deposed coordinator after one of its successor
