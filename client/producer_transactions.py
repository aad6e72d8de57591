"""The transactional half of the producer (Kafka's TransactionManager), over the node's HTTP
transactions resource (docs/transactions.md):

    p = Producer({"bootstrap.servers": ..., "transactional.id": "orders-etl"})
    p.init_transactions()              # POST /v3/clusters/{c}/transactions: producer id, epoch (fences older holders)
    p.begin_transaction()
    p.produce("out", b"...")           # transactional batches; each new partition added first (.../partitions)
    p.send_offsets_to_transaction([("in", 0, 42)], "group")   # .../offsets
    p.commit_transaction()             # flush, then .../{id}:commit (or abort_transaction: .../{id}:abort)

States: UNINITIALIZED -> READY (init) -> IN_TRANSACTION (begin) -> READY (commit / abort). A batch
that fails for good makes the transaction ABORTABLE: commit raises, abort is the way out. A fenced
producer (PRODUCER_FENCED / INVALID_PRODUCER_EPOCH: another instance took the id) is FATAL: every
call raises; make a new producer.

Concurrency: the producer's threads call `ensure_partition` while the application calls the rest;
one lock serialises the state; no lock is held over a request except `ensure_partition`'s own
(a partition is added once, before its first batch).
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Any, Callable, Sequence
from urllib.parse import quote

import httpx

from lakelog.client.producer_batch import ProduceError
from lakelog.infra.error_codes import code

#: A newer holder of the transactional id exists: this producer may do nothing more.
_FENCED_CODES = frozenset({code("ProducerFencedError").error_code, code("InvalidProducerEpochError").error_code})
_RETRIABLE_STATUS = (408, 429, 500, 502, 503, 504)


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    ABORTABLE = "abortable"
    FATAL = "fatal"


class TransactionError(ProduceError):
    """A transactional call that is not allowed now, or that the node refused."""


class TransactionManager:
    """The producer's transaction: its id, producer id and epoch, state and partitions."""

    def __init__(self, transactional_id: str, timeout_ms: int, servers: list[str], http: httpx.Client,
                 max_block_s: float, backoff_s: float) -> None:
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self._servers, self._http = servers, http
        self._max_block_s, self._backoff_s = max_block_s, backoff_s
        self._lock = threading.Lock()
        self.state = TxnState.UNINITIALIZED
        self.producer: tuple[int, int] | None = None
        self._partitions: set[tuple[str, int]] = set()
        self._error: Exception | None = None
        self._cluster: str | None = None

    # ------------------------------------------------------------------ the application's calls

    def init(self) -> tuple[int, int]:
        self._require(TxnState.UNINITIALIZED, TxnState.READY)
        doc = self._post("", {"transactional_id": self.transactional_id, "transaction_timeout_ms": self.timeout_ms})
        with self._lock:
            self.producer = (int(doc["producer_id"]), int(doc["producer_epoch"]))
            self.state = TxnState.READY
            self._partitions.clear()
        return self.producer

    def begin(self) -> None:
        self._require(TxnState.READY)
        with self._lock:
            self.state = TxnState.IN_TRANSACTION

    def send_offsets(self, offsets: Sequence[tuple[str, int, int]], group_id: str) -> None:
        self._require(TxnState.IN_TRANSACTION)
        self._post(f"/{quote(self.transactional_id, safe='')}/offsets", {
            **self._ids(), "group_id": group_id,
            "offsets": [{"topic": t, "partition": int(p), "offset": int(o)} for t, p, o in offsets]})

    def end(self, commit: bool, flush: Callable[[], int]) -> None:
        """Commit (after every record is acknowledged) or abort the transaction."""
        if commit:
            self._require(TxnState.IN_TRANSACTION)
        else:
            self._require(TxnState.IN_TRANSACTION, TxnState.ABORTABLE)
        left = flush()
        if commit and (left or self._error is not None):
            with self._lock:
                self.state = TxnState.ABORTABLE if self.state != TxnState.FATAL else self.state
            raise TransactionError(f"cannot commit: {left} record(s) unsent, or a batch failed ({self._error}); "
                                   "abort_transaction()")
        action = "commit" if commit else "abort"
        self._post(f"/{quote(self.transactional_id, safe='')}:{action}", self._ids())
        with self._lock:
            self.state, self._error = TxnState.READY, None
            self._partitions.clear()

    # ------------------------------------------------------------------ the producer's threads

    def ensure_partition(self, topic: str, partition: int) -> None:
        """Before a batch goes to (topic, partition): the partition is in the transaction."""
        with self._lock:
            if self.state == TxnState.FATAL:
                raise TransactionError(f"the producer is fenced: {self._error}")
            if (topic, partition) in self._partitions:
                return
            self._post(f"/{quote(self.transactional_id, safe='')}/partitions",
                       {**self._ids(), "partitions": [{"topic": topic, "partition": partition}]}, locked=True)
            self._partitions.add((topic, partition))

    def batch_failed(self, error: Exception) -> None:
        with self._lock:
            if self.state == TxnState.IN_TRANSACTION:
                self.state = TxnState.ABORTABLE
            if self._error is None:
                self._error = error
            if getattr(error, "error_code", 0) in _FENCED_CODES:
                self.state = TxnState.FATAL

    # ------------------------------------------------------------------ helpers

    def _ids(self) -> dict[str, int]:
        assert self.producer is not None
        return {"producer_id": self.producer[0], "producer_epoch": self.producer[1]}

    def _require(self, *states: TxnState) -> None:
        with self._lock:
            if self.state not in states:
                raise TransactionError(f"the transaction is {self.state.value}; this call needs "
                                       f"{' or '.join(s.value for s in states)}")

    def _post(self, suffix: str, doc: dict[str, Any], *, locked: bool = False) -> dict[str, Any]:
        """POST to the transactions resource on any node, retried while retriable, up to max.block.ms."""
        deadline = time.monotonic() + self._max_block_s
        attempt = 0
        last: ProduceError | None = None
        while True:
            for server in self._servers:
                try:
                    if self._cluster is None:
                        r = self._http.get(f"{server}/v3/clusters")
                        if r.status_code == 200:
                            self._cluster = r.json()["data"][0]["cluster_id"]
                        else:
                            raise _error(r)
                    r = self._http.post(f"{server}/v3/clusters/{self._cluster}/transactions{suffix}", json=doc)
                except httpx.HTTPError as e:
                    last = ProduceError(f"cannot reach {server}: {e}", retriable=True)
                    continue
                except ProduceError as e:
                    last = e
                    if not e.retriable:
                        break
                    continue
                if r.status_code == 200:
                    return r.json()
                last = _error(r)
                if not last.retriable:
                    break
            assert last is not None
            if not last.retriable:
                if last.error_code in _FENCED_CODES:
                    if locked:
                        self.state, self._error = TxnState.FATAL, last
                    else:
                        with self._lock:
                            self.state, self._error = TxnState.FATAL, last
                raise TransactionError(str(last), last.status, last.error_code)
            pause = min(1.0, self._backoff_s * 2 ** min(attempt, 10))
            if time.monotonic() + pause >= deadline:
                raise TransactionError(str(last), last.status, last.error_code, retriable=True)
            time.sleep(pause)
            attempt += 1


def _error(r: httpx.Response) -> ProduceError:
    try:
        doc = r.json()
        err, message = int(doc.get("error_code", r.status_code)), str(doc.get("message", r.text[:200]))
    except ValueError:
        err, message = r.status_code, r.text[:200]
    return ProduceError(message, r.status_code, err, retriable=r.status_code in _RETRIABLE_STATUS)
