"""Broker-level settings of the transaction coordinator and `__transaction_state` (Kafka's names),
declared once; ingest_api/config/node.py adds them to the node's keys."""

from __future__ import annotations

from lakelog.infra.config import INT_MAX, ConfigDef

MIB = 1024 * 1024

TRANSACTION_CONFIG = (
    ConfigDef()
    .define("transaction.state.log.num.partitions", int, 50,
            "Partitions of __transaction_state; transactional id T is coordinated by the leader of partition "
            "abs(T.hashCode()) % this. Fixed once the topic exists.", min=1, max=1000)
    .define("transaction.state.log.replication.factor", int, 3,
            "Replication factor of __transaction_state (capped by the live nodes when it is created).",
            min=1, max=32)
    .define("transaction.state.log.min.isr", int, 2,
            "min.insync.replicas of __transaction_state (capped by its replication factor).", min=1, max=32)
    .define("transaction.state.log.segment.bytes", int, 100 * MIB,
            "segment.bytes of __transaction_state (small segments let the cleaner compact sooner).",
            min=1024, max=INT_MAX, unit="bytes")
    .define("transaction.max.timeout.ms", int, 900_000,
            "Longest transaction.timeout.ms a producer may ask for (InitProducerId answers "
            "INVALID_TRANSACTION_TIMEOUT above it).", min=1, max=INT_MAX, unit="ms")
    .define("transactional.id.expiration.ms", int, 604_800_000,
            "A transactional id without a transaction in progress and unused this long is forgotten "
            "(a tombstone in __transaction_state).", min=1, max=INT_MAX, unit="ms")
    .define("transaction.abort.timed.out.transaction.cleanup.interval.ms", int, 10_000,
            "How often the coordinator aborts transactions open longer than their transaction.timeout.ms.",
            min=1, max=INT_MAX, unit="ms")
    .define("transaction.remove.expired.transaction.cleanup.interval.ms", int, 3_600_000,
            "How often the coordinator forgets transactional ids past transactional.id.expiration.ms.",
            min=1, max=INT_MAX, unit="ms")
    .define("transaction.coordinator.tick.ms", int, 100,
            "How often the coordinator checks its __transaction_state partitions' leadership and retries "
            "markers not written yet.", min=5, max=60_000, unit="ms")
    .define("transaction.marker.max.attempts", int, 0,
            "Attempts at writing one transaction marker before the coordinator logs it and retries it "
            "only on its next tick; 0 retries until the marker is written (the transaction must complete).",
            min=0, max=INT_MAX)
)
