"""The ingest node's logic, independent of HTTP: cluster membership, topics, produce, fetch, replication.

Routers call these methods and translate errors (see errors.py).

A node is a member of a cluster whose metadata (brokers, topics, partition leaders and ISRs) is a
Raft-replicated event log (`ingest_api/cluster/`). Nodes listed in `controller.quorum.voters`
vote; the Raft leader runs the active controller. Every node applies the committed metadata to its
`ClusterImage` and reconciles its replicas with it: it opens the logs of the partitions it hosts,
leads the ones it is leader of, and runs one replica fetcher per leader it follows
(`ingest_api/replication/`). A request for a partition this node does not lead is forwarded to the
leader (one hop), so any node answers any request.

Lifecycle:
  * `start()` (sync, before the HTTP server): data directory, `meta.properties`, limits.
  * `start_cluster()` (async, on the server's loop): the Raft host (restoring the metadata image),
    peers, broker registration and heartbeats, the ISR checker. The node is *ready* — and serves
    client requests — once the controller has registered and unfenced it, which it does when the
    node has caught up with the metadata log.
  * `controlled_shutdown()` (async, on SIGTERM while still serving): asks the controller to move
    this node's leaderships away, bounded by `controlled.shutdown.timeout.ms`.
  * `stop_cluster()` (async) then `stop()` (sync): fetchers, Raft host, logs closed cleanly.

Concurrency: the replicas and the metadata image are changed on the server's event loop; logs have
their own locks (the cleaner and flush threads use them).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import resource
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from lakelog.compaction.cleaner import LogCleaner
from lakelog.infra.config import LOG_CONFIG, ConfigError
from lakelog.ingest_api.cluster.controller import Controller, ControllerConfig
from lakelog.ingest_api.cluster.image import ClusterImage, encode_record
from lakelog.ingest_api.cluster.errors import (
    BrokerNotRegisteredError,
    FencedBrokerError,
    InvalidReplicationFactorError,
    NotControllerError,
)
from lakelog.ingest_api.cluster.quorum import QuorumConfig, QuorumHost, parse_voters
from lakelog.ingest_api.config import NodeConfig
from lakelog.ingest_api.error_table import code_of, http_error
from lakelog.ingest_api.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    NodeError,
    NotLeaderOrFollowerError,
    NotReadyError,
    PartitionNotFoundError,
    RemoteError,
    RequestTooLargeError,
    TopicExistsError,
    TopicNotFoundError,
)
from lakelog.ingest_api.metadata import TopicMetadata, load_or_create_meta_properties
from lakelog.ingest_api.names import validate_topic_name
from lakelog.ingest_api.security.records import CONTROLLER_OPS as SECURITY_CONTROLLER_OPS
from lakelog.ingest_api.security.tls import client_context as tls_client_context
from lakelog.ingest_api.security.records import controller_records as security_controller_records
from lakelog.ingest_api.partition import Partition, PartitionKey, Role, now_ms
from lakelog.ingest_api.partitioner import StickyPartitioner
from lakelog.ingest_api.remote_log_manager import RemoteLogManagerPool
from lakelog.ingest_api.replication import wire
from lakelog.ingest_api.replication.fetcher import ReplicaFetcher
from lakelog.ingest_api.replication.peers import PeerClient
from lakelog.logstore.errors import OffsetOutOfRangeError
from lakelog.logstore.log import AppendInfo, FetchResult, PartitionLog
from lakelog.logstore.record_batch import Record, build_batch
from lakelog.tiering import RemoteTier, TieringConfig, open_store
from lakelog.tiering.errors import FencedLeaderEpochError as RemoteFencedError
from lakelog.tiering.errors import TieringError

log = logging.getLogger("lakelog.node")

_REREGISTER_CODES = (code_of(FencedBrokerError), code_of(BrokerNotRegisteredError))

#: Open files a partition's log holds (the active segment's .log, .index, .timeindex).
FILES_PER_PARTITION = 3
#: Kafka's per-partition file naming the topic id the directory belongs to.
PARTITION_METADATA_FILE = "partition.metadata"
#: Most attempts of a controller request while the controller moves.
CONTROLLER_RETRIES = 50


@dataclass(frozen=True)
class ProduceRecord:
    """One record of a JSON / binary produce request, already turned into bytes."""

    key: bytes | None
    value: bytes | None
    partition: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True)
class ProduceResult:
    partition: int
    offset: int


@dataclass(frozen=True)
class PartitionStateView:
    """A partition as the metadata image says it is."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.node_id: int = config.node_id
        self.data_dir = config.data_dir
        self.cluster_id = ""
        self.image = ClusterImage()
        self.quorum: QuorumHost | None = None
        self.controller: Controller | None = None
        self.peers: PeerClient | None = None
        self.broker_epoch = -1
        self.incarnation_id = uuid.uuid4().hex
        self._partitions: dict[PartitionKey, Partition] = {}
        self._topic_ids: dict[str, str] = {}
        self._topic_configs: dict[PartitionKey, dict[str, str]] = {}
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._lock = threading.RLock()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._tasks: list[asyncio.Task] = []
        self._controller_lock: asyncio.Lock | None = None
        self._controller_task: asyncio.Task | None = None
        self._reconcile_scheduled = False
        self._shutting_down = False
        self._shutdown_done: asyncio.Event | None = None
        self._isr_in_flight: set[PartitionKey] = set()
        self._strays_removed = False
        self._metadata_waiters: list[tuple[int, asyncio.Future]] = []
        self._pid_next = self._pid_end = 0
        #: Client requests are served only before this (monotonic) time: the broker session that the
        #: last successful heartbeat renewed. Past it the controller may have fenced this node and
        #: moved its leaderships without this node hearing of it (a pause, a network partition).
        self._session_valid_until = 0.0
        #: After a lapsed session: the metadata index (the controller's, at the heartbeat that renewed
        #: it) to apply before serving again, so a deposed leader never answers as a leader.
        self._catch_up_index = 0
        self.voters = parse_voters(config.controller_quorum_voters) if config.controller_quorum_voters else {
            self.node_id: (config.host, config.port)}
        self.cleaner = LogCleaner(interval_ms=config.log_cleaner_backoff_ms) if config.log_cleaner_enable else None
        #: Topic descriptors this node last wrote to the remote tier (see _publish_topic_descriptor).
        self._published_descriptors: dict = {}
        #: The remote tier (opened by `start`); used by partitions of topics with remote.storage.enable.
        self.tier: RemoteTier | None = None
        #: Partitions whose uploads a newer leader fenced, with the leader epoch that was fenced:
        #: skipped until the metadata gives this node a new epoch.
        self._tier_fenced: dict[PartitionKey, int] = {}
        self.started_at = time.time()
        self.controller_config = ControllerConfig.from_keys(config)

    # ------------------------------------------------------------------ lifecycle

    @property
    def ready(self) -> bool:
        if self.broker_epoch < 0 or self._shutting_down:
            return False
        if time.monotonic() >= self._session_valid_until or self.image.last_applied_index < self._catch_up_index:
            return False
        b = self.image.brokers.get(self.node_id)
        return b is not None and b.broker_epoch == self.broker_epoch and not b.fenced

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = load_or_create_meta_properties(self.data_dir, self.node_id, self._wanted_cluster_id())
        self._start_background(self._flush_loop, "flush-scheduler")
        if self.cleaner is not None:
            self.cleaner.start()
        self.tier = RemoteTier(open_store(self.config.remote_url, TieringConfig(self.config.tiering_config())),
                               TieringConfig(self.config.tiering_config()))
        self._start_background(self._tiering_loop, "remote-log-manager")

    def _wanted_cluster_id(self) -> str:
        if self.config.cluster_id:
            return self.config.cluster_id
        # Every node of one configured quorum derives the same id.
        voters = ",".join(f"{i}@{h}:{p}" for i, (h, p) in sorted(self.voters.items()))
        return uuid.UUID(bytes=hashlib.sha256(voters.encode()).digest()[:16]).hex[:22]

    async def start_cluster(self) -> None:
        cfg = self.config
        self._controller_lock = asyncio.Lock()
        self._shutdown_done = asyncio.Event()
        tls = tls_client_context(cfg)
        self.peers = PeerClient(self.node_id, cfg.cluster_secret.encode(), self.peer_url,
                                timeout_s=cfg.request_timeout_ms / 1000 + 5, ssl_context=tls)
        if self.node_id not in self.voters:
            raise ConfigError(f"node {self.node_id} is not in controller.quorum.voters: this release runs every "
                              f"node as a voter")
        qcfg = QuorumConfig(node_id=self.node_id, voters=self.voters, secret=cfg.cluster_secret.encode(),
                            data_dir=self.data_dir,
                            metadata_log_dir=Path(cfg.metadata_log_dir) if cfg.metadata_log_dir else None,
                            tick_ms=cfg.controller_quorum_tick_ms,
                            # A lone voter needs no one's vote: let it elect itself at once.
                            election_timeout_ms=(cfg.controller_quorum_election_timeout_ms if len(self.voters) > 1
                                                 else 3 * cfg.controller_quorum_tick_ms),
                            heartbeat_interval_ms=(max(cfg.controller_quorum_tick_ms,
                                                       cfg.controller_quorum_election_timeout_ms // 10)
                                                   if len(self.voters) > 1 else cfg.controller_quorum_tick_ms),
                            snapshot_interval_entries=cfg.metadata_snapshot_interval_entries, tls=tls)
        self.quorum = QuorumHost(qcfg, self.image, on_role_change=self._on_role_change,
                                 on_applied=self._on_applied)
        await self.quorum.start()
        self._tasks.append(asyncio.get_running_loop().create_task(self._broker_loop(), name="broker-lifecycle"))
        self._tasks.append(asyncio.get_running_loop().create_task(self._isr_loop(), name="isr-checker"))
        log.info("node %s started: cluster %s, voters %s", self.node_id, self.cluster_id, sorted(self.voters))

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this node's leaderships away; returns when it says done or on timeout."""
        if self.broker_epoch < 0 or not self.config.controlled_shutdown_enable:
            return
        self._shutting_down = True
        deadline = time.monotonic() + self.config.controlled_shutdown_timeout_ms / 1000
        while time.monotonic() < deadline:
            try:
                res = await self.controller_call("heartbeat", self._heartbeat_args(want_shutdown=True),
                                                 attempt_timeout_s=self._heartbeat_timeout_s)
                if res.get("should_shut_down"):
                    log.info("node %s: controlled shutdown done", self.node_id)
                    return
            except Exception as e:
                log.info("controlled shutdown request failed: %s", e)
            await asyncio.sleep(0.1)
        log.warning("node %s: controlled shutdown timed out; stopping anyway", self.node_id)

    async def stop_cluster(self) -> None:
        self._shutting_down = True
        for t in self._tasks:
            t.cancel()
        if self._controller_task is not None:
            self._controller_task.cancel()
        for t in self._tasks + ([self._controller_task] if self._controller_task else []):
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self._tasks.clear()
        for f in list(self._fetchers.values()):
            await f.stop()
        self._fetchers.clear()
        for p in self.partitions():
            p.close_waiters(NotLeaderOrFollowerError(f"{p.key}: the node is shutting down"))
        if self.quorum is not None:
            await self.quorum.stop()
        if self.peers is not None:
            await self.peers.close()

    def stop(self) -> None:
        self._shutting_down = True
        self._stopping.set()
        with self._lock:
            partitions = list(self._partitions.values())
        for p in partitions:
            p.wake_all()
        deadline = time.monotonic() + self.config.shutdown_timeout_ms / 1000
        if self.cleaner is not None:
            self.cleaner.stop(max(0.1, deadline - time.monotonic()))
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if self.tier is not None:
            try:
                self.tier.close()
            except Exception:
                log.exception("closing the remote tier failed")
        for p in partitions:
            p.log.close()
        log.info("node %s stopped cleanly", self.node_id)

    def _start_background(self, target, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _flush_loop(self) -> None:
        interval = self.config.log_flush_scheduler_interval_ms / 1000
        while not self._stopping.wait(interval):
            for p in self.partitions():
                try:
                    p.log.flush_if_due()
                except Exception:  # a closed log during deletion; the next pass moves on
                    log.exception("flush of %s failed", p.key)

    # ------------------------------------------------------------------ the remote tier

    def _tiered(self, p: Partition) -> bool:
        return self.tier is not None and bool(p.log.config.remote_storage_enable)

    def _remote(self, p: Partition):
        assert self.tier is not None
        return self.tier.partition(p.key.topic, p.key.partition, topic_id=self._topic_ids.get(p.key.topic))

    def _tiering_loop(self) -> None:
        """The remote log manager: every `remote.log.manager.task.interval.ms`, one round over the
        replicas of tiered topics on a pool of `remote.log.manager.thread.pool.size` threads (a
        partition is never in two tasks at once: a round waits for all of its tasks); on the active
        controller's node, now and then, the sweep of data that topic deletions left behind."""
        interval = self.config.remote_log_manager_task_interval_ms / 1000
        pool = RemoteLogManagerPool(self.config.remote_log_manager_thread_pool_size, self.tier_once)
        last_sweep = time.monotonic()
        try:
            while not self._stopping.wait(interval):
                pool.run_round([p for p in self.partitions() if self._tiered(p) and not p.log.closed],
                               self._stopping)
                sweep_ms = self.config.get("remote.log.deleted.topics.sweep.interval.ms")
                if sweep_ms and (time.monotonic() - last_sweep) * 1000 >= sweep_ms and not self._stopping.is_set():
                    last_sweep = time.monotonic()
                    self.sweep_deleted_topics()
        finally:
            pool.close()

    def sweep_deleted_topics(self):
        """On the active controller's node (its metadata is the cluster's, caught up): delete remote
        data of topics no longer in the metadata, unchanged for `remote.log.deleted.topics.grace.ms`
        (a topic deletion whose remote deletion failed). Returns the sweep report, or None when this
        node is not the one to sweep."""
        if self.tier is None or self.quorum is None or not self.quorum.is_leader or self.controller is None \
                or not self.ready:
            return None
        live = {name: t.topic_id for name, t in list(self.image.topics.items())}
        try:
            report = self.tier.sweep_deleted_topics(live, grace_ms=self.config.get("remote.log.deleted.topics.grace.ms"))
        except Exception as e:  # the store is unreachable: the next sweep retries
            log.warning("sweeping deleted topics' remote data failed: %s", e)
            return None
        if report.deleted or report.errors:
            log.info("deleted topics' remote data: %d partition(s) deleted (%d objects), %d too recent, errors: %s",
                     len(report.deleted), report.objects_deleted, len(report.too_recent), report.errors or "none")
        return report

    def tier_once(self, p: Partition) -> None:
        """One round of the remote log manager for one replica (on a background thread).

        The leader uploads sealed segments below the HW and applies remote retention; every
        replica applies local retention (`local.retention.*`: only tiered segments are deleted).
        A fenced leader stops uploading until its leader epoch changes; a store error is logged
        and retried next round (local data stays).
        """
        rp = self._remote(p)
        epoch, hw = p.leader_epoch, p.high_watermark
        if p.is_leader and p.key.partition == 0:
            self._publish_topic_descriptor(p.key.topic)
        if p.is_leader and self._tier_fenced.get(p.key) != epoch:
            try:
                report = rp.copy_segments(p.log, epoch, hw)
                if getattr(report, "restarted_at", None) is not None:
                    log.warning("%s: the remote tier restarted at %s (local data expired before it was tiered)",
                                p.key, report.restarted_at)
                rp.enforce_log_retention(p.log, epoch)
            except RemoteFencedError as e:
                log.info("%s: remote tier uploads fenced in leader epoch %d: %s", p.key, epoch, e)
                self._tier_fenced[p.key] = epoch
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

    async def delete_remote_topic(self, name: str, topic_id: str, partitions: int) -> None:
        """Delete a deleted topic's remote data (every partition), retrying transient errors a while."""
        assert self.tier is not None
        tier = self.tier

        def delete_all() -> None:
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
            from lakelog.tiering.topics import topic_descriptor_key

            try:
                tier.store.delete(topic_descriptor_key(name))
                self._published_descriptors.pop(name, None)
            except TieringError as e:
                log.warning("%s: the topic descriptor stays in the remote tier: %s", name, e)

        await asyncio.to_thread(delete_all)

    def check_ready(self) -> None:
        if not self.ready:
            raise NotReadyError("node is not ready (starting, catching up with the cluster metadata, or stopping)")

    # ------------------------------------------------------------------ peers and the controller

    @property
    def controller_id(self) -> int:
        """The active controller's node id (-1 while none is known)."""
        leader = self.quorum.leader_id if self.quorum is not None else None
        return -1 if leader is None else leader

    def peer_url(self, node_id: int) -> str | None:
        b = self.image.brokers.get(node_id)
        scheme = "https" if self.config.ssl_certfile else "http"
        if b is not None:
            return f"{scheme}://{b.host}:{b.port}"
        v = self.voters.get(node_id)
        return f"{scheme}://{v[0]}:{v[1]}" if v else None

    def _on_role_change(self, role: Any, term: int, leader_id: int) -> None:
        is_leader = self.quorum is not None and self.quorum.is_leader
        if is_leader and self._controller_task is None:
            self._controller_task = asyncio.get_running_loop().create_task(self._controller_loop(term),
                                                                             name="controller")
        elif not is_leader and self._controller_task is not None:
            if self.controller is not None:
                self.controller.deactivate()
            self.controller = None
            self._controller_task.cancel()
            self._controller_task = None
            log.info("node %s is no longer the controller (epoch %d, leader %s)", self.node_id, term, leader_id)

    async def _controller_loop(self, term: int) -> None:
        interval = self.config.controller_tick_ms / 1000
        # Act only once this term's first entry is applied: then every broker epoch and producer-id
        # block handed out by earlier controllers is in the image.
        while self.image.last_applied_term < term:
            await asyncio.sleep(0.01)
        async with self._controller_lock:  # type: ignore[union-attr]
            self.controller = Controller(self.image, self.controller_config)
            self.controller.activate(now_ms())
        log.info("node %s is the active controller (epoch %d)", self.node_id, term)
        while True:
            await asyncio.sleep(interval)
            try:
                async with self._controller_lock:  # type: ignore[union-attr]
                    ctrl = self.controller
                    if ctrl is None:
                        return
                    records = ctrl.tick(now_ms())
                    await self._propose_all(records)
            except asyncio.CancelledError:
                raise
            except NotControllerError:
                return
            except Exception:
                log.exception("controller tick failed")

    async def _propose_all(self, records: list[dict]) -> int:
        assert self.quorum is not None
        index = self.image.last_applied_index
        for r in records:
            index = await self.quorum.propose(encode_record(r), self.config.request_timeout_ms / 1000)
        return index

    async def controller_call(self, op: str, args: dict[str, Any], *,
                              attempt_timeout_s: float | None = None) -> dict[str, Any]:
        """Run a controller request on the active controller (here, or forwarded to it); retries while it moves.

        `attempt_timeout_s` bounds each forwarded attempt (heartbeats: well below the broker
        session, so that a call stuck on a controller that died or was cut off is retried on its
        successor before this node's session runs out there).
        """
        delay = 0.05
        last: Exception | None = None
        for _ in range(CONTROLLER_RETRIES):
            if self.quorum is not None and self.quorum.is_leader and self.controller is not None:
                try:
                    return await self.run_controller_op(op, args)
                except NotControllerError as e:
                    last = e
            else:
                leader = self.quorum.leader_id if self.quorum is not None else -1
                if leader is not None and leader >= 0 and leader != self.node_id:
                    assert self.peers is not None
                    try:
                        resp = await self.peers.post_json(leader, f"/internal/controller/{op}", args,
                                                          timeout_s=attempt_timeout_s)
                    except NodeError as e:
                        last = e
                    else:
                        doc = resp.json() if resp.content else {}
                        if resp.status_code == 200:
                            return doc
                        if doc.get("error_code") != code_of(NotControllerError):  # anything else is final
                            raise RemoteError(resp.status_code, int(doc.get("error_code", resp.status_code * 100)),
                                              str(doc.get("message", resp.text[:200])))
                        last = RemoteError(resp.status_code, code_of(NotControllerError), str(doc.get("message")))
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
        raise LeaderNotAvailableError(f"no active controller answered {op}: {last}")

    async def run_controller_op(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Execute a controller request; only on the active controller."""
        assert self._controller_lock is not None
        async with self._controller_lock:
            ctrl = self.controller
            if ctrl is None or self.quorum is None or not self.quorum.is_leader:
                raise NotControllerError(f"node {self.node_id} is not the active controller",
                                         self.quorum.leader_id if self.quorum else None)
            now = now_ms()
            result: dict[str, Any] = {}
            if op == "register_broker":
                records, epoch = ctrl.register_broker(int(args["node_id"]), str(args["incarnation_id"]),
                                                      str(args["host"]), int(args["port"]), args.get("rack"), now)
                result["broker_epoch"] = epoch
            elif op == "heartbeat":
                records, reply = ctrl.heartbeat(int(args["node_id"]), int(args["broker_epoch"]), now,
                                                caught_up_offset=int(args["caught_up_offset"]),
                                                want_shutdown=bool(args.get("want_shutdown")))
                result.update({"fenced": reply.fenced, "in_controlled_shutdown": reply.in_controlled_shutdown,
                               "should_shut_down": reply.should_shut_down})
            elif op == "create_topic":
                topic_id = uuid.uuid4().hex
                records = ctrl.create_topic(str(args["name"]), int(args["partitions"]), int(args["replication_factor"]),
                                            dict(args.get("configs") or {}), topic_id, now)
                result["topic_id"] = topic_id
            elif op == "delete_topic":
                records = ctrl.delete_topic(str(args["name"]))
            elif op == "alter_configs":
                records = ctrl.alter_configs(str(args["name"]), dict(args["configs"]))
            elif op == "create_partitions":
                records = ctrl.create_partitions(str(args["name"]), int(args["total"]))
            elif op == "alter_partition":
                records, _ = ctrl.alter_partition(int(args["node_id"]), int(args["broker_epoch"]), str(args["topic"]),
                                                  int(args["partition"]), int(args["leader_epoch"]),
                                                  int(args["partition_epoch"]), [int(r) for r in args["new_isr"]])
            elif op == "allocate_producer_ids":
                records, first, count = ctrl.allocate_producer_ids(int(args["node_id"]), int(args["broker_epoch"]))
                result.update({"first_id": first, "count": count})
            elif op in SECURITY_CONTROLLER_OPS:  # users, API keys, ACLs (ingest_api/security/records.py)
                ctrl._require_active()
                records, extra = security_controller_records(op, args, self.image.security)
                result.update(extra)
            else:
                raise InvalidRequestError(f"unknown controller request {op!r}")
            result["metadata_offset"] = await self._propose_all(records)
            if op == "create_topic":
                created = self.image.topics.get(str(args["name"]))
                if created is None or created.topic_id != result["topic_id"]:
                    raise TopicExistsError(f"Topic '{args['name']}' already exists.")
            return result

    # ------------------------------------------------------------------ broker lifecycle

    @property
    def _heartbeat_timeout_s(self) -> float:
        """One heartbeat attempt's time limit: half the broker session."""
        return max(0.05, self.config.broker_session_timeout_ms / 2000)

    def _heartbeat_args(self, *, want_shutdown: bool = False) -> dict[str, Any]:
        return {"node_id": self.node_id, "broker_epoch": self.broker_epoch,
                "caught_up_offset": self.image.last_applied_index, "want_shutdown": want_shutdown}

    async def _broker_loop(self) -> None:
        cfg = self.config
        host, port = cfg.advertised_host_port
        while True:
            if self.broker_epoch < 0:
                try:
                    res = await self.controller_call("register_broker", {
                        "node_id": self.node_id, "incarnation_id": self.incarnation_id, "host": host,
                        "port": port, "rack": cfg.broker_rack or None})
                    self.broker_epoch = int(res["broker_epoch"])
                    log.info("node %s registered with broker epoch %d", self.node_id, self.broker_epoch)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.info("registration failed, retrying: %s", e)
                    await asyncio.sleep(0.05)
                    continue
            try:
                if not self._shutting_down:
                    sent = time.monotonic()
                    res = await self.controller_call("heartbeat", self._heartbeat_args(),
                                                     attempt_timeout_s=self._heartbeat_timeout_s)
                    if not res.get("fenced"):
                        if sent >= self._session_valid_until:  # lapsed: catch up before serving again
                            self._catch_up_index = int(res.get("metadata_offset", 0))
                        # The controller renews the session when it handles the heartbeat, after `sent`.
                        self._session_valid_until = sent + cfg.broker_session_timeout_ms / 1000
            except asyncio.CancelledError:
                raise
            except NodeError as e:
                if http_error(e)[1] in _REREGISTER_CODES:  # fenced / unknown broker epoch: register again
                    self.broker_epoch = -1
                log.info("heartbeat failed: %s", e)
            except Exception as e:
                log.info("heartbeat failed: %s", e)
            if self.ready and not self._strays_removed:
                self._remove_stray_logs()
            interval = cfg.broker_heartbeat_interval_ms if self.ready else min(200, cfg.broker_heartbeat_interval_ms)
            await asyncio.sleep(interval / 1000)

    # ------------------------------------------------------------------ metadata -> replicas

    def _on_applied(self, index: int) -> None:
        for waiter in list(self._metadata_waiters):
            if index >= waiter[0]:
                self._metadata_waiters.remove(waiter)
                if not waiter[1].done():
                    waiter[1].set_result(None)
        if not self._reconcile_scheduled:
            self._reconcile_scheduled = True
            asyncio.get_running_loop().call_soon(self._reconcile)

    async def wait_for_metadata(self, index: int, timeout_s: float) -> bool:
        """Wait until this node has applied the metadata log up to `index`."""
        if self.image.last_applied_index >= index:
            return True
        fut = asyncio.get_running_loop().create_future()
        entry = (index, fut)
        self._metadata_waiters.append(entry)
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            if entry in self._metadata_waiters:
                self._metadata_waiters.remove(entry)

    def _reconcile(self) -> None:
        self._reconcile_scheduled = False
        try:
            self._reconcile_now()
        except Exception:
            log.exception("reconciling replicas with the metadata failed")

    def _reconcile_now(self) -> None:
        wanted: set[PartitionKey] = set()
        for name, topic in self.image.topics.items():
            for p, st in enumerate(topic.partitions):
                if self.node_id not in st.replicas:
                    continue
                key = PartitionKey(name, p)
                wanted.add(key)
                part = self._partitions.get(key)
                if part is None or self._topic_ids.get(name) != topic.topic_id:
                    if part is not None:
                        self._drop_partition(key)
                    part = self._open_partition(name, p, topic.topic_id, topic.configs)
                elif self._topic_configs.get(key) != topic.configs:
                    part.log.update_config(self.config.log_config(topic.configs))
                self._topic_configs[key] = dict(topic.configs)
                if st.leader == self.node_id:
                    if part.make_leader(st.leader_epoch, st.partition_epoch, st.replicas, st.isr):
                        log.info("%s: leader in epoch %d, ISR %s", key, st.leader_epoch, st.isr)
                    self._isr_in_flight.discard(key)
                    self._unfollow(key)
                else:
                    if part.make_follower(st.leader, st.leader_epoch, st.partition_epoch, st.replicas, st.isr):
                        log.info("%s: follower of node %d in epoch %d", key, st.leader, st.leader_epoch)
                    self._unfollow(key, keep=st.leader)
                    if st.leader >= 0:
                        self._fetcher(st.leader).add(key)
        for key in [k for k in self._partitions if k not in wanted]:
            self._drop_partition(key)

    def _fetcher(self, leader: int) -> ReplicaFetcher:
        f = self._fetchers.get(leader)
        if f is None:
            f = self._fetchers[leader] = ReplicaFetcher(self, leader)
            f.start()
        return f

    def _unfollow(self, key: PartitionKey, keep: int = -1) -> None:
        for leader, f in self._fetchers.items():
            if leader != keep and key in f.keys:
                f.remove(key)

    def _open_partition(self, topic: str, p: int, topic_id: str, configs: dict[str, str]) -> Partition:
        key = PartitionKey(topic, p)
        directory = self.data_dir / f"{topic}-{p}"
        marker = directory / PARTITION_METADATA_FILE
        if directory.exists() and marker.exists() and _read_topic_id(marker) != topic_id:
            log.warning("%s: the directory belongs to an older topic of that name; deleting it", key)
            shutil.rmtree(directory)
        self._check_file_budget(1)
        plog = PartitionLog(directory, self.config.log_config(configs))
        if not marker.exists():
            _write_topic_id(marker, topic_id)
        if not plog.recovery.clean_shutdown:
            log.warning("partition %s recovered: %s", key, plog.recovery)
        partition = Partition(key, plog, self.node_id)
        with self._lock:
            self._partitions[key] = partition
            self._topic_ids[topic] = topic_id
        if self.cleaner is not None:
            self.cleaner.register(plog, lambda: partition.high_watermark)
        return partition

    def _drop_partition(self, key: PartitionKey) -> None:
        with self._lock:
            part = self._partitions.pop(key, None)
        self._topic_configs.pop(key, None)
        self._unfollow(key)
        if part is None:
            return
        part.close_waiters(NotLeaderOrFollowerError(f"{key}: the partition was deleted or moved"))
        if self.cleaner is not None:
            self.cleaner.unregister(part.log)
        if self.tier is not None:
            self.tier.forget(key.topic, key.partition)
        self._tier_fenced.pop(key, None)
        part.log.delete()
        log.info("deleted the local replica of %s", key)

    def _remove_stray_logs(self) -> None:
        """Once caught up: delete partition directories the metadata no longer assigns to this node."""
        self._strays_removed = True
        with self._lock:
            known = {f"{k.topic}-{k.partition}" for k in self._partitions}
        for d in self.data_dir.iterdir():
            if d.is_dir() and (d / PARTITION_METADATA_FILE).exists() and d.name not in known:
                log.info("deleting stray partition directory %s", d.name)
                shutil.rmtree(d, ignore_errors=True)

    def _check_file_budget(self, new_partitions: int) -> None:
        """Refuse partitions whose logs would not fit in the process's open-file limit."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return
        try:
            in_use = len(os.listdir("/proc/self/fd"))
        except OSError:
            in_use = 0
        needed = new_partitions * FILES_PER_PARTITION
        if in_use + needed > soft * 3 // 4:
            raise InvalidRequestError(f"{new_partitions} more partition(s) need about {needed} open files; this node "
                                      f"uses {in_use} of its limit of {soft}: raise the limit (ulimit -n) or use "
                                      f"fewer partitions")

    # ------------------------------------------------------------------ ISR changes

    async def _isr_loop(self) -> None:
        lag = self.config.replica_lag_time_max_ms
        interval = max(0.05, lag / 2000)
        while True:
            await asyncio.sleep(interval)
            for p in self.partitions():
                if p.role != Role.LEADER or p.key in self._isr_in_flight:
                    continue
                out = p.out_of_sync_replicas(lag)
                if out:
                    new_isr = [r for r in p.isr if r not in out]
                    log.info("%s: shrinking ISR %s -> %s (lagging: %s)", p.key, p.isr, new_isr, out)
                    self._alter_isr(p, new_isr)

    def _alter_isr(self, p: Partition, new_isr: list[int]) -> None:
        if p.key in self._isr_in_flight:
            return
        self._isr_in_flight.add(p.key)
        p.pending_isr = list(new_isr)
        asyncio.get_running_loop().create_task(self._send_alter_isr(p, new_isr, p.leader_epoch, p.partition_epoch))

    async def _send_alter_isr(self, p: Partition, new_isr: list[int], leader_epoch: int, partition_epoch: int) -> None:
        try:
            await self.controller_call("alter_partition", {
                "node_id": self.node_id, "broker_epoch": self.broker_epoch, "topic": p.key.topic,
                "partition": p.key.partition, "leader_epoch": leader_epoch, "partition_epoch": partition_epoch,
                "new_isr": new_isr})
        except Exception as e:
            log.info("%s: ISR change to %s refused: %s", p.key, new_isr, e)
            if p.partition_epoch == partition_epoch:
                p.pending_isr = None
            self._isr_in_flight.discard(p.key)
            return
        # The committed change reaches this node through the metadata log (reconcile clears the flag).
        if p.partition_epoch != partition_epoch:
            self._isr_in_flight.discard(p.key)

    # ------------------------------------------------------------------ topics

    def _topic_metadata(self, name: str) -> TopicMetadata:
        t = self.image.topics.get(name)
        if t is None:
            raise TopicNotFoundError(f"Topic {name} not found.")
        return TopicMetadata(name, t.topic_id, len(t.partitions),
                             len(t.partitions[0].replicas) if t.partitions else 0, dict(t.configs),
                             [list(s.replicas) for s in t.partitions])

    def topics(self) -> list[TopicMetadata]:
        self.check_ready()
        return [self._topic_metadata(n) for n in sorted(self.image.topics)]

    def topic(self, name: str) -> TopicMetadata:
        self.check_ready()
        return self._topic_metadata(name)

    def partition_state(self, topic: str, partition: int) -> PartitionStateView:
        self.check_ready()
        t = self.image.topics.get(topic)
        if t is None:
            raise TopicNotFoundError(f"Topic {topic} not found.")
        if not 0 <= partition < len(t.partitions):
            raise PartitionNotFoundError(f"Partition {partition} of topic {topic} not found.")
        st = t.partitions[partition]
        return PartitionStateView(topic, partition, st.leader, st.leader_epoch, list(st.replicas), list(st.isr))

    def brokers(self) -> list[Any]:
        self.check_ready()
        return [self.image.brokers[i] for i in sorted(self.image.brokers)]

    async def _admin(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        res = await self.controller_call(op, args)
        # Answer once this node has applied the change, so the caller reads its own write here.
        await self.wait_for_metadata(int(res.get("metadata_offset", 0)), self.config.request_timeout_ms / 1000)
        return res

    async def create_topic(self, name: str, partitions: int | None = None, replication_factor: int | None = None,
                           configs: dict[str, str] | None = None, *, validate_only: bool = False) -> TopicMetadata:
        """Create a topic; with `validate_only`, run every check and create nothing (Kafka's
        CreateTopics validateOnly): the answer describes the topic as it would be."""
        self.check_ready()
        validate_topic_name(name)
        partitions = self.config.num_partitions if partitions is None else partitions
        rf = self.config.default_replication_factor if replication_factor is None else replication_factor
        if not 1 <= partitions <= self.config.max_partitions_per_topic:
            raise InvalidRequestError(f"partitions_count must be between 1 and {self.config.max_partitions_per_topic}")
        configs = self._validated_configs(configs or {})
        # Refuse up front a topic whose share of logs would not fit this node's open-file limit
        # (placement spreads replicas evenly, so every node gets about the same share).
        live = max(1, sum(1 for b in self.image.brokers.values() if not b.fenced))
        self._check_file_budget(-(-partitions * min(rf, live) // live))
        if validate_only:
            if name in self.image.topics:
                raise TopicExistsError(f"Topic '{name}' already exists.")
            if rf > live:  # what the controller's placement would refuse
                raise InvalidReplicationFactorError(
                    f"replication factor {rf} is larger than the {live} available broker(s)")
            return TopicMetadata(name, "", partitions, rf, configs, [])
        await self._admin("create_topic", {"name": name, "partitions": partitions, "replication_factor": rf,
                                           "configs": configs})
        log.info("created topic %s with %d partition(s), replication factor %d", name, partitions, rf)
        return self._topic_metadata(name)

    def _validated_configs(self, configs: dict[str, str]) -> dict[str, str]:
        for name in configs:
            if name not in LOG_CONFIG.keys:
                raise ConfigError(f"unknown topic config {name!r}")
        self.config.log_config(configs)  # raises on a bad value
        # A tiered compacted topic is compacted by the Spark job over the remote tier; the local
        # cleaner leaves its hot tail alone (compaction/cleaner.py).
        return {k: str(v) for k, v in configs.items()}

    async def delete_topic(self, name: str) -> None:
        """Delete a topic. The node that handled the request (after applying the deletion) also
        deletes the topic's remote data, when the topic was tiered."""
        self.check_ready()
        meta = self._topic_metadata(name)
        await self._admin("delete_topic", {"name": name})
        log.info("deleted topic %s", name)
        if self.tier is not None and self.config.log_config(meta.configs).remote_storage_enable:
            await self.delete_remote_topic(name, meta.topic_id, meta.partitions)

    async def alter_topic_configs(self, name: str, set_configs: dict[str, str],
                                  delete: Iterable[str] = ()) -> TopicMetadata:
        self.check_ready()
        topic = self._topic_metadata(name)
        merged = dict(topic.configs)
        merged.update({k: str(v) for k, v in set_configs.items()})
        for k in delete:
            merged.pop(k, None)
        merged = self._validated_configs(merged)
        await self._admin("alter_configs", {"name": name, "configs": merged})
        return self._topic_metadata(name)

    async def create_partitions(self, name: str, total: int) -> TopicMetadata:
        """Grow a topic to `total` partitions (never shrinks; Kafka's `--alter --partitions`). Keyed
        records may map to other partitions afterwards; consumer groups subscribed to the topic rebalance."""
        self.check_ready()
        topic = self._topic_metadata(name)
        if topic.partitions < total <= self.config.max_partitions_per_topic:
            live = max(1, sum(1 for b in self.image.brokers.values() if not b.fenced))
            self._check_file_budget(-(-(total - topic.partitions) * min(topic.replication_factor, live) // live))
        await self._admin("create_partitions", {"name": name, "total": total})
        log.info("topic %s now has %d partitions", name, total)
        return self._topic_metadata(name)

    def topic_config(self, name: str) -> dict[str, object]:
        """Effective config of a topic: every key with its value (defaults filled in)."""
        topic = self.topic(name)
        return self.config.log_config(topic.configs).to_dict()

    def partitions(self) -> list[Partition]:
        with self._lock:
            return list(self._partitions.values())

    def local_partition(self, key: PartitionKey) -> Partition | None:
        return self._partitions.get(key)

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader per this node's metadata (-1 when it has none)."""
        return self.partition_state(topic, partition).leader

    def partition(self, topic: str, partition: int) -> Partition:
        """The local replica, which must be the leader."""
        st = self.partition_state(topic, partition)
        p = self._partitions.get(PartitionKey(topic, partition))
        if p is None or not p.is_leader:
            if st.leader < 0:
                raise LeaderNotAvailableError(f"partition {topic}-{partition} has no leader")
            raise NotLeaderOrFollowerError(f"this node is not the leader of {topic}-{partition} "
                                           f"(leader: node {st.leader})")
        return p

    # ------------------------------------------------------------------ produce

    async def produce_batches(self, topic: str, partition: int, data: bytes, acks: str = "all") -> AppendInfo:
        """Append RecordBatch v2 bytes as received (after validation) on this node, the leader."""
        p = self.partition(topic, partition)
        # The log's config is the topic's effective config (updated on every alter): no rebuild per request.
        min_isr = p.log.config.min_insync_replicas
        info = p.append_as_leader(data, required_acks=acks, min_isr=min_isr)
        if acks == "all":
            await p.wait_for_commit(info.last_offset + 1, self.config.request_timeout_ms / 1000, min_isr)
        return info

    async def init_producer_id(self) -> tuple[int, int]:
        """A new producer id (epoch 0) from this node's block; a new block from the controller when it runs out."""
        if self._pid_next >= self._pid_end:
            res = await self.controller_call("allocate_producer_ids", {"node_id": self.node_id,
                                                                       "broker_epoch": self.broker_epoch})
            if self._pid_next >= self._pid_end:
                self._pid_next, self._pid_end = int(res["first_id"]), int(res["first_id"]) + int(res["count"])
        pid = self._pid_next
        self._pid_next += 1
        return pid, 0

    async def produce_records(self, topic: str, records: list[ProduceRecord], *, partition: int | None = None,
                              timestamp_ms: int | None = None, acks: str = "all",
                              producer: Any = None) -> list[ProduceResult]:
        """Append JSON / binary records: one batch per target partition (forwarded to its leader when
        that is another node); results in request order."""
        self.check_ready()
        meta = self._topic_metadata(topic)
        if len(records) > self.config.max_records_per_request:
            raise RequestTooLargeError(f"{len(records)} records exceed max.records.per.request="
                                       f"{self.config.max_records_per_request}")
        if not records:
            raise InvalidRequestError("records must not be empty")
        now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        sticky = StickyPartitioner(meta.partitions)
        targets: list[int] = []
        for r in records:
            p = partition if partition is not None else (r.partition if r.partition is not None else sticky.partition(r.key))
            if not 0 <= p < meta.partitions:
                raise PartitionNotFoundError(f"Partition {p} of topic {topic} not found.")
            targets.append(p)
        by_partition: dict[int, list[int]] = {}
        for i, p in enumerate(targets):
            by_partition.setdefault(p, []).append(i)
        if producer is not None and len(by_partition) > 1:
            raise InvalidRequestError("an idempotent produce (producer_id, sequence) must target one partition: "
                                      "sequences are per partition")
        ids = {} if producer is None else {"producer_id": producer.producer_id,
                                           "producer_epoch": producer.producer_epoch,
                                           "base_sequence": producer.sequence}

        async def one(p: int, idxs: list[int]) -> tuple[list[int], int]:
            batch = build_batch([Record(j, now, records[i].key, records[i].value, records[i].headers)
                                 for j, i in enumerate(idxs)], **ids)
            leader = self.leader_of(topic, p)
            if leader == self.node_id:
                info = await self.produce_batches(topic, p, batch, acks)
                return idxs, info.first_offset
            if leader < 0:
                raise LeaderNotAvailableError(f"partition {topic}-{p} has no leader")
            return idxs, await self.forward_batch(leader, topic, p, batch, acks)

        offsets = [0] * len(records)
        for idxs, first in await asyncio.gather(*(one(p, idxs) for p, idxs in by_partition.items())):
            for j, i in enumerate(idxs):
                offsets[i] = first + j
        return [ProduceResult(p, o) for p, o in zip(targets, offsets)]

    async def forward_batch(self, leader: int, topic: str, partition: int, batch: bytes, acks: str) -> int:
        """Produce a batch through its leader (one hop); returns its base offset."""
        assert self.peers is not None
        path = f"/topics/{topic}/partitions/{partition}?acks={acks}"
        resp = await self.peers.request(leader, "POST", path, batch, headers={
            "Content-Type": "application/vnd.kafka.recordbatch", FORWARDED_HEADER: str(self.node_id)},
            timeout_s=self.config.request_timeout_ms / 1000 + 5)
        doc = _json_or_empty(resp)
        if resp.status_code != 200:
            raise RemoteError(resp.status_code, int(doc.get("error_code", resp.status_code * 100)),
                              str(doc.get("message", resp.text[:200])))
        return int(doc["offsets"][0]["offset"])

    # ------------------------------------------------------------------ fetch and offsets

    async def fetch_wait(self, topic: str, partition: int, offset: int, max_bytes: int,
                         timeout_ms: int) -> FetchResult:
        """Fetch; if nothing is there yet, wait up to `timeout_ms` (bounded by fetch.max.wait.ms)."""
        p = self.partition(topic, partition)
        if offset < p.log.log_start_offset and self._tiered(p):
            return await self._remote_read(p, offset, max_bytes)
        try:
            result = p.read(offset, max_bytes)
        except OffsetOutOfRangeError:
            # Local retention of a tiered log moved the local start past `offset` meanwhile.
            if offset < p.log.log_start_offset and self._tiered(p):
                return await self._remote_read(p, offset, max_bytes)
            raise
        if len(result.records) or timeout_ms <= 0:
            return result
        await p.wait_for_data(offset, min(timeout_ms, self.config.fetch_max_wait_ms) / 1000)
        # Look the partition up again: it may have been deleted (404) while we waited. If its
        # leadership moved, answer the empty result: the consumer's next fetch goes to the new leader.
        try:
            p = self.partition(topic, partition)
        except (NotLeaderOrFollowerError, LeaderNotAvailableError):
            return result
        return p.read(offset, max_bytes)

    async def _remote_read(self, p: Partition, offset: int, max_bytes: int) -> FetchResult:
        """A fetch below the local log start of a tiered topic, from the remote tier (off the loop)."""
        rp = self._remote(p)
        res = await asyncio.to_thread(rp.read, offset, max_bytes, max_offset=p.high_watermark)
        return FetchResult(res.records, res.first_offset, res.log_start_offset, p.log.log_end_offset)

    def _remote_log_start(self, p: Partition) -> int | None:
        """The remote log start offset (None: the remote tier holds nothing); during a store outage
        the last manifest this node read answers (None if it never read one)."""
        rp = self._remote(p)
        try:
            return rp.log_start_offset
        except TieringError as e:
            log.info("%s: remote log start from the cached manifest (store error: %s)", p.key, e)
            m = rp.meta.cached or rp.meta.last_known
            return m.log_start_offset if m is not None and m.end_offset is not None else None

    async def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(beginning offset, end offset) as a consumer sees them: log start offset (the remote
        tier's when it holds data) and HW."""
        p = self.partition(topic, partition)
        start = p.log_start_offset
        if self._tiered(p):
            remote_start = await asyncio.to_thread(self._remote_log_start, p)
            if remote_start is not None:
                start = min(start, remote_start)
        return start, p.consumer_end_offset()

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> tuple[int, int] | None:
        p = self.partition(topic, partition)
        if self._tiered(p):  # the remote tier holds the oldest records: ask it first
            found = await asyncio.to_thread(self._remote(p).offset_for_timestamp, timestamp)
            if found is not None and found[0] < p.high_watermark:
                return found
        found = p.log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= p.high_watermark:
            return None
        return found

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
        for e in request.get("partitions", [])[:10000]:
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
        """A follower's fetch: record its LEO, read from its fetch offset (past the HW), long-poll if empty."""
        replica_id = int(request["replica_id"])
        max_wait = min(int(request.get("max_wait_ms", 0)), self.config.replica_fetch_wait_max_ms) / 1000
        budget = min(int(request.get("max_bytes", 1 << 20)), self.config.replica_fetch_response_max_bytes)
        entries = request.get("partitions", [])[:10000]

        def read_all() -> list[wire.PartitionData]:
            out = []
            remaining = budget
            for e in entries:
                topic, part = str(e["topic"]), int(e["partition"])
                p, code, msg = self._replica_partition(topic, part, int(e["current_leader_epoch"]))
                if p is None:
                    out.append(wire.PartitionData(topic, part, code, msg, -1, -1, -1, b""))
                    continue
                offset = int(e["fetch_offset"])
                leo = p.log.log_end_offset
                if offset > leo or offset < p.log.log_start_offset:
                    out.append(wire.PartitionData(topic, part, wire.OFFSET_OUT_OF_RANGE,
                                                  f"fetch offset {offset} outside [{p.log.log_start_offset}, {leo}]",
                                                  p.high_watermark, p.log.log_start_offset, leo, b""))
                    continue
                new_isr = p.on_follower_fetch(replica_id, offset)
                if new_isr is not None:
                    log.info("%s: node %d caught up; expanding ISR to %s", p.key, replica_id, new_isr)
                    self._alter_isr(p, new_isr)
                records: bytes | memoryview = b""
                if offset < leo and remaining > 0:
                    res = p.log.read(offset, min(remaining, int(e.get("max_bytes", remaining))))
                    records = res.records
                    remaining -= len(records)
                out.append(wire.PartitionData(topic, part, wire.NONE, None, p.high_watermark,
                                              p.log.log_start_offset, p.log.log_end_offset, records))
            return out

        result = read_all()
        if max_wait > 0 and not any(len(d.records) for d in result) and all(d.error_code == wire.NONE for d in result):
            waits = []
            for d in result:
                p = self._partitions.get(PartitionKey(d.topic, d.partition))
                if p is not None:
                    waits.append(p.wait_for_leo(d.log_end_offset, max_wait))
            if waits:
                done, pending = await asyncio.wait([asyncio.ensure_future(w) for w in waits],
                                                   return_when=asyncio.FIRST_COMPLETED, timeout=max_wait)
                for t in pending:
                    t.cancel()
                # Re-read: the follower's fetch offset is unchanged, so its LEO record stays correct.
                result = read_all()
        return result


FORWARDED_HEADER = "X-Lakelog-Forwarded-By"


def _json_or_empty(resp) -> dict:
    try:
        doc = resp.json()
        return doc if isinstance(doc, dict) else {}
    except ValueError:
        return {}


def _read_topic_id(path: Path) -> str | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith("topic_id:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _write_topic_id(path: Path, topic_id: str) -> None:
    from lakelog.logstore.fileutil import atomic_write
    atomic_write(path, f"version: 0\ntopic_id: {topic_id}\n".encode())
