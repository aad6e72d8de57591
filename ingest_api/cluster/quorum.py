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

The host holds a `QuorumDriver` (cluster/quorum_driver.py), which owns the stepping: the inbox, the
timer and driver tasks, group commit, the durability contract of core.py, the proposals waiting
to apply, the applied index, the reported role and the fail-stop. The host opens and closes the
storage, its I/O thread and the sends (`PeerSender`, cluster/quorum_sender.py), builds the core
and the lease, and hands them to the driver; its ways in queue events on the driver.

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

Invariants (checked with `invariant()`): the driver's (cluster/quorum_driver.py): the core is never
re-entered, applied_index only grows, a proposal succeeds only when applied with its term, snapshots
are taken at the applied index.

Concurrency: every public method must be called from the event loop the host was started in. Reads
(properties, `read_metadata`) see the state after the last completed effect, never a half-executed step.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from lakelog.infra.errors import invariant
from lakelog.ingest_api.cluster.errors import (
    NotAVoterError,
    NotControllerError,
    QuorumTimeoutError,
    QuorumUnavailableError,
)
from lakelog.ingest_api.cluster.metadata_follower import MetadataBatch
from lakelog.ingest_api.cluster.quorum_config import QuorumConfig, format_voters
from lakelog.ingest_api.cluster.quorum_driver import NEW, RUNNING, Proposal, QuorumDriver, now_ms
from lakelog.ingest_api.cluster.quorum_sender import PeerSender, QuorumCounters
from lakelog.ingest_api.errors import RequestTooLargeError
from lakelog.ingest_api.raft.core import RaftCore
from lakelog.ingest_api.raft.messages import (
    NO_NODE,
    AppendEntriesResponse,
    Entry,
    EntryTooLargeError,
    InstallSnapshotResponse,
    MessageFormatError,
    Receive,
    Role,
    message_from_dict,
)
from lakelog.ingest_api.raft.lease import LeaderLease
from lakelog.ingest_api.raft.state_machine import StateMachine
from lakelog.ingest_api.raft.storage import RaftStorage

log = logging.getLogger("lakelog.quorum")

#: The shortest clock jump taken for a pause that ends a leadership. The lease alone keeps a woken
#: leader from acting (its acknowledgements count from when they were sent); stepping down is for
#: liveness, and a busy machine stalls an event loop for a few hundred ms without any pause.
PAUSE_MIN_MS = 2000


class QuorumHost:
    """One controller voter: core, storage and state machine driven by an asyncio task. See the module doc."""

    def __init__(self, config: QuorumConfig, state_machine: StateMachine, *,
                 on_role_change: Callable[[Role, int, int], None] | None = None,
                 on_applied: Callable[[int], None] | None = None,
                 rng: random.Random | None = None) -> None:
        self.config = config
        self.state_machine = state_machine
        self.counters = QuorumCounters()
        self._rng = rng or random.Random()
        self._driver = QuorumDriver(config, state_machine, self.counters, on_role_change=on_role_change,
                                    on_applied=on_applied)
        self._core: RaftCore | None = None  # this and the next four are made at start
        self._storage: RaftStorage | None = None
        self._io: ThreadPoolExecutor | None = None
        self._sender: PeerSender | None = None
        self.lease: LeaderLease | None = None

    # --- read-only views (the state after the last completed step)

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def running(self) -> bool:
        return self._driver.state == RUNNING

    @property
    def failure(self) -> BaseException | None:
        """What made this voter fail-stop (None if it did not): a failed persist, apply or invariant."""
        return self._driver.failure

    @property
    def role(self) -> Role:
        return self._driver.reported[0]

    @property
    def is_leader(self) -> bool:
        return self._driver.reported[0] == Role.LEADER

    @property
    def has_lease(self) -> bool:
        """Leader, and confirmed by a quorum within the lease with no pause since (raft/lease.py).

        What the active controller checks before it answers anything, a broker heartbeat above all.
        """
        if self.lease is None:
            return False
        valid = self.is_leader and self.lease.valid(now_ms())
        self._driver.step_down_if_paused()
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

    @property
    def term(self) -> int:
        """The durable Raft term, i.e. the controller epoch this voter knows."""
        return self._driver.reported[1]

    @property
    def leader_id(self) -> int:
        return self._driver.reported[2]

    @property
    def applied_index(self) -> int:
        return self._driver.applied_index

    @property
    def commit_index(self) -> int:
        return self._core.commit_index if self._core is not None else 0

    @property
    def snapshot_index(self) -> int:
        return self._driver.snapshot_index

    # --- lifecycle

    async def start(self) -> None:
        """Open and recover the storage, restore the state machine, start the timer and the driver."""
        invariant(self._driver.state == NEW, f"quorum host {self.node_id} was already started ({self._driver.state})")
        loop = asyncio.get_running_loop()
        cfg = self.config
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"raft-io-{cfg.node_id}")
        try:
            self._storage = await loop.run_in_executor(
                self._io, functools.partial(RaftStorage, cfg.directory, cfg.node_id, fsync=cfg.fsync))
            durable = await loop.run_in_executor(self._io, self._storage.load)
            snapshot_index = 0
            if durable.snapshot is not None:
                self.state_machine.restore(durable.snapshot.data)
                snapshot_index = durable.snapshot.last_index
            self._core = RaftCore(cfg.node_id, tuple(cfg.voters), cfg.raft_config(), self._rng, durable)
        except BaseException:
            await self._close_storage()
            self._driver.abandon()
            raise
        rec = self._storage.recovery
        if rec.truncated_bytes or rec.dropped_entries or rec.removed_files:
            log.warning("raft voter %d recovered %s: cut %d torn bytes, dropped %d entries, removed %s",
                        cfg.node_id, cfg.directory, rec.truncated_bytes, rec.dropped_entries, rec.removed_files)
        log.info("raft voter %d starting in term %d: snapshot at %d, log to %d, voters %s", cfg.node_id,
                 durable.term, snapshot_index, self._core.last_index, format_voters(cfg.voters))
        # The controller's lease: half an election timeout from a quorum's acknowledgements (as sent);
        # a pause of an election timeout (at least PAUSE_MIN_MS) ends the leadership (raft/lease.py).
        self.lease = LeaderLease(cfg.node_id, set(cfg.voters), cfg.election_timeout_ms / 2,
                                 max(cfg.election_timeout_ms, PAUSE_MIN_MS), now_ms())
        self._sender = PeerSender(cfg, self.counters)
        self._driver.start(self._core, self._storage, self._io, self._sender, self.lease,
                           applied_index=snapshot_index, snapshot_index=snapshot_index, term=durable.term)

    async def stop(self, timeout_s: float = 10.0) -> None:
        """Stop ticking, finish the step in progress, drop queued events, close the client and the storage.

        Idempotent. Waiting proposals fail with QuorumUnavailableError. The files are left as after a
        completed step (every write the driver started has finished before the storage is closed).
        """
        if not await self._driver.halt(timeout_s):
            return
        if self._sender is not None:
            await self._sender.close()
        self._driver.fail_pending(QuorumUnavailableError(f"raft voter {self.node_id} stopped"))
        await self._close_storage()
        self._driver.stopped()
        log.info("raft voter %d stopped in term %d at applied index %d", self.node_id, self.term,
                 self.applied_index)

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
        await self._wait(lambda: self.applied_index >= index, timeout_s, f"applied index {index}")
        return self.applied_index

    async def _wait(self, done: Callable[[], bool], timeout_s: float, what: str) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not done():
            if self._driver.state != RUNNING:
                raise QuorumUnavailableError(f"raft voter {self.node_id} is {self._driver.state}")
            changed = self._driver.changed
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise QuorumTimeoutError(f"raft voter {self.node_id}: no {what} within {timeout_s}s")
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except (TimeoutError, asyncio.TimeoutError):
                pass

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
        self._enqueue(Proposal(bytes(payload), future))
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
        last = self.applied_index
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
            self.lease.acknowledged(sender, message.term, now_ms() - age_ms)
            self._driver.step_down_if_paused()
        self._enqueue(Receive(message))
        self.counters.messages_received += 1

    def _check_running(self) -> None:
        if self._driver.state != RUNNING:
            raise QuorumUnavailableError(f"raft voter {self.node_id} is {self._driver.state}"
                                         + (f": {self.failure}" if self.failure else ""))

    def _enqueue(self, item: object) -> None:
        self._driver.enqueue(item)

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
        applied = self.applied_index
        for i in range(start, min(applied, start + max_entries - 1) + 1):
            e = core.entry(i)
            if e is None:
                break
            size += len(e.payload)
            if entries and size > max_bytes:
                break
            entries.append(e)
        return MetadataBatch(self.node_id, self.term, self.leader_id, core.commit_index, applied,
                             snapshot, tuple(entries))

    async def fetch_metadata(self, from_index: int, max_entries: int | None = None, max_bytes: int | None = None,
                             max_wait_ms: int = 0) -> MetadataBatch:
        """`read_metadata`, after waiting up to `max_wait_ms` (capped) for something past `from_index`."""
        wait_ms = min(max(0, max_wait_ms), self.config.metadata_fetch_max_wait_ms)
        if wait_ms and self.applied_index <= from_index:
            try:
                await self.wait_for_applied(from_index + 1, wait_ms / 1000)
            except QuorumTimeoutError:
                pass
        return self.read_metadata(from_index, max_entries, max_bytes)
