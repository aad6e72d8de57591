"""A Raft voter's durable files: round-trips, torn tails, CRCs, snapshots and prefix drop, versions."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakelog.infra.config import ConfigError
from lakelog.infra.errors import InvariantViolation
from lakelog.ingest_api.raft.messages import (
    NO_NODE,
    Entry,
    EntryKind,
    PersistEntries,
    PersistSnapshot,
    PersistState,
    Snapshot,
)
from lakelog.ingest_api.raft.storage import (
    HEADER,
    LOG_FILE,
    LOG_MAGIC,
    STATE_FILE,
    CorruptRaftStateError,
    RaftStorage,
    UnsupportedRaftFormatError,
    decode_entry,
    encode_entry,
    encode_snapshot,
    snapshot_file_name,
)
from lakelog.logstore.fileutil import atomic_write


def _entries(first: int, last: int, term: int = 1) -> list[Entry]:
    return [Entry(i, term, EntryKind.COMMAND, f"cmd-{i}".encode()) for i in range(first, last + 1)]


def _storage(tmp_path, n: int = 5, term: int = 1, node_id: int = 1) -> RaftStorage:
    s = RaftStorage(tmp_path, node_id)
    s.save_state(term, node_id)
    if n:
        s.write_entries(1, _entries(1, n, term))
    return s


def _reopen(s: RaftStorage, node_id: int = 1) -> RaftStorage:
    s.close()
    return RaftStorage(s.directory, node_id)


def _log_bytes(tmp_path) -> bytes:
    return (tmp_path / LOG_FILE).read_bytes()


# --- codec

def test_entry_bytes_match_the_documented_layout():
    raw = encode_entry(Entry(7, 3, EntryKind.COMMAND, b"hi"))
    assert len(raw) == 8 + 17 + 2
    length, crc, index, term, kind = struct.unpack(">IIQQB", raw[:25])
    assert (length, index, term, kind, raw[25:]) == (19, 7, 3, 1, b"hi")
    assert raw.hex() == ("00000013" + raw[4:8].hex() + "0000000000000007" + "0000000000000003" + "01" + "6869")
    assert decode_entry(raw, 0) == (Entry(7, 3, EntryKind.COMMAND, b"hi"), len(raw))


@given(st.integers(1, 2**63), st.integers(1, 2**63), st.sampled_from(list(EntryKind)), st.binary(max_size=300))
def test_entry_codec_round_trips(index, term, kind, payload):
    e = Entry(index, term, kind, payload)
    raw = b"junk" + encode_entry(e)
    assert decode_entry(raw, 4) == (e, len(raw))


def test_decode_names_file_and_position_on_crc_mismatch():
    raw = bytearray(encode_entry(Entry(1, 1, EntryKind.COMMAND, b"payload")))
    raw[-1] ^= 0xFF
    with pytest.raises(CorruptRaftStateError, match="CRC-32C mismatch.*file f.log, position 0"):
        decode_entry(bytes(raw), 0, file="f.log")


# --- round-trips

def test_new_directory_is_empty_state(tmp_path):
    s = RaftStorage(tmp_path, 3)
    state = s.load()
    assert (state.term, state.voted_for, state.snapshot, state.entries) == (0, NO_NODE, None, ())
    assert _log_bytes(tmp_path) == HEADER.pack(LOG_MAGIC, 1, 0)


def test_state_and_entries_survive_reopen(tmp_path):
    s = _storage(tmp_path, 5, term=2)
    s.save_state(4, 3)
    s.write_entries(6, _entries(6, 8, term=4))
    s = _reopen(s)
    state = s.load()
    assert (state.term, state.voted_for) == (4, 3)
    assert state.entries == tuple(_entries(1, 5, 2) + _entries(6, 8, 4))
    assert json.loads((tmp_path / STATE_FILE).read_text()) == {"version": 1, "node_id": 1, "term": 4, "voted_for": 3}
    assert s.recovery.truncated_bytes == 0 and not list(tmp_path.glob("*.tmp"))


def test_persist_carries_out_core_effects(tmp_path):
    s = RaftStorage(tmp_path, 1)
    s.persist(PersistState(3, 1))
    s.persist(PersistEntries(1, tuple(_entries(1, 4, 3))))
    s.persist(PersistSnapshot(Snapshot(2, 3, b"sm"), keep_log_after=True))
    state = _reopen(s).load()
    assert (state.term, state.voted_for, state.snapshot) == (3, 1, Snapshot(2, 3, b"sm"))
    assert state.entries == tuple(_entries(3, 4, 3))


def test_directory_of_another_voter_is_refused(tmp_path):
    _storage(tmp_path, node_id=1).close()
    with pytest.raises(ConfigError, match="belongs to Raft voter 1"):
        RaftStorage(tmp_path, 2)


def test_term_never_goes_back(tmp_path):
    s = _storage(tmp_path, 0, term=5)
    with pytest.raises(InvariantViolation):
        s.save_state(4, NO_NODE)


# --- truncation of a conflicting suffix

def test_write_truncates_conflicting_suffix(tmp_path):
    s = _storage(tmp_path, 5, term=1)
    s.save_state(2, 1)
    new = [Entry(3, 2, EntryKind.NO_OP), Entry(4, 2, EntryKind.COMMAND, b"x")]
    s.write_entries(3, new)
    expected = tuple(_entries(1, 2) + new)
    assert s.load().entries == expected
    assert _reopen(s).load().entries == expected
    size = len(HEADER.pack(LOG_MAGIC, 1, 0)) + sum(len(encode_entry(e)) for e in expected)
    assert len(_log_bytes(tmp_path)) == size


def test_write_refuses_gaps_and_term_regressions(tmp_path):
    s = _storage(tmp_path, 3, term=2)
    with pytest.raises(InvariantViolation):
        s.write_entries(5, _entries(5, 5, 2))
    with pytest.raises(InvariantViolation):
        s.write_entries(4, _entries(4, 4, 1))


# --- recovery

def test_torn_tail_is_cut_and_log_stays_appendable(tmp_path):
    s = _storage(tmp_path, 3)
    s.close()
    intact = _log_bytes(tmp_path)
    torn = encode_entry(_entries(4, 4)[0])[:-3]
    (tmp_path / LOG_FILE).write_bytes(intact + torn)
    s = RaftStorage(tmp_path, 1)
    assert s.recovery.truncated_bytes == len(torn)
    assert _log_bytes(tmp_path) == intact
    s.write_entries(4, _entries(4, 5))
    assert _reopen(s).load().entries == tuple(_entries(1, 5))


def test_torn_header_of_last_record_is_cut(tmp_path):
    _storage(tmp_path, 2).close()
    (tmp_path / LOG_FILE).write_bytes(_log_bytes(tmp_path) + b"\x00\x00")
    s = RaftStorage(tmp_path, 1)
    assert s.recovery.truncated_bytes == 2 and s.load().entries == tuple(_entries(1, 2))


def test_crc_mismatch_cuts_the_record_and_everything_after(tmp_path):
    _storage(tmp_path, 4).close()
    raw = bytearray(_log_bytes(tmp_path))
    third = 8 + sum(len(encode_entry(e)) for e in _entries(1, 2))
    raw[third + 27] ^= 0x01  # a payload byte of entry 3
    (tmp_path / LOG_FILE).write_bytes(bytes(raw))
    s = RaftStorage(tmp_path, 1)
    assert s.recovery.truncated_bytes == len(raw) - third
    assert s.load().entries == tuple(_entries(1, 2))


def test_valid_records_out_of_order_are_corruption(tmp_path):
    _storage(tmp_path, 2).close()
    (tmp_path / LOG_FILE).write_bytes(_log_bytes(tmp_path) + encode_entry(_entries(5, 5)[0]))
    with pytest.raises(CorruptRaftStateError, match="does not follow entry 2"):
        RaftStorage(tmp_path, 1)


def test_log_term_above_quorum_state_term_is_corruption(tmp_path):
    s = _storage(tmp_path, 2, term=1)
    s.close()
    (tmp_path / LOG_FILE).write_bytes(_log_bytes(tmp_path) + encode_entry(Entry(3, 9, EntryKind.NO_OP)))
    with pytest.raises(CorruptRaftStateError, match="term 9 above quorum-state term 1"):
        RaftStorage(tmp_path, 1)


def test_leftover_temp_files_are_removed(tmp_path):
    _storage(tmp_path, 1).close()
    (tmp_path / "quorum-state.tmp").write_bytes(b"{half")
    s = RaftStorage(tmp_path, 1)
    assert s.recovery.removed_files == ("quorum-state.tmp",) and s.load().term == 1


# --- snapshots

def test_snapshot_drops_log_prefix(tmp_path):
    s = _storage(tmp_path, 10)
    s.save_snapshot(Snapshot(6, 1, b"state@6"), keep_log_after=True)
    assert s.load().entries == tuple(_entries(7, 10))
    assert len(_log_bytes(tmp_path)) == 8 + sum(len(encode_entry(e)) for e in _entries(7, 10))
    s.write_entries(11, _entries(11, 12))
    s.save_snapshot(Snapshot(11, 1, b"state@11"), keep_log_after=True)
    assert sorted(p.name for p in tmp_path.glob("snapshot-*")) == [snapshot_file_name(Snapshot(11, 1, b""))]
    state = _reopen(s).load()
    assert state.snapshot == Snapshot(11, 1, b"state@11") and state.entries == tuple(_entries(12, 12))
    doc = json.loads((tmp_path / "snapshot-00000000000000000011-00000000000000000001.json").read_text())
    assert doc["version"] == 1 and doc["last_index"] == 11 and doc["last_term"] == 1


def test_installed_snapshot_can_replace_the_whole_log(tmp_path):
    s = _storage(tmp_path, 4, term=1)
    s.save_state(3, NO_NODE)
    s.save_snapshot(Snapshot(9, 3, b"leader's"), keep_log_after=False)
    state = _reopen(s).load()
    assert state.snapshot == Snapshot(9, 3, b"leader's") and state.entries == ()
    s = _reopen(s)
    s.write_entries(10, _entries(10, 10, 3))
    assert _reopen(s).load().entries == tuple(_entries(10, 10, 3))


def test_crash_after_snapshot_before_prefix_drop_is_finished_on_open(tmp_path):
    _storage(tmp_path, 8).close()
    atomic_write(tmp_path / snapshot_file_name(Snapshot(5, 1, b"")), encode_snapshot(Snapshot(5, 1, b"s")))
    s = RaftStorage(tmp_path, 1)
    assert s.recovery.dropped_entries == 5
    assert s.load().entries == tuple(_entries(6, 8))
    assert len(_log_bytes(tmp_path)) == 8 + sum(len(encode_entry(e)) for e in _entries(6, 8))


def test_crash_after_installing_a_conflicting_snapshot_drops_the_replaced_history(tmp_path):
    s = _storage(tmp_path, 8, term=1)
    s.save_state(2, NO_NODE)
    s.close()
    atomic_write(tmp_path / snapshot_file_name(Snapshot(5, 2, b"")), encode_snapshot(Snapshot(5, 2, b"s")))
    s = RaftStorage(tmp_path, 1)
    assert s.recovery.dropped_entries == 8 and s.load().entries == ()


def test_crash_before_older_snapshot_deleted_keeps_newest(tmp_path):
    s = _storage(tmp_path, 6)
    s.save_snapshot(Snapshot(4, 1, b"new"), keep_log_after=True)
    s.close()
    atomic_write(tmp_path / snapshot_file_name(Snapshot(2, 1, b"")), encode_snapshot(Snapshot(2, 1, b"old")))
    s = RaftStorage(tmp_path, 1)
    assert s.recovery.removed_files == (snapshot_file_name(Snapshot(2, 1, b"")),)
    assert s.load().snapshot == Snapshot(4, 1, b"new")


def test_snapshot_crc_mismatch_is_refused(tmp_path):
    s = _storage(tmp_path, 3)
    s.save_snapshot(Snapshot(2, 1, b"state"), keep_log_after=True)
    s.close()
    path = tmp_path / snapshot_file_name(Snapshot(2, 1, b""))
    doc = json.loads(path.read_text())
    doc["crc32c"] ^= 1
    path.write_text(json.dumps(doc))
    with pytest.raises(CorruptRaftStateError, match="snapshot data CRC-32C mismatch"):
        RaftStorage(tmp_path, 1)


def test_snapshot_whose_name_lies_is_refused(tmp_path):
    _storage(tmp_path, 3).close()
    atomic_write(tmp_path / snapshot_file_name(Snapshot(2, 1, b"")), encode_snapshot(Snapshot(3, 1, b"s")))
    with pytest.raises(CorruptRaftStateError, match="its name says"):
        RaftStorage(tmp_path, 1)


def test_gap_between_snapshot_and_log_is_corruption(tmp_path):
    s = RaftStorage(tmp_path, 1)
    s.save_state(1, 1)
    s.close()
    (tmp_path / LOG_FILE).write_bytes(HEADER.pack(LOG_MAGIC, 1, 0) + b"".join(encode_entry(e) for e in _entries(4, 5)))
    with pytest.raises(CorruptRaftStateError, match="starts at 4 with no snapshot"):
        RaftStorage(tmp_path, 1)


# --- versions

@pytest.mark.parametrize("what", ["quorum-state", "log version", "log magic", "snapshot"])
def test_unknown_version_is_refused(tmp_path, what):
    s = _storage(tmp_path, 3)
    s.save_snapshot(Snapshot(1, 1, b"s"), keep_log_after=True)
    s.close()
    if what == "quorum-state":
        (tmp_path / STATE_FILE).write_text(json.dumps({"version": 2, "node_id": 1, "term": 1, "voted_for": 1}))
    elif what == "log version":
        raw = _log_bytes(tmp_path)
        (tmp_path / LOG_FILE).write_bytes(HEADER.pack(LOG_MAGIC, 2, 0) + raw[8:])
    elif what == "log magic":
        raw = _log_bytes(tmp_path)
        (tmp_path / LOG_FILE).write_bytes(HEADER.pack(b"KAFK", 1, 0) + raw[8:])
    else:
        path = tmp_path / snapshot_file_name(Snapshot(1, 1, b""))
        doc = json.loads(path.read_text())
        doc["version"] = 2
        path.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedRaftFormatError):
        RaftStorage(tmp_path, 1)


def test_malformed_quorum_state_is_corruption(tmp_path):
    _storage(tmp_path, 0).close()
    (tmp_path / STATE_FILE).write_text('{"version": 1, "node_id": 1, "term": "x", "voted_for": 1}')
    with pytest.raises(CorruptRaftStateError, match="quorum-state"):
        RaftStorage(tmp_path, 1)


def _e(index: int, term: int, payload: bytes = b"x") -> Entry:
    return Entry(index, term, EntryKind.COMMAND, payload)


def test_persist_many_ends_as_one_persist_per_effect_with_one_fsync_per_run_of_entries(tmp_path):
    effects = [PersistState(1, 1), PersistEntries(1, (_e(1, 1), _e(2, 1))), PersistEntries(3, (_e(3, 1),)),
               PersistEntries(4, (_e(4, 1), _e(5, 1))),
               PersistState(2, NO_NODE),  # a new term: the log is synced before the state is written
               PersistEntries(4, (_e(4, 2, b"y"),)),  # a conflicting suffix, cut and rewritten
               PersistEntries(5, (_e(5, 2), _e(6, 2))),
               PersistSnapshot(Snapshot(3, 1, b"state"), keep_log_after=True),
               PersistEntries(7, (_e(7, 2),))]
    one_by_one = RaftStorage(tmp_path / "a", 1)
    for e in effects:
        one_by_one.persist(e)
    grouped = RaftStorage(tmp_path / "b", 1)
    grouped.persist_many(effects)
    assert grouped.log_syncs < one_by_one.log_syncs
    assert grouped.log_syncs == 3  # entries 1-5, 4-6, 7: one sync each (the snapshot rewrites the file itself)
    expected = one_by_one.load()
    assert grouped.load() == expected
    one_by_one.close(), grouped.close()
    reopened = RaftStorage(tmp_path / "b", 1)  # and it recovers as written
    assert reopened.load() == expected and reopened.recovery.truncated_bytes == 0
    assert [e.index for e in expected.entries] == [4, 5, 6, 7] and expected.entries[0].payload == b"y"
    reopened.close()
