"""Transactions in the partition log: open transactions per producer, COMMIT / ABORT markers, the
last stable offset, the `.txnindex` (written, truncated, deleted, rebuilt when torn), snapshots and
recovery, followers, and `Partition.append_txn_marker` on a leader."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from lakelog.index.transaction_index import AbortedTxn, decode_entries, encode_entries
from lakelog.infra.config import LogConfig
from lakelog.ingest_api.errors import NotLeaderOrFollowerError
from lakelog.ingest_api.replication.partition import Partition, PartitionKey
from lakelog.logstore.control_record import ControlRecordType, batch_marker, build_control_batch, decode_marker
from lakelog.logstore.errors import (
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.log_loader import CLEAN_SHUTDOWN_FILE
from lakelog.logstore.record_batch import Record, RecordBatch, build_batch, iter_batches

NOW_MS = int(time.time() * 1000)


def txn_batch(pid: int, seq: int, count: int = 2, *, epoch: int = 0, transactional: bool = True) -> bytes:
    records = [Record(i, NOW_MS, b"k", f"v{pid}.{seq + i}".encode()) for i in range(count)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=transactional)


def plain(count: int = 1) -> bytes:
    return build_batch([Record(i, NOW_MS, b"k", b"plain") for i in range(count)])


def open_log(tmp_path, **config) -> PartitionLog:
    return PartitionLog(tmp_path / "t-0", LogConfig({k.replace("_", "."): v for k, v in config.items()}))


def test_control_record_key_and_value_are_kafkas_bytes():
    data = build_control_batch(producer_id=7, producer_epoch=2, commit=False, coordinator_epoch=5, timestamp=1,
                               base_offset=40, partition_leader_epoch=3)
    batch = RecordBatch(data)
    assert batch.is_control and batch.is_transactional and batch.base_sequence == -1
    assert (batch.producer_id, batch.producer_epoch, batch.record_count) == (7, 2, 1)
    record = batch.records()[0]
    assert record.key == struct.pack(">hh", 0, 0) and record.value == struct.pack(">hi", 0, 5)
    assert batch_marker(batch).type is ControlRecordType.ABORT and batch_marker(batch).coordinator_epoch == 5
    assert decode_marker(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 9)).commit
    assert decode_marker(struct.pack(">hh", 0, 3), None) is None  # an unknown control type is skipped


def test_commit_and_abort_close_transactions_and_move_the_lso(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(plain(), 0)                      # 0
    log.append_as_leader(txn_batch(1, 0), 0)              # 1-2, producer 1 opens at 1
    log.append_as_leader(txn_batch(2, 0), 0)              # 3-4, producer 2 opens at 3
    assert log.ongoing_transactions() == {1: 1, 2: 3}
    log.update_high_watermark(log.log_end_offset)
    assert log.first_unstable_offset == 1 and log.last_stable_offset == 1
    assert log.append_control(1, 0, True, 0, 0) == 5     # commit producer 1
    assert log.last_stable_offset == 1                    # its marker is not below the HW yet
    log.update_high_watermark(6)
    assert log.last_stable_offset == 3                    # producer 2's transaction still open
    assert log.append_control(2, 0, False, 0, 0) == 6     # abort producer 2
    # Its marker lies at the HW: still undecided for a reader below the HW.
    assert log.ongoing_transactions() == {} and log.first_unstable_offset == 3 and log.last_stable_offset == 3
    log.update_high_watermark(6)
    assert log.last_stable_offset == 3  # producer 2's marker (6) is not below the HW yet
    log.update_high_watermark(7)
    assert log.first_unstable_offset is None and log.last_stable_offset == 7
    assert log.aborted_transactions(0, 7) == [AbortedTxn(2, 3, 6, 7)]
    assert log.aborted_transactions(0, 3) == []  # the transaction starts at 3: nothing below
    assert decode_entries(log.active_segment.txn_index.path.read_bytes()) == [AbortedTxn(2, 3, 6, 7)]
    log.close()


def test_aborted_transactions_walk_past_the_bound_to_a_marker_in_a_later_segment(tmp_path):
    """A fetch of a transaction's data alone (bound below the next segment) still learns it was
    aborted: its marker, and so its entry, lies in a later segment (Kafka walks on until an
    entry's LSO reaches the bound)."""
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), 0)              # 0-1, producer 1 opens at 0
    log.roll()
    log.append_as_leader(plain(3), 0)                     # 2-4
    log.roll()
    assert log.append_control(1, 0, False, 0, 0) == 5     # abort, two segments later
    log.update_high_watermark(log.log_end_offset)
    assert log.aborted_transactions(0, 2) == [AbortedTxn(1, 0, 5, 6)]
    assert log.aborted_transactions(2, 5) == [AbortedTxn(1, 0, 5, 6)]  # marker inside the range's reach
    log.close()


def test_txnindex_file_is_kafkas_34_byte_entries(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), 0)  # 0-1
    log.append_as_leader(txn_batch(9, 0), 0)  # 2-3
    log.append_control(9, 0, False, 2, 0)     # 4: aborts producer 9; producer 1 still open from 0
    raw = log.active_segment.txn_index.path.read_bytes()
    assert raw == struct.pack(">hqqqq", 0, 9, 2, 4, 0) and len(raw) == 34
    assert encode_entries([AbortedTxn(9, 2, 4, 0)]) == raw
    log.close()


def test_leader_checks_transactional_batches_and_markers(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0, epoch=3), 0)
    with pytest.raises(InvalidTxnStateError):  # a non-transactional batch inside an open transaction
        log.append_as_leader(txn_batch(1, 2, epoch=3, transactional=False), 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_control(1, 2, True, 0, 0)
    log.append_control(1, 3, False, 4, 0)
    with pytest.raises(TransactionCoordinatorFencedError):
        log.append_control(1, 3, True, 3, 0)
    entry = log.producer_entry(1)
    assert entry.coordinator_epoch == 4 and not entry.in_transaction and entry.last_offset == 2
    with pytest.raises(InvalidRecordError):  # clients cannot produce control batches
        log.append_as_leader(build_control_batch(producer_id=1, producer_epoch=3, commit=True, coordinator_epoch=5,
                                                 timestamp=NOW_MS), 0)
    assert log.append_control(77, 0, True, 0, 0) == 3  # a marker with no open transaction is still written
    log.close()


def test_snapshot_carries_open_transactions_across_a_clean_restart(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), 0)
    log.roll()
    log.append_as_leader(txn_batch(2, 0), 0)
    log.close()
    again = open_log(tmp_path)
    assert again.ongoing_transactions() == {1: 0, 2: 2}
    assert again.recovery.producer_batches_replayed == 0  # all from the close snapshot
    again.update_high_watermark(again.log_end_offset)
    assert again.last_stable_offset == 0
    again.close()


def test_unclean_recovery_rebuilds_open_transactions_and_the_txnindex(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), 0)   # 0-1
    log.roll()                                 # snapshot at 2 with producer 1 open
    log.append_as_leader(txn_batch(2, 0), 0)   # 2-3
    log.append_control(1, 0, False, 0, 0)      # 4 aborts producer 1 (LSO then: 2)
    log.append_as_leader(txn_batch(3, 0), 0)   # 5-6
    log.flush()
    before = log.active_segment.txn_index.entries()
    log._local.close()  # a crash: no clean-shutdown marker, no close snapshot
    txn = tmp_path / "t-0" / f"{2:020d}.txnindex"
    txn.unlink()
    again = open_log(tmp_path)
    assert not again.recovery.clean_shutdown
    assert again.ongoing_transactions() == {2: 2, 3: 5}
    assert before == [AbortedTxn(1, 0, 4, 2)] and again.active_segment.txn_index.entries() == before
    assert txn.exists() and 2 in again.recovery.txn_indexes_rebuilt
    again.close()


@pytest.mark.parametrize("damage", ["torn", "version", "offsets"])
def test_damaged_txnindex_is_rebuilt_from_the_log_on_open(tmp_path, damage):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), 0)
    log.append_control(1, 0, False, 0, 0)
    log.roll()
    log.append_as_leader(plain(), 0)
    log.close()
    path = tmp_path / "t-0" / f"{0:020d}.txnindex"
    good = path.read_bytes()
    if damage == "torn":
        path.write_bytes(good + good[:20])
    elif damage == "version":
        path.write_bytes(struct.pack(">h", 1) + good[2:])
    else:
        path.write_bytes(struct.pack(">hqqqq", 0, 1, 0, 99, 100))  # marker offset outside the segment
    again = open_log(tmp_path)
    assert 0 in again.recovery.txn_indexes_rebuilt
    assert path.read_bytes() == good
    assert again.aborted_transactions(0, 10) == [AbortedTxn(1, 0, 2, 3)]
    again.close()


def test_txnindex_damaged_while_open_is_rebuilt_on_read_never_served(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), 0)
    log.append_control(1, 0, False, 0, 0)
    log.roll()
    log.close()
    again = open_log(tmp_path)
    seg = again.segments[0]
    seg.txn_index.path.write_bytes(b"\x00" * 17)  # torn behind the log's back
    seg.txn_index.verified = False
    seg.txn_index._entries = None
    assert again.aborted_transactions(0, 10) == [AbortedTxn(1, 0, 2, 3)]
    assert again.txn_index_rebuilds_on_read == [0]
    again.close()


def test_truncation_cuts_the_txnindex_and_reopens_the_transaction(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), 0)   # 0-1
    log.append_as_leader(txn_batch(2, 0), 0)   # 2-3
    log.append_control(2, 0, False, 0, 0)      # 4
    log.append_control(1, 0, False, 0, 0)      # 5
    assert [e.last_offset for e in log.aborted_transactions(0, 6)] == [4, 5]
    assert log.truncate_to(5) == 5
    assert log.aborted_transactions(0, 6) == [AbortedTxn(2, 2, 4, 0)]
    assert log.ongoing_transactions() == {1: 0}
    log.truncate_to(2)
    assert not log.active_segment.txn_index.path.exists() and log.ongoing_transactions() == {1: 0}
    log.close()


def test_segment_deletion_removes_its_txnindex(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), 0)
    log.append_control(1, 0, False, 0, 0)
    log.roll()
    log.append_as_leader(plain(), 0)
    path = tmp_path / "t-0" / f"{0:020d}.txnindex"
    assert path.exists()
    log.update_high_watermark(log.log_end_offset)
    log.delete_oldest_segments(lambda seg, nxt: True, upper_bound_offset=log.log_end_offset)
    assert not path.exists() and log.log_start_offset == 3
    log.close()


def test_follower_replicating_markers_keeps_the_same_state(tmp_path):
    leader = PartitionLog(tmp_path / "leader")
    follower = PartitionLog(tmp_path / "follower")
    leader.append_as_leader(txn_batch(1, 0), 4)
    leader.append_as_leader(txn_batch(2, 0), 4)
    leader.append_control(1, 0, False, 3, 4)
    leader.append_control(2, 0, True, 3, 4)
    leader.append_as_leader(txn_batch(1, 2, epoch=0), 4)
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    assert follower.ongoing_transactions() == leader.ongoing_transactions() == {1: 6}
    assert follower.aborted_transactions(0, 10) == leader.aborted_transactions(0, 10) == [AbortedTxn(1, 0, 4, 2)]
    kinds = [RecordBatch(bytes(b.buffer)).is_control for _, b in iter_batches(follower.read(0, 1 << 20).records)]
    assert kinds == [False, False, True, True, False]
    leader.close()
    follower.close()


def test_expiry_spares_producers_with_open_transactions(tmp_path):
    clock = [NOW_MS / 1000]
    log = PartitionLog(tmp_path / "t-0", clock=lambda: clock[0], producer_id_expiration_ms=1000)
    log.append_as_leader(txn_batch(1, 0), 0)
    log.append_as_leader(txn_batch(2, 0, transactional=False), 0)
    clock[0] += 10
    assert log.remove_expired_producers() == [2]
    assert log.ongoing_transactions() == {1: 0}
    log.close()


def test_append_txn_marker_returns_after_the_isr_holds_it(tmp_path):
    async def main():
        p = Partition(PartitionKey("t", 0), PartitionLog(tmp_path / "t-0"), node_id=1)
        p.make_leader(3, 1, [1, 2], [1, 2])
        info = p.append_as_leader(txn_batch(5, 0), required_acks="all", min_isr=1)
        assert info.last_offset == 1 and p.log.last_stable_offset == 0
        marker = asyncio.ensure_future(p.append_txn_marker(5, 0, False, 1))
        await asyncio.sleep(0.01)
        assert not marker.done()
        p.on_follower_fetch(2, 3)
        assert await asyncio.wait_for(marker, 2) == 2
        assert p.high_watermark == 3 and p.log.high_watermark == 3 and p.log.last_stable_offset == 3
        assert p.log.aborted_transactions(0, 3) == [AbortedTxn(5, 0, 2, 3)]
        p.make_follower(2, 4, 2, [1, 2], [1, 2])
        with pytest.raises(NotLeaderOrFollowerError):
            await p.append_txn_marker(5, 0, True, 1)
        p.log.close()

    asyncio.run(main())


def test_clean_open_leaves_a_sound_txnindex_alone(tmp_path):
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(1, 0), 0)
    log.append_control(1, 0, False, 0, 0)
    log.close()
    assert (tmp_path / "t-0" / CLEAN_SHUTDOWN_FILE).exists()
    again = open_log(tmp_path)
    assert again.recovery.txn_indexes_rebuilt == []
    again.close()


def test_random_transactions_match_a_model_across_truncation_and_restarts(tmp_path):
    """A seeded random history: the log's open transactions, LSO and aborted list against a model."""
    import random

    seed = 20261129
    print(f"seed {seed}")
    rng = random.Random(seed)
    log = open_log(tmp_path, segment_bytes=700)
    model_open: dict[int, int] = {}
    seqs: dict[int, int] = {}
    aborted: list[tuple[int, int, int]] = []  # (producer, first offset, marker offset)
    for step in range(150):
        pid = rng.randrange(4)
        action = rng.random()
        if action < 0.55:
            offset = log.log_end_offset
            log.append_as_leader(txn_batch(pid, seqs.get(pid, 0), 1), 0)
            seqs[pid] = seqs.get(pid, 0) + 1
            model_open.setdefault(pid, offset)
        elif action < 0.85:
            commit = rng.random() < 0.5
            offset = log.append_control(pid, 0, commit, 0, 0)
            first = model_open.pop(pid, None)
            if first is not None and not commit:
                aborted.append((pid, first, offset))
        elif action < 0.93:
            log.close()
            log = open_log(tmp_path, segment_bytes=700)
        else:
            cut = rng.randrange(max(1, log.log_end_offset))
            log.truncate_to(cut)
            end = log.log_end_offset
            # The model as of the cut: replay is what the log does; here, drop what lies at or above it.
            aborted = [a for a in aborted if a[2] < end]
            model_open = {}
            closed = {(a[0], a[1]) for a in aborted}
            for b in log.batches():
                if b.is_control:
                    model_open.pop(b.producer_id, None)
                elif b.is_transactional:
                    model_open.setdefault(b.producer_id, b.base_offset)
            seqs = {p: (log.producer_entry(p).last_seq + 1 if log.producer_entry(p) else 0) for p in range(4)}
            assert all((p, f) not in closed or p not in model_open or model_open[p] != f for p, f in closed)
        assert log.ongoing_transactions() == model_open, f"step {step}"
        log.update_high_watermark(log.log_end_offset)
        expected_lso = min(model_open.values()) if model_open else log.log_end_offset
        assert log.last_stable_offset == expected_lso, f"step {step}"
        assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.aborted_transactions(0, 10**9)] == \
            aborted, f"step {step}"
    log.close()
