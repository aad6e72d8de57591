"""PartitionLog: appends, reads, rolls, lookups, truncation, follower appends, flush, reopen."""

from __future__ import annotations

import os
import random
import re
import struct

import pytest

from lakelog.infra.config import LogConfig
from lakelog.infra.errors import InvariantViolation
from lakelog.logstore.errors import (
    CorruptBatchError,
    InvalidRecordError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnsupportedFormatVersionError,
)
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.log_loader import CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE
from lakelog.logstore.record_batch import (
    NO_TIMESTAMP,
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    iter_batches,
)

# ---------------------------------------------------------------------------------------------
# helpers


def make_batch(count: int, *, tag: int = 0, ts: int | list[int] = 1_000, value_size: int = 16,
               timestamp_type: TimestampType = TimestampType.CREATE_TIME) -> bytes:
    """A producer batch (base offset 0, no epoch) of `count` records with recognisable values."""
    stamps = ts if isinstance(ts, list) else [ts] * count
    records = []
    for i in range(count):
        value = (f"{tag}.{i}|" * (value_size // 4 + 1)).encode()[:value_size]
        records.append(Record(i, stamps[i], f"k{tag}.{i}".encode(), value))
    return build_batch(records, timestamp_type=timestamp_type)


def split(buf: bytes | memoryview) -> list[RecordBatch]:
    return [RecordBatch(bytes(b.buffer)) for _, b in iter_batches(buf)]


def config(**overrides) -> LogConfig:
    return LogConfig({k.replace("_", "."): v for k, v in overrides.items()})


def assert_same_payload(stored: bytes, sent: bytes, base_offset: int, epoch: int) -> None:
    """Stored = sent with only the base offset and the leader epoch (both outside the CRC) changed."""
    assert len(stored) == len(sent)
    assert stored[:8] == struct.pack(">q", base_offset)
    assert stored[8:12] == sent[8:12]  # batch length
    assert stored[12:16] == struct.pack(">i", epoch)
    assert stored[16:] == sent[16:]  # magic, CRC, attributes, ..., records: byte for byte
    assert RecordBatch(stored).is_valid()


class FakeClock:
    def __init__(self, start_s: float = 1_000_000.0) -> None:
        self.now_s = start_s

    def __call__(self) -> float:
        return self.now_s

    def advance_ms(self, ms: int) -> None:
        self.now_s += ms / 1000


class Appended:
    """What the test appended, to check reads against: one (base, last, stored bytes) per batch."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, bytes]] = []

    def add(self, log: PartitionLog, payload: bytes, epoch: int) -> None:
        info = log.append_as_leader(payload, epoch)
        stored = bytearray(payload)
        stored[:8] = struct.pack(">q", info.first_offset)
        stored[12:16] = struct.pack(">i", epoch)
        self.batches.append((info.first_offset, info.last_offset, bytes(stored)))

    def containing(self, offset: int) -> tuple[int, int, bytes]:
        for b in self.batches:
            if b[0] <= offset <= b[1]:
                return b
        raise KeyError(offset)


def fill(log: PartitionLog, n_batches: int, *, seed: int = 1, max_records: int = 7,
         max_value: int = 300, epochs: tuple[int, ...] = (0,), ts_of=None) -> Appended:
    rng = random.Random(seed)
    out = Appended()
    for i in range(n_batches):
        count = rng.randint(1, max_records)
        ts = ts_of(i, count, rng) if ts_of else 1_000 + i
        epoch = epochs[min(len(epochs) - 1, i * len(epochs) // n_batches)]
        out.add(log, make_batch(count, tag=i, ts=ts, value_size=rng.randint(0, max_value)), epoch)
    return out


def assert_every_offset_reads_back(log: PartitionLog, appended: Appended, start: int = 0) -> None:
    for base, last, stored in appended.batches:
        for offset in range(max(base, start), last + 1):
            got = log.read(offset, 1)
            assert got.first_offset == base, offset
            first = split(got.records)[0]
            assert bytes(first.buffer) == stored, offset


@pytest.fixture
def opened(tmp_path):
    logs: list[PartitionLog] = []

    def open_log(cfg: LogConfig | None = None, directory=None, **kw) -> PartitionLog:
        log = PartitionLog(directory or tmp_path / "topic-0", cfg, **kw)
        logs.append(log)
        return log

    yield open_log
    for log in logs:
        log.close()


# ---------------------------------------------------------------------------------------------
# append


def test_append_assigns_consecutive_offsets_and_stamps_epoch(opened):
    log = opened()
    sent = [make_batch(3, tag=1), make_batch(1, tag=2), make_batch(5, tag=3)]
    infos = [log.append_as_leader(b, 7) for b in sent]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 2), (3, 3), (4, 8)]
    assert [i.record_count for i in infos] == [3, 1, 5]
    assert infos[2].base_offsets == (4,)
    assert log.log_end_offset == 9
    for info, payload in zip(infos, sent):
        stored = split(log.read(info.first_offset, 1).records)[0]
        assert_same_payload(bytes(stored.buffer), payload, info.first_offset, 7)
        assert [r.offset for r in stored.records()] == list(range(info.first_offset, info.last_offset + 1))
    assert log.epochs.entries == [(7, 0)]


def test_append_of_several_batches_in_one_request(opened):
    log = opened()
    log.append_as_leader(make_batch(2), 0)
    a, b = make_batch(2, tag=1), make_batch(3, tag=2)
    info = log.append_as_leader(a + b, 4)
    assert (info.first_offset, info.last_offset, info.batch_count) == (2, 6, 2)
    assert info.base_offsets == (2, 4)
    stored = split(log.read(2, 10_000).records)
    assert len(stored) == 2
    assert_same_payload(bytes(stored[0].buffer), a, 2, 4)
    assert_same_payload(bytes(stored[1].buffer), b, 4, 4)
    assert log.epochs.entries == [(0, 0), (4, 2)]


def test_new_epoch_is_recorded_at_its_first_offset(opened):
    log = opened()
    log.append_as_leader(make_batch(3), 1)
    log.append_as_leader(make_batch(2), 1)
    log.append_as_leader(make_batch(4), 3)
    log.append_as_leader(make_batch(1), 2)  # a stale epoch never goes into the cache
    assert log.epochs.entries == [(1, 0), (3, 5)]
    assert log.latest_epoch == 3
    assert log.end_offset_for_epoch(1) == (1, 5)
    assert log.end_offset_for_epoch(2) == (1, 5)
    assert log.end_offset_for_epoch(3) == (3, 10)


def test_invalid_request_appends_nothing(opened):
    log = opened(config(max_message_bytes=500))
    log.append_as_leader(make_batch(2), 0)
    good = make_batch(2, tag=5)
    bad = bytearray(make_batch(2, tag=6))
    bad[-1] ^= 0xFF  # breaks the CRC
    with pytest.raises(CorruptBatchError):
        log.append_as_leader(good + bytes(bad), 0)
    with pytest.raises(CorruptBatchError):
        log.append_as_leader(good + good[:40], 0)  # the request ends inside a batch
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(good + make_batch(3, value_size=400), 0)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(b"", 0)
    assert log.log_end_offset == 2
    assert log.active_segment.size == len(make_batch(2))
    assert len(split(log.read(0, 10**6).records)) == 1


# ---------------------------------------------------------------------------------------------
# read


def test_read_returns_whole_batches_within_max_bytes(opened):
    log = opened()
    sizes = []
    for i in range(5):
        payload = make_batch(3, tag=i, value_size=100)
        sizes.append(len(payload))
        log.append_as_leader(payload, 0)
    got = log.read(0, sizes[0] + sizes[1] + sizes[2] - 1)
    assert [b.base_offset for b in split(got.records)] == [0, 3]
    assert len(got.records) == sizes[0] + sizes[1]
    assert (got.first_offset, got.log_start_offset, got.log_end_offset) == (0, 0, 15)
    got = log.read(4, sizes[1] + sizes[2])  # from inside batch 3..5: the whole batch comes back
    assert got.first_offset == 3
    assert [b.base_offset for b in split(got.records)] == [3, 6]
    assert len(log.read(0, 10**6).records) == sum(sizes)


def test_read_returns_first_batch_even_if_larger_than_max_bytes(opened):
    log = opened()
    log.append_as_leader(make_batch(4, value_size=500), 0)
    log.append_as_leader(make_batch(1), 0)
    got = log.read(0, 1)
    assert [b.base_offset for b in split(got.records)] == [0]
    assert len(got.records) > 1
    got = log.read(2, 0)
    assert [b.base_offset for b in split(got.records)] == [0]
    assert log.read(0, 1, min_one_batch=False).records == b""


def test_read_respects_max_offset(opened):
    log = opened()
    for i in range(4):
        log.append_as_leader(make_batch(3, tag=i), 0)  # 0-2, 3-5, 6-8, 9-11
    bases = lambda r: [b.base_offset for b in split(r.records)]  # noqa: E731
    assert bases(log.read(0, 10**6, max_offset=6)) == [0, 3]
    assert bases(log.read(0, 10**6, max_offset=7)) == [0, 3]  # 6-8 straddles the bound: excluded
    assert bases(log.read(0, 10**6, max_offset=12)) == [0, 3, 6, 9]
    assert bases(log.read(0, 10**6, max_offset=10**9)) == [0, 3, 6, 9]
    assert log.read(6, 10**6, max_offset=6).records == b""
    assert log.read(7, 10**6, max_offset=6).records == b""
    assert log.read(0, 10**6, max_offset=0).records == b""
    assert log.read(0, 10**6, max_offset=2).records == b""  # never half a batch


def test_read_across_segments_concatenates_in_order(opened):
    log = opened(config(segment_bytes=1000))
    appended = fill(log, 40, max_records=3, max_value=100)
    assert len(log.segments) > 3
    got = log.read(0, 10**7)
    assert got.records == b"".join(b[2] for b in appended.batches)
    # A bound inside a later segment cuts there.
    bound = appended.batches[25][0]
    got = log.read(appended.batches[3][1], 10**7, max_offset=bound)
    assert got.records == b"".join(b[2] for b in appended.batches[3:25])


def test_read_bounded_by_max_bytes_is_a_contiguous_prefix(opened):
    """A read that fills up inside one segment must not jump to the next segment's batches."""
    log = opened(config(segment_bytes=2000))
    appended = fill(log, 60, seed=5, max_records=4, max_value=120)
    assert len(log.segments) > 3
    rng = random.Random(5)
    for _ in range(300):
        start = rng.randrange(log.log_end_offset)
        max_bytes = rng.randint(1, 3000)
        got = split(log.read(start, max_bytes).records)
        first = appended.containing(start)
        assert bytes(got[0].buffer) == first[2]
        for prev, nxt in zip(got, got[1:]):  # no batch skipped
            assert nxt.base_offset == prev.last_offset + 1, (start, max_bytes, [b.base_offset for b in got])
            assert bytes(nxt.buffer) == appended.containing(nxt.base_offset)[2]
        assert len(got) == 1 or sum(b.size_in_bytes for b in got) <= max_bytes


def test_read_slices_name_the_bytes_read_answers_without_reading_them(opened):
    """The zero-copy read: the same whole batches as `read`, as segment snapshots and positions."""
    log = opened(config(segment_bytes=2000))
    fill(log, 60, seed=9, max_records=4, max_value=120)
    assert len(log.segments) > 3
    rng = random.Random(9)
    for _ in range(200):
        start = rng.randrange(log.log_end_offset)
        max_bytes = rng.randint(1, 5000)
        bound = rng.choice([None, rng.randrange(start, log.log_end_offset + 1)])
        want = log.read(start, max_bytes, max_offset=bound)
        got = log.read_slices(start, max_bytes, max_offset=bound)
        try:
            assert len(got.records) == len(want.records)
            assert got.records.read() == bytes(want.records), (start, max_bytes, bound)
            assert (got.first_offset, got.log_start_offset, got.log_end_offset) == \
                (want.first_offset, want.log_start_offset, want.log_end_offset)
        finally:
            got.records.close()
    with pytest.raises(OffsetOutOfRangeError):
        log.read_slices(log.log_end_offset + 1, 100)


def test_read_slices_stay_readable_after_their_segments_are_deleted(opened):
    log = opened(config(segment_bytes=1000))
    appended = fill(log, 30, max_records=3, max_value=100)
    got = log.read_slices(0, 10**7)
    log.maybe_increment_log_start_offset(appended.batches[-1][0])  # deletes every older segment
    assert got.records.read() == b"".join(b[2] for b in appended.batches)
    got.records.close()
    assert all(s.reader.fileno() == -1 for s in got.records.slices)


def test_offset_out_of_range(opened):
    log = opened()
    for i in range(3):
        log.append_as_leader(make_batch(2, tag=i), 0)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(7, 100)
    got = log.read(6, 100)  # the LEO itself: nothing yet, not an error
    assert got.records == b"" and got.log_end_offset == 6
    assert log.maybe_increment_log_start_offset(3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 100)
    got = log.read(3, 100)
    assert got.first_offset == 2  # the batch holding offset 3 starts at 2
    assert got.log_start_offset == 3


# ---------------------------------------------------------------------------------------------
# rolls and file names


def test_roll_on_segment_bytes(opened):
    payload = make_batch(2, value_size=100)
    size = len(payload)
    log = opened(config(segment_bytes=3 * size))
    for _ in range(10):
        log.append_as_leader(payload, 0)
    segments = log.segments
    assert [s.base_offset for s in segments] == [0, 6, 12, 18]
    assert [s.size for s in segments] == [3 * size, 3 * size, 3 * size, size]
    assert all(s.size <= 3 * size for s in segments)


def test_oversized_batch_gets_a_segment_of_its_own(opened):
    log = opened(config(segment_bytes=200, max_message_bytes=5000))
    log.append_as_leader(make_batch(1), 0)
    log.append_as_leader(make_batch(5, value_size=300), 0)
    log.append_as_leader(make_batch(1), 0)
    assert [s.base_offset for s in log.segments] == [0, 1, 6]


def test_roll_on_segment_ms_with_injected_clock(opened):
    clock = FakeClock()
    log = opened(config(segment_ms=1000), clock=clock)
    untimed = make_batch(1, ts=NO_TIMESTAMP)  # no record timestamps: the segment's age decides
    log.append_as_leader(untimed, 0)
    clock.advance_ms(1000)
    log.append_as_leader(untimed, 0)
    assert len(log.segments) == 1
    clock.advance_ms(1)
    log.append_as_leader(untimed, 0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    clock.advance_ms(600)
    log.append_as_leader(untimed, 0)
    clock.advance_ms(600)
    log.append_as_leader(untimed, 0)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]


def test_roll_on_segment_ms_from_record_timestamps(opened):
    clock = FakeClock()
    log = opened(config(segment_ms=1000), clock=clock)
    log.append_as_leader(make_batch(1, ts=50_000), 0)
    log.append_as_leader(make_batch(1, ts=51_000), 0)
    assert len(log.segments) == 1
    log.append_as_leader(make_batch(1, ts=51_001), 0)  # 1001 ms after the segment's first batch
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_on_full_offset_index(opened):
    # 24 bytes hold 3 offset index entries; index.interval.bytes=0 indexes every batch.
    log = opened(config(segment_index_bytes=24, index_interval_bytes=0))
    for i in range(10):
        log.append_as_leader(make_batch(1, ts=500), 0)  # one timestamp: a single time index entry
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    assert all(len(s.offset_index) <= 3 for s in log.segments)


def test_roll_on_full_time_index(opened):
    # 24 bytes hold 2 time index entries (12 bytes each) but 3 offset index entries.
    log = opened(config(segment_index_bytes=24, index_interval_bytes=0))
    for i in range(7):
        log.append_as_leader(make_batch(1, ts=500 + i), 0)
    assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    assert all(len(s.time_index) <= 2 for s in log.segments)


def test_segment_files_have_20_digit_names(opened, tmp_path):
    log = opened(config(segment_bytes=500))
    fill(log, 30, max_records=3, max_value=60)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3
    names = set(os.listdir(tmp_path / "topic-0"))
    segment_files = {n for n in names if re.fullmatch(r"\d{20}\.(log|index|timeindex)", n)}
    assert segment_files == {f"{b:020d}.{ext}" for b in bases for ext in ("log", "index", "timeindex")}
    snapshots = {n for n in names if re.fullmatch(r"\d{20}\.snapshot", n)}
    assert snapshots == {f"{b:020d}.snapshot" for b in bases[-3:]}  # one per roll, the newest 3 kept
    assert names - segment_files - snapshots <= {"leader-epoch-checkpoint", RECOVERY_POINT_FILE,
                                                 LOG_START_OFFSET_FILE}
    assert "00000000000000000000.log" in names


# ---------------------------------------------------------------------------------------------
# lookups


def test_every_offset_found_over_many_segments_with_sparse_index(opened, tmp_path):
    cfg = config(segment_bytes=16 * 1024, index_interval_bytes=1024)
    log = opened(cfg)
    appended = fill(log, 900, seed=7, max_records=7, max_value=200)
    leo = log.log_end_offset
    assert leo > 3000
    segments = log.segments
    assert len(segments) >= 8
    # The index really is sparse: far fewer entries than batches.
    assert sum(len(s.offset_index) for s in segments) < len(appended.batches) / 2
    assert all(len(s.offset_index) > 0 for s in segments[:-1])
    assert_every_offset_reads_back(log, appended)
    log.close()
    reopened = opened(cfg)
    assert reopened.recovery.clean_shutdown
    assert_every_offset_reads_back(reopened, appended)


def _timestamp_oracle(records: list[tuple[int, int]], t: int, start: int = 0):
    for offset, ts in records:
        if offset >= start and ts >= t:
            return offset, ts
    return None


@pytest.mark.parametrize("stamps", ["wandering", "coarse"])
def test_offset_for_timestamp_matches_brute_force(opened, stamps):
    cfg = config(segment_bytes=4096, index_interval_bytes=300)
    log = opened(cfg)
    rng = random.Random(11)
    if stamps == "wandering":  # up and down, across the records of a batch and across batches
        def ts_of(i, count, r):
            return [10_000 + 37 * i + rng.randint(-900, 900) for _ in range(count)]
    else:  # few distinct values: many records share the timestamp of an index entry
        def ts_of(i, count, r):
            return [10_000 + 100 * (i // 40) + 10 * rng.randint(0, 12) for _ in range(count)]
    fill(log, 250, seed=3, max_records=6, max_value=40, ts_of=ts_of)
    records = [(r.offset, r.timestamp) for b in log.batches() for r in b.records()]
    assert [o for o, _ in records] == list(range(log.log_end_offset))
    assert len(log.segments) > 3
    distinct = sorted({ts for _, ts in records})
    queries = {distinct[0] - 1, distinct[-1], distinct[-1] + 1}
    queries |= set(rng.sample(distinct, min(150, len(distinct))))
    queries |= {ts + 1 for ts in rng.sample(distinct, min(50, len(distinct)))}
    for t in sorted(queries):
        assert log.offset_for_timestamp(t) == _timestamp_oracle(records, t), t
    start = records[len(records) // 2][0]
    log.maybe_increment_log_start_offset(start)
    for t in sorted(queries):
        assert log.offset_for_timestamp(t) == _timestamp_oracle(records, t, start), t


# ---------------------------------------------------------------------------------------------
# truncation and log start


def test_truncate_to_within_active_segment(opened):
    log = opened()
    for i in range(5):
        log.append_as_leader(make_batch(2, tag=i), 0)  # 0-1, 2-3, 4-5, 6-7, 8-9
    assert log.truncate_to(6) == 6
    assert log.log_end_offset == 6
    assert log.truncate_to(5) == 4  # 4-5 straddles 5: removed whole
    assert [b.base_offset for b in log.batches()] == [0, 2]
    assert log.truncate_to(100) == 4  # above the LEO: nothing to do
    info = log.append_as_leader(make_batch(3, tag=9), 0)
    assert (info.first_offset, info.last_offset) == (4, 6)
    assert [b.base_offset for b in log.batches()] == [0, 2, 4]
    assert log.active_segment.size == sum(b.size_in_bytes for b in log.batches())


def test_truncate_to_across_segments_and_epoch_cache(opened, tmp_path):
    cfg = config(segment_bytes=1500, index_interval_bytes=200)
    log = opened(cfg)
    appended = fill(log, 60, max_records=4, max_value=120, epochs=(1, 2, 3))
    assert [e for e, _ in log.epochs.entries] == [1, 2, 3]
    epoch3_start = log.epochs.entries[2][1]
    before = [s.base_offset for s in log.segments]
    assert len(before) > 4
    # Truncate into the middle of epoch 2, inside an early segment.
    target_batch = appended.batches[len(appended.batches) // 3 + 3]
    assert log.epochs.epoch_for_offset(target_batch[0]) == 2
    new_leo = log.truncate_to(target_batch[0])
    assert new_leo == target_batch[0]
    assert log.log_end_offset == new_leo
    assert log.epochs.entries == [e for e in log.epochs.entries if e[1] < new_leo]
    assert [e for e, _ in log.epochs.entries] == [1, 2]
    assert all(o < epoch3_start for _, o in log.epochs.entries)
    remaining = [s.base_offset for s in log.segments]
    assert remaining == [b for b in before if b < new_leo]
    files = {p.name for p in (tmp_path / "topic-0").iterdir()}
    for b in before:
        assert (f"{b:020d}.log" in files) == (b in remaining)
    kept = Appended()
    kept.batches = [b for b in appended.batches if b[1] < new_leo]
    assert_every_offset_reads_back(log, kept)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(new_leo + 1, 100)
    # Appends continue at the new LEO in a new epoch, and everything survives a reopen.
    kept.add(log, make_batch(3, tag=999), 5)
    assert kept.batches[-1][0] == new_leo
    assert log.epochs.entries[-1] == (5, new_leo)
    log.close()
    reopened = opened(cfg)
    assert reopened.log_end_offset == new_leo + 3
    assert reopened.epochs.entries == [(1, 0), (2, log.epochs.entries[1][1]), (5, new_leo)]
    assert_every_offset_reads_back(reopened, kept)


def test_truncate_to_a_segment_base_removes_that_segment(opened):
    log = opened(config(segment_bytes=700))
    appended = fill(log, 20, max_records=3, max_value=100)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    assert log.truncate_to(bases[2]) == bases[2]
    assert [s.base_offset for s in log.segments] == bases[:2]
    info = log.append_as_leader(make_batch(1), 0)
    assert info.first_offset == bases[2]
    assert log.read(bases[2], 1).first_offset == bases[2]
    kept = Appended()
    kept.batches = [b for b in appended.batches if b[1] < bases[2]]
    assert_every_offset_reads_back(log, kept)


def test_truncate_fully_and_start_at(opened, tmp_path):
    cfg = config(segment_bytes=700)
    log = opened(cfg)
    fill(log, 20, max_records=3, max_value=100, epochs=(1, 2))
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset) == (500, 500)
    assert log.epochs.entries == []
    assert [s.base_offset for s in log.segments] == [500]
    logs = sorted(p.name for p in (tmp_path / "topic-0").glob("*.log"))
    assert logs == [f"{500:020d}.log"]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(499, 100)
    assert log.read(500, 100).records == b""
    info = log.append_as_leader(make_batch(2), 3)
    assert (info.first_offset, info.last_offset) == (500, 501)
    assert log.epochs.entries == [(3, 500)]
    log.close()
    reopened = opened(cfg)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (500, 502)
    assert reopened.read(500, 100).first_offset == 500


def test_maybe_increment_log_start_offset(opened):
    cfg = config(segment_bytes=700)
    log = opened(cfg)
    appended = fill(log, 30, max_records=3, max_value=100, epochs=(1, 2, 3))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    epochs_before = log.epochs.entries
    new_start = bases[2] + 1
    spanning = max(i for i, (_, o) in enumerate(epochs_before) if o <= new_start)
    expected_epochs = [(epochs_before[spanning][0], new_start)] + epochs_before[spanning + 1:]
    assert log.maybe_increment_log_start_offset(new_start)
    assert not log.maybe_increment_log_start_offset(new_start)  # never backwards, not even equal
    assert not log.maybe_increment_log_start_offset(5)
    assert log.log_start_offset == new_start
    assert [s.base_offset for s in log.segments] == bases[2:]  # wholly-below segments deleted
    assert log.epochs.entries == expected_epochs
    with pytest.raises(OffsetOutOfRangeError):
        log.read(new_start - 1, 100)
    assert log.read(new_start, 1).first_offset <= new_start
    with pytest.raises(InvariantViolation):
        log.maybe_increment_log_start_offset(log.log_end_offset + 1)
    log.close()
    reopened = opened(cfg)
    assert reopened.log_start_offset == new_start
    kept = Appended()
    kept.batches = [b for b in appended.batches if b[1] >= new_start]
    assert kept.batches[0][0] < new_start  # the batch that straddles the new start stays readable
    assert_every_offset_reads_back(reopened, kept, start=new_start)


# ---------------------------------------------------------------------------------------------
# follower appends


def test_append_as_follower_keeps_bytes_and_epochs(opened, tmp_path):
    leader = opened(config(segment_bytes=2000), directory=tmp_path / "leader")
    fill(leader, 40, max_records=4, max_value=80, epochs=(2, 4, 9))
    follower = opened(config(segment_bytes=2000), directory=tmp_path / "follower")
    batches = [bytes(b.buffer) for b in leader.batches()]
    for i in range(0, len(batches), 3):  # fetches of up to three batches
        chunk = b"".join(batches[i:i + 3])
        info = follower.append_as_follower(chunk)
        assert info.first_offset == RecordBatch(batches[i]).base_offset
        assert info.last_offset == split(chunk)[-1].last_offset
    assert follower.log_end_offset == leader.log_end_offset
    assert follower.read(0, 10**7).records == leader.read(0, 10**7).records
    assert follower.epochs.entries == leader.epochs.entries
    assert [e for e, _ in follower.epochs.entries] == [2, 4, 9]
    with pytest.raises(InvalidRecordError):
        follower.append_as_follower(leader.read(0, 1).records)  # below the LEO


def test_append_as_follower_with_gap_starts_segment_at_batch(opened, tmp_path):
    leader = opened(directory=tmp_path / "leader")
    fill(leader, 10, max_records=3, epochs=(1,))
    start = leader.read(12, 1).first_offset
    follower = opened(directory=tmp_path / "follower")
    info = follower.append_as_follower(leader.read(start, 10**6).records)
    assert info.first_offset == start
    assert [s.base_offset for s in follower.segments] == [start]
    assert follower.read(start, 10**6).records == leader.read(start, 10**6).records
    # A gap in a non-empty log rolls a new segment at the gap.
    other = opened(directory=tmp_path / "other")
    other.append_as_follower(leader.read(0, 1).records)
    first_len = split(leader.read(0, 1).records)[0].last_offset + 1
    assert start > first_len
    other.append_as_follower(leader.read(start, 10**6).records)
    assert [s.base_offset for s in other.segments] == [0, start]
    assert other.log_end_offset == leader.log_end_offset


# ---------------------------------------------------------------------------------------------
# LogAppendTime, flush, close and reopen


def test_log_append_time_topic_stamps_batches(opened):
    clock = FakeClock(1_234.567)
    log = opened(config(message_timestamp_type="LogAppendTime"), clock=clock)
    sent = make_batch(3, ts=5, tag=1)
    info = log.append_as_leader(sent, 2)
    assert info.log_append_time == 1_234_567
    assert info.max_timestamp == 1_234_567
    stored = split(log.read(0, 1).records)[0]
    assert stored.is_valid()  # the CRC was recomputed over the new attributes and timestamp
    assert stored.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert stored.max_timestamp == 1_234_567
    assert stored.partition_leader_epoch == 2
    original = RecordBatch(sent)
    assert [(r.key, r.value) for r in stored.records()] == [(r.key, r.value) for r in original.records()]
    assert log.offset_for_timestamp(1_234_567) == (0, 1_234_567)
    clock.advance_ms(10)
    log.append_as_leader(make_batch(2, ts=5, tag=2), 2)
    assert log.offset_for_timestamp(1_234_568) == (3, 1_234_577)
    assert log.offset_for_timestamp(1_234_578) is None
    # The same producer batch on a CreateTime topic keeps its own timestamp.
    assert RecordBatch(sent).timestamp_type == TimestampType.CREATE_TIME


def _fsynced_inodes(monkeypatch) -> list[int]:
    seen: list[int] = []
    real = os.fsync

    def counting(fd):
        seen.append(os.fstat(fd).st_ino)
        return real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return seen


def test_flush_messages_1_fsyncs_every_append(opened, monkeypatch):
    log = opened(config(flush_messages=1))
    fsynced = _fsynced_inodes(monkeypatch)
    for i in range(4):
        info = log.append_as_leader(make_batch(2, tag=i), 0)
        assert log.recovery_point == info.last_offset + 1 == log.log_end_offset
        inode = os.stat(log.active_segment.log_path).st_ino
        assert inode in fsynced
        fsynced.clear()


def test_default_flush_leaves_appends_to_page_cache(opened, monkeypatch):
    log = opened()
    fsynced = _fsynced_inodes(monkeypatch)
    for i in range(4):
        log.append_as_leader(make_batch(2, tag=i), 0)
    assert log.recovery_point == 0
    assert os.stat(log.active_segment.log_path).st_ino not in fsynced
    log.flush()
    assert log.recovery_point == 8
    assert os.stat(log.active_segment.log_path).st_ino in fsynced


def test_flush_messages_counts_records(opened):
    log = opened(config(flush_messages=5))
    log.append_as_leader(make_batch(2), 0)
    log.append_as_leader(make_batch(2), 0)
    assert log.recovery_point == 0
    log.append_as_leader(make_batch(1), 0)
    assert log.recovery_point == 5


def test_close_and_reopen_is_clean(opened, tmp_path):
    cfg = config(segment_bytes=3000, index_interval_bytes=500)
    log = opened(cfg)
    appended = fill(log, 80, max_records=5, max_value=150, epochs=(3, 6))
    leo, epochs, bases = log.log_end_offset, log.epochs.entries, [s.base_offset for s in log.segments]
    log.close()
    marker = tmp_path / "topic-0" / CLEAN_SHUTDOWN_FILE
    assert marker.read_text() == f"1\n{leo}\n"
    with pytest.raises(LogClosedError):
        log.read(0, 100)
    with pytest.raises(LogClosedError):
        log.append_as_leader(make_batch(1), 6)
    reopened = opened(cfg)
    report = reopened.recovery
    assert report.clean_shutdown
    assert (report.segments_recovered, report.bytes_truncated, report.segments_dropped,
            report.indexes_rebuilt) == (0, 0, [], [])
    assert not marker.exists()  # a crash from now on must be seen as unclean
    assert reopened.log_end_offset == leo
    assert reopened.recovery_point == leo
    assert reopened.epochs.entries == epochs
    assert [s.base_offset for s in reopened.segments] == bases
    assert_every_offset_reads_back(reopened, appended)
    appended.add(reopened, make_batch(2, tag=1000), 6)
    assert appended.batches[-1][0] == leo


def test_reopen_without_close_is_unclean(opened, tmp_path):
    crashed = PartitionLog(tmp_path / "topic-0")
    appended = fill(crashed, 10, epochs=(1,))
    for seg in crashed.segments:  # a crash: file handles gone, no marker written
        seg.close()
    reopened = opened()
    assert not reopened.recovery.clean_shutdown
    assert reopened.recovery.bytes_truncated == 0
    assert reopened.log_end_offset == appended.batches[-1][1] + 1
    assert reopened.epochs.entries == [(1, 0)]
    assert_every_offset_reads_back(reopened, appended)


def test_new_log_is_clean_and_empty(opened):
    log = opened()
    assert log.recovery.clean_shutdown
    assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert log.read(0, 100).records == b""
    assert log.offset_for_timestamp(0) is None


def test_clean_shutdown_marker_with_unknown_version_is_refused(opened, tmp_path):
    log = opened()
    log.append_as_leader(make_batch(1), 0)
    log.close()
    (tmp_path / "topic-0" / CLEAN_SHUTDOWN_FILE).write_text("9\n1\n")
    with pytest.raises(UnsupportedFormatVersionError):
        PartitionLog(tmp_path / "topic-0")
