"""The ingest node: the wiring of its components, and the produce and fetch entry points.

Routers call the node (produce, fetch, offsets) or one of its services (`node.admin` for topics,
brokers and controller changes; `node.replicas` for the leader side of replication;
`node.controller_host` for controller requests) and translate errors (see errors.py).

A node is a member of a cluster whose metadata (brokers, topics, partition leaders and ISRs) is a
Raft-replicated event log (`ingest_api/cluster/`). The nodes in `controller.quorum.voters` are its
voters; the Raft leader runs the active controller. A node added later (not a voter) follows the log
as an observer (`cluster/observer.py`). Every node applies the committed metadata to its `ClusterImage` and reconciles
its replicas with it. A request for a partition this node does not lead is forwarded to the leader
(one hop), so any node answers any request.

Components (each in its own module; the node wires them and owns nothing else):
  * `ControllerHost` (controller_host.py): the active controller while this node is the Raft
    leader, the table of controller ops, and `call` (run an op on the active controller, wherever).
  * `BrokerSession` (broker_session.py): registration, heartbeats, the serving lease, controlled
    shutdown; its `BrokerState` enum decides whether the node is `ready`.
  * `ReplicaManager` (replica_manager.py): the replicas, reconcile, ISR changes, the leader side of
    replication, the flush scheduler.
  * `RemoteLogManager` (remote_log_manager.py): the remote tier, tiering rounds, remote reads.
  * `AdminService` (admin.py): topics, partition states, brokers; changes through the controller.

Lifecycle:
  * `start()` (sync, before the HTTP server): data directory, `meta.properties`, remote tier,
    flush scheduler, cleaner and remote log manager threads.
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
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from lakelog.compaction.cleaner import LogCleaner
from lakelog.infra.logs import NOTICE
from lakelog.ingest_api.broker.admin import AdminService, MetadataWaiters, PartitionStateView
from lakelog.ingest_api.broker.broker_session import BrokerSession, BrokerState
from lakelog.ingest_api.cluster.controller_config import ControllerConfig
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.events import ClusterEvents
from lakelog.ingest_api.cluster.event_file import FILE_NAME as EVENTS_FILE
from lakelog.ingest_api.cluster.quorum import QuorumHost
from lakelog.ingest_api.cluster.quorum_config import QuorumConfig, parse_voters
from lakelog.ingest_api.security.cluster_auth import DEFAULT_MAX_SKEW_MS
from lakelog.ingest_api.cluster.observer import ObserverHost
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.broker.controller_host import ControllerHost
from lakelog.ingest_api.broker.dynamic_config import DynamicConfigs
from lakelog.ingest_api.groups.consumer import ConsumerManager
from lakelog.ingest_api.groups.instances import ConsumerInstanceService
from lakelog.ingest_api.groups.service import GroupService
from lakelog.ingest_api.transactions.service import TransactionService
from lakelog.ingest_api.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    NotReadyError,
    PartitionNotFoundError,
    RemoteError,
    RequestTooLargeError,
)
from lakelog.ingest_api.broker.metadata import load_or_create_meta_properties
from lakelog.ingest_api.replication.partition import Partition, PartitionKey
from lakelog.ingest_api.records.partitioner import StickyPartitioner
from lakelog.ingest_api.records.produce_columns import ProduceColumns, ProduceRecord, ProduceResults
from lakelog.ingest_api.broker.remote_log_manager import RemoteLogManager
from lakelog.ingest_api.replication.replica_manager import ReplicaManager
from lakelog.ingest_api.replication.fetcher import ReplicaFetcher
from lakelog.ingest_api.replication.peers import FORWARDED_HEADER, PeerClient, json_or_empty
from lakelog.ingest_api.security.context import SecurityContext
from lakelog.ingest_api.security.tls import client_context as tls_client_context
from lakelog.index.transaction_index import AbortedTxn
from lakelog.logstore.errors import OffsetOutOfRangeError
from lakelog.logstore.read_committed import cut_at_offset, next_offset_after
from lakelog.logstore.log_append import AppendInfo
from lakelog.logstore.local_log import FetchResult
from lakelog.logstore.log_dir_health import LogDirState

log = logging.getLogger("lakelog.node")


class Node:
    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.node_id: int = config.node_id
        self.data_dir = config.data_dir
        self.cluster_id = ""
        self.image = ClusterImage()
        # Recent cluster events for the console (ingest_api/cluster/events.py), from when this node is ready.
        self.events = ClusterEvents(armed=lambda: self.ready, controller_id=lambda: self.controller_id,
                                    path=Path(self.data_dir) / EVENTS_FILE)  # kept across restarts
        self.image.observer = self.events
        self.quorum: QuorumHost | ObserverHost | None = None  # ObserverHost: not a controller voter
        self.peers: PeerClient | None = None
        self.incarnation_id = uuid.uuid4().hex
        self.started_at = time.time()
        self.voters = parse_voters(config.controller_quorum_voters) if config.controller_quorum_voters else {
            self.node_id: (config.host, config.port)}
        self.cleaner = LogCleaner(interval_ms=config.log_cleaner_backoff_ms) if config.log_cleaner_enable else None
        self._threads: list[threading.Thread] = []
        #: Set by `stop` when threads blocked on a dependency were left running (see `stop`).
        self.abandoned_threads = False
        self._tasks: list[asyncio.Task] = []
        self._pid_next = self._pid_end = 0
        self.controller_config = ControllerConfig.from_keys(config)
        self.controller_host = ControllerHost(self.node_id, self.image, self.controller_config,
                                              tick_ms=config.controller_tick_ms,
                                              request_timeout_ms=config.request_timeout_ms)
        self.session = BrokerSession(config, self.image, self.incarnation_id)
        self.session.fence_requested = self._log_dir_failed_over
        self.metadata_waiters = MetadataWaiters(self.image)
        self.replicas = ReplicaManager(config, self.image, cleaner=self.cleaner,
                                       new_fetcher=lambda leader: ReplicaFetcher(self, leader),
                                       controller_call=self.controller_call,
                                       broker_epoch=lambda: self.session.broker_epoch,
                                       on_drop=lambda key: self.remote_logs.forget(key))
        self.remote_logs = RemoteLogManager(
            config, partitions=self.replicas.partitions, topic_id=self.replicas.topic_id,
            topic_metadata=lambda name: self.admin.topic_metadata(name),
            live_topics=lambda: {name: t.topic_id for name, t in list(self.image.topics.items())},
            is_sweeper=lambda: self.controller_host.is_active and self.ready)
        self.admin = AdminService(config, self.image, check_ready=self.check_ready,
                                  controller_call=self.controller_call, waiters=self.metadata_waiters,
                                  check_file_budget=self.replicas.check_file_budget,
                                  delete_remote_topic=self.remote_logs.delete_remote_topic)
        self.dynamic_configs = DynamicConfigs(self)  # node.toml + the cluster's dynamic broker configs
        # The services the front doors call; their loops run while a door serves (`http/app.py`'s lifespan).
        self.security = SecurityContext(self)  # authentication, ACLs, quotas (off by default)
        self.groups = GroupService(self)  # the group coordinator of the __consumer_offsets partitions led here
        self.transactions = TransactionService(self, self.groups)  # the coordinator of the __transaction_state partitions led here
        self.consumers = ConsumerManager(self, self.groups)  # REST Proxy consumer instances held here
        self.consumer_instances = ConsumerInstanceService(self, self.consumers, self.groups,
                                                          FORWARDED_HEADER)  # routing, ownership, topic ACLs

    # ------------------------------------------------------------------ state other components read

    @property
    def broker_epoch(self) -> int:
        return self.session.broker_epoch

    @property
    def ready(self) -> bool:
        return self.session.ready

    def _log_dir_failed_over(self) -> bool:
        """Ask to be fenced while the log directory is offline and another broker can lead: the
        controller then moves this node's leaderships away and takes it out of the ISRs (Kafka's
        offline log directory). A lone node keeps serving reads of what it holds."""
        if self.replicas.log_dir.state != LogDirState.OFFLINE:
            return False
        me = self.image.brokers.get(self.node_id)
        if me is not None and me.fenced:
            return True  # stay fenced, whoever else is left
        return any(b != self.node_id for b in self.image.serving_brokers())

    def check_ready(self) -> None:
        if not self.ready:
            if self.replicas.log_dir.state == LogDirState.OFFLINE:
                raise NotReadyError(f"node is not ready: its log directory is offline "
                                    f"({self.replicas.log_dir.status()['cause']}); restart it once fixed")
            raise NotReadyError("node is not ready (starting, catching up with the cluster metadata, or stopping)")

    @property
    def tier(self):
        """The remote tier (None before `start`)."""
        return self.remote_logs.tier

    @property
    def controller(self):
        """The active controller, when this node runs it."""
        return self.controller_host.controller

    @property
    def controller_id(self) -> int:
        """The active controller's node id (-1 while none is known)."""
        return self.controller_host.controller_id

    def peer_url(self, node_id: int) -> str | None:
        b = self.image.brokers.get(node_id)
        scheme = "https" if self.config.ssl_certfile else "http"
        if b is not None:
            return f"{scheme}://{b.host}:{b.port}"
        v = self.voters.get(node_id)
        return f"{scheme}://{v[0]}:{v[1]}" if v else None

    async def controller_call(self, op: str, args: dict[str, Any], *,
                              attempt_timeout_s: float | None = None) -> dict[str, Any]:
        """Run a controller request on the active controller (see `ControllerHost.call`)."""
        return await self.controller_host.call(op, args, attempt_timeout_s=attempt_timeout_s)

    def partitions(self) -> list[Partition]:
        return self.replicas.partitions()

    def local_partition(self, key: PartitionKey) -> Partition | None:
        return self.replicas.local_partition(key)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = load_or_create_meta_properties(self.data_dir, self.node_id, self._wanted_cluster_id())
        self._start_background(lambda: self.replicas.flush.loop(self.session.stopped), "flush-scheduler")
        if self.cleaner is not None:
            self.cleaner.start()
        self.remote_logs.open()
        self._start_background(lambda: self.remote_logs.loop(self.session.stopped), "remote-log-manager")

    def _wanted_cluster_id(self) -> str:
        if self.config.cluster_id:
            return self.config.cluster_id
        # Every node of one configured quorum derives the same id.
        voters = ",".join(f"{i}@{h}:{p}" for i, (h, p) in sorted(self.voters.items()))
        return uuid.UUID(bytes=hashlib.sha256(voters.encode()).digest()[:16]).hex[:22]

    def _quorum_config(self, tls: Any) -> QuorumConfig:
        cfg = self.config
        lone = len(self.voters) == 1
        return QuorumConfig.from_keys(
            cfg, node_id=self.node_id, voters=self.voters, secret=cfg.cluster_secret.encode(),
            data_dir=self.data_dir, metadata_log_dir=Path(cfg.metadata_log_dir) if cfg.metadata_log_dir else None,
            # A lone voter needs no one's vote: let it elect itself at once.
            election_timeout_ms=(3 * cfg.controller_quorum_tick_ms if lone
                                 else cfg.controller_quorum_election_timeout_ms),
            heartbeat_interval_ms=(cfg.controller_quorum_tick_ms if lone else
                                   max(cfg.controller_quorum_tick_ms, cfg.controller_quorum_election_timeout_ms // 10)),
            tls=tls)

    async def start_cluster(self) -> None:
        cfg = self.config
        tls = tls_client_context(cfg)
        self.peers = PeerClient(self.node_id, cfg.cluster_secret.encode(), self.peer_url,
                                timeout_s=cfg.request_timeout_ms / 1000 + 5, ssl_context=tls,
                                metadata_index=lambda: self.image.last_applied_index)
        if self.node_id not in self.voters:  # a broker added to the cluster: it follows the metadata log
            self.quorum = ObserverHost(self.node_id, dict(self.voters), cfg.cluster_secret.encode(), self.image,
                                       on_applied=self._on_applied, max_clock_skew_ms=DEFAULT_MAX_SKEW_MS,
                                       request_timeout_ms=cfg.request_timeout_ms)
        else:
            self.quorum = QuorumHost(self._quorum_config(tls), self.image,
                                     on_role_change=self.controller_host.on_role_change, on_applied=self._on_applied)
        self.controller_host.attach(self.quorum, self.peers)
        await self.quorum.start()
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(
            self.session.run(self.controller_call, self.replicas.remove_stray_logs_once), name="broker-lifecycle"))
        self._tasks.append(loop.create_task(self.replicas.isr.loop(), name="isr-checker"))
        self._tasks.append(loop.create_task(self.session.watch_clock(), name="clock-watch"))
        log.info("node %s started: cluster %s, voters %s", self.node_id, self.cluster_id, sorted(self.voters),
                 extra=NOTICE)

    def _on_applied(self, index: int) -> None:
        self.dynamic_configs.refresh()  # dynamic broker configs, before anyone reads the new metadata
        self.metadata_waiters.applied(index)
        self.replicas.schedule_reconcile()

    async def controlled_shutdown(self) -> None:
        """Ask the controller to move this node's leaderships away; returns when it says done or on timeout."""
        quorum = self.quorum
        await self.session.controlled_shutdown(
            self.controller_call, (lambda: quorum.running and quorum.leader_id >= 0) if quorum is not None else None)

    async def stop_cluster(self) -> None:
        self.session.shut_down()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        await self.controller_host.stop()
        self._tasks.clear()
        await self.replicas.stop_fetchers()
        if self.quorum is not None:
            await self.quorum.stop()
        if self.peers is not None:
            await self.peers.close()

    def stop(self) -> None:
        """Stop the node's work and close its logs (bounded by `shutdown.timeout.ms`, plus a second
        for the remote tier). Sets `abandoned_threads` when threads blocked on a dependency (a hung
        object store) were left running: the process then exits without waiting for them."""
        self.session.transition(BrokerState.STOPPED)
        partitions = self.replicas.partitions()
        for p in partitions:
            p.wake_all()
        deadline = time.monotonic() + self.config.shutdown_timeout_ms / 1000
        if self.cleaner is not None:
            self.cleaner.stop(max(0.1, deadline - time.monotonic()))
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        # A hung object store must not hold the stop: its requests are bounded by their own
        # timeouts, which may be long; past the shutdown timeout (at least a second) they are left.
        if not self.remote_logs.close(max(1.0, deadline - time.monotonic())):
            self.abandoned_threads = True
        failed = self.replicas.close_logs()
        if failed:
            log.warning("node %s stopped; %d partition(s) not closed cleanly (recovered at the next start)",
                        self.node_id, failed, extra=NOTICE)
        else:
            log.info("node %s stopped cleanly", self.node_id, extra=NOTICE)

    def _start_background(self, target, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    # ------------------------------------------------------------------ metadata reads (AdminService)

    def topic(self, name: str):
        return self.admin.topic(name)

    def partition_state(self, topic: str, partition: int) -> PartitionStateView:
        return self.admin.partition_state(topic, partition)

    def leader_of(self, topic: str, partition: int) -> int:
        """The partition's leader per this node's metadata (-1 when it has none).

        Readiness is per partition: while this node is not ready (starting, catching up with the
        metadata, its serving lease lapsed) it still names a leader on another live node, so a
        request for that partition is forwarded rather than refused (the leader checks its own
        leadership: a stale view here costs a NOT_LEADER_OR_FOLLOWER answer, never a wrong append).
        Only a partition this node would serve itself, one with no live leader in its view, or
        one it does not know yet is refused as not ready (NotReadyError).
        """
        if self.ready:
            return self.admin.partition_state(topic, partition).leader
        st = self.image.partition(topic, partition)
        if st is None or st.leader == self.node_id or st.leader < 0 or not self.image.is_live(st.leader):
            self.check_ready()
        return st.leader  # type: ignore[union-attr]

    def producible_topic(self, name: str):
        """The topic's metadata for a produce, whose readiness is per partition (`leader_of`): a node
        that is not ready answers from its view, or as not ready when it does not know the topic
        yet (rather than "not found")."""
        if not self.ready and self.image.topic(name) is None:
            self.check_ready()
        return self.admin.topic_metadata(name)

    def partition(self, topic: str, partition: int) -> Partition:
        """The local replica, which must be the leader."""
        st = self.admin.partition_state(topic, partition)
        p = self.replicas.local_partition(PartitionKey(topic, partition))
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

    async def produce_records(self, topic: str, records: list[ProduceRecord] | ProduceColumns, *,
                              partition: int | None = None, timestamp_ms: int | None = None, acks: str = "all",
                              producer: Any = None, principal: str | None = None) -> ProduceResults:
        """Append JSON / binary records: one batch per target partition (forwarded to its leader when
        that is another node, acting for `principal`); results in request order. `records` as
        columns (ingest_api/records/produce_columns.py) costs no object per record. Readiness is
        per partition (`leader_of`): a node catching up forwards to live leaders elsewhere."""
        meta = self.producible_topic(topic)
        cols = records if isinstance(records, ProduceColumns) else ProduceColumns.from_records(records)
        n = len(cols)
        if n > self.config.max_records_per_request:
            raise RequestTooLargeError(f"{n} records exceed max.records.per.request="
                                       f"{self.config.max_records_per_request}")
        if not n:
            raise InvalidRequestError("records must not be empty")
        now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
        by_partition: dict[int, list[int] | None]
        targets: list[int] | None = None
        if partition is not None or (cols.partitions is None and cols.keys is None):
            # Every record to one partition (the path's, or the sticky one): no per-record choice.
            p = partition if partition is not None else StickyPartitioner(meta.partitions).partition(None)
            if not 0 <= p < meta.partitions:
                raise PartitionNotFoundError(f"Partition {p} of topic {topic} not found.")
            by_partition = {p: None}
        else:
            sticky = StickyPartitioner(meta.partitions)
            named = cols.partitions or [None] * n
            keys = cols.keys or [None] * n
            targets = []
            for i in range(n):
                p = named[i] if named[i] is not None else sticky.partition(keys[i])
                if not 0 <= p < meta.partitions:
                    raise PartitionNotFoundError(f"Partition {p} of topic {topic} not found.")
                targets.append(p)
            by_partition = {}
            for i, p in enumerate(targets):
                by_partition.setdefault(p, []).append(i)  # type: ignore[union-attr]
        if producer is not None and len(by_partition) > 1:
            raise InvalidRequestError("an idempotent produce (producer_id, sequence) must target one partition: "
                                      "sequences are per partition")
        ids = {} if producer is None else {"producer_id": producer.producer_id,
                                           "producer_epoch": producer.producer_epoch,
                                           "base_sequence": producer.sequence}
        if producer is not None and producer.transactional_id is not None:
            # A transaction's records over HTTP: the partition joins the producer's transaction at
            # its coordinator first (AddPartitionsToTxn done by the node), then the batch is marked.
            (p_only,) = by_partition
            await self.transactions.add_for_produce(producer.transactional_id, producer.producer_id,
                                                    producer.producer_epoch, topic, p_only)
            ids["is_transactional"] = True

        async def one(p: int, idxs: list[int] | None) -> tuple[int, list[int] | None, int]:
            batch = (cols if idxs is None else cols.take(idxs)).build_batch(now, **ids)
            leader = self.leader_of(topic, p)
            if leader == self.node_id:
                info = await self.produce_batches(topic, p, batch, acks)
                return p, idxs, info.first_offset
            if leader < 0:
                raise LeaderNotAvailableError(f"partition {topic}-{p} has no leader")
            return p, idxs, await self.forward_batch(leader, topic, p, batch, acks, principal)

        done = await asyncio.gather(*(one(p, idxs) for p, idxs in by_partition.items()))
        if targets is None:
            p, _, first = done[0]
            return ProduceResults(p, range(first, first + n))
        offsets = [0] * n
        for _, idxs, first in done:
            for j, i in enumerate(idxs):  # type: ignore[arg-type]
                offsets[i] = first + j
        return ProduceResults(targets, offsets)

    async def forward_batch(self, leader: int, topic: str, partition: int, batch: bytes, acks: str,
                            principal: str | None = None) -> int:
        """Produce a batch through its leader (one hop, acting for `principal`); returns its base offset."""
        assert self.peers is not None
        path = f"/topics/{topic}/partitions/{partition}?acks={acks}"
        resp = await self.peers.request(leader, "POST", path, batch, headers={
            "Content-Type": "application/vnd.kafka.recordbatch", FORWARDED_HEADER: str(self.node_id)},
            timeout_s=self.config.request_timeout_ms / 1000 + 5, principal=principal)
        doc = json_or_empty(resp)
        if resp.status_code != 200:
            raise RemoteError(resp.status_code, int(doc.get("error_code", resp.status_code * 100)),
                              str(doc.get("message", resp.text[:200])))
        return int(doc["offsets"][0]["offset"])

    # ------------------------------------------------------------------ fetch and offsets

    async def fetch_wait(self, topic: str, partition: int, offset: int, max_bytes: int,
                         timeout_ms: int) -> FetchResult:
        """Fetch; if nothing is there yet, wait up to `timeout_ms` (bounded by fetch.max.wait.ms)."""
        p = self.partition(topic, partition)
        if offset < p.log.log_start_offset and self.remote_logs.tiered(p):
            return await self.remote_logs.remote_read(p, offset, max_bytes)
        try:
            result = p.read(offset, max_bytes)
        except OffsetOutOfRangeError:
            # Local retention of a tiered log moved the local start past `offset` meanwhile.
            if offset < p.log.log_start_offset and self.remote_logs.tiered(p):
                return await self.remote_logs.remote_read(p, offset, max_bytes)
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

    async def offsets(self, topic: str, partition: int) -> tuple[int, int]:
        """(beginning offset, end offset) as a consumer sees them: log start offset (the remote
        tier's when it holds data) and HW."""
        p = self.partition(topic, partition)
        start = p.log_start_offset
        if self.remote_logs.tiered(p):
            remote_start = await self.remote_logs.remote_log_start(p)
            if remote_start is not None:
                start = min(start, remote_start)
        return start, p.consumer_end_offset()

    async def offset_for_timestamp(self, topic: str, partition: int, timestamp: int) -> tuple[int, int] | None:
        p = self.partition(topic, partition)
        if self.remote_logs.tiered(p):  # the remote tier holds the oldest records: ask it first
            found = await self.remote_logs.offset_for_timestamp(p, timestamp)
            if found is not None and found[0] < p.high_watermark:
                return found
        found = p.log.offset_for_timestamp(timestamp)
        if found is None or found[0] >= p.high_watermark:
            return None
        return found

    async def read_committed_view(self, p: Partition, fetch_offset: int,
                                  records: bytes | memoryview) -> tuple[bytes, list[AbortedTxn]]:
        """Fetched `records` as a read_committed reader gets them: whole batches below the LSO,
        and the aborted transactions overlapping them (`aborted_transactions`)."""
        cut = bytes(cut_at_offset(records, p.last_stable_offset))
        if not cut:
            return cut, []
        return cut, await self.aborted_transactions(p, fetch_offset, next_offset_after(cut, fetch_offset))

    async def aborted_transactions(self, p: Partition, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset) — from the remote
        tier's `.txnindex` objects for a fetch below the local log start of a tiered topic, then
        from the local ones. A door that bounds its read at the LSO itself (file ranges) calls this."""
        local = p.log.aborted_transactions(fetch_offset, upper_bound_offset)
        if fetch_offset >= p.log.log_start_offset or not self.remote_logs.tiered(p):
            return local
        remote = await self.remote_logs.aborted_transactions(p, fetch_offset, upper_bound_offset)
        if remote.complete:
            return list(remote.aborted)
        seen = {(a.producer_id, a.first_offset) for a in remote.aborted}
        return list(remote.aborted) + [a for a in local if (a.producer_id, a.first_offset) not in seen]
