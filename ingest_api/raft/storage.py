"""Durable state of one Raft voter in a directory: quorum state, log, snapshot.

Files in the directory:

    quorum-state                                   term and vote, JSON, replaced atomically
    raft.log                                       the log entries after the snapshot, appended
    snapshot-<index:020d>-<term:020d>.json         the state machine at <index>, replaced atomically

`quorum-state` (UTF-8 JSON, one object):

    {"version": 1, "node_id": 3, "term": 7, "voted_for": 2}      voted_for -1 = no vote this term

    node_id is checked on open so a voter never starts on another voter's directory. The file is
    written whole (temp file, fsync, rename, fsync the directory), so a reader sees the old or the new
    one; no checksum is needed beyond JSON's own structure. Missing = a new voter (term 0, no vote).

`raft.log` (integers big-endian):

    header, 8 bytes
      offset size type    field
      0      4    bytes   magic     b"LKRL"
      4      2    uint16  version   1
      6      2    uint16  reserved  0
    then records back to back, indexes contiguous, terms non-decreasing
      0      4    uint32  length    bytes after the crc field: 17 + payload size
      4      4    uint32  crc       CRC-32C (Castagnoli) of bytes 8 .. 8 + length
      8      8    uint64  index
      16     8    uint64  term
      24     1    uint8   kind      0 no-op, 1 command
      25     n    bytes   payload

    The length is not covered by the CRC; a damaged length makes the CRC fail over the wrong span
    (or the record run past the end). The header is written whole (atomically) when the file is
    created, and again each time the log is rewritten.

`snapshot-<index>-<term>.json` (UTF-8 JSON, one object):

    {"version": 1, "last_index": 42, "last_term": 3, "crc32c": 123456789, "data": "<base64>"}

    crc32c is the CRC-32C of the decoded data bytes; last_index / last_term must match the name.

Writes. `quorum-state` and snapshots use `atomic_write`. Appends go to the end of `raft.log`, then
fsync; a conflicting suffix is cut with `truncate` before the new entries are written, and the fsync
after them covers both. `persist_many` (group commit) writes a run of PersistEntries effects with one
write per contiguous run and one fsync for the run, always before any other file is written.
Dropping the prefix covered by a new snapshot rewrites `raft.log` atomically (only the suffix after
the snapshot is copied, which is short right after a snapshot), *after* the snapshot file is durable.

Recovery (on open; `RaftStorage.recovery` says what it did):
  * `*.tmp` leftovers of interrupted atomic writes are deleted;
  * only the newest snapshot is kept; older ones (left by a crash before their deletion) are deleted;
  * `raft.log` is scanned; the first record that is incomplete or fails its CRC, and everything after
    it, is a torn tail and is cut. Only the last append can be torn: every append is fsynced before
    the effects that depend on it (see core.py), so nothing acknowledged is lost. A record that
    passes its CRC but breaks the index or term order is corruption and refused;
  * entries at or below the snapshot index are dropped (a crash between writing a snapshot and
    rewriting the log leaves them); if the log's entry at the snapshot index has another term, the
    whole log is from a discarded history (an InstallSnapshot replaced it) and is dropped;
  * the log must continue the snapshot without a gap, and no entry may be of a term above the
    quorum state's term (the term is persisted before any entry of it).
Unknown versions or magic, a snapshot failing its CRC, and the structural errors above raise.

Concurrency: not thread-safe; the Raft host owns the instance and calls it from one thread, in the
order of the core's effects. Every method returns only after its writes are durable (fsync=True).
"""

from __future__ import annotations

import base64
import json
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from lakelog.infra.config import ConfigError
from lakelog.infra.errors import ErrorKind, invariant
from lakelog.ingest_api.raft.messages import (
    NO_NODE,
    DurableState,
    Effect,
    Entry,
    EntryKind,
    PersistEntries,
    PersistSnapshot,
    PersistState,
    RaftError,
    Snapshot,
)
from lakelog.logstore.fileutil import atomic_write, fsync_dir
from lakelog.logstore.record_batch import crc32c

STATE_FILE = "quorum-state"
LOG_FILE = "raft.log"
STATE_VERSION = 1
LOG_VERSION = 1
SNAPSHOT_VERSION = 1
LOG_MAGIC = b"LKRL"
MAX_PAYLOAD_BYTES = 64 << 20  # a length above this is damage, not an entry

HEADER = struct.Struct(">4sHH")
RECORD_HEAD = struct.Struct(">II")  # length, crc
RECORD_BODY = struct.Struct(">QQB")  # index, term, kind
assert HEADER.size == 8 and RECORD_HEAD.size == 8 and RECORD_BODY.size == 17
_SNAPSHOT_NAME = re.compile(r"^snapshot-(\d{20})-(\d{20})\.json$")


class CorruptRaftStateError(RaftError):
    """A stored Raft file fails a checksum or a structural check."""

    kind = ErrorKind.CORRUPT

    def __init__(self, message: str, *, file: str | os.PathLike | None = None,
                 position: int | None = None) -> None:
        where = [f"file {file}"] if file is not None else []
        if position is not None:
            where.append(f"position {position}")
        super().__init__(message + (f" ({', '.join(where)})" if where else ""))
        self.file = None if file is None else str(file)
        self.position = position


class UnsupportedRaftFormatError(RaftError):
    """A stored Raft file carries a version (or magic) this code does not read."""

    kind = ErrorKind.CORRUPT


@dataclass(frozen=True)
class Recovery:
    truncated_bytes: int = 0  # torn tail cut from raft.log
    dropped_entries: int = 0  # entries covered by the snapshot, or of a history it replaced
    removed_files: tuple[str, ...] = ()  # temp files and superseded snapshots


# ---------------------------------------------------------------------------------------------
# Codecs (pure)

def encode_entry(e: Entry) -> bytes:
    body = RECORD_BODY.pack(e.index, e.term, int(e.kind)) + e.payload
    return RECORD_HEAD.pack(len(body), crc32c(body)) + body


def decode_entry(buf: bytes | memoryview, pos: int, *, file: str | os.PathLike | None = None) -> tuple[Entry, int]:
    """The entry at `pos` and the position after it; CorruptRaftStateError if torn or damaged."""
    if len(buf) - pos < RECORD_HEAD.size:
        raise CorruptRaftStateError("incomplete record header", file=file, position=pos)
    length, crc = RECORD_HEAD.unpack_from(buf, pos)
    if not RECORD_BODY.size <= length <= RECORD_BODY.size + MAX_PAYLOAD_BYTES:
        raise CorruptRaftStateError(f"record length {length} out of bounds", file=file, position=pos)
    start, end = pos + RECORD_HEAD.size, pos + RECORD_HEAD.size + length
    if end > len(buf):
        raise CorruptRaftStateError(f"record of {length} bytes runs past the end", file=file, position=pos)
    body = bytes(buf[start:end])
    if crc32c(body) != crc:
        raise CorruptRaftStateError("record CRC-32C mismatch", file=file, position=pos)
    index, term, kind = RECORD_BODY.unpack_from(body)
    if kind not in EntryKind._value2member_map_:
        raise UnsupportedRaftFormatError(f"entry kind {kind} at position {pos} of {file} is unknown")
    return Entry(index, term, EntryKind(kind), body[RECORD_BODY.size:]), end


def encode_snapshot(s: Snapshot) -> bytes:
    return json.dumps({"version": SNAPSHOT_VERSION, "last_index": s.last_index, "last_term": s.last_term,
                       "crc32c": crc32c(s.data), "data": base64.b64encode(s.data).decode("ascii")},
                      sort_keys=True).encode()


def decode_snapshot(raw: bytes, *, file: str | os.PathLike | None = None) -> Snapshot:
    try:
        doc = json.loads(raw)
    except ValueError:
        raise CorruptRaftStateError("snapshot is not JSON", file=file) from None
    if not isinstance(doc, dict):
        raise CorruptRaftStateError("snapshot is not a JSON object", file=file)
    if doc.get("version") != SNAPSHOT_VERSION:
        raise UnsupportedRaftFormatError(f"snapshot {file} has version {doc.get('version')!r}, "
                                         f"expected {SNAPSHOT_VERSION}")
    try:
        index, term, crc = doc["last_index"], doc["last_term"], doc["crc32c"]
        data = base64.b64decode(doc["data"], validate=True)
    except (KeyError, TypeError, ValueError):
        raise CorruptRaftStateError("snapshot lacks a field or has malformed data", file=file) from None
    if not all(type(v) is int and v >= 1 for v in (index, term)) or type(crc) is not int:
        raise CorruptRaftStateError("snapshot index, term and crc32c must be positive integers", file=file)
    if crc32c(data) != crc:
        raise CorruptRaftStateError("snapshot data CRC-32C mismatch", file=file)
    return Snapshot(index, term, data)


def snapshot_file_name(s: Snapshot) -> str:
    return f"snapshot-{s.last_index:020d}-{s.last_term:020d}.json"


# ---------------------------------------------------------------------------------------------
# The directory

class RaftStorage:
    def __init__(self, directory: str | os.PathLike, node_id: int, *, fsync: bool = True) -> None:
        """Open (creating if new) and recover the directory; see `recovery` for what was repaired."""
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.node_id = node_id
        self._fsync = fsync
        self._log_path = self.directory / LOG_FILE
        self._positions: list[int] = []  # file position of each record, first_index upwards
        self._terms: list[int] = []
        self._first_index = 1
        self._end = HEADER.size
        self._file = None
        self.log_syncs = 0  # flush (+ fsync) calls on raft.log: group commit makes them fewer than appends
        self.recovery = self._recover()

    # --- what a restarting voter gets back

    def load(self) -> DurableState:
        """Term, vote, snapshot and the log after it, as a new RaftCore takes them."""
        entries, _ = self._scan(self._log_path.read_bytes())
        return DurableState(self._term, self._voted_for, self._snapshot, tuple(entries))

    @property
    def last_index(self) -> int:
        return self._first_index + len(self._positions) - 1

    @property
    def snapshot_index(self) -> int:
        return self._snapshot.last_index if self._snapshot else 0

    # --- writes

    def persist(self, effect: Effect) -> None:
        """Carry out a Persist* effect of the core; durable when this returns."""
        if isinstance(effect, PersistState):
            self.save_state(effect.term, effect.voted_for)
        elif isinstance(effect, PersistEntries):
            self.write_entries(effect.first_index, effect.entries)
        elif isinstance(effect, PersistSnapshot):
            self.save_snapshot(effect.snapshot, keep_log_after=effect.keep_log_after)
        else:
            raise TypeError(f"not a persist effect: {effect!r}")

    def persist_many(self, effects: list[Effect] | tuple[Effect, ...]) -> None:
        """Carry out Persist* effects in order; durable when this returns (group commit).

        A run of PersistEntries costs one fsync of raft.log (and one write per contiguous stretch);
        the log is fsynced before any quorum-state or snapshot write that follows it, so the files
        pass through the same states as with one `persist` per effect.
        """
        dirty = False
        run: list[Entry] = []
        run_first = 0
        for e in effects:
            if isinstance(e, PersistEntries):
                if run and e.first_index == run_first + len(run):
                    run.extend(e.entries)  # continues the run: written together
                    continue
                if run:
                    self.write_entries(run_first, run, sync=False)
                run_first, run = e.first_index, list(e.entries)
                dirty = True
                continue
            if run:
                self.write_entries(run_first, run, sync=False)
                run = []
            if dirty:
                self._sync()
                dirty = False
            self.persist(e)
        if run:
            self.write_entries(run_first, run, sync=False)
        if dirty:
            self._sync()

    def save_state(self, term: int, voted_for: int) -> None:
        invariant(term >= self._term, f"quorum-state term must not go back from {self._term} to {term}")
        doc = {"version": STATE_VERSION, "node_id": self.node_id, "term": term, "voted_for": voted_for}
        atomic_write(self.directory / STATE_FILE, json.dumps(doc, sort_keys=True).encode(), fsync=self._fsync)
        self._term, self._voted_for = term, voted_for

    def write_entries(self, first_index: int, entries: tuple[Entry, ...] | list[Entry], *,
                      sync: bool = True) -> None:
        """Make the log equal to log[:first_index] + entries (durable only once synced: `sync`)."""
        invariant(self.snapshot_index < first_index <= self.last_index + 1,
                  f"write at {first_index} outside ({self.snapshot_index}, {self.last_index + 1}]")
        f = self._file
        if first_index <= self.last_index:
            k = first_index - self._first_index
            self._end = self._positions[k]
            del self._positions[k:], self._terms[k:]
            f.truncate(self._end)
        f.seek(self._end)
        chunks = []
        pos = self._end
        for i, e in enumerate(entries):
            invariant(e.index == first_index + i, f"entry {e.index} is not at {first_index + i}")
            invariant(e.term >= (self._terms[-1] if self._terms else self._snapshot_term()),
                      f"entry {e.index} has a term below its predecessor's")
            record = encode_entry(e)
            self._positions.append(pos)
            self._terms.append(e.term)
            chunks.append(record)
            pos += len(record)
        f.write(b"".join(chunks))
        self._end = pos
        if sync:
            self._sync()

    def save_snapshot(self, s: Snapshot, *, keep_log_after: bool) -> None:
        """Write the snapshot, then drop the log up to it (or all of it), then older snapshots."""
        invariant(s.last_index > self.snapshot_index, f"snapshot {s.last_index} is not newer than "
                                                      f"{self.snapshot_index}")
        atomic_write(self.directory / snapshot_file_name(s), encode_snapshot(s), fsync=self._fsync)
        if keep_log_after:
            invariant(self._term_at(s.last_index) == s.last_term,
                      f"log does not hold entry {s.last_index} of term {s.last_term} to keep what follows")
        old = self._snapshot
        self._snapshot = s
        self._rewrite_log(keep_after=s.last_index if keep_log_after else None)
        if old is not None:
            (self.directory / snapshot_file_name(old)).unlink(missing_ok=True)
            if self._fsync:
                fsync_dir(self.directory)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # --- internals

    def _sync(self) -> None:
        self._file.flush()
        self.log_syncs += 1
        if self._fsync:
            os.fsync(self._file.fileno())

    def _snapshot_term(self) -> int:
        return self._snapshot.last_term if self._snapshot else 0

    def _term_at(self, index: int) -> int | None:
        if index == self.snapshot_index:
            return self._snapshot_term()
        k = index - self._first_index
        return self._terms[k] if 0 <= k < len(self._terms) else None

    def _open_log(self) -> None:
        self.close()
        self._file = open(self._log_path, "r+b")

    def _rewrite_log(self, keep_after: int | None) -> None:
        """Replace raft.log atomically by its header and the records after `keep_after` (none if None)."""
        k = 0 if keep_after is None else max(0, keep_after + 1 - self._first_index)
        kept = max(0, len(self._positions) - k) if keep_after is not None else 0
        self._file.seek(self._positions[k] if kept else self._end)
        tail = self._file.read(self._end - self._positions[k]) if kept else b""
        atomic_write(self._log_path, HEADER.pack(LOG_MAGIC, LOG_VERSION, 0) + tail, fsync=self._fsync)
        shift = (self._positions[k] if kept else self._end) - HEADER.size
        self._positions = [p - shift for p in self._positions[k:]] if kept else []
        self._terms = self._terms[k:] if kept else []
        self._first_index = self.snapshot_index + 1
        self._end = HEADER.size + len(tail)
        self._open_log()

    def _read_state(self) -> tuple[int, int]:
        path = self.directory / STATE_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return 0, NO_NODE
        try:
            doc = json.loads(raw)
        except ValueError:
            raise CorruptRaftStateError("quorum-state is not JSON", file=path) from None
        if not isinstance(doc, dict):
            raise CorruptRaftStateError("quorum-state is not a JSON object", file=path)
        if doc.get("version") != STATE_VERSION:
            raise UnsupportedRaftFormatError(f"{path} has version {doc.get('version')!r}, expected {STATE_VERSION}")
        term, voted_for, owner = doc.get("term"), doc.get("voted_for"), doc.get("node_id")
        if type(term) is not int or term < 0 or type(voted_for) is not int or voted_for < NO_NODE:
            raise CorruptRaftStateError("quorum-state term / voted_for malformed", file=path)
        if owner != self.node_id:
            raise ConfigError(f"{self.directory} belongs to Raft voter {owner!r}, not {self.node_id}")
        return term, voted_for

    def _scan(self, buf: bytes, *, recovering: bool = False) -> tuple[list[Entry], int]:
        """The entries of a log file image and the position where the valid records end."""
        if len(buf) < HEADER.size:
            raise CorruptRaftStateError("log header is incomplete", file=self._log_path, position=0)
        magic, version, _ = HEADER.unpack_from(buf)
        if magic != LOG_MAGIC:
            raise UnsupportedRaftFormatError(f"{self._log_path} has magic {magic!r}, expected {LOG_MAGIC!r}")
        if version != LOG_VERSION:
            raise UnsupportedRaftFormatError(f"{self._log_path} has version {version}, expected {LOG_VERSION}")
        entries: list[Entry] = []
        pos = HEADER.size
        while pos < len(buf):
            try:
                e, nxt = decode_entry(buf, pos, file=self._log_path)
            except CorruptRaftStateError:
                if recovering:
                    break  # a torn tail: the last append did not fully reach the disk
                raise
            if entries and (e.index != entries[-1].index + 1 or e.term < entries[-1].term):
                raise CorruptRaftStateError(f"entry {e.index} of term {e.term} does not follow entry "
                                            f"{entries[-1].index} of term {entries[-1].term}",
                                            file=self._log_path, position=pos)
            if recovering:
                self._positions.append(pos)
                self._terms.append(e.term)
            entries.append(e)
            pos = nxt
        return entries, pos

    def _recover(self) -> Recovery:
        removed = []
        for tmp in sorted(self.directory.glob("*.tmp")):
            tmp.unlink()
            removed.append(tmp.name)
        self._term, self._voted_for = self._read_state()

        self._snapshot = None
        found = sorted((int(m[1]), int(m[2]), p) for p in self.directory.iterdir()
                       if (m := _SNAPSHOT_NAME.match(p.name)))
        if found:
            index, term, path = found[-1]
            s = decode_snapshot(path.read_bytes(), file=path)
            if (s.last_index, s.last_term) != (index, term):
                raise CorruptRaftStateError(f"snapshot holds ({s.last_index}, {s.last_term}), its name "
                                            f"says ({index}, {term})", file=path)
            self._snapshot = s
            for _, _, older in found[:-1]:
                older.unlink()
                removed.append(older.name)

        if not self._log_path.exists():
            atomic_write(self._log_path, HEADER.pack(LOG_MAGIC, LOG_VERSION, 0), fsync=self._fsync)
        buf = self._log_path.read_bytes()
        entries, valid_end = self._scan(buf, recovering=True)
        truncated = len(buf) - valid_end
        self._first_index = entries[0].index if entries else self.snapshot_index + 1
        self._end = valid_end
        self._open_log()
        if truncated:
            self._file.truncate(valid_end)
            self._sync()

        dropped = 0
        if self._snapshot is not None:
            s = self._snapshot
            k = s.last_index - self._first_index
            at = self._terms[k] if 0 <= k < len(self._terms) else None
            # Another term at the snapshot's index: the log is a history the snapshot replaced.
            keep_after = s.last_index if at in (s.last_term, None) else None
            kept = [e for e in entries if e.index > s.last_index] if keep_after is not None else []
            if entries and entries[0].index > s.last_index + 1:
                raise CorruptRaftStateError(f"log starts at {entries[0].index}, after a gap from snapshot "
                                            f"{s.last_index}", file=self._log_path)
            if len(kept) != len(entries):
                dropped = len(entries) - len(kept)
                self._rewrite_log(keep_after=keep_after)
            else:
                self._first_index = s.last_index + 1
            entries = kept
        elif entries and entries[0].index != 1:
            raise CorruptRaftStateError(f"log starts at {entries[0].index} with no snapshot before it",
                                        file=self._log_path)
        last_term = entries[-1].term if entries else self._snapshot_term()
        if last_term > self._term:
            raise CorruptRaftStateError(f"log holds term {last_term} above quorum-state term {self._term}",
                                        file=self._log_path)
        return Recovery(truncated, dropped, tuple(removed))
