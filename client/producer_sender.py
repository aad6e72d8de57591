"""The producer's sender: the thread that seals lingering batches, dispatches and ships them.

`ProducerSender` is the half of `Producer` (client/producer.py) that talks to the nodes. Its thread
(`_run`) seals batches older than `linger.ms`, gets a producer id when idempotence needs one
(`POST /producers`), and dispatches queued batches within the in-flight limits, giving each
partition's batches their sequences in queue order (`_dispatch`). A worker of the pool ships a
batch (`_ship`): builds its RecordBatch once, waits until its predecessor's request was written,
POSTs it on the binary path (`_send`), retries a retriable failure through the next node with
backoff until `delivery.timeout.ms`, and sends a batch that overtook its predecessor again once that
one settled. `_complete` resolves the futures and callbacks, releases the buffer and takes a new
producer id after a batch of the current one failed for good. `_request` is the metadata requests
(partition count, producer id), to every node in turn up to `max.block.ms`. The module doc of
client/producer.py states the ordering and idempotence rules this implements.

Concurrency: `_run` is the one sender thread; `_ship` runs on the worker pool; state shared with
`produce()` is read and changed under the producer's lock (`_cond`); no lock is held over a request.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable
from urllib.parse import quote

import httpx

from lakelog.client.http_sender import HttpSender, TransportError
from lakelog.client.producer_batch import CALLBACK_LOCK, ProduceError, ProducerBatch, RecordMetadata
from lakelog.client.producer_transactions import TransactionManager
from lakelog.ingest_api.records.formats import TRANSACTIONAL_ID_HEADER
from lakelog.infra.error_codes import code
from lakelog.logstore.batch_columns import build_batch_columns
from lakelog.logstore.compression import Compression

RECORDBATCH = "application/vnd.kafka.recordbatch"
_SEQUENCE_MOD = 2**31
_RETRIABLE_STATUS = (408, 429, 500, 502, 503, 504)
#: OUT_OF_ORDER_SEQUENCE_NUMBER: a batch reached the leader before its predecessor.
_OUT_OF_ORDER = code("OutOfOrderSequenceError").error_code


class ProducerSender:
    """The sending half of `Producer` (module doc); its state is made by `Producer.__init__`."""

    servers: list[str]
    acks: str
    compression: Compression
    idempotent: bool
    max_in_flight: int
    retries: int
    backoff_s: float
    backoff_max_s: float
    delivery_timeout_s: float
    request_timeout_s: float
    max_block_s: float
    linger_s: float
    requests: int
    out_of_order_retries: int
    in_flight_peak: int
    _idempotence_explicit: bool
    _http: httpx.Client
    _fast: HttpSender | None
    _node: int
    _cond: threading.Condition
    _open: dict[tuple[str, int], ProducerBatch]
    _queued: dict[tuple[str, int], deque[ProducerBatch]]
    _in_flight: dict[tuple[str, int], list[ProducerBatch]]
    _in_flight_count: int
    _acked_pid: dict[tuple[str, int], tuple[int, int]]
    _buffered: int
    _pending: int
    _producer_id: tuple[int, int] | None
    _sequences: dict[tuple[str, int], int]
    _closed: bool
    _txn: TransactionManager | None
    _pool: ThreadPoolExecutor
    # Producer's own (client/producer.py): _seal.

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed and not self._pending:
                    return
                now = time.monotonic()
                next_wake = 0.05
                for tp, b in list(self._open.items()):
                    age = now - b.created
                    if age >= self.linger_s:
                        self._seal(tp)
                    else:
                        next_wake = min(next_wake, self.linger_s - age)
                need_pid = (self.idempotent and self._producer_id is None and self._txn is None
                            and any(self._queued.values()))
                if not need_pid:
                    self._dispatch()
                    self._cond.wait(next_wake)
                    continue
            error = self._init_producer_id()  # a request: outside the lock
            if error is not None:
                self._fail_queued(error)

    def _dispatch(self) -> None:
        """Send what the in-flight limits allow, each partition's batches in queue order (caller holds
        the lock). Sequences are given here, in that order, so a partition's sequence order is its
        queue order whatever thread sends what."""
        for tp, q in self._queued.items():
            flying = self._in_flight.setdefault(tp, [])
            while q and self._in_flight_count < self.max_in_flight:
                pipelined = self.idempotent and self._producer_id is not None and \
                    self._acked_pid.get(tp) == self._producer_id
                limit = self.max_in_flight if pipelined else 1
                if len(flying) >= limit:
                    break
                b = q.popleft()
                if self.idempotent and self._producer_id is not None:
                    b.producer = self._producer_id
                    b.sequence = self._sequences.get(tp, 0)
                    self._sequences[tp] = (b.sequence + len(b.values)) % _SEQUENCE_MOD
                    b.pred = flying[-1] if flying and flying[-1].producer == b.producer else None
                flying.append(b)
                self.in_flight_peak = max(self.in_flight_peak, len(flying))
                self._in_flight_count += 1
                self._pool.submit(self._ship, b)

    def _init_producer_id(self) -> Exception | None:
        """Ask for a producer id; None when there is one now (or idempotence was given up), else the
        error (after the backoff when it is retriable and the queued batches still have time)."""
        try:
            doc = self._post_json("/producers")
        except ProduceError as e:
            if e.status == 403 and not self._idempotence_explicit:
                with self._cond:
                    self.idempotent = False  # not allowed a producer id: plain batches from now on
                return None
            if e.retriable and not self._queued_expired():
                time.sleep(self.backoff_s)
                return None
            return e
        except Exception as e:  # an answer that is not what InitProducerId answers: fail what waits for it
            return ProduceError(f"cannot get a producer id: {e}")
        with self._cond:
            self._producer_id = (int(doc["producer_id"]), int(doc["producer_epoch"]))
            self._sequences.clear()
        return None

    def _queued_expired(self) -> bool:
        now = time.monotonic()
        with self._cond:
            return any(now - b.created >= self.delivery_timeout_s for q in self._queued.values() for b in q)

    def _fail_queued(self, error: Exception) -> None:
        with self._cond:
            batches = [b for q in self._queued.values() for b in q]
            for q in self._queued.values():
                q.clear()
        for b in batches:
            self._complete(b, -1, error)

    def _payload(self, b: ProducerBatch) -> bytes:
        if b.payload is None:
            pid, epoch = b.producer if b.producer is not None else (-1, -1)
            b.payload = build_batch_columns(b.values, timestamps=b.timestamps, keys=b.keys if b.any_key else None,
                                            headers=b.headers, compression=self.compression, producer_id=pid,
                                            producer_epoch=epoch, base_sequence=b.sequence,
                                            is_transactional=self._txn is not None)
        return b.payload

    def _ship(self, b: ProducerBatch) -> None:
        error: Exception | None = None
        base = -1
        while True:
            try:
                payload = self._payload(b)
                if self._txn is not None:
                    self._txn.ensure_partition(b.topic, b.partition)
                pred = b.pred
                if pred is not None and b.attempts == 0:  # keep the partition's writes in sequence order
                    pred.written.wait(self.request_timeout_s)
                base = self._send(b.topic, b.partition, payload, b.written.set)
                break
            except ProduceError as e:
                error = e
            except (httpx.HTTPError, TransportError) as e:
                error = ProduceError(f"cannot reach {self.servers[self._node]}: {e}", retriable=True)
            except Exception as e:  # building the batch: not retriable
                error = e
            b.attempts += 1
            expired = time.monotonic() - b.created >= self.delivery_timeout_s
            if getattr(error, "error_code", 0) == _OUT_OF_ORDER and b.pred is not None and not expired:
                # It overtook its predecessor: send it again once that one is settled.
                b.pred.outcome.event.wait(max(0.0, self.delivery_timeout_s - (time.monotonic() - b.created)))
                if b.pred.outcome.error is not None:
                    error = ProduceError(f"an earlier batch of {b.topic}-{b.partition} failed: {b.pred.outcome.error}",
                                         getattr(b.pred.outcome.error, "status", 0),
                                         getattr(b.pred.outcome.error, "error_code", 0))
                    break
                b.pred = None  # settled: from now on an out-of-order answer is a real hole
                self.out_of_order_retries += 1
                error = None
                continue
            if not getattr(error, "retriable", False) or b.attempts > self.retries or expired:
                break
            self._node = (self._node + 1) % len(self.servers)  # retry through another node
            time.sleep(min(self.backoff_max_s, self.backoff_s * 2 ** min(b.attempts - 1, 10)))
            error = None
        b.written.set()  # also when it never was: the next batch must not wait for it
        if b.pred is not None:  # a partition's futures and callbacks complete in order
            b.pred.outcome.event.wait(max(0.0, self.delivery_timeout_s - (time.monotonic() - b.created)))
        self._complete(b, base, error)

    def _complete(self, b: ProducerBatch, base: int, error: Exception | None) -> None:
        # Futures and callbacks complete before the records stop counting as pending: when flush()
        # returns, every future is done and every callback has run (as Kafka's flush).
        tp = (b.topic, b.partition)
        o = b.outcome
        o.base, o.error = base, error
        with CALLBACK_LOCK:
            o.event.set()
            waiters, o.waiters = o.waiters or [], None
        b.pred = None  # no chain of finished batches kept alive
        for i, cb in b.callbacks:
            md = None if error is not None else RecordMetadata(b.topic, b.partition, base + i if base >= 0 else -1,
                                                               b.timestamps[i])
            try:
                cb(error, md)
            except Exception:  # a failing callback must not stop the sender
                pass
        for fut, fn in waiters:
            try:
                fn(fut)
            except Exception:
                pass
        with self._cond:
            flying = self._in_flight.get(tp)
            if flying is not None and b in flying:
                flying.remove(b)
                self._in_flight_count -= 1
            self._buffered -= b.size
            self._pending -= len(b.values)
            if error is None and b.producer is not None:
                self._acked_pid[tp] = b.producer
            if error is not None and self._txn is not None:
                self._txn.batch_failed(error)  # the transaction must abort; its producer id stays
            elif error is not None and self.idempotent and b.producer is not None and b.producer == self._producer_id:
                # The sequence of this partition has a hole now: start over with a new producer id
                # (batches not yet sent get it; those in flight keep their bytes for their retries).
                self._producer_id = None
                self._sequences.clear()
                self._acked_pid.clear()
            self._cond.notify_all()

    def _send(self, topic: str, partition: int, payload: bytes, on_written: Callable[[], Any]) -> int:
        url = f"{self.servers[self._node]}/topics/{quote(topic, safe='')}/partitions/{partition}"
        self.requests += 1
        headers = {"Content-Type": RECORDBATCH, "Accept": "application/vnd.kafka.v2+json"}
        if self._txn is not None:
            headers[TRANSACTIONAL_ID_HEADER] = self._txn.transactional_id
        if self._fast is not None:
            r = self._fast.post(f"{url}?acks={self.acks}", payload, headers, on_written)
        else:
            on_written()  # httpx does not say when a body is written: no ordering of the writes
            r = self._http.post(url, params={"acks": self.acks}, content=payload, headers=headers)
        if r.status_code != 200:
            raise _error(r)
        offsets = r.json().get("offsets") or []
        return int(offsets[0]["offset"]) if offsets else -1

    def _get_json(self, path: str) -> dict[str, Any]:
        return self._request("GET", path)

    def _post_json(self, path: str) -> dict[str, Any]:
        return self._request("POST", path)

    def _request(self, method: str, path: str) -> dict[str, Any]:
        """A metadata request (partition count, producer id): every node in turn, passes over them
        with backoff while the answers are retriable (a node starting or catching up answers 503),
        up to max.block.ms — as Kafka's producer waits for metadata."""
        last: Exception | None = None
        deadline = time.monotonic() + self.max_block_s
        attempt = 0
        while True:
            for i in range(len(self.servers)):
                server = self.servers[(self._node + i) % len(self.servers)]
                try:
                    r = self._http.request(method, server + path)
                except httpx.HTTPError as e:
                    last = ProduceError(f"cannot reach {server}: {e}", retriable=True)
                    continue
                if r.status_code == 200:
                    return r.json()
                err = _error(r)
                if not err.retriable:
                    raise err
                last = err
            assert last is not None
            pause = min(self.backoff_max_s, self.backoff_s * 2 ** min(attempt, 10))
            if time.monotonic() + pause >= deadline:
                raise last
            time.sleep(pause)
            attempt += 1


def _error(r: httpx.Response) -> ProduceError:
    try:
        doc = r.json()
        code, message = int(doc.get("error_code", r.status_code)), str(doc.get("message", r.text[:200]))
    except ValueError:
        code, message = r.status_code, r.text[:200]
    return ProduceError(message, r.status_code, code, retriable=r.status_code in _RETRIABLE_STATUS)
