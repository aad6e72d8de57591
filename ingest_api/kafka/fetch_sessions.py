"""Fetch sessions of Kafka consumers on the Kafka door (KIP-227): the session cache, and what one
Fetch request means for it.

A client opens a session with a full request (`session_id` 0, `session_epoch` 0) naming every
partition it fetches; the answer carries a new session id. After that it sends incremental
requests — that id, the epoch one higher each time — naming only the partitions whose fetch state
changed (fetch offset, byte limit) and, in `forgotten_topics_data`, those it stopped fetching. The
node keeps each partition's fetch state in the session and answers an incremental request with
only the partitions that have something to say: records, an error, or a high watermark, last
stable offset or log start other than this session last answered.

What a request's (session_id, session_epoch) means:

    session_id  epoch   meaning
    0           -1      sessionless full fetch (answered with session id 0)
    0           0       full fetch opening a new session (id 0 if the cache has no slot for it)
    0           > 0     INVALID_FETCH_SESSION_EPOCH
    id          -1      close session `id`; sessionless full fetch
    id          0       close session `id`; full fetch opening a new session
    id          > 0     incremental fetch in `id`: FETCH_SESSION_ID_NOT_FOUND if the node does not
                        hold it (it restarted, or the session was evicted),
                        INVALID_FETCH_SESSION_EPOCH if the epoch is not the session's next one

The cache holds at most `max.incremental.fetch.session.cache.slots` sessions. When it is full a
new session evicts the least recently used one, provided that one has been idle at least
`min.incremental.fetch.session.eviction.ms`; otherwise the new request is answered sessionless
(session id 0) and the client keeps sending full requests. A session holds at most
MAX_SESSION_PARTITIONS partitions; a larger full request is answered sessionless.

These sessions are the Kafka door's, for consumers; the replicas' own fetch sessions are
`ingest_api/replication/sessions.py`.

Invariants: a cached session's id is never 0; its epoch grows by one per incremental request
(past int32's max it wraps to 1, as 0 and -1 have their own meaning); the cache never holds more
sessions than its slots. `invariant()` checks them after each change.

Concurrency: the cache is used on the node's event loop only (the Kafka door's handlers); the clock
and the id generator are passed in.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from kio.schema.errors import ErrorCode

#: Epochs and ids with a meaning of their own.
FINAL_EPOCH = -1
INITIAL_EPOCH = 0
SESSIONLESS_ID = 0
#: Most partitions one session holds; a larger full request is answered sessionless.
MAX_SESSION_PARTITIONS = 10_000
INT32_MAX = 2**31 - 1

PartitionKey = tuple[str, int]


class FetchSessionInvariantError(AssertionError):
    """A fetch session cache broke one of its invariants (a bug, never a client's fault)."""


def invariant(ok: bool, message: str) -> None:
    if not ok:
        raise FetchSessionInvariantError(message)


@dataclass
class CachedPartition:
    """One partition's fetch state in a session: what the client last sent (named as the request's
    FetchPartition fields, so the Fetch handler reads either) and what the session last answered."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    #: (high watermark, last stable offset, log start) of the session's last answer (None: never).
    sent: tuple[int, int, int] | None = None


@dataclass
class FetchSession:
    session_id: int
    #: The epoch the next incremental request must carry.
    epoch: int
    last_used_ms: int
    partitions: OrderedDict[PartitionKey, CachedPartition] = field(default_factory=OrderedDict)

    def topics(self) -> list[tuple[str, list[CachedPartition]]]:
        """The session's partitions by topic, in the order they were added."""
        out: dict[str, list[CachedPartition]] = {}
        for (topic, _), cp in self.partitions.items():
            out.setdefault(topic, []).append(cp)
        return list(out.items())


@dataclass
class FetchContext:
    """What one Fetch request fetches and how its answer is shaped (`answer`)."""

    #: Nonzero: the request failed as a whole (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH).
    error_code: int
    #: The session id the answer carries (0: sessionless).
    session_id: int
    #: (topic, partitions) to fetch: the request's own (full) or the session's (incremental).
    topics: list[tuple[str, list[Any]]]
    session: FetchSession | None = None
    incremental: bool = False

    def answer(self, responses: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The topic responses to send: every partition for a full fetch, for an incremental one
        only those with something new. Records what the session answered."""
        if self.session is None:
            return responses
        out = []
        for t in responses:
            parts = [p for p in t["partitions"] if self._note(t["topic"], p) or not self.incremental]
            if parts:
                out.append({**t, "partitions": parts})
        return out

    def _note(self, topic: str, doc: dict[str, Any]) -> bool:
        """Remember what this answer says of the partition; whether it says something new."""
        assert self.session is not None
        cp = self.session.partitions.get((topic, int(doc["partition_index"])))
        state = (int(doc["high_watermark"]), int(doc["last_stable_offset"]), int(doc["log_start_offset"]))
        if cp is None:
            return True
        changed = cp.sent != state
        cp.sent = state
        return changed or doc["error_code"] != ErrorCode.none.value or bool(doc.get("records"))


class FetchSessionCache:
    """The node's Kafka fetch sessions, bounded by `max_slots`. Event-loop only."""

    def __init__(self, max_slots: int, eviction_ms: int, clock_ms: Callable[[], int],
                 rng: random.Random | None = None) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._clock_ms = clock_ms
        self._rng = rng or random.Random()
        #: Least recently used first.
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def open(self, session_id: int, epoch: int, requested: list[tuple[str, list[Any]]],
             forgotten: list[PartitionKey]) -> FetchContext:
        """What a request of (session_id, epoch) fetches, with `requested` its (topic, FetchPartition
        list) and `forgotten` its forgotten partitions (see the module's table)."""
        if session_id == SESSIONLESS_ID and epoch > INITIAL_EPOCH:
            return self._refused(ErrorCode.invalid_fetch_session_epoch)
        if epoch <= INITIAL_EPOCH:
            if session_id != SESSIONLESS_ID:
                self._sessions.pop(session_id, None)
            session = self._create(requested) if epoch == INITIAL_EPOCH else None
            self._check()
            return FetchContext(ErrorCode.none.value, session.session_id if session else SESSIONLESS_ID,
                                requested if session is None else session.topics(), session)
        session = self._sessions.get(session_id)
        if session is None:
            return self._refused(ErrorCode.fetch_session_id_not_found)
        if epoch != session.epoch:
            return self._refused(ErrorCode.invalid_fetch_session_epoch)
        for key in forgotten:
            session.partitions.pop(key, None)
        for topic, parts in requested:
            for fp in parts:
                _update(session, topic, fp)
        if len(session.partitions) > MAX_SESSION_PARTITIONS:
            self._sessions.pop(session_id)
            return self._refused(ErrorCode.invalid_fetch_session_epoch)
        session.epoch = _next_epoch(epoch)
        session.last_used_ms = self._clock_ms()
        self._sessions.move_to_end(session_id)
        self._check()
        return FetchContext(ErrorCode.none.value, session_id, session.topics(), session, incremental=True)

    def _refused(self, code: ErrorCode) -> FetchContext:
        return FetchContext(code.value, SESSIONLESS_ID, [])

    def _create(self, requested: list[tuple[str, list[Any]]]) -> FetchSession | None:
        if self.max_slots <= 0 or sum(len(parts) for _, parts in requested) > MAX_SESSION_PARTITIONS:
            return None
        now = self._clock_ms()
        if len(self._sessions) >= self.max_slots:
            oldest_id, oldest = next(iter(self._sessions.items()))
            if now - oldest.last_used_ms < self.eviction_ms:
                return None  # every slot in recent use: this client fetches sessionless
            del self._sessions[oldest_id]
            self.evictions += 1
        session = FetchSession(self._new_id(), _next_epoch(INITIAL_EPOCH), now)
        for topic, parts in requested:
            for fp in parts:
                _update(session, topic, fp)
        self._sessions[session.session_id] = session
        return session

    def _new_id(self) -> int:
        while True:
            sid = self._rng.randint(1, INT32_MAX)
            if sid not in self._sessions:
                return sid

    def _check(self) -> None:
        invariant(len(self._sessions) <= max(0, self.max_slots), "more sessions than cache slots")
        invariant(SESSIONLESS_ID not in self._sessions, "a cached session has id 0")


def _update(session: FetchSession, topic: str, fp: Any) -> None:
    key = (topic, int(fp.partition))
    cp = session.partitions.get(key)
    if cp is None:
        session.partitions[key] = CachedPartition(int(fp.partition), int(fp.fetch_offset), int(fp.partition_max_bytes))
    else:
        cp.fetch_offset, cp.partition_max_bytes = int(fp.fetch_offset), int(fp.partition_max_bytes)


def _next_epoch(epoch: int) -> int:
    """Epochs wrap from int32's max to 1 (0 and -1 have their own meaning)."""
    return 1 if epoch >= INT32_MAX else epoch + 1
