"""Idempotent producer state: leader checks, duplicates, follower state, snapshots, recovery, truncation."""

from __future__ import annotations

import random
import struct
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.infra.config import LogConfig
from lakelog.logstore.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    MixedDuplicateBatchesError,
    OutOfOrderSequenceError,
    UnsupportedFormatVersionError,
)
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.producer_state import (
    INT32_MAX,
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    ProducerSnapshot,
    ProducerStateEntry,
    decode_snapshot,
    encode_snapshot,
    in_sequence,
    increment_sequence,
    snapshot_name,
)
from lakelog.logstore.record_batch import Record, RecordBatch, TimestampType, build_batch, crc32c, iter_batches

# ---------------------------------------------------------------------------------------------
# helpers

#: Batch timestamps: expiry measures a producer's idle time from its batches' max timestamps, so
#: they must be recent or every roll would expire the producers.
NOW_MS = int(time.time() * 1000)


def pbatch(pid: int, epoch: int, seq: int, count: int = 2, *, tag: str = "", ts: int = NOW_MS,
           timestamp_type: TimestampType = TimestampType.CREATE_TIME) -> bytes:
    """A producer batch of `count` records from producer `pid` at sequence `seq`."""
    records = [Record(i, ts, f"k{pid}.{seq}.{i}".encode(), f"v{tag}{pid}.{seq}.{i}".encode()) for i in range(count)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                       timestamp_type=timestamp_type)


def plain(count: int = 2, ts: int = NOW_MS) -> bytes:
    return build_batch([Record(i, ts, b"k", b"plain") for i in range(count)])


def cfg(**overrides) -> LogConfig:
    return LogConfig({k.replace("_", "."): v for k, v in overrides.items()})


def expected_state(batches) -> dict:
    """Independent oracle: producer id -> (epoch, last offset, [(first seq, last seq, first offset,
    last offset)] of its last 5 data batches), in order of each producer's last batch."""
    out: dict = {}
    for b in batches:
        if b.producer_id < 0:
            continue
        epoch, _, metas = out.pop(b.producer_id, (None, None, []))
        if epoch != b.producer_epoch:
            metas = []
        if not b.is_control:
            last_seq = b.base_sequence + b.last_offset_delta
            if last_seq > INT32_MAX:
                last_seq -= INT32_MAX + 1
            metas = (metas + [(b.base_sequence, last_seq, b.base_offset, b.last_offset)])[-5:]
        out[b.producer_id] = (b.producer_epoch, b.last_offset, metas)
    return out


def summary(state) -> dict:
    return {pid: (e.producer_epoch, e.last_offset,
                  [(m.first_seq, m.last_seq, m.first_offset, m.last_offset) for m in e.batches])
            for pid, e in state.items()}


def assert_state_matches_log(log: PartitionLog) -> None:
    got, want = summary(log.producer_state), expected_state(log.batches())
    assert got == want
    assert list(got) == list(want)  # the eviction order too


def crash(log: PartitionLog) -> None:
    """Lose the process: file handles go away and no clean-shutdown marker or snapshot is written."""
    for seg in log.segments:
        seg.close()


class FakeClock:
    def __init__(self, now_ms: int) -> None:
        self.now_ms = now_ms

    def __call__(self) -> float:
        return self.now_ms / 1000


@pytest.fixture
def opened(tmp_path):
    logs: list[PartitionLog] = []

    def open_log(config: LogConfig | None = None, name: str = "topic-0", **kw) -> PartitionLog:
        log = PartitionLog(tmp_path / name, config, **kw)
        logs.append(log)
        return log

    yield open_log
    for log in logs:
        try:
            log.close()
        except OSError:
            pass  # a crashed log: its files were closed under it


def fill_producers(log: PartitionLog, n: int, *, producers: int = 4, seed: int = 1) -> None:
    """`n` requests from several idempotent producers (epoch bumps included) and plain batches."""
    rng = random.Random(seed)
    seqs = {pid: 0 for pid in range(producers)}
    epochs = {pid: 0 for pid in range(producers)}
    for i in range(n):
        pid = rng.randrange(producers + 1)
        if pid == producers:
            log.append_as_leader(plain(rng.randint(1, 3)), 0)
            continue
        if rng.random() < 0.05:
            epochs[pid] += 1
            seqs[pid] = 0
        count = rng.randint(1, 4)
        log.append_as_leader(pbatch(pid, epochs[pid], seqs[pid], count, tag=str(i)), 0)
        seqs[pid] += count


# ---------------------------------------------------------------------------------------------
# sequence arithmetic and the snapshot codec


def test_sequence_wraps_from_int32_max_to_zero():
    assert increment_sequence(5, 3) == 8
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 1, 3) == 1
    assert in_sequence(INT32_MAX, 0) and in_sequence(-1, 0) and in_sequence(6, 7)
    assert not in_sequence(INT32_MAX, 1) and not in_sequence(6, 8) and not in_sequence(6, 6)


def test_snapshot_bytes_follow_the_documented_layout():
    snap = ProducerSnapshot(1234, (
        ProducerStateEntry(7, 3, 1001, 55, (BatchMetadata(10, 12, 999, 1001, 55),)),
        ProducerStateEntry(9, 0, 40, 66, ()),
    ))
    body = struct.pack(">qi", 1234, 2)
    body += struct.pack(">qhqqqiB", 7, 3, 1001, 55, -1, -1, 1) + struct.pack(">iiqiq", 10, 12, 999, 2, 55)
    body += struct.pack(">qhqqqiB", 9, 0, 40, 66, -1, -1, 0)
    expected = b"LKPS" + struct.pack(">h", 2) + struct.pack(">I", crc32c(body)) + body
    assert encode_snapshot(snap) == expected
    assert decode_snapshot(expected) == snap


def test_snapshot_carries_an_open_transaction_and_the_coordinator_epoch():
    snap = ProducerSnapshot(90, (ProducerStateEntry(7, 3, 80, 55, (), 60, 4),))
    body = struct.pack(">qi", 90, 1) + struct.pack(">qhqqqiB", 7, 3, 80, 55, 60, 4, 0)
    assert encode_snapshot(snap) == b"LKPS" + struct.pack(">hI", 2, crc32c(body)) + body
    assert decode_snapshot(encode_snapshot(snap)).producers[0].current_txn_first_offset == 60


def test_version_1_snapshot_is_still_read_without_transactions():
    body = struct.pack(">qi", 1234, 1) + struct.pack(">qhqqB", 9, 0, 40, 66, 0)
    data = b"LKPS" + struct.pack(">h", 1) + struct.pack(">I", crc32c(body)) + body
    assert decode_snapshot(data) == ProducerSnapshot(1234, (ProducerStateEntry(9, 0, 40, 66, ()),))


metas = st.builds(lambda s1, s2, o, d, t: BatchMetadata(s1, s2, o, o + d, t),
                  st.integers(-1, INT32_MAX), st.integers(-1, INT32_MAX), st.integers(0, 2**62),
                  st.integers(0, INT32_MAX), st.integers(-1, 2**62))


@settings(max_examples=150, deadline=None)
@given(offset=st.integers(0, 2**63 - 1),
       entries=st.lists(st.tuples(st.integers(-(2**15), 2**15 - 1), st.integers(0, 2**62), st.integers(-1, 2**62),
                                  st.lists(metas, max_size=NUM_BATCHES_TO_RETAIN)), max_size=20),
       pids=st.lists(st.integers(0, 2**63 - 1), min_size=20, max_size=20, unique=True))
def test_snapshot_round_trip(offset, entries, pids):
    snap = ProducerSnapshot(offset, tuple(ProducerStateEntry(pid, e, lo, ts, tuple(bs))
                                          for pid, (e, lo, ts, bs) in zip(pids, entries)))
    assert decode_snapshot(encode_snapshot(snap)) == snap


def _good_snapshot() -> bytes:
    return encode_snapshot(ProducerSnapshot(50, (ProducerStateEntry(1, 0, 49, 5, (BatchMetadata(0, 1, 48, 49, 5),)),)))


def test_snapshot_of_another_version_is_refused():
    data = bytearray(_good_snapshot())
    data[4:6] = struct.pack(">h", 3)
    with pytest.raises(UnsupportedFormatVersionError, match="version 3"):
        decode_snapshot(bytes(data), file="x.snapshot")


@pytest.mark.parametrize("damage", ["flip", "magic", "short", "trailing", "count", "batches"])
def test_damaged_snapshot_is_corrupt(damage):
    data = bytearray(_good_snapshot())
    if damage == "flip":
        data[30] ^= 0x01
    elif damage == "magic":
        data[0:4] = b"XXXX"
    elif damage == "short":
        data = data[:-3]
    elif damage == "trailing":
        data += b"\x00"
    elif damage in ("count", "batches"):
        if damage == "count":
            data[18:22] = struct.pack(">i", 2)
        else:
            data[22 + 26] = 6  # more batches than are ever kept
        data[6:10] = struct.pack(">I", crc32c(bytes(data[10:])))
    with pytest.raises(CorruptRecordError) as err:
        decode_snapshot(bytes(data), file="00000000000000000050.snapshot")
    assert "00000000000000000050.snapshot" in str(err.value)


# ---------------------------------------------------------------------------------------------
# the leader's checks


def test_duplicates_of_the_last_five_batches_get_their_original_offsets(opened):
    log = opened()
    log.append_as_leader(plain(3), 0)  # offsets 0..2: producer offsets differ from sequences
    originals = []
    for i in range(6):
        info = log.append_as_leader(pbatch(7, 0, 2 * i, 2), 0)
        assert not info.duplicate
        originals.append((info.first_offset, info.last_offset))
    leo, size = log.log_end_offset, log.size_in_bytes
    for i in range(1, 6):  # the last five batches
        again = log.append_as_leader(pbatch(7, 0, 2 * i, 2), 0)
        assert again.duplicate
        assert (again.first_offset, again.last_offset) == originals[i]
        assert again.base_offsets == (originals[i][0],)
        assert (again.record_count, again.batch_count, again.size_in_bytes) == (0, 0, 0)
        assert (log.log_end_offset, log.size_in_bytes) == (leo, size)
    # The sixth-newest is no longer remembered: it is out of order, not a duplicate.
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(7, 0, 0, 2), 0)
    # A batch with the same first but another last sequence is no duplicate either.
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(7, 0, 10, 1), 0)
    assert (log.log_end_offset, log.size_in_bytes) == (leo, size)
    assert log.append_as_leader(pbatch(7, 0, 12, 1), 0).first_offset == leo


def test_out_of_order_sequence_is_refused_and_appends_nothing(opened):
    log = opened()
    log.append_as_leader(pbatch(1, 0, 0, 3), 0)  # sequences 0..2
    for seq in (4, 2, 1, 100):
        with pytest.raises(OutOfOrderSequenceError):
            log.append_as_leader(pbatch(1, 0, seq, 1), 0)
    assert log.log_end_offset == 3
    assert log.append_as_leader(pbatch(1, 0, 3, 1), 0).first_offset == 3


def test_epoch_fencing_and_new_epoch_starts_at_zero(opened):
    log = opened()
    log.append_as_leader(pbatch(5, 2, 0, 2), 0)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(pbatch(5, 1, 2, 1), 0)  # an older producer instance: fenced
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(5, 3, 2, 1), 0)  # a new epoch must start at sequence 0
    assert log.log_end_offset == 2
    log.append_as_leader(pbatch(5, 3, 0, 1), 0)
    # Epoch 2's batch is no longer a duplicate: its producer was fenced.
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(pbatch(5, 2, 0, 2), 0)
    entry = log.producer_entry(5)
    assert (entry.producer_epoch, entry.last_seq, len(entry.batches)) == (3, 0, 1)


def test_unknown_producer_is_accepted_at_any_sequence_and_epoch(opened):
    log = opened()
    info = log.append_as_leader(pbatch(9, 4, 1000, 2), 0)
    assert not info.duplicate
    assert log.producer_entry(9).last_seq == 1001
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(9, 4, 0, 1), 0)


def test_sequence_wraps_around(opened):
    log = opened()
    log.append_as_leader(pbatch(3, 0, INT32_MAX - 1, 2), 0)  # INT32_MAX-1 .. INT32_MAX
    straddle = log.append_as_leader(pbatch(3, 0, 0, 1), 0)  # wraps to 0
    assert straddle.first_offset == 2
    across = log.append_as_leader(pbatch(3, 1, 0, 1), 0)
    log.append_as_leader(pbatch(3, 1, 1, 1), 0)
    assert across.first_offset == 3
    log2 = opened(name="topic-1")
    log2.append_as_leader(pbatch(4, 0, INT32_MAX - 1, 4), 0)  # sequences INT32_MAX-1 .. 1
    assert log2.producer_entry(4).last_seq == 1
    dup = log2.append_as_leader(pbatch(4, 0, INT32_MAX - 1, 4), 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 3)
    with pytest.raises(OutOfOrderSequenceError):
        log2.append_as_leader(pbatch(4, 0, 1, 1), 0)
    assert log2.append_as_leader(pbatch(4, 0, 2, 1), 0).first_offset == 4


def test_requests_of_several_batches(opened):
    log = opened()
    both = pbatch(1, 0, 0, 2) + pbatch(1, 0, 2, 3)  # one producer, consecutive in one request
    info = log.append_as_leader(both + plain(1), 0)
    assert info.base_offsets == (0, 2, 5)
    again = log.append_as_leader(pbatch(1, 0, 0, 2) + pbatch(1, 0, 2, 3), 0)
    assert again.duplicate and again.base_offsets == (0, 2) and (again.first_offset, again.last_offset) == (0, 4)
    with pytest.raises(MixedDuplicateBatchesError):
        log.append_as_leader(pbatch(1, 0, 2, 3) + pbatch(1, 0, 5, 1), 0)
    with pytest.raises(MixedDuplicateBatchesError):
        log.append_as_leader(pbatch(1, 0, 2, 3) + plain(1), 0)
    with pytest.raises(OutOfOrderSequenceError):  # the second batch skips a sequence
        log.append_as_leader(pbatch(1, 0, 5, 1) + pbatch(1, 0, 7, 1), 0)
    assert log.log_end_offset == 6
    assert log.producer_entry(1).last_seq == 4


def test_producer_batch_needs_epoch_and_sequence(opened):
    log = opened()
    with pytest.raises(InvalidRecordError, match="base sequence"):
        log.append_as_leader(pbatch(1, 0, -1, 1), 0)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(pbatch(1, -1, 0, 1), 0)
    log.append_as_leader(plain(2), 0)
    assert log.producer_state == {}


def test_duplicate_on_log_append_time_topic_returns_the_original_time(opened):
    clock = FakeClock(5_000_000)
    log = opened(cfg(message_timestamp_type="LogAppendTime"), clock=clock)
    first = log.append_as_leader(pbatch(2, 0, 0, 1), 0)
    clock.now_ms += 777
    again = log.append_as_leader(pbatch(2, 0, 0, 1), 0)
    assert again.duplicate and again.log_append_time == first.log_append_time == 5_000_000


# ---------------------------------------------------------------------------------------------
# followers


def test_follower_builds_the_leaders_state(opened):
    leader = opened(cfg(segment_bytes=1200))
    follower = opened(cfg(segment_bytes=900), name="follower-0")
    fill_producers(leader, 120)
    offset = 0
    while offset < leader.log_end_offset:  # replicate in uneven chunks
        got = leader.read(offset, 700)
        follower.append_as_follower(got.records)
        offset = follower.log_end_offset
    assert summary(follower.producer_state) == summary(leader.producer_state)
    assert list(follower.producer_state) == list(leader.producer_state)
    assert_state_matches_log(leader)
    # A duplicate sent to the follower after it became leader is still answered from its state.
    pid, entry = next(iter(leader.producer_state.items()))
    last = entry.batches[-1]
    resend = pbatch(pid, entry.producer_epoch, last.first_seq, last.last_seq - last.first_seq + 1)
    for log in (leader, follower):
        info = log.append_as_leader(resend, 1)
        assert info.duplicate and (info.first_offset, info.last_offset) == (last.first_offset, last.last_offset)


def test_follower_applies_without_checks(opened):
    follower = opened()
    stored = bytearray(pbatch(1, 5, 0, 2))
    follower.append_as_follower(bytes(stored))
    older = bytearray(pbatch(1, 4, 9, 1))  # a lower epoch and a gap: the leader accepted it
    older[:8] = struct.pack(">q", 2)
    follower.append_as_follower(bytes(older))
    entry = follower.producer_entry(1)
    assert (entry.producer_epoch, entry.last_seq, entry.last_offset) == (4, 9, 2)


# ---------------------------------------------------------------------------------------------
# snapshots, reopen, crash


def test_clean_close_and_reopen_keeps_the_state(opened, tmp_path):
    config = cfg(segment_bytes=1500)
    log = opened(config)
    fill_producers(log, 80)
    before = summary(log.producer_state)
    leo = log.log_end_offset
    log.close()
    assert (tmp_path / "topic-0" / snapshot_name(leo)).exists()
    reopened = opened(config)
    assert reopened.recovery.producer_snapshot_offset == leo
    assert reopened.recovery.producer_batches_replayed == 0
    assert summary(reopened.producer_state) == before
    assert_state_matches_log(reopened)


def test_state_survives_a_crash(opened):
    config = cfg(segment_bytes=1500)
    log = opened(config)
    fill_producers(log, 80, seed=3)
    before = summary(log.producer_state)
    assert len(log.segments) > 3
    crash(log)
    reopened = opened(config)
    report = reopened.recovery
    assert not report.clean_shutdown
    assert report.producer_snapshot_offset == reopened.segments[-1].base_offset  # the last roll's
    assert report.producer_batches_replayed > 0
    assert summary(reopened.producer_state) == before
    # The producers continue where they were, and their last batches are still duplicates.
    for pid, (epoch, _, metas) in before.items():
        first_seq, last_seq, first_offset, last_offset = metas[-1]
        info = reopened.append_as_leader(pbatch(pid, epoch, first_seq, last_seq - first_seq + 1), 0)
        assert info.duplicate and (info.first_offset, info.last_offset) == (first_offset, last_offset)
        reopened.append_as_leader(pbatch(pid, epoch, last_seq + 1, 1), 0)


def test_torn_tail_forgets_the_lost_batch(opened, tmp_path):
    log = opened()
    log.append_as_leader(pbatch(1, 0, 0, 2), 0)
    log.append_as_leader(pbatch(1, 0, 2, 2), 0)
    size_before_last = log.active_segment.size
    log.append_as_leader(pbatch(1, 0, 4, 2), 0)
    crash(log)
    path = tmp_path / "topic-0" / f"{0:020d}.log"
    with open(path, "r+b") as f:
        f.truncate(size_before_last + 30)  # the last batch is torn
    reopened = opened()
    assert reopened.log_end_offset == 4
    assert reopened.producer_entry(1).last_seq == 3
    assert_state_matches_log(reopened)
    # The producer's retry of the lost batch is appended, not answered as a duplicate.
    info = reopened.append_as_leader(pbatch(1, 0, 4, 2), 0)
    assert not info.duplicate and info.first_offset == 4


def test_corrupt_snapshot_falls_back_to_the_previous_one(opened, tmp_path):
    config = cfg(segment_bytes=1500)
    log = opened(config)
    fill_producers(log, 60, seed=5)
    before = summary(log.producer_state)
    leo = log.log_end_offset
    log.close()
    directory = tmp_path / "topic-0"
    newest = directory / snapshot_name(leo)
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF
    newest.write_bytes(bytes(data))
    reopened = opened(config)
    report = reopened.recovery
    assert report.producer_snapshots_removed == [newest.name]
    assert not newest.exists()
    assert report.producer_snapshot_offset == reopened.segments[-1].base_offset < leo
    assert report.producer_batches_replayed > 0
    assert summary(reopened.producer_state) == before


def test_no_snapshot_at_all_rebuilds_from_the_log(opened, tmp_path):
    config = cfg(segment_bytes=1500)
    log = opened(config)
    fill_producers(log, 60, seed=6)
    before = summary(log.producer_state)
    log.close()
    for path in (tmp_path / "topic-0").glob("*.snapshot"):
        path.unlink()
    reopened = opened(config)
    assert reopened.recovery.producer_snapshot_offset is None
    assert summary(reopened.producer_state) == before


def test_snapshot_of_unknown_version_refuses_to_open(opened, tmp_path):
    log = opened()
    log.append_as_leader(pbatch(1, 0, 0, 1), 0)
    log.close()
    path = tmp_path / "topic-0" / snapshot_name(1)
    data = bytearray(path.read_bytes())
    data[4:6] = struct.pack(">h", 9)
    path.write_bytes(bytes(data))
    with pytest.raises(UnsupportedFormatVersionError):
        PartitionLog(tmp_path / "topic-0")


def test_snapshot_above_the_log_end_is_deleted_on_open(opened, tmp_path):
    log = opened()
    log.append_as_leader(pbatch(1, 0, 0, 2), 0)
    log.close()
    directory = tmp_path / "topic-0"
    stale = directory / snapshot_name(50)
    stale.write_bytes((directory / snapshot_name(2)).read_bytes())
    reopened = opened()
    assert not stale.exists()
    assert stale.name in reopened.recovery.producer_snapshots_removed


def test_only_the_newest_snapshots_are_kept(opened, tmp_path):
    log = opened(cfg(segment_bytes=600), producer_snapshots_to_keep=2)
    fill_producers(log, 60)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 4
    names = sorted(p.name for p in (tmp_path / "topic-0").glob("*.snapshot"))
    assert names == [snapshot_name(b) for b in bases[-2:]]


# ---------------------------------------------------------------------------------------------
# truncation, retention, expiry, bounds


def test_truncate_to_restores_the_earlier_state(opened, tmp_path):
    log = opened(cfg(segment_bytes=1000))
    rng = random.Random(11)
    seqs = [0, 0, 0]
    states = {0: {}}
    for _ in range(90):
        pid = rng.randrange(3)
        count = rng.randint(1, 3)
        log.append_as_leader(pbatch(pid, 0, seqs[pid], count), 0)
        seqs[pid] += count
        states[log.log_end_offset] = summary(log.producer_state)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 5
    offsets = sorted(states)
    # Inside the active segment, then one segment back (a snapshot is at its base), then far back
    # (below every kept snapshot: replayed from the log start).
    for target in (offsets[-3], bases[-2] + 1, offsets[5]):
        target = max(o for o in offsets if o <= target)
        assert log.truncate_to(target) == target
        assert summary(log.producer_state) == states[target], target
        assert all(int(p.name[:20]) <= target for p in (tmp_path / "topic-0").glob("*.snapshot"))
    # The producers continue from the truncated state, and a reopen agrees.
    entry = log.producer_entry(0)
    log.append_as_leader(pbatch(0, 0, entry.last_seq + 1, 1), 0)
    expected = summary(log.producer_state)
    log.close()
    assert summary(opened(cfg(segment_bytes=1000)).producer_state) == expected


def test_truncate_fully_clears_the_state(opened, tmp_path):
    log = opened(cfg(segment_bytes=600))
    fill_producers(log, 30)
    log.truncate_fully_and_start_at(1000)
    assert log.producer_state == {}
    assert not list((tmp_path / "topic-0").glob("*.snapshot"))
    log.append_as_leader(pbatch(1, 0, 77, 1), 0)  # an unknown producer again
    assert log.producer_entry(1).last_offset == 1000


def test_retention_keeps_producers_whose_batches_are_deleted(opened, tmp_path):
    config = cfg(segment_bytes=600)
    log = opened(config)
    log.append_as_leader(pbatch(42, 0, 0, 2), 0)  # only in the first segment
    for i in range(30):
        log.append_as_leader(pbatch(1, 0, 2 * i, 2), 0)
    deleted = log.delete_oldest_segments(lambda seg, nxt: True)
    assert deleted and log.log_start_offset > 1
    assert all(int(p.name[:20]) >= log.log_start_offset for p in (tmp_path / "topic-0").glob("*.snapshot"))
    assert log.producer_entry(42) is not None
    # Moving the start inside the active segment leaves a snapshot at the LEO behind.
    log.maybe_increment_log_start_offset(log.log_end_offset - 1)
    assert [p.name for p in (tmp_path / "topic-0").glob("*.snapshot")] == [snapshot_name(log.log_end_offset)]
    crash(log)
    reopened = opened(config)
    assert reopened.producer_entry(42).last_seq == 1
    dup = reopened.append_as_leader(pbatch(42, 0, 0, 2), 0)
    assert dup.duplicate and (dup.first_offset, dup.last_offset) == (0, 1)


def test_expired_producers_are_dropped_on_roll(opened):
    clock = FakeClock(10_000_000)
    log = opened(clock=clock, producer_id_expiration_ms=60_000)
    log.append_as_leader(pbatch(1, 0, 0, 1, ts=clock.now_ms - 61_000), 0)
    log.append_as_leader(pbatch(2, 0, 0, 1, ts=clock.now_ms - 1_000), 0)
    log.roll()
    assert sorted(log.producer_state) == [2]
    clock.now_ms += 60_000
    assert log.remove_expired_producers() == [2]
    log.append_as_leader(pbatch(2, 0, 55, 1, ts=clock.now_ms), 0)  # unknown again: any sequence


def test_tracked_producers_are_bounded(opened):
    leader = opened(max_producer_ids=3)
    follower = opened(name="follower-0", max_producer_ids=3)
    for pid in (1, 2, 3):
        leader.append_as_leader(pbatch(pid, 0, 0, 1), 0)
    leader.append_as_leader(pbatch(1, 0, 1, 1), 0)  # 1 is now the most recently written
    leader.append_as_leader(pbatch(4, 0, 0, 1), 0)  # evicts 2, the least recently written
    assert list(leader.producer_state) == [3, 1, 4]
    follower.append_as_follower(leader.read(0, 1 << 20).records)
    assert list(follower.producer_state) == [3, 1, 4]
    leader.append_as_leader(pbatch(2, 0, 9, 1), 0)  # forgotten: accepted as a new producer


def test_plain_batches_are_not_tracked_and_leave_empty_snapshots(opened, tmp_path):
    log = opened(cfg(segment_bytes=600))
    for _ in range(20):
        log.append_as_leader(plain(3), 0)
    assert log.producer_state == {}
    snaps = list((tmp_path / "topic-0").glob("*.snapshot"))
    assert snaps and all(decode_snapshot(p.read_bytes()).producers == () for p in snaps)


def test_stored_batches_carry_the_producer_fields(opened):
    log = opened()
    log.append_as_leader(pbatch(123, 4, 17, 3), 2)
    batch = RecordBatch(bytes(next(iter_batches(log.read(0, 1 << 20).records))[1].buffer))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (123, 4, 17)


def test_compaction_swap_leaves_the_state_alone(opened):
    from lakelog.compaction.cleaner import clean_log

    config = cfg(cleanup_policy="compact", segment_bytes=600, min_cleanable_dirty_ratio=0.01)
    log = opened(config)
    # Producer 5 writes only early, and every key it wrote is overwritten later: compaction
    # empties (and drops) its batches, yet its state must stay.
    log.append_as_leader(build_batch([Record(0, NOW_MS, b"k0", b"old")], producer_id=5, producer_epoch=0,
                                     base_sequence=0), 0)
    for i in range(40):
        log.append_as_leader(build_batch([Record(0, NOW_MS, b"k%d" % (i % 3), b"v%d" % i)], producer_id=6,
                                         producer_epoch=0, base_sequence=i), 0)
    before = summary(log.producer_state)
    result = clean_log(log, NOW_MS, force=True)
    assert result.cleaned, result
    assert 0 not in {b.base_offset for b in log.batches()}  # producer 5's batch is gone from the log
    assert summary(log.producer_state) == before
    crash(log)
    reopened = opened(config)
    assert summary(reopened.producer_state) == before
    dup = reopened.append_as_leader(build_batch([Record(0, NOW_MS, b"k0", b"old")], producer_id=5,
                                                producer_epoch=0, base_sequence=0), 0)
    assert dup.duplicate and dup.first_offset == 0
