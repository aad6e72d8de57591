"""The driver of a controller voter (`QuorumHost`, cluster/quorum.py): one asyncio task steps the core.

`QuorumDriver` is the half of `QuorumHost` that owns the stepping: the timer task, the driver task
that takes events from the bounded inbox, steps `RaftCore` and carries out its effects, and the
fail-stop. `QuorumHost` (cluster/quorum.py) is the other half: lifecycle, the ways in (`propose`,
`receive`), waiting and the observers' reads. The sends go through `PeerSender`
(cluster/quorum_sender.py).

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
#: The host's lifecycle (`_state`): NEW -> RUNNING [-> FAILED, at a fail-stop] -> STOPPING -> STOPPED.
RUNNING, NEW, STOPPING, STOPPED, FAILED = "running", "new", "stopping", "stopped", "failed"


class FailStop(Exception):
    """Internal to the host: the driver stops after a failed persist / apply (already logged and recorded)."""


class QuorumDriver:
    """The stepping half of `QuorumHost`: the timer, the driver task, effects and fail-stop (module doc).

    The attributes below are made by `QuorumHost.__init__` / `start`; `node_id` and `term` are its
    read-only views.
    """

    config: QuorumConfig
    state_machine: StateMachine
    on_role_change: Callable[[Role, int, int], None] | None
    on_applied: Callable[[int], None] | None
    counters: QuorumCounters
    failure: BaseException | None
    lease: LeaderLease | None
    _state: str
    _core: RaftCore | None
    _storage: RaftStorage | None
    _io: ThreadPoolExecutor | None
    _sender: PeerSender | None
    _inbox: asyncio.Queue | None
    _timer: asyncio.Task | None
    _pending: dict[int, tuple[int, asyncio.Future]]
    _reported: tuple[Role, int, int]
    _applied_index: int
    _snapshot_index: int
    _changed: asyncio.Event | None

    def _step_down_if_paused(self) -> None:
        if self.lease is not None and self.lease.take_step_down():
            log.warning("raft voter %d: its clock jumped (a pause); giving up the leadership of term %d",
                        self.node_id, self.term)
            try:
                self._inbox.put_nowait(StepDown())
            except asyncio.QueueFull:
                self.counters.inbox_full += 1  # check quorum steps it down an election timeout later

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = asyncio.Event()

    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        period = self.config.tick_ms / 1000
        next_at = loop.time() + period
        tick = Tick()
        while self._state == RUNNING:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if self.lease is not None:
                self.lease.observe(now_ms())
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
            gone = QuorumUnavailableError(f"raft voter {self.node_id} stopped"
                                          + (f" after a failure: {self.failure}" if self.failure else ""))
            for item in group:
                if isinstance(item, Proposal):
                    resolve(item.future, error=gone)
            while self._inbox is not None and not self._inbox.empty():
                queued = self._inbox.get_nowait()
                if isinstance(queued, Proposal):
                    resolve(queued.future, error=gone)

    def _fill_group(self, group: list[object]) -> bool:
        """Group commit: add what is already queued, up to `append_max_entries` events; True at a stop."""
        while len(group) < self.config.append_max_entries and not self._inbox.empty():
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
            self.counters.steps += 1
        persists = [e for e in effects if isinstance(e, PERSIST_EFFECTS)]
        if persists:
            try:
                await asyncio.get_running_loop().run_in_executor(self._io, self._persist, persists)
            except Exception as exc:
                self._fail(exc)
                raise FailStop from exc
            self.counters.persist_groups += 1
            for e in persists:
                if isinstance(e, PersistSnapshot):
                    self._snapshot_index = max(self._snapshot_index, e.snapshot.last_index)
                elif isinstance(e, PersistEntries):
                    self.counters.entries_persisted += len(e.entries)
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
            self.state_machine.restore(snapshot.data)
        except Exception as exc:
            self._fail(exc)
            raise FailStop from exc
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
            raise FailStop from exc
        self.counters.snapshots += 1
        await self._step(CompactLog(Snapshot(index, term, data)))
        log.debug("raft voter %d snapshotted at %d (%d bytes)", self.node_id, index, len(data))

    def _publish_state(self) -> None:
        core = self._core
        state = ((core.role, core.term, core.leader_id) if self._state == RUNNING and core is not None
                 else (Role.FOLLOWER, self._reported[1], NO_NODE))
        if state == self._reported:
            return
        self._reported = state
        if self.lease is not None:
            if state[0] == Role.LEADER:
                self.lease.became_leader(state[1], now_ms())
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
            resolve(future, error=error)

    def _fail(self, exc: BaseException) -> None:
        """Fail-stop: record, log, stop ticking; the driver exits and the node must restart the voter."""
        if self.failure is None:
            self.failure = exc
            log.critical("raft voter %d fails and stops (fail-stop): %s", self.node_id, exc, exc_info=exc)
        self._state = FAILED
        if self._timer is not None:
            self._timer.cancel()
        self._fail_pending(QuorumUnavailableError(f"raft voter {self.node_id} failed: {exc}"))
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
