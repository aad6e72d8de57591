"""What Kafka transactions cost on the Kafka door: one real `lakelog node`, confluent-kafka, same run.

    python bench/transactions.py --peer kafka   # about 6 minutes on a quiet 2-core machine; writes docs/benchmarks.md
    python bench/transactions.py                # Lakelog alone
    python bench/transactions.py --quick        # a smoke run (nothing written)

* produce  — the same records (acks=all, linger.ms=5, RF 1, one partition) produced by an idempotent
             producer and by a transactional one committing every 1,000 records, alternated round by
             round (`bench.harness.alternate`), for each `--value-bytes` (default 100 and 1,024, the
             size of the other Kafka benches); target: transactional >= 0.8x idempotent records/s.
             Each round times the produce loop and the final flush; making the producer and its
             InitProducerId are outside the timing for both. The transactional rounds also time
             `commit_transaction` alone (the flush of the transaction's records, AddPartitionsToTxn,
             Produce and EndTxn, which librdkafka sends one after another).
* peer     — `--peer kafka`: the very same produce cases against one Apache Kafka 4.1 broker
             (KRaft, `.jars/kafka`, started as bench/peer_kafka.py does), so the table says whether
             the 0.8x target is reachable for Kafka itself with this client and these settings.
* fetch    — the topic the transactional rounds of the first value size wrote (markers included)
             read whole by a consumer with isolation.level=read_uncommitted and with read_committed,
             alternated (Lakelog only); target: read_committed >= 0.9x read_uncommitted records/s.
The ratio is the median of the rounds' paired ratios (`paired_ratio`). Apache Kafka's own
transactional ProducerPerformance (`--transactional-id`, `--transaction-duration-ms`) against the
Kafka door, issue 29's other baseline, is `bench/kafka_perf.py --only transactional`.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench import peer_kafka  # noqa: E402
from bench.harness import (  # noqa: E402
    OtherCpu,
    alternate,
    command_line,
    conditions,
    git_revision,
    machine_info,
    markdown_table,
    paired_ratio,
    rewrite_section,
)
from bench.node import fmt_count_rate, verdict_at_least  # noqa: E402
from tests.support.nodes import start_node  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PER_TRANSACTION = 1000
#: The coordinator and offsets topics' partitions on both sides (a few: created on first use).
STATE_PARTITIONS = "3"


class Side:
    """A server under test: its name in the table, its bootstrap servers, how to stop it."""

    def __init__(self, name: str, bootstrap: str, stop: Callable[[], None]) -> None:
        self.name = name
        self.bootstrap = bootstrap
        self.stop = stop


def _start_lakelog(work: Path) -> Side:
    node = start_node(work / "lakelog", kafka=True, **{
        "log.cleaner.enable": "false", "transaction.state.log.num.partitions": STATE_PARTITIONS,
        "offsets.topic.num.partitions": STATE_PARTITIONS})

    def stop() -> None:
        try:
            node.stop()
        finally:
            node.kill()
    return Side("Lakelog", node.bootstrap, stop)


def _start_kafka(work: Path) -> Side:
    cluster = peer_kafka.KafkaCluster(work, 1, {"transaction.state.log.num.partitions": STATE_PARTITIONS,
                                                "offsets.topic.num.partitions": STATE_PARTITIONS})
    return Side("Kafka 4.1", cluster.bootstrap, cluster.stop)


def _create_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(n, 1, 1) for n in names]).values():
        f.result(120)


def _produce(bootstrap: str, topic: str, records: int, value: bytes, transactional: bool,
             commits: list[float]):
    def run() -> float:
        # Setup (the producer, its connections and InitProducerId) is outside the timing for both
        # cases: a new transactional id's first InitProducerId (the coordinator finding or loading
        # its partition) would weigh on a round as a one-off.
        conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True}
        if transactional:
            conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
        p = Producer(conf)
        if transactional:
            p.init_transactions(60)
        else:  # its producer id and a connection to the leader, as the transactional one after its init
            p.produce(topic, value, partition=0)
            assert p.flush(60) == 0
        committing = 0.0
        started = time.monotonic()
        for start in range(0, records, PER_TRANSACTION):
            if transactional:
                p.begin_transaction()
            for _ in range(min(PER_TRANSACTION, records - start)):
                while True:
                    try:
                        p.produce(topic, value, partition=0)
                        break
                    except BufferError:
                        p.poll(0.01)
            if transactional:
                t = time.monotonic()
                p.commit_transaction(60)
                committing += time.monotonic() - t
        assert p.flush(60) == 0
        elapsed = time.monotonic() - started
        if transactional:
            commits.append(committing / -(-records // PER_TRANSACTION))
        return elapsed
    return run


def _consume(bootstrap: str, topic: str, isolation: str, expected: int):
    def run() -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                      "isolation.level": isolation, "enable.auto.commit": False})
        c.assign([TopicPartition(topic, 0, 0)])
        got = 0
        try:
            while got < expected:
                for m in c.consume(1000, 1.0):
                    if not m.error():
                        got += 1
        finally:
            c.close()
    return run


def _records_for(value_bytes: int, quick: bool, records: int | None) -> int:
    if records:
        return records
    if quick:
        return 5_000
    return 500_000 if value_bytes <= 100 else 200_000


def _produce_rows(side: Side, sizes: list[int], args, rounds: int) -> tuple[list[list[str]], list[str]]:
    """The produce cases on one side for every value size: table rows, and the raw rounds."""
    rows, raw = [], []
    for size in sizes:
        records = _records_for(size, args.quick, args.records)
        idem, txn = f"idem-{size}", f"txn-{size}"
        _create_topics(side.bootstrap, [idem, txn])
        commits: list[float] = []
        value = b"v" * size
        produced = alternate({"idempotent": _produce(side.bootstrap, idem, records, value, False, commits),
                              "transactional": _produce(side.bootstrap, txn, records, value, True, commits)},
                             rounds=rounds, warmup=1)
        ratio = paired_ratio(produced["idempotent"], produced["transactional"])
        idem_s, txn_s = produced["idempotent"].median, produced["transactional"].median
        measured_commits = commits[1:]  # the warm-up round's first
        rows.append([side.name, f"{size:,} B", fmt_count_rate(records / idem_s), fmt_count_rate(records / txn_s),
                     f"{ratio:.2f}x", verdict_at_least(ratio, 0.8),
                     f"{idem_s / records * PER_TRANSACTION * 1000:.2f}",
                     f"{txn_s / records * PER_TRANSACTION * 1000:.2f}",
                     f"{statistics.median(measured_commits) * 1000:.2f}"])
        raw.append(f"{side.name} {size} B: idempotent " + ", ".join(f"{records / s:,.0f}" for s in
                                                                  produced["idempotent"].samples)
                   + "; transactional " + ", ".join(f"{records / s:,.0f}" for s in produced["transactional"].samples))
        print(f"{side.name}, {size} B: {ratio:.2f}x", flush=True)
    return rows, raw


def _fetch_rows(side: Side, size: int, args, rounds: int) -> list[list[str]]:
    """read_committed against read_uncommitted over the transactional topic of `size`."""
    records = _records_for(size, args.quick, args.records)
    in_txn = records * (rounds + 1)  # the warm-up round wrote too
    topic = f"txn-{size}"
    fetched = alternate({"read_uncommitted": _consume(side.bootstrap, topic, "read_uncommitted", in_txn),
                         "read_committed": _consume(side.bootstrap, topic, "read_committed", in_txn)},
                        rounds=rounds, warmup=1)
    ratio = paired_ratio(fetched["read_uncommitted"], fetched["read_committed"])
    return [[side.name, f"{size:,} B", fmt_count_rate(in_txn / fetched["read_uncommitted"].median),
             fmt_count_rate(in_txn / fetched["read_committed"].median), f"{ratio:.2f}x", verdict_at_least(ratio, 0.9)]]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="5,000 records, 3 rounds; nothing written")
    ap.add_argument("--peer", choices=("kafka",), default=None,
                    help="also run the produce cases against one Apache Kafka 4.1 broker (.jars/kafka)")
    ap.add_argument("--value-bytes", default="100,1024",
                    help="value sizes, comma-separated (default 100,1024); the fetch case uses the first")
    ap.add_argument("--records", type=int, default=None,
                    help="records per produce round (default 500,000 at <= 100 B, 200,000 above)")
    ap.add_argument("--rounds", type=int, default=None, help="measured rounds (default 5; --quick 3)")
    ap.add_argument("--note", default="", help="what else ran, written with the figures")
    ap.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    args = ap.parse_args()
    sizes = [int(s) for s in args.value_bytes.split(",") if s.strip()]
    if not sizes or min(sizes) < 1:
        ap.error("--value-bytes needs sizes of at least 1 byte")
    rounds = args.rounds or (3 if args.quick else 5)
    if args.peer:
        peer_kafka.resolve_jars()
    others = OtherCpu()
    load_start = machine_info(tempfile.gettempdir())["load"]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    produce_rows: list[list[str]] = []
    fetch_rows: list[list[str]] = []
    raw: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="bench-transactions-"))
    try:
        starts = [_start_lakelog] + ([_start_kafka] if args.peer else [])
        for n, start in enumerate(starts):
            side = start(work)
            try:
                rows, side_raw = _produce_rows(side, sizes, args, rounds)
                produce_rows += rows
                raw += side_raw
                if n == 0:
                    fetch_rows = _fetch_rows(side, sizes[0], args, rounds)
            finally:
                side.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    info = machine_info(tempfile.gettempdir())
    produce_table = markdown_table(
        ["server", "value", "idempotent", "transactional (1,000 records / transaction)", "ratio (paired)",
         "target >= 0.8x", "ms / 1,000 records: idempotent", "transactional", "of which commit_transaction"],
        produce_rows)
    fetch_table = markdown_table(["server", "value", "read_uncommitted", "read_committed", "ratio (paired)",
                                  "target >= 0.9x"], fetch_rows)
    print(produce_table, fetch_table, sep="\n\n")
    if args.quick or args.no_write:
        return 0
    text = "\n".join([
        "### Transactions (Kafka door, confluent-kafka)", "",
        f"`{command_line()}` at {git_revision(ROOT)}, {started}; one partition, replication factor 1, "
        f"acks=all, linger.ms=5, enable.idempotence; records per round: "
        + ", ".join(f"{_records_for(s, False, args.records):,} x {s:,} B" for s in sizes)
        + f"; median of {rounds} alternated rounds after a warm-up round. "
        + ", ".join(f"{k} {v}" for k, v in info.items() if k != "load")
        + f"; 1-min load {load_start} at the start, {info['load']} at the end. "
        + conditions(info["nproc"], others.cpus(), args.note), "",
        produce_table, "",
        "Rates are records/s. \"ms / 1,000 records\" is the median round's time per 1,000 records; "
        "\"of which commit_transaction\" the median round's mean time in `commit_transaction` (librdkafka "
        "sends AddPartitionsToTxn, then the transaction's Produce, then EndTxn, one after another).", "",
        fetch_table, "",
        "All rounds (records/s): " + "; ".join(raw)])
    rewrite_section(ROOT / "docs" / "benchmarks.md", "transactions", text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
