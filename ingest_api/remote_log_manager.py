"""The remote log manager's scheduling: each round goes over a node's replicas of tiered topics on a
bounded pool of threads (`remote.log.manager.thread.pool.size`, Kafka's key), so that many
partitions upload, apply retention and read manifests in parallel while one slow or unreachable
partition does not hold the others back.

    pool = RemoteLogManagerPool(4, task=node.tier_once)
    pool.run_round(partitions, stopping)     # every partition once; at most 4 at a time
    pool.close()

A round ends when every task has ended, so one partition never has two tasks in flight (its
copy rounds stay in order). A task's exception is logged and the round goes on. When `stopping`
is set, tasks not started yet are cancelled and the round returns without waiting for the
running ones (the node's shutdown bounds that wait).

Concurrency: `run_round` is called from one thread (the node's `remote-log-manager` thread); the
tasks run on the pool's threads.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Callable, Generic, Iterable, TypeVar

log = logging.getLogger(__name__)

P = TypeVar("P")

#: How often a round waiting on its tasks looks at the stop flag (seconds).
STOP_POLL_S = 0.1


class RemoteLogManagerPool(Generic[P]):
    """Runs `task(partition)` for each partition of a round, at most `threads` at a time."""

    def __init__(self, threads: int, task: Callable[[P], None], *, name: str = "remote-log-manager") -> None:
        if threads < 1:
            raise ValueError("the remote log manager needs at least one thread")
        self.threads = threads
        self._task = task
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=name)

    def _run(self, partition: P) -> None:
        try:
            self._task(partition)
        except Exception:  # one partition's failure must not stop the others
            log.exception("remote log manager task for %s failed", partition)

    def run_round(self, partitions: Iterable[P], stopping: threading.Event) -> int:
        """Run one task per partition; return how many ran to the end (all of them, unless stopping)."""
        futures: list[Future] = [self._pool.submit(self._run, p) for p in partitions]
        pending = set(futures)
        while pending:
            _, pending = wait(pending, timeout=STOP_POLL_S, return_when=FIRST_COMPLETED)
            if stopping.is_set():
                for f in pending:
                    f.cancel()
                break
        return sum(1 for f in futures if f.done() and not f.cancelled())

    def close(self) -> None:
        """Cancel queued tasks; running ones end on their own (the pool's threads are not joined)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
