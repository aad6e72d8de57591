"""Broker-level settings of consumer groups and consumer instances (Kafka's names where Kafka has one,
the REST Proxy's `consumer.*` names for the HTTP consumer instances), declared once; ingest_api/config/node.py
adds them to the node's keys."""

from __future__ import annotations

from lakelog.infra.config import INT_MAX, ConfigDef

MIB = 1024 * 1024

GROUP_CONFIG = (
    ConfigDef()
    # -- the coordinator and __consumer_offsets
    .define("offsets.topic.num.partitions", int, 50,
            "Partitions of __consumer_offsets; group G is coordinated by the leader of partition "
            "abs(G.hashCode()) % this. Fixed once the topic exists.", min=1, max=1000)
    .define("offsets.topic.replication.factor", int, 3,
            "Replication factor of __consumer_offsets (capped by the live nodes when it is created).",
            min=1, max=32)
    .define("offsets.topic.segment.bytes", int, 100 * MIB,
            "segment.bytes of __consumer_offsets (small segments let the cleaner compact sooner).",
            min=1024, max=INT_MAX, unit="bytes")
    .define("offsets.retention.minutes", int, 7 * 24 * 60,
            "Committed offsets of a group without members are deleted this long after the group "
            "became empty (or after their commit, whichever is later).", min=1, max=INT_MAX, unit="min")
    .define("offsets.retention.check.interval.ms", int, 600_000, "How often expired offsets are deleted.",
            min=10, max=INT_MAX, unit="ms")
    .define("offset.metadata.max.bytes", int, 4096, "Longest metadata string of a committed offset.",
            min=0, max=32767, unit="bytes")
    .define("group.min.session.timeout.ms", int, 6000, "Shortest session.timeout.ms a member may ask for.",
            min=1, max=INT_MAX, unit="ms")
    .define("group.max.session.timeout.ms", int, 1_800_000, "Longest session.timeout.ms a member may ask for.",
            min=1, max=INT_MAX, unit="ms")
    .define("group.max.size", int, 1000, "Most members of one group.", min=1, max=100_000)
    .define("group.initial.rebalance.delay.ms", int, 3000,
            "How long the first rebalance of an empty group waits for more members to join.",
            min=0, max=INT_MAX, unit="ms")
    .define("group.coordinator.tick.ms", int, 100,
            "How often the coordinator checks session and rebalance timeouts and its partitions' leadership.",
            min=5, max=60_000, unit="ms")
    # -- consumer instances (the REST Proxy side)
    .define("consumer.instance.timeout.ms", int, 300_000,
            "A consumer instance not used (no request) for this long is deleted.", min=100, max=INT_MAX, unit="ms")
    .define("consumer.max.instances", int, 1000, "Most consumer instances one node holds.", min=1, max=100_000)
    .define("consumer.request.timeout.ms", int, 1000,
            "How long GET .../records waits for records when the request gives no timeout.",
            min=0, max=600_000, unit="ms")
    .define("consumer.request.max.bytes", int, 64 * MIB,
            "Upper bound on the bytes of records one GET .../records returns (its max_bytes).",
            min=1024, max=INT_MAX, unit="bytes")
    .define("consumer.max.poll.records", int, 500, "Most records one GET .../records returns.",
            min=1, max=100_000)
    .define("consumer.session.timeout.ms", int, 10_000,
            "session.timeout.ms of an instance created without one.", min=1, max=INT_MAX, unit="ms")
    .define("consumer.heartbeat.interval.ms", int, 3000,
            "heartbeat.interval.ms of an instance created without one.", min=1, max=INT_MAX, unit="ms")
    .define("consumer.auto.commit.interval.ms", int, 5000,
            "auto.commit.interval.ms of an instance created without one.", min=1, max=INT_MAX, unit="ms")
    .define("consumer.partition.assignment.strategy", str, "range",
            "partition.assignment.strategy of an instance created without one: range, roundrobin, sticky "
            "(comma-separated, in preference order).")
)
