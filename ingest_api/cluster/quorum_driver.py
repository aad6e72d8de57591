"""The driver of a controller voter: one asyncio task steps the Raft core and carries out its effects.

`QuorumDriver` is held by `QuorumHost` (cluster/quorum.py). It owns the stepping and everything the
steps change: the bounded inbox, the timer task, the driver task, the proposals waiting for their
entry to apply, the applied and snapshot indexes, the (role, term, leader) it last reported, the
voter's lifecycle state and the fail-stop. The host opens the storage, builds the core, the lease
and the `PeerSender` (cluster/quorum_sender.py) and hands them to `start`; from then on it talks to
the driver through `enqueue`, `step_down_if_paused`, `halt` / `stopped` and read-only properties.

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

Invariants (checked with `invariant()`):
  * the core is never re-entered: one driver task calls `step`, one step at a time;
  * applied_index only grows, by one per Apply, or jumps to a RestoreSnapshot's index;
  * a proposal completes successfully only when its index is applied with the term it was proposed in;
  * a snapshot is taken at the applied index, after every Apply up to it.

Lifecycle (`state`): NEW -> RUNNING [-> FAILED, at a fail-stop] -> STOPPING -> STOPPED; the host
calls `start`, then `halt` and, once it has closed the sender and the storage, `stopped`.

Concurrency: every method runs on the event loop the host was started in; the storage calls run on
the host's one I/O thread and are awaited.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

from lakelog.infra.errors import invariant
from lakelog.ingest_api.cluster.errors import NotControllerError, QuorumUnavailableError
from lakelog.ingest_api.cluster.metadata_follower import cancel_task
from lakelog.ingest_api.cluster.quorum_config import QuorumConfig
from lakelog.ingest_api.cluster.quorum_sender import PeerSender, QuorumCounters
from lakelog.ingest_api.raft.core import RaftCore
from lakelog.ingest_api.raft.lease import LeaderLease
from lakelog.ingest_api.raft.messages import (
    NO_NODE,
    Apply,
    CompactLog,
    Entry,
    EntryTooLargeError,
    PersistEntries,
    PersistSnapshot,
    PersistState,
    ProposalRefused,
    ProposeMany,
    Proposed,
    RestoreSnapshot,
    Role,
    RoleChanged,
    Send,
    Snapshot,
    StepDown,
    Tick,
)
from lakelog.ingest_api.raft.state_machine import StateMachine
from lakelog.ingest_api.raft.storage import RaftStorage

log = logging.getLogger("lakelog.quorum")

PERSIST_EFFECTS = (PersistState, PersistEntries, PersistSnapshot)


@dataclass
class Proposal:
    """A proposal in the inbox: its payload and the future `QuorumHost.propose` awaits."""

    payload: bytes
    future: asyncio.Future


#: Put in the inbox by `stop()`: the driver ends after the group it is in.
STOP = object()
#: The voter's lifecycle (`QuorumDriver.state`): NEW -> RUNNING [-> FAILED, at a fail-stop] -> STOPPING -> STOPPED.
RUNNING, NEW, STOPPING, STOPPED, FAILED = "running", "new", "stopping", "stopped", "failed"


class FailStop(Exception):
    """Internal to the host: the driver stops after a failed persist / apply (already logged and recorded)."""


class QuorumDriver:
    """Steps one voter's core from a bounded inbox and carries out the effects (module doc)."""

    def __init__(self, config: QuorumConfig, state_machine: StateMachine, counters: QuorumCounters, *,
                 on_role_change: Callable[[Role, int, int], None] | None = None,
                 on_applied: Callable[[int], None] | None = None) -> None:
        self._config = config
        self._state_machine = state_machine
        self._counters = counters
        self._on_role_change = on_role_change
        self._on_applied = on_applied
        self._state = NEW
        self._failure: BaseException | None = None
        self._core: RaftCore | None = None  # the collaborators, handed over by `start`
        self._storage: RaftStorage | None = None
        self._io: ThreadPoolExecutor | None = None
        self._sender: PeerSender | None = None
        self._lease: LeaderLease | None = None
        self._inbox: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._timer: asyncio.Task | None = None
        self._pending: dict[int, tuple[int, asyncio.Future]] = {}  # index -> (term, future)
        self._reported = (Role.FOLLOWER, 0, NO_NODE)  # (role, durable term, leader id)
        self._applied_index = 0
        self._snapshot_index = 0  # of the last snapshot made durable
        self._changed: asyncio.Event | None = None

    # --- read-only views (the state after the last completed step)

    @property
    def state(self) -> str:
        """The lifecycle state: NEW, RUNNING, FAILED, STOPPING or STOPPED."""
        return self._state

    @property
    def failure(self) -> BaseException | None:
        """What made the voter fail-stop (None if it did not)."""
        return self._failure

    @property
    def reported(self) -> tuple[Role, int, int]:
        """(role, durable term, leader id) as last reported to `on_role_change`."""
        return self._reported

    @property
    def applied_index(self) -> int:
        return self._applied_index

    @property
    def snapshot_index(self) -> int:
        return self._snapshot_index

    @property
    def changed(self) -> asyncio.Event | None:
        """Set (and replaced by a fresh one) whenever the reported state or the applied index changes."""
        return self._changed

    @property
    def _node_id(self) -> int:
        return self._config.node_id

    # --- lifecycle

    def start(self, core: RaftCore, storage: RaftStorage, io: ThreadPoolExecutor, sender: PeerSender,
              lease: LeaderLease, *, applied_index: int, snapshot_index: int, term: int) -> None:
        """Run: the core recovered from `storage` (whose snapshot, at `snapshot_index`, the state machine
        holds up to `applied_index`), stepped on the running loop; storage calls go to `io`."""
        invariant(self._state == NEW, f"raft voter {self._node_id} was already started ({self._state})")
        self._core, self._storage, self._io, self._sender, self._lease = core, storage, io, sender, lease
        self._applied_index, self._snapshot_index = applied_index, snapshot_index
        self._reported = (Role.FOLLOWER, term, NO_NODE)
        self._changed = asyncio.Event()
        self._inbox = asyncio.Queue(self._config.max_pending_events)
        self._state = RUNNING
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._run(), name=f"raft-driver-{self._node_id}")
        self._timer = loop.create_task(self._tick_loop(), name=f"raft-timer-{self._node_id}")

    def abandon(self) -> None:
        """The host could not start: STOPPED without having run."""
        self._state = STOPPED

    async def halt(self, timeout_s: float) -> bool:
        """Stop ticking, finish the step in progress, drop queued events (see `_run`).

        True when this call halted a started driver: the host then closes the sender and the storage
        and calls `stopped`. False when there was nothing to halt (never started: now STOPPED; or
        stopped) or another call is halting it (after waiting until that stop is complete).
        """
        if self._state in (NEW, STOPPED):
            self._state = STOPPED
            return False
        if self._state == STOPPING:
            while self._state == STOPPING:
                await asyncio.sleep(0.01)
            return False
        self._state = STOPPING
        await cancel_task(self._timer)
        if self._task is not None and not self._task.done():
            try:
                self._inbox.put_nowait(STOP)
            except asyncio.QueueFull:
                pass  # the driver is busy; it looks at the state after the current event
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
            except (TimeoutError, asyncio.TimeoutError):
                log.warning("raft voter %d: the driver did not finish within %.1fs; cancelling it", self._node_id,
                            timeout_s)
                await cancel_task(self._task)
        return True

    def stopped(self) -> None:
        """The host closed everything after `halt`: STOPPED (`failure` still tells a fail-stop apart)."""
        self._state = STOPPED
        self._publish_state()
        self._notify()

    # --- the ways in

    def enqueue(self, item: object) -> None:
        """Queue an event (a `Proposal`, a raft `Receive`); QuorumUnavailableError when the inbox is full."""
        try:
            self._inbox.put_nowait(item)
        except asyncio.QueueFull:
            self._counters.inbox_full += 1
            raise QuorumUnavailableError(f"raft voter {self._node_id} is busy ({self._config.max_pending_events} "
                                         f"events queued)") from None

    def step_down_if_paused(self) -> None:
        """Queue a StepDown when the lease saw a pause (its clock jumped) during this leadership."""
        if self._lease is not None and self._lease.take_step_down():
            log.warning("raft voter %d: its clock jumped (a pause); giving up the leadership of term %d",
                        self._node_id, self._reported[1])
            try:
                self._inbox.put_nowait(StepDown())
            except asyncio.QueueFull:
                self._counters.inbox_full += 1  # check quorum steps it down an election timeout later

    # --- stepping

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        period = self._config.tick_ms / 1000
        next_at = loop.time() + period
        tick = Tick()
        while self._state == RUNNING:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if self._lease is not None:
                self._lease.observe(now_ms())
                self.step_down_if_paused()
            try:
                self._inbox.put_nowait(tick)
            except asyncio.QueueFull:
                self._counters.inbox_full += 1
            # After a stall, do not fire a burst of ticks (that would expire every timeout at once).
            next_at = max(next_at + period, loop.time())

    async def _run(self) -> None:
        group: list[object] = []
        try:
            while self._state == RUNNING:
                item = await self._inbox.get()
                if item is STOP or self._state != RUNNING:
                    break
                group = [item]
                stop = self._fill_group(group)
                await self._step_group(group)
                group = []
                if stop:
                    break
        except FailStop:
            pass
        except asyncio.CancelledError:
            raise
        except Exception as e:  # an invariant of the core, or a failing state machine
            self._fail(e)
        finally:
            # The proposals of an interrupted group (a failed persist) and everything queued:
            # proposals fail, messages are lost (Raft resends).
            gone = QuorumUnavailableError(f"raft voter {self._node_id} stopped"
                                          + (f" after a failure: {self._failure}" if self._failure else ""))
            for item in group:
                if isinstance(item, Proposal):
                    resolve(item.future, error=gone)
            while self._inbox is not None and not self._inbox.empty():
                queued = self._inbox.get_nowait()
                if isinstance(queued, Proposal):
                    resolve(queued.future, error=gone)

    def _fill_group(self, group: list[object]) -> bool:
        """Group commit: add what is already queued, up to `append_max_entries` events; True at a stop."""
        while len(group) < self._config.append_max_entries and not self._inbox.empty():
            item = self._inbox.get_nowait()
            if item is STOP:
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
        events: list[tuple[Any, list[Proposal]]] = []
        for item in items:
            if isinstance(item, Proposal):
                if item.future.done():
                    continue  # the proposer gave up before its turn
                if events and events[-1][0] is None:
                    events[-1][1].append(item)
                else:
                    events.append((None, [item]))  # a ProposeMany, made below
            else:
                events.append((item, []))
        effects: list = []
        proposals: collections.deque[Proposal] = collections.deque()  # in the order of their outcomes
        for event, props in events:
            if props:
                event = ProposeMany(tuple(p.payload for p in props))
            try:
                effects.extend(core.step(event))
            except EntryTooLargeError as e:  # refused before the core changed anything
                for prop in props:
                    resolve(prop.future, error=e)
                continue
            proposals.extend(props)
            self._counters.steps += 1
        persists = [e for e in effects if isinstance(e, PERSIST_EFFECTS)]
        if persists:
            try:
                await asyncio.get_running_loop().run_in_executor(self._io, self._persist, persists)
            except Exception as exc:
                self._fail(exc)
                raise FailStop from exc
            self._counters.persist_groups += 1
            for e in persists:
                if isinstance(e, PersistSnapshot):
                    self._snapshot_index = max(self._snapshot_index, e.snapshot.last_index)
                elif isinstance(e, PersistEntries):
                    self._counters.entries_persisted += len(e.entries)
        applied = False
        for e in effects:
            if isinstance(e, PERSIST_EFFECTS):
                continue
            if isinstance(e, Send):
                self._sender.send(e.to, e.message)
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
                resolve(proposals.popleft().future, error=NotControllerError.from_raft(e.leader_id, e.term))
            elif isinstance(e, RoleChanged):
                pass  # published below from the core's state, with term changes the notice leaves out
        invariant(not proposals, f"{len(proposals)} proposals got no outcome from the core")
        self._publish_state()
        if self._pending and not (core.role == Role.LEADER):
            self.fail_pending(NotControllerError.from_raft(core.leader_id, core.term))
        if applied:
            self._callback(self._on_applied, self._applied_index)
            self._notify()
        since_snapshot = self._applied_index - max(self._snapshot_index, core.snapshot_index)
        if since_snapshot >= self._config.snapshot_interval_entries:
            await self._snapshot()

    def _persist(self, effects: list) -> None:
        """On the I/O thread: carry out the persist effects of one group, in order; durable on return."""
        self._storage.persist_many(effects)

    def _apply(self, entry: Entry) -> None:
        invariant(entry.index == self._applied_index + 1,
                  f"apply of {entry.index} after applied index {self._applied_index}")
        try:
            self._state_machine.apply(entry)
        except Exception as exc:
            self._fail(exc)  # apply must never fail; a voter that cannot apply must not go on
            raise FailStop from exc
        self._applied_index = entry.index
        waiting = self._pending.pop(entry.index, None)
        if waiting is not None:
            term, future = waiting
            if term == entry.term:
                resolve(future, result=entry.index)
            else:
                resolve(future, error=NotControllerError.from_raft(self._core.leader_id, self._core.term,
                                                          f"entry {entry.index} was replaced by epoch "
                                                          f"{entry.term}'s; the proposal was lost"))

    def _restore(self, snapshot: Snapshot) -> None:
        try:
            self._state_machine.restore(snapshot.data)
        except Exception as exc:
            self._fail(exc)
            raise FailStop from exc
        invariant(snapshot.last_index >= self._applied_index,
                  f"restore of snapshot {snapshot.last_index} below applied index {self._applied_index}")
        self._applied_index = snapshot.last_index
        log.info("raft voter %d restored snapshot at %d (term %d)", self._node_id, snapshot.last_index,
                 snapshot.last_term)

    async def _snapshot(self) -> None:
        index = self._applied_index
        term = self._core.term_at(index)
        invariant(term is not None, f"applied index {index} has no term in the log")
        try:
            data = self._state_machine.snapshot()
        except Exception as exc:
            self._fail(exc)
            raise FailStop from exc
        self._counters.snapshots += 1
        await self._step(CompactLog(Snapshot(index, term, data)))
        log.debug("raft voter %d snapshotted at %d (%d bytes)", self._node_id, index, len(data))

    def _publish_state(self) -> None:
        core = self._core
        state = ((core.role, core.term, core.leader_id) if self._state == RUNNING and core is not None
                 else (Role.FOLLOWER, self._reported[1], NO_NODE))
        if state == self._reported:
            return
        self._reported = state
        if self._lease is not None:
            if state[0] == Role.LEADER:
                self._lease.became_leader(state[1], now_ms())
            else:
                self._lease.stepped_down()
        log.info("raft voter %d: %s in term %d, leader %d", self._node_id, state[0].name, state[1], state[2])
        self._callback(self._on_role_change, *state)
        self._notify()

    def _callback(self, fn: Callable | None, *args: Any) -> None:
        if fn is None:
            return
        try:
            fn(*args)
        except Exception:
            log.exception("raft voter %d: callback %r failed", self._node_id, fn)

    def fail_pending(self, error: Exception) -> None:
        """Fail every proposal waiting for its entry to apply."""
        pending, self._pending = self._pending, {}
        for _, future in pending.values():
            resolve(future, error=error)

    def _fail(self, exc: BaseException) -> None:
        """Fail-stop: record, log, stop ticking; the driver exits and the node must restart the voter."""
        if self._failure is None:
            self._failure = exc
            log.critical("raft voter %d fails and stops (fail-stop): %s", self._node_id, exc, exc_info=exc)
        self._state = FAILED
        if self._timer is not None:
            self._timer.cancel()
        self.fail_pending(QuorumUnavailableError(f"raft voter {self._node_id} failed: {exc}"))
        self._publish_state()
        self._notify()


def now_ms() -> float:
    return time.monotonic() * 1000


def resolve(future: asyncio.Future, *, result: Any = None, error: BaseException | None = None) -> None:
    if future.done():
        return  # the proposer gave up (timeout, cancel)
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
