"""The transactions of one partition log: the LSO and the aborted-transaction indexes of its segments.

Transactions are Kafka's (KIP-98): a transactional batch opens its producer's transaction; a COMMIT
or ABORT marker (a control batch, control_record.py, written by `PartitionLog.append_control` on
the leader and replicated like any batch) closes it. The `ProducerStateManager`
(producer_state.py) tracks each open transaction and, once its marker lands, keeps it
"unreplicated" until the high watermark (HW) passes the marker. The last stable offset (LSO) is
the first offset of the earliest transaction not yet decided below the HW, else the HW: a
read_committed reader reads below it. It comes from the producer state alone, never from the
segments.

Each ABORT marker that closes a transaction appends an entry to the active segment's `.txnindex`
(index/transaction_index.py) with the LSO of that moment (`on_completed`); `aborted_transactions`
answers a read_committed fetch from the entries of the segments from the fetch offset's on, and
`segment_aborted_transactions` gives one segment's entries (the remote tier's upload). A
`.txnindex` is truncated and deleted with its segment (segment.py), rebuilt on recovery
(`LogLoader`), rebuilt from the log when a read finds it damaged (never served), and placed
over the replacement segments of a compaction swap (`place_replacement_entries`). Every rebuild
is `log_loader.rebuild_txn_indexes`: a replay of a scratch producer state.

`LogTransactions` holds the log's `ProducerStateManager` and `LogSegments` (both the
`PartitionLog`'s too) and reads neither's fields; the owner passes the HW and the log start
offset where a call needs them, and hands over each transaction a marker closed.

Concurrency: not thread-safe; every call is made under the partition log's lock.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from lakelog.index.errors import CorruptIndexError
from lakelog.index.transaction_index import AbortedTxn
from lakelog.logstore.log_loader import rebuild_txn_indexes
from lakelog.logstore.log_segments import LogSegments
from lakelog.logstore.producer_state import CompletedTxn, ProducerStateManager
from lakelog.logstore.segment import LogSegment

T = TypeVar("T")


class LogTransactions:
    """The LSO and the `.txnindex` files of one partition log (module doc)."""

    def __init__(self, producers: ProducerStateManager, segments: LogSegments) -> None:
        self._producers = producers
        self._segments = segments
        #: Base offsets of segments whose `.txnindex` a read found damaged and rebuilt.
        self.rebuilds_on_read: list[int] = []

    # ------------------------------------------------------------------ the LSO

    def on_high_watermark(self, high_watermark: int) -> None:
        """The HW moved: transactions whose marker lies below it become stable."""
        self._producers.on_high_watermark(high_watermark)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest undecided transaction (open, or its marker not yet
        below the HW); None when there is none."""
        return self._producers.first_unstable_offset()

    def last_stable_offset(self, high_watermark: int, log_start_offset: int) -> int:
        """LSO: min(first unstable offset, HW), never below the log start offset."""
        unstable = self._producers.first_unstable_offset()
        return high_watermark if unstable is None else max(log_start_offset, min(unstable, high_watermark))

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each open transaction."""
        return self._producers.ongoing_transactions()

    # ------------------------------------------------------------------ the .txnindex files

    def on_completed(self, completed: CompletedTxn | None, high_watermark: int) -> None:
        """A marker just appended (in the active segment) closed `completed`: index an abort."""
        if completed is None:
            return
        if completed.last_offset < high_watermark:
            self._producers.on_high_watermark(high_watermark)
        if completed.is_aborted:
            lso = self._producers.last_stable_offset_of(completed)
            self._segments.active.txn_index.append(AbortedTxn(completed.producer_id, completed.first_offset,
                                                              completed.last_offset, lso))

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int,
                             log_start_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), from the
        `.txnindex` of the segment holding `fetch_offset` onward. The walk goes past
        `upper_bound_offset`: a transaction with data below it may have its ABORT marker in any
        later segment; it stops at the first entry whose LSO reaches the bound (Kafka's
        `collectAbortedTransactions`)."""
        found: list[AbortedTxn] = []
        for seg in self._segments.from_offset(fetch_offset):
            search = self._verified(seg, log_start_offset,
                                    lambda s=seg: s.txn_index.collect(fetch_offset, upper_bound_offset))
            found.extend(search.aborted)
            if search.complete:
                break
        return found

    def segment_aborted_transactions(self, base_offset: int, log_start_offset: int) -> list[AbortedTxn]:
        """The entries of the segment starting at `base_offset` ([] when there is none)."""
        seg = self._segments.starting_at(base_offset)
        if seg is None:
            return []
        return self._verified(seg, log_start_offset, seg.txn_index.entries)

    def _verified(self, seg: LogSegment, log_start_offset: int, lookup: Callable[[], T]) -> T:
        """Run `lookup` on the `.txnindex` of `seg` once it passed its checks; a damaged one is
        rebuilt from the log first (recorded in `rebuilds_on_read`)."""
        try:
            if not seg.txn_index.verified:
                seg.txn_index.sanity_check(seg.next_offset)
            return lookup()
        except CorruptIndexError:
            rebuild_txn_indexes(self._producers, self._segments, log_start_offset, [seg])
            self.rebuilds_on_read.append(seg.base_offset)
            return lookup()

    def place_replacement_entries(self, new_segments: list[LogSegment], old_segments: list[LogSegment],
                                  aborted: list[AbortedTxn] | None, log_start_offset: int) -> None:
        """Write the `.txnindex` of compacted segments about to replace `old_segments`: the
        entries `aborted` (a cleaner gives those of the ABORT markers it keeps), each in the
        segment covering its marker's offset; without it, the old segments' entries carry over,
        unless the new segments come with their own files."""
        if aborted is None:
            if any(seg.txn_index.path.exists() for seg in new_segments):
                return
            aborted = []
            for seg in old_segments:
                try:
                    aborted += seg.txn_index.entries()
                except CorruptIndexError:
                    rebuild_txn_indexes(self._producers, self._segments, log_start_offset, [seg])
                    aborted += seg.txn_index.entries()
        ordered = sorted(new_segments, key=lambda seg: seg.base_offset)
        for i, seg in enumerate(ordered):
            end = ordered[i + 1].base_offset if i + 1 < len(ordered) else old_segments[-1].next_offset
            mine = [e for e in aborted if seg.base_offset <= e.last_offset < end]
            if mine:
                seg.txn_index.write_all(mine)
