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

The owner's calls share two more steps: `ensure_topic` creates the topic on first use (compacted),
and `relay` sends an operation to the node coordinating a key and raises its answered error as the
owner's own class (`retry_until` retries a call while the coordinator moves or loads).

Concurrency: every method runs on the node's event loop; only `read` runs on a thread.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from typing import Any, Awaitable, Callable, Generic, Iterator, Mapping, TypeVar

from lakelog.infra import error_codes
from lakelog.ingest_api.cluster.metadata_follower import cancel_task
from lakelog.ingest_api.errors import RemoteError, TopicExistsError
from lakelog.ingest_api.replication.partition import PartitionKey
from lakelog.logstore.record_batch import RecordBatch, iter_batches

log = logging.getLogger("lakelog.coordinator")

#: Bytes read per step when a coordinator loads its partition.
LOAD_READ_BYTES = 1024 * 1024

#: How a controller on another node answers a topic that exists (forwarded as a RemoteError).
_TOPIC_EXISTS_CODE = error_codes.code(TopicExistsError.__name__).error_code

Loaded = TypeVar("Loaded")
T = TypeVar("T")


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
        self._topic_lock = asyncio.Lock()

    async def ensure_topic(self, *, replication_factor: int, min_insync: Callable[[int], int],
                           segment_bytes: int) -> None:
        """Create the topic (compacted, `default_partitions` partitions) if it does not exist yet:
        `replication_factor` capped at the live brokers, `min.insync.replicas` = `min_insync(rf)`. A
        topic another node created first (TOPIC_ALREADY_EXISTS here, or from the controller on
        another node that this node has not caught up with) is there."""
        node = self.node
        if self.topic in node.image.topics:
            return
        async with self._topic_lock:
            if self.topic in node.image.topics:
                return
            live = max(1, sum(1 for b in node.image.brokers.values() if not b.fenced))
            rf = min(replication_factor, live)
            try:
                await node.admin.create_topic(self.topic, partitions=self.default_partitions, replication_factor=rf,
                                              configs={"cleanup.policy": "compact", "segment.bytes": str(segment_bytes),
                                                       "min.insync.replicas": str(min_insync(rf))})
                log.info("created %s: %d partitions, replication factor %d", self.topic, self.default_partitions, rf)
            except TopicExistsError:
                pass
            except RemoteError as e:
                if e.error_code != _TOPIC_EXISTS_CODE:
                    raise

    async def relay(self, leader: int, path: str, body: dict[str, Any], *, timeout_s: float,
                    relayed_by_code: Mapping[int, type[Exception]]) -> dict[str, Any]:
        """POST `body` to `path` on node `leader` (the coordinator); its answer, or its error: an
        `error_code` in `relayed_by_code` raised as that class (so the caller's retries recognise
        it), any other as a RemoteError."""
        resp = await self.node.peers.post_json(leader, path, body, timeout_s=timeout_s)
        try:
            doc = resp.json()
        except ValueError:
            doc = {}
        if resp.status_code != 200:
            code = int(doc.get("error_code", resp.status_code * 100)) if isinstance(doc, dict) else resp.status_code * 100
            cls = relayed_by_code.get(code)
            if cls is not None:
                raise cls(str(doc.get("message", "")))
            raise RemoteError(resp.status_code, code, str(doc.get("message", resp.text[:200])))
        return doc

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


async def retry_until(deadline_s: float, attempt: Callable[[], Awaitable[T]],
                      retriable: tuple[type[BaseException], ...]) -> T:
    """`attempt()`, retried after a `retriable` error with a backoff from 50 ms doubling to 500 ms,
    until the monotonic `deadline_s` (the last error is raised)."""
    delay = 0.05
    while True:
        try:
            return await attempt()
        except retriable:
            if time.monotonic() + delay > deadline_s:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


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
