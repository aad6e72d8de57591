"""Apache Kafka's own transactional client against 3 nodes: its `TransactionalMessageCopier` (the
tool Kafka's system tests use) copies a partition transactionally, with random aborts, committing
its consumer offsets in each transaction, while the transaction coordinator's node is killed and a
leader of the output topic is paused (seeded choices, bounded waits). A read_committed reader then
finds every input record in the output exactly once, and no aborted one. Throughout the faults the
last stable offset of each output partition, sampled from every live node's offsets route (which
answers the partition leader's), never goes backwards (KIP-207: a new leader answers 503 / Kafka's
OFFSET_NOT_AVAILABLE until its HW reaches its leader epoch's start). Kafka's jars come from
infra/kafka/pom.xml into .jars/kafka (`make kafka`)."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
import uuid
from pathlib import Path

import httpx
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.faults import wait_for
from tests.support.kafka_wire import transaction_coordinator
from tests.support.nodes import Cluster

ROOT = Path(__file__).resolve().parents[2]
JARS = ROOT / ".jars" / "kafka"
WAIT_S = 300
RECORDS = 600
SEED = 29


def _copier(bootstrap: str, log: Path) -> subprocess.Popen:
    cmd = ["java", "-Xmx256m", "-cp", f"{JARS}/*", "org.apache.kafka.tools.TransactionalMessageCopier",
           "--input-topic", "copy-in", "--input-partition", "0", "--output-topic", "copy-out",
           "--broker-list", bootstrap, "--max-messages", str(RECORDS), "--consumer-group", "copier",
           "--transaction-size", "50", "--transaction-timeout", "30000", "--transactional-id", "copier-1",
           "--enable-random-aborts", "--use-group-metadata"]
    return subprocess.Popen(cmd, stdout=log.open("a"), stderr=subprocess.STDOUT)


def _progress(log: Path) -> list[dict]:
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


class LsoSampler:
    """Samples each output partition's last stable offset in a thread until `stop()`; what it saw
    per partition, in order. A node that is down, paused or not yet able to answer (503) is skipped."""

    def __init__(self, cluster: Cluster, topic: str, partitions: int) -> None:
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.seen: dict[int, list[int]] = {p: [] for p in range(partitions)}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lso-sampler", daemon=True)

    def start(self) -> "LsoSampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        with httpx.Client(timeout=2.0) as http:
            while not self._stop.is_set():
                for node in [n for n in self.cluster.nodes if n.running]:
                    for p in range(self.partitions):
                        try:
                            r = http.get(f"{node.url}/topics/{self.topic}/partitions/{p}/offsets")
                        except httpx.HTTPError:
                            continue
                        if r.status_code == 200:
                            self.seen[p].append(int(r.json()["last_stable_offset"]))
                self._stop.wait(0.1)

    def stop(self) -> dict[int, list[int]]:
        self._stop.set()
        self._thread.join(30)
        return self.seen


def _diagnosis(cluster: Cluster, log: Path) -> str:
    """The copier's last lines and each node's last log lines (the HTTP client's left out)."""
    out = ["--- copier ---", log.read_text(errors="replace")[-3000:]]
    for n in cluster.nodes:
        tail = [line for line in n.read_log().splitlines() if '"logger": "httpx"' not in line][-40:]
        out += [f"--- node {n.node_id} ({'running' if n.running else 'stopped'}) ---", *tail]
    return "\n".join(out)


def _coordinator_of(cluster: Cluster, tid: str) -> int:
    return transaction_coordinator(cluster, tid, 60)


def test_kafkas_transactional_copier_under_coordinator_kill_and_leader_pause(tmp_path):
    assert (JARS / "kafka-tools-4.1.0.jar").exists() or any(JARS.glob("kafka-tools-*.jar")), \
        f"Kafka's tools are not in {JARS}: run `make kafka`"
    rng = random.Random(SEED)
    print(f"seed {SEED}")
    cluster = Cluster(tmp_path, size=3, kafka=True, overrides={
        "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3",
        "transaction.state.log.num.partitions": "3", "offsets.topic.replication.factor": "3",
        "transaction.state.log.replication.factor": "3"}).start()
    copier: subprocess.Popen | None = None
    sampler: LsoSampler | None = None
    try:
        bs = cluster.bootstrap
        admin = AdminClient({"bootstrap.servers": bs})
        for f in admin.create_topics([NewTopic("copy-in", 1, 3), NewTopic("copy-out", 2, 3)]).values():
            f.result(60)
        p = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
        for i in range(RECORDS):
            p.produce("copy-in", value=str(i).encode(), partition=0)
        assert p.flush(60) == 0

        log = tmp_path / "copier.log"
        sampler = LsoSampler(cluster, "copy-out", 2).start()
        copier = _copier(bs, log)
        wait_for(lambda: any(d.get("consumed", 0) >= 100 for d in _progress(log)) or copier.poll() is not None,
                 WAIT_S, "the copier's first transactions")
        victim = _coordinator_of(cluster, "copier-1")
        cluster.node(victim).kill()
        # Pause the leader of an output partition on another node for a while.
        leaders = {p.id: p.leader for p in admin.list_topics(timeout=60).topics["copy-out"].partitions.values()}
        paused = rng.choice([n for n in leaders.values() if n != victim] or [n.node_id for n in cluster.live()])
        cluster.node(paused).pause()
        threading.Timer(rng.uniform(1.0, 3.0), cluster.node(paused).resume).start()

        # The copier survives both, or exits and is started again (it resumes from its committed
        # offsets, as Kafka's system tests restart it).
        runs = 1
        while True:
            try:
                code = copier.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"the copier made no end within {WAIT_S}s (run {runs}):\n"
                                     + _diagnosis(cluster, log)) from None
            done = any(d.get("remaining") == 0 for d in _progress(log))
            if code == 0 and done:
                break
            assert runs < 4, f"the copier exited {code} {runs} times:\n{log.read_text()[-3000:]}"
            runs += 1
            copier = _copier(",".join(n.bootstrap for n in cluster.live()), log)

        lso = sampler.stop()
        backwards = {p: [(a, b) for a, b in zip(xs, xs[1:]) if b < a] for p, xs in lso.items()}
        assert all(len(xs) > 10 for xs in lso.values()), {p: len(xs) for p, xs in lso.items()}
        assert backwards == {0: [], 1: []}, backwards  # the LSO never goes backwards
        live = ",".join(n.bootstrap for n in cluster.live())
        reader = Consumer({"bootstrap.servers": live, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                           "isolation.level": "read_committed", "enable.auto.commit": False})
        try:
            reader.assign([TopicPartition("copy-out", p, 0) for p in range(2)])
            got: list[bytes] = []

            def all_read() -> bool:
                m = reader.poll(1.0)
                if m is not None and not m.error():
                    got.append(m.value())
                return len(got) >= RECORDS

            wait_for(all_read, WAIT_S, "the copied records", interval_s=0)
            deadline = time.monotonic() + 5  # a bounded look past the end: nothing more may come
            while time.monotonic() < deadline:
                m = reader.poll(0.5)
                if m is not None and not m.error():
                    got.append(m.value())
        finally:
            reader.close()
        values = sorted(int(v) for v in got)
        duplicates = sorted({v for v in values if values.count(v) > 1})
        missing = sorted(set(range(RECORDS)) - set(values))
        assert (duplicates, missing, len(values)) == ([], [], RECORDS), log.read_text()[-3000:]  # each input once
    finally:
        if sampler is not None:
            sampler.stop()
        if copier is not None and copier.poll() is None:
            copier.kill()
            copier.wait(10)
        for n in cluster.nodes:
            if n.running:
                n.resume()
        cluster.stop()
