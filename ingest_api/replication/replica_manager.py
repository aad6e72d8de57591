"""The replica manager: this node's partition replicas, kept in line with the cluster metadata.

* Reconcile (`schedule_reconcile`, after every applied metadata batch): open the logs of the
  partitions the metadata assigns to this node, make each leader or follower in its leader epoch,
  run one `ReplicaFetcher` per leader followed, delete replicas moved away or deleted; once the node
  is ready, delete stray partition directories left from before.
* ISR (`isr`, isr_manager.py: its loop, and on follower fetches): propose shrinks of lagging
  followers and expansions of caught-up ones to the controller (AlterPartition, the changes of many
  partitions in one request); the committed change comes back through the metadata log.
* Leader side of replication: answer followers' fetches in their fetch sessions (`FetchSessions`:
  recording their fetch offsets, answering only partitions with news, long-polling on one waiter
  per session when there is none) and OffsetsForLeaderEpoch.
* The flush scheduler (`flush.ms`, `flush_scheduler.py`): fed by the logs' append listeners.

Creating partitions durably, in batches (`SyncBatch`, logstore/fileutil.py): a new partition's
directory, segment files, `partition.metadata` and first `leader-epoch-checkpoint` are written
without fsync and made durable together, once per batch: the logs opened on the threads
(`_load_logs`, up to `LOG_OPEN_BATCH`) by one sync before any of them is registered, and the
writes of a reconcile pass (`reconcile_now`: logs it opens itself, the leader epochs new leaders
stamp) by one sync before the pass returns to the event loop. So a partition is never served,
and no fetch offset of it reported, before its directory is on disk; a crash before the sync
leaves a new directory that was never served, which the next open handles: a missing
`partition.metadata` is written then, an empty one names no topic id, so the directory is deleted
and created afresh, and an empty `leader-epoch-checkpoint` reads as no entries (leader_epoch.py).

Concurrency: replicas are added and removed on the node's event loop under `_lock` (the flush and
remote-log-manager threads list them); a `Partition` has its own concurrency contract.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Awaitable, Callable

from lakelog.compaction.cleaner import LogCleaner
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.throttles import (
    FOLLOWER_RATE,
    LEADER_RATE,
    ThrottleQuota,
    is_throttled,
)
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.errors import InvalidRequestError, NotLeaderOrFollowerError
from lakelog.ingest_api.replication.events import Role
from lakelog.ingest_api.replication.partition import Partition, PartitionKey, monotonic_ms
from lakelog.ingest_api.replication import wire
from lakelog.ingest_api.replication.fetcher import ReplicaFetcher
from lakelog.ingest_api.replication.flush_scheduler import FlushScheduler
from lakelog.ingest_api.replication.isr_manager import IsrManager
from lakelog.ingest_api.replication.sessions import FetchSession, FetchSessions
from lakelog.logstore.fileutil import SyncBatch, atomic_write
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.log_dir_health import LogDirHealth, is_disk_failure
from lakelog.logstore.open_files import FILES_PER_SEGMENT

log = logging.getLogger("lakelog.node")

#: Kafka's per-partition file naming the topic id the directory belongs to.
PARTITION_METADATA_FILE = "partition.metadata"
#: Most partitions one replica fetch or OffsetsForLeaderEpoch request may name.
MAX_PARTITIONS_PER_REQUEST = 10000
#: Longest a reconcile holds the event loop while it opens partition logs; the rest waits for the
#: loop's next turn. Opening one costs ~10 ms of file creation and fsyncs, so the 200 partitions of
#: one new topic would stall the loop for seconds, and the controller quorum's ticks, heartbeats and
#: lease run on it: its leader took the stall for a pause and stepped down, over and over.
RECONCILE_SLICE_S = 0.05
#: Threads that open (after a restart) and close (at stop) partition logs side by side: each mostly
#: waits on the disk (fsyncs, the clean-shutdown marker), so thousands of logs take seconds, not minutes.
LOG_IO_THREADS = 8
#: Missing logs from which the reconcile opens them on the threads, and most per batch.
PARALLEL_OPEN_MIN = 16
LOG_OPEN_BATCH = 500
#: Opening at least this many logs in one pass is reported ("startup phase", at INFO).
LOG_OPENING_REPORT_MIN = 10


class ReplicaManager:
    def __init__(self, config: NodeConfig, image: ClusterImage, *, cleaner: LogCleaner | None,
                 new_fetcher: Callable[[int], ReplicaFetcher],
                 controller_call: Callable[..., Awaitable[dict[str, Any]]],
                 broker_epoch: Callable[[], int], on_drop: Callable[[PartitionKey], None]) -> None:
        self.config = config
        self.node_id = config.node_id
        self.data_dir = config.data_dir
        #: The log directory's health (logstore/log_dir_health.py): offline after an I/O error.
        self.log_dir = LogDirHealth(self.data_dir)
        self.image = image
        self.cleaner = cleaner
        self._new_fetcher = new_fetcher
        self._on_drop = on_drop
        self._partitions: dict[PartitionKey, Partition] = {}
        self._topic_ids: dict[str, str] = {}
        self._topic_configs: dict[PartitionKey, dict[str, str]] = {}
        self._fetchers: dict[int, ReplicaFetcher] = {}
        #: New partition files and directories written unsynced, made durable once per batch (module doc).
        self.new_files = SyncBatch(self.data_dir)
        self._lock = threading.RLock()
        self._reconcile_scheduled = False
        #: (monotonic start, logs opened, logs recovered) when the open pass in progress began.
        self._opening_since: tuple[float, int, int] | None = None
        #: Logs opening on the threads (`_load_logs`), the pool, and keys whose opening there failed.
        self._loading: asyncio.Task | None = None
        self._open_pool: ThreadPoolExecutor | None = None
        self._load_failed: set[PartitionKey] = set()
        #: Partition logs opened, and of those recovered after an unclean shutdown (counts).
        self.logs_opened = 0
        self.logs_recovered = 0
        #: key -> (partition state, topic configs, topic id) objects of the image it was last reconciled with.
        self._reconciled: dict[PartitionKey, tuple[Any, Any, str]] = {}
        #: Partitions the full passes brought in line, and partitions the passes looked at (operation
        #: counts: tests, metrics).
        self.partitions_reconciled = 0
        self.partitions_examined_by_reconcile = 0
        #: topic name -> the image's topic object of the last full pass over it, and the keys of its
        #: partitions this node held then.
        self._seen_topics: dict[str, Any] = {}
        self._keys_by_topic: dict[str, set[PartitionKey]] = {}
        self._strays_removed = False
        #: Replication throttles (cluster/throttles.py): bytes this node sends as a leader to, and
        #: fetches as a follower for, throttled replicas out of the ISR.
        self.leader_quota = ThrottleQuota()
        self.follower_quota = ThrottleQuota()
        #: Followers' fetch sessions with this node as their leader.
        self.fetch_sessions = FetchSessions()
        #: The ISR checks of the partitions this node leads and their AlterPartition requests
        #: (`isr_manager.py`); the node runs its loop.
        self.isr = IsrManager(self.node_id, config.replica_lag_time_max_ms, partitions=self.partitions,
                              fetch_sessions=self.fetch_sessions, controller_call=controller_call,
                              broker_epoch=broker_epoch, isr_eligible=self._isr_eligible)
        #: The flush scheduler (`flush_scheduler.py`), fed by the logs' append listeners; the node
        #: runs its loop on a thread.
        self.flush = FlushScheduler(config.log_flush_scheduler_interval_ms, self.local_partition, self.log_dir)

    # ------------------------------------------------------------------ views

    def partitions(self) -> list[Partition]:
        with self._lock:
            return list(self._partitions.values())

    def local_partition(self, key: PartitionKey) -> Partition | None:
        return self._partitions.get(key)

    def topic_id(self, topic: str) -> str | None:
        return self._topic_ids.get(topic)

    def _isr_eligible(self, node_id: int) -> bool:
        """The metadata shows broker `node_id` unfenced and not shutting down: it may join an ISR."""
        reg = self.image.brokers.get(node_id)
        return reg is not None and not reg.fenced and not reg.in_controlled_shutdown

    # ------------------------------------------------------------------ metadata -> replicas

    def schedule_reconcile(self) -> None:
        """Reconcile soon, on the event loop (once for a burst of applied metadata)."""
        if not self._reconcile_scheduled:
            self._reconcile_scheduled = True
            asyncio.get_running_loop().call_soon(self._reconcile)

    def _reconcile(self) -> None:
        self._reconcile_scheduled = False
        if self._loading is not None:
            return  # logs are opening on the threads; that task reconciles again when it is done
        missing = self._missing_logs(LOG_OPEN_BATCH)
        if len(missing) >= PARALLEL_OPEN_MIN:
            self._loading = asyncio.get_running_loop().create_task(self._load_logs(missing), name="log-open")
            return
        try:
            done = self.reconcile_now(budget_s=RECONCILE_SLICE_S)
        except Exception:
            log.exception("reconciling replicas with the metadata failed")
            return
        if not done:
            self.schedule_reconcile()  # more partitions to open: after the loop's other work

    def reconcile_now(self, budget_s: float | None = None) -> bool:
        """Bring the replicas in line with the image; False when `budget_s` ran out first. The new
        files the pass writes are made durable by one sync before it returns (module doc)."""
        with self.new_files.deferring():
            try:
                return self._reconcile_pass(budget_s)
            finally:
                self._sync_new_files()

    def _sync_new_files(self) -> None:
        """Make the new partition files durable (module doc). A disk error takes the log directory
        offline, as a failed flush does: what the failed sync held is not known to be on disk."""
        try:
            self.new_files.sync()
        except OSError as e:
            if is_disk_failure(e):
                raise self.log_dir.failed("new partition files", "sync", e) from e
            raise

    def _reconcile_pass(self, budget_s: float | None) -> bool:
        """`reconcile_now`'s work.

        Only topics whose image object changed since the last full pass are looked at (the image
        replaces a topic's object when anything in it changes), and of those only the partitions
        whose state object changed: applying a metadata delta costs what it changed, not the
        partition count. The partitions this node lacks are opened first, as many as the budget
        allows (at least one per call); only once none is missing does the full pass run (roles,
        fetchers, configs, drops), so a sliced reconcile never repeats that pass per slice. The full
        pass is sliced too, by topic (at least one per call): a failover's delta changes every
        partition of every topic, thousands of role changes that would hold the event loop for
        seconds; a topic it finished is not looked at again (`_seen_topics`).
        """
        deadline = None if budget_s is None else time.monotonic() + budget_s
        changed = [(name, t) for name, t in self.image.topics.items() if self._seen_topics.get(name) is not t]
        opened = 0
        if self._opening_since is None:
            self._opening_since = (time.monotonic(), self.logs_opened, self.logs_recovered)
        for name, topic in changed:
            for p, st in enumerate(topic.partitions):
                self.partitions_examined_by_reconcile += 1
                key = PartitionKey(name, p)
                if self.node_id not in st.replicas or (
                        key in self._partitions and self._topic_ids.get(name) == topic.topic_id):
                    continue
                if opened and deadline is not None and time.monotonic() > deadline:
                    return False
                self._reconcile_one(key, topic, st)
                opened += 1
        since, opened_before, recovered_before = self._opening_since
        self._opening_since = None
        if self.logs_opened - opened_before >= LOG_OPENING_REPORT_MIN:
            log.info("startup phase: %d partition logs opened in %.1f s (%d recovered after an unclean shutdown)",
                     self.logs_opened - opened_before, time.monotonic() - since,
                     self.logs_recovered - recovered_before)
        for i, (name, topic) in enumerate(changed):
            if i and deadline is not None and time.monotonic() > deadline:
                return False
            self._reconcile_topic(name, topic)
        for name in [n for n in self._seen_topics if n not in self.image.topics]:
            for key in self._keys_by_topic.pop(name, set()):
                self._drop_partition(key)
            del self._seen_topics[name]
        return True

    def _missing_logs(self, limit: int) -> list[tuple[PartitionKey, Any]]:
        """Up to `limit` (key, topic) whose log this node should hold and has not opened (not
        counting those whose opening on the threads failed: the reconcile opens them itself)."""
        out: list[tuple[PartitionKey, Any]] = []
        for name, topic in self.image.topics.items():
            if self._seen_topics.get(name) is topic:
                continue
            for p, st in enumerate(topic.partitions):
                key = PartitionKey(name, p)
                if self.node_id not in st.replicas or key in self._load_failed or (
                        key in self._partitions and self._topic_ids.get(name) == topic.topic_id):
                    continue
                out.append((key, topic))
                if len(out) >= limit:
                    return out
        return out

    async def _load_logs(self, missing: list[tuple[PartitionKey, Any]]) -> None:
        """Open the logs of `missing` on `LOG_IO_THREADS` threads (a restart opens thousands: each
        mostly waits on the disk), registering each on the event loop as it comes; then reconcile."""
        loop = asyncio.get_running_loop()
        if self._open_pool is None:
            self._open_pool = ThreadPoolExecutor(max_workers=LOG_IO_THREADS, thread_name_prefix="log-open")
        started = time.monotonic()
        try:
            try:
                self.check_file_budget(len(missing))
            except InvalidRequestError as e:
                # Not all of them fit: the reconcile opens them one by one, each checked, as far as they do.
                log.error("opening %d partition logs: %s", len(missing), e)
                self._load_failed.update(key for key, _ in missing)
                return
            futures = [loop.run_in_executor(self._open_pool, self._load_log, key, topic.topic_id, topic.configs)
                       for key, topic in missing]
            opened: list[tuple[PartitionKey, Any, PartitionLog]] = []
            for (key, topic), fut in zip(missing, futures):
                try:
                    opened.append((key, topic, await fut))
                except Exception:
                    log.exception("opening the log of %s failed", key)
                    self._load_failed.add(key)
            try:
                # One sync for the whole batch, before any of its partitions is served (module doc).
                await loop.run_in_executor(self._open_pool, self._sync_new_files)
            except Exception:
                log.exception("syncing %d new partition logs failed", len(opened))
                for key, _, plog in opened:
                    plog.close()
                    self._load_failed.add(key)  # the reconcile opens them itself
                opened = []
            for key, topic, plog in opened:
                now = self.image.topics.get(key.topic)
                if now is None or now.topic_id != topic.topic_id or key in self._partitions:
                    plog.close()  # the metadata moved on meanwhile: the reconcile decides again
                    continue
                self._register_partition(key, topic.topic_id, topic.configs, plog)
            log.info("startup phase: %d partition logs opened in %.1f s on %d threads", len(missing),
                     time.monotonic() - started, LOG_IO_THREADS)
        finally:
            self._loading = None
            self.schedule_reconcile()

    def _reconcile_topic(self, name: str, topic: Any) -> None:
        """The full pass over one changed topic: its partitions whose state changed, and drops."""
        wanted: set[PartitionKey] = set()
        for p, st in enumerate(topic.partitions):
            if self.node_id not in st.replicas:
                continue
            key = PartitionKey(name, p)
            wanted.add(key)
            seen = self._reconciled.get(key)
            # The image replaces the state of a partition that changes and keeps the others'
            # objects: one that is the object reconciled last time has nothing new.
            if (seen is None or seen[0] is not st or seen[1] is not topic.configs
                    or seen[2] != topic.topic_id or key not in self._partitions):
                self._reconcile_one(key, topic, st)
                self._reconciled[key] = (st, topic.configs, topic.topic_id)
                self.partitions_reconciled += 1
        for key in self._keys_by_topic.get(name, set()) - wanted:
            self._drop_partition(key)
        self._keys_by_topic[name] = wanted
        self._seen_topics[name] = topic

    def _reconcile_one(self, key: PartitionKey, topic: Any, st: Any) -> None:
        part = self._partitions.get(key)
        if part is None or self._topic_ids.get(key.topic) != topic.topic_id:
            if part is not None:
                self._drop_partition(key)
            part = self._open_partition(key, topic.topic_id, topic.configs)
        elif self._topic_configs.get(key) != topic.configs:
            part.log.update_config(self.config.log_config(topic.configs))
        self._topic_configs[key] = dict(topic.configs)
        if st.leader == self.node_id:
            if part.make_leader(st.leader_epoch, st.partition_epoch, st.replicas, st.isr):
                log.info("%s: leader in epoch %d, ISR %s", key, st.leader_epoch, st.isr)
            self._unfollow(key)
        else:
            new_term = part.make_follower(st.leader, st.leader_epoch, st.partition_epoch, st.replicas, st.isr)
            if new_term:
                log.info("%s: follower of node %d in epoch %d", key, st.leader, st.leader_epoch)
            self._unfollow(key, keep=st.leader)
            if st.leader >= 0:
                fetcher = self._fetcher(st.leader)
                if new_term or key not in fetcher.keys:  # the fetcher looks only at what changed
                    fetcher.add(key)

    def _fetcher(self, leader: int) -> ReplicaFetcher:
        f = self._fetchers.get(leader)
        if f is None:
            f = self._fetchers[leader] = self._new_fetcher(leader)
            f.start()
        return f

    def _unfollow(self, key: PartitionKey, keep: int = -1) -> None:
        for leader, f in self._fetchers.items():
            if leader != keep and key in f.keys:
                f.remove(key)

    def _open_partition(self, key: PartitionKey, topic_id: str, configs: dict[str, str]) -> Partition:
        self.check_file_budget(1)
        return self._register_partition(key, topic_id, configs, self._load_log(key, topic_id, configs))

    def _load_log(self, key: PartitionKey, topic_id: str, configs: dict[str, str]) -> PartitionLog:
        """Open (recover, or create) a partition's log in its directory. Any thread. What it creates
        is recorded in `new_files` unsynced: the caller syncs it before serving the log (module doc).
        The caller checks the file budget first (`check_file_budget`: once per batch, as it lists
        /proc/self/fd, ~10 ms at 12,000 open files: per log, a restart paid seconds for it)."""
        directory = self.data_dir / f"{key.topic}-{key.partition}"
        marker = directory / PARTITION_METADATA_FILE
        if directory.exists() and marker.exists() and _read_topic_id(marker) != topic_id:
            # Also a creation a crash cut before its sync: an empty marker names no topic id.
            log.warning("%s: the directory belongs to an older topic of that name; deleting it", key)
            shutil.rmtree(directory)
        created = not directory.exists()
        with self.new_files.deferring():
            plog = PartitionLog(directory, self.config.log_config(configs))
            if not marker.exists():
                atomic_write(marker, f"version: 0\ntopic_id: {topic_id}\n".encode())
        if created:
            self.new_files.add_dir(directory)
        return plog

    def _register_partition(self, key: PartitionKey, topic_id: str, configs: dict[str, str],
                            plog: PartitionLog) -> Partition:
        """A freshly opened log becomes this node's replica. Event loop (or the caller's thread in tests)."""
        self.logs_opened += 1
        if not plog.recovery.clean_shutdown:
            self.logs_recovered += 1
            log.warning("partition %s recovered: %s", key, plog.recovery)
        partition = Partition(key, plog, self.node_id, self.log_dir, on_change=self.fetch_sessions.changed)
        plog.add_append_listener(lambda leo: self.flush.mark(key))
        with self._lock:
            self._partitions[key] = partition
            self._topic_ids[key.topic] = topic_id
        self._topic_configs[key] = dict(configs)  # the log was opened with them
        if self.cleaner is not None:
            self.cleaner.register(plog, lambda: partition.high_watermark)
        return partition

    def _drop_partition(self, key: PartitionKey) -> None:
        with self._lock:
            part = self._partitions.pop(key, None)
        self._topic_configs.pop(key, None)
        self._reconciled.pop(key, None)
        self._unfollow(key)
        if part is None:
            return
        part.close_waiters(NotLeaderOrFollowerError(f"{key}: the partition was deleted or moved"))
        if self.cleaner is not None:
            self.cleaner.unregister(part.log)
        self._on_drop(key)
        part.log.delete()
        log.info("deleted the local replica of %s", key)

    def remove_stray_logs_once(self) -> None:
        """Once caught up: delete partition directories the metadata no longer assigns to this node.

        Stray means not assigned by the metadata (nor open): the node is ready long before a
        restart with thousands of replicas has opened their logs, and a directory whose log is
        not open yet is not stray (deciding from the open logs deleted every log not yet opened,
        racing the threads opening them). An older topic's directory under a reused name is
        replaced where the log opens (`_load_log`: its topic id differs)."""
        if self._strays_removed:
            return
        self._strays_removed = True
        log.info("startup phase: serving; %d partition logs open", len(self._partitions))
        with self._lock:
            known = {f"{k.topic}-{k.partition}" for k in self._partitions}
        known |= {f"{name}-{p}" for name, topic in self.image.topics.items()
                  for p, st in enumerate(topic.partitions) if self.node_id in st.replicas}
        for d in self.data_dir.iterdir():
            if d.is_dir() and (d / PARTITION_METADATA_FILE).exists() and d.name not in known:
                log.info("deleting stray partition directory %s", d.name)
                shutil.rmtree(d, ignore_errors=True)

    def check_file_budget(self, new_partitions: int) -> None:
        """Refuse partitions whose logs would not fit in the process's open-file limit."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return
        try:
            in_use = len(os.listdir("/proc/self/fd"))
        except OSError:
            in_use = 0
        needed = new_partitions * FILES_PER_SEGMENT  # a new log holds one segment
        if in_use + needed > soft * 3 // 4:
            raise InvalidRequestError(f"{new_partitions} more partition(s) need about {needed} open files; this node "
                                      f"uses {in_use} of its limit of {soft}: raise the limit (ulimit -n) or use "
                                      f"fewer partitions")

    # ------------------------------------------------------------------ leader side of replication

    def _replica_partition(self, topic: str, partition: int, current_leader_epoch: int) -> tuple[Partition | None, int, str]:
        p = self._partitions.get(PartitionKey(topic, partition))
        if p is None:
            return None, wire.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{partition} is not hosted here"
        if current_leader_epoch < p.leader_epoch:
            return None, wire.FENCED_LEADER_EPOCH, f"leader epoch {current_leader_epoch} < {p.leader_epoch}"
        if current_leader_epoch > p.leader_epoch:
            return None, wire.UNKNOWN_LEADER_EPOCH, f"leader epoch {current_leader_epoch} > {p.leader_epoch}"
        if p.role != Role.LEADER:
            return None, wire.NOT_LEADER_OR_FOLLOWER, f"node {self.node_id} does not lead {topic}-{partition}"
        return p, wire.NONE, ""

    def epoch_end_offsets(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        """OffsetsForLeaderEpoch, answered by the leader."""
        out = []
        for e in request.get("partitions", [])[:MAX_PARTITIONS_PER_REQUEST]:
            p, code, msg = self._replica_partition(str(e["topic"]), int(e["partition"]), int(e["current_leader_epoch"]))
            if p is None:
                out.append({"topic": e["topic"], "partition": e["partition"], "error_code": code, "error": msg,
                            "leader_epoch": -1, "end_offset": -1})
                continue
            epoch, end = p.log.end_offset_for_epoch(int(e["leader_epoch"]))
            out.append({"topic": e["topic"], "partition": e["partition"], "error_code": wire.NONE, "error": None,
                        "leader_epoch": epoch, "end_offset": end})
        return out

    async def replica_fetch(self, request: dict[str, Any]) -> list[wire.PartitionData]:
        """A follower's fetch in its session (`replication/sessions.py`): record its fetch offsets, read
        from them (past the HW), and answer the partitions with something to say; long-poll on the
        session's one waiter when there is none. Event loop only."""
        replica_id = int(request["replica_id"])
        max_wait = min(int(request.get("max_wait_ms", 0)), self.config.replica_fetch_wait_max_ms) / 1000
        budget = min(int(request.get("max_bytes", 1 << 20)), self.config.replica_fetch_response_max_bytes)
        if len(request.get("partitions", [])) > MAX_PARTITIONS_PER_REQUEST:
            raise InvalidRequestError(f"a replica fetch names at most {MAX_PARTITIONS_PER_REQUEST} partitions")
        session, full, named = self.fetch_sessions.begin(replica_id, request)
        result, lazy = self._answer_session(session, full, named, budget)
        if max_wait > 0 and not result:
            # Only lazy news (a moved HW): keep it for the answer that ends the long-poll.
            self.fetch_sessions.defer(session, [PartitionKey(d.topic, d.partition) for d in lazy])
            await self.fetch_sessions.wait(session, max_wait)
            result, lazy = self._answer_session(session, False, [], budget)
        self._mark_sent(session, result)
        self._mark_sent(session, lazy)
        session.last_fetch_ms = monotonic_ms()
        return result + lazy

    def _answer_session(self, session: FetchSession, full: bool, named: list[PartitionKey],
                        budget: int) -> tuple[list[wire.PartitionData], list[wire.PartitionData]]:
        """(partitions with records, an error, or in a full request; partitions whose only news is their
        HW, log start or LEO)."""
        out, lazy = [], []
        remaining = budget
        for key in session.candidates(named, self.fetch_sessions.take_dirty(session)):
            sp = session.partitions[key]
            d = self._read_for_follower(session.replica_id, key, sp, remaining)
            session.behind.discard(key)
            if d.error_code != wire.NONE:
                out.append(d)
                continue
            remaining -= len(d.records)
            if sp.fetch_offset < d.log_end_offset:
                session.behind.add(key)
            if full or len(d.records):
                out.append(d)
            elif (d.high_watermark, d.log_start_offset, d.log_end_offset) != sp.sent:
                lazy.append(d)
        return out, lazy

    @staticmethod
    def _mark_sent(session: FetchSession, answered: list[wire.PartitionData]) -> None:
        for d in answered:
            sp = session.partitions.get(PartitionKey(d.topic, d.partition))
            if sp is not None and d.error_code == wire.NONE:
                sp.sent = (d.high_watermark, d.log_start_offset, d.log_end_offset)

    def _read_for_follower(self, replica_id: int, key: PartitionKey, sp: Any, remaining: int) -> wire.PartitionData:
        topic, part = key.topic, key.partition
        p, code, msg = self._replica_partition(topic, part, sp.current_leader_epoch)
        if p is None:
            return wire.PartitionData(topic, part, code, msg, -1, -1, -1, b"")
        offset = sp.fetch_offset
        leo = p.log.log_end_offset
        if offset > leo or offset < p.log.log_start_offset:
            return wire.PartitionData(topic, part, wire.OFFSET_OUT_OF_RANGE,
                                      f"fetch offset {offset} outside [{p.log.log_start_offset}, {leo}]",
                                      p.high_watermark, p.log.log_start_offset, leo, b"")
        self.isr.follower_fetched(p, replica_id, offset)
        records: bytes | memoryview = b""
        if offset < leo and remaining > 0:
            want = min(remaining, sp.max_bytes)
            rate = self.leader_throttle_rate(p, replica_id)
            if rate is not None:
                want = min(want, self.leader_quota.allowance(rate, time.monotonic()))
            if want > 0:
                records = p.log.read(offset, want).records
                if rate is not None:
                    self.leader_quota.record(rate, len(records), time.monotonic())
        return wire.PartitionData(topic, part, wire.NONE, None, p.high_watermark,
                                  p.log.log_start_offset, p.log.log_end_offset, records)

    def leader_throttle_rate(self, p: Partition, replica_id: int) -> int | None:
        """The leader throttle rate for a follower's fetch of `p`, or None when it is not throttled
        (no rate set, the partition not listed for this leader, or the follower in the ISR)."""
        rate = self.image.broker_configs.rate(self.node_id, LEADER_RATE)
        if rate is None or replica_id in p.isr:
            return None
        listed = p.log.config.leader_replication_throttled_replicas
        return rate if is_throttled(listed, p.key.partition, self.node_id) else None

    def follower_throttle_rate(self, p: Partition) -> int | None:
        """The follower throttle rate of this node's replica of `p`, or None when it is not throttled."""
        rate = self.image.broker_configs.rate(self.node_id, FOLLOWER_RATE)
        if rate is None or self.node_id in p.isr:
            return None
        listed = p.log.config.follower_replication_throttled_replicas
        return rate if is_throttled(listed, p.key.partition, self.node_id) else None

    # ------------------------------------------------------------------ background work and stop

    def close_logs(self) -> int:
        """Close every replica's log (flush, checkpoints, the clean-shutdown marker) on up to
        `LOG_IO_THREADS` threads: a close mostly waits on fsyncs, which then run side by side.
        Returns how many failed (a full or failed disk: the next start recovers those). Once, at stop."""
        if self._open_pool is not None:  # no log opens after this (one being opened finishes first)
            self._open_pool.shutdown(wait=True, cancel_futures=True)
        parts = self.partitions()
        started = time.monotonic()

        def close(p: Partition) -> bool:
            try:
                p.log.close()
                return True
            except OSError as e:
                log.error("closing %s failed (its last flush or checkpoint is not written): %s", p.key, e)
                return False

        with ThreadPoolExecutor(max_workers=max(1, min(LOG_IO_THREADS, len(parts))),
                                thread_name_prefix="log-close") as pool:
            closed = list(pool.map(close, parts))
        if len(parts) >= LOG_OPENING_REPORT_MIN:
            log.info("stop phase: %d partition logs closed in %.1f s", len(parts), time.monotonic() - started)
        return closed.count(False)

    async def stop_fetchers(self) -> None:
        """Stop following and release every waiter (the node leaves the cluster)."""
        for f in list(self._fetchers.values()):
            await f.stop()
        self._fetchers.clear()
        for p in self.partitions():
            p.close_waiters(NotLeaderOrFollowerError(f"{p.key}: the node is shutting down"))


def _read_topic_id(path: Path) -> str | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("topic_id:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None
