"""OffsetIndex and TimeIndex: entries, lookups, truncation, structural checks and exact file bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakelog.index import offset_index, time_index
from lakelog.index.errors import CorruptIndexError
from lakelog.index.offset_index import OffsetIndex
from lakelog.index.time_index import TimeIndex
from lakelog.infra.errors import InvariantViolation

BASE = 1000


def _offset_index(tmp_path, max_bytes=1024, base=BASE):
    return OffsetIndex(tmp_path / f"{base:020d}.index", base, max_bytes)


def _time_index(tmp_path, max_bytes=1200, base=BASE):
    return TimeIndex(tmp_path / f"{base:020d}.timeindex", base, max_bytes)


# ---------------------------------------------------------------------------------------------
# OffsetIndex


def test_offset_index_file_holds_8_byte_big_endian_entries(tmp_path):
    idx = _offset_index(tmp_path)
    idx.append(1000, 0)
    idx.append(1003, 4096)
    idx.append(1000 + 0x01020304, 0x0A0B0C0D)
    expected = (b"\x00\x00\x00\x00" b"\x00\x00\x00\x00"
                b"\x00\x00\x00\x03" b"\x00\x00\x10\x00"
                b"\x01\x02\x03\x04" b"\x0a\x0b\x0c\x0d")
    assert idx.path.read_bytes() == expected
    assert idx.size_in_bytes == 24
    assert len(idx) == 3
    assert idx.entries() == [(1000, 0), (1003, 4096), (1000 + 0x01020304, 0x0A0B0C0D)]
    idx.close()


def test_offset_index_lookup_returns_floor_entry(tmp_path):
    idx = _offset_index(tmp_path)
    for off, pos in [(1004, 100), (1010, 900), (1020, 2000)]:
        idx.append(off, pos)
    assert idx.lookup(999) == (BASE, 0)  # below the base offset
    assert idx.lookup(1000) == (BASE, 0)
    assert idx.lookup(1003) == (BASE, 0)
    assert idx.lookup(1004) == (1004, 100)
    assert idx.lookup(1009) == (1004, 100)
    assert idx.lookup(1010) == (1010, 900)
    assert idx.lookup(1019) == (1010, 900)
    assert idx.lookup(1020) == (1020, 2000)
    assert idx.lookup(10**9) == (1020, 2000)
    assert idx.last_offset == 1020
    assert idx.entry_at_or_before_position(899) == (1004, 100)
    assert idx.entry_at_or_before_position(900) == (1010, 900)
    assert idx.entry_at_or_before_position(99) is None
    idx.close()


def test_offset_index_empty_lookup_and_last_offset(tmp_path):
    idx = _offset_index(tmp_path)
    assert idx.lookup(5000) == (BASE, 0)
    assert idx.last_offset == BASE
    assert idx.path.read_bytes() == b""
    idx.close()


def test_offset_index_reopen_reads_entries_back(tmp_path):
    idx = _offset_index(tmp_path)
    idx.append(1001, 10)
    idx.append(1002, 20)
    idx.close()
    again = _offset_index(tmp_path)
    assert again.entries() == [(1001, 10), (1002, 20)]
    again.sanity_check(log_size=21)
    again.append(1005, 30)
    assert again.path.read_bytes() == offset_index.encode([(1, 10), (2, 20), (5, 30)])
    again.close()


def test_offset_index_refuses_non_increasing_or_unfit_entries(tmp_path):
    idx = _offset_index(tmp_path)
    idx.append(1005, 50)
    with pytest.raises(InvariantViolation):
        idx.append(1005, 60)  # same offset
    with pytest.raises(InvariantViolation):
        idx.append(1006, 50)  # same position
    with pytest.raises(InvariantViolation):
        idx.append(999, 70)  # below the base offset
    with pytest.raises(InvariantViolation):
        idx.append(BASE + 2**32, 70)  # relative offset does not fit 32 bits
    assert idx.entries() == [(1005, 50)]
    assert idx.path.read_bytes() == struct.pack(">II", 5, 50)
    idx.close()


def test_offset_index_full(tmp_path):
    idx = _offset_index(tmp_path, max_bytes=20)  # room for 2 entries of 8 bytes
    assert idx.max_entries == 2
    idx.append(1001, 1)
    assert not idx.is_full
    idx.append(1002, 2)
    assert idx.is_full
    with pytest.raises(InvariantViolation):
        idx.append(1003, 3)
    assert len(idx.path.read_bytes()) == 16
    idx.close()


def test_offset_index_truncate_and_reset(tmp_path):
    idx = _offset_index(tmp_path)
    for i in range(1, 6):
        idx.append(BASE + 10 * i, 100 * i)  # (1010,100) ... (1050,500)
    idx.truncate_to(1031)  # drops entries with offset >= 1031
    assert idx.entries() == [(1010, 100), (1020, 200), (1030, 300)]
    assert idx.path.read_bytes() == offset_index.encode([(10, 100), (20, 200), (30, 300)])
    idx.truncate_to(1030)
    assert idx.entries() == [(1010, 100), (1020, 200)]
    idx.truncate_to_position(201)  # drops entries at or past position 201
    assert idx.entries() == [(1010, 100), (1020, 200)]
    idx.truncate_to_position(200)
    assert idx.entries() == [(1010, 100)]
    assert idx.path.read_bytes() == offset_index.encode([(10, 100)])
    idx.append(1015, 150)  # appends continue after truncation, in the file too
    assert idx.path.read_bytes() == offset_index.encode([(10, 100), (15, 150)])
    idx.reset()
    assert len(idx) == 0 and idx.path.read_bytes() == b""
    idx.truncate_to(BASE)
    assert idx.entries() == []
    idx.close()


def test_offset_index_sanity_check(tmp_path):
    idx = _offset_index(tmp_path)
    idx.append(1001, 0)
    idx.append(1002, 100)
    idx.sanity_check(log_size=101)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(log_size=100)  # the last entry points at the end of the log
    idx.close()


@pytest.mark.parametrize("content, log_size", [
    (offset_index.encode([(1, 0), (2, 10)])[:-3], 100),  # torn: not a multiple of 8
    (offset_index.encode([(2, 10), (1, 20)]), 100),  # offsets out of order
    (offset_index.encode([(1, 20), (2, 10)]), 100),  # positions out of order
    (offset_index.encode([(1, 10), (1, 20)]), 100),  # repeated offset
    (offset_index.encode([(1, 10), (2, 500)]), 100),  # points beyond the log
])
def test_offset_index_sanity_check_refuses_damaged_files(tmp_path, content, log_size):
    path = tmp_path / f"{BASE:020d}.index"
    path.write_bytes(content)
    idx = _offset_index(tmp_path)  # opening never raises: the owner decides to rebuild
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(log_size)
    idx.reset()
    idx.sanity_check(log_size)  # a reset index is sound again
    assert path.read_bytes() == b""
    idx.close()


def test_offset_index_rename(tmp_path):
    idx = _offset_index(tmp_path)
    idx.append(1001, 1)
    target = tmp_path / "renamed.index"
    idx.rename_to(target)
    idx.append(1002, 2)  # the open handle follows the file
    idx.close()
    assert target.read_bytes() == offset_index.encode([(1, 1), (2, 2)])
    assert not (tmp_path / f"{BASE:020d}.index").exists()


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1)), max_size=50))
def test_offset_index_codec_round_trip(pairs):
    buf = offset_index.encode(pairs)
    assert len(buf) == 8 * len(pairs)
    rel, pos = offset_index.decode(buf)
    assert list(zip(rel, pos)) == pairs
    assert buf == b"".join(struct.pack(">II", r, p) for r, p in pairs)


# ---------------------------------------------------------------------------------------------
# TimeIndex


def test_time_index_file_holds_12_byte_big_endian_entries(tmp_path):
    idx = _time_index(tmp_path)
    assert idx.maybe_append(1_700_000_000_000, 1000)
    assert idx.maybe_append(1_700_000_000_500, 1000 + 0x0102)
    expected = (struct.pack(">q", 1_700_000_000_000) + b"\x00\x00\x00\x00"
                + struct.pack(">q", 1_700_000_000_500) + b"\x00\x00\x01\x02")
    assert idx.path.read_bytes() == expected
    assert idx.size_in_bytes == 24
    assert idx.entries() == [(1_700_000_000_000, 1000), (1_700_000_000_500, 1258)]
    assert idx.last_entry == (1_700_000_000_500, 1258)
    idx.close()


def test_time_index_appends_only_growing_timestamps(tmp_path):
    idx = _time_index(tmp_path)
    assert idx.maybe_append(100, 1001)
    assert not idx.maybe_append(100, 1002)  # same timestamp: no entry
    assert not idx.maybe_append(50, 1003)  # older timestamp: no entry
    assert idx.maybe_append(101, 1001)  # same offset, later timestamp: fine
    with pytest.raises(InvariantViolation):
        idx.maybe_append(200, 1000)  # offsets may not go backwards
    with pytest.raises(InvariantViolation):
        idx.maybe_append(300, 999)  # below the base offset
    assert idx.entries() == [(100, 1001), (101, 1001)]
    idx.close()


def test_time_index_full_refuses_quietly(tmp_path):
    idx = _time_index(tmp_path, max_bytes=24)
    assert idx.max_entries == 2
    assert idx.maybe_append(1, 1000)
    assert idx.maybe_append(2, 1001)
    assert idx.is_full
    assert not idx.maybe_append(3, 1002)
    assert len(idx.path.read_bytes()) == 24
    idx.close()


def test_time_index_last_entry_before(tmp_path):
    idx = _time_index(tmp_path)
    for ts, off in [(100, 1002), (200, 1005), (300, 1009)]:
        idx.maybe_append(ts, off)
    assert idx.last_entry_before(100) is None  # strictly below
    assert idx.last_entry_before(101) == (100, 1002)
    assert idx.last_entry_before(200) == (100, 1002)
    assert idx.last_entry_before(201) == (200, 1005)
    assert idx.last_entry_before(10**15) == (300, 1009)
    idx.close()


def test_time_index_truncate_reset_and_reopen(tmp_path):
    idx = _time_index(tmp_path)
    for ts, off in [(100, 1002), (200, 1005), (300, 1009)]:
        idx.maybe_append(ts, off)
    idx.truncate_to(1006)
    assert idx.entries() == [(100, 1002), (200, 1005)]
    idx.truncate_to(1005)
    assert idx.entries() == [(100, 1002)]
    assert idx.path.read_bytes() == time_index.encode([(100, 2)])
    idx.maybe_append(150, 1003)
    idx.close()
    again = _time_index(tmp_path)
    assert again.entries() == [(100, 1002), (150, 1003)]
    again.sanity_check(last_offset=1003)
    again.reset()
    assert again.path.read_bytes() == b"" and again.last_entry is None
    again.close()


@pytest.mark.parametrize("content, last_offset", [
    (time_index.encode([(100, 1), (200, 2)])[:-5], 10),  # torn: not a multiple of 12
    (time_index.encode([(200, 1), (100, 2)]), 10),  # timestamps out of order
    (time_index.encode([(100, 1), (100, 2)]), 10),  # repeated timestamp
    (time_index.encode([(100, 5), (200, 2)]), 10),  # offsets go backwards
    (time_index.encode([(100, 1), (200, 20)]), 1010),  # beyond the segment's last offset
])
def test_time_index_sanity_check_refuses_damaged_files(tmp_path, content, last_offset):
    path = tmp_path / f"{BASE:020d}.timeindex"
    path.write_bytes(content)
    idx = _time_index(tmp_path)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(BASE + last_offset if last_offset < BASE else last_offset)
    idx.reset()
    idx.sanity_check(BASE)
    idx.close()


def test_time_index_sanity_check_accepts_sound_file(tmp_path):
    path = tmp_path / f"{BASE:020d}.timeindex"
    path.write_bytes(time_index.encode([(100, 1), (200, 1), (300, 7)]))
    idx = _time_index(tmp_path)
    idx.sanity_check(last_offset=1007)
    with pytest.raises(CorruptIndexError):
        idx.sanity_check(last_offset=1006)
    idx.close()


@given(st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.integers(0, 2**32 - 1)), max_size=50))
def test_time_index_codec_round_trip(pairs):
    buf = time_index.encode(pairs)
    assert len(buf) == 12 * len(pairs)
    ts, rel = time_index.decode(buf)
    assert list(zip(ts, rel)) == pairs
    assert buf == b"".join(struct.pack(">qI", t, r) for t, r in pairs)
