"""What a read_committed reader may see of fetched batches (Kafka's READ_COMMITTED isolation).

Two steps, both pure (bytes and aborted-transaction lists in, bytes or batches out):

1. `cut_at_offset`: a read_committed fetch answers only whole batches below the last stable offset
   (LSO). The LSO always lies on a batch boundary (it is a transaction's first offset or the HW),
   so cutting the fetched bytes before the first batch reaching it loses nothing.
2. `committed_batches`: a reader that decodes records itself (the HTTP door, Spark) drops the
   batches of aborted transactions and every control batch, as Kafka's consumer does with the
   fetch's `aborted_transactions` list: walking the batches in offset order, a producer's
   transaction is aborted from its first offset (listed) until its ABORT marker; its
   transactional batches in between are skipped.

A Kafka client gets step 1 only: it receives the aborted list and does step 2 itself. The cleaner
uses the same walk (`AbortedTransactions`) to drop aborted data when it compacts.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

from lakelog.index.transaction_index import AbortedTxn
from lakelog.logstore.control_record import ControlRecordType, batch_marker
from lakelog.logstore.record_batch import RecordBatch, iter_batches

#: The isolation levels, by Kafka's `isolation.level` names (what Spark's `isolation` option takes).
READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
ISOLATION_LEVELS = (READ_COMMITTED, READ_UNCOMMITTED)


def cut_at_offset(records: bytes | memoryview, bound: int) -> bytes | memoryview:
    """The leading whole batches of `records` whose last offset lies below `bound`."""
    end = 0
    for pos, batch in iter_batches(records, max_batch_bytes=None):
        if batch.last_offset >= bound:
            break
        end = pos + batch.size_in_bytes
    return records if end == len(records) else records[:end]


def next_offset_after(records: bytes | memoryview, fetch_offset: int) -> int:
    """The offset after the last batch of `records` (`fetch_offset` when there is none): where
    the reader goes on, even when every batch it got was dropped."""
    nxt = fetch_offset
    for _, batch in iter_batches(records, max_batch_bytes=None):
        nxt = max(nxt, batch.next_offset)
    return nxt


class AbortedTransactions:
    """Which batches belong to aborted transactions, told batch by batch in offset order.

    `aborted` lists the aborted transactions overlapping the batches to come (any order; the walk
    may start inside a transaction). A producer's transaction counts as aborted from its listed
    first offset until its ABORT marker.
    """

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda a: a.first_offset)
        self._next = 0
        self._aborting: set[int] = set()

    def is_aborted(self, batch: RecordBatch) -> bool:
        """Whether `batch` is a data batch of an aborted transaction (a control batch never is;
        an ABORT marker ends its producer's aborted transaction)."""
        while self._next < len(self._pending) and self._pending[self._next].first_offset <= batch.last_offset:
            txn = self._pending[self._next]
            if txn.last_offset >= batch.base_offset:  # else its marker lies behind the walk: over
                self._aborting.add(txn.producer_id)
            self._next += 1
        if batch.is_control:
            if batch.producer_id in self._aborting:  # only then is the marker's type needed
                marker = batch_marker(batch)
                if marker is not None and marker.type is ControlRecordType.ABORT:
                    self._aborting.discard(batch.producer_id)
            return False
        return batch.is_transactional and batch.producer_id in self._aborting


def committed_batches(batches: Iterable[RecordBatch], aborted: Sequence[AbortedTxn], *,
                      keep_control: bool = False) -> Iterator[RecordBatch]:
    """The data batches a read_committed reader keeps: no batch of an aborted transaction, and no
    control batch unless `keep_control` (a reader of raw batches skips them itself).
    `aborted` lists the aborted transactions overlapping the batches (any order)."""
    tracker = AbortedTransactions(aborted)
    for batch in batches:
        if tracker.is_aborted(batch) or (batch.is_control and not keep_control):
            continue
        yield batch


def data_batches(batches: Iterable[RecordBatch]) -> Iterator[RecordBatch]:
    """Every batch but the control batches (read_uncommitted for a reader of records)."""
    return (b for b in batches if not b.is_control)
