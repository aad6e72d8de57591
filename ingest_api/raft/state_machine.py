"""The replicated state machine behind a Raft log, and a small key-value one for the simulation.

A state machine sees committed entries in index order, each exactly once, through `apply`, and
must be deterministic: every voter applies the same entries and must end in the same state, so
`apply` may not look at clocks, randomness or local files, and must not fail on a committed entry
(validate commands before proposing them; a malformed command is skipped the same way everywhere).

`snapshot()` returns the state as bytes (called by the host right after applying the entry the
snapshot is named after); `restore(data)` replaces the whole state with a snapshot's.

The key-value snapshot is canonical JSON: `{"version": 1, "data": {key: value, ...}}` with keys
sorted, so equal states give equal bytes. A reader refuses any other version.

Concurrency: not thread-safe; the Raft host applies entries from one thread.
"""

from __future__ import annotations

import json
from typing import Protocol

from lakelog.infra.errors import ErrorKind
from lakelog.ingest_api.raft.messages import Entry, EntryKind, RaftError

KV_SNAPSHOT_VERSION = 1


class SnapshotFormatError(RaftError):
    """A state-machine snapshot is malformed or carries an unknown version."""

    kind = ErrorKind.CORRUPT


class StateMachine(Protocol):
    def apply(self, entry: Entry) -> None:
        """Apply one committed entry (no-op entries included: they carry no command)."""

    def snapshot(self) -> bytes:
        """The whole state, as bytes a `restore` on any voter turns back into it."""

    def restore(self, data: bytes) -> None:
        """Replace the whole state with the one in `data`."""


class KeyValueStateMachine:
    """A string map; commands are JSON `{"op": "put", "key": k, "value": v}` or `{"op": "delete", "key": k}`."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    @staticmethod
    def put(key: str, value: str) -> bytes:
        return json.dumps({"op": "put", "key": key, "value": value}, sort_keys=True).encode()

    @staticmethod
    def delete(key: str) -> bytes:
        return json.dumps({"op": "delete", "key": key}, sort_keys=True).encode()

    def apply(self, entry: Entry) -> None:
        if entry.kind != EntryKind.COMMAND:
            return
        try:
            cmd = json.loads(entry.payload)
            op, key = cmd["op"], cmd["key"]
        except (ValueError, TypeError, KeyError):
            return  # skipped identically on every voter
        if op == "put" and isinstance(key, str) and isinstance(cmd.get("value"), str):
            self.data[key] = cmd["value"]
        elif op == "delete" and isinstance(key, str):
            self.data.pop(key, None)

    def snapshot(self) -> bytes:
        return json.dumps({"version": KV_SNAPSHOT_VERSION, "data": self.data}, sort_keys=True,
                          separators=(",", ":")).encode()

    def restore(self, data: bytes) -> None:
        try:
            doc = json.loads(data)
        except ValueError as e:
            raise SnapshotFormatError(f"key-value snapshot is not JSON: {e}") from None
        if not isinstance(doc, dict) or doc.get("version") != KV_SNAPSHOT_VERSION:
            raise SnapshotFormatError(f"key-value snapshot version {doc.get('version') if isinstance(doc, dict) else None!r}"
                                      f" is not {KV_SNAPSHOT_VERSION}")
        kv = doc.get("data")
        if not isinstance(kv, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in kv.items()):
            raise SnapshotFormatError("key-value snapshot data must map strings to strings")
        self.data = dict(kv)
