"""The wait between a partition's failed copy rounds: a store that fails or hangs is not asked
again every task interval, and uploads resume on their own once it answers.

    backoff = UploadBackoff(base_ms=500, max_ms=30_000)
    if backoff.ready(key):
        try:
            copy round ...
            backoff.succeeded(key)
        except ...:
            backoff.failed(key)          # the next round of `key` waits base, 2 x base, ... max

A round that fails waits `base_ms * 2 ** (failures in a row - 1)`, at most `max_ms`; a round that
succeeds clears the partition's count. Nothing is skipped or reordered by waiting: the next round
starts from the manifest's end, as every round does (tiering/uploader.py).

Invariant (checked by `invariant()`): a partition's failures in a row are >= 1 while it waits.

The clock is passed in (monotonic seconds): waits never follow the wall clock.

Concurrency: thread-safe (one lock, never held over I/O).
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Hashable

from lakelog.infra.errors import invariant


class UploadBackoff:
    """Per-partition waits after failed copy rounds (see the module docstring)."""

    def __init__(self, *, base_ms: int, max_ms: int, clock: Callable[[], float] = time.monotonic) -> None:
        if base_ms < 0 or max_ms < base_ms:
            raise ValueError("the backoff needs 0 <= base_ms <= max_ms")
        self.base_ms = base_ms
        self.max_ms = max_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._waiting: dict[Hashable, tuple[int, float]] = {}  # key -> (failures in a row, retry at)

    def ready(self, key: Hashable) -> bool:
        """May a copy round of `key` run now?"""
        with self._lock:
            entry = self._waiting.get(key)
            return entry is None or self._clock() >= entry[1]

    def failed(self, key: Hashable) -> float:
        """A round of `key` failed: the seconds it now waits."""
        with self._lock:
            failures = self._waiting.get(key, (0, 0.0))[0] + 1
            wait_s = min(self.max_ms, self.base_ms * 2 ** min(failures - 1, 30)) / 1000
            self._waiting[key] = (failures, self._clock() + wait_s)
            invariant(failures >= 1, "a partition that waits has failed at least once")
            return wait_s

    def succeeded(self, key: Hashable) -> None:
        with self._lock:
            self._waiting.pop(key, None)

    def failures(self, key: Hashable) -> int:
        """Failed rounds of `key` in a row (0 when its last round succeeded)."""
        with self._lock:
            return self._waiting.get(key, (0, 0.0))[0]

    def forget(self, key: Hashable) -> None:
        self.succeeded(key)
