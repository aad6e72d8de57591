"""Kafka Fetch through the Kafka door: zero-copy (sendfile from the segment files) against
read-and-send, in one run, alternated.

    python bench/kafka_fetch.py                                   # 200,000 x 1 KiB, 5 rounds (make bench-kafka-fetch)
    python bench/kafka_fetch.py --records 2000 --rounds 2 --no-write   # a quick check that it runs

Two `lakelog node` processes on loopback, identical but for `fetch.zero.copy.enable` (true: record
bytes go from the segment files to the socket with os.sendfile; false: they are read into memory and
written), each with a PLAINTEXT Kafka listener, the log cleaner off. The same records are produced
to both (confluent-kafka, 1 KiB random values, no compression, 4 partitions, acks=all,
batch.size 1 MiB, linger.ms 5). Then each round consumes every record once from each node
(confluent-kafka Consumer assigned to every partition from the beginning, no group commits,
fetch.max.bytes 50 MiB, max.partition.fetch.bytes 1 MiB), in A B, B A, ... order, measuring
records/s (wall) and the node process's CPU seconds (user + system, /proc/PID/stat) per MB
consumed. The page cache holds the segments after the produce on both sides, so both read from
memory: the difference is the copies into and out of Python and the CPU they cost.

Reported: best and median records/s, median node CPU ms per MB, and the paired ratios (zero-copy /
read-and-send, median over rounds). Figures are printed and written to the "kafka-fetch" section of
docs/benchmarks.md (`--no-write` to skip). Both nodes are always stopped; temp data is removed.
Take figures on a quiet machine (the load is printed with them).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.harness import (  # noqa: E402
    MB,
    OtherCpu,
    command_line,
    conditions,
    git_revision,
    machine_info,
    markdown_table,
    rewrite_section,
    text_table,
)

LAKELOG = Path(sys.executable).parent / "lakelog"
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30
CONSUME_TIMEOUT_S = 600
TOPIC = "fetch-bench"
PARTITIONS = 4
RECORD_BYTES = 1024
_TICK = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


class Node:
    """One `lakelog node` with a PLAINTEXT Kafka listener; `stop()` always ends the process."""

    def __init__(self, workdir: Path, name: str, zero_copy: bool) -> None:
        d = workdir / name
        d.mkdir()
        self.http_port, self.kafka_port = _free_port(), _free_port()
        cfg = d / "node.toml"
        cfg.write_text("\n".join([
            '"node.id" = 1',
            f'"listeners" = "http://127.0.0.1:{self.http_port},PLAINTEXT://127.0.0.1:{self.kafka_port}"',
            f'"log.dirs" = "{d / "data"}"', '"log.cleaner.enable" = false',
            f'"fetch.zero.copy.enable" = {"true" if zero_copy else "false"}']) + "\n")
        self.log = open(d / "node.log", "wb")
        self.proc = subprocess.Popen([str(LAKELOG), "node", "--config", str(cfg)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.bootstrap = f"127.0.0.1:{self.kafka_port}"
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the node exited with {self.proc.returncode}")
            try:
                if httpx.get(f"http://127.0.0.1:{self.http_port}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the node did not become ready")

    def cpu_s(self) -> float:
        return _proc_cpu_s(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def produce(node: Node, records: int) -> None:
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        f.result(60)
    p = Producer({"bootstrap.servers": node.bootstrap, "acks": "all", "batch.size": 1 << 20, "linger.ms": 5,
                  "compression.type": "none", "queue.buffering.max.kbytes": 256 * 1024})
    values = [os.urandom(RECORD_BYTES) for _ in range(64)]
    for i in range(records):
        while True:
            try:
                p.produce(TOPIC, value=values[i % len(values)], partition=i % PARTITIONS)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10_000 == 0:
            p.poll(0)
    if p.flush(120) != 0:
        raise RuntimeError("the produce did not complete")


def consume_round(node: Node, records: int) -> tuple[float, float, int]:
    """Consume every record once: (wall seconds, node CPU seconds, value bytes)."""
    c = Consumer({"bootstrap.servers": node.bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "fetch.max.bytes": 50 * MB, "max.partition.fetch.bytes": 1 << 20,
                  "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = size = 0
        cpu0, t0 = node.cpu_s(), time.perf_counter()
        deadline = time.monotonic() + CONSUME_TIMEOUT_S
        while got < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumed {got} of {records} records in {CONSUME_TIMEOUT_S} s")
            for m in c.consume(num_messages=10_000, timeout=1.0):
                if m.error() is None:
                    got += 1
                    size += len(m.value())
        return time.perf_counter() - t0, node.cpu_s() - cpu0, size
    finally:
        c.close()


def run(records: int, rounds: int) -> dict[str, list[tuple[float, float, int]]]:
    work = Path(tempfile.mkdtemp(prefix="kafka-fetch-bench-"))
    nodes: dict[str, Node] = {}
    try:
        nodes["zero-copy"] = Node(work, "zero-copy", True)
        nodes["read-and-send"] = Node(work, "read-and-send", False)
        for node in nodes.values():
            produce(node, records)
        for node in nodes.values():  # warm-up: page cache and code paths
            consume_round(node, records)
        names = list(nodes)
        out: dict[str, list[tuple[float, float, int]]] = {n: [] for n in names}
        for r in range(rounds):
            for name in (names if r % 2 == 0 else reversed(names)):
                out[name].append(consume_round(nodes[name], records))
        return out
    finally:
        for node in nodes.values():
            node.stop()
        shutil.rmtree(work, ignore_errors=True)


def report(results: dict[str, list[tuple[float, float, int]]], records: int, rounds: int, others: float | None,
           note: str) -> tuple[str, str]:
    rows = []
    for name, runs in results.items():
        rates = [records / wall for wall, _, _ in runs]
        cpu_per_mb = [cpu * 1000 / (size / MB) for _, cpu, size in runs]
        rows.append([name, f"{max(rates):,.0f}", f"{statistics.median(rates):,.0f}",
                     f"{statistics.median(records * RECORD_BYTES / MB / w for w, _, _ in runs):,.1f}",
                     f"{statistics.median(cpu_per_mb):.2f}"])
    zc, rs = results["zero-copy"], results["read-and-send"]
    rate_ratio = statistics.median(b[0] / a[0] for a, b in zip(zc, rs))  # wall(read) / wall(zero-copy)
    cpu_ratio = statistics.median((a[1] / a[2]) / (b[1] / b[2]) for a, b in zip(zc, rs))
    headers = ["path", "best records/s", "median records/s", "median MB/s", "node CPU ms per MB (median)"]
    info = machine_info(tempfile.gettempdir())
    summary = (f"zero-copy / read-and-send: records/s x{rate_ratio:.2f}, node CPU per MB x{cpu_ratio:.2f} "
               f"(paired by round, median of {rounds}).")
    text = text_table(headers, rows) + "\n" + summary
    md = "\n".join([
        "### Kafka Fetch: zero-copy against read-and-send",
        "",
        f"`{command_line()}` at `{git_revision(ROOT)}`: {records:,} records of {RECORD_BYTES} B in "
        f"{PARTITIONS} partitions, consumed by confluent-kafka from one node with "
        "`fetch.zero.copy.enable=true` and one with `false`, alternated over "
        f"{rounds} rounds after a warm-up round each (segments in the page cache on both).",
        "",
        markdown_table(headers, rows),
        "",
        summary,
        "",
        f"Machine: {info['nproc']} CPUs ({info['cpu']}), {info['memory']}, {info['python']}, {info['kernel']}; "
        f"load {info['load']}. {conditions(info['nproc'], others, note)}",
    ])
    return text, md


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--note", default="", help="what else ran on the machine, for the report")
    args = parser.parse_args()
    others = OtherCpu()
    results = run(args.records, args.rounds)
    text, md = report(results, args.records, args.rounds, others.cpus(), args.note)
    print(text)
    if not args.no_write:
        rewrite_section(ROOT / "docs" / "benchmarks.md", "kafka-fetch", md)


if __name__ == "__main__":
    main()
