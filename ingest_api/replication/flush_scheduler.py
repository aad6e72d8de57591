"""The flush scheduler: fsync of partition logs whose `flush.ms` has passed, at a cost that follows
the appends, not the partition count.

Appends feed a set of partitions with unflushed records (`mark`, a log's append listener, any
thread). Each pass (`log.flush.scheduler.interval.ms`, on the scheduler's thread) takes that set,
and the partitions whose unflushed records fall due by now from a heap ordered by due time; for
each it asks the log to flush if due (`PartitionLog.flush_if_due`), which answers when its records
still unflushed fall due (None: flushed, nothing unflushed, or `flush.ms` left at its never-due
default). An idle partition is in neither the set nor the heap: a pass costs nothing for it.

Concurrency: `mark` from any thread (under `_lock`); `run_pass` and `loop` on the scheduler's one
thread, which alone touches the heap.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from typing import Callable

from lakelog.ingest_api.replication.partition import Partition, PartitionKey
from lakelog.logstore.log_dir_health import LogDirHealth, is_disk_failure

log = logging.getLogger("lakelog.node")


class FlushScheduler:
    def __init__(self, interval_ms: int, partition: Callable[[PartitionKey], Partition | None],
                 log_dir: LogDirHealth) -> None:
        self.interval_ms = interval_ms
        self._partition = partition
        self._log_dir = log_dir
        #: Partitions appended to since the last pass (guarded by `_lock`).
        self._appended: set[PartitionKey] = set()
        self._lock = threading.Lock()
        #: (monotonic ms their unflushed records fall due, key): the scheduler's thread only.
        self._due: list[tuple[int, PartitionKey]] = []
        #: Partitions the passes looked at (an operation count: tests, metrics).
        self.partitions_visited = 0

    def mark(self, key: PartitionKey) -> None:
        """A partition's log was appended to (its append listener: under the log's lock, any thread)."""
        with self._lock:
            self._appended.add(key)

    def loop(self, stopped: threading.Event) -> None:
        """A pass every `interval_ms` until `stopped` is set (the scheduler's thread)."""
        while not stopped.wait(self.interval_ms / 1000):
            self.run_pass()

    def run_pass(self, now_ms: int | None = None) -> None:
        """One pass: the partitions appended to since the last one and those falling due by now."""
        now = int(time.monotonic() * 1000) if now_ms is None else now_ms
        with self._lock:
            keys, self._appended = self._appended, set()
        while self._due and self._due[0][0] <= now:
            keys.add(heapq.heappop(self._due)[1])
        for key in keys:
            p = self._partition(key)
            if p is None:
                continue
            self.partitions_visited += 1
            try:
                due = p.log.flush_if_due()
            except OSError as e:
                if not is_disk_failure(e):
                    log.exception("flush of %s failed", p.key)
                    due = now + self.interval_ms  # retried at the next pass
                else:  # acks do not wait for fsync (as Kafka's); nothing more is acknowledged after this
                    self._log_dir.failed(str(p.key), "flush", e)
                    due = None
            except Exception:  # a closed log during deletion; the next pass moves on
                log.exception("flush of %s failed", p.key)
                due = None
            if due is not None:
                heapq.heappush(self._due, (due, key))
