"""A partition replica hosted by a node: leader or follower state, HW, ISR tracking, purgatories.

Invariants (checked with `invariant()`):
  * log start offset <= high watermark (HW) <= log end offset (LEO);
  * the HW never goes backwards while this replica leads in one leader epoch;
  * a leader is always in its own ISR; leader epochs only grow.

Leader: HW = min LEO over the *maximal* ISR — the committed ISR plus members a pending ISR
expansion adds, and, while a shrink is pending, the members it would remove (Kafka's rule: an ISR
change is applied to the HW only once the controller committed it, and an addition is counted at
once, which can only hold the HW back). A follower's LEO is its fetch offset: a fetch from offset
O proves it holds everything below O. A follower that has not fetched since this replica became
leader has an unknown LEO and holds the HW where it is.

Catching up (replica.lag.time.max.ms): a follower's `last_caught_up_ms` is the time of a fetch at
or past the leader's LEO, or — when it reaches the LEO the leader had at its previous fetch — that
previous fetch's time. ISR members lagging longer are shrunk out; a follower whose LEO reaches the
HW (and the start of the current leader epoch) is added back.

Follower: appends what the leader sends; HW = min(leader HW, own LEO).

Consumers read only below the HW; an empty fetch waits (long-poll) until the HW moves. acks=all
produce waits in the produce purgatory until the HW passes its last offset; it fails with
NOT_LEADER_OR_FOLLOWER when the replica stops leading, and with NOT_ENOUGH_REPLICAS_AFTER_APPEND
when the HW passes but the ISR is below min.insync.replicas.

Concurrency: the replica's state is changed on the node's event loop (produce, replica fetch,
metadata changes); the log has its own lock; waiters are futures woken thread-safely on the loop
that created them.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from dataclasses import dataclass, field

from lakelog.infra.errors import invariant
from lakelog.ingest_api.errors import (
    LeaderNotAvailableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    ProduceTimeoutError,
)
from lakelog.logstore.log import AppendInfo, FetchResult, PartitionLog

UNKNOWN_LEO = -1


@dataclass(frozen=True)
class PartitionKey:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class Role(enum.IntEnum):
    NONE = 0  # not (yet) told its role, or the partition is offline
    LEADER = 1
    FOLLOWER = 2


@dataclass
class RemoteReplica:
    """What a leader knows of one follower."""

    leo: int = UNKNOWN_LEO
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = UNKNOWN_LEO
    last_fetch_ms: int = 0


@dataclass
class _Pending:
    required_offset: int
    future: asyncio.Future
    min_isr: int


@dataclass
class LeaderView:
    """A snapshot of the replica's leadership, for metrics and the admin API."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: list[int]
    isr: list[int]
    pending_isr: list[int] | None
    remote: dict[int, RemoteReplica] = field(default_factory=dict)


def now_ms() -> int:
    return int(time.time() * 1000)


class Partition:
    def __init__(self, key: PartitionKey, log: PartitionLog, node_id: int) -> None:
        self.key = key
        self.log = log
        self.node_id = node_id
        self.role = Role.NONE
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        #: The ISR an in-flight AlterPartition asks for (None when none is in flight).
        self.pending_isr: list[int] | None = None
        self.remote: dict[int, RemoteReplica] = {}
        #: Set when this replica must ask its leader where to truncate before fetching.
        self.needs_truncation = False
        self._lock = threading.Lock()
        self._waiters: set[asyncio.Future] = set()
        self._produce_waiters: list[_Pending] = []
        self._leo_waiters: set[asyncio.Future] = set()
        log.add_append_listener(self._on_append)
        self.high_watermark = log.log_start_offset
        self.epoch_start_offset = 0

    # ------------------------------------------------------------------ views

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def is_leader(self) -> bool:
        return self.role == Role.LEADER

    def view(self) -> LeaderView:
        return LeaderView(self.leader_id, self.leader_epoch, self.partition_epoch, list(self.replicas),
                          list(self.isr), None if self.pending_isr is None else list(self.pending_isr),
                          {r: RemoteReplica(**vars(s)) for r, s in self.remote.items()})

    def maximal_isr(self) -> list[int]:
        if self.pending_isr is None:
            return self.isr
        return self.isr + [r for r in self.pending_isr if r not in self.isr]

    # ------------------------------------------------------------------ role changes

    def make_single_leader(self) -> None:
        """Lead with an ISR of one (a topic of replication factor 1 on this node)."""
        self.make_leader(max(self.log.latest_epoch, 0), 0, [self.node_id], [self.node_id])

    def make_leader(self, leader_epoch: int, partition_epoch: int, replicas: list[int], isr: list[int]) -> bool:
        """Become (or stay) leader; returns True when this is a new leadership (a new epoch)."""
        invariant(self.node_id in isr, f"{self.key}: leader {self.node_id} not in ISR {isr}")
        new_term = self.role != Role.LEADER or leader_epoch != self.leader_epoch
        if new_term:
            invariant(leader_epoch >= self.leader_epoch, f"{self.key}: leader epoch {leader_epoch} "
                                                         f"below {self.leader_epoch}")
            leo = self.log.log_end_offset
            # Stamp the epoch at the LEO now, so OffsetsForLeaderEpoch answers correctly before the
            # first append of this term.
            self.log.epochs.assign(leader_epoch, leo)
            self.epoch_start_offset = leo
            self.remote = {}
            t = now_ms()
            for r in replicas:
                if r != self.node_id:
                    # ISR members get a full lag window from now; their LEO is unknown until they fetch.
                    self.remote[r] = RemoteReplica(last_caught_up_ms=t if r in isr else 0)
            self.pending_isr = None
            self.needs_truncation = False
            # A new leader's HW starts at its own (it only moves up from here in this epoch).
            self.high_watermark = max(self.log.log_start_offset, min(self.high_watermark, leo))
        self.role = Role.LEADER
        self.leader_id = self.node_id
        self.leader_epoch = leader_epoch
        if partition_epoch != self.partition_epoch:
            self.pending_isr = None
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        for r in replicas:
            if r != self.node_id and r not in self.remote:
                self.remote[r] = RemoteReplica()
        for r in list(self.remote):
            if r not in replicas:
                del self.remote[r]
        self.maybe_advance_high_watermark()
        self._check_produce_waiters()
        return new_term

    def make_follower(self, leader_id: int, leader_epoch: int, partition_epoch: int, replicas: list[int],
                      isr: list[int]) -> bool:
        """Follow `leader_id` (-1: no leader, the partition is offline); True when the epoch is new."""
        role = Role.FOLLOWER if leader_id >= 0 else Role.NONE  # an offline partition stays NONE: not new each time
        new_term = self.role != role or leader_epoch != self.leader_epoch or leader_id != self.leader_id
        if new_term:
            invariant(leader_epoch >= self.leader_epoch, f"{self.key}: leader epoch {leader_epoch} "
                                                         f"below {self.leader_epoch}")
            self.needs_truncation = leader_id >= 0
            self.remote = {}
            self.pending_isr = None
        was_leader = self.role == Role.LEADER
        self.role = role
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.high_watermark = max(self.log.log_start_offset, min(self.high_watermark, self.log.log_end_offset))
        if was_leader or new_term:
            self._fail_produce_waiters(NotLeaderOrFollowerError(
                f"{self.key}: this node stopped leading (leader epoch {leader_epoch}); the records may or "
                f"may not be committed"))
            self.wake_all()
        return new_term

    # ------------------------------------------------------------------ leader: produce

    def check_leader(self) -> None:
        if self.role == Role.LEADER:
            return
        if self.leader_id < 0:
            raise LeaderNotAvailableError(f"partition {self.key} has no leader")
        raise NotLeaderOrFollowerError(f"this node is not the leader of {self.key} (leader: node {self.leader_id})")

    def append_as_leader(self, data: bytes | memoryview, *, required_acks: str = "1",
                         min_isr: int = 1) -> AppendInfo:
        self.check_leader()
        if required_acks == "all" and len(self.isr) < min_isr:
            raise NotEnoughReplicasError(f"{self.key}: the ISR {self.isr} is smaller than "
                                         f"min.insync.replicas={min_isr}")
        info = self.log.append_as_leader(data, self.leader_epoch)
        self.maybe_advance_high_watermark()
        return info

    async def wait_for_commit(self, required_offset: int, timeout_s: float, min_isr: int) -> None:
        """acks=all: return once the HW reaches `required_offset` (the produced last offset + 1)."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        pending = _Pending(required_offset, fut, min_isr)
        with self._lock:
            self._produce_waiters.append(pending)
        self._check_produce_waiters()
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            raise ProduceTimeoutError(f"{self.key}: the records were appended but not replicated to the ISR "
                                      f"within {timeout_s * 1000:.0f} ms; they may still commit") from None
        finally:
            with self._lock:
                if pending in self._produce_waiters:
                    self._produce_waiters.remove(pending)

    def _check_produce_waiters(self) -> None:
        if not self._produce_waiters:
            return
        done: list[tuple[_Pending, BaseException | None]] = []
        with self._lock:
            keep = []
            for w in self._produce_waiters:
                if self.role != Role.LEADER:
                    done.append((w, NotLeaderOrFollowerError(f"{self.key}: this node stopped leading")))
                elif self.high_watermark >= w.required_offset:
                    err = None
                    if len(self.isr) < w.min_isr:
                        err = NotEnoughReplicasAfterAppendError(
                            f"{self.key}: appended, but the ISR {self.isr} shrank below min.insync.replicas="
                            f"{w.min_isr}")
                    done.append((w, err))
                else:
                    keep.append(w)
            self._produce_waiters = keep
        for w, err in done:
            _resolve(w.future, err)

    def _fail_produce_waiters(self, err: BaseException) -> None:
        with self._lock:
            waiters, self._produce_waiters = self._produce_waiters, []
        for w in waiters:
            _resolve(w.future, err)

    # ------------------------------------------------------------------ leader: followers

    def on_follower_fetch(self, replica_id: int, fetch_offset: int, now: int | None = None) -> list[int] | None:
        """Record a follower's fetch; returns a new ISR to propose when it should be expanded."""
        t = now_ms() if now is None else now
        state = self.remote.get(replica_id)
        if state is None:
            return None
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            state.last_caught_up_ms = t
        elif state.last_fetch_leader_leo != UNKNOWN_LEO and fetch_offset >= state.last_fetch_leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.leo = min(fetch_offset, leo)
        state.last_fetch_leader_leo = leo
        state.last_fetch_ms = t
        self.maybe_advance_high_watermark()
        current = self.pending_isr if self.pending_isr is not None else self.isr
        if (replica_id not in current and state.leo >= self.high_watermark
                and state.leo >= self.epoch_start_offset):
            return [r for r in self.replicas if r in current or r == replica_id]
        return None

    def out_of_sync_replicas(self, lag_max_ms: int, now: int | None = None) -> list[int]:
        """ISR members (not the leader) that have not caught up within `lag_max_ms`."""
        t = now_ms() if now is None else now
        out = []
        for r in self.isr:
            if r == self.node_id:
                continue
            state = self.remote.get(r)
            if state is None or t - state.last_caught_up_ms > lag_max_ms:
                out.append(r)
        return out

    def maybe_advance_high_watermark(self) -> bool:
        """HW = min LEO over the maximal ISR; wakes waiting fetches and produces when it moves."""
        if self.role != Role.LEADER:
            return False
        with self._lock:
            leo = self.log.log_end_offset
            new_hw = leo
            for r in self.maximal_isr():
                if r == self.node_id:
                    continue
                state = self.remote.get(r)
                if state is None or state.leo == UNKNOWN_LEO:
                    return False
                new_hw = min(new_hw, state.leo)
            if new_hw <= self.high_watermark:
                return False
            invariant(new_hw <= leo, f"{self.key}: HW {new_hw} above LEO {leo}")
            self.high_watermark = new_hw
            waiters, self._waiters = self._waiters, set()
        for fut in waiters:
            _wake(fut)
        self._check_produce_waiters()
        return True

    # ------------------------------------------------------------------ follower

    def append_as_follower(self, data: bytes | memoryview, leader_hw: int, leader_log_start: int) -> AppendInfo | None:
        info = self.log.append_as_follower(data) if len(data) else None
        self.follower_update(leader_hw, leader_log_start)
        return info

    def follower_update(self, leader_hw: int, leader_log_start: int) -> None:
        leo = self.log.log_end_offset
        if leader_log_start > self.log.log_start_offset and leader_log_start <= leo:
            self.log.maybe_increment_log_start_offset(leader_log_start)
        new_hw = max(self.log.log_start_offset, min(leader_hw, leo))
        if new_hw != self.high_watermark:
            self.high_watermark = new_hw

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
        if self.high_watermark < self.epoch_start_offset:
            raise OffsetNotAvailableError(
                f"{self.key}: the new leader's high watermark {self.high_watermark} has not reached the start "
                f"of leader epoch {self.leader_epoch} ({self.epoch_start_offset}) yet; retry")
        return self.high_watermark

    def read(self, offset: int, max_bytes: int) -> FetchResult:
        """Whole batches from `offset`, below the HW (a consumer's view)."""
        return self.log.read(offset, max_bytes, max_offset=self.high_watermark)

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

    async def wait_for_leo(self, offset: int, timeout_s: float) -> None:
        """Return when the LEO passes `offset` (a follower's long-poll), or after `timeout_s`."""
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        with self._lock:
            if self.log.log_end_offset > offset:
                return
            self._leo_waiters.add(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            with self._lock:
                self._leo_waiters.discard(fut)

    def _on_append(self, leo: int) -> None:
        # Called by the log under its lock, possibly on another thread: only hand off.
        if not self._leo_waiters:
            return
        with self._lock:
            waiters, self._leo_waiters = self._leo_waiters, set()
        for fut in waiters:
            _wake(fut)

    def wake_all(self) -> None:
        """Release every waiting fetch (shutdown, deletion, role change)."""
        with self._lock:
            waiters, self._waiters = self._waiters, set()
            leo_waiters, self._leo_waiters = self._leo_waiters, set()
        for fut in waiters | leo_waiters:
            _wake(fut)

    def close_waiters(self, err: BaseException) -> None:
        self.wake_all()
        self._fail_produce_waiters(err)


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
