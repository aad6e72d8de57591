"""The remote log manager: tiering of this node's replicas, remote reads, deleted topics' remote data.

`RemoteLogManager` owns the node's `RemoteTier` (opened by `open`). Every
`remote.log.manager.task.interval.ms` its loop (a background thread) runs one round over the
replicas of tiered topics (`tier_once`): the leader uploads sealed segments below the HW and applies
remote retention, every replica applies local retention; on the active controller's node it now and
then sweeps the remote data that topic deletions left behind. A fetch below the local log start of a
tiered topic is served from the remote tier (`remote_read`, off the event loop).

The rounds run on `RemoteLogManagerPool`, a bounded pool of threads
(`remote.log.manager.thread.pool.size`, Kafka's key), so that many partitions upload, apply
retention and read manifests in parallel while one slow or unreachable partition does not hold the
others back.

    pool = RemoteLogManagerPool(4, task=manager.tier_once)
    pool.run_round(partitions, stopping)     # every partition once; at most 4 at a time
    pool.close()

A round ends when every task has ended, so one partition never has two tasks in flight (its
copy rounds stay in order). A task's exception is logged and the round goes on. When `stopping`
is set, tasks not started yet are cancelled and the round returns without waiting for the
running ones (the node's shutdown bounds that wait).

Concurrency: `run_round` is called from one thread (the node's `remote-log-manager` thread); the
tasks run on the pool's threads. `remote_read`, `remote_log_start` and `delete_remote_topic` are
called from the event loop and do their I/O on worker threads.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Callable, Generic, Iterable, TypeVar

from lakelog.index.transaction_index import TxnIndexSearch
from lakelog.ingest_api.broker.remote_reads import RemoteReads
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.replication.partition import Partition, PartitionKey
from lakelog.logstore.local_log import FetchResult
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.stores import open_store
from lakelog.tiering.errors import FencedLeaderEpochError as RemoteFencedError
from lakelog.tiering.errors import RemoteStorageUnavailableError, TieringError
from lakelog.tiering.guarded_store import GuardedStore
from lakelog.tiering.store_health import StoreHealth

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
        #: A round stopped while some of its tasks still ran (blocked on the store, say).
        self.left_running = False

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
                    if not f.cancel():
                        self.left_running = True
                break
        return sum(1 for f in futures if f.done() and not f.cancelled())

    def close(self) -> None:
        """Cancel queued tasks; running ones end on their own (the pool's threads are not joined)."""
        self._pool.shutdown(wait=False, cancel_futures=True)


class RemoteLogManager:
    """Tiering for one node's replicas (see the module docstring)."""

    def __init__(self, config: NodeConfig, *, partitions: Callable[[], list[Partition]],
                 topic_id: Callable[[str], str | None], topic_metadata: Callable[[str], Any],
                 live_topics: Callable[[], dict[str, str]], is_sweeper: Callable[[], bool]) -> None:
        self.config = config
        self._partitions = partitions
        self._topic_id = topic_id
        self._topic_metadata = topic_metadata
        self._live_topics = live_topics
        self._is_sweeper = is_sweeper
        #: The remote tier (opened by `open`); used by partitions of topics with remote.storage.enable.
        self.tier: RemoteTier | None = None
        #: Partitions whose uploads a newer leader fenced, with the leader epoch that was fenced:
        #: skipped until the metadata gives this node a new epoch.
        self._fenced: dict[PartitionKey, int] = {}
        #: Topic descriptors this node last wrote to the remote tier (see _publish_topic_descriptor).
        self._published_descriptors: dict = {}
        #: The object store's health (tiering/store_health.py) and the reads waiting on it (opened by `open`).
        self.health: StoreHealth | None = None
        self.reads: RemoteReads | None = None
        self._pool: RemoteLogManagerPool | None = None

    def open(self) -> None:
        tiering = TieringConfig(self.config.tiering_config())
        self.health = StoreHealth(failure_threshold=tiering.remote_storage_health_failure_threshold,
                                  probe_interval_ms=tiering.remote_storage_health_probe_interval_ms)
        store = GuardedStore(open_store(self.config.remote_url, tiering), self.health)
        self.tier = RemoteTier(store, tiering)
        self.reads = RemoteReads(threads=tiering.remote_log_reader_threads,
                                 max_pending=tiering.remote_log_reader_max_pending_tasks,
                                 max_wait_ms=tiering.remote_fetch_max_wait_ms, health=self.health)

    def close(self, timeout_s: float | None = None) -> bool:
        """Close the remote tier, waiting at most `timeout_s` for its requests in flight; False when
        some still hang on the store then (their threads are left behind: the process must not
        wait for them at exit)."""
        left = (self._pool is not None and self._pool.left_running) or (self.reads is not None and self.reads.pending > 0)
        if self.reads is not None:
            self.reads.close()
        if self.tier is None:
            return not left
        closer = threading.Thread(target=self._close_tier, args=(self.tier,), name="remote-tier-close", daemon=True)
        closer.start()
        closer.join(timeout_s)
        if closer.is_alive():
            log.warning("the remote tier did not close within %.1f s: object-store requests still hang "
                        "(an upload in flight is taken over by the next leader)", timeout_s or 0)
            return False
        if left:
            log.warning("remote tier tasks still wait on the object store; the node stops without them")
        return not left

    @staticmethod
    def _close_tier(tier: RemoteTier) -> None:
        try:
            tier.close()
        except Exception:
            log.exception("closing the remote tier failed")

    def status(self) -> dict | None:
        """The remote tier's state for `/readyz` and the console (None: no remote tier)."""
        if self.health is None or self.tier is None:
            return None
        out = self.health.snapshot().as_dict()
        out["url"] = self.tier.store.url
        if self.reads is not None:
            out.update(pending_reads=self.reads.pending, read_timeouts=self.reads.timeouts,
                       reads_refused=self.reads.refused)
        return out

    def tiered(self, p: Partition) -> bool:
        return self.tier is not None and bool(p.log.config.remote_storage_enable)

    def remote(self, p: Partition):
        assert self.tier is not None
        return self.tier.partition(p.key.topic, p.key.partition, topic_id=self._topic_id(p.key.topic))

    def forget(self, key: PartitionKey) -> None:
        """The replica left this node: drop its remote state."""
        if self.tier is not None:
            self.tier.forget(key.topic, key.partition)
        self._fenced.pop(key, None)

    # ------------------------------------------------------------------ the background rounds

    def loop(self, stopping: threading.Event) -> None:
        """Every `remote.log.manager.task.interval.ms`, one round over the replicas of tiered topics
        on the pool (a round waits for all of its tasks); on the active controller's node, now and
        then, the sweep of data that topic deletions left behind."""
        interval = self.config.remote_log_manager_task_interval_ms / 1000
        pool = self._pool = RemoteLogManagerPool(self.config.remote_log_manager_thread_pool_size, self.tier_once)
        last_sweep = time.monotonic()
        try:
            while not stopping.wait(interval):
                pool.run_round([p for p in self._partitions() if self.tiered(p) and not p.log.closed], stopping)
                sweep_ms = self.config.get("remote.log.deleted.topics.sweep.interval.ms")
                if sweep_ms and (time.monotonic() - last_sweep) * 1000 >= sweep_ms and not stopping.is_set():
                    last_sweep = time.monotonic()
                    self.sweep_deleted_topics()
        finally:
            pool.close()

    def sweep_deleted_topics(self):
        """On the active controller's node (its metadata is the cluster's, caught up): delete remote
        data of topics no longer in the metadata, unchanged for `remote.log.deleted.topics.grace.ms`
        (a topic deletion whose remote deletion failed). Returns the sweep report, or None when this
        node is not the one to sweep."""
        if self.tier is None or not self._is_sweeper():
            return None
        try:
            report = self.tier.sweep_deleted_topics(self._live_topics(),
                                                    grace_ms=self.config.get("remote.log.deleted.topics.grace.ms"))
        except Exception as e:  # the store is unreachable: the next sweep retries
            log.warning("sweeping deleted topics' remote data failed: %s", e)
            return None
        if report.deleted or report.errors:
            log.info("deleted topics' remote data: %d partition(s) deleted (%d objects), %d too recent, errors: %s",
                     len(report.deleted), report.objects_deleted, len(report.too_recent), report.errors or "none")
        return report

    def tier_once(self, p: Partition) -> None:
        """One round of the remote log manager for one replica (on a background thread).

        The leader uploads sealed segments below the HW and the LSO and applies remote retention; every
        replica applies local retention (`local.retention.*`: only tiered segments are deleted).
        A fenced leader stops uploading until its leader epoch changes; a store error is logged
        and retried next round (local data stays).
        """
        rp = self.remote(p)
        epoch, hw = p.leader_epoch, p.high_watermark
        if p.is_leader and p.key.partition == 0:
            self._publish_topic_descriptor(p.key.topic)
        if p.is_leader and self._fenced.get(p.key) != epoch:
            try:
                # Below the LSO only, as Kafka copies: every transaction in an uploaded segment is
                # decided, so the remote tier (and its compaction) never holds undecided data.
                report = rp.copy_segments(p.log, epoch, min(hw, p.last_stable_offset))
                if getattr(report, "restarted_at", None) is not None:
                    log.warning("%s: the remote tier restarted at %s (local data expired before it was tiered)",
                                p.key, report.restarted_at)
                rp.enforce_log_retention(p.log, epoch)
            except RemoteFencedError as e:
                log.info("%s: remote tier uploads fenced in leader epoch %d: %s", p.key, epoch, e)
                self._fenced[p.key] = epoch
            except RemoteStorageUnavailableError as e:  # uploads pause; the next round resumes in order
                log.debug("%s: remote tier copy paused: %s", p.key, e)
            except Exception as e:  # transient store errors, a closed log: retried next round
                log.warning("%s: remote tier copy failed (retried in the next round): %s", p.key, e)
        elif not p.is_leader:
            assert self.tier is not None
            self.tier.metrics.forget_partition(p.key.topic, p.key.partition)  # upload lag is the leader's
        try:
            rp.apply_local_retention(p.log, hw)
        except Exception as e:
            log.warning("%s: local retention of a tiered log failed (retried in the next round): %s", p.key, e)

    def _publish_topic_descriptor(self, topic: str) -> None:
        """Keep `_topics/<topic>.json` in the remote tier current (configs for the Spark jobs)."""
        from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor

        assert self.tier is not None
        try:
            meta = self._topic_metadata(topic)
            d = TopicDescriptor(topic, meta.topic_id, meta.partitions, {k: str(v) for k, v in meta.configs.items()})
            if self._published_descriptors.get(topic) != d:
                write_topic_descriptor(self.tier.store, d)
                self._published_descriptors[topic] = d
        except Exception as e:  # the topic went away, or the store is down: next round
            log.debug("%s: topic descriptor not published: %s", topic, e)

    # ------------------------------------------------------------------ from the event loop

    async def delete_remote_topic(self, name: str, topic_id: str, partitions: int) -> None:
        """Delete a deleted topic's remote data (every partition), retrying transient errors a while."""
        if self.tier is None:
            return
        await asyncio.to_thread(self._delete_all, self.tier, name, topic_id, partitions)

    def _delete_all(self, tier: RemoteTier, name: str, topic_id: str, partitions: int) -> None:
        from lakelog.tiering.topics import topic_descriptor_key

        for part in range(partitions):
            rp = tier.partition(name, part, topic_id=topic_id)
            for attempt in range(5):
                try:
                    rp.delete_all()
                    break
                except TieringError as e:
                    if attempt == 4:
                        log.error("%s-%d: deleting the remote data failed; it stays in the remote tier: %s",
                                  name, part, e)
                    else:
                        time.sleep(0.2 * (attempt + 1))
            tier.forget(name, part)
        try:
            tier.store.delete(topic_descriptor_key(name))
            self._published_descriptors.pop(name, None)
        except TieringError as e:
            log.warning("%s: the topic descriptor stays in the remote tier: %s", name, e)

    async def remote_read(self, p: Partition, offset: int, max_bytes: int) -> FetchResult:
        """A fetch below the local log start of a tiered topic, from the remote tier (off the loop)."""
        rp = self.remote(p)
        assert self.reads is not None
        hw = p.high_watermark
        res = await self.reads.run(f"a fetch of {p.key} at offset {offset}",
                                   lambda: rp.read(offset, max_bytes, max_offset=hw))
        return FetchResult(res.records, res.first_offset, res.log_start_offset, p.log.log_end_offset)

    async def aborted_transactions(self, p: Partition, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearch:
        """The aborted transactions the remote tier's `.txnindex` objects list for a read_committed
        fetch of [fetch_offset, upper_bound_offset) (off the loop)."""
        rp = self.remote(p)
        assert self.reads is not None
        return await self.reads.run(f"the aborted transactions of {p.key} at offset {fetch_offset}",
                                    rp.aborted_transactions, fetch_offset, upper_bound_offset)

    async def remote_log_start(self, p: Partition) -> int | None:
        """The remote log start offset (None: the remote tier holds nothing); during a store outage
        (an error, or no answer within `remote.fetch.max.wait.ms`) the last manifest this node read
        answers (None if it never read one)."""
        rp = self.remote(p)
        assert self.reads is not None
        try:
            return await self.reads.run(f"the remote log start of {p.key}", lambda: rp.log_start_offset)
        except TieringError as e:
            log.info("%s: remote log start from the cached manifest (store error: %s)", p.key, e)
            m = rp.meta.cached or rp.meta.last_known
            return m.log_start_offset if m is not None and m.end_offset is not None else None

    async def offset_for_timestamp(self, p: Partition, timestamp: int) -> tuple[int, int] | None:
        assert self.reads is not None
        rp = self.remote(p)
        return await self.reads.run(f"a timestamp lookup of {p.key}", rp.offset_for_timestamp, timestamp)
