"""Apache Kafka's own ProducerPerformance and ConsumerPerformance against Lakelog's Kafka door and
against an Apache Kafka 4.1 broker, on the same machine, in the same run.

    python bench/kafka_perf.py --rf 1                  # 1 node vs 1 broker, 500,000 x 1 KiB, 2 rounds
    python bench/kafka_perf.py --rf 3                  # 3 nodes vs 3 brokers, topic RF 3
    python bench/kafka_perf.py --rf 1 --records 20000 --latency-seconds 3 --rounds 1 --no-write   # smoke run
    python bench/kafka_perf.py --rf 1 --only transactional   # only the transactional case (its own section)

Both sides are driven by the same client, Kafka's own tools from Maven Central (infra/kafka/pom.xml
-> .jars/kafka, the JVM Kafka client 4.1), with the same settings:

- records of `--record-size` bytes (1 KiB), `acks=all`, `batch.size=1048576`, `linger.ms=5`, every
  other producer setting at its default (idempotence on, 5 requests in flight, no compression);
- a fresh topic per case, `--partitions` partitions (default: one per node / broker) at
  replication factor `--rf`, created with Kafka's `TopicCommand` and waited for until every
  partition has a leader and a full ISR;
- the consumer: ConsumerPerformance's defaults (a group member, fetch.max.bytes 50 MiB);
- servers: Kafka brokers in KRaft mode (broker and controller in one JVM each, -Xmx1g, started by
  bench/peer_kafka.py's KafkaCluster), Lakelog nodes (`lakelog node`, log cleaner off, started by
  bench/peer_kafka.py's LakelogCluster with a PLAINTEXT Kafka listener each); neither fsyncs per
  write (both leave flushing to the page cache by default); both run for the whole benchmark.

Cases, alternated round by round (Kafka first in even rounds, Lakelog first in odd ones):

1. produce records/s: ProducerPerformance `--throughput -1` (as fast as it goes), its own figure;
2. consume records/s: ConsumerPerformance reading the topic the produce case wrote, its `nMsg.sec`
   (from the start of the run, group join included) and `fetch.nMsg.sec` (fetching only);
3. server CPU seconds per 1,000 records for 1 and 2: user + system time of the server processes
   (/proc/PID/stat of the brokers / nodes) across the case, divided by thousands of records;
4. latency at a fixed rate: after the rounds, ProducerPerformance with `--throughput` at 50% of the
   best Kafka produce rate of this run, for `--latency-seconds`, on each side: its p50 and p99
   (from send to acknowledgement, as the tool measures them);
5. transactional produce records/s (issue 29's target: Lakelog >= 1.0x Kafka): ProducerPerformance
   with `--transactional-id` and `--transaction-duration-ms`, the same records and producer settings,
   `--throughput -1`, a fresh topic per round, rounds alternated as above. The tool commits a
   transaction once it has been open `--transaction-duration-ms`, so a transaction's size follows the
   rate. A warm-up run on each side (10% of `--records`, 10 ms transactions) creates
   `__transaction_state` (50 partitions on both) and starts its coordinator; unless
   `--transaction-duration-ms` is given, a calibration run on Kafka (the same size, 10 ms
   transactions) then measures Kafka's transactional rate, and the duration is set to what gives
   1,000 records per transaction at that rate (`round(1000 / rate * 1000)` ms, at least 1). The
   report states the duration and each side's records per transaction (its rate x the duration, at
   most `--records`: a lower bound, a transaction also spans its commit). `--only transactional`
   runs this case alone; it writes its own sub-section.

Figures go to the "Kafka's tools: Lakelog vs Apache Kafka" section of docs/benchmarks.md (one
sub-section per RF, and one per RF for the transactional case). Every server is stopped and the temp data removed. A loaded machine starves
the JVMs (the brokers and the tools alike), so take the figures on a quiet one; the section records
the load and the CPUs other processes used.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka.admin import AdminClient  # noqa: E402

from bench import peer_kafka  # noqa: E402
from bench.harness import OtherCpu, conditions, machine_info, rewrite_section  # noqa: E402

#: The producer settings of both sides (besides bootstrap.servers).
PRODUCER_PROPS = {"acks": "all", "batch.size": "1048576", "linger.ms": "5"}
#: Records per transaction the transactional case aims at (issue 29: 1,000).
RECORDS_PER_TRANSACTION = 1000
#: Share of `--records` each side's transactional warm-up run produces.
TXN_WARMUP_SHARE = 0.1
#: Bound on one tool run (a JVM start on a loaded machine included).
TOOL_TIMEOUT_S = 1800
#: Bound on a new topic's leaders and full ISR.
TOPIC_READY_S = 120
TOOL_HEAP = "512m"


@dataclass
class Side:
    """One system under test: its bootstrap servers and its server processes."""

    name: str
    bootstrap: str
    pids: list[int]

    def cpu_s(self) -> float:
        return sum(peer_kafka.proc_cpu_s(pid) for pid in self.pids)


def tool(main: str, *args: str) -> str:
    """Run one of Kafka's tools to its end; its stdout (an error with the tail of its output if it fails)."""
    r = subprocess.run(peer_kafka.java(main, *args, heap=TOOL_HEAP), capture_output=True, text=True,
                       timeout=TOOL_TIMEOUT_S)
    if r.returncode != 0:
        raise RuntimeError(f"{main.rsplit('.', 1)[1]} exited with {r.returncode}: {(r.stdout + r.stderr)[-2000:]}")
    return r.stdout


def create_topic(side: Side, topic: str, partitions: int, rf: int, attempts: int = 5) -> None:
    """Kafka's TopicCommand on either side, then a wait for every leader and a full ISR."""
    for attempt in range(attempts):  # a broker of a fresh cluster may not be registered yet
        try:
            tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", side.bootstrap, "--create",
                 "--topic", topic, "--partitions", str(partitions), "--replication-factor", str(rf))
            break
        except RuntimeError as e:
            if "already exists" in str(e):
                break
            if attempt == attempts - 1:
                raise
            time.sleep(5)
    admin = AdminClient({"bootstrap.servers": side.bootstrap})
    deadline = time.monotonic() + TOPIC_READY_S
    while time.monotonic() < deadline:
        t = admin.list_topics(topic, timeout=30).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == partitions and all(
                p.leader >= 0 and len(p.isrs) == rf for p in t.partitions.values()):
            return
        time.sleep(0.5)
    raise RuntimeError(f"{side.name}: {topic} has no leader or a short ISR after {TOPIC_READY_S}s")


#: ProducerPerformance's last line: "N records sent, R records/sec (M MB/sec), A ms avg latency,
#: X ms max latency, P50 ms 50th, P95 ms 95th, P99 ms 99th, P999 ms 99.9th."
_FINAL = re.compile(r"(\d+) records sent, ([\d.]+) records/sec .*?([\d.]+) ms avg latency.*?(\d+) ms 50th, "
                    r"(\d+) ms 95th, (\d+) ms 99th")


@dataclass
class Produced:
    records_per_s: float
    p50_ms: int
    p99_ms: int


def produce(side: Side, topic: str, records: int, size: int, throughput: int = -1,
            transaction_duration_ms: int | None = None) -> Produced:
    """ProducerPerformance's summary; with `transaction_duration_ms`, in transactions of that age
    (a fresh transactional id per run)."""
    props = [f"bootstrap.servers={side.bootstrap}", *(f"{k}={v}" for k, v in PRODUCER_PROPS.items())]
    txn = [] if transaction_duration_ms is None else [
        "--transactional-id", f"perf-txn-{uuid.uuid4().hex[:8]}", "--transaction-duration-ms", str(transaction_duration_ms)]
    out = tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
               "--record-size", str(size), "--throughput", str(throughput), *txn, "--producer-props", *props)
    m = _FINAL.search(out)
    if m is None:
        raise RuntimeError(f"{side.name}: no summary line in ProducerPerformance's output: {out[-1000:]}")
    if int(m.group(1)) != records:
        raise RuntimeError(f"{side.name}: ProducerPerformance sent {m.group(1)} of {records} records")
    return Produced(float(m.group(2)), int(m.group(4)), int(m.group(6)))


@dataclass
class Consumed:
    records_per_s: float
    fetch_records_per_s: float


def consume(side: Side, topic: str, records: int) -> Consumed:
    out = tool("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", side.bootstrap, "--topic", topic,
               "--messages", str(records), "--group", f"perf-{uuid.uuid4().hex[:8]}", "--timeout", "120000")
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("start.time"))
    names = [c.strip() for c in lines[header].split(",")]
    row = dict(zip(names, (c.strip() for c in lines[header + 1].split(","))))
    if int(row["data.consumed.in.nMsg"]) < records:
        raise RuntimeError(f"{side.name}: ConsumerPerformance read {row['data.consumed.in.nMsg']} of {records}")
    return Consumed(float(row["nMsg.sec"]), float(row["fetch.nMsg.sec"]))


def measured(side: Side, records: int, run: Callable[[], object]) -> tuple[object, float]:
    """`run()`'s result and the server CPU seconds per 1,000 records it cost."""
    before = side.cpu_s()
    out = run()
    return out, (side.cpu_s() - before) / (records / 1000)


class Results:
    """Every round's figures, per side and case."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], list[float]] = {}
        self.loads: list[float] = []

    def add(self, side: str, case: str, value: float) -> None:
        self.rows.setdefault((side, case), []).append(value)

    def best(self, side: str, case: str, lowest: bool = False) -> float:
        values = self.rows[(side, case)]
        return min(values) if lowest else max(values)

    def all(self, side: str, case: str) -> list[float]:
        return self.rows.get((side, case), [])


def run_rounds(sides: list[Side], args, res: Results) -> None:
    for rnd in range(args.rounds):
        for side in (sides if rnd % 2 == 0 else sides[::-1]):
            topic = f"perf-{rnd}"
            create_topic(side, topic, args.partitions, args.rf)
            p, cpu = measured(side, args.records, lambda: produce(side, topic, args.records, args.record_size))
            res.add(side.name, "produce", p.records_per_s)
            res.add(side.name, "produce cpu", cpu)
            c, ccpu = measured(side, args.records, lambda: consume(side, topic, args.records))
            res.add(side.name, "consume", c.records_per_s)
            res.add(side.name, "consume fetch", c.fetch_records_per_s)
            res.add(side.name, "consume cpu", ccpu)
            res.loads.append(os.getloadavg()[0])
            print(f"round {rnd} {side.name}: produce {p.records_per_s:,.0f} records/s ({cpu:.4f} server CPU s "
                  f"per 1k), consume {c.records_per_s:,.0f} records/s (fetching {c.fetch_records_per_s:,.0f}; "
                  f"{ccpu:.4f} CPU s per 1k); load {res.loads[-1]:.1f}", flush=True)


def run_latency(sides: list[Side], args, res: Results) -> int:
    """ProducerPerformance at 50% of Kafka's best produce rate of this run, each side, alternated."""
    rate = max(1, int(res.best("kafka", "produce") * 0.5))
    records = max(rate * args.latency_seconds, 1000)
    for rnd in range(args.rounds):
        for side in (sides if rnd % 2 == 0 else sides[::-1]):
            topic = f"latency-{rnd}"
            create_topic(side, topic, args.partitions, args.rf)
            p = produce(side, topic, records, args.record_size, throughput=rate)
            res.add(side.name, "p50", p.p50_ms)
            res.add(side.name, "p99", p.p99_ms)
            res.add(side.name, "fixed rate", p.records_per_s)
            res.loads.append(os.getloadavg()[0])
            print(f"latency round {rnd} {side.name}: {p.records_per_s:,.0f} records/s (asked {rate:,}), p50 "
                  f"{p.p50_ms} ms, p99 {p.p99_ms} ms; load {res.loads[-1]:.1f}", flush=True)
    return rate


def per_transaction(records_per_s: float, duration_ms: int, records: int) -> float:
    """Records in one transaction of `duration_ms` at the rate (at most the run's records)."""
    return min(records_per_s * duration_ms / 1000, records)


def run_transactional(sides: list[Side], args, res: Results) -> int:
    """The transactional case: warm-up runs (and the duration from Kafka's), then alternated rounds;
    returns the transaction duration used (ms)."""
    duration = args.transaction_duration_ms
    warmup = max(1000, int(args.records * TXN_WARMUP_SHARE))
    for side in sides:
        create_topic(side, "txn-warmup", args.partitions, args.rf)
        p = produce(side, "txn-warmup", warmup, args.record_size, transaction_duration_ms=duration or 10)
        print(f"transactional warm-up {side.name}: {p.records_per_s:,.0f} records/s "
              f"({duration or 10} ms transactions)", flush=True)
    if duration is None:
        kafka = next(side for side in sides if side.name == "kafka")
        create_topic(kafka, "txn-calibration", args.partitions, args.rf)
        p = produce(kafka, "txn-calibration", warmup, args.record_size, transaction_duration_ms=10)
        res.add("kafka", "txn calibration", p.records_per_s)
        duration = max(1, round(RECORDS_PER_TRANSACTION / p.records_per_s * 1000))
        print(f"transactional calibration kafka: {p.records_per_s:,.0f} records/s (10 ms transactions)", flush=True)
    print(f"transaction duration: {duration} ms", flush=True)
    for rnd in range(args.rounds):
        for side in (sides if rnd % 2 == 0 else sides[::-1]):
            topic = f"txn-{rnd}"
            create_topic(side, topic, args.partitions, args.rf)
            p, cpu = measured(side, args.records, lambda: produce(side, topic, args.records, args.record_size,
                                                                  transaction_duration_ms=duration))
            res.add(side.name, "txn produce", p.records_per_s)
            res.add(side.name, "txn produce cpu", cpu)
            res.loads.append(os.getloadavg()[0])
            print(f"transactional round {rnd} {side.name}: {p.records_per_s:,.0f} records/s (~"
                  f"{per_transaction(p.records_per_s, duration, args.records):,.0f} records per transaction; "
                  f"{cpu:.4f} server CPU s "
                  f"per 1k); load {res.loads[-1]:.1f}", flush=True)
    return duration


def report_transactional(args, res: Results, duration: int, load_start, load_end, other_cpus: float | None) -> str:
    info = machine_info(args.dir)
    info.pop("load", None)
    kafka, lakelog = res.best("kafka", "txn produce"), res.best("lakelog", "txn produce")
    ratio = lakelog / kafka
    settings = ", ".join(f"`{k}={v}`" for k, v in PRODUCER_PROPS.items())
    chosen = ("given by `--transaction-duration-ms`" if args.transaction_duration_ms else
              f"set from Kafka's calibration run ({res.best('kafka', 'txn calibration'):,.0f} records/s in 10 ms "
              f"transactions) for "
              f"{RECORDS_PER_TRANSACTION:,} records per transaction")

    def vs_idempotent(side: str) -> str:
        return f"{res.best(side, 'txn produce') / res.best(side, 'produce'):.2f}x" if res.all(side, "produce") else ""

    lines = [
        f"### Transactional produce, RF {args.rf}: "
        + ("1 node vs 1 broker" if args.rf == 1 else f"{args.rf} nodes vs {args.rf} brokers"), "",
        f"ProducerPerformance `--transactional-id` (a fresh id per run) `--transaction-duration-ms {duration}` "
        f"({chosen}), `--throughput -1`; {args.records:,} records x {args.record_size} B per round, {settings}, "
        f"other producer settings at their defaults; {args.partitions} partition(s) at replication factor "
        f"{args.rf}; best of {args.rounds} alternated round(s) after one warm-up run per side; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; " + ", ".join(f"{k} {v}" for k, v in info.items()), "",
        f"Load (`uptime`, 1/5/15 min): {load_start[0]:.1f} / {load_start[1]:.1f} / {load_start[2]:.1f} at the start, "
        f"{load_end[0]:.1f} / {load_end[1]:.1f} / {load_end[2]:.1f} at the end; 1-min load after each case "
        f"{min(res.loads):.1f}-{max(res.loads):.1f}. " + conditions(info["nproc"], other_cpus, args.note), "",
        "| case | Kafka 4.1 | Lakelog | Lakelog / Kafka | target | |",
        "|---|---|---|---|---|---|",
        f"| transactional produce, records/s | {kafka:,.0f} | {lakelog:,.0f} | {ratio:.2f}x | >= 1.0x | "
        f"{'met' if ratio >= 1.0 else '**missed**'} |",
        f"| records per transaction (rate x {duration} ms) | {per_transaction(kafka, duration, args.records):,.0f} | "
        f"{per_transaction(lakelog, duration, args.records):,.0f} | | | |",
        f"| server CPU s per 1,000 records | {res.best('kafka', 'txn produce cpu', True):.4f} | "
        f"{res.best('lakelog', 'txn produce cpu', True):.4f} | "
        f"{res.best('lakelog', 'txn produce cpu', True) / res.best('kafka', 'txn produce cpu', True):.2f}x | | |",
    ]
    if res.all("kafka", "produce") and res.all("lakelog", "produce"):
        lines.append(f"| transactional / idempotent produce of the same run | {vs_idempotent('kafka')} | "
                     f"{vs_idempotent('lakelog')} | | | |")
    lines += [
        "",
        "Rates are the best round, CPU the lowest. All rounds: " + "; ".join(
            f"{side} {case} " + ", ".join(f"{v:.4f}" if case.endswith("cpu") else f"{v:,.0f}" for v in values)
            for (side, case), values in res.rows.items() if case.startswith("txn")),
    ]
    return "\n".join(lines)


def report(args, res: Results, rate: int, load_start, load_end, other_cpus: float | None) -> str:
    info = machine_info(args.dir)
    info.pop("load", None)

    def ratio(case: str) -> str:
        return f"{res.best('lakelog', case) / res.best('kafka', case):.2f}x"

    def verdict(case: str) -> str:
        return "met" if res.best("lakelog", case) >= res.best("kafka", case) else "**missed**"

    def lagged(side: str) -> str:
        """A mark on a latency figure taken while the side fell behind the asked rate (its queue grew)."""
        return " (below the rate)" if min(res.all(side, "fixed rate")) < 0.9 * rate else ""

    settings = ", ".join(f"`{k}={v}`" for k, v in PRODUCER_PROPS.items())
    lines = [
        f"### RF {args.rf}: " + ("1 node vs 1 broker" if args.rf == 1 else f"{args.rf} nodes vs {args.rf} brokers"), "",
        f"{args.records:,} records x {args.record_size} B per case, {settings}, other producer settings at their "
        f"defaults; {args.partitions} partition(s) at replication factor {args.rf}; best of {args.rounds} alternated "
        f"round(s); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
        + ", ".join(f"{k} {v}" for k, v in info.items()), "",
        f"Load (`uptime`, 1/5/15 min): {load_start[0]:.1f} / {load_start[1]:.1f} / {load_start[2]:.1f} at the start, "
        f"{load_end[0]:.1f} / {load_end[1]:.1f} / {load_end[2]:.1f} at the end; 1-min load after each case "
        f"{min(res.loads):.1f}-{max(res.loads):.1f}. " + conditions(info["nproc"], other_cpus, args.note), "",
        "| case | Kafka 4.1 | Lakelog | Lakelog / Kafka | target | |",
        "|---|---|---|---|---|---|",
        f"| produce, records/s (ProducerPerformance, `--throughput -1`) | {res.best('kafka', 'produce'):,.0f} | "
        f"{res.best('lakelog', 'produce'):,.0f} | {ratio('produce')} | >= 1.0x | {verdict('produce')} |",
        f"| consume, records/s (ConsumerPerformance `nMsg.sec`) | {res.best('kafka', 'consume'):,.0f} | "
        f"{res.best('lakelog', 'consume'):,.0f} | {ratio('consume')} | >= 1.0x | {verdict('consume')} |",
        f"| consume, fetching only (`fetch.nMsg.sec`) | {res.best('kafka', 'consume fetch'):,.0f} | "
        f"{res.best('lakelog', 'consume fetch'):,.0f} | {ratio('consume fetch')} | | |",
        f"| server CPU s per 1,000 records, produce | {res.best('kafka', 'produce cpu', True):.4f} | "
        f"{res.best('lakelog', 'produce cpu', True):.4f} | {ratio('produce cpu')} | | |",
        f"| server CPU s per 1,000 records, consume | {res.best('kafka', 'consume cpu', True):.4f} | "
        f"{res.best('lakelog', 'consume cpu', True):.4f} | {ratio('consume cpu')} | | |",
        f"| produce latency p50 / p99 at {rate:,} records/s (50% of Kafka's peak), ms | "
        f"{res.best('kafka', 'p50', True):.0f} / {res.best('kafka', 'p99', True):.0f}{lagged('kafka')} | "
        f"{res.best('lakelog', 'p50', True):.0f} / {res.best('lakelog', 'p99', True):.0f}{lagged('lakelog')} | | | |",
        "",
        "Rates are the best round, CPU and latency the lowest. Server CPU: user + system seconds of the "
        "brokers' JVMs / the nodes' processes (/proc/PID/stat) across the case; the tools' own CPU is not in it. "
        "The fixed-rate runs produced at " + ", ".join(f"{v:,.0f}" for v in res.all("kafka", "fixed rate"))
        + " (Kafka) and " + ", ".join(f"{v:,.0f}" for v in res.all("lakelog", "fixed rate"))
        + f" (Lakelog) records/s for {args.latency_seconds} s each; \"below the rate\": a run that fell more than 10% short "
        "of the asked rate, so its latency includes time queued in the producer.", "",
        "All rounds: " + "; ".join(f"{side} {case} " + ", ".join(f"{v:.4f}" if case.endswith("cpu") else f"{v:,.0f}"
                                                                for v in values)
                                   for (side, case), values in res.rows.items() if not case.startswith("txn")),
    ]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=500_000, help="records per produce and consume case")
    ap.add_argument("--record-size", type=int, default=1024)
    ap.add_argument("--rf", type=int, default=1, choices=(1, 3), help="nodes / brokers, and the replication factor")
    ap.add_argument("--partitions", type=int, default=None, help="partitions per topic (default: --rf)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--latency-seconds", type=int, default=30, help="length of each fixed-rate latency run")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--jars", default=None, help="folder of Kafka's jars (default .jars/kafka, resolved by Maven)")
    ap.add_argument("--note", default="", help="what else ran, written with the figures")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    ap.add_argument("--only", choices=("transactional",), default=None,
                    help="run only this case (and rewrite only its sub-section)")
    ap.add_argument("--transaction-duration-ms", type=int, default=None,
                    help="age at which ProducerPerformance commits a transaction (default: from a warm-up run, "
                         f"for {RECORDS_PER_TRANSACTION:,} records per transaction at Kafka's rate)")
    args = ap.parse_args()
    if args.transaction_duration_ms is not None and args.transaction_duration_ms < 1:
        ap.error("--transaction-duration-ms must be at least 1")
    args.partitions = args.partitions or args.rf
    if args.jars:
        peer_kafka.JARS = Path(args.jars)
    peer_kafka.resolve_jars()
    load_start, other = os.getloadavg(), OtherCpu()
    work = Path(tempfile.mkdtemp(prefix="kafka-perf-", dir=args.dir))
    res = Results()
    kafka = lakelog = None
    try:
        kafka = peer_kafka.KafkaCluster(work, args.rf)
        lakelog = peer_kafka.LakelogCluster(work, args.rf, kafka=True)
        sides = [Side("kafka", kafka.bootstrap, [p.pid for p in kafka.procs]),
                 Side("lakelog", lakelog.bootstrap, [p.pid for p in lakelog.procs])]
        if args.only is None:
            run_rounds(sides, args, res)
            rate = run_latency(sides, args, res)
        duration = run_transactional(sides, args, res)
    finally:
        for cluster in (kafka, lakelog):
            if cluster is not None:
                cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    load_end, other_cpus = os.getloadavg(), other.cpus()
    sections = {f"kafka-perf-txn-rf{args.rf}": report_transactional(args, res, duration, load_start, load_end,
                                                                    other_cpus)}
    if args.only is None:
        sections[f"kafka-perf-rf{args.rf}"] = report(args, res, rate, load_start, load_end, other_cpus)
    for name, text in sections.items():
        print(text)
        if not args.no_write:
            rewrite_section(ROOT / "docs" / "benchmarks.md", name, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
