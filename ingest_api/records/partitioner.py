"""Kafka's default partitioner: murmur2 of the key bytes, made positive, modulo partitions.

`murmur2` is the 32-bit MurmurHash2 variant Kafka's Java client uses (seed 0x9747b28c), so keyed
records land on the partition a Kafka producer would choose.
"""

from __future__ import annotations

import random

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2_python(data: bytes) -> int:
    """Kafka's murmur2 as a signed 32-bit int (the reference; `murmur2` is native when built)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[i * 4:i * 4 + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    tail = n4 * 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    return n & 0x7FFFFFFF


def partition_for_key_python(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2_python(key)) % num_partitions


try:  # the same hash in C (logstore/_batchbuild.c): a keyed record costs ~0.1 µs, not microseconds
    from lakelog.logstore._batchbuild import murmur2, partition_for_key
except ImportError:  # the extension is optional
    murmur2, partition_for_key = murmur2_python, partition_for_key_python


class StickyPartitioner:
    """Null keys stick to one randomly chosen partition for the whole request (Kafka's sticky rule)."""

    def __init__(self, num_partitions: int, rng: random.Random | None = None) -> None:
        self._partition = (rng or random).randrange(num_partitions)
        self.num_partitions = num_partitions

    def partition(self, key: bytes | None) -> int:
        if key is None:
            return self._partition
        return partition_for_key(key, self.num_partitions)
