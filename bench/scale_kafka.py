"""Apache Kafka 4.1 as the peer of bench/scale.py: three KRaft brokers, the same partitions, the same figures.

Used by `python bench/scale.py --peer kafka` (not run on its own). Kafka runs from `.jars/kafka`
(bench/peer_kafka.py's `KafkaCluster`: three JVMs, each broker and controller, a quorum of three, 1 GiB
heap each) on loopback, after the Lakelog cluster of the same size has stopped (one after the other,
never side by side). Same layout as the Lakelog side: topics of up to 100 partitions, replication
factor 3, `min.insync.replicas=2`, so every broker holds every partition.

Broker settings (`SETTINGS`), chosen to equal the Lakelog nodes' defaults that the figures depend on:
`broker.session.timeout.ms` 9000, `broker.heartbeat.interval.ms` 2000, `replica.lag.time.max.ms`
30000, `replica.fetch.wait.max.ms` 500, `controller.quorum.election.timeout.ms` 1000 (Kafka's defaults
too, written out so the comparison states them), `log.cleaner.enable=false` (as bench/scale.py sets for
Lakelog). `--tolerant` raises `broker.session.timeout.ms` and `controller.quorum.election.timeout.ms`
on both sides alike.

Figures, as bench/scale.py takes them for Lakelog:
* idle — each broker JVM's CPU seconds (/proc/PID/stat) over the same window, per minute, and RSS;
* produce — one record to each partition in turn with confluent-kafka (acks=all, linger.ms=0, one
  in flight: produce, then flush), p50 / p99 / max;
* failover — SIGKILL of one broker that is not the KRaft quorum's leader (Kafka's
  `MetadataQuorumCommand`); one record is queued at once to every partition (acks=all, delivery
  timeout of `FAILOVER_GIVE_UP_S`; librdkafka retries and follows the leader moves itself), and the
  time until the last one was acknowledged is the time until every partition was writable again.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Callable

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bench.peer_kafka import KafkaCluster, java, proc_cpu_s, resolve_jars

#: Broker settings the comparison states (module doc).
SETTINGS = {"broker.session.timeout.ms": "9000", "broker.heartbeat.interval.ms": "2000",
            "replica.lag.time.max.ms": "30000", "replica.fetch.wait.max.ms": "500",
            "controller.quorum.election.timeout.ms": "1000", "log.cleaner.enable": "false"}
#: bench/scale.py's TOLERANT keys that Kafka's brokers share.
SHARED_TOLERANT_KEYS = ("broker.session.timeout.ms", "controller.quorum.election.timeout.ms")
FAILOVER_GIVE_UP_S = 300.0


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def probe_producer(bootstrap: str, timeout_ms: int) -> Producer:
    """The confluent-kafka producer both sides are probed with (acks=all, linger.ms=0)."""
    return Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                     "message.timeout.ms": timeout_ms, "retry.backoff.max.ms": 1000,
                     "topic.metadata.refresh.interval.ms": 1000,
                     "log_level": 2})  # not the refused connections to the killed (and stopped) brokers


def failover_probe(bootstrap: str, topics: dict[str, int], kill: Callable[[], None]
                   ) -> tuple[float, dict[str, int], list[float]]:
    """`kill()` one server, then queue one acks=all record to every partition at once (librdkafka
    retries and follows the leader moves itself): seconds until the last one was acknowledged, the
    delivery errors by name, and every partition's acknowledgement time, sorted."""
    p = probe_producer(bootstrap, int(FAILOVER_GIVE_UP_S * 1000))
    p.list_topics(timeout=30)
    kill()
    t0 = time.monotonic()
    done: dict[tuple[str, int], float] = {}
    errors: dict[str, int] = {}

    def delivered(err, msg) -> None:
        if err is None:
            done[(msg.topic(), msg.partition())] = time.monotonic() - t0
        else:
            errors[err.name()] = errors.get(err.name(), 0) + 1

    total = sum(topics.values())
    for t, n in sorted(topics.items()):
        for part in range(n):
            p.produce(t, b"1", partition=part, on_delivery=delivered)
    while len(done) + sum(errors.values()) < total and time.monotonic() - t0 < FAILOVER_GIVE_UP_S + 10:
        p.poll(0.1)
    if len(done) < total:
        raise TimeoutError(f"{total - len(done)} partitions not writable after {FAILOVER_GIVE_UP_S}s ({errors})")
    return max(done.values()), errors, sorted(done.values())


class KafkaScale:
    """Three Kafka brokers holding `layout` (partitions per topic), measured as bench/scale.py measures."""

    def __init__(self, root: Path, tolerant: dict[str, str]) -> None:
        resolve_jars()
        root.mkdir(parents=True, exist_ok=True)
        self.settings = {**SETTINGS, **{k: v for k, v in tolerant.items() if k in SHARED_TOLERANT_KEYS}}
        self.cluster = KafkaCluster(root, 3, self.settings)
        self.admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
        self.killed: int | None = None

    def stop(self) -> None:
        self.cluster.stop()

    def live(self) -> list[int]:
        return [i + 1 for i, p in enumerate(self.cluster.procs) if p.poll() is None]

    # ------------------------------------------------------------------ topics

    def create_topics(self, layout: list[int], settle_s: float) -> tuple[dict[str, int], float | None]:
        """Create the topics (name -> partitions) and wait until every partition has a leader and a full ISR."""
        topics = {f"scale-{i:03d}": n for i, n in enumerate(layout)}
        t0 = time.monotonic()
        deadline = t0 + settle_s
        pending = dict(topics)
        while pending:
            futures = self.admin.create_topics([NewTopic(t, n, 3, config={"min.insync.replicas": "2"})
                                                for t, n in pending.items()], request_timeout=60)
            for t, fut in futures.items():
                try:
                    fut.result()
                    pending.pop(t)
                except KafkaException as e:
                    if "already exists" in str(e).lower() or "TOPIC_ALREADY_EXISTS" in str(e):
                        pending.pop(t)
                    elif time.monotonic() > deadline:
                        raise
            if pending:
                time.sleep(2.0)  # a broker of a fresh cluster may not be registered yet
        while not self._settled(topics):
            if time.monotonic() > deadline:
                return topics, None
            time.sleep(1.0)
        return topics, time.monotonic() - t0

    def _settled(self, topics: dict[str, int]) -> bool:
        try:
            md = self.admin.list_topics(timeout=30)
        except KafkaException:
            return False
        for t, n in topics.items():
            tm = md.topics.get(t)
            if tm is None or tm.error is not None or len(tm.partitions) != n:
                return False
            if any(p.leader < 0 or len(p.isrs) != 3 for p in tm.partitions.values()):
                return False
        return True

    # ------------------------------------------------------------------ figures

    def cpu_s(self) -> dict[int, float]:
        return {i + 1: proc_cpu_s(p.pid) for i, p in enumerate(self.cluster.procs)}

    def idle(self, window_s: float) -> dict[int, tuple[float, float]]:
        """broker id -> (CPU seconds per minute over the window, RSS MiB at its end)."""
        cpu0, t0 = self.cpu_s(), time.monotonic()
        time.sleep(window_s)
        wall, cpu1 = time.monotonic() - t0, self.cpu_s()
        return {b: ((cpu1[b] - cpu0[b]) * 60 / wall, _rss_mib(self.cluster.procs[b - 1].pid)) for b in cpu0}

    def _producer(self, timeout_ms: int) -> Producer:
        return probe_producer(self.cluster.bootstrap, timeout_ms)

    def produce_each(self, topics: dict[str, int]) -> tuple[list[float], int]:
        """One acks=all record to each partition in turn; latencies in ms, and how many failed."""
        p = self._producer(30000)
        p.list_topics(timeout=30)  # metadata before the first timed send
        out: list[float] = []
        failed = 0
        for t, n in sorted(topics.items()):
            for part in range(n):
                errors: list[object] = []
                t0 = time.perf_counter()
                p.produce(t, b"1", partition=part, on_delivery=lambda err, msg: errors.append(err))
                p.flush(60)
                if errors and errors[0] is None:
                    out.append((time.perf_counter() - t0) * 1000)
                else:
                    failed += 1
        return out, failed

    def quorum_leader(self) -> int | None:
        r = subprocess.run(java("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-server",
                                self.cluster.bootstrap, "describe", "--status"),
                           capture_output=True, text=True, timeout=120)
        m = re.search(r"LeaderId:\s*(\d+)", r.stdout)
        return int(m.group(1)) if m else None

    def failover(self, topics: dict[str, int]) -> tuple[float, dict[str, int]]:
        """SIGKILL one broker that is not the quorum leader; `failover_probe`'s figures."""
        leader = self.quorum_leader()
        victim = next(b for b in (3, 2, 1) if b != leader)

        def kill() -> None:
            self.cluster.procs[victim - 1].kill()
            self.cluster.procs[victim - 1].wait()
            self.killed = victim

        seconds, errors, _ = failover_probe(self.cluster.bootstrap, topics, kill)
        return seconds, errors
