"""The aborted-transaction index of a segment, `<base offset>.txnindex` (Kafka's TransactionIndex).

A file of 34-byte entries, no header, one per transaction aborted by an ABORT marker that lies in
the segment, in the order the markers were appended; all integers big-endian:

    offset  size  field
    0       2     version             int16   = 0 (any other version is refused as corrupt)
    2       8     producer id         int64
    10      8     first offset        int64   the transaction's first offset in the partition
    18      8     last offset         int64   the offset of its ABORT marker (in this segment)
    26      8     last stable offset  int64   the partition's LSO once the marker landed: the first
                                              offset of the earliest transaction still open then,
                                              else last offset + 1

A read_committed fetch of [fetch offset, upper bound) collects the entries with last offset >=
fetch offset and first offset < upper bound, segment after segment, and stops at the first entry
whose last stable offset reaches the upper bound: no earlier-starting transaction can be open past
it (`collect`). The entries before the fetch offset are skipped by a binary search on their last
offsets (increasing): none of them overlaps the range, and none can end the search, since an
entry's last stable offset is at most its last offset + 1 <= the fetch offset < the upper bound.
So a fetch looks at O(log n) entries plus those of its range, wherever it is in the segment.

The file is absent until the first abort. There is no checksum (the format is Kafka's): damage is
found structurally — a size that is not a multiple of 34, a version other than 0, a negative
producer id, first offset > last offset, a last offset outside the segment or not increasing, a
last stable offset past the entry's last offset + 1. `sanity_check` raises CorruptIndexError
and the owner rebuilds the index from the log; a damaged index is never served.

Crash behaviour: entries are appended with `write` and fsynced by `flush`; after a crash the tail
may be torn or lag the log. The log rebuilds the index of every segment it recovers, and of any
segment whose index fails `sanity_check` on open or on read.

Concurrency: not thread-safe; the owning segment (under the partition log's lock) serialises
every call.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from lakelog.index.errors import CorruptIndexError

TXN_INDEX_VERSION = 0
ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = ENTRY.size
assert ENTRY_SIZE == 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One entry of a `.txnindex`."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


@dataclass(frozen=True, slots=True)
class TxnIndexSearch:
    """What `collect` found in one index: the entries, and whether the search may stop here."""

    aborted: tuple[AbortedTxn, ...]
    complete: bool


def encode_entries(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(ENTRY.pack(TXN_INDEX_VERSION, e.producer_id, e.first_offset, e.last_offset,
                               e.last_stable_offset) for e in entries)


def decode_entries(buf: bytes | memoryview, *, file: str | None = None) -> list[AbortedTxn]:
    """The entries of a `.txnindex`; CorruptIndexError naming file, position and entry on damage."""
    if len(buf) % ENTRY_SIZE:
        raise CorruptIndexError(f"transaction index {file or ''} size {len(buf)} is not a multiple of "
                                f"{ENTRY_SIZE} (torn)")
    out = []
    for i in range(len(buf) // ENTRY_SIZE):
        version, pid, first, last, lso = ENTRY.unpack_from(buf, i * ENTRY_SIZE)
        if version != TXN_INDEX_VERSION:
            raise CorruptIndexError(f"transaction index {file or ''} entry {i} at position {i * ENTRY_SIZE} "
                                    f"has version {version}, expected {TXN_INDEX_VERSION}")
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def check_entries(entries: list[AbortedTxn], base_offset: int, next_offset: int, *, file: str | None = None) -> None:
    """Structural checks of a segment's entries against its offsets [base_offset, next_offset)."""
    previous = -1
    for i, e in enumerate(entries):
        if (e.producer_id < 0 or e.first_offset < 0 or e.first_offset > e.last_offset
                or not base_offset <= e.last_offset < next_offset or e.last_offset <= previous
                or e.last_stable_offset < 0 or e.last_stable_offset > e.last_offset + 1):
            raise CorruptIndexError(f"transaction index {file or ''} entry {i} at position {i * ENTRY_SIZE} "
                                    f"({e}) does not fit segment [{base_offset}, {next_offset})")
        previous = e.last_offset


def _last_offset(e: AbortedTxn) -> int:
    return e.last_offset


class TransactionIndex:
    """A segment's `.txnindex`, its entries held in memory (aborts are rare; the file is small)."""

    def __init__(self, path: str | os.PathLike, base_offset: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # None: not read yet, or corrupt
        self._unflushed = False
        #: The file passed `sanity_check` (or was written by this object) since it was opened.
        self.verified = False

    def _load(self) -> list[AbortedTxn]:
        if self._entries is None:
            buf = self.path.read_bytes() if self.path.exists() else b""
            self._entries = decode_entries(buf, file=str(self.path))
        return self._entries

    def entries(self) -> list[AbortedTxn]:
        """Every entry; CorruptIndexError when the file is damaged."""
        return list(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def sanity_check(self, next_offset: int) -> None:
        """Raise CorruptIndexError unless the file decodes and fits the segment's offsets."""
        self._entries = None
        self.verified = False
        try:
            check_entries(self._load(), self.base_offset, next_offset, file=str(self.path))
        except CorruptIndexError:
            self._entries = None
            raise
        self.verified = True

    def append(self, entry: AbortedTxn) -> None:
        entries = self._load()
        if entries and entry.last_offset <= entries[-1].last_offset:
            raise CorruptIndexError(f"transaction index {self.path}: entry at last offset {entry.last_offset} "
                                    f"does not follow {entries[-1].last_offset}")
        with open(self.path, "ab") as f:
            f.write(encode_entries([entry]))
        entries.append(entry)
        self._unflushed = True

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearch:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), looking only at
        the entries from the first whose last offset reaches `fetch_offset` (module doc)."""
        if upper_bound_offset <= fetch_offset:
            return TxnIndexSearch((), True)  # an empty range overlaps nothing
        entries = self._load()
        found = []
        for i in range(bisect.bisect_left(entries, fetch_offset, key=_last_offset), len(entries)):
            e = entries[i]
            if e.first_offset < upper_bound_offset:
                found.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearch(tuple(found), True)
        return TxnIndexSearch(tuple(found), False)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker lies at or above `offset` (the log is cut there). A
        damaged file is left as it is: the next read or open finds it and it is rebuilt."""
        try:
            entries = self._load()
        except CorruptIndexError:
            return
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) != len(entries):
            self.write_all(keep)

    def write_all(self, entries: list[AbortedTxn]) -> None:
        """Replace the file's content (a rebuild or a truncation); an empty index has no file."""
        if not entries:
            self.path.unlink(missing_ok=True)
        else:
            tmp = self.path.with_name(self.path.name + ".tmp")
            with open(tmp, "wb") as f:
                f.write(encode_entries(entries))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        self._entries = list(entries)
        self._unflushed = False
        self.verified = True

    def reset(self) -> None:
        self.write_all([])

    def flush(self) -> None:
        if self._unflushed and self.path.exists():
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._unflushed = False

    def rename_to(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []
        self.verified = True

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path})"
