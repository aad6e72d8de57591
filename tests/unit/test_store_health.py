"""The object store's health state (tiering/store_health.py) and the store behind it
(tiering/guarded_store.py), on a fake monotonic clock."""

from __future__ import annotations

import pytest

from lakelog.tiering.errors import ObjectNotFoundError, RemoteStorageUnavailableError, TransientStoreError
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.guarded_store import GuardedStore
from lakelog.tiering.store_health import StoreHealth, StoreState


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_consecutive_failures_degrade_and_a_probe_heals():
    clock = FakeClock()
    h = StoreHealth(failure_threshold=3, probe_interval_ms=2000, clock=clock)
    h.record_failure("timeout")
    h.record_failure("timeout")
    h.record_success()  # an answer in between: the count starts again
    h.record_failure("timeout")
    h.record_failure("timeout")
    assert h.state == StoreState.HEALTHY and h.admit()
    h.record_failure("timeout")
    assert h.state == StoreState.DEGRADED
    assert not h.admit() and h.refusing()
    assert h.retry_after_s() == pytest.approx(2.0)
    clock.now += 2.0
    assert not h.refusing()
    assert h.admit()  # the probe
    assert h.state == StoreState.PROBING
    assert not h.admit()  # everyone else while the probe is in flight
    h.record_failure("still down")
    assert h.state == StoreState.DEGRADED and not h.admit()
    clock.now += 2.0
    assert h.admit()
    h.record_success()
    assert h.state == StoreState.HEALTHY and h.admit()
    snap = h.snapshot()
    assert snap.degradations == 1 and snap.fast_failures == 3 and snap.last_error == "still down"


def test_a_lost_probe_is_replaced_after_an_interval():
    clock = FakeClock()
    h = StoreHealth(failure_threshold=1, probe_interval_ms=500, clock=clock)
    h.record_failure("x")
    clock.now += 0.5
    assert h.admit()  # the probe hangs and never reports
    clock.now += 0.4
    assert not h.admit()
    clock.now += 0.1
    assert h.admit()


class FlakyStore(FileSystemStore):
    """A filesystem store whose calls fail with TransientStoreError while `down`."""

    down = False
    calls = 0

    def get(self, key):
        self.calls += 1
        if self.down:
            raise TransientStoreError("connection refused", key=key)
        return super().get(key)


def test_guarded_store_fails_fast_while_degraded_and_counts_answers_as_success(tmp_path):
    clock = FakeClock()
    inner = FlakyStore(str(tmp_path))
    store = GuardedStore(inner, StoreHealth(failure_threshold=2, probe_interval_ms=1000, clock=clock))
    store.put("a/b", b"x")
    with pytest.raises(ObjectNotFoundError):
        store.get("a/missing")  # an answer: not a failure
    inner.down = True
    for _ in range(2):
        with pytest.raises(TransientStoreError):
            store.get("a/b")
    assert store.health.state == StoreState.DEGRADED
    calls = inner.calls
    with pytest.raises(RemoteStorageUnavailableError) as e:
        store.get("a/b")
    assert inner.calls == calls, "a degraded store is not asked"
    assert 0 < e.value.retry_after_s <= 1.0
    inner.down = False
    clock.now += 1.0
    assert store.get("a/b")[0] == b"x"  # the probe
    assert store.health.state == StoreState.HEALTHY
