"""The transaction coordinator on a node: the pure `TransactionCoordinator` fed with requests and a
clock, the `__transaction_state` partitions it leads loaded and appended to, the markers written to
each partition's leader, and the routing of coordinator requests from any node.

Which node coordinates transactional id T: the leader of partition
`abs(T.hashCode()) % transaction.state.log.num.partitions` of `__transaction_state` (the formula of
ingest_api/groups/hashing.py). The topic is created on first use (compacted, replication factor
min(transaction.state.log.replication.factor, live nodes), min.insync.replicas
min(rf, transaction.state.log.min.isr)) through the controller, so its leaders move with node
failures like any partition's.

Leadership, loading (`hosting`, replication/coordinator_partitions.py): a timer
(`transaction.coordinator.tick.ms`) compares the partitions this node leads with those it has
loaded. A newly led partition (or a new leader epoch) is read from the log start to the log end off
the event loop; requests for its ids answer COORDINATOR_LOAD_IN_PROGRESS meanwhile. Its leader
epoch becomes the coordinator epoch carried by its markers, so a partition refuses the markers of a
deposed coordinator. After loading, the markers of every PrepareCommit /
PrepareAbort are written again (a marker is idempotent at its partition). A partition no longer led
is forgotten; its marker tasks stop.

Changes: every state change is one record appended with acks=all; the coordinator applies it and
the client is answered only once it is acknowledged (`_persist`), so an answered EndTxn survives
the coordinator's node.

Markers: after a PrepareCommit / PrepareAbort is acknowledged, `markers` (transactions/marker_writer.py)
writes a marker to every partition of the transaction — locally (`write_markers_here`, the leader
side: `Partition.append_txn_marker`, acks=all) or through the partition's leader's node — retrying
until every marker is written, then appends CompleteCommit / CompleteAbort. A marker landing in a
`__consumer_offsets` partition makes the group coordinator decide the transaction's pending
offsets there (`GroupService.complete_txn`).

Produce verification (KIP-890 part 1): a transactional batch is appended only after the
coordinator confirmed that its partition is in the producer's ongoing transaction at the batch's
epoch (`verify_produce`, cached per producer and partition on the leader — with the epoch and the
leader's term — until the transaction's marker lands there). An HTTP produce instead adds its
partition to the transaction at the coordinator on every request (`add_for_produce`, not cached:
right after a commit is answered only the coordinator knows whether the next transaction began).

Timers: every `transaction.abort.timed.out.transaction.cleanup.interval.ms` transactions open longer
than their timeout are aborted with the epoch bumped; every
`transaction.remove.expired.transaction.cleanup.interval.ms` ids idle past
`transactional.id.expiration.ms` get tombstones.

Concurrency: everything runs on the server's event loop; the log read of a load runs in a thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from typing import Any

from lakelog.infra import error_codes
from lakelog.infra.errors import LakelogError
from lakelog.ingest_api.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    NodeError,
    NotLeaderOrFollowerError,
    NotReadyError,
    PeerUnavailableError,
)
from lakelog.ingest_api.groups.errors import CoordinatorLoadInProgressError, NotCoordinatorError
from lakelog.ingest_api.groups.hashing import OFFSETS_TOPIC, coordinator_partition
from lakelog.ingest_api.replication.coordinator_partitions import (
    CoordinatorPartitions,
    Hosting,
    read_log_batches,
    retry_until,
)
from lakelog.ingest_api.replication.partition import PartitionKey, now_ms
from lakelog.ingest_api.transactions import errors as txn_errors
from lakelog.ingest_api.transactions.coordinator import (
    Effect,
    Persist,
    TransactionCoordinator,
    TxnCoordinatorConfig,
    WriteMarkers,
)
from lakelog.ingest_api.transactions.errors import TransactionError
from lakelog.ingest_api.transactions.marker_writer import MarkerWriter
from lakelog.ingest_api.transactions.state_codec import (
    TransactionStateRecordError,
    TxnRecord,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from lakelog.logstore.errors import InvalidProducerEpochError, InvalidTxnStateError, TransactionCoordinatorFencedError
from lakelog.logstore.record_batch import Record, build_batch, iter_batches

log = logging.getLogger("lakelog.transactions")

TXN_TOPIC = "__transaction_state"
#: Most transactional ids one DescribeTransactions / ListTransactions answer names.
MAX_LISTED = 100_000
#: Most (producer, epoch, partition) verifications a leader remembers.
MAX_VERIFIED = 100_000
#: Most transactional ids whose __transaction_state partition is remembered (`_partition_of`).
MAX_CACHED_PARTITIONS = 65_536
#: Longest an AddPartitionsToTxn / AddOffsetsToTxn waits for the markers of the id's last
#: transaction before answering CONCURRENT_TRANSACTIONS (seconds).
MARKER_WAIT_S = 1.0
#: Errors after which a call is worth retrying (the coordinator moves, loads, or is unreachable).
RETRIABLE = (NotCoordinatorError, CoordinatorLoadInProgressError, LeaderNotAvailableError, NotReadyError,
             NotLeaderOrFollowerError, PeerUnavailableError, txn_errors.ConcurrentTransactionsError)
#: Errors a coordinator answers between nodes by Kafka name, re-raised as themselves by the caller.
_ANSWERED = (TransactionError, NotCoordinatorError, CoordinatorLoadInProgressError, InvalidTxnStateError)
_BY_KAFKA_NAME: dict[str, type[Exception]] = {
    **txn_errors.BY_KAFKA_NAME, NotCoordinatorError.kafka_name: NotCoordinatorError,
    CoordinatorLoadInProgressError.kafka_name: CoordinatorLoadInProgressError, "INVALID_TXN_STATE": InvalidTxnStateError}
_RELAYED_BY_CODE: dict[int, type[Exception]] = {
    error_codes.code(c.__name__).error_code: c for c in (*_BY_KAFKA_NAME.values(), NotReadyError)}


def raise_txn_error(doc: dict[str, Any]) -> dict[str, Any]:
    """The answer, or its `error` raised as the matching error class."""
    name = doc.get("error")
    if name:
        raise _BY_KAFKA_NAME.get(name, TransactionError)(str(doc.get("message") or name))
    return doc


class TransactionService:
    def __init__(self, node: Any, groups: Any) -> None:
        self.node = node
        self.groups = groups  # ingest_api.groups.service.GroupService: offsets partitions, pending offsets
        self.config = node.config
        #: The __transaction_state partitions this node leads and has loaded.
        self.hosting: CoordinatorPartitions[list[tuple[str, TxnRecord | None]]] = CoordinatorPartitions(
            node, TXN_TOPIC, self.config.transaction_state_log_num_partitions, what="transactions",
            read=_read_state_log, replay=self._replay, reset=self._forget_partition)
        self.coordinator = TransactionCoordinator(TxnCoordinatorConfig.from_keys(self.config), self.partition_for)
        #: The markers of decided transactions, written to their partitions.
        self.markers = MarkerWriter(node, self.coordinator, persist=self._persist, write_here=self.write_markers_here)
        #: Leader side: (producer id, topic, partition) -> (transactional id, epoch, leader epoch) the
        #: coordinator verified; forgotten when the transaction's marker lands here.
        self._verified: OrderedDict[tuple[int, str, int], tuple[str, int, int]] = OrderedDict()
        self._persists: set[asyncio.Task] = set()
        self._task: asyncio.Task | None = None
        self._next_abort = self._next_expire = 0.0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        now = time.monotonic()
        self._next_abort = now + self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        self._next_expire = now + self.config.transaction_remove_expired_transaction_cleanup_interval_ms / 1000
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="transaction-coordinator")

    async def stop(self) -> None:
        tasks = [t for t in [self._task, *self._persists] if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        await self.hosting.stop()
        await self.markers.stop()

    async def _loop(self) -> None:
        interval = self.config.transaction_coordinator_tick_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self._tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction coordinator tick failed")

    def _tick(self) -> None:
        self.hosting.check_leadership()
        for e in self.coordinator.markers_due():
            self.markers.schedule(e)
        now = time.monotonic()
        abort, expire = now >= self._next_abort, now >= self._next_expire
        if abort:
            self._next_abort = now + self.config.transaction_abort_timed_out_transaction_cleanup_interval_ms / 1000
        if expire:
            self._next_expire = now + self.config.transaction_remove_expired_transaction_cleanup_interval_ms / 1000
        if not (abort or expire):
            return
        for persist in self.coordinator.tick(now_ms(), abort_timed_out=abort, expire_ids=expire):
            if persist.record is not None:
                log.info("transaction %s timed out: aborting it (producer %d fenced at epoch %d)",
                         persist.transactional_id, persist.record.producer_id, persist.record.producer_epoch)
            task = asyncio.get_running_loop().create_task(self._persist_quietly(persist))
            self._persists.add(task)
            task.add_done_callback(self._persists.discard)

    async def _persist_quietly(self, persist: Persist) -> None:
        try:
            await self._persist(persist)
        except NodeError as e:
            log.info("transaction %s: writing its state failed (retried later): %s", persist.transactional_id, e)

    # ------------------------------------------------------------------ partitions led and loaded

    def num_partitions(self) -> int:
        return self.hosting.num_partitions()

    def partition_for(self, transactional_id: str) -> int:
        return _partition_of(transactional_id, self.num_partitions())

    def coordinator_node(self, transactional_id: str) -> int:
        """The node coordinating the id (-1 while its partition has no leader or the topic is missing)."""
        return self.hosting.leader(self.partition_for(transactional_id))

    def _replay(self, p: int, epoch: int, entries: list[tuple[str, TxnRecord | None]]) -> int:
        """Partition `p` loaded: the coordinator takes its ids over, its leader epoch the coordinator
        epoch, and the markers of its prepared transactions are written again (the hosting's replay)."""
        self._run_effects(self.coordinator.load(p, epoch, entries, now_ms()))
        return len(entries)

    def _forget_partition(self, p: int) -> None:
        """Partition `p` is no longer led here: its ids and their marker tasks forgotten (the hosting's reset)."""
        self.markers.cancel(lambda tid: self.partition_for(tid) == p)
        self.coordinator.unload(p)

    def _require(self, transactional_id: str) -> int:
        """The id's partition, if this node coordinates it and has loaded it."""
        if not transactional_id:
            raise InvalidRequestError("the transactional id must not be empty")
        p = self.partition_for(transactional_id)
        hosting = self.hosting.state(p)
        if hosting is Hosting.LOADED:
            return p
        if hosting is Hosting.LOADING:
            raise CoordinatorLoadInProgressError(f"node {self.node.node_id} is loading the transactions of "
                                                 f"{transactional_id}; retry")
        raise NotCoordinatorError(f"node {self.node.node_id} is not the coordinator of transactional id "
                                  f"{transactional_id}")

    async def ensure_state_topic(self) -> None:
        """Create `__transaction_state` (compacted) if it does not exist yet."""
        cfg = self.config
        await self.hosting.ensure_topic(
            replication_factor=cfg.transaction_state_log_replication_factor,
            min_insync=lambda rf: min(rf, cfg.transaction_state_log_min_isr),
            segment_bytes=cfg.transaction_state_log_segment_bytes)

    # ------------------------------------------------------------------ appends and effects

    async def _persist(self, persist: Persist) -> None:
        """Append the record with acks=all, then let the change take effect (and its markers start)."""
        rec = persist.record
        now = now_ms()
        batch = build_batch([Record(0, now, encode_key(persist.transactional_id),
                                    encode_value(rec) if rec is not None else None)])
        try:
            await self.node.produce_batches(TXN_TOPIC, persist.partition, batch, "all")
        except BaseException as e:
            self.coordinator.fail(persist.transactional_id, persist.token)
            if isinstance(e, (NotLeaderOrFollowerError, LeaderNotAvailableError)):
                raise NotCoordinatorError(f"the coordinator of {TXN_TOPIC}-{persist.partition} moved: {e}") from None
            raise
        self._run_effects(self.coordinator.complete(persist.transactional_id, persist.token, now_ms()))

    def _run_effects(self, effects: list[Effect]) -> None:
        for e in effects:
            if isinstance(e, WriteMarkers):
                self.markers.schedule(e)

    async def write_markers_here(self, markers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Append the markers to the partitions this node leads (each with acks=all); one answer per
        marker: `error` None, or the error's text. The leader side of WriteTxnMarkers."""

        async def one(m: dict[str, Any]) -> dict[str, Any]:
            topic, partition = str(m["topic"]), int(m["partition"])
            pid, commit = int(m["producer_id"]), bool(m["commit"])
            out = {"topic": topic, "partition": partition, "error": None}
            try:
                part = self.node.partition(topic, partition)
                await part.append_txn_marker(pid, int(m["producer_epoch"]), commit, int(m["coordinator_epoch"]),
                                             timeout_s=self.config.request_timeout_ms / 1000,
                                             min_isr=part.log.config.min_insync_replicas)
            except (InvalidProducerEpochError, TransactionCoordinatorFencedError) as err:
                # The partition holds a newer epoch or coordinator: this marker is superseded, and
                # sending it again would never succeed (Kafka's coordinator stops sending it too).
                return {**out, "error": f"{type(err).__name__}: {err}"[:300], "superseded": True}
            except Exception as err:  # a leader that moved, a full ISR wait: the coordinator retries
                return {**out, "error": f"{type(err).__name__}: {err}"[:300]}
            self._verified.pop((pid, topic, partition), None)
            if topic == OFFSETS_TOPIC:
                self.groups.complete_txn(partition, pid, commit)
            return out

        if len(markers) == 1:  # a transaction of one partition per leader: no task to schedule
            return [await one(markers[0])]
        return list(await asyncio.gather(*(one(m) for m in markers)))

    # ------------------------------------------------------------------ operations on the coordinator

    async def run(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run one operation here, the coordinator; its errors raised (the Kafka door's entry)."""
        handler = _OPS.get(op)
        if handler is None:
            raise InvalidRequestError(f"unknown transaction operation {op!r}")
        return await handler(self, args)

    async def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """`run`, with coordinator errors answered in the `error` field (between nodes)."""
        try:
            return await self.run(op, args)
        except _ANSWERED as e:
            return {"error": error_codes.code(type(e).__name__).kafka.name, "message": str(e)}

    async def _run(self, outcome: Persist | None) -> tuple[int, int] | None:
        """Persist a coordinator decision (if any); its answer once acknowledged."""
        if outcome is None:
            return None
        await self._persist(outcome)
        if outcome.answer_error is not None:
            raise outcome.answer_error(f"transaction {outcome.transactional_id} is being aborted; retry")
        return outcome.answer

    async def _op_init(self, a: dict[str, Any]) -> dict[str, Any]:
        tid = str(a["transactional_id"])
        self._require(tid)
        new_pid = -1
        if self.coordinator.wants_producer_id(tid):
            new_pid, _ = await self.node.init_producer_id()
            self._require(tid)  # still the coordinator after the controller call
        expected = (int(a.get("producer_id", -1)), int(a.get("producer_epoch", -1)))
        outcome = self.coordinator.init_producer_id(tid, int(a["timeout_ms"]), now_ms(), new_producer_id=new_pid,
                                                    expected=expected)
        pid, epoch = outcome if isinstance(outcome, tuple) else await self._run(outcome)  # type: ignore[misc]
        return {"error": None, "producer_id": pid, "producer_epoch": epoch}

    async def _markers_settled(self, tid: str) -> None:
        """Wait, at most MARKER_WAIT_S, for the markers (and the Complete* record) of the id's last
        transaction: a producer's next transaction begins right after EndTxn is answered, while
        they are written; answering CONCURRENT_TRANSACTIONS instead would cost it a retry after the
        client's backoff each time (librdkafka retries that AddPartitionsToTxn 20 ms later).
        Raises as `_require` if the id's partition moved meanwhile."""
        await self.markers.settled(tid, MARKER_WAIT_S)
        self._require(tid)

    async def _op_add_partitions(self, a: dict[str, Any]) -> dict[str, Any]:
        tid = str(a["transactional_id"])
        self._require(tid)
        await self._markers_settled(tid)
        parts = [(str(t), int(p)) for t, p in a["partitions"]]
        await self._run(self.coordinator.add_partitions(tid, int(a["producer_id"]), int(a["producer_epoch"]), parts,
                                                        now_ms()))
        return {"error": None}

    async def _op_add_offsets(self, a: dict[str, Any]) -> dict[str, Any]:
        tid, group = str(a["transactional_id"]), str(a["group_id"])
        self._require(tid)
        await self._markers_settled(tid)
        await self.groups.ensure_offsets_topic()
        tp = (OFFSETS_TOPIC, self.groups.partition_for(group))
        await self._run(self.coordinator.add_partitions(tid, int(a["producer_id"]), int(a["producer_epoch"]), [tp],
                                                        now_ms()))
        return {"error": None}

    async def _op_end(self, a: dict[str, Any]) -> dict[str, Any]:
        tid = str(a["transactional_id"])
        self._require(tid)
        await self._run(self.coordinator.end_txn(tid, int(a["producer_id"]), int(a["producer_epoch"]),
                                                 bool(a["commit"]), now_ms()))
        return {"error": None}

    async def _op_verify(self, a: dict[str, Any]) -> dict[str, Any]:
        tid = str(a["transactional_id"])
        self._require(tid)
        self.coordinator.verify(tid, int(a["producer_id"]), int(a["producer_epoch"]),
                                (str(a["topic"]), int(a["partition"])))
        return {"error": None}

    async def _op_markers(self, a: dict[str, Any]) -> dict[str, Any]:
        markers = a.get("markers")
        if not isinstance(markers, list) or len(markers) > 100_000:
            raise InvalidRequestError("markers must be a list of at most 100000 entries")
        return {"error": None, "results": await self.write_markers_here(markers)}

    async def _op_list(self, a: dict[str, Any]) -> dict[str, Any]:
        states = set(a.get("states") or [])
        pids = set(a.get("producer_ids") or [])
        min_duration = int(a.get("min_duration_ms", -1))
        now = now_ms()
        out = []
        for m in sorted(self.coordinator.txns.values(), key=lambda m: m.transactional_id):
            if (states and m.state.display not in states) or (pids and m.producer_id not in pids) or m.producer_epoch < 0:
                continue
            if min_duration >= 0 and (m.start_ms < 0 or now - m.start_ms < min_duration):
                continue
            out.append({"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                        "state": m.state.display})
            if len(out) >= MAX_LISTED:
                break
        return {"error": None, "transactions": out}

    def describe_here(self, tid: str) -> dict[str, Any]:
        """DescribeTransactions of one id this node coordinates (the door checks `_require` first)."""
        self._require(tid)
        m = self.coordinator.describe(tid)
        if m is None or m.producer_epoch < 0:
            raise txn_errors.TransactionalIdNotFoundError(f"no transactional id {tid}")
        return {"transactional_id": tid, "state": m.state.display, "timeout_ms": m.timeout_ms,
                "start_ms": m.start_ms, "producer_id": m.producer_id, "producer_epoch": m.producer_epoch,
                "partitions": sorted(m.partitions)}

    async def _op_describe(self, a: dict[str, Any]) -> dict[str, Any]:
        return {"error": None, **self.describe_here(str(a["transactional_id"]))}

    # ------------------------------------------------------------------ the leader side of produce

    async def add_for_produce(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                              partition: int) -> None:
        """Before an HTTP produce of a transaction's records: the partition joins the producer's
        transaction at its coordinator (what AddPartitionsToTxn does for a Kafka client). Asked on
        every request, never cached: right after a commit is answered its markers may still be on
        their way, and only the coordinator knows that the next transaction has begun."""
        await self.call_with_retry(transactional_id, "add_partitions", {
            "producer_id": producer_id, "producer_epoch": producer_epoch, "partitions": [[topic, partition]]})


    async def verify_produce(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                             partition: int) -> None:
        """Raise unless the coordinator has (topic, partition) in the producer's ongoing transaction."""
        # The leader epoch is in the key: entries of an earlier term here (the marker then landed on
        # another leader, and never cleared them) do not count.
        local = self.node.local_partition(PartitionKey(topic, partition))
        key = (producer_id, topic, partition)
        seen = (transactional_id, producer_epoch, local.leader_epoch if local is not None else -1)
        if self._verified.get(key) == seen:
            return
        await self.call(transactional_id, "verify", {"producer_id": producer_id, "producer_epoch": producer_epoch,
                                                     "topic": topic, "partition": partition})
        self._verified[key] = seen
        while len(self._verified) > MAX_VERIFIED:
            self._verified.popitem(last=False)

    async def verify_raw_produce(self, data: bytes | memoryview, transactional_id: str | None, topic: str,
                                 partition: int) -> None:
        """A client's batches (Kafka's Produce, HTTP's RECORDBATCH path): a transactional batch needs
        its transactional id, and its partition in that producer's ongoing transaction (KIP-890)."""
        try:
            batch = next((b for _, b in iter_batches(data) if b.is_transactional), None)
        except LakelogError:
            return  # malformed: the log's validation refuses it with its own error
        if batch is None:
            return
        if not transactional_id:
            raise InvalidTxnStateError("a transactional batch needs its transaction's id (Produce's "
                                       "transactional_id, HTTP's X-Lakelog-Transactional-Id header)")
        await self.verify_produce(transactional_id, batch.producer_id, batch.producer_epoch, topic, partition)

    # ------------------------------------------------------------------ routing from any node

    async def call(self, transactional_id: str, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run `op` on the id's coordinator (one attempt); its errors raised as themselves."""
        await self.ensure_state_topic()
        leader = self.coordinator_node(transactional_id)
        if leader < 0:
            raise LeaderNotAvailableError(f"the coordinator of transactional id {transactional_id} is not "
                                          f"available yet ({TXN_TOPIC} partition {self.partition_for(transactional_id)} "
                                          f"has no leader)")
        body = {**args, "transactional_id": transactional_id}
        if leader == self.node.node_id:
            return raise_txn_error(await self.handle(op, body))
        return raise_txn_error(await self.hosting.relay(
            leader, f"/internal/transactions/{op}", body, relayed_by_code=_RELAYED_BY_CODE,
            timeout_s=self.config.request_timeout_ms / 1000 + 5))

    async def call_with_retry(self, transactional_id: str, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """`call`, retried while the coordinator moves, loads or completes the id's last transaction,
        up to request.timeout.ms (the HTTP door's entry: a Kafka client retries by itself)."""
        return await retry_until(time.monotonic() + self.config.request_timeout_ms / 1000,
                                 lambda: self.call(transactional_id, op, args), RETRIABLE)


_OPS = {
    "init": TransactionService._op_init,
    "add_partitions": TransactionService._op_add_partitions,
    "add_offsets": TransactionService._op_add_offsets,
    "end": TransactionService._op_end,
    "verify": TransactionService._op_verify,
    "markers": TransactionService._op_markers,
    "list": TransactionService._op_list,
    "describe": TransactionService._op_describe,
}


@functools.lru_cache(maxsize=MAX_CACHED_PARTITIONS)
def _partition_of(transactional_id: str, num_partitions: int) -> int:
    """`coordinator_partition`, remembered: every request asks it several times (hashing the id anew)."""
    return coordinator_partition(transactional_id, num_partitions)


def _read_state_log(plog: Any, p: int) -> list[tuple[str, TxnRecord | None]]:
    """Every record of a `__transaction_state` log, in log order (on a thread)."""
    out: list[tuple[str, TxnRecord | None]] = []
    for offset, batch in read_log_batches(plog):
        if batch.is_control:
            continue
        for rec in batch.records():
            if rec.offset < offset or rec.key is None:
                continue
            try:
                out.append((decode_key(rec.key), decode_value(rec.value)))
            except TransactionStateRecordError as e:
                log.error("%s-%d: skipping the record at offset %d: %s", TXN_TOPIC, p, rec.offset, e)
    return out

