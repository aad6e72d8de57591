"""The local cleaner on transactional data (Kafka's cleaner rules): nothing at or above the first
unstable offset is cleaned, aborted transactions' batches are dropped and never supersede a
committed record, markers stay, and the `.txnindex` entries survive the swap."""

from __future__ import annotations

import time

from lakelog.compaction.cleaner import clean_log
from lakelog.infra.config import LogConfig
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.read_committed import committed_batches
from lakelog.logstore.record_batch import Record, build_batch

NOW_MS = int(time.time() * 1000)


def put(log: PartitionLog, key: bytes, value: bytes, *, pid: int = -1, seq: int = -1, txn: bool = False) -> None:
    log.append_as_leader(build_batch([Record(0, NOW_MS, key, value)], producer_id=pid,
                                     producer_epoch=0 if pid >= 0 else -1, base_sequence=seq,
                                     is_transactional=txn), 0)


def visible(log: PartitionLog) -> dict[bytes, bytes]:
    """key -> latest value a read_committed reader sees below the LSO."""
    lso = log.last_stable_offset
    batches = list(log.batches(max_offset=lso))
    latest: dict[bytes, bytes] = {}
    for b in committed_batches(batches, log.aborted_transactions(log.log_start_offset, lso)):
        for r in b.records():
            latest[r.key] = r.value
    return latest


def test_cleaner_drops_aborted_data_keeps_markers_and_stops_at_the_lso(tmp_path):
    log = PartitionLog(tmp_path / "t-0", LogConfig({"cleanup.policy": "compact", "segment.bytes": 400,
                                                     "min.cleanable.dirty.ratio": 0.01}))
    put(log, b"k", b"committed")                    # 0
    put(log, b"k", b"aborted", pid=1, seq=0, txn=True)   # 1
    put(log, b"only-aborted", b"x", pid=1, seq=1, txn=True)  # 2
    log.append_control(1, 0, False, 0, 0)           # 3 ABORT
    put(log, b"j", b"txn-committed", pid=2, seq=0, txn=True)  # 4
    log.append_control(2, 0, True, 0, 0)            # 5 COMMIT
    for i in range(6):
        put(log, b"filler%d" % i, b"f")              # 6..11
    put(log, b"k", b"open", pid=3, seq=0, txn=True)  # 12: an open transaction
    for i in range(6):
        put(log, b"after%d" % i, b"a")               # 13..18
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 12
    before = visible(log)
    result = clean_log(log, NOW_MS, high_watermark=log.high_watermark, force=True)
    assert result.cleaned and result.first_uncleanable_offset <= 12
    assert result.stats.dropped_aborted == 2
    offsets = {r.offset: r.value for b in log.batches() for r in b.records()}
    assert 1 not in offsets and 2 not in offsets           # the aborted batches are gone
    assert offsets[0] == b"committed"                       # not superseded by aborted or open data
    assert offsets[12] == b"open"                           # above the LSO: untouched
    controls = [b.base_offset for b in log.batches() if b.is_control]
    assert controls == [3, 5]                               # markers stay
    assert visible(log) == before
    assert [(a.producer_id, a.first_offset) for a in log.aborted_transactions(0, 19)] == [(1, 1)]
    log.close()
