"""Per-principal quotas as token buckets: produce bytes/s, fetch bytes/s, requests/s.

Each principal has one bucket per quota, holding at most `rate * window_s` tokens (the burst) and
refilled at `rate` per second. A request is admitted while every bucket it draws on is not in debt;
its cost is taken after it is known (the produce body's length on arrival, the fetch response's
length once sent), so a bucket may go negative — the debt is what the principal took beyond its
rate, and its next requests are answered 429 with `Retry-After` until the refill pays it back
(Kafka throttles the same way: the delay is the time the overshoot takes to drain). Nothing is
queued: a throttled request is refused before its body is read.

Rates come from the node config (`quota.producer.byte.rate`, `quota.consumer.byte.rate`,
`quota.request.rate`; 0 = unlimited) with per-principal overrides: in the cluster metadata (set
through the admin API; `dynamic`, key by key) before those of the config (`quota.overrides`). The clock
is passed in, so the buckets are deterministic under test. Buckets of principals idle for a while
are dropped (bounded memory). Concurrency: one thread (the event loop).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

PRODUCE = "producer.byte.rate"
FETCH = "consumer.byte.rate"
REQUEST = "request.rate"
QUOTA_KEYS = (PRODUCE, FETCH, REQUEST)
MAX_PRINCIPALS = 100_000


class TokenBucket:
    __slots__ = ("rate", "capacity", "tokens", "updated")

    def __init__(self, rate: float, window_s: float, now: float) -> None:
        self.rate = float(rate)
        self.capacity = self.rate * window_s
        self.tokens = self.capacity
        self.updated = now

    def _refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def delay_s(self, now: float, need: float = 0.0) -> float:
        """0 when the bucket holds at least `need` tokens, else the seconds until it will."""
        self._refill(now)
        if self.tokens >= need:
            return 0.0
        return (need - self.tokens) / self.rate if self.rate > 0 else math.inf

    def take(self, now: float, amount: float) -> None:
        self._refill(now)
        self.tokens -= amount


@dataclass(frozen=True)
class QuotaLimits:
    producer_byte_rate: float = 0  # 0 = unlimited
    consumer_byte_rate: float = 0
    request_rate: float = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "_rates", {PRODUCE: self.producer_byte_rate, FETCH: self.consumer_byte_rate,
                                            REQUEST: self.request_rate})

    def get(self, key: str) -> float:
        return self._rates[key]  # type: ignore[attr-defined]


def parse_overrides(text: str) -> dict[str, QuotaLimits]:
    """`quota.overrides`: JSON {"User:alice": {"producer.byte.rate": 1048576, ...}, ...}."""
    if not text.strip():
        return {}
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("quota.overrides must be a JSON object of principal -> {quota key: rate}")
    out: dict[str, QuotaLimits] = {}
    for principal, limits in doc.items():
        if not isinstance(principal, str) or not principal.startswith("User:") or not isinstance(limits, dict):
            raise ValueError("quota.overrides maps User:NAME to an object")
        for k, v in limits.items():
            if k not in QUOTA_KEYS or isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise ValueError(f"quota.overrides[{principal}]: {k!r} must be one of {QUOTA_KEYS} with a rate >= 0")
        out[principal] = QuotaLimits(float(limits.get(PRODUCE, 0)), float(limits.get(FETCH, 0)),
                                     float(limits.get(REQUEST, 0)))
    return out


class QuotaManager:
    def __init__(self, defaults: QuotaLimits, overrides: dict[str, QuotaLimits] | None = None,
                 window_s: float = 1.0, idle_s: float = 600.0) -> None:
        self.defaults = defaults
        self.overrides = dict(overrides or {})
        self.window_s = window_s
        self.idle_s = idle_s
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self.dynamic: dict[str, dict[str, float]] = {}
        self._static_enabled = any(self.defaults.get(k) for k in QUOTA_KEYS) or any(
            lim.get(k) for lim in self.overrides.values() for k in QUOTA_KEYS)
        self.enabled = self._static_enabled

    def set_dynamic(self, overrides: dict[str, dict[str, float]]) -> None:
        """The overrides of the cluster metadata (principal -> {quota key: rate}), replacing the previous ones."""
        self.dynamic = {p: dict(q) for p, q in overrides.items()}
        self.enabled = self._static_enabled or any(v for q in self.dynamic.values() for v in q.values())

    def rate(self, principal: str, key: str) -> float:
        dyn = self.dynamic.get(principal)
        if dyn is not None and key in dyn:
            return dyn[key]
        return self.overrides.get(principal, self.defaults).get(key)

    def limits(self, principal: str) -> QuotaLimits:
        return self.overrides.get(principal, self.defaults)

    def _bucket(self, principal: str, key: str, now: float) -> TokenBucket | None:
        rate = self.rate(principal, key)
        if not rate:
            return None
        b = self._buckets.get((principal, key))
        if b is None or b.rate != rate:
            if len(self._buckets) >= MAX_PRINCIPALS:
                self._evict(now)
            b = self._buckets[(principal, key)] = TokenBucket(rate, self.window_s, now)
        return b

    def _evict(self, now: float) -> None:
        for k in [k for k, b in self._buckets.items() if now - b.updated > self.idle_s] or list(self._buckets)[:1000]:
            del self._buckets[k]

    def admit(self, principal: str, keys: tuple[str, ...], now: float) -> float:
        """0.0 to admit a request drawing on `keys` (and count it against request.rate), else the delay in s."""
        delay = 0.0
        requests = None
        for key in keys:
            b = self._bucket(principal, key, now)
            if b is not None:
                if key == REQUEST:
                    requests = b
                    delay = max(delay, b.delay_s(now, 1.0))
                else:
                    delay = max(delay, b.delay_s(now))
        if delay == 0.0 and requests is not None:
            requests.take(now, 1.0)
        return delay

    def record(self, principal: str, key: str, amount: float, now: float) -> None:
        b = self._bucket(principal, key, now)
        if b is not None and amount > 0:
            b.take(now, amount)
