"""Counters and a latency histogram of the remote tier, for the node's /metrics.

What the issue asks for, and where it comes from:
  * bytes and segments uploaded            — `bytes_uploaded`, `segments_uploaded`
  * upload lag (segments and bytes sealed locally but not yet tiered), per partition — `upload_lag`
  * remote fetch latency                   — `remote_fetch_latency` (histogram, ms)
  * cache hit rate                         — the index and chunk caches' hits / misses
  * S3 requests per MB                     — the store's requests by kind and bytes moved
    (`requests_per_mib_written` = PUTs / MiB written, `requests_per_mib_read` = GETs / MiB read)

Concurrency: thread-safe; `snapshot()` returns plain dicts (no live references).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from typing import Any, Callable

MIB = 1024 * 1024
LATENCY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 30_000)


class LatencyHistogram:
    """Cumulative-bucket histogram of durations in milliseconds (Prometheus style)."""

    def __init__(self, buckets_ms: tuple[float, ...] = LATENCY_BUCKETS_MS) -> None:
        self.buckets_ms = buckets_ms
        self._counts = [0] * (len(buckets_ms) + 1)
        self._sum_ms = 0.0
        self._count = 0
        self._lock = threading.Lock()

    def observe(self, ms: float) -> None:
        with self._lock:
            self._counts[bisect_left(self.buckets_ms, ms)] += 1
            self._sum_ms += ms
            self._count += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            cumulative, total = [], 0
            for c in self._counts:
                total += c
                cumulative.append(total)
            return {"count": self._count, "sum_ms": self._sum_ms,
                    "buckets": {**{str(b): n for b, n in zip(self.buckets_ms, cumulative)}, "+Inf": cumulative[-1]}}


class TieringMetrics:
    """Counters of one node's remote tier."""

    COUNTERS = ("bytes_uploaded", "segments_uploaded", "upload_failures", "segments_abandoned",
                "segments_deleted", "bytes_deleted", "orphans_deleted", "fenced_commits",
                "remote_fetches", "remote_fetch_bytes", "remote_fetch_errors", "corrupt_reads",
                "timestamp_lookups", "prefetches")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters = {name: 0 for name in self.COUNTERS}
        self.remote_fetch_latency = LatencyHistogram()
        self._upload_lag: dict[tuple[str, int], tuple[int, int]] = {}
        self._sources: dict[str, Callable[[], dict]] = {}

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counters[name] += amount

    def get(self, name: str) -> int:
        with self._lock:
            return self._counters[name]

    def set_upload_lag(self, topic: str, partition: int, segments: int, size_in_bytes: int) -> None:
        with self._lock:
            self._upload_lag[(topic, partition)] = (segments, size_in_bytes)

    def forget_partition(self, topic: str, partition: int) -> None:
        with self._lock:
            self._upload_lag.pop((topic, partition), None)

    def add_source(self, name: str, snapshot: Callable[[], dict]) -> None:
        """Include another component's `snapshot()` (the store's stats, a cache's) under `name`."""
        self._sources[name] = snapshot

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = dict(self._counters)
            lag = dict(self._upload_lag)
        out["upload_lag"] = {f"{t}-{p}": {"segments": s, "bytes": b} for (t, p), (s, b) in sorted(lag.items())}
        out["upload_lag_segments"] = sum(s for s, _ in lag.values())
        out["upload_lag_bytes"] = sum(b for _, b in lag.values())
        out["remote_fetch_latency"] = self.remote_fetch_latency.snapshot()
        for name, source in self._sources.items():
            out[name] = source()
        store = out.get("store")
        if store:
            written_mib = store["bytes_written"] / MIB
            read_mib = store["bytes_read"] / MIB
            req = store["requests"]
            out["requests_per_mib_written"] = req["PUT"] / written_mib if written_mib else 0.0
            out["requests_per_mib_read"] = req["GET"] / read_mib if read_mib else 0.0
        for cache in ("index_cache", "chunk_cache"):
            c = out.get(cache)
            if c:
                looked = c["hits"] + c["misses"]
                c["hit_rate"] = c["hits"] / looked if looked else 0.0
        return out
