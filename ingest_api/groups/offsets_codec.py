"""Records of the internal compacted topic `__consumer_offsets`: committed offsets.

A commit of group G for partition T-P is one record, key = (G, T, P), value = the committed offset.
The topic is compacted (`cleanup.policy=compact`), so the latest commit per key survives; a record
with a null value (a tombstone) deletes the key (offsets expired by `offsets.retention.minutes`).
Integers are big-endian; strings are a signed 16-bit byte length then UTF-8.

Key (version 1, offset commit):

    offset  size  type    field
    0       2     int16   key version = 1
    2       2     int16   group length G
    4       G     utf-8   group id
    4+G     2     int16   topic length T
    6+G     T     utf-8   topic
    6+G+T   4     int32   partition

Value (version 1):

    offset  size  type    field
    0       2     int16   value version = 1
    2       8     int64   committed offset (the next offset the group will read)
    10      4     int32   leader epoch of the record before it (-1: unknown)
    14      2     int16   metadata length M
    16      M     utf-8   metadata (the client's string, may be empty)
    16+M    8     int64   commit timestamp, ms since the epoch

Checksums: the record batch that carries the record has a CRC-32C over every record; these layouts
add none. After a crash, recovery cuts a torn batch, and the commit it held was never acknowledged
(commits are appended with acks=all and acknowledged after the high watermark passes them).
Readers refuse unknown key or value versions with `OffsetsRecordError` (the loader logs and skips
that one record rather than guessing). Key version 2 is reserved for group metadata.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from lakelog.infra.errors import ErrorKind
from lakelog.ingest_api.errors import NodeError

KEY_VERSION_OFFSET = 1
VALUE_VERSION = 1
MAX_STRING_BYTES = 32767

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqi")  # version, offset, leader epoch
_I64 = struct.Struct(">q")
assert _I16.size == 2 and _I32.size == 4 and _VALUE_HEAD.size == 14 and _I64.size == 8


class OffsetsRecordError(NodeError):
    """A `__consumer_offsets` record is malformed or of an unknown version."""

    kind = ErrorKind.CORRUPT


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    metadata: str = ""
    commit_timestamp_ms: int = 0
    leader_epoch: int = -1


def _put_str(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > MAX_STRING_BYTES:
        raise ValueError(f"string of {len(b)} bytes is longer than {MAX_STRING_BYTES}")
    return _I16.pack(len(b)) + b


def _get_str(buf: bytes, pos: int, what: str) -> tuple[str, int]:
    if pos + 2 > len(buf):
        raise OffsetsRecordError(f"{what}: length field past the end at byte {pos}")
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n < 0 or pos + n > len(buf):
        raise OffsetsRecordError(f"{what}: bad length {n} at byte {pos - 2}")
    try:
        return buf[pos:pos + n].decode("utf-8"), pos + n
    except UnicodeDecodeError:
        raise OffsetsRecordError(f"{what}: not UTF-8 at byte {pos}") from None


def encode_key(key: OffsetKey) -> bytes:
    return _I16.pack(KEY_VERSION_OFFSET) + _put_str(key.group) + _put_str(key.topic) + _I32.pack(key.partition)


def decode_key(buf: bytes) -> OffsetKey:
    buf = bytes(buf)
    if len(buf) < 2:
        raise OffsetsRecordError("key: shorter than its version field")
    (version,) = _I16.unpack_from(buf, 0)
    if version != KEY_VERSION_OFFSET:
        raise OffsetsRecordError(f"key: unknown version {version} (this release reads {KEY_VERSION_OFFSET})")
    group, pos = _get_str(buf, 2, "key.group")
    topic, pos = _get_str(buf, pos, "key.topic")
    if pos + 4 != len(buf):
        raise OffsetsRecordError(f"key: {len(buf)} bytes, expected {pos + 4}")
    (partition,) = _I32.unpack_from(buf, pos)
    return OffsetKey(group, topic, partition)


def encode_value(v: CommittedOffset) -> bytes:
    return (_VALUE_HEAD.pack(VALUE_VERSION, v.offset, v.leader_epoch) + _put_str(v.metadata)
            + _I64.pack(v.commit_timestamp_ms))


def decode_value(buf: bytes | None) -> CommittedOffset | None:
    """The committed offset, or None for a tombstone."""
    if buf is None:
        return None
    buf = bytes(buf)
    if len(buf) < _VALUE_HEAD.size:
        raise OffsetsRecordError(f"value: {len(buf)} bytes, shorter than its {_VALUE_HEAD.size}-byte head")
    version, offset, epoch = _VALUE_HEAD.unpack_from(buf, 0)
    if version != VALUE_VERSION:
        raise OffsetsRecordError(f"value: unknown version {version} (this release reads {VALUE_VERSION})")
    metadata, pos = _get_str(buf, _VALUE_HEAD.size, "value.metadata")
    if pos + 8 != len(buf):
        raise OffsetsRecordError(f"value: {len(buf)} bytes, expected {pos + 8}")
    (ts,) = _I64.unpack_from(buf, pos)
    return CommittedOffset(offset, metadata, ts, epoch)
