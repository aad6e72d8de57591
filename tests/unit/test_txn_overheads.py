"""Per-transaction and per-fetch work of the transactional path, counted (never timed)."""

from __future__ import annotations

import random

from lakelog.index.transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearch


class CountingList(list):
    """A list that counts the items read by index or iteration."""

    reads = 0

    def __getitem__(self, i):
        CountingList.reads += 1
        return super().__getitem__(i)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]


def _aborted(n: int, seed: int) -> list[AbortedTxn]:
    """`n` entries as a partition writes them: increasing last offsets, and LSOs that never go back
    (some transactions stay open across a few aborts, holding the LSO at their first offset)."""
    rnd = random.Random(seed)
    out, offset, held = [], 0, None
    for _ in range(n):
        first = offset + rnd.randrange(0, 3)
        last = first + rnd.randrange(1, 20)
        if held is None and rnd.random() < 0.05:
            held = first  # a long transaction opens here
        elif held is not None and rnd.random() < 0.2:
            held = None
        lso = held if held is not None and held <= last else last + 1
        lso = max(lso, out[-1].last_stable_offset if out else 0)
        out.append(AbortedTxn(rnd.randrange(100), first, last, min(lso, last + 1)))
        offset = last + 1
    return out


def _scan_all(entries: list[AbortedTxn], fetch: int, upper: int) -> TxnIndexSearch:
    """Every entry from the segment's first, as Kafka's TransactionIndex scans it."""
    found = []
    for e in entries:
        if e.last_offset >= fetch and e.first_offset < upper:
            found.append(e)
        if e.last_stable_offset >= upper:
            return TxnIndexSearch(tuple(found), True)
    return TxnIndexSearch(tuple(found), False)


def _index(tmp_path, entries: list[AbortedTxn]) -> TransactionIndex:
    idx = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    idx.write_all(entries)
    idx._entries = CountingList(entries)
    return idx


def test_txnindex_collect_reads_only_the_entries_of_the_fetched_range(tmp_path):
    entries = _aborted(10_000, seed=1)
    idx = _index(tmp_path, entries)
    end = entries[-1].last_offset
    # a fetch near the end of a segment with 10,000 aborts: a binary search, then its few entries
    CountingList.reads = 0
    search = idx.collect(end - 30, end - 10)
    assert search == _scan_all(entries, end - 30, end - 10)
    assert 0 < CountingList.reads <= 40, CountingList.reads
    # scanning from the first entry would have read nearly all of them
    CountingList.reads = 0
    _scan_all(idx._entries, end - 30, end - 10)
    assert CountingList.reads > 9_000


def test_txnindex_collect_answers_as_a_scan_from_the_first_entry(tmp_path):
    rnd = random.Random(7)
    entries = _aborted(500, seed=7)
    idx = _index(tmp_path, entries)
    end = entries[-1].last_offset + 5
    for _ in range(2_000):
        fetch = rnd.randrange(0, end)
        upper = fetch + rnd.randrange(1, 200)
        assert idx.collect(fetch, upper) == _scan_all(entries, fetch, upper), (fetch, upper)
    assert idx.collect(10, 10) == TxnIndexSearch((), True)  # an empty range overlaps nothing
