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


def test_a_marker_goes_only_once_empty_and_past_its_delete_horizon():
    from lakelog.compaction.txn_markers import MarkerVerdict, decide_marker

    assert decide_marker(data_below=True, delete_horizon_ms=None, now_ms=5) is MarkerVerdict.KEEP
    assert decide_marker(data_below=True, delete_horizon_ms=1, now_ms=5) is MarkerVerdict.KEEP
    assert decide_marker(data_below=False, delete_horizon_ms=None, now_ms=5) is MarkerVerdict.KEEP_UNTIL_HORIZON
    assert decide_marker(data_below=False, delete_horizon_ms=6, now_ms=5) is MarkerVerdict.KEEP_UNTIL_HORIZON
    assert decide_marker(data_below=False, delete_horizon_ms=5, now_ms=5) is MarkerVerdict.DROP


def _batches(specs) -> list:
    """RecordBatches from (offset, kind, producer id) with kind "data", "txn", "commit" or "abort"."""
    from lakelog.logstore.control_record import build_control_batch
    from lakelog.logstore.record_batch import RecordBatch

    out = []
    for offset, kind, pid in specs:
        if kind in ("commit", "abort"):
            data = build_control_batch(producer_id=pid, producer_epoch=0, commit=kind == "commit",
                                       coordinator_epoch=0, timestamp=NOW_MS, base_offset=offset)
        else:
            data = build_batch([Record(offset, NOW_MS, b"k%d" % offset, b"v")], base_offset=offset,
                               producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                               base_sequence=offset if pid >= 0 else -1, is_transactional=kind == "txn")
        out.append(RecordBatch(data))
    return out


def _round(batches, groups, aborted, now_ms, map_end=100):
    """One round over `batches` split into `groups` (sizes), sharing one TransactionCleaning."""
    from lakelog.compaction.compactor import CleaningParams, OffsetMap, compact_batches
    from lakelog.compaction.txn_markers import TransactionCleaning
    from lakelog.logstore.record_batch import RecordBatch

    txns = TransactionCleaning(aborted)
    params = CleaningParams(now_ms, delete_retention_ms=1000)
    out, i = [], 0
    for size in groups:
        for outcome in compact_batches(batches[i:i + size], OffsetMap(), map_end, params, txns=txns):
            if outcome.data is not None:
                out.append(RecordBatch(outcome.data))
        i += size
    return out, txns.kept_entries


def test_markers_across_groups_and_rounds_follow_kafkas_cleaner_rules():
    from lakelog.index.transaction_index import AbortedTxn

    aborted = [AbortedTxn(1, 0, 3, 4)]
    batches = _batches([(0, "txn", 1), (1, "txn", 2), (2, "data", -1), (3, "abort", 1), (4, "commit", 2)])
    # Round 1: producer 1's aborted data goes; both markers stay (this round saw data of theirs),
    # even with the data in one group and the marker in the next; the ABORT keeps its entry.
    once, kept = _round(batches, [2, 3], aborted, NOW_MS)
    assert [b.base_offset for b in once] == [1, 2, 3, 4] and kept == aborted
    assert all(b.delete_horizon_ms is None for b in once)
    # Round 2: producer 1's marker is empty: stamped now + delete.retention.ms, its entry gone;
    # producer 2's commit still covers data.
    twice, kept = _round(once, [4], aborted, NOW_MS + 10)
    assert [(b.base_offset, b.delete_horizon_ms) for b in twice] == \
        [(1, None), (2, None), (3, NOW_MS + 1010), (4, None)]
    assert kept == [] and twice[2].is_control and twice[2].records()[0].key == once[2].records()[0].key
    # Before the horizon it stays as it is; at the horizon it goes.
    assert _round(twice, [4], aborted, NOW_MS + 1009)[0][2].buffer == twice[2].buffer
    gone, _ = _round(twice, [4], aborted, NOW_MS + 1010)
    assert [b.base_offset for b in gone] == [1, 2, 4]
    # Without a round's bookkeeping (a caller seeing part of the round) markers are copied.
    from lakelog.compaction.compactor import CleaningParams, OffsetMap, compact_batches
    copied = [o.data for o in compact_batches(twice, OffsetMap(), 100, CleaningParams(NOW_MS + 5000, 1000))]
    assert copied[2] == bytes(twice[2].buffer)
