"""The partition manifest (`<topic>-<partition>/manifest.json`): its format and codec.

Layout: canonical JSON (keys sorted, no spaces, ASCII), UTF-8 bytes:

    {"crc32c": <uint32 CRC-32C of the canonical JSON of "manifest">,
     "manifest": {
        "topic": str, "partition": int, "topic_id": str | null,
        "generation": int,          +1 with every commit (so no two versions have the same bytes)
        "leader_epoch": int,        highest leader epoch that committed; writers below it are fenced
        "log_start_offset": int,    lowest offset the remote tier serves
        "cleaner_checkpoint": int | null,   slot for the remote compaction job (first dirty offset)
        "deleted": bool,            the topic was deleted: a tombstone that fences its old writers
        "segments": [ {             sorted by base offset
            "id": str,              32 hex digits; the objects are <base:020d>-<id>.{log,index,timeindex,epochs}
            "base_offset": int, "end_offset": int,   the offsets [base, end] the segment covers (end =
                                    the next local segment's base - 1, as Kafka's RemoteLogSegmentMetadata)
            "max_timestamp": int,   largest batch max timestamp, -1 if none
            "size_in_bytes": int,   of the .log object
            "leader_epochs": [[epoch, start offset], ...],   as in the .epochs object
            "state": 0..3,          SegmentState
            "state_epoch": int,     leader epoch of the writer of the last state change
            "origin": str,          "upload" (the leader's tiering) or the writer's name (a job)
            "index": [bytes, crc32c], "time_index": [bytes, crc32c], "epochs": [bytes, crc32c],
            "created_ms": int, "updated_ms": int,
            "delete_after_ms": int  DELETE_STARTED: objects are deleted from this time on; else -1
            "txn_index": [bytes, crc32c]   optional: the .txnindex object (aborted transactions
                                    whose ABORT marker lies in the segment); absent when there is none
            "later_aborts": [[producer id, first offset, last offset, last stable offset], ...]
                                    optional: the aborted transactions with data at or below
                                    end_offset whose ABORT marker lies after it (first offset <=
                                    end_offset < last offset; the four fields of a .txnindex entry),
                                    in marker order; [] when there is none. Written by every upload
                                    and compaction since it exists; absent in older entries, whose
                                    readers walk the later segments' .txnindex objects instead.
            "record_count": int     optional: the records of the segment's data batches (control
                                    batches not counted), as the writer's CRC-checked scan found
                                    them; absent in entries written before it existed (readers
                                    then count by reading). The `lakelog` source's count() uses it.
        }, ...]},
     "version": 1}

The CRC covers the canonical JSON of the "manifest" value. A reader refuses another version, a CRC
mismatch, a missing or mistyped field, or a manifest that breaks an invariant (ManifestFormatError).

`encode` validates the manifest and writes that canonical JSON; `decode` raises
UnsupportedManifestVersionError for another version and ManifestFormatError otherwise, naming the
object. `to_dict` is the JSON document of a manifest (for humans and the console). The states, entries and invariants are manifest_model.py;
the transitions manifest_transitions.py.

Crash behaviour: a manifest is replaced whole by a conditional PUT (see metadata.py); a crash
leaves the old or the new version. The codec is pure: bytes in, manifest out and back; the
transitions take a manifest and return the next one (or None when nothing changes).
"""

from __future__ import annotations

import json
from typing import Any

from lakelog.index.transaction_index import AbortedTxn
from lakelog.logstore.record_batch import crc32c
from lakelog.tiering.errors import (
    ManifestFormatError,
    ManifestInvariantError,
    UnsupportedManifestVersionError,
)
from lakelog.tiering.manifest_model import MANIFEST_VERSION, PartitionManifest, RemoteSegment, SegmentState, validate


# ---------------------------------------------------------------------------------------------
# codec


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _segment_to_dict(s: RemoteSegment) -> dict:
    out = {"id": s.segment_id, "base_offset": s.base_offset, "end_offset": s.end_offset,
            "max_timestamp": s.max_timestamp, "size_in_bytes": s.size_in_bytes,
            "leader_epochs": [list(e) for e in s.leader_epochs], "state": int(s.state),
            "state_epoch": s.state_epoch, "origin": s.origin,
            "index": [s.index_bytes, s.index_crc32c], "time_index": [s.time_index_bytes, s.time_index_crc32c],
            "epochs": [s.epochs_bytes, s.epochs_crc32c], "created_ms": s.created_ms,
            "updated_ms": s.updated_ms, "delete_after_ms": s.delete_after_ms}
    if s.record_count is not None:  # absent, not null, when unknown: older manifests' bytes stay as they were
        out["record_count"] = s.record_count
    if s.later_aborts is not None:
        out["later_aborts"] = [[a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset]
                               for a in s.later_aborts]
    if s.txn_index_bytes:  # absent when the segment aborted no transaction: the common bytes stay as they were
        out["txn_index"] = [s.txn_index_bytes, s.txn_index_crc32c]
    return out


def to_dict(m: PartitionManifest) -> dict:
    return {"topic": m.topic, "partition": m.partition, "topic_id": m.topic_id, "generation": m.generation,
            "leader_epoch": m.leader_epoch, "log_start_offset": m.log_start_offset,
            "cleaner_checkpoint": m.cleaner_checkpoint, "deleted": m.deleted,
            "segments": [_segment_to_dict(s) for s in m.segments]}


def encode(m: PartitionManifest) -> bytes:
    """Canonical bytes of `m` (validated first)."""
    validate(m)
    body = to_dict(m)
    return _canonical({"version": MANIFEST_VERSION, "crc32c": crc32c(_canonical(body)), "manifest": body})


class _Fields:
    """Typed access to a JSON object's fields; errors name the field and where it is."""

    def __init__(self, doc: Any, where: str) -> None:
        if not isinstance(doc, dict):
            raise ManifestFormatError(f"{where} is not a JSON object")
        self.doc = doc
        self.where = where

    def get(self, name: str, *types: type, nullable: bool = False) -> Any:
        if name not in self.doc:
            raise ManifestFormatError(f"{self.where} lacks field {name!r}")
        value = self.doc[name]
        if value is None and nullable:
            return None
        if isinstance(value, bool) and bool not in types:
            raise ManifestFormatError(f"{self.where} field {name!r} has type bool")
        if not isinstance(value, types):
            raise ManifestFormatError(f"{self.where} field {name!r} is {type(value).__name__}, "
                                      f"expected {'/'.join(t.__name__ for t in types)}")
        return value

    def pair(self, name: str) -> tuple[int, int]:
        value = self.get(name, list)
        if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ManifestFormatError(f"{self.where} field {name!r} is not a pair of integers")
        return value[0], value[1]


def _segment_from_dict(doc: Any, i: int, where: str) -> RemoteSegment:
    f = _Fields(doc, f"{where} segment #{i}")
    state_value = f.get("state", int)
    try:
        state = SegmentState(state_value)
    except ValueError:
        raise ManifestFormatError(f"{f.where} has unknown state {state_value}") from None
    epochs_raw = f.get("leader_epochs", list)
    epochs = []
    for e in epochs_raw:
        if not (isinstance(e, list) and len(e) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in e)):
            raise ManifestFormatError(f"{f.where} has a malformed leader epoch entry {e!r}")
        epochs.append((e[0], e[1]))
    index = f.pair("index")
    time_index = f.pair("time_index")
    epochs_file = f.pair("epochs")
    txn_index = f.pair("txn_index") if "txn_index" in doc else (0, 0)
    return RemoteSegment(
        segment_id=f.get("id", str), base_offset=f.get("base_offset", int), end_offset=f.get("end_offset", int),
        max_timestamp=f.get("max_timestamp", int), size_in_bytes=f.get("size_in_bytes", int),
        leader_epochs=tuple(epochs), state=state, state_epoch=f.get("state_epoch", int),
        origin=f.get("origin", str), index_bytes=index[0], index_crc32c=index[1],
        time_index_bytes=time_index[0], time_index_crc32c=time_index[1],
        epochs_bytes=epochs_file[0], epochs_crc32c=epochs_file[1],
        txn_index_bytes=txn_index[0], txn_index_crc32c=txn_index[1],
        created_ms=f.get("created_ms", int), updated_ms=f.get("updated_ms", int),
        delete_after_ms=f.get("delete_after_ms", int),
        record_count=f.get("record_count", int) if "record_count" in doc else None,
        later_aborts=_later_aborts(f) if "later_aborts" in doc else None)


def _later_aborts(f: "_Fields") -> tuple[AbortedTxn, ...]:
    out = []
    for e in f.get("later_aborts", list):
        if not (isinstance(e, list) and len(e) == 4 and all(isinstance(v, int) and not isinstance(v, bool) for v in e)):
            raise ManifestFormatError(f"{f.where} has a malformed later_aborts entry {e!r}")
        out.append(AbortedTxn(*e))
    return tuple(out)


def decode(buf: bytes, *, key: str | None = None) -> PartitionManifest:
    """Parse and check manifest bytes; raise ManifestFormatError (naming `key`) on any failure."""
    where = f"manifest {key}" if key else "manifest"
    try:
        doc = json.loads(buf)
    except (UnicodeDecodeError, ValueError) as e:
        raise ManifestFormatError(f"{where} is not JSON: {e}") from None
    top = _Fields(doc, where)
    version = doc.get("version") if isinstance(doc, dict) else None
    if version != MANIFEST_VERSION:
        raise UnsupportedManifestVersionError(f"{where} has version {version!r}; this code reads {MANIFEST_VERSION}")
    body = top.get("manifest", dict)
    crc = top.get("crc32c", int)
    actual = crc32c(_canonical(body))
    if crc != actual:
        raise ManifestFormatError(f"{where} CRC-32C is {actual}, the manifest says {crc}")
    f = _Fields(body, where)
    segments = f.get("segments", list)
    try:
        m = PartitionManifest(
            topic=f.get("topic", str), partition=f.get("partition", int), topic_id=f.get("topic_id", str, nullable=True),
            generation=f.get("generation", int), leader_epoch=f.get("leader_epoch", int),
            log_start_offset=f.get("log_start_offset", int),
            cleaner_checkpoint=f.get("cleaner_checkpoint", int, nullable=True), deleted=f.get("deleted", bool),
            segments=tuple(_segment_from_dict(s, i, where) for i, s in enumerate(segments)))
        validate(m)
    except ManifestInvariantError as e:
        raise ManifestFormatError(f"{where} breaks an invariant: {e}") from None
    return m
