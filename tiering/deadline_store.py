"""An object store whose every call has a deadline: a store that hangs fails the call, with an
error naming the store, the call and the deadline, instead of blocking its caller.

    store = DeadlineStore(open_store(url, cfg), Deadlines.for_node(cfg))
    store.put("orders-0/00000000000000000000-<id>.log", payload)   # at most remote.log.upload.timeout.ms
    store.get("orders-0/manifest.json")                             # at most remote.log.metadata.timeout.ms

Which deadline a call gets (`Deadlines`):
  * a PUT of a segment's object (`.log`, `.index`, `.timeindex`, `.epochs`, ...): `upload_ms`
    (a segment's `.log` streams for a while: its deadline is the longest);
  * any call on a manifest (`<topic>-<partition>/manifest.json`): `metadata_ms`;
  * every other call: `default_ms`.
The Spark jobs use one deadline for every call (`remote.job.store.timeout.ms`).

How: the call runs on a thread of its own and the caller waits at most the deadline. A call that
misses it raises `RemoteStorageTimeoutError` (a `TransientStoreError`: retriable; behind a
`GuardedStore` it counts as a failure of the store's health) and is left to end by the store
client's own timeouts (`remote.storage.request.timeout.ms` x `remote.storage.max.attempts`); its
effect is unknown, as for any transient error (a late manifest PUT loses the next compare-and-swap;
a late segment PUT is the object of an abandoned upload, deleted with it or by the orphan sweep).
At most `max_outstanding` such calls may still run: past that, calls are refused at once (the
threads are bounded).

Concurrency: thread-safe as the inner store is.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

from lakelog.tiering.errors import RemoteStorageTimeoutError
from lakelog.tiering.layout import MANIFEST_NAME
from lakelog.tiering.store import ObjectInfo, ObjectStore, Payload

T = TypeVar("T")

#: Calls that missed their deadline and still run, at most (then calls are refused at once).
MAX_OUTSTANDING = 64


@dataclass(frozen=True, slots=True)
class Deadlines:
    """Deadline per kind of call, in ms, with the config key each comes from (named in errors)."""

    default_ms: int
    default_key: str
    upload_ms: int | None = None
    upload_key: str = ""
    metadata_ms: int | None = None
    metadata_key: str = ""

    @staticmethod
    def for_node(cfg) -> "Deadlines":
        """The tiering manager's deadlines (a `TieringConfig`)."""
        return Deadlines(cfg.remote_log_metadata_timeout_ms, "remote.log.metadata.timeout.ms",
                         cfg.remote_log_upload_timeout_ms, "remote.log.upload.timeout.ms",
                         cfg.remote_log_metadata_timeout_ms, "remote.log.metadata.timeout.ms")

    @staticmethod
    def for_jobs(cfg) -> "Deadlines":
        """The Spark jobs' deadline: one for every call (a `TieringConfig`)."""
        return Deadlines(cfg.remote_job_store_timeout_ms, "remote.job.store.timeout.ms")

    def of(self, kind: str, key: str | None) -> tuple[int, str]:
        if key is not None and key.rsplit("/", 1)[-1] == MANIFEST_NAME and self.metadata_ms is not None:
            return self.metadata_ms, self.metadata_key
        if kind == "PUT" and self.upload_ms is not None:
            return self.upload_ms, self.upload_key
        return self.default_ms, self.default_key


class DeadlineStore(ObjectStore):
    """`inner` with a deadline on every call (see the module docstring)."""

    def __init__(self, inner: ObjectStore, deadlines: Deadlines, *, max_outstanding: int = MAX_OUTSTANDING) -> None:
        self.inner = inner
        self.deadlines = deadlines
        self.stats = inner.stats
        self.max_outstanding = max_outstanding
        self._lock = threading.Lock()
        self._outstanding = 0
        #: Calls that missed their deadline, since start.
        self.missed = 0

    @property
    def url(self) -> str:
        return self.inner.url

    @property
    def outstanding(self) -> int:
        """Calls running now (those past their deadline included)."""
        with self._lock:
            return self._outstanding

    def _call(self, kind: str, key: str | None, fn: Callable[[], T]) -> T:
        deadline_ms, config_key = self.deadlines.of(kind, key)
        with self._lock:
            if self._outstanding >= self.max_outstanding:
                raise RemoteStorageTimeoutError(
                    f"the object store {self.url} has {self._outstanding} calls past their deadline still "
                    f"running; {kind} {key or ''} refused", key=key, deadline_ms=deadline_ms, config_key=config_key)
            self._outstanding += 1
        outcome: list = []
        done = threading.Event()

        def run() -> None:
            try:
                outcome.append((True, fn()))
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                outcome.append((False, e))
            finally:
                with self._lock:
                    self._outstanding -= 1
                done.set()

        threading.Thread(target=run, name=f"lakelog-store-{kind.lower()}", daemon=True).start()
        if not done.wait(deadline_ms / 1000):
            with self._lock:
                self.missed += 1
            raise RemoteStorageTimeoutError(
                f"the object store {self.url} did not answer {kind} {key or '(listing)'} within "
                f"{config_key}={deadline_ms} ms", key=key, deadline_ms=deadline_ms, config_key=config_key)
        ok, value = outcome[0]
        if ok:
            return value
        raise value

    def put(self, key: str, data: bytes | bytearray | memoryview | Payload) -> str:
        return self._call("PUT", key, lambda: self.inner.put(key, data))

    def put_if_absent(self, key: str, data: bytes | bytearray | memoryview | Payload) -> str:
        return self._call("PUT", key, lambda: self.inner.put_if_absent(key, data))

    def put_if_match(self, key: str, data: bytes | bytearray | memoryview | Payload, etag: str) -> str:
        return self._call("PUT", key, lambda: self.inner.put_if_match(key, data, etag))

    def get(self, key: str) -> tuple[bytes, str]:
        return self._call("GET", key, lambda: self.inner.get(key))

    def get_range(self, key: str, start: int, end: int) -> bytes:
        return self._call("GET", key, lambda: self.inner.get_range(key, start, end))

    def head(self, key: str) -> ObjectInfo:
        return self._call("HEAD", key, lambda: self.inner.head(key))

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        return self._call("LIST", None, lambda: self.inner.list(prefix))

    def list_after(self, prefix: str, start_after: str, limit: int) -> list[ObjectInfo]:
        return self._call("LIST", None, lambda: self.inner.list_after(prefix, start_after, limit))

    def list_prefixes(self, prefix: str = "") -> list[str]:
        return self._call("LIST", None, lambda: self.inner.list_prefixes(prefix))

    def delete(self, key: str) -> None:
        self._call("DELETE", key, lambda: self.inner.delete(key))

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        self._call("DELETE", None, lambda: self.inner.delete_many(keys))

    def close(self) -> None:
        self.inner.close()
