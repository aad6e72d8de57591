"""Peer benchmark: Apache Kafka 4.1 against Lakelog on the same machine, in the same run.

    python bench/peer_kafka.py                       # 200,000 x 1 KiB, acks=all, 2 rounds
    python bench/peer_kafka.py --records 500000 --rounds 3
    python bench/peer_kafka.py --no-write            # print only

Kafka: the broker and tools resolved once from Maven Central (bench/pom.xml -> .jars/kafka), one
KRaft node (broker and controller in one JVM) on loopback, data in a temp dir; Kafka's own
`ProducerPerformance` (--throughput -1, default producer settings plus acks) and
`ConsumerPerformance` (its nMsg.sec). Lakelog: one `lakelog node` process on loopback, log cleaner
off; produce with Lakelog's client (`lakelog.cli.Producer`, binary path, idempotent, batch.size
1 MiB, linger.ms 5, one partition in flight at a time); consume with `lakelog.cli.Consumer` (a group
member; records come JSON/base64 through the REST instance) and, for information, a raw binary
fetch loop (`Accept: application/vnd.kafka.recordbatch`, records counted from the batches).

Same record count, record size and acks on both sides; a fresh topic of one partition per run;
cases alternated round by round (Kafka, Lakelog, Lakelog, Kafka, ...). Rates are records/s; the
JVM start of Kafka's tools is outside their own timing, and the client construction outside
Lakelog's. Figures go to the "Peer: Apache Kafka" section of docs/benchmarks.md. Both servers are
always stopped; temp data is removed.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.harness import machine_info, rewrite_section  # noqa: E402
from lakelog.logstore.record_batch import iter_batches  # noqa: E402

JARS = ROOT / ".jars" / "kafka"
LAKELOG = Path(sys.executable).parent / "lakelog"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on port {port} after {timeout_s}s")


def resolve_jars() -> None:
    if (JARS / ".resolved").exists():
        return
    JARS.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mvn", "--batch-mode", "--quiet", "-f", str(ROOT / "bench" / "pom.xml"),
                    "dependency:copy-dependencies", f"-DoutputDirectory={JARS}", "-DincludeScope=runtime"],
                   check=True)
    (JARS / ".resolved").touch()


def java(main: str, *args: str, heap: str = "512m") -> list[str]:
    return ["java", f"-Xmx{heap}", "-cp", f"{JARS}/*", main, *args]


class KafkaBroker:
    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / "kafka"
        self.dir.mkdir()
        self.port, self.cport = free_port(), free_port()
        props = self.dir / "server.properties"
        props.write_text("\n".join([
            "process.roles=broker,controller", "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.cport}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.cport}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={self.dir / 'data'}", "num.partitions=1", "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1", "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=false"]) + "\n")
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        subprocess.run(java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)),
                       check=True, capture_output=True)
        self.log = open(self.dir / "broker.log", "wb")
        self.proc = subprocess.Popen(java("kafka.Kafka", str(props), heap="1g"), stdout=self.log,
                                     stderr=subprocess.STDOUT)
        wait_port(self.port, 60)
        self.bootstrap = f"127.0.0.1:{self.port}"

    def create_topic(self, name: str) -> None:
        subprocess.run(java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.bootstrap, "--create",
                            "--topic", name, "--partitions", "1", "--replication-factor", "1"),
                       check=True, capture_output=True)

    def produce(self, topic: str, records: int, size: int, acks: str) -> float:
        out = subprocess.run(java("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                                  "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
                                  "--producer-props", f"bootstrap.servers={self.bootstrap}", f"acks={acks}",
                                  heap="1g"), check=True, capture_output=True, text=True).stdout
        last = [line for line in out.splitlines() if "records sent" in line][-1]
        return float(re.search(r"([\d.]+) records/sec", last).group(1))

    def consume(self, topic: str, records: int) -> float:
        out = subprocess.run(java("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", self.bootstrap,
                                  "--topic", topic, "--messages", str(records), "--group", f"perf-{uuid.uuid4().hex[:8]}",
                                  "--timeout", "60000", heap="1g"), check=True, capture_output=True, text=True).stdout
        rows = [line for line in out.splitlines() if line and line[0].isdigit()]
        return float(rows[-1].split(",")[5])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class LakelogNode:
    def __init__(self, workdir: Path) -> None:
        self.dir = workdir / "lakelog"
        self.dir.mkdir()
        self.port = free_port()
        cfg = self.dir / "node.toml"
        cfg.write_text(f'"listeners" = "http://127.0.0.1:{self.port}"\n"log.dirs" = "{self.dir / "data"}"\n'
                       '"log.cleaner.enable" = false\n')
        self.log = open(self.dir / "node.log", "wb")
        self.proc = subprocess.Popen([str(LAKELOG), "node", "--config", str(cfg)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise RuntimeError("the Lakelog node did not become ready")
        self.cluster_id = httpx.get(f"{self.url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]

    def create_topic(self, name: str) -> None:
        r = httpx.post(f"{self.url}/v3/clusters/{self.cluster_id}/topics", timeout=30,
                       json={"topic_name": name, "partitions_count": 1, "replication_factor": 1})
        r.raise_for_status()

    def produce(self, topic: str, records: int, size: int, acks: str) -> float:
        from lakelog.cli import Producer

        payloads = [os.urandom(size) for _ in range(64)]
        p = Producer({"bootstrap.servers": self.url, "acks": acks, "batch.size": 1 << 20, "linger.ms": 5,
                      "buffer.memory": 64 << 20})
        try:
            p.partitions_for(topic)
            start = time.perf_counter()
            for i in range(records):
                p.produce(topic, value=payloads[i & 63], partition=0)
            left = p.flush(300)
            elapsed = time.perf_counter() - start
        finally:
            p.close(30)
        if left:
            raise RuntimeError(f"{left} records were not delivered")
        return records / elapsed

    def consume(self, topic: str, records: int) -> float:
        from lakelog.cli import Consumer

        c = Consumer({"bootstrap.servers": self.url, "group.id": f"perf-{uuid.uuid4().hex[:8]}",
                      "auto.offset.reset": "earliest", "enable.auto.commit": False, "max.poll.records": 500})
        try:
            c.subscribe([topic])
            got = 0
            start = time.perf_counter()
            while got < records:
                got += len(c.poll(1.0, max_bytes=8 << 20))
            elapsed = time.perf_counter() - start
        finally:
            c.close()
        return records / elapsed

    def fetch_binary(self, topic: str, records: int) -> float:
        got, offset = 0, 0
        with httpx.Client(timeout=60) as h:
            start = time.perf_counter()
            while got < records:
                r = h.get(f"{self.url}/topics/{topic}/partitions/0/records", headers={"Accept":
                          "application/vnd.kafka.recordbatch"}, params={"offset": offset, "max_bytes": 8 << 20})
                for _, b in iter_batches(r.content):
                    n = b.last_offset_delta + 1
                    got += n
                    offset = b.base_offset + n
            elapsed = time.perf_counter() - start
        return records / elapsed

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--acks", default="all", choices=("all", "1", "0"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    resolve_jars()
    work = Path(tempfile.mkdtemp(prefix="peer-kafka-", dir=args.dir))
    results: dict[str, list[float]] = {k: [] for k in ("kafka produce", "lakelog produce", "kafka consume",
                                                       "lakelog consume (Consumer)", "lakelog fetch (binary)")}
    kafka = lakelog = None
    try:
        kafka = KafkaBroker(work)
        lakelog = LakelogNode(work)
        for rnd in range(args.rounds):
            order = [("kafka", kafka), ("lakelog", lakelog)]
            if rnd % 2:
                order.reverse()
            for name, side in order:
                topic = f"perf-{rnd}-{name}"
                side.create_topic(topic)
                rate = side.produce(topic, args.records, args.record_size, args.acks)
                results[f"{name} produce"].append(rate)
                print(f"round {rnd}: {name} produce {rate:,.0f} records/s", flush=True)
                if name == "kafka":
                    rate = side.consume(topic, args.records)
                    results["kafka consume"].append(rate)
                    print(f"round {rnd}: kafka consume {rate:,.0f} records/s", flush=True)
                else:
                    rate = side.consume(topic, args.records)
                    results["lakelog consume (Consumer)"].append(rate)
                    print(f"round {rnd}: lakelog consume (Consumer) {rate:,.0f} records/s", flush=True)
                    rate = side.fetch_binary(topic, args.records)
                    results["lakelog fetch (binary)"].append(rate)
                    print(f"round {rnd}: lakelog fetch (binary) {rate:,.0f} records/s", flush=True)
    finally:
        for side in (kafka, lakelog):
            if side is not None:
                side.stop()
        shutil.rmtree(work, ignore_errors=True)
    best = {k: max(v) for k, v in results.items() if v}
    rows = [
        ("produce", best["kafka produce"], best["lakelog produce"]),
        ("consume (Lakelog: Consumer)", best["kafka consume"], best["lakelog consume (Consumer)"]),
        ("consume (Lakelog: raw binary fetch)", best["kafka consume"], best["lakelog fetch (binary)"]),
    ]
    info = machine_info(args.dir)
    info["load average (1 min) at the end"] = f"{os.getloadavg()[0]:.1f}"
    lines = [f"{args.records:,} records x {args.record_size} B, acks={args.acks}, one partition, RF 1, "
             f"best of {args.rounds} alternated rounds; {time.strftime('%Y-%m-%d')}; "
             + ", ".join(f"{k} {v}" for k, v in info.items()), "",
             "| case | Kafka 4.1 records/s | Lakelog records/s | ratio |", "|---|---|---|---|"]
    lines += [f"| {c} | {k:,.0f} | {lk:,.0f} | {lk / k:.2f}x |" for c, k, lk in rows]
    lines += ["", "Kafka: ProducerPerformance (default producer settings, acks as above) and ConsumerPerformance. "
              "Lakelog: `lakelog.cli.Producer` (binary path, idempotent, batch.size 1 MiB, linger.ms 5) and "
              "`lakelog.cli.Consumer` (group member, JSON/base64 through a REST instance); the raw fetch is "
              "`Accept: application/vnd.kafka.recordbatch` in 8 MiB reads."]
    if os.getloadavg()[0] > (os.cpu_count() or 1):
        lines += ["", f"**Not representative**: the machine's load average ({os.getloadavg()[0]:.1f}) was above its "
                  f"{os.cpu_count()} cores during the run (other processes competed for the CPU, the JVM's JIT most "
                  "of all); re-run `make bench-peer` on a quiet machine."]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        rewrite_section(ROOT / "docs" / "benchmarks.md", "peer-kafka", "## Peer: Apache Kafka\n\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
