"""Lakelog's producer: Kafka's client semantics over the binary path.

    from lakelog.client import Producer
    p = Producer({"bootstrap.servers": "http://127.0.0.1:8082", "linger.ms": 5, "acks": "all"})
    fut = p.produce("clicks", value=b"...", key=b"user-1")      # a RecordFuture
    p.flush(); fut.result()                                      # RecordMetadata(topic, partition, offset, timestamp)

Records are appended to a batch per partition; a batch is sealed when it reaches `batch.size`
bytes or is `linger.ms` old (or on `flush()`), built as one RecordBatch v2 (records encoded natively
by `_batchbuild`, compressed with `compression.type`) and POSTed as
`application/vnd.kafka.recordbatch` to `/topics/{t}/partitions/{p}?acks=` over keep-alive HTTP/1.1
connections. Any node accepts it (it forwards to the partition's leader).

Partitioning as Kafka's default partitioner: an explicit partition; else a key's
`(murmur2(key) & 0x7fffffff) % partitions`; else a sticky partition per topic that changes when its
batch is sealed.

Idempotence (`enable.idempotence`, on by default, as in Kafka 3+): the producer gets a producer id
(`POST /producers`); each partition's batches carry consecutive sequences; a batch that failed with
a retriable error (connection lost, timeout, 503 / 504 / 429) is sent again, to the next node of
`bootstrap.servers`, with the same bytes and sequence, until `delivery.timeout.ms` — the node answers
a duplicate with its original offsets, so a retry never writes twice. After a batch fails for
good, the producer takes a new producer id (sequences restart), as Kafka's producer resets.

Ordering and in-flight requests (Kafka's `max.in.flight.requests.per.connection` with idempotence):
up to `max.in.flight.requests.per.connection` (at most 5, as Kafka requires with idempotence: the
node keeps each producer's last 5 batches for duplicate detection) batches of one partition are in
flight at once, and as many requests in all (the worker pool). HTTP does not order requests across
connections as Kafka's protocol orders them on one, so a later batch may reach the leader first:
the leader refuses it (OUT_OF_ORDER_SEQUENCE_NUMBER, 409 / 40908) and the batch is sent again once
the batch before it (its predecessor, same producer id) is acknowledged — the sequence numbers keep
the order, retries after a node failure included, and the duplicate check keeps them single. A
partition's first batch under a producer id goes alone (the leader accepts any sequence from a
producer it does not know, so nothing may overtake it). A batch whose predecessor failed for good
fails too (its records would land after a hole). Callbacks and futures of one partition complete in
order. Without idempotence a partition has one batch in flight (nothing else would keep the order).

Bounds: `buffer.memory` (produce blocks up to `max.block.ms` when the unsent bytes reach it, then
raises BufferError), `max.request.size` (a bigger record is refused), `batch.size`,
`delivery.timeout.ms`, `request.timeout.ms`, `retry.backoff.ms` / `retry.backoff.max.ms`.

Threads: `produce()` may be called from any thread; one sender thread seals and ships batches on a
small worker pool; futures complete and `on_delivery(err, metadata)` callbacks run on those threads.

Where the code is: this module holds the configuration, the public API and the accumulator (open
batches per partition, sealing, the sticky partition); `ProducerSender` (client/producer_sender.py)
the sender thread, dispatch, shipping and retries; `ProducerBatch`, `RecordFuture`,
`RecordMetadata` and `ProduceError` are in client/producer_batch.py; the transaction
(`transactional.id`: init_transactions, begin_transaction, send_offsets_to_transaction,
commit_transaction, abort_transaction, with Kafka's semantics) in client/producer_transactions.py.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence
from urllib.parse import quote

import httpx

from lakelog.client.batching import CODECS, record_size_estimate
from lakelog.client.http_sender import HttpSender
from lakelog.client.producer_batch import ProduceError, ProducerBatch, RecordFuture, RecordMetadata
from lakelog.client.producer_sender import ProducerSender
from lakelog.client.producer_transactions import TransactionError, TransactionManager, TxnState
from lakelog.infra.error_codes import code
from lakelog.ingest_api.records.partitioner import partition_for_key

_monotonic, _time = time.monotonic, time.time

#: Kafka's producer configs this client takes, with Kafka's defaults.
DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": "http://127.0.0.1:8082",
    "client.id": "",
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 16384,
    "compression.type": "none",
    "enable.idempotence": True,
    "max.in.flight.requests.per.connection": 5,
    "retries": 2**31 - 1,
    "retry.backoff.ms": 100,
    "retry.backoff.max.ms": 1000,
    "delivery.timeout.ms": 120000,
    "request.timeout.ms": 30000,
    "buffer.memory": 32 * 1024 * 1024,
    "max.block.ms": 60000,
    "max.request.size": 1024 * 1024,
    "metadata.max.age.ms": 300000,
    "transactional.id": None,
    "transaction.timeout.ms": 60000,
}
#: Kafka's bound with idempotence: the broker remembers a producer's last 5 batches.
MAX_IN_FLIGHT_IDEMPOTENT = 5
#: A record over max.request.size, a partition the topic does not have: answered as the node would.
_TOO_LARGE = code("RequestTooLargeError")
_NO_PARTITION = code("PartitionNotFoundError")


def _bool(v: Any) -> bool:
    return v if isinstance(v, bool) else str(v).strip().lower() in ("true", "1", "yes")


class Producer(ProducerSender):
    def __init__(self, config: dict[str, Any] | None = None, *, http_options: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        """`config`: Kafka's producer config names (or keyword arguments with `_` for `.`);
        `http_options`: passed to httpx.Client (auth, verify, headers) for secured clusters."""
        cfg = dict(DEFAULTS)
        given = {**(config or {}), **{k.replace("_", "."): v for k, v in kwargs.items()}}
        for k, v in given.items():
            if k not in DEFAULTS:
                raise ValueError(f"unknown producer config {k!r}")
            cfg[k] = v
        # Idempotence by default, as Kafka: if the cluster's ACLs refuse a producer id to this
        # principal (403 on POST /producers) and the user did not ask for idempotence, go on without.
        self._idempotence_explicit = "enable.idempotence" in given
        self.servers = [s.strip().rstrip("/") for s in str(cfg["bootstrap.servers"]).split(",") if s.strip()]
        if not self.servers:
            raise ValueError("bootstrap.servers is empty")
        self.acks = {"-1": "all", "all": "all", "1": "1", "0": "0"}.get(str(cfg["acks"]).lower())
        if self.acks is None:
            raise ValueError("acks must be all, -1, 1 or 0")
        codec = str(cfg["compression.type"]).lower()
        if codec not in CODECS:
            raise ValueError(f"compression.type must be one of {sorted(CODECS)}")
        self.compression = CODECS[codec]
        self.linger_s = max(0, int(cfg["linger.ms"])) / 1000
        self.batch_size = max(1, int(cfg["batch.size"]))
        self.idempotent = _bool(cfg["enable.idempotence"])
        self.max_in_flight = max(1, int(cfg["max.in.flight.requests.per.connection"]))
        if self.idempotent and self.max_in_flight > MAX_IN_FLIGHT_IDEMPOTENT:
            raise ValueError(f"max.in.flight.requests.per.connection must be at most {MAX_IN_FLIGHT_IDEMPOTENT} "
                             "with enable.idempotence (the node keeps that many batches per producer)")
        self.retries = max(0, int(cfg["retries"]))
        self.backoff_s = int(cfg["retry.backoff.ms"]) / 1000
        self.backoff_max_s = int(cfg["retry.backoff.max.ms"]) / 1000
        self.delivery_timeout_s = int(cfg["delivery.timeout.ms"]) / 1000
        self.request_timeout_s = int(cfg["request.timeout.ms"]) / 1000
        self.buffer_memory = int(cfg["buffer.memory"])
        self.max_block_s = int(cfg["max.block.ms"]) / 1000
        self.max_request_size = int(cfg["max.request.size"])
        self.client_id = str(cfg["client.id"])
        self.metadata_max_age_s = int(cfg["metadata.max.age.ms"]) / 1000
        self._http = httpx.Client(timeout=httpx.Timeout(self.request_timeout_s + 5, connect=5),
                                  limits=httpx.Limits(max_connections=self.max_in_flight + 1,
                                                      max_keepalive_connections=self.max_in_flight + 1),
                                  **(http_options or {}))
        # Produce requests go through a plain-socket sender (client/http_sender.py: a fraction of httpx's
        # CPU per 1 MiB request) unless the options ask for something only httpx does (a transport).
        self._fast: HttpSender | None = None
        if HttpSender.supports(http_options):
            opts = http_options or {}
            self._fast = HttpSender(timeout_s=self.request_timeout_s + 5, connect_timeout_s=5,
                                    max_connections=self.max_in_flight + 1, headers=opts.get("headers"),
                                    auth=opts.get("auth"), verify=opts.get("verify", True))
        self.requests = 0  # produce requests sent (retries included)
        self._node = 0  # index into servers: where requests go; moves on a retriable failure
        # produce() takes the lock itself (C), not through the Condition (a Python-level __enter__).
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._open: dict[tuple[str, int], ProducerBatch] = {}
        self._queued: dict[tuple[str, int], deque[ProducerBatch]] = {}
        self._in_flight: dict[tuple[str, int], list[ProducerBatch]] = {}  # per partition, in sequence order
        self._in_flight_count = 0
        self._acked_pid: dict[tuple[str, int], tuple[int, int]] = {}  # producer id of the last acknowledged batch
        self.out_of_order_retries = 0  # batches sent again after arriving before their predecessor
        self.in_flight_peak = 0  # most batches of one partition in flight at once so far
        self._buffered = 0
        self._pending = 0  # records not yet completed
        self._partitions: dict[str, int] = {}
        self._partitions_at: dict[str, float] = {}
        self._sticky: dict[str, int] = {}
        self._producer_id: tuple[int, int] | None = None
        self._sequences: dict[tuple[str, int], int] = {}
        self._flushing = 0
        self._closed = False
        # Transactions (client/producer_transactions.py): idempotence is implied, the producer id is the
        # transactional id's, and every batch is a transaction's.
        self._txn: TransactionManager | None = None
        if cfg["transactional.id"] is not None:
            if self._idempotence_explicit and not self.idempotent:
                raise ValueError("transactional.id needs enable.idempotence")
            self.idempotent, self._idempotence_explicit = True, True
            self._txn = TransactionManager(str(cfg["transactional.id"]), int(cfg["transaction.timeout.ms"]),
                                           self.servers, self._http, self.max_block_s, self.backoff_s)
        self._pool = ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="lakelog-producer")
        self._sender = threading.Thread(target=self._run, name="lakelog-producer-sender", daemon=True)
        self._sender.start()

    # ------------------------------------------------------------------ public API

    def partitions_for(self, topic: str) -> int:
        """The topic's partition count (cached; asked of the cluster again after metadata.max.age.ms)."""
        n = self._partitions.get(topic)
        if n is None or time.monotonic() - self._partitions_at.get(topic, 0.0) > self.metadata_max_age_s:
            doc = self._get_json(f"/topics/{quote(topic, safe='')}")
            n = len(doc["partitions"])
            self._partitions[topic] = n
            self._partitions_at[topic] = time.monotonic()
        return n

    # ------------------------------------------------------------------ transactions (Kafka's API)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Take the transactional id: its producer id and a new epoch (older holders are fenced and
        their open transaction aborted). `timeout`: accepted for Kafka's signature; max.block.ms bounds it."""
        pid = self._transactions().init()
        with self._cond:
            self._producer_id = pid
            self._sequences.clear()
            self._acked_pid.clear()

    def begin_transaction(self) -> None:
        self._transactions().begin()

    def send_offsets_to_transaction(self, offsets: Sequence[tuple[str, int, int]], group_id: str,
                                    timeout: float | None = None) -> None:
        """Commit `group_id`'s offsets ((topic, partition, next offset to read) each) with the transaction."""
        self._transactions().send_offsets(offsets, group_id)

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Flush, then commit; raises TransactionError when a batch failed (abort then)."""
        self._transactions().end(True, lambda: self.flush(timeout))

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._transactions().end(False, lambda: self.flush(timeout))

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise TransactionError("the producer has no transactional.id")
        return self._txn

    # ------------------------------------------------------------------ producing

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None, *,
                partition: int | None = None, headers: Sequence[tuple[str, bytes | None]] | None = None,
                timestamp: int | None = None, on_delivery: Callable[[Exception | None, RecordMetadata | None], Any]
                | None = None) -> RecordFuture:
        """Queue one record; returns a RecordFuture of its RecordMetadata. Raises ProduceError at once for an
        unknown topic or partition or a record over max.request.size, BufferError when the buffer
        stays full for max.block.ms."""
        if self._closed:
            raise RuntimeError("the producer is closed")
        if self._txn is not None and self._txn.state != TxnState.IN_TRANSACTION:
            raise TransactionError(f"produce needs a transaction (begin_transaction); it is {self._txn.state.value}")
        # The per-record path: every call here is paid once per record, so checks are inline.
        if key is not None and key.__class__ is not bytes:
            key = _as_bytes(key, "key")
        if value is not None and value.__class__ is not bytes:
            value = _as_bytes(value, "value")
        size = 21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
        hdrs = None
        if headers:
            hdrs = tuple((str(n), _as_bytes(v, "header value")) for n, v in headers)
            size = record_size_estimate(key, value, hdrs)
        if size + 61 > self.max_request_size:
            raise ProduceError(f"the record is {size} bytes, over max.request.size={self.max_request_size}",
                               _TOO_LARGE.status, _TOO_LARGE.error_code)
        now = _monotonic()
        n = self._partitions.get(topic)
        if n is None or now - self._partitions_at[topic] > self.metadata_max_age_s:
            n = self.partitions_for(topic)
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, n)
            else:
                partition = self._sticky.get(topic)
                if partition is None or partition >= n:
                    partition = self._sticky_partition(topic, n)
        elif not 0 <= partition < n:
            raise ProduceError(f"Partition {partition} of topic {topic} not found.", _NO_PARTITION.status,
                               _NO_PARTITION.error_code)
        ts = int(_time() * 1000) if timestamp is None else int(timestamp)
        with self._lock:
            if self._buffered + size > self.buffer_memory and self._buffered > 0:
                self._wait_for_buffer(size, now + self.max_block_s)
            tp = (topic, partition)
            b = self._open.get(tp)
            wake = False  # the sender sleeps until linger.ms of the oldest batch: wake it only when needed
            if b is not None and b.size + size > self.batch_size and b.values:
                self._seal(tp)
                b, wake = None, True
            if b is None:
                b = self._open[tp] = ProducerBatch(topic, partition, now)
                wake = True
            i = len(b.values)
            fut = RecordFuture(b.outcome, i, ts)
            if on_delivery is not None:
                b.callbacks.append((i, on_delivery))
            b.timestamps.append(ts)
            b.keys.append(key)
            b.values.append(value)
            if key is not None:
                b.any_key = True
            if hdrs:
                if b.headers is None:
                    b.headers = [()] * i
                b.headers.append(hdrs)
            elif b.headers is not None:
                b.headers.append(())
            b.size += size
            self._buffered += size
            self._pending += 1
            if b.size >= self.batch_size:
                self._seal(tp)
                wake = True
            if wake:
                self._cond.notify_all()
        return fut

    def _wait_for_buffer(self, size: int, deadline: float) -> None:
        """Block until `size` more bytes fit in buffer.memory (caller holds the lock)."""
        while self._buffered + size > self.buffer_memory and self._buffered > 0:
            left = deadline - _monotonic()
            if left <= 0:
                raise BufferError(f"buffer.memory={self.buffer_memory} is full after max.block.ms")
            self._cond.wait(left)

    send = produce

    def flush(self, timeout: float | None = None) -> int:
        """Send everything queued and wait for it; returns how many records are still pending."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._flushing += 1
            try:
                for tp in list(self._open):
                    self._seal(tp)
                self._cond.notify_all()
                while self._pending:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    self._cond.wait(left if left is not None else 0.5)
                return self._pending
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        if self._closed:
            return
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._sender.join(5)
        self._pool.shutdown(wait=True)
        self._http.close()
        if self._fast is not None:
            self._fast.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ batching

    def _sticky_partition(self, topic: str, n: int) -> int:
        p = self._sticky.get(topic)
        if p is None or p >= n:
            p = self._sticky[topic] = random.randrange(n)
        return p

    def _seal(self, tp: tuple[str, int]) -> None:
        """Move the open batch of `tp` to its queue (caller holds the lock)."""
        b = self._open.pop(tp, None)
        if b is None or not b.values:
            return
        self._queued.setdefault(tp, deque()).append(b)
        topic = tp[0]
        n = self._partitions.get(topic, 1)
        if self._sticky.get(topic) == tp[1] and n > 1:  # Kafka's sticky partitioner: a new one per batch
            self._sticky[topic] = random.choice([p for p in range(n) if p != tp[1]])


def _as_bytes(v: Any, what: str) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        return v.encode("utf-8")
    raise TypeError(f"{what} must be bytes, str or None")
