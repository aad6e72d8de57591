"""Small versioned checkpoint files kept in a partition directory.

Text layout, as Kafka's checkpoint files:

    line 1   version   (0)
    line 2   count     (number of entry lines that follow)
    line 3+  entries   (space-separated integers)

Written crash-safely (temp file, fsync, rename, fsync the directory): after a crash a reader sees
the old or the new file, never a mix. A reader refuses an unknown version, a count that does not
match, or a malformed line, with the file named in the error.
"""

from __future__ import annotations

import os
from pathlib import Path

from lakelog.logstore.errors import CorruptRecordError, UnsupportedFormatVersionError
from lakelog.logstore.fileutil import atomic_write

CHECKPOINT_VERSION = 0


def write_checkpoint(path: str | os.PathLike, entries: list[tuple[int, ...]], *, fsync: bool = True,
                     batchable: bool = False) -> None:
    """Replace the file with `entries`; with `batchable`, inside a `SyncBatch` (fileutil.py) the
    replacement is made durable by the batch's sync rather than before this returns."""
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [" ".join(str(v) for v in e) for e in entries]
    atomic_write(path, ("\n".join(lines) + "\n").encode("ascii"), fsync=fsync, batchable=batchable)


def read_checkpoint(path: str | os.PathLike, width: int) -> list[tuple[int, ...]] | None:
    """Entries of `width` integers each; None if the file does not exist."""
    path = Path(path)
    try:
        text = path.read_text("ascii")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise CorruptRecordError("checkpoint holds non-ASCII bytes", file=str(path)) from None
    lines = text.splitlines()
    try:
        version = int(lines[0])
    except (IndexError, ValueError):
        raise CorruptRecordError("checkpoint has no version line", file=str(path)) from None
    if version != CHECKPOINT_VERSION:
        raise UnsupportedFormatVersionError(f"checkpoint {path} has version {version}, expected {CHECKPOINT_VERSION}")
    try:
        count = int(lines[1])
        entries = [tuple(int(v) for v in line.split()) for line in lines[2:] if line.strip()]
    except (IndexError, ValueError):
        raise CorruptRecordError("checkpoint has a malformed line", file=str(path)) from None
    if count != len(entries) or any(len(e) != width for e in entries):
        raise CorruptRecordError(f"checkpoint declares {count} entries of {width} fields, holds "
                                 f"{len(entries)}", file=str(path))
    return entries
