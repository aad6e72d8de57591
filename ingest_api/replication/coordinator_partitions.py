"""The partitions of one coordinator topic (`__consumer_offsets`, `__transaction_state`) this node
hosts: which of them it leads, which it has loaded and in which leader epoch, and the loads going on.

A coordinator serves the keys of a partition (groups, transactional ids) only once it has read that
partition's log from the log start to the log end in the leader epoch it leads it in. `check_leadership`
(the owner's timer) compares the partitions led with those loaded:

* a partition loaded in an epoch this node no longer leads it in is unloaded: `reset(p)` forgets
  its state (and the next check loads it again if this node leads it in a newer epoch);
* a partition led and neither loaded nor loading starts a load: `read(log, p)` runs on a thread
  over the local log; if the partition is still led in the same epoch afterwards, `replay(p, epoch,
  what_was_read)` (on the event loop) rebuilds the state and returns how many records it applied,
  and the partition counts as loaded in that epoch. If leadership moved during the read, nothing is
  applied and the next check decides again. A failed load is logged and retried by the next check.

The owner answers a key whose partition is `LOADING` with COORDINATOR_LOAD_IN_PROGRESS and one
whose partition is `ELSEWHERE` with NOT_COORDINATOR (`state`).

Concurrency: every method runs on the node's event loop; only `read` runs on a thread.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import Any, Callable, Generic, Iterator, TypeVar

from lakelog.ingest_api.cluster.metadata_follower import cancel_task
from lakelog.ingest_api.replication.partition import PartitionKey
from lakelog.logstore.record_batch import RecordBatch, iter_batches

log = logging.getLogger("lakelog.coordinator")

#: Bytes read per step when a coordinator loads its partition.
LOAD_READ_BYTES = 1024 * 1024

Loaded = TypeVar("Loaded")


class Hosting(enum.Enum):
    """Where the keys of a coordinator partition are served, seen from this node."""

    LOADED = "loaded"  # led here and loaded in its current leader epoch
    LOADING = "loading"  # led here; its log is being read
    ELSEWHERE = "elsewhere"  # not led here


class CoordinatorPartitions(Generic[Loaded]):
    def __init__(self, node: Any, topic: str, default_partitions: int, *, what: str,
                 read: Callable[[Any, int], Loaded], replay: Callable[[int, int, Loaded], int],
                 reset: Callable[[int], None]) -> None:
        """`node`: its metadata `image` and `local_partition`; `default_partitions`: the partition
        count the topic is created with; `what`: the coordinator's keys, for the log ("groups")."""
        self.node = node
        self.topic = topic
        self.default_partitions = default_partitions
        self.what = what
        self._read = read
        self._replay = replay
        self._reset = reset
        #: partition -> the leader epoch its state was loaded in.
        self._loaded: dict[int, int] = {}
        self._loading: dict[int, asyncio.Task] = {}

    def num_partitions(self) -> int:
        topic = self.node.image.topics.get(self.topic)
        return len(topic.partitions) if topic is not None else self.default_partitions

    def leader(self, p: int) -> int:
        """The node leading partition `p` (-1 while it has no leader or the topic is missing)."""
        topic = self.node.image.topics.get(self.topic)
        if topic is None:
            return -1
        return topic.partitions[p].leader

    def is_loaded(self, p: int) -> bool:
        return p in self._loaded

    def state(self, p: int) -> Hosting:
        if p in self._loaded:
            return Hosting.LOADED
        if p in self._loading or p in self._led():
            return Hosting.LOADING
        return Hosting.ELSEWHERE

    def check_leadership(self) -> None:
        """Unload the partitions no longer led in their loaded epoch; start loading newly led ones."""
        led = self._led()
        for p, epoch in list(self._loaded.items()):
            if led.get(p) != epoch:
                self._unload(p)
        for p, epoch in led.items():
            if p not in self._loaded and p not in self._loading:
                self._loading[p] = asyncio.get_running_loop().create_task(
                    self._load(p, epoch), name=f"load-{self.topic}-{p}")

    async def stop(self) -> None:
        """Cancel the loads going on."""
        for t in list(self._loading.values()):
            await cancel_task(t)

    def _led(self) -> dict[int, int]:
        """partition -> leader epoch, of the partitions this node leads."""
        topic = self.node.image.topics.get(self.topic)
        out: dict[int, int] = {}
        if topic is None:
            return out
        for p in range(len(topic.partitions)):
            part = self.node.local_partition(PartitionKey(self.topic, p))
            if part is not None and part.is_leader:
                out[p] = part.leader_epoch
        return out

    def _unload(self, p: int) -> None:
        self._loaded.pop(p, None)
        self._reset(p)
        log.info("%s-%d: no longer coordinating its %s", self.topic, p, self.what)

    async def _load(self, p: int, epoch: int) -> None:
        try:
            part = self.node.local_partition(PartitionKey(self.topic, p))
            if part is None:
                return
            started = time.monotonic()
            loaded = await asyncio.to_thread(self._read, part.log, p)
            if not (part.is_leader and part.leader_epoch == epoch):
                return  # leadership moved while reading: the next check decides again
            applied = self._replay(p, epoch, loaded)
            self._loaded[p] = epoch
            log.info("%s-%d: loaded %d records of its %s in %.0f ms (leader epoch %d)", self.topic, p, applied,
                     self.what, (time.monotonic() - started) * 1000, epoch)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s-%d: loading its %s failed (retried next check)", self.topic, p, self.what)
        finally:
            self._loading.pop(p, None)


def read_log_batches(plog: Any) -> Iterator[tuple[int, RecordBatch]]:
    """Every batch of a partition log from its log start to its log end, in log order, with the
    offset the read that returned it started at (a batch may begin before it: records below it were
    already seen). Any thread."""
    offset = plog.log_start_offset
    end = plog.log_end_offset
    while offset < end:
        res = plog.read(offset, LOAD_READ_BYTES)
        if not len(res.records):
            break
        nxt = offset
        for _, batch in iter_batches(res.records):
            nxt = max(nxt, batch.next_offset)
            yield offset, batch
        if nxt <= offset:
            break
        offset = nxt
