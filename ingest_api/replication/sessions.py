"""Fetch sessions on the leader: one per follower node, so an idle partition costs nothing per round.

A follower's fetcher (`fetcher.py`) opens a session with a full request: `session_epoch` 0, a
`session_id` it picked at random, and every partition it follows from this leader. After that it
sends incremental requests — the same id, the epoch one higher each time — naming only the
partitions whose fetch state changed (fetch offset, leader epoch, log start, byte limit), and in
`forgotten` those it stopped fetching (KIP-227's incremental fetch sessions). The leader keeps
each partition's last fetch state in the session and answers, besides the partitions a request
names, only the ones with something to say: new records, an error, or a high watermark, log start
or log end other than it last sent in this session.

What the leader looks at in one round is `FetchSession.candidates()`: the partitions the request
named, those changed on this node since the last answer (`dirty`: appended to, role changed;
`lazy`: only the HW or log start moved — `FetchSessions.changed`, called by the partition), and
those whose follower is still behind. An idle, caught-up partition is none of these. A round with
nothing to answer waits on ONE future per session, woken by `changed` for any of its partitions,
up to the request's `max_wait_ms`.

A moved HW or log start alone is news that can wait (`lazy`): it neither wakes a waiting round nor
answers a request at once; it rides along with the next answer that carries records or an error,
or the answer at the end of the long-poll. Otherwise every acks=all produce would cost each
follower a second round trip: the follower's fetch that moves the HW would be answered at once
with that HW, and the follower would fetch again only to wait (two fetches per produce per
follower instead of one, on the same event loop that answers the producer).

Refusals (the follower starts a new session with a full request): an incremental request for a
session this node does not hold (it restarted, or another full request replaced it) or with an
epoch other than the next one (a lost response: the follower cannot know what the leader saw).

Being caught up (replica.lag.time.max.ms): a partition omitted from a request has the fetch offset
of the session's last word on it. Where that offset is still the leader's LEO, the follower was
caught up at the session's last request (`caught_up`), which the ISR check reads on each tick.

Concurrency: sessions are opened and answered on the node's event loop; `changed` may be called
from any thread (a log append listener) and only marks and wakes under `_lock`.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, Iterator

from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.replication.partition import PartitionKey, monotonic_ms

#: Most partitions one fetch session holds.
MAX_SESSION_PARTITIONS = 100_000


@dataclass
class SessionPartition:
    """A partition's fetch state as the follower last sent it, and what the leader last answered."""

    fetch_offset: int
    current_leader_epoch: int
    log_start_offset: int
    max_bytes: int
    #: (HW, log start, LEO) in the last answer of this session (None: never answered).
    sent: tuple[int, int, int] | None = None


class FetchSession:
    def __init__(self, replica_id: int, session_id: int) -> None:
        self.replica_id = replica_id
        self.session_id = session_id
        self.epoch = 0
        self.partitions: dict[PartitionKey, SessionPartition] = {}
        #: Changed on this node since their last answer (guarded by the owner's lock): appended to,
        #: role changed (wakes the waiting round) ...
        self.dirty: set[PartitionKey] = set()
        #: ... or only the HW / log start moved (answered with the next answer, wakes nothing).
        self.lazy: set[PartitionKey] = set()
        #: Followers still behind the LEO at their last answer: looked at each round.
        self.behind: set[PartitionKey] = set()
        #: Monotonic ms of the session's last request (answered or not): its follower's liveness, on
        #: the clock the ISR check compares it with (`Partition.tick`).
        self.last_fetch_ms = 0
        self.waiter: asyncio.Future | None = None
        #: Partitions looked at in rounds of this session (an operation count: tests, metrics).
        self.partitions_examined = 0
        self.rounds = 0

    def apply(self, entries: list[dict[str, Any]], forgotten: list[dict[str, Any]]) -> list[PartitionKey]:
        """The request's partitions into the session; returns the keys it named."""
        named = []
        for e in forgotten:
            key = PartitionKey(str(e["topic"]), int(e["partition"]))
            self.partitions.pop(key, None)
            self.behind.discard(key)
        for e in entries:
            key = PartitionKey(str(e["topic"]), int(e["partition"]))
            sp = self.partitions.get(key)
            state = (int(e["fetch_offset"]), int(e["current_leader_epoch"]), int(e.get("log_start_offset", -1)),
                     int(e.get("max_bytes", 1 << 20)))
            if sp is None:
                if len(self.partitions) >= MAX_SESSION_PARTITIONS:
                    raise InvalidRequestError(f"a fetch session holds at most {MAX_SESSION_PARTITIONS} partitions")
                self.partitions[key] = SessionPartition(*state)
            else:
                sp.fetch_offset, sp.current_leader_epoch, sp.log_start_offset, sp.max_bytes = state
            named.append(key)
        return named

    def candidates(self, named: list[PartitionKey], dirty: set[PartitionKey]) -> Iterator[PartitionKey]:
        """The partitions one round looks at: named, changed here, or still behind (each once)."""
        seen: set[PartitionKey] = set()
        for group in (named, dirty, list(self.behind)):
            for key in group:
                if key not in seen and key in self.partitions:
                    seen.add(key)
                    self.partitions_examined += 1
                    yield key


class FetchSessions:
    """Every follower's fetch session on this leader (one per follower node)."""

    def __init__(self) -> None:
        self._by_replica: dict[int, FetchSession] = {}
        self._lock = threading.Lock()

    def sessions(self) -> list[FetchSession]:
        return list(self._by_replica.values())

    def begin(self, replica_id: int, request: dict[str, Any]) -> tuple[FetchSession, bool, list[PartitionKey]]:
        """Open (epoch 0) or continue a session with a request; (session, full, named keys).

        Event loop only. Raises InvalidRequestError for an unknown session or an epoch out of turn.
        """
        session_id = int(request.get("session_id", 0))
        epoch = int(request.get("session_epoch", 0))
        entries = request.get("partitions", [])
        forgotten = request.get("forgotten", [])
        if epoch == 0:
            session = FetchSession(replica_id, session_id)
            with self._lock:
                old = self._by_replica.get(replica_id)
                self._by_replica[replica_id] = session
            if old is not None:
                _wake(old)
        else:
            session = self._by_replica.get(replica_id)
            if session is None or session.session_id != session_id:
                raise InvalidRequestError(f"fetch session {session_id} of node {replica_id} is not known here")
            if epoch != session.epoch + 1:
                raise InvalidRequestError(f"fetch session {session_id} of node {replica_id} expects epoch "
                                          f"{session.epoch + 1}, not {epoch}")
        session.epoch = epoch
        session.last_fetch_ms = monotonic_ms()
        session.rounds += 1
        named = session.apply(entries, forgotten)
        if epoch == 0:
            named = list(session.partitions)
        return session, epoch == 0, named

    def take_dirty(self, session: FetchSession) -> set[PartitionKey]:
        """The session's changed partitions, urgent and lazy, cleared. Any thread."""
        with self._lock:
            dirty, session.dirty = session.dirty, set()
            lazy, session.lazy = session.lazy, set()
        return dirty | lazy if lazy else dirty

    def defer(self, session: FetchSession, keys: list[PartitionKey]) -> None:
        """Lazy news a round did not answer: looked at again by the session's next round. Any thread."""
        with self._lock:
            session.lazy.update(keys)

    async def wait(self, session: FetchSession, timeout_s: float) -> None:
        """Wait until a partition of the session changes, the session is replaced, or `timeout_s`."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if session.dirty or self._by_replica.get(session.replica_id) is not session:
                return
            fut = session.waiter = loop.create_future()
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            pass
        finally:
            with self._lock:
                if session.waiter is fut:
                    session.waiter = None

    def changed(self, key: PartitionKey, urgent: bool = True) -> None:
        """A partition changed on this node: mark it in the sessions holding it, and wake their waiting
        rounds when `urgent` (an append, a role change) rather than only its HW or log start. Any thread."""
        with self._lock:
            hit = []
            for s in self._by_replica.values():
                if key in s.partitions:
                    if urgent:
                        s.dirty.add(key)
                        hit.append(s)
                    else:
                        s.lazy.add(key)
        for s in hit:
            _wake(s)

    def caught_up(self, key: PartitionKey, leader_epoch: int, leo: int, since_ms: int) -> Iterator[tuple[int, int, int]]:
        """(follower id, fetch offset, ms) of each session whose follower holds `key` up to `leo` in
        `leader_epoch` as of its last request, made at or after `since_ms` (monotonic): a session gone
        silent longer than that (its follower died or is cut off) proves nothing about now."""
        for s in self.sessions():
            sp = s.partitions.get(key)
            if (sp is not None and s.last_fetch_ms >= since_ms and sp.current_leader_epoch == leader_epoch
                    and sp.fetch_offset >= leo):
                yield s.replica_id, sp.fetch_offset, s.last_fetch_ms

    def drop(self, replica_id: int) -> None:
        with self._lock:
            s = self._by_replica.pop(replica_id, None)
        if s is not None:
            _wake(s)


def _wake(session: FetchSession) -> None:
    fut = session.waiter
    if fut is None:
        return
    loop = fut.get_loop()
    if loop.is_closed():
        return

    def _set() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.call_soon_threadsafe(_set)
