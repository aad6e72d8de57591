"""Replication throttles (Kafka's KIP-73): dynamic broker rates and per-topic throttled replica lists.

Broker configs, dynamic only (as in Kafka: they are not read from node.toml), kept in the metadata
log with every other dynamic broker config (ingest_api/cluster/broker_configs.py: one record type,
`broker_configs`, one controller op, `alter_dynamic_broker_configs`), so every node sees the same
values and a restart keeps them:

    leader.replication.throttled.rate     bytes/s a leader sends to throttled followers, all partitions
    follower.replication.throttled.rate   bytes/s a follower fetches for its throttled replicas

each set for one broker (node id) or as the cluster-wide default (`CLUSTER_DEFAULT`, Confluent's
`broker-configs`); a broker's own value wins (`BrokerConfigState.rate`). Unset: no throttle.

Topic configs (declared in `infra/config.py` with the other topic keys):

    leader.replication.throttled.replicas    "*" or "partition:broker,...": broker b, while it leads
                                             partition p, throttles what it sends to followers
    follower.replication.throttled.replicas  "*" or "partition:broker,...": broker b's replica of p
                                             throttles its own fetches

(Kafka's meaning: `kafka-reassign-partitions --throttle` lists a moving partition's current replicas
on the leader side and its new replicas on the follower side.) As in Kafka, only replicas that are
out of the ISR are throttled: catch-up traffic (a reassignment's new replicas, a restarted node)
waits, the ISR's traffic — what acks=all produces wait for — never.
A throttled fetch answers a partition with no records while the quota is spent; the follower asks
again, so the catch-up is slower, never wrong.

This module keeps the pure parts: the rate check, the throttled-replica lists and the quota.
(The rates' former record, `alter_broker_configs`, is still read on replay by broker_configs.py.)
"""

from __future__ import annotations

import threading
from typing import Any

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
RATE_KEYS = (LEADER_RATE, FOLLOWER_RATE)
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
CLUSTER_DEFAULT = -1

MAX_RATE = (1 << 63) - 1
#: Most throttled-replica entries one topic config may list.
MAX_THROTTLED_ENTRIES = 100_000


def check_rate(key: str, value: Any) -> int:
    """A throttle rate: a whole number of bytes per second, at least 1."""
    if key not in RATE_KEYS:
        raise ValueError(f"{key!r} is not a dynamic broker config ({', '.join(RATE_KEYS)})")
    try:
        rate = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{key} must be a whole number of bytes per second, not {value!r}") from None
    if not 1 <= rate <= MAX_RATE:
        raise ValueError(f"{key} must be in [1, {MAX_RATE}] bytes/s, not {rate}")
    return rate


def parse_throttled_replicas(value: str) -> frozenset[tuple[int, int]] | None:
    """`"*"` -> None (every replica); `"0:1,1:2"` -> {(0, 1), (1, 2)}; `""` -> empty. Raises ValueError."""
    value = value.strip()
    if value == "*":
        return None
    out: set[tuple[int, int]] = set()
    if not value:
        return frozenset()
    parts = value.split(",")
    if len(parts) > MAX_THROTTLED_ENTRIES:
        raise ValueError(f"at most {MAX_THROTTLED_ENTRIES} throttled replicas per topic")
    for item in parts:
        p, sep, b = item.strip().partition(":")
        if not sep or not p.strip().isdigit() or not b.strip().isdigit():
            raise ValueError(f"{item!r} is not partition:broker (the list is \"*\" or \"0:1,0:2,...\")")
        out.add((int(p), int(b)))
    return frozenset(out)


def validate_throttled_replicas(value: str) -> None:
    """The topic config validator (infra/config.py)."""
    parse_throttled_replicas(value)


def is_throttled(value: str, partition: int, broker: int) -> bool:
    """Whether `broker`'s replica of `partition` is listed in a throttled-replicas config value."""
    if not value:
        return False
    try:
        listed = parse_throttled_replicas(value)
    except ValueError:
        return False
    return listed is None or (partition, broker) in listed


class ThrottleQuota:
    """A byte-rate quota over a one-second window: spend, then wait until the window refills.

    `exceeded(now)` is True while more than `rate` bytes were recorded in the window; the window
    slides with time (a token bucket of one second's rate). Clock passed in; thread-safe.
    """

    def __init__(self) -> None:
        self._tokens = 0.0
        self._rate = 0
        self._at = 0.0
        self._lock = threading.Lock()

    def _refill(self, rate: int, now: float) -> None:
        if rate != self._rate:
            self._rate, self._tokens, self._at = rate, float(rate), now
            return
        self._tokens = min(float(rate), self._tokens + (now - self._at) * rate)
        self._at = now

    def allowance(self, rate: int, now: float) -> int:
        """Bytes that may be sent now (0 while the quota is spent)."""
        with self._lock:
            self._refill(rate, now)
            return max(0, int(self._tokens))

    def record(self, rate: int, size: int, now: float) -> None:
        with self._lock:
            self._refill(rate, now)
            self._tokens -= size
