"""What Kafka transactions cost on the Kafka door: one real `lakelog node`, confluent-kafka, same run.

    python bench/transactions.py            # a few minutes on a quiet 2-core machine; writes docs/benchmarks.md
    python bench/transactions.py --quick    # a smoke run (nothing written)

* produce  — the same records (100-byte values, acks=all, linger.ms=5) produced by an idempotent
             producer and by a transactional one committing every 1,000 records, alternated round by
             round (`bench.harness.alternate`); target: transactional >= 0.8x idempotent records/s.
             Each round times the produce loop and the final flush; making the producer and its
             InitProducerId are outside the timing for both.
* fetch    — the topic the transactional rounds wrote (markers included) read whole by a consumer with
             isolation.level=read_uncommitted and with read_committed, alternated; target:
             read_committed >= 0.9x read_uncommitted records/s.
The ratio is the median of the rounds' paired ratios (`paired_ratio`). Apache Kafka's own
transactional ProducerPerformance (`--transactional-id`, `--transaction-duration-ms`) against the
Kafka door, issue 29's other baseline, is `bench/kafka_perf.py --only transactional`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.harness import (  # noqa: E402
    alternate,
    command_line,
    git_revision,
    markdown_table,
    paired_ratio,
    rewrite_section,
)
from bench.node import fmt_count_rate, verdict_at_least  # noqa: E402
from tests.support.nodes import start_node  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PER_TRANSACTION = 1000
VALUE = b"v" * 100


def _produce(bootstrap: str, topic: str, records: int, transactional: bool):
    def run() -> float:
        # Setup (the producer, its connections and InitProducerId) is outside the timing for both
        # cases: a round is 500,000 records, and a new transactional id's first InitProducerId
        # (the coordinator finding or loading its partition) would weigh on it as a one-off.
        conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "enable.idempotence": True}
        if transactional:
            conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
        p = Producer(conf)
        if transactional:
            p.init_transactions(60)
        else:
            p.list_topics(topic, 60)  # connected, like the transactional producer after its init
        started = time.monotonic()
        for start in range(0, records, PER_TRANSACTION):
            if transactional:
                p.begin_transaction()
            for _ in range(min(PER_TRANSACTION, records - start)):
                while True:
                    try:
                        p.produce(topic, VALUE, partition=0)
                        break
                    except BufferError:
                        p.poll(0.01)
            if transactional:
                p.commit_transaction(60)
        assert p.flush(60) == 0
        return time.monotonic() - started
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    records = 5_000 if args.quick else 500_000
    rounds = 3 if args.quick else 5
    with tempfile.TemporaryDirectory() as tmp:
        node = start_node(Path(tmp) / "node", kafka=True, **{
            "log.cleaner.enable": "false", "transaction.state.log.num.partitions": "3",
            "offsets.topic.num.partitions": "3"})
        try:
            admin = AdminClient({"bootstrap.servers": node.bootstrap})
            for f in admin.create_topics([NewTopic("idem", 1, 1), NewTopic("txn", 1, 1)]).values():
                f.result(60)
            produced = alternate({"idempotent": _produce(node.bootstrap, "idem", records, False),
                                  "transactional": _produce(node.bootstrap, "txn", records, True)},
                                 rounds=rounds, warmup=1)
            in_txn = records * (rounds + 1)  # the warm-up round wrote too
            fetched = alternate({"read_uncommitted": _consume(node.bootstrap, "txn", "read_uncommitted", in_txn),
                                 "read_committed": _consume(node.bootstrap, "txn", "read_committed", in_txn)},
                                rounds=rounds, warmup=1)
        finally:
            try:
                node.stop()
            finally:
                node.kill()
    produce_ratio = paired_ratio(produced["idempotent"], produced["transactional"])
    fetch_ratio = paired_ratio(fetched["read_uncommitted"], fetched["read_committed"])
    rows = [
        ["produce, idempotent", fmt_count_rate(records / produced["idempotent"].median), "", ""],
        [f"produce, transactional ({PER_TRANSACTION} records / transaction)",
         fmt_count_rate(records / produced["transactional"].median), f"{produce_ratio:.2f}x",
         verdict_at_least(produce_ratio, 0.8)],
        ["fetch, read_uncommitted", fmt_count_rate(in_txn / fetched["read_uncommitted"].median), "", ""],
        ["fetch, read_committed", fmt_count_rate(in_txn / fetched["read_committed"].median), f"{fetch_ratio:.2f}x",
         verdict_at_least(fetch_ratio, 0.9)],
    ]
    table = markdown_table(["case", "median", "vs baseline (paired)", "target"], rows)
    print(table)
    if not args.quick:
        rewrite_section(ROOT / "docs" / "benchmarks.md", "transactions",
                        f"### Transactions (Kafka door)\n\n`{command_line()}` at {git_revision(ROOT)}, "
                        f"{records:,} records x {rounds} rounds\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
