"""An object store behind its health state: calls to a degraded store fail at once.

    store = GuardedStore(open_store(url, cfg), StoreHealth(failure_threshold=3, probe_interval_ms=2000))
    store.get("orders-0/manifest.json")   # RemoteStorageUnavailableError at once while degraded

Every call of the `ObjectStore` interface asks `StoreHealth.admit()` first: refused, it raises
`RemoteStorageUnavailableError` (a `TransientStoreError`, retriable, with `retry_after_s`) without a
request. Admitted, its outcome is reported: a `TransientStoreError` or an `OSError` is a failure;
any answer, an `ObjectNotFoundError` or a lost conditional write included, is a success. The
deadline of each request is the inner store's: on a node a `DeadlineStore` (tiering/deadline_store.py:
`remote.log.upload.timeout.ms`, `remote.log.metadata.timeout.ms`; a miss is a failure here),
under it the S3 client's (`remote.storage.connect.timeout.ms`, `remote.storage.request.timeout.ms`,
`remote.storage.max.attempts`); callers that must answer
sooner (a fetch, `remote.fetch.max.wait.ms`) bound their wait and report a missed deadline to the
same `StoreHealth`.

Uploads stay in order through an outage: a copy round stops at its first failed segment and the
next round starts again from the manifest's end, so a refused call only pauses them.

Concurrency: thread-safe as the inner store is; the health state has its own lock.
"""

from __future__ import annotations

from typing import Callable, Iterable, TypeVar

from lakelog.tiering.errors import RemoteStorageUnavailableError, TransientStoreError
from lakelog.tiering.store import ObjectInfo, ObjectStore, Payload
from lakelog.tiering.store_health import StoreHealth

T = TypeVar("T")


class GuardedStore(ObjectStore):
    """`inner` behind `health` (see the module docstring)."""

    def __init__(self, inner: ObjectStore, health: StoreHealth) -> None:
        self.inner = inner
        self.health = health
        self.stats = inner.stats

    @property
    def url(self) -> str:
        return self.inner.url

    def _call(self, key: str | None, fn: Callable[[], T]) -> T:
        if not self.health.admit():
            snap = self.health.snapshot()
            raise RemoteStorageUnavailableError(
                f"the object store is degraded after {snap.consecutive_failures} failures "
                f"(last: {snap.last_error}); next probe in {snap.retry_after_s:.1f} s",
                key=key, retry_after_s=snap.retry_after_s)
        try:
            result = fn()
        except (TransientStoreError, OSError) as e:
            self.health.record_failure(f"{type(e).__name__}: {e}")
            raise
        except BaseException:
            self.health.record_success()  # the store answered (not found, precondition, refusal)
            raise
        self.health.record_success()
        return result

    def put(self, key: str, data: bytes | bytearray | memoryview | Payload) -> str:
        return self._call(key, lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes | bytearray | memoryview | Payload) -> str:
        return self._call(key, lambda: self.inner.put_if_absent(key, data))

    def put_if_match(self, key: str, data: bytes | bytearray | memoryview | Payload, etag: str) -> str:
        return self._call(key, lambda: self.inner.put_if_match(key, data, etag))

    def get(self, key: str) -> tuple[bytes, str]:
        return self._call(key, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._call(key, lambda: self.inner.get_range(key, start, end))

    def head(self, key: str) -> ObjectInfo:
        return self._call(key, lambda: self.inner.head(key))

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        return self._call(prefix, lambda: self.inner.list(prefix))

    def list_after(self, prefix: str, start_after: str, limit: int) -> list[ObjectInfo]:
        return self._call(prefix, lambda: self.inner.list_after(prefix, start_after, limit))

    def list_prefixes(self, prefix: str = "") -> list[str]:
        return self._call(prefix, lambda: self.inner.list_prefixes(prefix))

    def delete(self, key: str) -> None:
        self._call(key, lambda: self.inner.delete(key))

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        self._call(None, lambda: self.inner.delete_many(keys))

    def close(self) -> None:
        self.inner.close()
