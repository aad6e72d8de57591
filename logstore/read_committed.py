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

A Kafka client gets step 1 only: it receives the aborted list and does step 2 itself.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

from lakelog.index.transaction_index import AbortedTxn
from lakelog.logstore.control_record import ControlRecordType, batch_marker
from lakelog.logstore.record_batch import RecordBatch, iter_batches


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


def committed_batches(batches: Iterable[RecordBatch], aborted: Sequence[AbortedTxn], *,
                      keep_control: bool = False) -> Iterator[RecordBatch]:
    """The data batches a read_committed reader keeps: no batch of an aborted transaction, and no
    control batch unless `keep_control` (a reader of raw batches skips them itself).
    `aborted` lists the aborted transactions overlapping the batches (any order)."""
    pending = sorted(aborted, key=lambda a: a.first_offset)
    i = 0
    aborting: set[int] = set()
    for batch in batches:
        while i < len(pending) and pending[i].first_offset <= batch.last_offset:
            aborting.add(pending[i].producer_id)
            i += 1
        if batch.is_control:
            marker = batch_marker(batch)
            if marker is not None and marker.type is ControlRecordType.ABORT:
                aborting.discard(batch.producer_id)
            if keep_control:
                yield batch
            continue
        if batch.is_transactional and batch.producer_id in aborting:
            continue
        yield batch


def data_batches(batches: Iterable[RecordBatch]) -> Iterator[RecordBatch]:
    """Every batch but the control batches (read_uncommitted for a reader of records)."""
    return (b for b in batches if not b.is_control)
