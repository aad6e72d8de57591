"""The cluster events file: `<data dir>/cluster-events.log`, so the console's recent cluster events
(`ingest_api/cluster/events.py`) survive a node restart.

Layout (UTF-8 text, one record per line, `\\n`-terminated):

    line 1          `lakelog-cluster-events 1`: magic and format version
    lines 2..       `<CRC-32C of the JSON bytes, 8 lower-case hex digits> <the event as compact JSON>`

The CRC covers the JSON bytes of its line. A reader refuses another magic or version
(`EventFileError`; the node then sets the file aside as `cluster-events.log.bad` and starts a new
one: the events are a convenience, never a reason not to start). Reading stops at the first line
that is incomplete (no newline: a write torn by a crash) or whose CRC or JSON is wrong; the events
before it are kept, and the file is rewritten with them when it is opened, so an append never
follows damage.

Bounds: at most `max_events` events are loaded; appends are counted, and once the file holds
2 x `max_events` events it is rewritten with the newest `max_events` (temp file, fsync,
`os.replace`, fsync of the directory), so it never holds more than 2 x `max_events` lines of at
most `MAX_LINE_BYTES` each (a longer event is not written).

Crash behaviour: each event is one `write` of a whole line, not fsynced (the events are a view of
the metadata log, which is the durable record): a killed process loses none that were written, a
machine crash may lose the last few, and a torn last line is dropped on read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from lakelog.logstore.fileutil import atomic_write
from lakelog.logstore.record_batch import crc32c

MAGIC = "lakelog-cluster-events"
VERSION = 1
HEADER = f"{MAGIC} {VERSION}\n"
FILE_NAME = "cluster-events.log"
MAX_LINE_BYTES = 8192


class EventFileError(ValueError):
    """The events file is not one this version reads (another magic or version)."""


def encode_line(event: dict) -> bytes:
    body = json.dumps(event, separators=(",", ":"), sort_keys=True).encode()
    return b"%08x " % crc32c(body) + body + b"\n"


def decode(data: bytes, path: str = "") -> tuple[list[dict], bool]:
    """(the events of a file's bytes, in order; whether the whole file was read cleanly)."""
    if not data:
        return [], True
    header, sep, rest = data.partition(b"\n")
    if not sep or header.decode("utf-8", "replace") != HEADER.rstrip("\n"):
        raise EventFileError(f"{path}: not a cluster events file of version {VERSION} "
                             f"(starts {header[:40].decode('utf-8', 'replace')!r})")
    events: list[dict] = []
    while rest:
        line, sep, rest = rest.partition(b"\n")
        if not sep:
            return events, False  # torn: the write of the last line did not complete
        try:
            crc, body = line[:8], line[9:]
            if line[8:9] != b" " or int(crc, 16) != crc32c(body):
                raise ValueError("CRC-32C mismatch")
            event = json.loads(body)
            if not isinstance(event, dict) or not isinstance(event.get("seq"), int):
                raise ValueError("not an event")
        except ValueError:
            return events, False
        events.append(event)
    return events, True


class EventFile:
    """The events file of one node; not thread-safe (its owner holds a lock around every call)."""

    def __init__(self, path: str | os.PathLike, max_events: int) -> None:
        self.path = Path(path)
        self.max_events = max_events
        self._lines = 0
        self._fh = None

    def load(self) -> list[dict]:
        """The newest `max_events` events kept; rewrites the file with them (a damaged or torn tail,
        a file of another version set aside as `.bad`)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            data = b""
        try:
            events, _ = decode(data, str(self.path))
        except EventFileError:
            os.replace(self.path, self.path.with_name(self.path.name + ".bad"))
            events = []
        events = events[-self.max_events:]
        self._rewrite(events)
        return events

    def append(self, event: dict) -> None:
        line = encode_line(event)
        if len(line) > MAX_LINE_BYTES:
            return
        if self._fh is None:
            self._fh = open(self.path, "ab", buffering=0)
        self._fh.write(line)
        self._lines += 1

    def compact(self, newest: list[dict]) -> bool:
        """Rewrite the file with `newest` once it holds 2 x max_events events; whether it did."""
        if self._lines < 2 * self.max_events:
            return False
        self._rewrite(newest[-self.max_events:])
        return True

    def _rewrite(self, events: list[dict]) -> None:
        self.close()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, HEADER.encode() + b"".join(line for line in map(encode_line, events)
                                                           if len(line) <= MAX_LINE_BYTES))
        self._lines = len(events)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
