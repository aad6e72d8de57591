"""A partition replica hosted by a node: its log, its high watermark and its waiting fetches.

Invariants (checked with `invariant()`):
  * log start offset <= high watermark (HW) <= log end offset (LEO);
  * the HW never goes backwards while this replica leads;
  * the leader is always in the ISR.

HW = min LEO over the ISR. Today a node hosts only leader replicas with an ISR of one (itself), so
the HW follows the LEO after each append; the replication layer adds followers' LEOs (from their
fetch offsets) to the same computation.

Consumers read only below the HW. A fetch that finds nothing waits (long-poll) until an append moves
the HW or its timeout passes.

Concurrency: appends and reads are serialised by the partition log's lock; waiters are asyncio
futures woken thread-safely on the loop that created them.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass

from infra.errors import invariant
from logstore.log import AppendInfo, FetchResult, PartitionLog


@dataclass(frozen=True)
class PartitionKey:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class Partition:
    def __init__(self, key: PartitionKey, log: PartitionLog, node_id: int, leader_epoch: int = 0) -> None:
        self.key = key
        self.log = log
        self.node_id = node_id
        self.leader_epoch = leader_epoch
        self.isr: list[int] = [node_id]
        self._replica_leos: dict[int, int] = {}
        self._lock = threading.Lock()
        self._waiters: set[asyncio.Future] = set()
        self.high_watermark = log.log_end_offset  # leader with an ISR of one: everything is committed

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def append_as_leader(self, data: bytes | memoryview) -> AppendInfo:
        info = self.log.append_as_leader(data, self.leader_epoch)
        self.maybe_advance_high_watermark()
        return info

    def maybe_advance_high_watermark(self) -> bool:
        """HW = min LEO over the ISR; wakes waiting fetches when it moves."""
        with self._lock:
            leos = [self.log.log_end_offset if r == self.node_id else self._replica_leos.get(r, 0)
                    for r in self.isr]
            new_hw = min(leos)
            if new_hw <= self.high_watermark:
                return False
            invariant(new_hw <= self.log.log_end_offset, "HW above LEO")
            self.high_watermark = new_hw
            waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            _wake(fut)
        return True

    def read(self, offset: int, max_bytes: int) -> FetchResult:
        """Whole batches from `offset`, below the HW (a consumer's view)."""
        return self.log.read(offset, max_bytes, max_offset=self.high_watermark)

    async def wait_for_data(self, offset: int, timeout_s: float) -> None:
        """Return when the HW passes `offset`, or after `timeout_s`."""
        if timeout_s <= 0:
            return
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        with self._lock:
            if self.high_watermark > offset:
                return
            self._waiters.add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(fut)

    def wake_all(self) -> None:
        """Release every waiting fetch (shutdown, deletion)."""
        with self._lock:
            waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            _wake(fut)


def _wake(fut: asyncio.Future) -> None:
    loop = fut.get_loop()

    def _set() -> None:
        if not fut.done():
            fut.set_result(None)

    if loop.is_closed():
        return
    loop.call_soon_threadsafe(_set)
