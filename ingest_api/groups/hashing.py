"""Which partition of `__consumer_offsets` holds a group: `abs(hash(group_id)) % offsets.topic.num.partitions`.

As Kafka: `hash` is Java's `String.hashCode` (s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, in
signed 32-bit arithmetic) and `abs` is Kafka's `Utils.abs` (Java's `Math.abs`, except that
`abs(Integer.MIN_VALUE)` is 0 instead of staying negative). The leader of that partition is the group's
coordinator.
"""

from __future__ import annotations

OFFSETS_TOPIC = "__consumer_offsets"


def java_string_hashcode(s: str) -> int:
    """Java's String.hashCode: a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def kafka_abs(n: int) -> int:
    """Kafka's Utils.abs of a signed 32-bit int: |n|, and 0 for -2^31."""
    return 0 if n == -(1 << 31) else abs(n)


def coordinator_partition(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition of `group_id`."""
    if num_partitions < 1:
        raise ValueError("num_partitions must be >= 1")
    return kafka_abs(java_string_hashcode(group_id)) % num_partitions
