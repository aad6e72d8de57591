"""Crash tests of the partition log: every fully written batch survives, nothing corrupt is served.

Each test builds a log, "crashes" it (SIGKILL of a writer process, or closing the files without the
clean-shutdown marker), damages files the way a crash or a bad disk does, reopens, and checks the
result against an oracle kept by the test or parsed independently from the original files.
Seeds are printed (shown by pytest on failure).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from lakelog.index import offset_index, time_index
from lakelog.infra.config import LogConfig
from lakelog.logstore.errors import CorruptRecordError, OffsetOutOfRangeError
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, RecordBatch, build_batch, iter_batches
from tests.faults.appender import CONFIG as APPENDER_CONFIG
from tests.faults.appender import digest

APPENDER = Path(__file__).with_name("appender.py")
PROJECT_ROOT = Path(__file__).resolve().parents[2]

# ---------------------------------------------------------------------------------------------
# helpers


class Stored:
    """One batch as the log stored it."""

    __slots__ = ("base", "last", "epoch", "data", "max_timestamp", "records")

    def __init__(self, data: bytes) -> None:
        batch = RecordBatch(data)
        self.base, self.last = batch.base_offset, batch.last_offset
        self.epoch, self.max_timestamp = batch.partition_leader_epoch, batch.max_timestamp
        self.data = data
        self.records = [(r.offset, r.timestamp) for r in batch.records()]


def build_log(directory: Path, cfg: LogConfig, n_batches: int, rng: random.Random, *, epoch_change: float = 0.05,
              max_records: int = 6, max_value: int = 250) -> tuple[PartitionLog, list[Stored]]:
    """Append `n_batches` producer batches with wandering timestamps and growing epochs."""
    log = PartitionLog(directory, cfg)
    epoch = 0
    for i in range(n_batches):
        if rng.random() < epoch_change:
            epoch += 1
        count = rng.randint(1, max_records)
        records = [Record(j, 50_000 + 40 * i + rng.randint(-500, 500), f"k{i}.{j}".encode(),
                          rng.randbytes(rng.randint(0, max_value))) for j in range(count)]
        log.append_as_leader(build_batch(records), epoch)
    stored = [Stored(bytes(b.buffer)) for b in log.batches()]
    return log, stored


def crash(log: PartitionLog) -> None:
    """Lose the process: file handles go away and no clean-shutdown marker is written."""
    for seg in log.segments:
        seg.close()


def layout(log_file: Path) -> list[tuple[int, Stored]]:
    """(position, batch) of every batch of a whole `.log` file, parsed independently of the log."""
    data = log_file.read_bytes()
    return [(pos, Stored(bytes(b.buffer))) for pos, b in iter_batches(data)]


def assert_files_hold_whole_batches(directory: Path) -> None:
    """Every segment file on disk is whole, CRC-valid batches end to end: no torn or stray bytes."""
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        end = 0
        for pos, batch in iter_batches(data):  # raises on a torn tail
            assert batch.is_valid(), f"{path.name} batch at {pos}"
            end = pos + batch.size_in_bytes
        assert end == len(data), path.name


def first_batch(log: PartitionLog, offset: int) -> RecordBatch:
    got = log.read(offset, 1)
    batches = list(iter_batches(got.records))
    assert batches, f"nothing read at offset {offset}"
    return RecordBatch(bytes(batches[0][1].buffer))


def assert_serves_exactly(log: PartitionLog, expected: list[Stored]) -> None:
    """Every expected batch is read back byte for byte at each of its offsets; offsets that no
    expected batch holds read as the next expected batch; the full scan is CRC-valid and matches."""
    by_offset = sorted(expected, key=lambda s: s.base)
    i = 0
    for offset in range(log.log_start_offset, log.log_end_offset):
        while i < len(by_offset) and by_offset[i].last < offset:
            i += 1
        assert i < len(by_offset), f"offset {offset} below the LEO {log.log_end_offset} holds nothing"
        batch = first_batch(log, offset)
        assert bytes(batch.buffer) == by_offset[i].data, f"offset {offset}"
        assert batch.is_valid()
    assert [bytes(b.buffer) for b in log.batches()] == [s.data for s in by_offset]


def assert_epochs_match_batches(log: PartitionLog, expected: list[Stored], *, exact_latest: bool = True) -> None:
    for s in expected:
        assert log.epochs.epoch_for_offset(s.base) == s.epoch, f"epoch of batch {s.base}"
    assert all(o < log.log_end_offset for _, o in log.epochs.entries)
    if exact_latest:
        assert log.epochs.latest_epoch == max((s.epoch for s in expected), default=-1)


def assert_appends_continue(log: PartitionLog, cfg: LogConfig) -> None:
    leo = log.log_end_offset
    payload = build_batch([Record(0, 99_999, b"after", b"crash"), Record(1, 99_999, b"after", b"crash2")])
    info = log.append_as_leader(payload, log.latest_epoch + 1)
    assert (info.first_offset, info.last_offset) == (leo, leo + 1)
    assert first_batch(log, leo + 1).base_offset == leo
    log.close()
    assert_files_hold_whole_batches(log.directory)
    again = PartitionLog(log.directory, cfg)
    try:
        assert again.recovery.clean_shutdown
        assert (again.recovery.bytes_truncated, again.recovery.indexes_rebuilt) == (0, [])
        assert again.log_end_offset == leo + 2
        assert bytes(first_batch(again, leo).buffer)[16:] == payload[16:]
    finally:
        again.close()


def timestamp_oracle(expected: list[Stored], t: int, start: int = 0):
    for s in sorted(expected, key=lambda s: s.base):
        for offset, ts in s.records:
            if offset >= start and ts >= t:
                return offset, ts
    return None


# ---------------------------------------------------------------------------------------------
# (1) SIGKILL while appending


@pytest.mark.timeout(30)
@pytest.mark.parametrize("seed", [11, 23, 37, 59])
def test_kill_during_append_keeps_every_acknowledged_batch(tmp_path, seed):
    print(f"seed={seed}")
    rng = random.Random(seed)
    directory = tmp_path / "topic-0"
    proc = subprocess.Popen([sys.executable, str(APPENDER), str(directory), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=PROJECT_ROOT)
    target = rng.randint(40, 700)
    lines: list[bytes] = []
    try:
        while len(lines) < target:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line)
        time.sleep(rng.uniform(0, 0.02))  # let the kill land anywhere in an append
        os.kill(proc.pid, signal.SIGKILL)
        rest, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, err.decode(errors="replace")
    lines += rest.splitlines(keepends=True)
    acked = [line.split() for line in lines if line.endswith(b"\n")]
    print(f"seed={seed}: {len(acked)} acknowledged batches")
    assert len(acked) >= target

    cfg = LogConfig(APPENDER_CONFIG)
    log = PartitionLog(directory, cfg)
    report = log.recovery
    print(f"seed={seed}: {report}")
    assert not report.clean_shutdown
    assert_files_hold_whole_batches(directory)
    for base, last, epoch, sha in acked:
        batch = first_batch(log, int(base))
        assert (batch.base_offset, batch.last_offset) == (int(base), int(last))
        assert batch.partition_leader_epoch == int(epoch)
        assert digest(bytes(batch.buffer)[8:]) == sha.decode()
    # Nothing after the acknowledged batches is corrupt: the whole log is CRC-valid and gapless.
    everything = [Stored(bytes(b.buffer)) for b in log.batches()]
    assert everything[0].base == 0
    for prev, nxt in zip(everything, everything[1:]):
        assert nxt.base == prev.last + 1
    assert everything[-1].last + 1 == log.log_end_offset >= int(acked[-1][1]) + 1
    assert_epochs_match_batches(log, everything)
    assert_appends_continue(log, cfg)


# ---------------------------------------------------------------------------------------------
# (2) a torn tail after a crash

TORN_CFG = LogConfig({"segment.bytes": 6000, "index.interval.bytes": 400})


def _cut(file_batches: list[tuple[int, Stored]], size: int, where: str, rng: random.Random) -> int:
    """A byte position to cut the file at: random, or at a chosen distance into a random batch."""
    if where == "random":
        return rng.randrange(0, size)
    pos, s = file_batches[rng.randrange(len(file_batches))]
    into = {"boundary": 0, "1": 1, "11": 11, "40": 40, "61": 61, "last": len(s.data) - 1}[where]
    return pos + into


def _expected_after_cut(file_batches: list[tuple[int, Stored]], cut: int) -> tuple[list[Stored], list[Stored], int]:
    kept = [s for pos, s in file_batches if pos + len(s.data) <= cut]
    lost = [s for pos, s in file_batches if pos + len(s.data) > cut]
    kept_end = max((pos + len(s.data) for pos, s in file_batches if pos + len(s.data) <= cut), default=0)
    return kept, lost, cut - kept_end


@pytest.mark.parametrize("seed, where", [(1, "random"), (2, "random"), (3, "random"), (4, "random"),
                                         (5, "boundary"), (6, "1"), (7, "11"), (8, "40"), (9, "61"),
                                         (10, "last")])
def test_torn_active_segment_is_cut_to_its_whole_batches(tmp_path, seed, where):
    print(f"seed={seed} cut={where}")
    rng = random.Random(seed)
    directory = tmp_path / "topic-0"
    log, stored = build_log(directory, TORN_CFG, 110, rng, epoch_change=0.3)
    active = log.active_segment
    active_base, active_file = active.base_offset, active.log_path
    crash(log)
    file_batches = layout(active_file)
    assert len(file_batches) >= 2
    size = active_file.stat().st_size
    cut = _cut(file_batches, size, where, rng)
    os.truncate(active_file, cut)
    kept_here, lost, torn = _expected_after_cut(file_batches, cut)
    print(f"seed={seed}: cut active segment {active_base} of {size} bytes at {cut}, torn {torn} bytes, "
          f"{len(lost)} batch(es) lost")
    lost_bases = {s.base for s in lost}
    expected = [s for s in stored if s.base not in lost_bases]

    log = PartitionLog(directory, TORN_CFG)
    report = log.recovery
    assert not report.clean_shutdown
    assert report.bytes_truncated == torn
    assert log.log_end_offset == (kept_here[-1].last + 1 if kept_here else active_base)
    assert_files_hold_whole_batches(directory)
    assert_serves_exactly(log, expected)
    assert log.read(log.log_end_offset, 10**6).records == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 100)
    assert_epochs_match_batches(log, expected)
    assert_appends_continue(log, TORN_CFG)


@pytest.mark.parametrize("seed, where", [(21, "random"), (22, "random"), (23, "random"), (24, "boundary"),
                                         (25, "1"), (26, "11"), (27, "40"), (28, "61"), (29, "last")])
def test_torn_sealed_segment_keeps_valid_prefix_and_later_segments(tmp_path, seed, where):
    print(f"seed={seed} cut={where}")
    rng = random.Random(seed)
    directory = tmp_path / "topic-0"
    log, stored = build_log(directory, TORN_CFG, 110, rng, epoch_change=0.08)
    segments = log.segments
    assert len(segments) >= 4
    victim = segments[rng.randrange(1, len(segments) - 1)]
    victim_base, victim_file = victim.base_offset, victim.log_path
    leo = log.log_end_offset
    crash(log)
    file_batches = layout(victim_file)
    size = victim_file.stat().st_size
    cut = _cut(file_batches, size, where, rng)
    os.truncate(victim_file, cut)
    _, lost, torn = _expected_after_cut(file_batches, cut)
    print(f"seed={seed}: cut sealed segment {victim_base} of {size} bytes at {cut}, torn {torn} bytes, "
          f"{len(lost)} batch(es) lost")
    lost_bases = {s.base for s in lost}
    expected = [s for s in stored if s.base not in lost_bases]

    log = PartitionLog(directory, TORN_CFG)
    report = log.recovery
    print(f"seed={seed}: {report}")
    assert not report.clean_shutdown
    assert report.bytes_truncated == torn
    assert log.log_end_offset == leo  # later segments hold whole, valid batches: they stay
    assert_files_hold_whole_batches(directory)
    assert_serves_exactly(log, expected)
    assert_epochs_match_batches(log, expected, exact_latest=False)
    assert_appends_continue(log, TORN_CFG)


@pytest.mark.parametrize("seed", [31, 32, 33])
def test_torn_segment_at_or_after_recovery_point_drops_later_segments(tmp_path, seed):
    """With no recovery point checkpoint every segment is re-read; a tear ends the log there."""
    print(f"seed={seed}")
    rng = random.Random(seed)
    directory = tmp_path / "topic-0"
    log, stored = build_log(directory, TORN_CFG, 110, rng, epoch_change=0.08)
    segments = log.segments
    assert len(segments) >= 4
    victim = segments[rng.randrange(0, len(segments) - 2)]
    later = [(s.base_offset, s.size) for s in segments if s.base_offset > victim.base_offset]
    victim_base, victim_file = victim.base_offset, victim.log_path
    crash(log)
    (directory / "recovery-point-checkpoint").unlink()
    file_batches = layout(victim_file)
    pos, torn_batch = file_batches[rng.randrange(1, len(file_batches))]
    cut = pos + rng.randrange(1, len(torn_batch.data))
    os.truncate(victim_file, cut)
    print(f"seed={seed}: cut segment {victim_base} at {cut}, inside batch {torn_batch.base}")
    expected = [s for s in stored if s.base < torn_batch.base]

    log = PartitionLog(directory, TORN_CFG)
    report = log.recovery
    print(report)
    assert not report.clean_shutdown
    assert report.segments_dropped == [b for b, _ in later]
    assert report.bytes_truncated == (cut - pos) + sum(size for _, size in later)
    assert log.log_end_offset == torn_batch.base
    assert_files_hold_whole_batches(directory)
    assert [s.base_offset for s in log.segments][-1] == victim_base
    assert not any((directory / f"{b:020d}.log").exists() for b, _ in later)
    assert_serves_exactly(log, expected)
    assert_epochs_match_batches(log, expected)
    assert_appends_continue(log, TORN_CFG)


def test_torn_tail_below_log_start_offset_restarts_log_at_its_start(tmp_path):
    """The log start offset never moves backwards, even when recovery cuts the LEO below it."""
    directory = tmp_path / "topic-0"
    log, _ = build_log(directory, TORN_CFG, 20, random.Random(34))
    leo = log.log_end_offset
    assert log.maybe_increment_log_start_offset(leo)  # DeleteRecords up to the end
    active = log.active_segment.log_path
    crash(log)
    os.truncate(active, active.stat().st_size - 10)  # the last batch is torn
    log = PartitionLog(directory, TORN_CFG)
    try:
        assert not log.recovery.clean_shutdown
        assert log.log_start_offset == leo
        assert log.log_end_offset == leo
        assert log.read(leo, 10**6).records == b""
        info = log.append_as_leader(build_batch([Record(0, 1, b"k", b"v")]), 9)
        assert info.first_offset == leo
    finally:
        log.close()


# ---------------------------------------------------------------------------------------------
# (3) damaged indexes

INDEX_CFG = LogConfig({"segment.bytes": 12000, "index.interval.bytes": 1000})


def _damage_index(path: Path, how: str, rng: random.Random, batch_starts: list[int]) -> None:
    data = path.read_bytes()
    entry = 8 if path.suffix == ".index" else 12
    entries = [data[i:i + entry] for i in range(0, len(data), entry)]
    if how == "garbage":
        path.write_bytes(rng.randbytes(max(len(data), 5 * entry) // entry * entry))
    elif how == "torn":
        path.write_bytes(data[:-3])
    elif how == "out_of_order":
        assert len(entries) >= 2
        entries[0], entries[1] = entries[1], entries[0]
        path.write_bytes(b"".join(entries))
    elif how == "beyond":  # the last entry points past the end of the segment
        assert entries
        if entry == 8:
            rel, _ = offset_index.ENTRY.unpack(entries[-1])
            entries[-1] = offset_index.ENTRY.pack(rel, 10**8)
        else:
            ts, _ = time_index.ENTRY.unpack(entries[-1])
            entries[-1] = time_index.ENTRY.pack(ts, 10**6)
        path.write_bytes(b"".join(entries))
    elif how in ("mid_batch", "other_batch"):
        # Structurally sound (entries still increase) but a middle entry points at a wrong place.
        assert len(entries) >= 3
        decoded = [offset_index.ENTRY.unpack(e) for e in entries]
        # A middle entry (not the last) with another batch start between it and the one before.
        k = next(k for k in range(len(entries) // 2, len(entries) - 1)
                 if any(decoded[k - 1][1] < p < decoded[k][1] for p in batch_starts))
        rel, pos = decoded[k]
        if how == "mid_batch":
            wrong = pos - 1  # the last byte of the batch before
        else:
            wrong = max(p for p in batch_starts if p < pos)  # the start of the batch before
        assert decoded[k - 1][1] < wrong < pos
        entries[k] = offset_index.ENTRY.pack(rel, wrong)
        path.write_bytes(b"".join(entries))
    else:
        raise AssertionError(how)


def _assert_index_sound(log: PartitionLog, base: int) -> None:
    """The damaged segment's indexes, as now on disk, describe its `.log` correctly."""
    seg = next(s for s in log.segments if s.base_offset == base)
    batches = layout(seg.log_path)
    by_pos = {pos: s for pos, s in batches}
    raw = seg.offset_index.path.read_bytes()
    rel, pos = offset_index.decode(raw)
    for r, p in zip(rel, pos):
        assert p in by_pos and by_pos[p].last == base + r, f"offset index entry ({base + r}, {p})"
    assert list(rel) == sorted(set(rel)) and list(pos) == sorted(set(pos))
    ts, trel = time_index.decode(seg.time_index.path.read_bytes())
    assert ts == sorted(set(ts))
    for t, r in zip(ts, trel):
        upto = [s for _, s in batches if s.last <= base + r]
        assert upto and max(s.max_timestamp for s in upto) == t, f"time index entry ({t}, {base + r})"


DAMAGES = [("index", "garbage"), ("index", "torn"), ("index", "out_of_order"), ("index", "beyond"),
           ("index", "mid_batch"), ("index", "other_batch"),
           ("timeindex", "garbage"), ("timeindex", "torn"), ("timeindex", "out_of_order"),
           ("timeindex", "beyond")]


@pytest.mark.parametrize("shutdown", ["clean", "unclean"])
@pytest.mark.parametrize("target", ["sealed", "active"])
@pytest.mark.parametrize("kind, how", DAMAGES)
def test_damaged_index_is_rebuilt_and_lookups_stay_right(tmp_path, shutdown, target, kind, how):
    seed = zlib.crc32(f"{shutdown}/{target}/{kind}/{how}".encode())
    print(f"seed={seed} shutdown={shutdown} target={target} {kind}:{how}")
    rng = random.Random(seed)
    directory = tmp_path / "topic-0"
    log, stored = build_log(directory, INDEX_CFG, 70, rng, epoch_change=0.03)
    # Make sure the active segment has several index entries of both kinds.
    while len(log.active_segment.offset_index) < 4 or len(log.active_segment.time_index) < 3 \
            or log.active_segment.size < 3000:
        payload = build_batch([Record(j, 60_000 + len(stored) * 40 + j, b"x", rng.randbytes(150)) for j in range(3)])
        info = log.append_as_leader(payload, log.latest_epoch)
        stored.append(Stored(bytes(first_batch(log, info.first_offset).buffer)))
    segments = log.segments
    assert len(segments) >= 3
    seg = segments[1] if target == "sealed" else segments[-1]
    base = seg.base_offset
    batch_starts = [pos for pos, _ in layout(seg.log_path)]
    index_path = seg.offset_index.path if kind == "index" else seg.time_index.path
    if shutdown == "clean":
        log.close()
    else:
        crash(log)
    _damage_index(index_path, how, rng, batch_starts)

    log = PartitionLog(directory, INDEX_CFG)
    try:
        report = log.recovery
        print(report)
        assert report.clean_shutdown == (shutdown == "clean")
        assert report.bytes_truncated == 0
        assert log.log_end_offset == stored[-1].last + 1
        assert_serves_exactly(log, stored)
        queries = sorted({ts for s in stored for _, ts in s.records})
        for t in queries[::7] + [queries[-1], queries[-1] + 1]:
            assert log.offset_for_timestamp(t) == timestamp_oracle(stored, t), t
        # Rebuilt, and the rebuild is reported (an unclean shutdown re-reads the active segment whole):
        # at open when the structural checks catch it, or by the first lookup the entry misleads.
        if shutdown == "unclean" and target == "active":
            assert report.segments_recovered >= 1
        else:
            assert base in report.indexes_rebuilt or base in log.index_rebuilds_on_read
        _assert_index_sound(log, base)
    finally:
        log.close()


# ---------------------------------------------------------------------------------------------
# (4) a flipped bit inside a batch

FLIP_CFG = LogConfig({"segment.bytes": 5000, "index.interval.bytes": 500})


@pytest.mark.parametrize("seed, shutdown", [(41, "open"), (42, "clean"), (43, "unclean"),
                                            (44, "open"), (45, "clean"), (46, "unclean")])
def test_flipped_byte_in_sealed_segment_is_refused_never_served(tmp_path, seed, shutdown):
    print(f"seed={seed} shutdown={shutdown}")
    rng = random.Random(seed)
    directory = tmp_path / "topic-0"
    log, stored = build_log(directory, FLIP_CFG, 90, rng)
    segments = log.segments
    assert len(segments) >= 4
    seg = segments[rng.randrange(0, len(segments) - 1)]
    file_batches = layout(seg.log_path)
    k = rng.randrange(len(file_batches))
    pos, bad = file_batches[k]
    flip_at = pos + rng.randrange(21, len(bad.data))  # inside what the CRC covers
    print(f"seed={seed}: flip byte {flip_at} of segment {seg.base_offset}, batch {bad.base}..{bad.last}")
    seg_file = seg.log_path
    if shutdown == "clean":
        log.close()
    elif shutdown == "unclean":
        crash(log)
    with open(seg_file, "r+b") as f:
        f.seek(flip_at)
        byte = f.read(1)
        f.seek(flip_at)
        f.write(bytes([byte[0] ^ (1 << rng.randrange(8))]))
    if shutdown != "open":
        log = PartitionLog(directory, FLIP_CFG)
        assert log.recovery.bytes_truncated == 0  # a sealed segment's damage is refused on read
    try:
        leo = log.log_end_offset
        assert leo == stored[-1].last + 1
        for offset in range(bad.base, bad.last + 1):
            with pytest.raises(CorruptRecordError):
                log.read(offset, 1)
        # A read that starts before the bad batch never returns it.
        start = file_batches[0][1].base
        try:
            got = log.read(start, 10**7)
        except CorruptRecordError:
            pass
        else:
            returned = [RecordBatch(bytes(b.buffer)) for _, b in iter_batches(got.records)]
            assert all(b.last_offset < bad.base and b.is_valid() for b in returned)
        # Everything else is served, also up to the bad batch with a bound.
        good = [s for s in stored if s.base != bad.base]
        for s in good:
            assert bytes(first_batch(log, s.base).buffer) == s.data
            assert bytes(first_batch(log, s.last).buffer) == s.data
        before = [s for s in good if start <= s.base < bad.base]
        got = log.read(start, 10**7, max_offset=bad.base)
        assert got.records == b"".join(s.data for s in before)
        with pytest.raises(CorruptRecordError):
            list(log.batches())
    finally:
        log.close()


@pytest.mark.parametrize("seed", [51, 52, 53])
def test_flipped_byte_in_active_segment_after_crash_cuts_the_log_there(tmp_path, seed):
    print(f"seed={seed}")
    rng = random.Random(seed)
    directory = tmp_path / "topic-0"
    log, stored = build_log(directory, FLIP_CFG, 90, rng, epoch_change=0.1)
    active_file = log.active_segment.log_path
    crash(log)
    file_batches = layout(active_file)
    k = rng.randrange(len(file_batches))
    pos, bad = file_batches[k]
    flip_at = pos + rng.randrange(21, len(bad.data))
    print(f"seed={seed}: flip byte {flip_at} of the active segment, batch {bad.base}..{bad.last}")
    data = bytearray(active_file.read_bytes())
    data[flip_at] ^= 0x10
    active_file.write_bytes(bytes(data))
    log = PartitionLog(directory, FLIP_CFG)
    assert not log.recovery.clean_shutdown
    assert log.recovery.bytes_truncated == len(data) - pos
    assert log.log_end_offset == bad.base
    assert_files_hold_whole_batches(directory)
    expected = [s for s in stored if s.base < bad.base]
    assert_serves_exactly(log, expected)
    assert_epochs_match_batches(log, expected)
    assert_appends_continue(log, FLIP_CFG)


# ---------------------------------------------------------------------------------------------
# (5) a crash in the middle of a compaction swap

SWAP_CFG = LogConfig({"segment.bytes": 3000, "index.interval.bytes": 400})


def _copy_segment(directory: Path, base: int, suffix: str) -> list[str]:
    names = []
    for ext in (".log", ".index", ".timeindex"):
        src = directory / f"{base:020d}{ext}"
        dst = directory / f"{base:020d}{ext}{suffix}"
        shutil.copyfile(src, dst)
        names.append(dst.name)
    return names


def _close_or_crash(log: PartitionLog, shutdown: str) -> None:
    if shutdown == "clean":
        log.close()
    else:
        crash(log)


@pytest.mark.parametrize("shutdown", ["clean", "unclean"])
def test_leftover_cleaned_files_are_removed(tmp_path, shutdown):
    directory = tmp_path / "topic-0"
    log, stored = build_log(directory, SWAP_CFG, 60, random.Random(61))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 4
    _close_or_crash(log, shutdown)
    leftovers = _copy_segment(directory, bases[0], ".cleaned") + _copy_segment(directory, bases[1], ".cleaned")
    (directory / f"{bases[2]:020d}.log.deleted").write_bytes(b"half deleted")
    (directory / "leader-epoch-checkpoint.tmp").write_bytes(b"0\n1\n99")  # a checkpoint write cut short
    log = PartitionLog(directory, SWAP_CFG)
    try:
        report = log.recovery
        assert sorted(report.leftovers_removed) == sorted(
            leftovers + [f"{bases[2]:020d}.log.deleted", "leader-epoch-checkpoint.tmp"])
        assert report.swaps_completed == 0
        remaining = {p.name for p in directory.iterdir()}
        assert not any(n.endswith((".cleaned", ".deleted", ".swap", ".tmp")) for n in remaining)
        assert_epochs_match_batches(log, stored)
        assert [s.base_offset for s in log.segments] == bases
        assert_serves_exactly(log, stored)
    finally:
        log.close()


@pytest.mark.parametrize("shutdown", ["clean", "unclean"])
def test_swap_after_old_segments_were_deleted_is_completed(tmp_path, shutdown):
    directory = tmp_path / "topic-0"
    log, stored = build_log(directory, SWAP_CFG, 60, random.Random(62))
    bases = [s.base_offset for s in log.segments]
    _close_or_crash(log, shutdown)
    _copy_segment(directory, bases[1], ".swap")
    for ext in (".log", ".index", ".timeindex"):
        (directory / f"{bases[1]:020d}{ext}").unlink()
    log = PartitionLog(directory, SWAP_CFG)
    try:
        assert log.recovery.swaps_completed == 1
        assert not any(p.name.endswith(".swap") for p in directory.iterdir())
        assert [s.base_offset for s in log.segments] == bases
        assert_serves_exactly(log, stored)
    finally:
        log.close()


@pytest.mark.parametrize("shutdown", ["clean", "unclean"])
def test_swap_of_compacted_segments_replaces_them(tmp_path, shutdown):
    rng = random.Random(63)
    directory = tmp_path / "topic-0"
    log, stored = build_log(directory, SWAP_CFG, 60, rng)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 5
    _close_or_crash(log, shutdown)
    # The cleaner's output for segments 1 and 2: some batches dropped, the last one kept so the
    # replacement covers both ranges. The old segments are still there (crash before deletion).
    old = layout(directory / f"{bases[1]:020d}.log") + layout(directory / f"{bases[2]:020d}.log")
    keep = [s for i, (_, s) in enumerate(old) if i == len(old) - 1 or rng.random() < 0.5]
    dropped = {s.base for _, s in old} - {s.base for s in keep}
    assert dropped
    name = f"{bases[1]:020d}"
    (directory / f"{name}.log.swap").write_bytes(b"".join(s.data for s in keep))
    (directory / f"{name}.index.swap").write_bytes(b"")
    (directory / f"{name}.timeindex.swap").write_bytes(b"")
    log = PartitionLog(directory, SWAP_CFG)
    try:
        report = log.recovery
        print(report)
        assert report.swaps_completed == 1
        assert report.bytes_truncated == 0
        names = {p.name for p in directory.iterdir()}
        assert not any(n.endswith(".swap") for n in names)
        assert f"{bases[2]:020d}.log" not in names
        assert (directory / f"{name}.log").read_bytes() == b"".join(s.data for s in keep)
        assert [s.base_offset for s in log.segments] == [bases[0], bases[1]] + bases[3:]
        expected = [s for s in stored if s.base not in dropped]
        assert_serves_exactly(log, expected)
        assert_appends_continue(log, SWAP_CFG)
    finally:
        log.close()


# ---------------------------------------------------------------------------------------------
# (6) truncation by leader epoch, not by high watermark


def _leader_batch(tag: str, count: int) -> bytes:
    return build_batch([Record(i, 70_000, f"{tag}{i}".encode(), f"{tag}-value-{i}".encode()) for i in range(count)])


def _replicate(leader: PartitionLog, follower: PartitionLog) -> None:
    while follower.log_end_offset < leader.log_end_offset:
        batches = [bytes(b.buffer) for b in leader.batches(follower.log_end_offset)]
        follower.append_as_follower(b"".join(batches[:2]))


def _truncation_offset(leader: PartitionLog, follower: PartitionLog) -> int:
    """What a follower does after a leader change: OffsetsForLeaderEpoch, then truncate."""
    epoch, leader_end = leader.end_offset_for_epoch(follower.latest_epoch)
    assert epoch >= 0
    _, own_end = follower.end_offset_for_epoch(epoch)
    return min(leader_end, own_end)


def test_follower_truncates_to_leader_epoch_end_offset_not_high_watermark(tmp_path):
    leader = PartitionLog(tmp_path / "leader")
    follower = PartitionLog(tmp_path / "follower")
    try:
        for i in range(5):
            leader.append_as_leader(_leader_batch(f"a{i}", 2), 0)  # epoch 0: offsets 0..9
        _replicate(leader, follower)
        high_watermark = 8  # the follower had not yet learnt that 8 and 9 are committed
        # The follower is briefly leader in epoch 1 and writes 10..14, which nobody replicates.
        follower.append_as_leader(_leader_batch("f", 5), 1)
        # The old leader wins epoch 2 and writes different records at 10..15.
        for i in range(3):
            leader.append_as_leader(_leader_batch(f"c{i}", 2), 2)
        assert leader.end_offset_for_epoch(1) == (0, 10)
        offset = _truncation_offset(leader, follower)
        assert offset == 10
        assert follower.truncate_to(offset) == 10
        assert follower.log_end_offset == 10 != high_watermark  # 8 and 9 are kept, not refetched
        assert follower.epochs.entries == [(0, 0)]
        assert follower.read(0, 10**6).records == leader.read(0, 10**6, max_offset=10).records
        _replicate(leader, follower)
        assert follower.read(0, 10**6).records == leader.read(0, 10**6).records
        assert follower.epochs.entries == leader.epochs.entries == [(0, 0), (2, 10)]
    finally:
        leader.close()
        follower.close()


def test_follower_with_diverged_batch_truncates_to_its_own_epoch_end(tmp_path):
    leader = PartitionLog(tmp_path / "leader")
    follower = PartitionLog(tmp_path / "follower")
    try:
        for i in range(4):
            leader.append_as_leader(_leader_batch(f"a{i}", 2), 0)  # 0..7
        _replicate(leader, follower)
        leader.append_as_leader(_leader_batch("a4", 2), 0)  # 8..9, never reached the follower
        follower.append_as_leader(_leader_batch("f", 5), 1)  # follower led epoch 1: 8..12
        leader.append_as_leader(_leader_batch("c", 6), 2)  # 10..15
        # The leader says epoch 0 ended at 10; the follower's own epoch 0 ended at 8.
        assert leader.end_offset_for_epoch(1) == (0, 10)
        assert follower.end_offset_for_epoch(0) == (0, 8)
        offset = _truncation_offset(leader, follower)
        assert offset == 8
        follower.truncate_to(offset)
        assert follower.log_end_offset == 8
        assert follower.epochs.entries == [(0, 0)]
        _replicate(leader, follower)
        assert follower.read(0, 10**6).records == leader.read(0, 10**6).records
        assert follower.epochs.entries == [(0, 0), (2, 10)]
        # A crash and a reopen keep the converged log and cache.
        crash(follower)
        reopened = PartitionLog(tmp_path / "follower")
        try:
            assert not reopened.recovery.clean_shutdown
            assert reopened.read(0, 10**6).records == leader.read(0, 10**6).records
            assert reopened.epochs.entries == [(0, 0), (2, 10)]
        finally:
            reopened.close()
    finally:
        leader.close()


def test_epoch_cache_is_rebuilt_from_batches_after_a_crash(tmp_path):
    """A torn tail that held a new epoch's first batch takes that epoch out of the cache."""
    directory = tmp_path / "topic-0"
    log = PartitionLog(directory)
    log.append_as_leader(_leader_batch("a", 3), 4)
    log.append_as_leader(_leader_batch("b", 3), 7)
    log.append_as_leader(_leader_batch("c", 3), 8)
    log.append_as_leader(_leader_batch("d", 3), 9)
    active = log.active_segment.log_path
    assert log.epochs.entries == [(4, 0), (7, 3), (8, 6), (9, 9)]
    last_size = len(_leader_batch("d", 3))
    crash(log)
    os.truncate(active, active.stat().st_size - last_size + 20)  # epoch 9's only batch is torn
    log = PartitionLog(directory)
    try:
        assert log.log_end_offset == 9
        assert log.recovery.bytes_truncated == 20
        assert log.epochs.entries == [(4, 0), (7, 3), (8, 6)]
        assert log.end_offset_for_epoch(9) == (8, 9)
        assert log.end_offset_for_epoch(7) == (7, 6)
        assert (directory / "leader-epoch-checkpoint").read_text() == "0\n3\n4 0\n7 3\n8 6\n"
    finally:
        log.close()


# ---------------------------------------------------------------------------------------------
# (8) idempotent producer state after a torn tail


@pytest.mark.parametrize("seed", [71, 72, 73, 74])
def test_producer_state_after_torn_tail_is_that_of_the_surviving_batches(tmp_path, seed):
    """The reopened state (snapshot + replay during recovery) equals what a follower builds from
    the surviving batches alone; lost batches are appended again on retry, kept ones are duplicates."""
    print(f"seed={seed}")
    rng = random.Random(seed)
    directory = tmp_path / "topic-0"
    log = PartitionLog(directory, TORN_CFG)
    now = int(time.time() * 1000)
    seqs = [0] * 5
    sent = []  # (producer id, first seq, count, records)
    for i in range(150):
        pid = rng.randrange(5)
        records = [Record(j, now, f"p{pid}.{seqs[pid] + j}".encode(), rng.randbytes(rng.randint(0, 120)))
                   for j in range(rng.randint(1, 4))]
        log.append_as_leader(build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seqs[pid]), 0)
        sent.append((pid, seqs[pid], records))
        seqs[pid] += len(records)
    active_file = log.active_segment.log_path
    crash(log)
    file_batches = layout(active_file)
    os.truncate(active_file, _cut(file_batches, active_file.stat().st_size, "random", rng))

    log = PartitionLog(directory, TORN_CFG)
    follower = PartitionLog(tmp_path / "oracle-0", TORN_CFG)
    try:
        print(f"seed={seed}: {log.recovery}")
        follower.append_as_follower(b"".join(bytes(b.buffer) for b in log.batches()))
        assert list(log.producer_state.items()) == list(follower.producer_state.items())
        # Each producer retries, in order, from the oldest batch the log remembers for it: the
        # surviving ones are duplicates answered with their offsets, the lost ones are appended.
        survived = {(b.producer_id, b.base_sequence): b for b in log.batches()}
        oldest = {pid: e.batches[0].first_seq for pid, e in log.producer_state.items()}
        duplicates = appended = 0
        for pid, first_seq, records in sent:
            if first_seq < oldest.get(pid, 0):
                continue
            info = log.append_as_leader(build_batch(records, producer_id=pid, producer_epoch=0,
                                                    base_sequence=first_seq), 0)
            if (pid, first_seq) in survived:
                assert info.duplicate and info.first_offset == survived[(pid, first_seq)].base_offset
                duplicates += 1
            else:
                assert not info.duplicate
                appended += 1
        print(f"seed={seed}: {duplicates} duplicates, {appended} lost batches appended again")
        assert duplicates >= 5
    finally:
        log.close()
        follower.close()
