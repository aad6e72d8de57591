"""Confluent's wire format: how a record's key or value names the schema it was written with.

Byte layout (big-endian):

    offset  size  field
    0       1     magic byte, 0
    1       4     schema id, int32 (a registry id, 1..2^31-1)
    5       var   Protobuf only: the message indexes, the path from the file's top-level messages
                  to the record's message: a zig-zag varint count N, then N zig-zag varint
                  indexes; the single byte 0 (N = 0) stands for [0], the first message
    ...     rest  the payload: Avro binary (no container header), JSON text, Protobuf binary

There is no checksum (the record batch's CRC-32C covers the bytes). Pure: `encode` and `decode`
hold no state; `decode` raises `WireFormatError` (a typed error naming the byte position) on a
wrong magic byte, a truncated header, an id out of range, or message indexes that are malformed
or above `MAX_MESSAGE_INDEXES`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from lakelog.ingest_api.errors import InvalidRequestError

MAGIC = 0
HEADER = struct.Struct(">bi")  # magic, schema id
assert HEADER.size == 5
MAX_MESSAGE_INDEXES = 128  # nesting depth of a Protobuf message; deeper paths are refused
MAX_VARINT_BYTES = 10
MAX_ID = (1 << 31) - 1


class WireFormatError(InvalidRequestError):
    """The bytes are not in Confluent's wire format (magic byte, schema id, message indexes)."""


@dataclass(frozen=True)
class WireRecord:
    schema_id: int
    payload: bytes
    message_indexes: tuple[int, ...] = ()  # Protobuf only; () when not asked to read them


def encode(schema_id: int, payload: bytes, message_indexes: Sequence[int] | None = None) -> bytes:
    """The framed bytes; `message_indexes` (Protobuf) as written by Confluent's serializers ([0] as one 0 byte)."""
    if type(schema_id) is not int or not 1 <= schema_id <= MAX_ID:
        raise WireFormatError(f"schema id {schema_id!r} is not in 1..{MAX_ID}")
    out = bytearray(HEADER.pack(MAGIC, schema_id))
    if message_indexes is not None:
        indexes = list(message_indexes)
        if len(indexes) > MAX_MESSAGE_INDEXES or any(type(i) is not int or not 0 <= i <= MAX_ID for i in indexes):
            raise WireFormatError(f"message indexes must be at most {MAX_MESSAGE_INDEXES} integers in 0..{MAX_ID}")
        if indexes == [0]:
            out.append(0)
        else:
            _put_zigzag(out, len(indexes))
            for i in indexes:
                _put_zigzag(out, i)
    out += payload
    return bytes(out)


def decode(buf: bytes, *, protobuf: bool = False) -> WireRecord:
    """Split framed bytes into (schema id, payload[, message indexes]); WireFormatError when they are not framed."""
    if len(buf) < HEADER.size:
        raise WireFormatError(f"{len(buf)} bytes are fewer than the wire format's 5-byte header")
    magic, schema_id = HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise WireFormatError(f"unknown magic byte {magic} at byte 0 (expected {MAGIC})")
    if not 1 <= schema_id <= MAX_ID:
        raise WireFormatError(f"schema id {schema_id} at byte 1 is not in 1..{MAX_ID}")
    pos = HEADER.size
    indexes: tuple[int, ...] = ()
    if protobuf:
        count, pos = _get_zigzag(buf, pos)
        if count == 0:
            indexes = (0,)
        else:
            if not 0 < count <= MAX_MESSAGE_INDEXES:
                raise WireFormatError(f"message index count {count} at byte 5 is not in 0..{MAX_MESSAGE_INDEXES}")
            out = []
            for _ in range(count):
                at = pos
                i, pos = _get_zigzag(buf, pos)
                if not 0 <= i <= MAX_ID:
                    raise WireFormatError(f"message index {i} at byte {at} is not in 0..{MAX_ID}")
                out.append(i)
            indexes = tuple(out)
    return WireRecord(schema_id, bytes(buf[pos:]), indexes)


def _put_zigzag(out: bytearray, n: int) -> None:
    z = (n << 1) ^ (n >> 63)
    while z & ~0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


def _get_zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    z = shift = 0
    start = pos
    while True:
        if pos >= len(buf):
            raise WireFormatError(f"truncated varint at byte {start}")
        if pos - start >= MAX_VARINT_BYTES:
            raise WireFormatError(f"varint at byte {start} is longer than {MAX_VARINT_BYTES} bytes")
        b = buf[pos]
        pos += 1
        z |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            break
    return (z >> 1) ^ -(z & 1), pos
