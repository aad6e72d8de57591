"""The producer's records in waiting: a partition's batch as columns, and the futures of its records.

`ProducerBatch` is one partition's batch while the `Producer` (client/producer.py) fills it and while
the sender (client/producer_sender.py) ships it: the records as columns (timestamps, keys, values,
headers: a record is three list appends, not an object), its size, its producer id and sequence
once dispatched, its payload once built (a retry resends the same bytes), its predecessor in
flight and the event set once its request was written whole. Every record of a batch waits on one
`_BatchOutcome`; `RecordFuture` is one record's view of it (`result`, `exception`, `done`,
`add_done_callback`), resolved to a `RecordMetadata` or a `ProduceError`.

Concurrency: a batch is filled under the producer's lock and shipped by one worker thread at a
time; an outcome is set once, its callbacks registered and taken under `CALLBACK_LOCK`.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, NamedTuple

from lakelog.infra.errors import ErrorKind, LakelogError


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int  # -1 with acks=0
    timestamp: int


class ProduceError(LakelogError):
    """A produce failed: the node's status, Confluent error code and message (or a transport error)."""

    kind = ErrorKind.TRANSIENT

    def __init__(self, message: str, status: int = 0, error_code: int = 0, retriable: bool = False) -> None:
        super().__init__(message)
        self.status, self.error_code, self.retriable = status, error_code, retriable



class _BatchOutcome:
    """What every record of one batch waits for: one event, the base offset or the error."""

    __slots__ = ("event", "base", "error", "waiters", "topic", "partition")

    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self.event = threading.Event()
        self.base = -1
        self.error: Exception | None = None
        self.waiters: list[tuple["RecordFuture", Callable]] | None = None


class RecordFuture:
    """The delivery of one record: `result(timeout)` -> RecordMetadata (or raises the error),
    `exception(timeout)`, `done()`, `add_done_callback(fn)` (fn(future), on the sender's thread or
    at once when already done). Lighter than concurrent.futures.Future: the records of a batch
    share one event."""

    __slots__ = ("_outcome", "_index", "_timestamp")

    def __init__(self, outcome: _BatchOutcome, index: int, timestamp: int) -> None:
        self._outcome, self._index, self._timestamp = outcome, index, timestamp

    def done(self) -> bool:
        return self._outcome.event.is_set()

    def exception(self, timeout: float | None = None) -> Exception | None:
        if not self._outcome.event.wait(timeout):
            raise TimeoutError("the record is not delivered yet")
        return self._outcome.error

    def result(self, timeout: float | None = None) -> RecordMetadata:
        error = self.exception(timeout)
        if error is not None:
            raise error
        o = self._outcome
        return RecordMetadata(o.topic, o.partition, o.base + self._index if o.base >= 0 else -1, self._timestamp)

    def add_done_callback(self, fn: Callable[["RecordFuture"], Any]) -> None:
        o = self._outcome
        with CALLBACK_LOCK:
            if not o.event.is_set():
                if o.waiters is None:
                    o.waiters = []
                o.waiters.append((self, fn))
                return
        fn(self)


CALLBACK_LOCK = threading.Lock()


class ProducerBatch:
    """One partition's batch as columns (what `_batchbuild.encode_columns` takes): a record is three
    list appends, not an object."""

    __slots__ = ("topic", "partition", "created", "timestamps", "keys", "values", "headers", "any_key", "outcome",
                 "callbacks", "size", "attempts", "payload", "producer", "sequence", "pred", "written")

    def __init__(self, topic: str, partition: int, created: float) -> None:
        self.topic, self.partition, self.created = topic, partition, created
        self.timestamps: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[tuple[tuple[str, bytes | None], ...]] | None = None  # None until a record has headers
        self.any_key = False
        self.outcome = _BatchOutcome(topic, partition)
        self.callbacks: list[tuple[int, Callable]] = []
        self.size = 0
        self.attempts = 0
        self.payload: bytes | None = None  # built once: a retry resends the same bytes and sequence
        self.producer: tuple[int, int] | None = None
        self.sequence = -1
        self.pred: "ProducerBatch | None" = None  # the batch of the same partition and producer id sent just before
        # Set once this batch's request was written whole (or will not be): the next batch of the
        # partition starts writing only then, so the node reads them in sequence order.
        self.written = threading.Event()
