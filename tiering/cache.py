"""A least-recently-used cache bounded by bytes, with de-duplicated loads and bounded prefetch.

Used for remote offset/time indexes (keyed by segment id and file) and for chunks of remote `.log`
objects (keyed by segment id and chunk number). Segment ids are never reused, so an entry can never
be stale: nothing here needs invalidation except after a failed check (corrupt bytes are dropped
so a retry fetches them again).

  * `get_or_load(key, loader)` returns the cached value or runs `loader()` -> (value, size). Many
    threads asking for the same missing key run one load and share its result (or its error).
  * `prefetch(key, loader, executor)` starts a load in the background unless the key is cached,
    already loading, or `max_pending` prefetches are in flight (the bound); errors of a prefetch are
    dropped (a reader that waited on it loads again itself).
  * A value larger than the capacity is returned but not kept.

Concurrency: thread-safe; loaders run outside the lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Executor, Future
from typing import Any, Callable, Generic, Hashable, TypeVar

V = TypeVar("V")
Loader = Callable[[], "tuple[V, int]"]


class ByteLRUCache(Generic[V]):
    def __init__(self, capacity_bytes: int, *, max_pending: int = 8) -> None:
        self.capacity_bytes = capacity_bytes
        self.max_pending = max_pending
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._inflight: dict[Hashable, Future] = {}
        self._size = 0
        self._pending = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.prefetches = 0

    def __len__(self) -> int:
        return len(self._data)

    @property
    def size_in_bytes(self) -> int:
        return self._size

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._data

    def _insert(self, key: Hashable, value: V, size: int) -> None:
        if size > self.capacity_bytes:
            return
        old = self._data.pop(key, None)
        if old is not None:
            self._size -= old[1]
        self._data[key] = (value, size)
        self._size += size
        while self._size > self.capacity_bytes and self._data:
            _, (_, s) = self._data.popitem(last=False)
            self._size -= s
            self.evictions += 1

    def get(self, key: Hashable) -> V | None:
        """The cached value (counted as a hit) or None (not counted)."""
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return entry[0]

    def get_or_load(self, key: Hashable, loader: Loader) -> V:
        for attempt in (0, 1):
            with self._lock:
                entry = self._data.get(key)
                if entry is not None:
                    self._data.move_to_end(key)
                    self.hits += 1
                    return entry[0]
                fut = self._inflight.get(key)
                owner = fut is None
                if owner:
                    self.misses += 1
                    fut = Future()
                    self._inflight[key] = fut
                else:
                    self.hits += 1  # a load (often a prefetch) is already fetching it
            if owner:
                return self._run(key, fut, loader)
            try:
                return fut.result()
            except BaseException:
                if attempt == 1:
                    raise
                # Someone else's load (a prefetch) failed: try once as the owner.
        raise AssertionError("unreachable")

    def _run(self, key: Hashable, fut: Future, loader: Loader) -> V:
        try:
            value, size = loader()
        except BaseException as e:
            with self._lock:
                self._inflight.pop(key, None)
            fut.set_exception(e)
            raise
        with self._lock:
            self._inflight.pop(key, None)
            self._insert(key, value, size)
        fut.set_result(value)
        return value

    def prefetch(self, key: Hashable, loader: Loader, executor: Executor) -> bool:
        """Start loading `key` in the background; False if cached, loading, or at the bound."""
        with self._lock:
            if key in self._data or key in self._inflight or self._pending >= self.max_pending:
                return False
            fut: Future = Future()
            self._inflight[key] = fut
            self._pending += 1
            self.prefetches += 1

        def task() -> None:
            try:
                self._run(key, fut, loader)
            except BaseException:  # noqa: BLE001 - a failed prefetch is only a missed optimisation
                pass
            finally:
                with self._lock:
                    self._pending -= 1

        try:
            executor.submit(task)
        except RuntimeError:  # executor shut down
            with self._lock:
                self._inflight.pop(key, None)
                self._pending -= 1
            fut.cancel()
            return False
        return True

    def invalidate(self, key: Hashable) -> None:
        with self._lock:
            entry = self._data.pop(key, None)
            if entry is not None:
                self._size -= entry[1]

    def invalidate_where(self, predicate: Callable[[Hashable], bool]) -> int:
        with self._lock:
            doomed = [k for k in self._data if predicate(k)]
            for k in doomed:
                self._size -= self._data.pop(k)[1]
            return len(doomed)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self._size = 0

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "evictions": self.evictions,
                    "prefetches": self.prefetches, "entries": len(self._data), "bytes": self._size,
                    "capacity_bytes": self.capacity_bytes}
