"""The controller quorum hosted in an ingest node: a Raft voter driven by asyncio, over HTTP.

`QuorumHost` owns one voter's `RaftCore`, its `RaftStorage` and the replicated state machine, and
feeds the core every event through one driver task:

    timer task ──Tick──┐
    POST /internal/raft/messages ──Receive──┼──> inbox (bounded) ──> driver ──> core.step(event)
    propose() ──Propose──┘                                            │
                                      effects, in order ◄─────────────┘
      PersistState / PersistEntries / PersistSnapshot → RaftStorage, on the host's I/O thread (fsync)
      Send      → fire-and-forget POST to the peer (bounded in flight per peer)
      Apply     → state_machine.apply; completes the proposal waiting on that (term, index)
      RestoreSnapshot → state_machine.restore
    then: report role / term / leader changes, `on_applied`, and snapshot every N applied entries
    (`CompactLog`, which is one more step through the same path).

Group commit. The driver takes the next event and whatever else is already queued behind it (up to
`append_max_entries`, `controller.quorum.append.max.entries`), steps them one after the other
(consecutive proposals as one `ProposeMany`: consecutive entries, one AppendEntries per peer), then
carries out the group's effects as core.py's "Group commit" allows: every Persist effect first, with
one write and one fsync for a run of entries, then the sends, applies and proposal outcomes. So
proposals that arrive while an fsync is in progress go into the next write together, and a follower
appends the AppendEntries that queued up meanwhile with one fsync. `append_max_entries=1` steps one
event at a time (one fsync per entry).

The durability contract of core.py is kept: the driver takes the next group only after every effect
of the previous one was carried out, and all Persist effects of a group are durable before any Send,
Apply or Restore of that group. Storage calls run on one dedicated thread
(`RaftStorage` is not thread-safe) so an fsync never blocks the event loop; the driver awaits them, so
the ordering is that of a single thread. If a Persist effect (or the state machine) fails, the host
stops at once (fail-stop): the failure is logged at CRITICAL, kept in `failure`, the remaining effects
are dropped, the voter stops ticking and answering, and the node must restart it (the voter then
recovers from its files, which is exactly what Raft expects of a crash).

Restart: `start()` opens the directory (`RaftStorage` recovers it), restores the state machine from the
snapshot if there is one, then builds the core from `RaftStorage.load()`. Entries after the snapshot are
re-applied as the core emits Apply (once a leader tells it what is committed). The state machine handed
to the host must be empty (a fresh instance) at start.

The epoch. The Raft term is the controller epoch; `term` is the durable one. `on_role_change(role, term,
leader_id)` fires whenever any of the three changes (after the step's effects ran), so the node can
start or stop the active controller and fence anything older than `term`.

Proposals. `propose(payload)` returns the entry's index once it is APPLIED here, so the caller can read
its effect from the state machine. It raises NotControllerError (with leader_id, term) when this voter is not
the leader, or stops leading (or the index is applied with another term) before the entry commits; in
the latter case, and on QuorumTimeoutError, the outcome is unknown (the entry may still commit), so
commands should be idempotent or compare-and-swap.

Observers (nodes that are not voters) follow the log over HTTP: `GET /internal/metadata?from_index=N`
on any voter returns the committed (applied) entries after N, or the latest snapshot and what follows
it when N is below the voter's log start. `MetadataFollower` (cluster/metadata_follower.py) is the
client that polls a voter and applies into a local state machine. The voters' settings are
`QuorumConfig` (cluster/quorum_config.py).

Invariants (checked with `invariant()`):
  * the core is never re-entered: one driver task calls `step`, one step at a time;
  * applied_index only grows, by one per Apply, or jumps to a RestoreSnapshot's index;
  * a proposal completes successfully only when its index is applied with the term it was proposed in;
  * a snapshot is taken at the applied index, after every Apply up to it.

Concurrency: every public method must be called from the event loop the host was started in. Reads
(properties, `read_metadata`) see the state after the last completed effect, never a half-executed step.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import httpx

from lakelog.infra.errors import invariant
from lakelog.ingest_api.cluster.auth import ClusterAuth
from lakelog.ingest_api.cluster.errors import (
    NotAVoterError,
    NotControllerError,
    QuorumTimeoutError,
    QuorumUnavailableError,
)
from lakelog.ingest_api.cluster.metadata_follower import MetadataBatch, cancel_task
from lakelog.ingest_api.cluster.quorum_config import RAFT_MESSAGES_PATH, QuorumConfig, base_url, format_voters
from lakelog.ingest_api.errors import RequestTooLargeError
from lakelog.ingest_api.raft.core import RaftCore
from lakelog.ingest_api.raft.messages import (
    NO_NODE,
    Apply,
    CompactLog,
    Entry,
    EntryTooLargeError,
    Message,
    MessageFormatError,
    PersistEntries,
    PersistSnapshot,
    PersistState,
    ProposalRefused,
    ProposeMany,
    Proposed,
    Receive,
    RestoreSnapshot,
    Role,
    RoleChanged,
    Send,
    Snapshot,
    StepDown,
    Tick,
    message_from_dict,
    message_to_dict,
)
from lakelog.ingest_api.raft.messages import AppendEntriesResponse, InstallSnapshotResponse
from lakelog.ingest_api.raft.lease import LeaderLease
from lakelog.ingest_api.raft.state_machine import StateMachine
from lakelog.ingest_api.raft.storage import RaftStorage

log = logging.getLogger("lakelog.quorum")

_PERSIST = (PersistState, PersistEntries, PersistSnapshot)
#: The shortest clock jump taken for a pause that ends a leadership. The lease alone keeps a woken
#: leader from acting (its acknowledgements count from when they were sent); stepping down is for
#: liveness, and a busy machine stalls an event loop for a few hundred ms without any pause.
PAUSE_MIN_MS = 2000


# ---------------------------------------------------------------------------------------------
# The host

@dataclass
class _Proposal:
    payload: bytes
    future: asyncio.Future


_STOP = object()
_RUNNING, _NEW, _STOPPING, _STOPPED, _FAILED = "running", "new", "stopping", "stopped", "failed"


@dataclass
class QuorumCounters:
    """Plain counters of the host (exported by the node's metrics later)."""

    steps: int = 0
    messages_received: int = 0
    messages_sent: int = 0
    sends_dropped: int = 0  # the peer had max_inflight_sends_per_peer in flight, or the body was too large
    send_errors: int = 0  # timeouts, refused connections, non-202 answers
    inbox_full: int = 0
    snapshots: int = 0
    persist_groups: int = 0  # I/O-thread persists, each one fsync of raft.log at most (group commit)
    entries_persisted: int = 0


class _FailStop(Exception):
    """Internal: the driver stops after a failed persist / apply (already logged and recorded)."""


class QuorumHost:
    """One controller voter: core, storage and state machine driven by an asyncio task. See the module doc."""

    def __init__(self, config: QuorumConfig, state_machine: StateMachine, *,
                 on_role_change: Callable[[Role, int, int], None] | None = None,
                 on_applied: Callable[[int], None] | None = None,
                 rng: random.Random | None = None) -> None:
        self.config = config
        self.state_machine = state_machine
        self.on_role_change = on_role_change
        self.on_applied = on_applied
        self.counters = QuorumCounters()
        self.failure: BaseException | None = None
        self._rng = rng or random.Random()
        self._state = _NEW
        self._core: RaftCore | None = None
        self._storage: RaftStorage | None = None
        self._io: ThreadPoolExecutor | None = None
        self._client: httpx.AsyncClient | None = None
        self._inbox: asyncio.Queue | None = None
        self._driver: asyncio.Task | None = None
        self._timer: asyncio.Task | None = None
        self._sends: set[asyncio.Task] = set()
        self._inflight: dict[int, int] = {p: 0 for p in config.peers}
        self._pending: dict[int, tuple[int, asyncio.Future]] = {}  # index -> (term, future)
        self._reported = (Role.FOLLOWER, 0, NO_NODE)  # (role, durable term, leader id)
        self.lease: LeaderLease | None = None  # made at start
        self._applied_index = 0
        self._snapshot_index = 0  # of the last snapshot made durable
        self._changed: asyncio.Event | None = None
        self._oversize_warned = False

    # --- read-only views (the state after the last completed step)

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def running(self) -> bool:
        return self._state == _RUNNING

    @property
    def role(self) -> Role:
        return self._reported[0]

    @property
    def is_leader(self) -> bool:
        return self._reported[0] == Role.LEADER

    @property
    def has_lease(self) -> bool:
        """Leader, and confirmed by a quorum within the lease with no pause since (raft/lease.py).

        What the active controller checks before it answers anything, a broker heartbeat above all.
        """
        if self.lease is None:
            return False
        valid = self.is_leader and self.lease.valid(_now_ms())
        self._step_down_if_paused()
        return valid

    async def confirm_lease(self, timeout_s: float | None = None) -> bool:
        """`has_lease`, waiting up to an election timeout for the next quorum answers if it is stale.

        A busy machine delays answers past the lease now and then; the leader's next heartbeat
        round renews it, so a caller waits a little instead of being refused. False when this voter
        is not the leader or no quorum answered in time.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.config.election_timeout_ms / 1000 if timeout_s is None else timeout_s)
        while not self.has_lease:
            if not self.is_leader or loop.time() >= deadline:
                return False
            await asyncio.sleep(self.config.tick_ms / 1000)
        return True

    def _step_down_if_paused(self) -> None:
        if self.lease is not None and self.lease.take_step_down():
            log.warning("raft voter %d: its clock jumped (a pause); giving up the leadership of term %d",
                        self.node_id, self.term)
            try:
                self._inbox.put_nowait(StepDown())
            except asyncio.QueueFull:
                self.counters.inbox_full += 1  # check quorum steps it down an election timeout later

    @property
    def term(self) -> int:
        """The durable Raft term, i.e. the controller epoch this voter knows."""
        return self._reported[1]

    @property
    def leader_id(self) -> int:
        return self._reported[2]

    @property
    def applied_index(self) -> int:
        return self._applied_index

    @property
    def commit_index(self) -> int:
        return self._core.commit_index if self._core is not None else 0

    @property
    def snapshot_index(self) -> int:
        return self._snapshot_index

    # --- lifecycle

    async def start(self) -> None:
        """Open and recover the storage, restore the state machine, start the timer and the driver."""
        invariant(self._state == _NEW, f"quorum host {self.node_id} was already started ({self._state})")
        loop = asyncio.get_running_loop()
        cfg = self.config
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"raft-io-{cfg.node_id}")
        try:
            self._storage = await loop.run_in_executor(
                self._io, functools.partial(RaftStorage, cfg.directory, cfg.node_id, fsync=cfg.fsync))
            durable = await loop.run_in_executor(self._io, self._storage.load)
            if durable.snapshot is not None:
                self.state_machine.restore(durable.snapshot.data)
                self._applied_index = self._snapshot_index = durable.snapshot.last_index
            self._core = RaftCore(cfg.node_id, tuple(cfg.voters), cfg.raft_config(), self._rng, durable)
        except BaseException:
            await self._close_storage()
            self._state = _STOPPED
            raise
        rec = self._storage.recovery
        if rec.truncated_bytes or rec.dropped_entries or rec.removed_files:
            log.warning("raft voter %d recovered %s: cut %d torn bytes, dropped %d entries, removed %s",
                        cfg.node_id, cfg.directory, rec.truncated_bytes, rec.dropped_entries, rec.removed_files)
        log.info("raft voter %d starting in term %d: snapshot at %d, log to %d, voters %s", cfg.node_id,
                 durable.term, self._snapshot_index, self._core.last_index, format_voters(cfg.voters))
        self._reported = (Role.FOLLOWER, durable.term, NO_NODE)
        # The controller's lease: half an election timeout from a quorum's acknowledgements (as sent);
        # a pause of an election timeout (at least PAUSE_MIN_MS) ends the leadership (raft/lease.py).
        self.lease = LeaderLease(cfg.node_id, set(cfg.voters), cfg.election_timeout_ms / 2,
                                 max(cfg.election_timeout_ms, PAUSE_MIN_MS), _now_ms())
        self._changed = asyncio.Event()
        self._inbox = asyncio.Queue(cfg.max_pending_events)
        self._client = httpx.AsyncClient(
            auth=ClusterAuth(cfg.secret, cfg.node_id), trust_env=False,
            verify=cfg.tls if cfg.tls is not None else True,
            timeout=httpx.Timeout(cfg.request_timeout_ms / 1000),
            limits=httpx.Limits(max_connections=max(1, len(cfg.peers)) * cfg.max_inflight_sends_per_peer,
                                max_keepalive_connections=max(1, len(cfg.peers)) * 2))
        self._state = _RUNNING
        self._driver = loop.create_task(self._run(), name=f"raft-driver-{cfg.node_id}")
        self._timer = loop.create_task(self._tick_loop(), name=f"raft-timer-{cfg.node_id}")

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Stop ticking, finish the step in progress, drop queued events, close the client and the storage.

        Idempotent. Waiting proposals fail with QuorumUnavailableError. The files are left as after a
        completed step (every write the driver started has finished before the storage is closed).
        """
        if self._state in (_NEW, _STOPPED):
            self._state = _STOPPED
            return
        if self._state == _STOPPING:
            while self._state == _STOPPING:
                await asyncio.sleep(0.01)
            return
        self._state = _STOPPING
        await cancel_task(self._timer)
        if self._driver is not None and not self._driver.done():
            try:
                self._inbox.put_nowait(_STOP)
            except asyncio.QueueFull:
                pass  # the driver is busy; it looks at the state after the current event
            try:
                await asyncio.wait_for(asyncio.shield(self._driver), timeout_s)
            except (TimeoutError, asyncio.TimeoutError):
                log.warning("raft voter %d: the driver did not finish within %.1fs; cancelling it", self.node_id,
                            timeout_s)
                await cancel_task(self._driver)
        for t in list(self._sends):
            t.cancel()
        if self._sends:
            await asyncio.gather(*self._sends, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
        self._fail_pending(QuorumUnavailableError(f"raft voter {self.node_id} stopped"))
        await self._close_storage()
        self._state = _STOPPED  # `failure` still tells a fail-stop apart
        self._publish_state()
        self._notify()
        log.info("raft voter %d stopped in term %d at applied index %d", self.node_id, self.term,
                 self._applied_index)

    async def _close_storage(self) -> None:
        """Close the storage on its own thread (after any write in flight), then let the thread go."""
        io, self._io = self._io, None
        if io is None:
            return
        loop = asyncio.get_running_loop()
        try:
            if self._storage is not None:
                await loop.run_in_executor(io, self._storage.close)
        except Exception:
            log.exception("raft voter %d: closing the storage failed", self.node_id)
        finally:
            await loop.run_in_executor(None, functools.partial(io.shutdown, wait=True))

    # --- waiting

    async def wait_for_leader(self, timeout_s: float) -> int:
        """The leader's id once this voter knows one; QuorumTimeoutError after `timeout_s`."""
        await self._wait(lambda: self.leader_id != NO_NODE, timeout_s, "a known leader")
        return self.leader_id

    async def wait_for_applied(self, index: int, timeout_s: float) -> int:
        """Wait until `applied_index >= index`; returns the applied index (QuorumTimeoutError otherwise)."""
        await self._wait(lambda: self._applied_index >= index, timeout_s, f"applied index {index}")
        return self._applied_index

    async def _wait(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not done():
            if self._state != _RUNNING:
                raise QuorumUnavailableError(f"raft voter {self.node_id} is {self._state}")
            changed = self._changed
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise QuorumTimeoutError(f"raft voter {self.node_id}: no {what} within {timeout_s}s")
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except (TimeoutError, asyncio.TimeoutError):
                pass

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    # --- the three ways in

    async def propose(self, payload: bytes, timeout_s: float = 5.0) -> int:
        """Append a command; its index once applied here. NotControllerError, QuorumTimeoutError, see the module doc."""
        self._check_running()
        if len(payload) > self.config.max_entry_bytes:
            raise EntryTooLargeError(f"proposal of {len(payload)} bytes exceeds max_entry_bytes "
                                     f"{self.config.max_entry_bytes}")
        if not self.is_leader:
            raise NotControllerError.from_raft(self.leader_id, self.term)
        future = asyncio.get_running_loop().create_future()
        self._enqueue(_Proposal(bytes(payload), future))
        try:
            done, _ = await asyncio.wait({future}, timeout=timeout_s)
            if not done:
                raise QuorumTimeoutError(f"proposal not applied within {timeout_s}s (it may still commit)")
            return future.result()
        finally:
            if not future.done():
                future.cancel()  # the driver skips it, or drops its completion
            elif not future.cancelled():
                future.exception()  # resolved as the proposer gave up: retrieved, so asyncio does not log it

    async def propose_many(self, payloads: list[bytes], timeout_s: float = 5.0, window: int = 256) -> int:
        """Append commands in order; the index of the last once all are applied here (the applied index if none).

        Up to `window` proposals are in flight at once (each is queued before the next, so the log
        keeps their order): one round of replication commits a window, not one record. The first
        failure is raised after its window settles; records before it may have committed, as with
        one `propose` after another.
        """
        last = self._applied_index
        for start in range(0, len(payloads), max(1, window)):
            chunk = payloads[start:start + max(1, window)]
            results = await asyncio.gather(*(self.propose(p, timeout_s) for p in chunk), return_exceptions=True)
            for r in results:
                if isinstance(r, BaseException):
                    raise r
            last = max(last, *results)
        return last

    def receive(self, sender: int, body: bytes, sent_at_ms: int | None = None) -> None:
        """Queue a Raft message (JSON of `message_to_dict`) sent by the authenticated node `sender`.

        Raises RequestTooLargeError, NotAVoterError, MessageFormatError, QuorumUnavailableError (full or
        not running); returns once queued, not once stepped (Raft messages are one-way).
        """
        self._check_running()
        if len(body) > self.config.max_message_bytes:
            raise RequestTooLargeError(f"Raft message of {len(body)} bytes exceeds max_message_bytes "
                                       f"{self.config.max_message_bytes}")
        if sender not in self.config.voters or sender == self.node_id:
            raise NotAVoterError(f"node {sender} is not a peer voter of {format_voters(self.config.voters)}")
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise MessageFormatError("Raft message is not JSON") from None
        message = message_from_dict(doc)
        if message.sender != sender:
            raise NotAVoterError(f"message names sender {message.sender} but was signed by node {sender}")
        if isinstance(message, (AppendEntriesResponse, InstallSnapshotResponse)) and self.lease is not None:
            # Stamped when it was sent (the sender's signed wall clock; never later than now): an
            # answer that waited in a socket through a pause is old, not fresh.
            age_ms = max(0.0, time.time() * 1000 - sent_at_ms) if sent_at_ms is not None else 0.0
            self.lease.acknowledged(sender, message.term, _now_ms() - age_ms)
            self._step_down_if_paused()
        self._enqueue(Receive(message))
        self.counters.messages_received += 1

    def _check_running(self) -> None:
        if self._state != _RUNNING:
            raise QuorumUnavailableError(f"raft voter {self.node_id} is {self._state}"
                                         + (f": {self.failure}" if self.failure else ""))

    def _enqueue(self, item: object) -> None:
        try:
            self._inbox.put_nowait(item)
        except asyncio.QueueFull:
            self.counters.inbox_full += 1
            raise QuorumUnavailableError(f"raft voter {self.node_id} is busy ({self.config.max_pending_events} "
                                         f"events queued)") from None

    # --- the metadata log for observers

    def read_metadata(self, from_index: int, max_entries: int | None = None,
                      max_bytes: int | None = None) -> MetadataBatch:
        """Applied entries after `from_index` (bounded), with the snapshot first if `from_index` is below the log."""
        self._check_running()
        cfg = self.config
        max_entries = min(max_entries or cfg.metadata_fetch_max_entries, cfg.metadata_fetch_max_entries)
        max_bytes = min(max_bytes or cfg.metadata_fetch_max_bytes, cfg.metadata_fetch_max_bytes)
        core = self._core
        # Everything at or below the applied index is committed, so it is safe to serve from any voter;
        # the core's snapshot holds only committed entries even before it is durable here.
        snapshot = core.snapshot if core.snapshot is not None and from_index < core.snapshot_index else None
        start = snapshot.last_index + 1 if snapshot is not None else from_index + 1
        entries: list[Entry] = []
        size = 0
        for i in range(start, min(self._applied_index, start + max_entries - 1) + 1):
            e = core.entry(i)
            if e is None:
                break
            size += len(e.payload)
            if entries and size > max_bytes:
                break
            entries.append(e)
        return MetadataBatch(self.node_id, self.term, self.leader_id, core.commit_index, self._applied_index,
                             snapshot, tuple(entries))

    async def fetch_metadata(self, from_index: int, max_entries: int | None = None, max_bytes: int | None = None,
                             max_wait_ms: int = 0) -> MetadataBatch:
        """`read_metadata`, after waiting up to `max_wait_ms` (capped) for something past `from_index`."""
        wait_ms = min(max(0, max_wait_ms), self.config.metadata_fetch_max_wait_ms)
        if wait_ms and self._applied_index <= from_index:
            try:
                await self.wait_for_applied(from_index + 1, wait_ms / 1000)
            except QuorumTimeoutError:
                pass
        return self.read_metadata(from_index, max_entries, max_bytes)

    # --- the driver

    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        period = self.config.tick_ms / 1000
        next_at = loop.time() + period
        tick = Tick()
        while self._state == _RUNNING:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if self.lease is not None:
                self.lease.observe(_now_ms())
                self._step_down_if_paused()
            try:
                self._inbox.put_nowait(tick)
            except asyncio.QueueFull:
                self.counters.inbox_full += 1
            # After a stall, do not fire a burst of ticks (that would expire every timeout at once).
            next_at = max(next_at + period, loop.time())

    async def _run(self) -> None:
        group: list[object] = []
        try:
            while self._state == _RUNNING:
                item = await self._inbox.get()
                if item is _STOP or self._state != _RUNNING:
                    break
                group = [item]
                stop = self._fill_group(group)
                await self._step_group(group)
                group = []
                if stop:
                    break
        except _FailStop:
            pass
        except asyncio.CancelledError:
            raise
        except Exception as e:  # an invariant of the core, or a failing state machine
            self._fail(e)
        finally:
            # The proposals of an interrupted group (a failed persist) and everything queued:
            # proposals fail, messages are lost (Raft resends).
            gone = QuorumUnavailableError(f"raft voter {self.node_id} stopped"
                                          + (f" after a failure: {self.failure}" if self.failure else ""))
            for item in group:
                if isinstance(item, _Proposal):
                    _resolve(item.future, error=gone)
            while self._inbox is not None and not self._inbox.empty():
                queued = self._inbox.get_nowait()
                if isinstance(queued, _Proposal):
                    _resolve(queued.future, error=gone)

    def _fill_group(self, group: list[object]) -> bool:
        """Group commit: add what is already queued, up to `append_max_entries` events; True at a stop."""
        while len(group) < self.config.append_max_entries and not self._inbox.empty():
            item = self._inbox.get_nowait()
            if item is _STOP:
                return True
            group.append(item)
        return False

    async def _step(self, event: Any) -> None:
        await self._step_group([event])

    async def _step_group(self, items: list[object]) -> None:
        """Step every event of the group, then carry out all their effects (core.py, "Group commit").

        Consecutive proposals become one `ProposeMany` (one entry each, one PersistEntries); the
        persist effects of the whole group run first, on the I/O thread, with one fsync per run of
        entries (`RaftStorage.persist_many`); then sends, applies and proposal outcomes, in order.
        """
        core = self._core
        events: list[tuple[Any, list[_Proposal]]] = []
        for item in items:
            if isinstance(item, _Proposal):
                if item.future.done():
                    continue  # the proposer gave up before its turn
                if events and events[-1][0] is None:
                    events[-1][1].append(item)
                else:
                    events.append((None, [item]))  # a ProposeMany, made below
            else:
                events.append((item, []))
        effects: list = []
        proposals: collections.deque[_Proposal] = collections.deque()  # in the order of their outcomes
        for event, props in events:
            if props:
                event = ProposeMany(tuple(p.payload for p in props))
            try:
                effects.extend(core.step(event))
            except EntryTooLargeError as e:  # refused before the core changed anything
                for prop in props:
                    _resolve(prop.future, error=e)
                continue
            proposals.extend(props)
            self.counters.steps += 1
        persists = [e for e in effects if isinstance(e, _PERSIST)]
        if persists:
            try:
                await asyncio.get_running_loop().run_in_executor(self._io, self._persist, persists)
            except Exception as exc:
                self._fail(exc)
                raise _FailStop from exc
            self.counters.persist_groups += 1
            for e in persists:
                if isinstance(e, PersistSnapshot):
                    self._snapshot_index = max(self._snapshot_index, e.snapshot.last_index)
                elif isinstance(e, PersistEntries):
                    self.counters.entries_persisted += len(e.entries)
        applied = False
        for e in effects:
            if isinstance(e, _PERSIST):
                continue
            if isinstance(e, Send):
                self._send(e.to, e.message)
            elif isinstance(e, Apply):
                self._apply(e.entry)
                applied = True
            elif isinstance(e, RestoreSnapshot):
                self._restore(e.snapshot)
                applied = True
            elif isinstance(e, Proposed):
                invariant(bool(proposals), "Proposed without a proposal")
                self._pending[e.index] = (e.term, proposals.popleft().future)
            elif isinstance(e, ProposalRefused):
                invariant(bool(proposals), "ProposalRefused without a proposal")
                _resolve(proposals.popleft().future, error=NotControllerError.from_raft(e.leader_id, e.term))
            elif isinstance(e, RoleChanged):
                pass  # published below from the core's state, with term changes the notice leaves out
        invariant(not proposals, f"{len(proposals)} proposals got no outcome from the core")
        self._publish_state()
        if self._pending and not (core.role == Role.LEADER):
            self._fail_pending(NotControllerError.from_raft(core.leader_id, core.term))
        if applied:
            self._callback(self.on_applied, self._applied_index)
            self._notify()
        if self._applied_index - max(self._snapshot_index, core.snapshot_index) >= self.config.snapshot_interval_entries:
            await self._snapshot()

    def _persist(self, effects: list) -> None:
        """On the I/O thread: carry out the persist effects of one group, in order; durable on return."""
        self._storage.persist_many(effects)

    def _apply(self, entry: Entry) -> None:
        invariant(entry.index == self._applied_index + 1,
                  f"apply of {entry.index} after applied index {self._applied_index}")
        try:
            self.state_machine.apply(entry)
        except Exception as exc:
            self._fail(exc)  # apply must never fail; a voter that cannot apply must not go on
            raise _FailStop from exc
        self._applied_index = entry.index
        waiting = self._pending.pop(entry.index, None)
        if waiting is not None:
            term, future = waiting
            if term == entry.term:
                _resolve(future, result=entry.index)
            else:
                _resolve(future, error=NotControllerError.from_raft(self._core.leader_id, self._core.term,
                                                          f"entry {entry.index} was replaced by epoch "
                                                          f"{entry.term}'s; the proposal was lost"))

    def _restore(self, snapshot: Snapshot) -> None:
        try:
            self.state_machine.restore(snapshot.data)
        except Exception as exc:
            self._fail(exc)
            raise _FailStop from exc
        invariant(snapshot.last_index >= self._applied_index,
                  f"restore of snapshot {snapshot.last_index} below applied index {self._applied_index}")
        self._applied_index = snapshot.last_index
        log.info("raft voter %d restored snapshot at %d (term %d)", self.node_id, snapshot.last_index,
                 snapshot.last_term)

    async def _snapshot(self) -> None:
        index = self._applied_index
        term = self._core.term_at(index)
        invariant(term is not None, f"applied index {index} has no term in the log")
        try:
            data = self.state_machine.snapshot()
        except Exception as exc:
            self._fail(exc)
            raise _FailStop from exc
        self.counters.snapshots += 1
        await self._step(CompactLog(Snapshot(index, term, data)))
        log.debug("raft voter %d snapshotted at %d (%d bytes)", self.node_id, index, len(data))

    def _publish_state(self) -> None:
        core = self._core
        state = ((core.role, core.term, core.leader_id) if self._state == _RUNNING and core is not None
                 else (Role.FOLLOWER, self._reported[1], NO_NODE))
        if state == self._reported:
            return
        self._reported = state
        if self.lease is not None:
            if state[0] == Role.LEADER:
                self.lease.became_leader(state[1], _now_ms())
            else:
                self.lease.stepped_down()
        log.info("raft voter %d: %s in term %d, leader %d", self.node_id, state[0].name, state[1], state[2])
        self._callback(self.on_role_change, *state)
        self._notify()

    def _callback(self, fn: Callable | None, *args: Any) -> None:
        if fn is None:
            return
        try:
            fn(*args)
        except Exception:
            log.exception("raft voter %d: callback %r failed", self.node_id, fn)

    def _fail_pending(self, error: Exception) -> None:
        pending, self._pending = self._pending, {}
        for _, future in pending.values():
            _resolve(future, error=error)

    def _fail(self, exc: BaseException) -> None:
        """Fail-stop: record, log, stop ticking; the driver exits and the node must restart the voter."""
        if self.failure is None:
            self.failure = exc
            log.critical("raft voter %d fails and stops (fail-stop): %s", self.node_id, exc, exc_info=exc)
        self._state = _FAILED
        if self._timer is not None:
            self._timer.cancel()
        self._fail_pending(QuorumUnavailableError(f"raft voter {self.node_id} failed: {exc}"))
        self._publish_state()
        self._notify()

    # --- sending

    def _send(self, to: int, message: Message) -> None:
        if self._inflight.get(to, 0) >= self.config.max_inflight_sends_per_peer:
            self.counters.sends_dropped += 1
            log.debug("raft voter %d: dropping %s to %d (%d sends in flight)", self.node_id,
                      type(message).__name__, to, self._inflight[to])
            return
        body = json.dumps(message_to_dict(message), separators=(",", ":")).encode()
        if len(body) > self.config.max_message_bytes:
            self.counters.sends_dropped += 1
            if not self._oversize_warned:  # once: it repeats on every heartbeat until fixed
                self._oversize_warned = True
                log.warning("raft voter %d: %s to %d is %d bytes, above max_message_bytes %d; not sent "
                            "(raise max_message_bytes on every voter)", self.node_id, type(message).__name__,
                            to, len(body), self.config.max_message_bytes)
            return
        self._inflight[to] = self._inflight.get(to, 0) + 1
        task = asyncio.get_running_loop().create_task(self._post(to, body))
        self._sends.add(task)
        task.add_done_callback(functools.partial(self._sent, to))

    def _sent(self, to: int, task: asyncio.Task) -> None:
        self._sends.discard(task)
        self._inflight[to] -= 1

    async def _post(self, to: int, body: bytes) -> None:
        url = base_url(self.config.voters[to], self.config.tls is not None) + RAFT_MESSAGES_PATH
        try:
            r = await self._client.post(url, content=body, headers={"Content-Type": "application/json"})
        except (httpx.HTTPError, OSError) as e:
            self.counters.send_errors += 1
            log.debug("raft voter %d: send to %d failed: %r", self.node_id, to, e)
            return
        if r.status_code != 202:
            self.counters.send_errors += 1
            log.debug("raft voter %d: voter %d answered %d: %s", self.node_id, to, r.status_code, r.text[:200])
        else:
            self.counters.messages_sent += 1


def _now_ms() -> float:
    return time.monotonic() * 1000


def _resolve(future: asyncio.Future, *, result: Any = None, error: BaseException | None = None) -> None:
    if future.done():
        return  # the proposer gave up (timeout, cancel)
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
