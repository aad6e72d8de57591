"""Kafka's cleaner rules for transactional data over one compaction round (its
`CleanedTransactionMetadata`): which batches of aborted transactions go, and when a COMMIT / ABORT
marker may go. Pure: batches in offset order in, decisions out; no files, no clock (the round's
`now_ms` is passed in).

A round walks every batch from the log start to the map end in offset order, across all of its
segment groups, with one `TransactionCleaning`. Rules, for batches below the map end:

  1. A data batch of an aborted transaction (listed by the `.txnindex` files) is dropped whole and
     never mapped, so an aborted record cannot supersede a committed one.
  2. A marker whose transaction still had a data batch in this round (kept or dropped by it) is
     kept as it is: a reader that meets that data needs the marker to decide it. An ABORT
     marker kept so keeps its `.txnindex` entry.
  3. A marker whose transaction has no data left below it is empty. The first round that finds it
     so stamps its delete horizon (now + `delete.retention.ms`, KIP-534's attribute bit 6, as for
     a tombstone) and keeps it; the first round at or after the horizon drops it. A consumer that
     read the transaction's data before it was cleaned away thus has `delete.retention.ms` to
     read the marker too. An empty ABORT marker's `.txnindex` entry is dropped at once: no data
     of it is left to hide.
  4. Markers at or above the map end are copied as they are and keep their entries. Below it
     every transaction is decided: the map end lies at or below the first unstable offset.

Rule 2 counts data seen in this round only: a transaction whose data was all dropped by an
earlier round (aborted, or every record superseded) has an empty marker now. The walk must
start at the log start, or data below the walk would be missed and its marker dropped too early
(both cleaners clean from the log start).
"""

from __future__ import annotations

import enum
from typing import Sequence

from lakelog.index.transaction_index import AbortedTxn
from lakelog.logstore.read_committed import AbortedTransactions
from lakelog.logstore.record_batch import RecordBatch


class MarkerVerdict(enum.Enum):
    """What happens to one COMMIT / ABORT marker below the map end."""

    KEEP = "keep: data of its transaction remains below it"
    KEEP_UNTIL_HORIZON = "keep: empty, until its delete horizon"
    DROP = "drop: empty and past its delete horizon"


def decide_marker(*, data_below: bool, delete_horizon_ms: int | None, now_ms: int) -> MarkerVerdict:
    """Rules 2 and 3 for one marker: `data_below`, this round saw a data batch of its transaction;
    `delete_horizon_ms`, the horizon an earlier round stamped on it (None: none yet)."""
    if data_below:
        return MarkerVerdict.KEEP
    if delete_horizon_ms is not None and now_ms >= delete_horizon_ms:
        return MarkerVerdict.DROP
    return MarkerVerdict.KEEP_UNTIL_HORIZON


class TransactionCleaning:
    """The transactional bookkeeping of one round: told every batch in offset order
    (`is_aborted`), and every marker once more (`on_marker`). Not thread-safe: one round owns it.

    `aborted` lists the aborted transactions overlapping the round (any order). `kept_entries`
    collects, in marker order, the `.txnindex` entries whose ABORT marker stays (rules 2 and 4).
    """

    def __init__(self, aborted: Sequence[AbortedTxn]) -> None:
        self._aborted = AbortedTransactions(aborted)
        self._entries = {(a.producer_id, a.last_offset): a for a in aborted}
        self._data_seen: set[int] = set()  # producers whose current transaction had data this round
        self.kept_entries: list[AbortedTxn] = []

    def is_aborted(self, batch: RecordBatch) -> bool:
        """Whether `batch` is a data batch of an aborted transaction (rule 1); records the data
        batches of every transaction for its marker."""
        aborted = self._aborted.is_aborted(batch)
        if batch.is_transactional and not batch.is_control:
            self._data_seen.add(batch.producer_id)
        return aborted

    def on_marker(self, batch: RecordBatch, *, below_map_end: bool) -> bool:
        """For a control batch already passed to `is_aborted`: whether this round saw data of the
        transaction it ends. Keeps its `.txnindex` entry (if any) when it saw data or when the
        marker lies at or above the map end (copied as it is)."""
        seen = batch.producer_id in self._data_seen
        self._data_seen.discard(batch.producer_id)
        entry = self._entries.get((batch.producer_id, batch.base_offset))
        if entry is not None and (seen or not below_map_end):
            self.kept_entries.append(entry)
        return seen

    def entries_between(self, first_offset: int, next_offset: int) -> list[AbortedTxn]:
        """The kept entries whose marker lies in [first_offset, next_offset) (a replacement's)."""
        return [e for e in self.kept_entries if first_offset <= e.last_offset < next_offset]
