"""What a read_committed reader sees: bytes cut at the LSO, aborted transactions and control
batches dropped (logstore/read_committed.py), on a real partition log."""

from __future__ import annotations

import time

from lakelog.logstore.log import PartitionLog
from lakelog.logstore.read_committed import committed_batches, cut_at_offset, data_batches
from lakelog.logstore.record_batch import Record, RecordBatch, build_batch, iter_batches

NOW_MS = int(time.time() * 1000)


def txn(pid: int, seq: int, tag: str) -> bytes:
    return build_batch([Record(0, NOW_MS, None, tag.encode())], producer_id=pid, producer_epoch=0,
                       base_sequence=seq, is_transactional=True)


def plain(tag: str) -> bytes:
    return build_batch([Record(0, NOW_MS, None, tag.encode())])


def values(batches) -> list[bytes]:
    return [r.value for b in batches for r in b.records()]


def test_interleaved_transactions_committed_aborted_and_open(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    log.append_as_leader(plain("p0"), 0)       # 0
    log.append_as_leader(txn(1, 0, "a1"), 0)   # 1  producer 1 (aborted)
    log.append_as_leader(txn(2, 0, "c1"), 0)   # 2  producer 2 (committed)
    log.append_as_leader(txn(1, 1, "a2"), 0)   # 3
    log.append_control(1, 0, False, 0, 0)      # 4  ABORT 1
    log.append_as_leader(plain("p1"), 0)       # 5
    log.append_control(2, 0, True, 0, 0)       # 6  COMMIT 2
    log.append_as_leader(txn(1, 2, "a3"), 0)   # 7  producer 1 again, aborted later
    log.append_as_leader(txn(3, 0, "o1"), 0)   # 8  producer 3, still open
    log.append_control(1, 0, False, 0, 0)      # 9  ABORT 1
    log.update_high_watermark(log.log_end_offset)
    lso = log.last_stable_offset
    assert lso == 8
    data = log.read(0, 1 << 20).records
    cut = cut_at_offset(data, lso)
    batches = [RecordBatch(bytes(b.buffer)) for _, b in iter_batches(cut)]
    assert batches[-1].last_offset == 7
    aborted = log.aborted_transactions(0, batches[-1].last_offset + 1)
    assert [(a.producer_id, a.first_offset) for a in aborted] == [(1, 1), (1, 7)]
    assert values(committed_batches(batches, aborted)) == [b"p0", b"c1", b"p1"]
    # read_uncommitted for a reader of records: everything but the markers
    everything = [RecordBatch(bytes(b.buffer)) for _, b in iter_batches(data)]
    assert values(data_batches(everything)) == [b"p0", b"a1", b"c1", b"a2", b"p1", b"a3", b"o1"]
    # a fetch from the middle sees only the aborted transactions overlapping it
    assert [(a.producer_id, a.first_offset) for a in log.aborted_transactions(5, 8)] == [(1, 7)]
    log.close()


def test_cut_keeps_whole_batches_only():
    a = build_batch([Record(10, NOW_MS, None, b"x"), Record(11, NOW_MS, None, b"y")], base_offset=10)
    b = build_batch([Record(12, NOW_MS, None, b"z")], base_offset=12)
    assert cut_at_offset(a + b, 12) == a
    assert cut_at_offset(a + b, 11) == b""
    assert cut_at_offset(a + b, 13) == a + b
