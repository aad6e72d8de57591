"""tiering/deadline_store.py (a deadline on every call) and tiering/upload_backoff.py (waits between
failed copy rounds), over a filesystem store whose calls can be made to hang."""

from __future__ import annotations

import threading

import pytest

from lakelog.tiering.config import TieringConfig
from lakelog.tiering.deadline_store import DeadlineStore, Deadlines
from lakelog.tiering.errors import ObjectNotFoundError, RemoteStorageTimeoutError, TransientStoreError
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.guarded_store import GuardedStore
from lakelog.tiering.store_health import StoreHealth, StoreState
from lakelog.tiering.upload_backoff import UploadBackoff


class HangingStore(FileSystemStore):
    """A filesystem store whose calls block while `hang` is set, until `release` is set."""

    def __init__(self, root) -> None:
        super().__init__(root)
        self.hang = threading.Event()
        self.release = threading.Event()

    def _wait(self) -> None:
        if self.hang.is_set():
            self.release.wait(30)

    def get(self, key):
        self._wait()
        return super().get(key)

    def put(self, key, data):
        self._wait()
        return super().put(key, data)

    def put_if_match(self, key, data, etag):
        self._wait()
        return super().put_if_match(key, data, etag)


def test_a_hung_call_fails_by_its_deadline_naming_the_store_the_key_and_the_config_key(tmp_path):
    inner = HangingStore(tmp_path / "s")
    store = DeadlineStore(inner, Deadlines(50, "remote.job.store.timeout.ms"))
    store.put("t-0/a.bin", b"x")
    assert store.get("t-0/a.bin")[0] == b"x"
    with pytest.raises(ObjectNotFoundError):  # errors of the store pass through as they are
        store.get("t-0/missing")
    inner.hang.set()
    with pytest.raises(RemoteStorageTimeoutError) as info:
        store.get("t-0/a.bin")
    text = str(info.value)
    assert inner.url in text and "t-0/a.bin" in text and "remote.job.store.timeout.ms=50 ms" in text
    assert isinstance(info.value, TransientStoreError) and info.value.deadline_ms == 50
    assert store.missed == 1 and store.outstanding == 1
    inner.release.set()  # the call left behind ends; the store answers again
    for _ in range(300):
        if store.outstanding == 0:
            break
        threading.Event().wait(0.01)
    assert store.outstanding == 0
    inner.hang.clear()
    assert store.get("t-0/a.bin")[0] == b"x"


def test_calls_left_behind_are_bounded_then_refused_at_once(tmp_path):
    inner = HangingStore(tmp_path / "s")
    store = DeadlineStore(inner, Deadlines(20, "k.ms"), max_outstanding=2)
    inner.hang.set()
    for _ in range(2):
        with pytest.raises(RemoteStorageTimeoutError, match="did not answer"):
            store.get("t-0/x")
    with pytest.raises(RemoteStorageTimeoutError, match="still running"):
        store.get("t-0/x")
    inner.release.set()


def test_node_deadlines_by_kind_of_call():
    d = Deadlines.for_node(TieringConfig({"remote.log.upload.timeout.ms": 7000, "remote.log.metadata.timeout.ms": 300}))
    assert d.of("PUT", "t-0/00000000000000000000-" + "a" * 32 + ".log") == (7000, "remote.log.upload.timeout.ms")
    assert d.of("PUT", "t-0/manifest.json") == (300, "remote.log.metadata.timeout.ms")
    assert d.of("GET", "t-0/manifest.json") == (300, "remote.log.metadata.timeout.ms")
    assert d.of("GET", "t-0/00000000000000000000-" + "a" * 32 + ".log") == (300, "remote.log.metadata.timeout.ms")
    assert d.of("LIST", None) == (300, "remote.log.metadata.timeout.ms")
    jobs = Deadlines.for_jobs(TieringConfig({"remote.job.store.timeout.ms": 1234}))
    assert jobs.of("PUT", "t-0/manifest.json") == (1234, "remote.job.store.timeout.ms")


def test_missed_deadlines_degrade_the_guarded_store(tmp_path):
    inner = HangingStore(tmp_path / "s")
    health = StoreHealth(failure_threshold=2, probe_interval_ms=60_000)
    store = GuardedStore(DeadlineStore(inner, Deadlines(20, "k.ms")), health)
    inner.hang.set()
    for _ in range(2):
        with pytest.raises(RemoteStorageTimeoutError):
            store.get("t-0/x")
    assert health.state == StoreState.DEGRADED
    inner.release.set()


def test_backoff_doubles_up_to_its_bound_and_clears_on_success():
    now = [100.0]
    b = UploadBackoff(base_ms=500, max_ms=3000, clock=lambda: now[0])
    assert b.ready("p") and b.failures("p") == 0
    assert [b.failed("p") for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert b.failures("p") == 5 and not b.ready("p") and b.ready("other")
    now[0] += 2.9
    assert not b.ready("p")
    now[0] += 0.2
    assert b.ready("p")
    b.succeeded("p")
    assert b.failures("p") == 0 and b.failed("p") == 0.5
    with pytest.raises(ValueError):
        UploadBackoff(base_ms=10, max_ms=5)
