"""Peer benchmark: Apache Kafka 4.1 against Lakelog on the same machine, in the same run.

    python bench/peer_kafka.py                       # 200,000 x 1 KiB, acks=all, RF 1, 2 rounds
    python bench/peer_kafka.py --rf 3                # three brokers / three nodes, topic RF 3
    python bench/peer_kafka.py --records 500000 --rounds 3
    python bench/peer_kafka.py --no-write            # print only

Kafka: the broker and tools resolved once from Maven Central (infra/kafka/pom.xml -> .jars/kafka, or
`--jars DIR` / $LAKELOG_KAFKA_JARS), KRaft nodes (broker and controller in one JVM each; one, or
three forming the quorum) on loopback, data in a temp dir; Kafka's own `ProducerPerformance`
(--throughput -1, default producer settings plus acks) and `ConsumerPerformance` (its nMsg.sec).
Lakelog: `lakelog node` processes on loopback (one, or three voters), log cleaner off; produce
with Lakelog's client (`lakelog.client.Producer`: binary path, idempotent, batch.size 1 MiB, linger.ms
5, max.in.flight 5), JSON v2 REST produce (`application/vnd.kafka.json.v2+json`, 500 records per
request, 4 client threads, each record's value a 1 KiB JSON string), consume with
`lakelog.client.Consumer` (a group member reading the binary fetch path, decoding natively) and, for
information, a raw binary fetch loop (records counted from the batch headers, nothing decoded).

Same record count, record size and acks on both sides; a fresh topic of one partition per run
(replication factor --rf); cases alternated round by round (Kafka, Lakelog, Lakelog, Kafka, ...).
Rates are records/s; the JVM start of Kafka's tools is outside their own timing, and the client
construction outside Lakelog's. Figures go to the "Peer: Apache Kafka" section of
docs/benchmarks.md (one sub-section per RF). All servers are always stopped; temp data is removed.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.harness import machine_info, rewrite_section  # noqa: E402
from lakelog.logstore.record_batch import iter_batches  # noqa: E402

JARS = Path(os.environ.get("LAKELOG_KAFKA_JARS") or ROOT / ".jars" / "kafka")
#: Longest wait for a server to listen / be ready.
START_TIMEOUT_S = 300
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


_TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a running process has used so far (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK


def own_cpu_s() -> float:
    """CPU seconds of this process (every thread: Lakelog's clients) and of its waited-for children
    (Kafka's tools)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def resolve_jars() -> None:
    if (JARS / ".resolved").exists():
        return
    JARS.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mvn", "--batch-mode", "--quiet", "-f", str(ROOT / "infra" / "kafka" / "pom.xml"),
                    "dependency:copy-dependencies", f"-DoutputDirectory={JARS}", "-DincludeScope=runtime"],
                   check=True)
    (JARS / ".resolved").touch()


def java(main: str, *args: str, heap: str = "512m") -> list[str]:
    return ["java", f"-Xmx{heap}", "-cp", f"{JARS}/*", main, *args]


class KafkaCluster:
    """`size` KRaft nodes, each broker and controller in one JVM (a quorum of `size` voters)."""

    def __init__(self, workdir: Path, size: int = 1, extra_properties: dict[str, str] | None = None) -> None:
        """`extra_properties`: server.properties lines added to every node's (bench/scale_kafka.py)."""
        self.dir = workdir / "kafka"
        self.dir.mkdir()
        self.size = size
        ports = [(free_port(), free_port()) for _ in range(size)]
        voters = ",".join(f"{i + 1}@127.0.0.1:{c}" for i, (_, c) in enumerate(ports))
        cluster_id = "-"
        while cluster_id.startswith("-"):  # StorageTool would read a leading "-" as an option
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        self.procs, self.logs = [], []
        for i, (port, cport) in enumerate(ports):
            d = self.dir / f"node-{i + 1}"
            d.mkdir()
            props = d / "server.properties"
            props.write_text("\n".join([
                "process.roles=broker,controller", f"node.id={i + 1}", f"controller.quorum.voters={voters}",
                f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                "controller.listener.names=CONTROLLER", "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                f"log.dirs={d / 'data'}", "num.partitions=1", f"offsets.topic.replication.factor={size}",
                f"transaction.state.log.replication.factor={size}", "transaction.state.log.min.isr=1",
                "group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=false",
                *(f"{k}={v}" for k, v in (extra_properties or {}).items())]) + "\n")
            subprocess.run(java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)),
                           check=True, capture_output=True)
            log = open(d / "broker.log", "wb")
            self.logs.append(log)
            self.procs.append(subprocess.Popen(java("kafka.Kafka", str(props), heap="1g"), stdout=log,
                                               stderr=subprocess.STDOUT))
        try:
            for port, _ in ports:
                wait_port(port, START_TIMEOUT_S)  # three JVMs on a loaded 2-core machine: minutes
        except BaseException:
            for i in range(size):  # the temp dir is removed: say why here, before stopping them
                tail = (self.dir / f"node-{i + 1}" / "broker.log").read_text(errors="replace").splitlines()[-30:]
                print(f"--- Kafka node {i + 1} (running: {self.procs[i].poll() is None}) broker.log tail:",
                      *tail, sep="\n", file=sys.stderr)
            self.stop()
            raise
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p, _ in ports)

    def create_topic(self, name: str, attempts: int = 5) -> None:
        # A broker of a fresh cluster on a loaded machine may not be registered yet (RF 3 needs all three).
        for attempt in range(attempts):
            r = subprocess.run(java("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", self.bootstrap,
                                    "--create", "--topic", name, "--partitions", "1", "--replication-factor",
                                    str(self.size)), capture_output=True, text=True)
            if r.returncode == 0:
                return
            if "already exists" in r.stdout + r.stderr:
                return
            time.sleep(5)
        raise RuntimeError(f"Kafka did not create {name}: {(r.stdout + r.stderr)[-500:]}")

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
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self.logs:
            log.close()


class LakelogCluster:
    """`size` `lakelog node` processes on loopback (with 3, every node a controller voter)."""

    def __init__(self, workdir: Path, size: int = 1, *, kafka: bool = False) -> None:
        self.dir = workdir / "lakelog"
        self.dir.mkdir()
        self.size = size
        ports = [free_port() for _ in range(size)]
        #: With `kafka`, each node also serves a PLAINTEXT Kafka listener (bench/kafka_perf.py).
        kafka_ports = [free_port() for _ in range(size)] if kafka else []
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in kafka_ports)
        voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
        self.procs, self.logs = [], []
        for i, port in enumerate(ports):
            d = self.dir / f"node-{i + 1}"
            d.mkdir()
            cfg = d / "node.toml"
            listeners = f"http://127.0.0.1:{port}" + (f",PLAINTEXT://127.0.0.1:{kafka_ports[i]}" if kafka else "")
            lines = [f'"node.id" = {i + 1}', f'"listeners" = "{listeners}"', f'"log.dirs" = "{d / "data"}"',
                     '"log.cleaner.enable" = false', '"group.initial.rebalance.delay.ms" = 0']
            if size > 1:
                lines += [f'"controller.quorum.voters" = "{voters}"', '"cluster.secret" = "peer-bench-secret-0123456789"',
                          f'"default.replication.factor" = {size}', f'"offsets.topic.replication.factor" = {size}']
            cfg.write_text("\n".join(lines) + "\n")
            log = open(d / "node.log", "wb")
            self.logs.append(log)
            self.procs.append(subprocess.Popen([str(LAKELOG), "node", "--config", str(cfg)], stdout=log,
                                               stderr=subprocess.STDOUT))
        self.urls = [f"http://127.0.0.1:{p}" for p in ports]
        self.url = self.urls[0]
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.cluster_id = httpx.get(f"{self.url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        for url in self.urls:
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            else:
                raise RuntimeError(f"the Lakelog node at {url} did not become ready")

    def leader_url(self, topic: str) -> str:
        """The partition leader's URL (clients are pointed at it, as Kafka's clients find the leader)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            doc = httpx.get(f"{self.url}/topics/{topic}/partitions/0", timeout=10).json()
            leader = int(doc.get("leader", -1))
            isr = [r for r in doc.get("replicas", []) if r.get("in_sync")]
            if leader > 0 and len(isr) == self.size:
                return self.urls[leader - 1]
            time.sleep(0.2)
        raise RuntimeError(f"{topic}: no leader with a full ISR")

    def create_topic(self, name: str) -> None:
        r = httpx.post(f"{self.url}/v3/clusters/{self.cluster_id}/topics", timeout=30,
                       json={"topic_name": name, "partitions_count": 1, "replication_factor": self.size})
        r.raise_for_status()
        self.leader_url(name)

    def produce(self, topic: str, records: int, size: int, acks: str) -> float:
        from lakelog.client import Producer

        payloads = [os.urandom(size) for _ in range(64)]
        leader = self.leader_url(topic)
        servers = ",".join([leader] + [u for u in self.urls if u != leader])
        p = Producer({"bootstrap.servers": servers, "acks": acks, "batch.size": 1 << 20, "linger.ms": 5,
                      "buffer.memory": 64 << 20, "max.in.flight.requests.per.connection": 5})
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
        from lakelog.client import Consumer

        c = Consumer({"bootstrap.servers": self.leader_url(topic), "group.id": f"perf-{uuid.uuid4().hex[:8]}",
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

    def produce_json(self, topic: str, records: int, size: int, acks: str, per_request: int = 500,
                     threads: int = 4) -> float:
        """JSON v2 REST produce: `threads` clients each POSTing `per_request` records at a time."""
        leader = self.leader_url(topic)
        body = json.dumps({"records": [{"value": "x" * (size - 2)} for _ in range(per_request)]}).encode()
        requests = -(-records // per_request)
        shares = [requests // threads + (1 if i < requests % threads else 0) for i in range(threads)]
        errors: list[str] = []

        def run(n: int) -> None:
            with httpx.Client(timeout=120) as h:
                for _ in range(n):
                    r = h.post(f"{leader}/topics/{topic}/partitions/0", params={"acks": acks}, content=body,
                               headers={"Content-Type": "application/vnd.kafka.json.v2+json"})
                    if r.status_code != 200:
                        errors.append(r.text[:200])
                        return
        workers = [threading.Thread(target=run, args=(n,)) for n in shares]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - start
        if errors:
            raise RuntimeError(f"JSON produce failed: {errors[0]}")
        return requests * per_request / elapsed

    def fetch_binary(self, topic: str, records: int) -> float:
        got, offset = 0, 0
        leader = self.leader_url(topic)
        with httpx.Client(timeout=60) as h:
            start = time.perf_counter()
            while got < records:
                r = h.get(f"{leader}/topics/{topic}/partitions/0/records", headers={"Accept":
                          "application/vnd.kafka.recordbatch"}, params={"offset": offset, "max_bytes": 8 << 20})
                for _, b in iter_batches(r.content):
                    n = b.last_offset_delta + 1
                    got += n
                    offset = b.base_offset + n
            elapsed = time.perf_counter() - start
        return records / elapsed

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self.logs:
            log.close()


#: The issue's targets: Lakelog records/s over Kafka's in the same run.
TARGETS = {"produce (Lakelog: Producer, binary path)": 1.0, "produce (Lakelog: JSON v2 REST, 500/request, 4 clients)": 0.8,
           "consume (Lakelog: Consumer, binary path)": 1.0, "consume (Lakelog: raw binary fetch, not decoded)": None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--acks", default="all", choices=("all", "1", "0"))
    ap.add_argument("--rf", type=int, default=1, choices=(1, 3), help="brokers / nodes, and the topic's replication factor")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--jars", default=None, help="folder of Kafka's jars (default .jars/kafka, resolved by Maven)")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    global JARS
    if args.jars:
        JARS = Path(args.jars)
    resolve_jars()
    load_start = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="peer-kafka-", dir=args.dir))
    keys = ("kafka produce", "lakelog produce", "lakelog produce json", "kafka consume", "lakelog consume",
            "lakelog fetch")
    results: dict[str, list[float]] = {k: [] for k in keys}
    loads: list[float] = []
    kafka = lakelog = None

    cpu: dict[str, list[float]] = {k: [] for k in keys}  # CPU ms per 1,000 records: servers + client

    def cpu_of(side, run) -> tuple[float, float]:
        c0, s0 = own_cpu_s(), sum(proc_cpu_s(p.pid) for p in side.procs)
        out = run()
        return out, own_cpu_s() - c0 + sum(proc_cpu_s(p.pid) for p in side.procs) - s0

    tool_start: dict[str, float] = {}  # CPU s of a Kafka tool run with one record (reported, not subtracted)

    def measured(key: str, rnd: int, side, run) -> None:
        rate, used = cpu_of(side, run)
        results[key].append(rate)
        cpu[key].append(used * 1000 / (args.records / 1000))
        loads.append(os.getloadavg()[0])
        print(f"round {rnd}: {key} {rate:,.0f} records/s, {cpu[key][-1]:.1f} CPU ms per 1k records "
              f"(load {loads[-1]:.1f})", flush=True)
    try:
        kafka = KafkaCluster(work, args.rf)
        lakelog = LakelogCluster(work, args.rf)
        # Kafka's tools are JVMs started per case: their start-up CPU is not part of moving records.
        kafka.create_topic("perf-start")
        tool_start["kafka produce"] = cpu_of(kafka, lambda: kafka.produce("perf-start", 1, args.record_size, args.acks))[1]
        tool_start["kafka consume"] = cpu_of(kafka, lambda: kafka.consume("perf-start", 1))[1]
        print(f"Kafka tool start-up CPU (one record): produce {tool_start['kafka produce']:.2f} s, "
              f"consume {tool_start['kafka consume']:.2f} s", flush=True)
        for rnd in range(args.rounds):
            order = [("kafka", kafka), ("lakelog", lakelog)]
            if rnd % 2:
                order.reverse()
            for name, side in order:
                topic = f"perf-{rnd}-{name}"
                side.create_topic(topic)
                measured(f"{name} produce", rnd, side,
                         lambda: side.produce(topic, args.records, args.record_size, args.acks))
                measured(f"{name} consume", rnd, side, lambda: side.consume(topic, args.records))
                if name == "lakelog":
                    measured("lakelog fetch", rnd, side, lambda: side.fetch_binary(topic, args.records))
                    json_topic = f"perf-{rnd}-json"
                    side.create_topic(json_topic)
                    measured("lakelog produce json", rnd, side,
                             lambda: side.produce_json(json_topic, args.records, args.record_size, args.acks))
    finally:
        for side in (kafka, lakelog):
            if side is not None:
                side.stop()
        shutil.rmtree(work, ignore_errors=True)
    best = {k: max(v) for k, v in results.items() if v}
    low = {k: min(v) for k, v in cpu.items() if v}
    pairs = [("produce (Lakelog: Producer, binary path)", "kafka produce", "lakelog produce"),
             ("produce (Lakelog: JSON v2 REST, 500/request, 4 clients)", "kafka produce", "lakelog produce json"),
             ("consume (Lakelog: Consumer, binary path)", "kafka consume", "lakelog consume"),
             ("consume (Lakelog: raw binary fetch, not decoded)", "kafka consume", "lakelog fetch")]
    rows = [(c, best[k], best[lk], low[k], low[lk]) for c, k, lk in pairs]
    info = machine_info(args.dir)
    info.pop("load", None)
    load_end = os.getloadavg()
    lines = [f"### RF {args.rf}", "",
             f"{args.records:,} records x {args.record_size} B, acks={args.acks}, one partition, replication factor "
             f"{args.rf} on {args.rf} broker(s) / node(s) each, best of {args.rounds} alternated rounds; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; " + ", ".join(f"{k} {v}" for k, v in info.items()),
             "", f"Load (`uptime`, 1/5/15 min): {load_start[0]:.1f} / {load_start[1]:.1f} / {load_start[2]:.1f} at the "
             f"start, {load_end[0]:.1f} / {load_end[1]:.1f} / {load_end[2]:.1f} at the end; 1-min load after each case "
             f"{min(loads):.1f}-{max(loads):.1f}. The machine ({os.cpu_count()} cores) is shared with other engineers (their test runs): the "
             "absolute rates move with their load; the ratios compare cases of the same run, alternated.", "",
             "| case | Kafka 4.1 records/s | Lakelog records/s | ratio | target | | CPU ms / 1k records: Kafka | Lakelog "
             "| Kafka / Lakelog CPU |", "|---|---|---|---|---|---|---|---|---|"]
    for c, k, lk, kc, lc in rows:
        target = TARGETS[c]
        verdict = "" if target is None else ("met" if lk / k >= target else "**missed**")
        lines.append(f"| {c} | {k:,.0f} | {lk:,.0f} | {lk / k:.2f}x | {'' if target is None else f'>= {target}x'} "
                     f"| {verdict} | {kc:.1f} | {lc:.1f} | {kc / lc:.2f}x |")
    lines += ["", "CPU: user + system seconds of every server process (Kafka's JVMs / Lakelog's nodes) and of the "
              "client (Kafka's tool JVM / the bench's own threads) during the case, per 1,000 records, the lowest of "
              "the rounds. Kafka's includes its tool's JVM start-up and JIT: the same tool run with one record used "
              f"{tool_start.get('kafka produce', 0):.2f} s (produce) and {tool_start.get('kafka consume', 0):.2f} s "
              "(consume) in this run — under load that cost varies too much to subtract. Unlike records/s it does not fall when other engineers' "
              "processes take the cores, so its ratio is the steadier comparison on a loaded machine.",
              "", "All rounds (records/s): " + "; ".join(f"{k} " + ", ".join(f"{v:,.0f}" for v in vs)
                                                      for k, vs in results.items())]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        rewrite_section(ROOT / "docs" / "benchmarks.md", f"peer-kafka-rf{args.rf}", text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
