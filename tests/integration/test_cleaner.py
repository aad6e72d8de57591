"""The local cleaner over a real PartitionLog: compaction rounds, tombstones, crash safety, retention,
and the background thread."""

from __future__ import annotations

import os
import random
import threading
import time

import pytest

from lakelog.compaction import cleaner as cleaner_mod
from lakelog.compaction.cleaner import (
    CLEANER_CHECKPOINT_FILE,
    CleanerCheckpoint,
    LogCleaner,
    clean_log,
    maybe_truncate_cleaner_checkpoint,
    read_cleaner_checkpoint,
    write_cleaner_checkpoint,
)
from lakelog.compaction.compactor import CleaningTrigger
from lakelog.compaction.errors import CleaningAbortedError, CorruptCleanerCheckpointError
from lakelog.logstore.retention import apply_retention
from lakelog.infra.config import LogConfig
from lakelog.logstore.errors import OffsetOutOfRangeError, UnsupportedFormatVersionError
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, RecordBatch, build_batch
from lakelog.logstore.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment

T0 = 1_700_000_000_000  # ms
DAY = 86_400_000


class Clock:
    """An injected clock: PartitionLog takes seconds, the cleaner takes milliseconds."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


def config(**overrides) -> LogConfig:
    base = {"cleanup.policy": "compact", "segment.bytes": 600, "index.interval.bytes": 100,
            "delete.retention.ms": 1000}
    base.update({k.replace("_", "."): v for k, v in overrides.items()})
    return LogConfig(base)


def produce(log: PartitionLog, pairs: list[tuple[bytes, bytes | None]], ts: int) -> tuple[int, int]:
    """Append one producer batch of (key, value) pairs; return (first, last) offsets."""
    recs = [Record(i, ts, k, v) for i, (k, v) in enumerate(pairs)]
    info = log.append_as_leader(build_batch(recs), leader_epoch=0)
    return info.first_offset, info.last_offset


def fill(log: PartitionLog, *, keys: int, records: int, per_batch: int, ts: int, seed: int = 7,
         tombstone_every: int = 0) -> dict[int, tuple[bytes, bytes | None]]:
    """Append `records` keyed records; return offset -> (key, value) of everything appended."""
    rng = random.Random(seed)
    written: dict[int, tuple[bytes, bytes | None]] = {}
    n = 0
    while n < records:
        pairs = []
        for _ in range(min(per_batch, records - n)):
            key = f"key-{rng.randrange(keys):03d}".encode()
            value = None if tombstone_every and n % tombstone_every == tombstone_every - 1 else f"v{n}".encode()
            pairs.append((key, value))
            n += 1
        first, _ = produce(log, pairs, ts)
        for i, p in enumerate(pairs):
            written[first + i] = p
    return written


def read_all(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for b in log.batches():
        b.ensure_valid()
        out += [(r.offset, r.key, r.value) for r in b.records()]
    return out


def latest_per_key(written: dict[int, tuple[bytes, bytes | None]], below: int | None = None) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for off in sorted(written):
        if below is None or off < below:
            latest[written[off][0]] = off
    return latest


def expected_after_clean(written, upto: int) -> list[tuple[int, bytes, bytes | None]]:
    """Records below `upto` reduced to the latest per key (tombstones kept); everything from `upto` on."""
    latest = latest_per_key(written, upto)
    return [(o, *written[o]) for o in sorted(written) if o >= upto or latest[written[o][0]] == o]


def leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX)))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def open_logs():
    logs: list[PartitionLog] = []
    yield logs
    for log in logs:
        log.close()


@pytest.fixture
def make_log(tmp_path, clock, open_logs):
    def make(name: str = "topic-0", **overrides) -> PartitionLog:
        log = PartitionLog(tmp_path / name, config(**overrides), clock=clock)
        open_logs.append(log)
        return log
    return make


# ---------------------------------------------------------------------------------------------
# compaction rounds


def test_clean_keeps_the_latest_value_per_key_at_its_original_offset(make_log, clock, tmp_path):
    log = make_log()
    written = fill(log, keys=25, records=400, per_batch=4, ts=T0 - 10_000)
    log.roll()
    segments_before = len(log.segments)
    assert segments_before > 10
    result = clean_log(log, clock.ms)
    assert result.cleaned and result.trigger is CleaningTrigger.DIRTY_RATIO
    assert result.next_first_dirty_offset == log.log_end_offset == 400
    assert read_all(log) == expected_after_clean(written, 400)
    assert len(read_all(log)) == 25
    # Groups are sized by the segments' sizes before cleaning (as Kafka's), so the segments this
    # round shrank are merged by the next round; offsets still resolve through them.
    assert len(log.segments) == segments_before
    assert clean_log(log, clock.ms, force=True).cleaned
    assert len(log.segments) < segments_before / 4
    assert read_all(log) == expected_after_clean(written, 400)
    assert result.stats.records_read == 400 and result.stats.records_kept == 25
    for key, off in latest_per_key(written).items():
        got = log.read(off, 1)
        batch = RecordBatch(bytes(got.records))
        assert (off, key, written[off][1]) in [(r.offset, r.key, r.value) for r in batch.records()]
    assert log.log_start_offset == 0 and log.log_end_offset == 400
    assert leftovers(log.directory) == []
    assert read_cleaner_checkpoint(log.directory) == CleanerCheckpoint(400, None)
    # A reopened log reads the same records, and a further append continues at the same LEO.
    log.close()
    reopened = PartitionLog(tmp_path / "topic-0", config(), clock=clock)
    try:
        assert read_all(reopened) == expected_after_clean(written, 400)
        assert produce(reopened, [(b"key-000", b"new")], T0) == (400, 400)
        assert reopened.offset_for_timestamp(T0 - 10_000) is not None
    finally:
        reopened.close()


def test_a_follower_replicates_a_compacted_log(make_log, clock):
    leader = make_log("leader-0")
    written = fill(leader, keys=10, records=120, per_batch=4, ts=T0 - 10_000, tombstone_every=7)
    leader.roll()
    assert clean_log(leader, clock.ms).cleaned
    follower = make_log("follower-0")
    offset = 0
    while offset < leader.log_end_offset:
        fetched = leader.read(offset, 300)
        follower.append_as_follower(fetched.records)
        offset = follower.log_end_offset
    assert read_all(follower) == read_all(leader) == expected_after_clean(written, 120)
    assert follower.log_end_offset == leader.log_end_offset == 120


def test_active_segment_is_never_touched(make_log, clock):
    log = make_log(segment_bytes=10_000)
    produce(log, [(b"a", b"1"), (b"b", b"1")], T0)
    log.roll()
    produce(log, [(b"a", b"2"), (b"a", b"3"), (b"b", b"2")], T0)  # active: duplicates stay
    active = log.active_segment
    before = active.log_path.read_bytes()
    result = clean_log(log, clock.ms, force=True)
    assert result.cleaned and result.first_uncleanable_offset == 2
    assert log.active_segment is active and active.log_path.read_bytes() == before
    assert read_all(log) == [(0, b"a", b"1"), (1, b"b", b"1"), (2, b"a", b"2"), (3, b"a", b"3"), (4, b"b", b"2")]
    log.roll()
    assert clean_log(log, clock.ms).cleaned
    assert read_all(log) == [(3, b"a", b"3"), (4, b"b", b"2")]


def test_dirty_ratio_threshold_and_max_compaction_lag(make_log, clock):
    log = make_log(min_cleanable_dirty_ratio=0.5)
    written = fill(log, keys=10, records=200, per_batch=5, ts=T0 - 10_000)
    log.roll()
    assert clean_log(log, clock.ms).cleaned
    # A little new dirty data after a large clean section: below the ratio.
    written.update({o: p for o, p in zip(range(200, 210), [(b"key-001", b"late")] * 10)})
    produce(log, [(b"key-001", b"late")] * 10, T0 - 5_000)
    log.roll()
    skipped = clean_log(log, clock.ms)
    assert not skipped.cleaned and 0 < skipped.dirty_ratio < 0.5
    assert len([r for r in read_all(log) if r[1] == b"key-001"]) == 11
    # max.compaction.lag.ms forces the round once the dirty data is old enough.
    log.update_config(config(min_cleanable_dirty_ratio=0.5, max_compaction_lag_ms=4_000))
    forced = clean_log(log, clock.ms)
    assert forced.cleaned and forced.trigger is CleaningTrigger.MAX_COMPACTION_LAG
    assert read_all(log) == expected_after_clean(written, 210)


def test_tombstones_are_kept_for_delete_retention_then_dropped(make_log, clock):
    log = make_log(delete_retention_ms=60_000)
    produce(log, [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")], T0 - 1000)
    produce(log, [(b"a", None), (b"c", b"2")], T0 - 1000)
    log.roll()
    first = clean_log(log, clock.ms)
    assert first.cleaned and first.stats.tombstone_batches_stamped == 1
    assert read_all(log) == [(1, b"b", b"1"), (3, b"a", None), (4, b"c", b"2")]
    tomb_batch = [b for b in log.batches() if b.base_offset == 3][0]
    assert tomb_batch.delete_horizon_ms == clock.ms + 60_000
    assert read_cleaner_checkpoint(log.directory) == CleanerCheckpoint(5, clock.ms + 60_000)

    clock.ms += 59_999
    early = clean_log(log, clock.ms)
    assert not early.cleaned
    assert (3, b"a", None) in read_all(log)

    clock.ms += 1
    late = clean_log(log, clock.ms)
    assert late.cleaned and late.trigger is CleaningTrigger.DELETE_HORIZON
    assert late.stats.dropped_tombstones == 1
    assert read_all(log) == [(1, b"b", b"1"), (4, b"c", b"2")]
    assert read_cleaner_checkpoint(log.directory) == CleanerCheckpoint(5, None)
    assert log.log_end_offset == 5


def test_tombstone_of_a_key_written_again_never_resurrects_older_values(make_log, clock):
    log = make_log(delete_retention_ms=10)
    produce(log, [(b"k", b"old")], T0)
    produce(log, [(b"k", None)], T0)
    log.roll()
    assert clean_log(log, clock.ms).cleaned
    clock.ms += 10
    assert clean_log(log, clock.ms).cleaned
    assert read_all(log) == []
    produce(log, [(b"k", b"new")], T0)
    log.roll()
    clean_log(log, clock.ms, force=True)
    assert read_all(log) == [(2, b"k", b"new")]


def test_min_compaction_lag_leaves_young_records_alone(make_log, clock):
    log = make_log(min_compaction_lag_ms=60_000, segment_bytes=300)
    produce(log, [(b"a", b"1"), (b"b", b"1")], clock.ms - 120_000)
    produce(log, [(b"a", b"2"), (b"b", b"2")], clock.ms - 120_000)
    young_first, _ = produce(log, [(b"a", b"3"), (b"b", b"3")], clock.ms - 1_000)
    produce(log, [(b"a", b"4")], clock.ms - 1_000)
    log.roll()
    result = clean_log(log, clock.ms)
    assert result.cleaned and result.first_uncleanable_offset == young_first == 4
    assert read_all(log) == [(2, b"a", b"2"), (3, b"b", b"2"), (4, b"a", b"3"), (5, b"b", b"3"), (6, b"a", b"4")]
    assert read_cleaner_checkpoint(log.directory).first_dirty_offset == 4
    clock.ms += 60_000
    assert clean_log(log, clock.ms, force=True).cleaned
    assert read_all(log) == [(5, b"b", b"3"), (6, b"a", b"4")]


def test_high_watermark_bounds_cleaning(make_log, clock):
    log = make_log(segment_bytes=100_000)
    for i in range(10):
        produce(log, [(b"k", f"{i}".encode())], T0)
    log.roll()
    result = clean_log(log, clock.ms, high_watermark=6)
    assert result.cleaned and result.first_uncleanable_offset == 6 and result.next_first_dirty_offset == 6
    assert read_all(log) == [(5, b"k", b"5")] + [(i, b"k", f"{i}".encode()) for i in range(6, 10)]
    assert clean_log(log, clock.ms, high_watermark=10, force=True).cleaned
    assert read_all(log) == [(9, b"k", b"9")]


def test_a_full_offset_map_cleans_a_prefix_and_later_rounds_finish(make_log, clock):
    log = make_log()
    written = fill(log, keys=40, records=300, per_batch=3, ts=T0 - 10_000, seed=3)
    log.roll()
    first = clean_log(log, clock.ms, max_offset_map_entries=12)
    assert first.cleaned and first.offset_map_full and first.next_first_dirty_offset < 300
    assert read_all(log) == expected_after_clean(written, first.next_first_dirty_offset)
    rounds = 1
    while read_cleaner_checkpoint(log.directory).first_dirty_offset < 300:
        clean_log(log, clock.ms, max_offset_map_entries=12, force=True)
        rounds += 1
        assert rounds < 100
    assert rounds > 2
    assert read_all(log) == expected_after_clean(written, 300)


def test_keyless_records_are_dropped_and_compressed_batches_survive(make_log, clock):
    log = make_log(cleanup_policy="delete")  # keys are only required once the topic is compacted
    produce(log, [(None, b"x"), (b"a", b"1")], T0)
    from lakelog.logstore.compression import Compression
    recs = [Record(0, T0, b"a", b"2"), Record(1, T0, b"b", b"1"), Record(2, T0, b"b", b"2")]
    log.append_as_leader(build_batch(recs, compression=Compression.ZSTD), leader_epoch=3)
    log.roll()
    log.update_config(config())
    assert clean_log(log, clock.ms).cleaned
    assert read_all(log) == [(2, b"a", b"2"), (4, b"b", b"2")]
    batch = next(log.batches())
    assert batch.compression == Compression.ZSTD and batch.partition_leader_epoch == 3
    assert (batch.base_offset, batch.last_offset) == (2, 4)


def test_a_log_without_compact_policy_is_not_cleaned(make_log, clock):
    log = make_log(cleanup_policy="delete")
    produce(log, [(b"a", b"1"), (b"a", b"2")], T0)
    log.roll()
    assert not clean_log(log, clock.ms, force=True).cleaned
    assert len(read_all(log)) == 2


# ---------------------------------------------------------------------------------------------
# the checkpoint


def test_checkpoint_file_is_versioned_and_checked(tmp_path, make_log, clock):
    write_cleaner_checkpoint(tmp_path, CleanerCheckpoint(42, None))
    text = (tmp_path / CLEANER_CHECKPOINT_FILE).read_text()
    assert text == "0\n1\n42 -1\n"
    assert read_cleaner_checkpoint(tmp_path) == CleanerCheckpoint(42, None)
    write_cleaner_checkpoint(tmp_path, CleanerCheckpoint(7, 123))
    assert read_cleaner_checkpoint(tmp_path) == CleanerCheckpoint(7, 123)
    (tmp_path / CLEANER_CHECKPOINT_FILE).write_text("9\n1\n42 -1\n")
    with pytest.raises(UnsupportedFormatVersionError):
        read_cleaner_checkpoint(tmp_path)
    (tmp_path / CLEANER_CHECKPOINT_FILE).write_text("0\n1\n42\n")
    with pytest.raises(CorruptCleanerCheckpointError):
        read_cleaner_checkpoint(tmp_path)
    (tmp_path / CLEANER_CHECKPOINT_FILE).write_text("0\n1\n-5 -1\n")
    with pytest.raises(CorruptCleanerCheckpointError):
        read_cleaner_checkpoint(tmp_path)


def test_checkpoint_out_of_range_or_truncated_is_pulled_back(make_log, clock):
    log = make_log(segment_bytes=100_000)
    for i in range(6):
        produce(log, [(b"k", f"{i}".encode())], T0)
    log.roll()
    write_cleaner_checkpoint(log.directory, CleanerCheckpoint(1_000, None))  # beyond the LEO
    result = clean_log(log, clock.ms)
    assert result.first_dirty_offset == 0 and result.cleaned
    assert read_all(log) == [(5, b"k", b"5")]
    maybe_truncate_cleaner_checkpoint(log, 3)
    assert read_cleaner_checkpoint(log.directory).first_dirty_offset == 3
    maybe_truncate_cleaner_checkpoint(log, 5)
    assert read_cleaner_checkpoint(log.directory).first_dirty_offset == 3


# ---------------------------------------------------------------------------------------------
# crash safety


class Crash(Exception):
    """Stands for the process dying at this point."""


def crashed_reopen(tmp_path, clock) -> PartitionLog:
    """Open the directory as a restarted process would (no clean-shutdown marker was written)."""
    return PartitionLog(tmp_path / "topic-0", config(), clock=clock)


def make_dirty_log(make_log) -> tuple[PartitionLog, dict]:
    log = make_log()
    written = fill(log, keys=15, records=240, per_batch=4, ts=T0 - 10_000, seed=11)
    log.roll()
    log.flush()
    return log, written


@pytest.mark.parametrize("die_at_delete", [1, 2, 4])
def test_crash_after_swap_rename_is_completed_on_open(make_log, clock, tmp_path, monkeypatch, die_at_delete):
    log, written = make_dirty_log(make_log)
    assert clean_log(log, clock.ms).cleaned  # leaves many small segments for the next round to group
    written.update(fill(log, keys=15, records=60, per_batch=4, ts=T0 - 5_000, seed=12))
    log.roll()
    end = log.log_end_offset
    calls = {"n": 0}
    real_delete = LogSegment.delete_files

    def delete_then_die(self):
        calls["n"] += 1
        if calls["n"] == die_at_delete:  # the `.swap` is in place, some old segments are gone
            raise Crash()
        real_delete(self)

    small = [s for s in log.segments if s.size < 100]
    assert len(small) > 4  # the first group of the next round gathers several of them
    monkeypatch.setattr(LogSegment, "delete_files", delete_then_die)
    with pytest.raises(Crash):
        clean_log(log, clock.ms, force=True)
    monkeypatch.undo()
    assert any(n.endswith(".log" + SWAP_SUFFIX) for n in leftovers(log.directory))
    assert read_cleaner_checkpoint(log.directory).first_dirty_offset == 240  # from the first round

    reopened = crashed_reopen(tmp_path, clock)
    try:
        assert reopened.recovery.swaps_completed == 1
        assert leftovers(reopened.directory) == []
        records = read_all(reopened)
        offsets = [r[0] for r in records]
        assert offsets == sorted(set(offsets))  # nothing duplicated
        # Nothing lost: every record is one we wrote, and every key's latest value is there.
        assert all(written[o] == (k, v) for o, k, v in records)
        for key, off in latest_per_key(written).items():
            assert (off, key, written[off][1]) in records
        assert reopened.log_end_offset == end
        assert clean_log(reopened, clock.ms, force=True).cleaned
        assert read_all(reopened) == expected_after_clean(written, end)
    finally:
        reopened.close()


def test_crash_before_the_final_rename_is_completed_on_open(make_log, clock, tmp_path, monkeypatch):
    log, written = make_dirty_log(make_log)
    real_change = LogSegment.change_suffix

    def die_before_final(self, old, new):
        if old == SWAP_SUFFIX and new == "":
            raise Crash()
        real_change(self, old, new)

    monkeypatch.setattr(LogSegment, "change_suffix", die_before_final)
    with pytest.raises(Crash):
        clean_log(log, clock.ms)
    monkeypatch.undo()
    reopened = crashed_reopen(tmp_path, clock)
    try:
        assert reopened.recovery.swaps_completed == 1
        records = read_all(reopened)
        assert records[0][0] <= min(latest_per_key(written).values())
        assert all(written[o] == (k, v) for o, k, v in records)
        for key, off in latest_per_key(written).items():
            assert (off, key, written[off][1]) in records
        assert [r[0] for r in records] == sorted({r[0] for r in records})
    finally:
        reopened.close()


def test_crash_before_the_swap_leaves_the_original_log(make_log, clock, tmp_path, monkeypatch):
    log, written = make_dirty_log(make_log)

    def die(self, new, old, **kwargs):
        raise Crash()

    monkeypatch.setattr(PartitionLog, "replace_segments", die)
    with pytest.raises(Crash):
        clean_log(log, clock.ms)
    monkeypatch.undo()
    assert any(n.endswith(CLEANED_SUFFIX) for n in leftovers(log.directory))
    reopened = crashed_reopen(tmp_path, clock)
    try:
        assert leftovers(reopened.directory) == []
        assert read_all(reopened) == [(o, *written[o]) for o in sorted(written)]
    finally:
        reopened.close()


def test_a_stopped_round_swaps_nothing_and_leaves_no_files(make_log, clock):
    log, written = make_dirty_log(make_log)
    polls = {"n": 0}

    def stop_soon() -> bool:
        polls["n"] += 1
        return polls["n"] > 70  # after the map, inside the first groups

    with pytest.raises(CleaningAbortedError):
        clean_log(log, clock.ms, should_stop=stop_soon)
    assert leftovers(log.directory) == []
    assert not (log.directory / CLEANER_CHECKPOINT_FILE).exists() or \
        read_cleaner_checkpoint(log.directory).first_dirty_offset == 0
    records = read_all(log)
    assert all(written[o] == (k, v) for o, k, v in records)
    for key, off in latest_per_key(written).items():
        assert (off, key, written[off][1]) in records


def test_segments_removed_during_a_round_abort_it(make_log, clock):
    log, written = make_dirty_log(make_log)
    second_base = log.segments[1].base_offset
    state = {"done": False}

    def delete_records_meanwhile() -> bool:
        if not state["done"]:
            state["done"] = True
            log.maybe_increment_log_start_offset(second_base)  # DeleteRecords drops segment 0
        return False

    with pytest.raises(CleaningAbortedError):
        clean_log(log, clock.ms, should_stop=delete_records_meanwhile)
    assert leftovers(log.directory) == []
    assert read_all(log) == [(o, *written[o]) for o in sorted(written) if o >= second_base]
    assert clean_log(log, clock.ms).cleaned
    expected = expected_after_clean({o: p for o, p in written.items() if o >= second_base}, 240)
    assert read_all(log) == expected


# ---------------------------------------------------------------------------------------------
# retention


def delete_config(**overrides) -> dict:
    return {"cleanup_policy": "delete", "segment_bytes": 400, **overrides}


def test_retention_by_time_advances_the_log_start_and_keeps_the_active_segment(make_log, clock):
    log = make_log(**delete_config(retention_ms=60_000))
    for i in range(30):
        produce(log, [(b"k", f"old{i}".encode())], clock.ms - 120_000)
    old_end = log.log_end_offset
    for i in range(5):
        produce(log, [(b"k", f"new{i}".encode())], clock.ms)
    segments = log.segments
    result = apply_retention(log, clock.ms)
    assert result.deleted_base_offsets
    assert log.log_start_offset == log.segments[0].base_offset <= old_end
    assert all(s.max_timestamp > clock.ms - 60_000 or s is segments[-1] for s in log.segments)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)
    assert read_all(log)[-5:] == [(old_end + i, b"k", f"new{i}".encode()) for i in range(5)]
    # Everything expired: the active segment still stays.
    clock.ms += 10 * DAY
    apply_retention(log, clock.ms)
    assert len(log.segments) == 1 and log.segments[0] is segments[-1]
    assert log.log_start_offset == log.active_segment.base_offset


def test_retention_by_bytes_and_the_high_watermark(make_log, clock):
    log = make_log(**delete_config(retention_bytes=1000))
    for i in range(60):
        produce(log, [(b"k", f"{i:04d}".encode())], clock.ms)
    sizes = [s.size for s in log.segments]
    hw = log.segments[2].next_offset
    result = apply_retention(log, clock.ms, high_watermark=hw)
    assert len(result.deleted_base_offsets) == 3  # stopped by the HW
    assert log.log_start_offset == hw
    assert result.bytes_deleted == sum(sizes[:3])
    apply_retention(log, clock.ms)
    assert log.size_in_bytes - log.segments[0].size < 1000 <= log.size_in_bytes
    assert log.log_start_offset == log.segments[0].base_offset


def test_retention_ignores_compact_only_logs(make_log, clock):
    log = make_log(segment_bytes=400, retention_ms=1, retention_bytes=0)
    for i in range(40):
        produce(log, [(f"k{i}".encode(), b"v")], clock.ms - DAY)
    assert apply_retention(log, clock.ms).deleted_base_offsets == ()
    assert log.log_start_offset == 0


# ---------------------------------------------------------------------------------------------
# the background cleaner


def test_log_cleaner_services_delete_and_compact_logs(make_log, clock):
    compacted = make_log("compacted-0", cleanup_policy="compact,delete", retention_ms=DAY)
    written = fill(compacted, keys=5, records=100, per_batch=5, ts=clock.ms)
    compacted.roll()
    expired = make_log("expired-0", **delete_config(retention_ms=1000))
    for i in range(30):
        produce(expired, [(b"k", b"v" * 20)], clock.ms - 5000)
    hw = {"value": None}
    cleaner = LogCleaner(interval_ms=5, clock=clock)
    cleaner.register(compacted, lambda: hw["value"])
    cleaner.register(expired)
    cleaner.start()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if len(read_all(compacted)) == 5 and len(expired.segments) == 1:
                break
            time.sleep(0.01)
        assert read_all(compacted) == expected_after_clean(written, 100)
        assert len(expired.segments) == 1 and expired.log_start_offset == expired.active_segment.base_offset
        assert cleaner.passes >= 1 and list(cleaner.errors) == []
    finally:
        assert cleaner.stop(timeout_s=5)


def test_log_cleaner_run_once_records_errors_and_forgets_closed_logs(make_log, clock, tmp_path):
    good = make_log("good-0")
    produce(good, [(b"a", b"1"), (b"a", b"2")], T0)
    good.roll()
    bad = make_log("bad-0")
    produce(bad, [(b"a", b"1")], T0)
    bad.roll()
    (bad.directory / CLEANER_CHECKPOINT_FILE).write_text("0\n1\nnonsense\n")
    closed = PartitionLog(tmp_path / "closed-0", config(cleanup_policy="delete"), clock=clock)
    closed.close()
    cleaner = LogCleaner(interval_ms=1000, clock=clock)
    for log in (good, bad, closed):
        cleaner.register(log)
    entries = {e.directory.name: e for e in cleaner.run_once()}
    assert entries["good-0"].clean.cleaned and entries["good-0"].error is None
    assert isinstance(entries["bad-0"].error, CorruptCleanerCheckpointError)
    assert entries["closed-0"].error is not None
    assert [d.name for d, _ in cleaner.errors] == ["bad-0"]
    assert closed not in cleaner.logs and good in cleaner.logs
    assert read_all(good) == [(1, b"a", b"2")]
    assert cleaner.stop(timeout_s=1)  # never started: nothing to join


def test_log_cleaner_stop_interrupts_a_long_round(make_log, clock, monkeypatch):
    log = make_log()
    fill(log, keys=30, records=600, per_batch=3, ts=T0 - 10_000)
    log.roll()
    entered = threading.Event()
    real_batches = cleaner_mod._batches
    yielded = [0]
    total = sum(1 for _ in real_batches(log.segments, lambda: False))  # batches of one whole round

    def slow_batches(segments, should_stop):
        for b in real_batches(segments, should_stop):
            entered.set()
            yielded[0] += 1
            time.sleep(0.01)
            yield b

    monkeypatch.setattr(cleaner_mod, "_batches", slow_batches)
    cleaner = LogCleaner(interval_ms=1, clock=clock)
    cleaner.register(log)
    cleaner.start()
    assert entered.wait(5)
    assert cleaner.stop(timeout_s=60)
    assert 0 < yielded[0] < total, (yielded[0], total)  # stopped inside the round, not after it
    assert leftovers(log.directory) == []
    assert os.path.exists(log.directory)


def test_transaction_markers_go_once_no_data_is_left_and_delete_retention_passed(make_log, clock):
    """Kafka's cleaner rules for markers: a round that still sees data of a transaction keeps its
    marker (and an ABORT's `.txnindex` entry); the next finds it empty and stamps its delete
    horizon (the ABORT's entry goes); a round at the horizon, triggered by it, drops it."""
    from lakelog.index.transaction_index import AbortedTxn

    log = make_log()

    def txn(pid: int, key: bytes, value: bytes) -> None:
        log.append_as_leader(build_batch([Record(0, T0, key, value)], producer_id=pid, producer_epoch=0,
                                         base_sequence=0, is_transactional=True), 0)

    produce(log, [(b"k", b"committed")], T0)        # 0
    txn(1, b"k", b"aborted")                        # 1
    log.append_control(1, 0, False, 0, 0)           # 2 ABORT
    txn(2, b"j", b"in-txn")                         # 3
    log.append_control(2, 0, True, 0, 0)            # 4 COMMIT
    produce(log, [(b"j", b"later")], T0)            # 5 supersedes 3
    for i in range(8):
        produce(log, [(b"f%d" % i, b"x" * 40)], T0)  # 6..13
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    end = log.log_end_offset

    def markers() -> list[tuple[int, int | None]]:
        return [(b.base_offset, b.delete_horizon_ms) for b in log.batches() if b.is_control]

    first = clean_log(log, T0, high_watermark=log.high_watermark, force=True)
    assert first.cleaned and first.stats.dropped_aborted == 1 and first.stats.markers_dropped == 0
    assert markers() == [(2, None), (4, None)]      # this round still saw data of both
    assert log.aborted_transactions(0, end) == [AbortedTxn(1, 1, 2, 3)]
    values = {r.offset: r.value for b in log.batches() for r in b.records() if not b.is_control}
    assert 1 not in values and 3 not in values and values[0] == b"committed"

    second = clean_log(log, T0 + 10, high_watermark=log.high_watermark, force=True)
    assert second.cleaned and markers() == [(2, T0 + 1010), (4, T0 + 1010)]
    assert log.aborted_transactions(0, end) == []   # no data left for the entry to hide
    assert read_cleaner_checkpoint(log.directory).next_delete_horizon_ms == T0 + 1010

    assert not clean_log(log, T0 + 1009, high_watermark=log.high_watermark).cleaned  # not yet
    third = clean_log(log, T0 + 1010, high_watermark=log.high_watermark)
    assert third.cleaned and third.trigger is CleaningTrigger.DELETE_HORIZON
    assert markers() == [] and third.stats.markers_dropped == 2
    assert {r.offset: r.value for b in log.batches() for r in b.records()} == values  # only markers went
    assert log.last_stable_offset == log.high_watermark and log.log_end_offset == end
