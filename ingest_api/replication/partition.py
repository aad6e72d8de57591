"""A partition replica hosted by a node: the log, and the host of the pure replication state machine.

The rules (HW, ISR, follower LEOs, the produce purgatory's completions, the leader epoch's start)
live in `ingest_api/replication/core.py` (`ReplicaCore`), a pure state machine. This module is its
host on a node: it owns the `PartitionLog`, the clock (`monotonic_ms`), the asyncio futures of the two
purgatories — fetches waiting for the HW to move (long-poll), acks=all produces waiting for the HW
to pass them — the change listener followers' fetch sessions hang on, and a lock; it turns what happens into events (`_step`), and carries out the
effects: stamp the leader epoch in the log's cache, advance the log start offset, tell the log
its HW (the log keeps the last stable offset from it and its transactions), wake fetches,
resolve produce futures (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND), and hand ISR
proposals (`ProposeIsr`) back to its caller, the replica manager, which sends them to the controller.

Concurrency: the replica's state is changed on the node's event loop (produce, replica fetch,
metadata changes); `_step` runs under `_lock` so that a fetch registering as a waiter and the HW
moving cannot interleave; the log has its own lock; waiters are futures woken thread-safely on the
loop that created them. Reads of the views (`high_watermark`, `isr`, ...) from other threads (the
cleaner, the remote log manager) see a consistent value of each field.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from dataclasses import dataclass
from typing import Callable

from lakelog.ingest_api.errors import (
    LeaderNotAvailableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    ProduceTimeoutError,
)
from lakelog.ingest_api.replication import core as rc
from lakelog.ingest_api.replication.events import ProduceOutcome, ProposeIsr, RemoteReplica, Role, UNKNOWN_LEO
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.log_append import AppendInfo
from lakelog.logstore.local_log import FetchResult
from lakelog.logstore.log_dir_health import LogDirHealth, is_disk_failure

__all__ = ["Partition", "PartitionKey", "ProposeIsr", "RemoteReplica", "Role", "UNKNOWN_LEO", "monotonic_ms",
           "now_ms"]


@dataclass(frozen=True)
class PartitionKey:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


#: How long `append_txn_marker` waits for the ISR to hold a marker (the coordinator retries after it).
MARKER_COMMIT_TIMEOUT_S = 30.0


def now_ms() -> int:
    """Wall-clock milliseconds: for timestamps others read (commit timestamps), never a duration."""
    return int(time.time() * 1000)


def monotonic_ms() -> int:
    """The clock of durations (replica lag, broker sessions): monotonic, so a wall-clock jump
    neither shrinks the ISR at once nor keeps a dead follower in it."""
    return time.monotonic_ns() // 1_000_000


class Partition:
    def __init__(self, key: PartitionKey, log: PartitionLog, node_id: int,
                 log_dir: LogDirHealth | None = None, *,
                 on_change: Callable[[PartitionKey, bool], None] | None = None) -> None:
        self.key = key
        #: Told (any thread) when the replica changed in a way a follower's fetch session must see:
        #: an append, a role change or the replica's end (urgent: True), or the HW moving (False: news
        #: that rides along with the next answer, `replication/sessions.py`).
        self._on_change = on_change
        self.log = log
        self.node_id = node_id
        #: The health of the log directory holding `log`: an I/O error appending takes it offline.
        self.log_dir = log_dir if log_dir is not None else LogDirHealth(log.directory.parent)
        self.core = rc.ReplicaCore(node_id, high_watermark=log.log_start_offset, leo=log.log_end_offset,
                                   log_start_offset=log.log_start_offset)
        self._lock = threading.Lock()
        self._waiters: set[asyncio.Future] = set()
        self._produce_waiters: dict[int, asyncio.Future] = {}
        self._produce_ids = itertools.count()
        #: What `close_waiters` fails the waiting produces with.
        self._abort_error: BaseException | None = None
        log.add_append_listener(self._on_append)

    # ------------------------------------------------------------------ views (the core's state)

    @property
    def role(self) -> Role:
        return self.core.role

    @property
    def leader_id(self) -> int:
        return self.core.leader_id

    @property
    def leader_epoch(self) -> int:
        return self.core.leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self.core.partition_epoch

    @property
    def replicas(self) -> list[int]:
        return list(self.core.replicas)

    @property
    def isr(self) -> list[int]:
        return list(self.core.isr)

    @property
    def pending_isr(self) -> list[int] | None:
        p = self.core.pending_isr
        return None if p is None else list(p)

    @property
    def remote(self) -> dict[int, RemoteReplica]:
        return self.core.remote

    @property
    def high_watermark(self) -> int:
        return self.core.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """LSO: below it every transaction is decided (the log's, from this replica's HW)."""
        return self.log.last_stable_offset

    @property
    def epoch_start_offset(self) -> int:
        return self.core.epoch_start_offset

    @property
    def needs_truncation(self) -> bool:
        return self.core.needs_truncation

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def is_leader(self) -> bool:
        return self.core.role == Role.LEADER

    def maximal_isr(self) -> list[int]:
        return list(self.core.maximal_isr())

    # ------------------------------------------------------------------ driving the core

    def _step(self, event: rc.Event) -> list[ProposeIsr]:
        """Step the core and carry out its effects; returns the ISR changes to propose."""
        wake: set[asyncio.Future] = set()
        resolve: list[tuple[asyncio.Future, BaseException | None]] = []
        proposals: list[ProposeIsr] = []
        on_log: list[rc.Effect] = []
        changed = urgent = False
        with self._lock:
            effects = self.core.step(event)
            hw = self.core.high_watermark
            for e in effects:
                kind = type(e)
                if kind is rc.HighWatermarkAdvanced:
                    wake |= self._waiters
                    self._waiters = set()
                    changed = True
                elif kind is rc.WakeAll:
                    wake |= self._waiters
                    self._waiters = set()
                    changed = urgent = True
                elif kind is rc.CompleteProduce:
                    fut = self._produce_waiters.pop(e.request_id, None)  # type: ignore[union-attr]
                    if fut is not None:
                        resolve.append((fut, self._produce_error(e)))  # type: ignore[arg-type]
                elif kind is ProposeIsr:
                    proposals.append(e)  # type: ignore[arg-type]
                elif kind is rc.StampLeaderEpoch or kind is rc.IncrementLogStart:
                    on_log.append(e)
        # The log's own effects outside `_lock` (the log calls `_on_append` under its lock). The
        # HW reaches the log (its LSO) before any fetch is woken to read it.
        if hw != self.log.high_watermark:
            self.log.update_high_watermark(hw)
        if not effects:  # the common case (an append that moves no HW): nothing more to carry out
            return proposals
        for e in on_log:
            if isinstance(e, rc.StampLeaderEpoch):
                self.log.epochs.assign(e.leader_epoch, e.start_offset)
            elif isinstance(e, rc.IncrementLogStart):
                self.log.maybe_increment_log_start_offset(e.offset)
        for fut in wake:
            _wake(fut)
        for fut, err in resolve:
            _resolve(fut, err)
        if changed and self._on_change is not None:
            self._on_change(self.key, urgent)
        return proposals

    def _produce_error(self, e: rc.CompleteProduce) -> BaseException | None:
        if e.outcome is ProduceOutcome.COMMITTED:
            return None
        if e.outcome is ProduceOutcome.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
            return NotEnoughReplicasAfterAppendError(
                f"{self.key}: appended, but the ISR {list(e.isr)} shrank below min.insync.replicas={e.min_isr}")
        if e.outcome is ProduceOutcome.ABORTED and self._abort_error is not None:
            return self._abort_error
        return NotLeaderOrFollowerError(
            f"{self.key}: this node stopped leading (leader epoch {self.core.leader_epoch}); the records may or "
            f"may not be committed")

    # ------------------------------------------------------------------ role changes

    def make_single_leader(self) -> None:
        """Lead with an ISR of one (a topic of replication factor 1 on this node)."""
        self.make_leader(max(self.log.latest_epoch, 0), 0, [self.node_id], [self.node_id])

    def make_leader(self, leader_epoch: int, partition_epoch: int, replicas: list[int], isr: list[int]) -> bool:
        """Become (or stay) leader; returns True when this is a new leadership (a new epoch)."""
        term = self.core.leader_epoch, self.core.role
        self._step(rc.BecomeLeader(leader_epoch, partition_epoch, tuple(replicas), tuple(isr),
                                   self.log.log_end_offset, self.log.log_start_offset, monotonic_ms()))
        return term != (leader_epoch, Role.LEADER)

    def make_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int, replicas: list[int],
                      isr: list[int]) -> bool:
        """Follow `leader_id` (-1: no leader, the partition is offline); True when the epoch is new."""
        before = self.core.role, self.core.leader_epoch, self.core.leader_id
        self._step(rc.BecomeFollower(leader_id, leader_epoch, partition_epoch, tuple(replicas), tuple(isr),
                                     self.log.log_end_offset, self.log.log_start_offset))
        role = Role.FOLLOWER if leader_id >= 0 else Role.NONE  # an offline partition stays NONE: not new each time
        return before[0] != role or before[1] != leader_epoch or before[2] != leader_id

    # ------------------------------------------------------------------ leader: produce

    def check_leader(self) -> None:
        refusal = self.core.append_refusal("1", 1)
        if refusal == "no_leader":
            raise LeaderNotAvailableError(f"partition {self.key} has no leader")
        if refusal == "not_leader":
            raise NotLeaderOrFollowerError(f"this node is not the leader of {self.key} "
                                           f"(leader: node {self.core.leader_id})")

    def append_as_leader(self, data: bytes | memoryview, *, required_acks: str = "1",
                         min_isr: int = 1) -> AppendInfo:
        self.check_leader()
        if self.core.append_refusal(required_acks, min_isr) == "not_enough_replicas":
            raise NotEnoughReplicasError(f"{self.key}: the ISR {self.isr} is smaller than "
                                         f"min.insync.replicas={min_isr}")
        self.log_dir.check_writable(str(self.key))
        try:
            info = self.log.append_as_leader(data, self.core.leader_epoch)
        except OSError as e:
            if not is_disk_failure(e):
                raise
            raise self.log_dir.failed(str(self.key), "append", e) from e
        self._step(rc.Appended(self.log.log_end_offset))
        return info

    async def append_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                                *, timeout_s: float = MARKER_COMMIT_TIMEOUT_S, min_isr: int = 1) -> int:
        """Write a COMMIT (`commit`) or ABORT marker of the producer's transaction as leader and
        return its offset once the ISR holds it (acks=all). Raises what a produce raises
        (LeaderNotAvailableError, NotLeaderOrFollowerError, NotEnoughReplicasError, the log
        directory's KafkaStorageError, NotEnoughReplicasAfterAppendError, ProduceTimeoutError), and
        the log's InvalidProducerEpochError / TransactionCoordinatorFencedError for a stale marker.

        Concurrency: on the node's event loop, as a produce.
        """
        self.check_leader()
        if self.core.append_refusal("all", min_isr) == "not_enough_replicas":
            raise NotEnoughReplicasError(f"{self.key}: the ISR {self.isr} is smaller than "
                                         f"min.insync.replicas={min_isr}")
        self.log_dir.check_writable(str(self.key))
        try:
            offset = self.log.append_control(producer_id, producer_epoch, commit, coordinator_epoch,
                                             self.core.leader_epoch)
        except OSError as e:
            if not is_disk_failure(e):
                raise
            raise self.log_dir.failed(str(self.key), "append", e) from e
        self._step(rc.Appended(self.log.log_end_offset))
        await self.wait_for_commit(offset + 1, timeout_s, min_isr)
        return offset

    async def wait_for_commit(self, required_offset: int, timeout_s: float, min_isr: int) -> None:
        """acks=all: return once the HW reaches `required_offset` (the produced last offset + 1)."""
        fut = asyncio.get_running_loop().create_future()
        request_id = next(self._produce_ids)
        with self._lock:
            self._produce_waiters[request_id] = fut
        self._step(rc.AwaitCommit(request_id, required_offset, min_isr))
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            raise ProduceTimeoutError(f"{self.key}: the records were appended but not replicated to the ISR "
                                      f"within {timeout_s * 1000:.0f} ms; they may still commit") from None
        finally:
            with self._lock:
                pending = self._produce_waiters.pop(request_id, None) is not None
            if pending:
                self._step(rc.ForgetProduce(request_id))

    # ------------------------------------------------------------------ leader: followers and the ISR

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now: int | None = None, *,
                          isr_eligible: bool = True) -> ProposeIsr | None:
        """Record a follower's fetch; returns the ISR expansion to propose when it caught up (and
        `isr_eligible`: its broker unfenced and not shutting down)."""
        t = monotonic_ms() if now is None else now
        proposals = self._step(rc.FollowerFetch(replica_id, fetch_offset, self.log.log_end_offset, t, isr_eligible))
        return proposals[0] if proposals else None

    def tick(self, lag_max_ms: int, now: int | None = None) -> ProposeIsr | None:
        """Time passed: returns the ISR shrink to propose when members lag more than `lag_max_ms`."""
        proposals = self._step(rc.Tick(monotonic_ms() if now is None else now, lag_max_ms))
        return proposals[0] if proposals else None

    def isr_change_answered(self, partition_epoch: int, accepted: bool) -> None:
        self._step(rc.IsrChangeAnswered(partition_epoch, accepted))

    def out_of_sync_replicas(self, lag_max_ms: int, now: int | None = None) -> list[int]:
        """ISR members (not the leader) that have not caught up within `lag_max_ms`."""
        return self.core.out_of_sync_replicas(lag_max_ms, monotonic_ms() if now is None else now)

    # ------------------------------------------------------------------ follower

    def append_as_follower(self, data: bytes | memoryview, leader_hw: int, leader_log_start: int) -> AppendInfo | None:
        info = None
        if len(data):
            self.log_dir.check_writable(str(self.key))
            try:
                info = self.log.append_as_follower(data)
            except OSError as e:
                if not is_disk_failure(e):
                    raise
                raise self.log_dir.failed(str(self.key), "append", e) from e
        self.follower_update(leader_hw, leader_log_start)
        return info

    def follower_update(self, leader_hw: int, leader_log_start: int) -> None:
        self._step(rc.FollowerAppended(self.log.log_end_offset, self.log.log_start_offset, leader_hw,
                                       leader_log_start))

    def truncated(self, *, final: bool = True) -> None:
        """The fetcher truncated the log (OffsetsForLeaderEpoch); `final`: no more rounds."""
        self._step(rc.Truncated(self.log.log_end_offset, self.log.log_start_offset, final))

    def restart_at(self, offset: int) -> None:
        """Empty the log and start it at the leader's log start offset (fetch offset below it)."""
        self.log.truncate_fully_and_start_at(offset)
        self._step(rc.Truncated(self.log.log_end_offset, self.log.log_start_offset, final=False))

    def must_truncate(self) -> None:
        """The leader answered OFFSET_OUT_OF_RANGE above its LEO: truncate again before fetching."""
        self._step(rc.MustTruncate())

    # ------------------------------------------------------------------ consumers

    def consumer_end_offset(self) -> int:
        """The HW as ListOffsets (`GET .../offsets`) tells it to consumers; leader only.

        A new leader's HW may start below the HW its predecessor already showed: a follower learns
        the HW one fetch round late, and a restarted node starts it at its log start. Until the HW
        reaches the start of this leader epoch (the LEO at election, at or above every earlier
        leader's HW) the end offset is not available — Kafka's OFFSET_NOT_AVAILABLE, KIP-207 — so
        the end offset consumers see never goes backwards across a clean leader change.
        """
        self.check_leader()
        hw, start = self.core.high_watermark, self.core.epoch_start_offset
        if hw < start:
            raise OffsetNotAvailableError(
                f"{self.key}: the new leader's high watermark {hw} has not reached the start "
                f"of leader epoch {self.core.leader_epoch} ({start}) yet; retry")
        return hw

    def consumer_stable_offset(self) -> int:
        """The LSO as ListOffsets with read_committed (and `GET .../offsets`) tells it; leader only.

        The same rule as `consumer_end_offset` (OFFSET_NOT_AVAILABLE until the HW reaches the start
        of this leader epoch) keeps it from going backwards across a leader change: every marker
        the previous leader had below its HW lies below this epoch's start, so it is below the HW
        here too. Bounded by that HW, as the log's LSO may lag it by an update.
        """
        end = self.consumer_end_offset()
        return min(end, self.log.last_stable_offset)

    def read(self, offset: int, max_bytes: int) -> FetchResult:
        """Whole batches from `offset`, below the HW (a consumer's view)."""
        return self.log.read(offset, max_bytes, max_offset=self.core.high_watermark)

    @property
    def fetch_waiters(self) -> int:
        """Fetches long-polling on this partition now (a gauge)."""
        return len(self._waiters)

    async def wait_for_data(self, offset: int, timeout_s: float) -> None:
        """Return when the HW passes `offset`, or after `timeout_s`."""
        if timeout_s <= 0:
            return
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        with self._lock:
            if self.core.high_watermark > offset:
                return
            self._waiters.add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(fut)

    def _on_append(self, leo: int) -> None:
        # Called by the log under its lock, possibly on another thread: only hand off.
        if self._on_change is not None:
            self._on_change(self.key, True)

    def wake_all(self) -> None:
        """Release every waiting fetch (shutdown, deletion, role change)."""
        with self._lock:
            waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            _wake(fut)
        if self._on_change is not None:
            self._on_change(self.key, True)

    def close_waiters(self, err: BaseException) -> None:
        """The replica is dropped (deleted, moved, the node stops): fetches return, produces fail with `err`."""
        self._abort_error = err
        self._step(rc.AbortProduces())


def _wake(fut: asyncio.Future) -> None:
    _resolve(fut, None)


def _resolve(fut: asyncio.Future, err: BaseException | None) -> None:
    loop = fut.get_loop()

    def _set() -> None:
        if fut.done():
            return
        if err is None:
            fut.set_result(None)
        else:
            fut.set_exception(err)

    if loop.is_closed():
        return
    loop.call_soon_threadsafe(_set)
