"""Test support: a store wrapper that records every call and injects faults.

    store = InstrumentedStore(FileSystemStore(tmp))
    store.fail("put", suffix=".index", error=TransientStoreError("injected"))   # next matching call raises
    store.fail("put", suffix=".log", after=2, times=None)                      # from the 3rd match on, always
    store.calls  -> [("get_range", "orders-0/...log", (0, 4096)), ...]

Not used by production code.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from lakelog.tiering.errors import TransientStoreError
from lakelog.tiering.store import ObjectInfo, ObjectStore


@dataclass
class _Fault:
    op: str | None
    suffix: str | None
    predicate: Callable[[str, str], bool] | None
    error: BaseException | Callable[[], BaseException]
    after: int
    times: int | None
    seen: int = 0
    fired: int = 0

    def matches(self, op: str, key: str) -> bool:
        if self.op is not None and op != self.op:
            return False
        if self.suffix is not None and not key.endswith(self.suffix):
            return False
        return self.predicate is None or self.predicate(op, key)


class InstrumentedStore(ObjectStore):
    """Delegates to `inner`, records calls, raises injected faults before a matching call."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.stats = inner.stats
        self.calls: list[tuple[str, str, tuple]] = []
        self._faults: list[_Fault] = []
        self._lock = threading.RLock()

    @property
    def url(self) -> str:
        return self.inner.url

    def fail(self, op: str | None = None, *, suffix: str | None = None,
             predicate: Callable[[str, str], bool] | None = None,
             error: BaseException | Callable[[], BaseException] | None = None,
             after: int = 0, times: int | None = 1) -> None:
        """Make matching calls raise `error` (default TransientStoreError): skip the first `after`
        matches, then fail `times` of them (None: forever)."""
        with self._lock:
            self._faults.append(_Fault(op, suffix, predicate, error or TransientStoreError("injected fault"),
                                       after, times))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()

    def reset_calls(self) -> None:
        with self._lock:
            self.calls.clear()

    def count(self, op: str | None = None, suffix: str | None = None) -> int:
        with self._lock:
            return sum(1 for o, k, _ in self.calls if (op is None or o == op) and (suffix is None or k.endswith(suffix)))

    def _before(self, op: str, key: str, extra: tuple = ()) -> None:
        with self._lock:
            self.calls.append((op, key, extra))
            faults = list(self._faults)
        for f in faults:
            # Outside the lock: a predicate may run a whole round, whose PUTs run on other threads.
            if not f.matches(op, key):
                continue
            with self._lock:
                f.seen += 1
                if f.seen <= f.after or (f.times is not None and f.fired >= f.times):
                    continue
                f.fired += 1
            err = f.error() if callable(f.error) and not isinstance(f.error, BaseException) else f.error
            raise err

    def put(self, key, data):
        self._before("put", key)
        return self.inner.put(key, data)

    def put_if_absent(self, key, data):
        self._before("put_if_absent", key)
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key, data, etag):
        self._before("put_if_match", key)
        return self.inner.put_if_match(key, data, etag)

    def get(self, key):
        self._before("get", key)
        return self.inner.get(key)

    def get_range(self, key, start, end):
        self._before("get_range", key, (start, end))
        return self.inner.get_range(key, start, end)

    def head(self, key) -> ObjectInfo:
        self._before("head", key)
        return self.inner.head(key)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        self._before("list", prefix)
        return self.inner.list(prefix)

    def list_after(self, prefix: str, start_after: str, limit: int) -> list[ObjectInfo]:
        self._before("list_after", prefix, (start_after, limit))
        return self.inner.list_after(prefix, start_after, limit)

    def list_prefixes(self, prefix: str = "") -> list[str]:
        self._before("list", prefix)
        return self.inner.list_prefixes(prefix)

    def delete(self, key) -> None:
        self._before("delete", key)
        self.inner.delete(key)

    def delete_many(self, keys: Iterable[str]) -> None:
        keys = list(keys)
        for key in keys:
            self._before("delete", key)
        self.inner.delete_many(keys)

    def close(self) -> None:
        self.inner.close()


# ---------------------------------------------------------------------------------------------
# partition logs with known content


def fill_log(log, batches: int, *, records_per_batch: int = 3, leader_epoch: int = 0, first_timestamp: int = 1_000_000,
             timestamp_step: int = 10, value_size: int = 24, compression=None) -> list[int]:
    """Append `batches` producer batches as leader; record r of batch i has timestamp
    first_timestamp + i * timestamp_step + r and a value naming its batch and record.
    Returns the base offsets assigned."""
    from lakelog.logstore.compression import Compression
    from lakelog.logstore.record_batch import Record, build_batch

    bases = []
    start = log.log_end_offset
    for i in range(batches):
        n = start + i  # a tag that stays unique across calls
        records = [Record(r, first_timestamp + i * timestamp_step + r, f"k{n}.{r}".encode(),
                          (f"v{n}.{r}|" * value_size).encode()[:value_size]) for r in range(records_per_batch)]
        batch = build_batch(records, compression=compression or Compression.NONE)
        bases.append(log.append_as_leader(batch, leader_epoch).first_offset)
    return bases
