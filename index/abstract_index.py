"""What the offset index and the time index share (Kafka's `AbstractIndex`): a file of fixed-size
entries with no header, kept in memory as two columns for lookups and appended to as it grows.

A subclass names its entry layout (`ENTRY`, a `struct.Struct`), its name for messages (`KIND`),
its decoder (`DECODE`: bytes -> two columns) and the attribute names of the two columns
(`COLUMNS`); the file handling lives here once: opening (a file whose
size is not a multiple of the entry size is remembered as torn and loaded empty, so the owner's
`sanity_check` raises and the index is rebuilt from the `.log`), appending one packed entry,
truncating to a number of entries, fsync, close and rename.

Crash behaviour: entries are appended with `write` and fsynced only by `flush`; after a crash the
tail may be torn or lag behind the log, which the structural checks on open find.

Concurrency: not thread-safe; the owning segment serialises appends, truncation and lookups.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Callable, ClassVar, MutableSequence

from lakelog.index.errors import CorruptIndexError


def check_entry_size(buf: bytes, entry: struct.Struct, kind: str, file: str | None) -> None:
    """Raise CorruptIndexError unless `buf` holds whole entries."""
    if len(buf) % entry.size:
        raise CorruptIndexError(f"{kind} {file or ''} size {len(buf)} is not a multiple of {entry.size}")


class AbstractIndex:
    """A segment's index file of fixed-size entries, as two in-memory columns."""

    ENTRY: ClassVar[struct.Struct]
    KIND: ClassVar[str]
    DECODE: ClassVar[Callable[..., tuple[MutableSequence[int], MutableSequence[int]]]]
    COLUMNS: ClassVar[tuple[str, str]]

    def __init__(self, path: str | os.PathLike, base_offset: int, max_index_bytes: int) -> None:
        self.path = Path(path)
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.ENTRY.size)
        buf = self.path.read_bytes() if self.path.exists() else b""
        try:
            columns = type(self).DECODE(buf, file=str(self.path))
            self._corrupt_on_open = False
        except CorruptIndexError:
            columns = type(self).DECODE(b"", file=str(self.path))
            self._corrupt_on_open = True
        self._columns: tuple[MutableSequence[int], MutableSequence[int]] = columns
        for name, column in zip(self.COLUMNS, columns):  # the subclass reads them by name
            setattr(self, name, column)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    # -- queries
    def __len__(self) -> int:
        return len(self._columns[0])

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    @property
    def size_in_bytes(self) -> int:
        return len(self) * self.ENTRY.size

    def _check_not_torn(self) -> None:
        if self._corrupt_on_open:
            raise CorruptIndexError(f"{self.KIND} {self.path} has a torn entry")

    # -- mutations
    def _append_entry(self, first: int, second: int) -> None:
        self._columns[0].append(first)
        self._columns[1].append(second)
        os.write(self._fd, self.ENTRY.pack(first, second))

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._truncate_entries(0)
        self._corrupt_on_open = False

    def _truncate_entries(self, keep: int) -> None:
        for column in self._columns:
            del column[keep:]
        os.ftruncate(self._fd, keep * self.ENTRY.size)

    def flush(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename_to(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path}, base_offset={self.base_offset}, entries={len(self)})"
