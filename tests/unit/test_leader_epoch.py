"""The leader epoch cache: assignment, OffsetsForLeaderEpoch answers, truncation, checkpoint file."""

from __future__ import annotations

import pytest

from lakelog.infra.errors import InvariantViolation
from lakelog.logstore.errors import CorruptRecordError, UnsupportedFormatVersionError
from lakelog.logstore.leader_epoch import FILE_NAME, UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache


def _cache(tmp_path, entries=()):
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in entries:
        assert cache.assign(epoch, start)
    return cache


def _file(tmp_path) -> str:
    return (tmp_path / FILE_NAME).read_text("ascii")


def test_assign_persists_exact_checkpoint_format(tmp_path):
    cache = _cache(tmp_path, [(1, 0), (3, 10), (5, 20)])
    assert cache.entries == [(1, 0), (3, 10), (5, 20)]
    assert _file(tmp_path) == "0\n3\n1 0\n3 10\n5 20\n"
    assert LeaderEpochCache(tmp_path).entries == [(1, 0), (3, 10), (5, 20)]
    assert not list(tmp_path.glob("*.tmp"))


def test_assign_ignores_stale_and_undefined_epochs(tmp_path):
    cache = _cache(tmp_path, [(2, 5)])
    assert not cache.assign(2, 9)  # same epoch: its start offset stays
    assert not cache.assign(1, 9)  # older epoch
    assert not cache.assign(-1, 9)
    assert cache.entries == [(2, 5)]
    assert _file(tmp_path) == "0\n1\n2 5\n"
    assert cache.latest_epoch == 2


def test_assign_below_previous_start_drops_stale_entries(tmp_path):
    cache = _cache(tmp_path, [(1, 0), (2, 10), (3, 20)])
    assert cache.assign(4, 15)  # epoch 3 cannot have started at 20 if epoch 4 starts at 15
    assert cache.entries == [(1, 0), (2, 10), (4, 15)]
    assert _file(tmp_path) == "0\n3\n1 0\n2 10\n4 15\n"


def test_empty_cache(tmp_path):
    cache = LeaderEpochCache(tmp_path)
    assert cache.entries == []
    assert cache.latest_epoch == UNDEFINED_EPOCH
    assert cache.end_offset_for(0, 100) == (UNDEFINED_EPOCH, UNDEFINED_OFFSET)
    assert cache.epoch_for_offset(0) == UNDEFINED_EPOCH
    assert not (tmp_path / FILE_NAME).exists()  # nothing written until something changes


@pytest.mark.parametrize("requested, expected", [
    (0, (0, 0)),  # below the first known epoch: it ended where the first one starts
    (-1, (UNDEFINED_EPOCH, UNDEFINED_OFFSET)),
    (1, (1, 10)),  # end of epoch 1 = start of the next one
    (2, (1, 10)),  # unknown epoch: the largest known epoch below it
    (3, (3, 20)),
    (4, (3, 20)),
    (5, (5, 42)),  # the latest epoch ends at the log end offset
    (9, (5, 42)),
])
def test_end_offset_for_follows_offsets_for_leader_epoch(tmp_path, requested, expected):
    # Epoch 1 ends where epoch 3 starts (10), epoch 3 where epoch 5 starts (20).
    cache = _cache(tmp_path, [(1, 0), (3, 10), (5, 20)])
    assert cache.end_offset_for(requested, 42) == expected


def test_epoch_for_offset(tmp_path):
    cache = _cache(tmp_path, [(1, 5), (3, 10)])
    assert cache.epoch_for_offset(4) == UNDEFINED_EPOCH
    assert cache.epoch_for_offset(5) == 1
    assert cache.epoch_for_offset(9) == 1
    assert cache.epoch_for_offset(10) == 3
    assert cache.epoch_for_offset(10**12) == 3


def test_truncate_from_end(tmp_path):
    cache = _cache(tmp_path, [(1, 0), (3, 10), (5, 20)])
    cache.truncate_from_end(21)  # epoch 5 still has offset 20
    assert cache.entries == [(1, 0), (3, 10), (5, 20)]
    cache.truncate_from_end(20)
    assert cache.entries == [(1, 0), (3, 10)]
    assert _file(tmp_path) == "0\n2\n1 0\n3 10\n"
    assert cache.end_offset_for(3, 20) == (3, 20)
    cache.truncate_from_end(0)
    assert cache.entries == []
    assert _file(tmp_path) == "0\n0\n"


def test_truncate_from_start(tmp_path):
    cache = _cache(tmp_path, [(1, 0), (3, 10), (5, 20)])
    cache.truncate_from_start(0)
    assert cache.entries == [(1, 0), (3, 10), (5, 20)]
    cache.truncate_from_start(10)  # exactly at an epoch start: older entries go
    assert cache.entries == [(3, 10), (5, 20)]
    cache.truncate_from_start(15)  # inside epoch 3: its start is clamped
    assert cache.entries == [(3, 15), (5, 20)]
    assert _file(tmp_path) == "0\n2\n3 15\n5 20\n"
    cache.truncate_from_start(25)
    assert cache.entries == [(5, 25)]
    assert LeaderEpochCache(tmp_path).entries == [(5, 25)]


def test_truncate_from_start_before_first_entry_is_a_no_op(tmp_path):
    cache = _cache(tmp_path, [(2, 100)])
    cache.truncate_from_start(50)
    assert cache.entries == [(2, 100)]


def test_clear(tmp_path):
    cache = _cache(tmp_path, [(1, 0), (2, 7)])
    cache.clear()
    assert cache.entries == []
    assert _file(tmp_path) == "0\n0\n"
    assert LeaderEpochCache(tmp_path).entries == []


def test_reads_handwritten_checkpoint(tmp_path):
    (tmp_path / FILE_NAME).write_text("0\n2\n4 100\n7 250\n")
    cache = LeaderEpochCache(tmp_path)
    assert cache.entries == [(4, 100), (7, 250)]
    assert cache.end_offset_for(5, 300) == (4, 250)


@pytest.mark.parametrize("text", ["1\n0\n", "2\n1\n4 100\n", "-1\n0\n"])
def test_unknown_version_is_refused(tmp_path, text):
    (tmp_path / FILE_NAME).write_text(text)
    with pytest.raises(UnsupportedFormatVersionError):
        LeaderEpochCache(tmp_path)


@pytest.mark.parametrize("text", [
    "\n",  # no version line
    "0\n3\n4 100\n",  # count says 3, holds 1
    "0\n1\n4\n",  # one field instead of two
    "0\n1\n4 x\n",  # not a number
])
def test_malformed_checkpoint_is_refused(tmp_path, text):
    (tmp_path / FILE_NAME).write_text(text)
    with pytest.raises(CorruptRecordError):
        LeaderEpochCache(tmp_path)


def test_an_empty_checkpoint_reads_as_no_entries(tmp_path):
    # What a crash leaves of a new partition's first stamp written in a SyncBatch before its sync
    # (fileutil.py); the unclean open re-assigns epochs from the batches it re-reads.
    (tmp_path / FILE_NAME).write_bytes(b"")
    assert LeaderEpochCache(tmp_path).entries == []


def test_decreasing_entries_are_refused(tmp_path):
    (tmp_path / FILE_NAME).write_text("0\n2\n5 100\n3 200\n")
    with pytest.raises(InvariantViolation):
        LeaderEpochCache(tmp_path)
