"""Reads of the remote tier on behalf of the event loop: on their own threads, bounded in number,
each answered within a deadline.

    reads = RemoteReads(threads=4, max_pending=100, max_wait_ms=1000, health=health)
    result = await reads.run("fetch orders-0 at 12", rp.read, 12, 1 << 20)

A fetch of tiered data, the remote log start offset and a timestamp lookup all wait on the object
store. Run on the event loop's default executor, a hung store would take every one of its threads
and stall unrelated work behind it; here they run on `remote.log.reader.threads` threads of their
own, at most `remote.log.reader.max.pending.tasks` queued or running (more are refused at once
with `RemoteStorageUnavailableError`, as is every read while the store's health state refuses
calls, before it queues behind reads that hang), and the caller waits at most `remote.fetch.max.wait.ms`:
past that it gets `RemoteFetchTimeoutError` (retriable) and the store's health state counts a
failure. A read still queued is cancelled; one already running goes on and fills the caches, so
the client's retry may find its bytes there.

Concurrency: `run` is called from the event loop; the counter of pending reads has its own lock
because the pool's threads decrement it.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, TypeVar

from lakelog.tiering.errors import RemoteFetchTimeoutError, RemoteStorageUnavailableError
from lakelog.tiering.store_health import StoreHealth

T = TypeVar("T")


class RemoteReads:
    """Bounded, deadline-bound remote reads (see the module docstring)."""

    def __init__(self, *, threads: int, max_pending: int, max_wait_ms: int, health: StoreHealth | None) -> None:
        if threads < 1 or max_pending < 1 or max_wait_ms < 1:
            raise ValueError("threads, max_pending and max_wait_ms must be >= 1")
        self.max_pending = max_pending
        self.max_wait_ms = max_wait_ms
        self.health = health
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="lakelog-remote-read")
        self._lock = threading.Lock()
        self._pending = 0
        #: Reads that missed their deadline, and reads refused because too many were pending.
        self.timeouts = 0
        self.refused = 0

    @property
    def pending(self) -> int:
        with self._lock:
            return self._pending

    def _done(self, _future: Future) -> None:
        with self._lock:
            self._pending -= 1

    async def run(self, what: str, fn: Callable[..., T], *args) -> T:
        """`fn(*args)` on a reader thread, answered within `remote.fetch.max.wait.ms`."""
        if self.health is not None and self.health.refusing():
            snap = self.health.snapshot()
            raise RemoteStorageUnavailableError(
                f"the object store is degraded after {snap.consecutive_failures} failures (last: "
                f"{snap.last_error}); {what} was not started", retry_after_s=snap.retry_after_s)
        with self._lock:
            if self._pending >= self.max_pending:
                self.refused += 1
                raise RemoteStorageUnavailableError(
                    f"{self._pending} remote reads are pending (remote.log.reader.max.pending.tasks); "
                    f"{what} was not started")
            self._pending += 1
        try:
            future = self._pool.submit(fn, *args)
        except BaseException:
            with self._lock:
                self._pending -= 1
            raise
        future.add_done_callback(self._done)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.max_wait_ms / 1000)
        except asyncio.TimeoutError:
            self.timeouts += 1
            message = f"{what} waited {self.max_wait_ms} ms (remote.fetch.max.wait.ms) on the object store"
            if self.health is not None:
                self.health.record_failure(message)
            raise RemoteFetchTimeoutError(message) from None

    def close(self) -> None:
        """Cancel queued reads; running ones end on their own (their threads are not joined)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
