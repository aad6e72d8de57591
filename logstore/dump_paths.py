"""Which files `lakelog dump-log` can read, and the bounded window it reads them through.

A path is a segment file when its name is a 20-digit base offset, or a remote tier object's
`<base offset>-<32 hex digits of segment id>`, followed by `.log`, `.index`, `.timeindex` or
`.txnindex` and
optionally one of Lakelog's transient suffixes (`.cleaned`, `.swap`, `.deleted`). Anything else is
refused with the exit code the tool returns for it (see dump.py).
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

import crc32c as _crc32c

from lakelog.logstore.record_batch import HEADER_SIZE, LOG_OVERHEAD
from lakelog.logstore.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_base_offset,
)

EXIT_OK = 0
EXIT_NOT_A_SEGMENT = 1
EXIT_UNKNOWN_SUFFIX = 2
#: What a shell reports for a process killed by SIGPIPE; returned when the reader went away.
EXIT_BROKEN_PIPE = 141

_TRANSIENT_SUFFIXES = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)
_KNOWN_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)

#: The magic byte of a batch or message, at MAGIC_OFFSET in every format.
MAGIC_BYTE = struct.Struct(">b")
#: Shortest length field a magic 2 batch can have (its header after offset and length).
MIN_V2_LENGTH = HEADER_SIZE - LOG_OVERHEAD


class DumpPathError(Exception):
    """A path cannot be dumped; carries the exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


#: A remote tier object's stem (tiering/layout.py): the base offset, '-', a 32-hex-digit segment id.
_REMOTE_STEM = re.compile(r"^\d{20}-[0-9a-f]{32}$")


@dataclass(frozen=True, slots=True)
class SegmentFile:
    """A path recognised as a segment file."""

    path: Path
    suffix: str  # LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX or TXN_INDEX_SUFFIX
    transient_suffix: str  # "" or one of .cleaned / .swap / .deleted
    base_offset: int
    #: The name before the suffix: the 20-digit base offset, or `<base offset>-<segment id>` (remote).
    stem: str = ""

    def sibling(self, suffix: str) -> Path:
        return self.path.with_name((self.stem or self.path.name[:20]) + suffix + self.transient_suffix)


def classify(path: str | os.PathLike) -> SegmentFile:
    """Recognise a segment file by its name; raise DumpPathError (with its exit code) otherwise."""
    p = Path(path)
    if not p.exists():
        raise DumpPathError(f"{path}: no such file", EXIT_NOT_A_SEGMENT)
    if p.is_dir():
        raise DumpPathError(f"{path}: is a directory; pass the segment files in it", EXIT_NOT_A_SEGMENT)
    name = p.name
    transient = next((s for s in _TRANSIENT_SUFFIXES if name.endswith(s)), "")
    core = name[:len(name) - len(transient)]
    suffix = next((s for s in _KNOWN_SUFFIXES if core.endswith(s)), None)
    if suffix is None:
        dot = core.find(".")
        shown = core[dot:] if dot >= 0 else "(none)"
        raise DumpPathError(f"{path}: unknown file suffix {shown}; dump-log reads .log, .index, "
                            f".timeindex and .txnindex segment files", EXIT_UNKNOWN_SUFFIX)
    stem = core[:len(core) - len(suffix)]
    base_offset = parse_base_offset(stem[:20]) if len(stem) == 20 or _REMOTE_STEM.match(stem) else None
    if base_offset is None:
        raise DumpPathError(f"{path}: not a segment file: the name must be the base offset in 20 digits, "
                            f"e.g. 00000000000000000000{suffix}, or a remote segment object's "
                            f"<base offset>-<segment id>{suffix}", EXIT_NOT_A_SEGMENT)
    return SegmentFile(p, suffix, transient, base_offset, stem)


class FileWindow:
    """A bounded view of a file: one buffer holding the bytes [start, start + len(buffer))."""

    def __init__(self, fd: int, size: int, chunk_bytes: int) -> None:
        self.fd = fd
        self.size = size
        self._chunk_bytes = chunk_bytes
        self._start = 0
        self._buf = b""

    def get(self, position: int, length: int) -> memoryview:
        """`length` bytes at `position`, fewer only if the file ends (or shrank) before."""
        length = max(0, min(length, self.size - position))
        if not (self._start <= position and position + length <= self._start + len(self._buf)):
            self._buf = os.pread(self.fd, max(self._chunk_bytes, length), position)
            self._start = position
        rel = position - self._start
        return memoryview(self._buf)[rel:rel + length]

    def crc32c(self, start: int, end: int) -> int:
        """CRC-32C of [start, end), read chunk by chunk (for batches too large to hold)."""
        crc = 0
        pos = start
        while pos < end:
            data = os.pread(self.fd, min(self._chunk_bytes, end - pos), pos)
            if not data:
                break
            crc = _crc32c.crc32c(data, crc)
            pos += len(data)
        return crc


def open_segment(seg: SegmentFile) -> tuple[int, int]:
    fd = os.open(seg.path, os.O_RDONLY)
    return fd, os.fstat(fd).st_size
