"""The object store's health as this node sees it: a circuit breaker with a half-open probe.

    HEALTHY --(failure_threshold consecutive failures)--> DEGRADED
    DEGRADED --(probe_interval_ms passed; one caller admitted as the probe)--> PROBING
    PROBING --(the probe succeeds)--> HEALTHY
    PROBING --(the probe fails)--> DEGRADED (the next probe one interval later)

A failure is the store not answering usefully: a transient error (timeout, connection refused,
5xx, throttling) or a deadline missed by a caller (`record_failure`). A "not found" or a lost
conditional write is an answer: it counts as a success. While DEGRADED (and while a probe is in
flight) `admit()` refuses every other caller at once, so requests fail fast with a retriable error
instead of queueing behind a store that does not answer; a probe in flight for longer than the
probe interval is presumed lost and another caller becomes the probe.

Invariants (checked by `invariant()` after every transition):
  * consecutive_failures >= 0;
  * while HEALTHY, consecutive_failures < failure_threshold (reaching it degrades the store).

The clock is passed in (monotonic seconds): durations never follow the wall clock.

Concurrency: thread-safe; every method takes the one lock briefly and never blocks on I/O.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass
from typing import Callable

from lakelog.infra.errors import invariant


class StoreState(enum.Enum):
    """The object store's health state (its value is the `lakelog_remote_store_state` gauge)."""

    HEALTHY = 0
    DEGRADED = 1
    PROBING = 2


@dataclass(frozen=True, slots=True)
class HealthSnapshot:
    """What `/readyz` and `/metrics` show."""

    state: StoreState
    consecutive_failures: int
    last_error: str | None
    #: Seconds until the next probe may be admitted (0 when HEALTHY or a probe may run now).
    retry_after_s: float
    #: Calls refused without touching the store, since start.
    fast_failures: int
    #: Transitions into DEGRADED, since start.
    degradations: int

    def as_dict(self) -> dict:
        return {"state": self.state.name.lower(), "consecutive_failures": self.consecutive_failures,
                "last_error": self.last_error, "retry_after_s": round(self.retry_after_s, 3),
                "fast_failures": self.fast_failures, "degradations": self.degradations}


class StoreHealth:
    """The circuit breaker in front of one object store (see the module docstring)."""

    def __init__(self, *, failure_threshold: int, probe_interval_ms: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if failure_threshold < 1 or probe_interval_ms < 1:
            raise ValueError("failure_threshold and probe_interval_ms must be >= 1")
        self.failure_threshold = failure_threshold
        self.probe_interval_s = probe_interval_ms / 1000
        self._clock = clock
        self._lock = threading.Lock()
        self._state = StoreState.HEALTHY
        self._failures = 0
        self._last_error: str | None = None
        self._since = clock()  # when DEGRADED or PROBING began (the probe's start while PROBING)
        self._fast_failures = 0
        self._degradations = 0

    @property
    def state(self) -> StoreState:
        with self._lock:
            return self._state

    def admit(self) -> bool:
        """May a call go to the store now? False: refuse it at once (the store is degraded).
        True while DEGRADED makes the caller the probe (it must report its outcome)."""
        with self._lock:
            if self._state == StoreState.HEALTHY:
                return True
            if self._clock() - self._since >= self.probe_interval_s:
                self._state = StoreState.PROBING  # from DEGRADED, or a probe presumed lost
                self._since = self._clock()
                self._check()
                return True
            self._fast_failures += 1
            return False

    def refusing(self) -> bool:
        """Would `admit()` refuse now? (No side effect: for callers that queue work before it
        reaches the store, so that it is refused before it queues.)"""
        with self._lock:
            return self._state != StoreState.HEALTHY and self._clock() - self._since < self.probe_interval_s

    def record_success(self) -> None:
        """The store answered (a "not found" and a lost conditional write count as answers)."""
        with self._lock:
            self._state = StoreState.HEALTHY
            self._failures = 0
            self._check()

    def record_failure(self, error: str) -> None:
        """The store did not answer usefully: a transient error or a missed deadline."""
        with self._lock:
            self._failures += 1
            self._last_error = error[:300]
            if self._state == StoreState.PROBING or (self._state == StoreState.HEALTHY
                                                     and self._failures >= self.failure_threshold):
                if self._state == StoreState.HEALTHY:
                    self._degradations += 1
                self._state = StoreState.DEGRADED
                self._since = self._clock()
            self._check()

    def retry_after_s(self) -> float:
        """Seconds until the next probe may be admitted (0 when HEALTHY)."""
        with self._lock:
            return self._retry_after()

    def _retry_after(self) -> float:
        if self._state == StoreState.HEALTHY:
            return 0.0
        return max(0.0, self.probe_interval_s - (self._clock() - self._since))

    def snapshot(self) -> HealthSnapshot:
        with self._lock:
            return HealthSnapshot(self._state, self._failures, self._last_error, self._retry_after(),
                                  self._fast_failures, self._degradations)

    def _check(self) -> None:
        invariant(self._failures >= 0, "consecutive failures are never negative")
        invariant(self._state != StoreState.HEALTHY or self._failures < self.failure_threshold,
                  "a store with failure_threshold consecutive failures is not HEALTHY")
