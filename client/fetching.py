"""The consumer's side of the binary fetch path: RecordBatch bytes -> Message tuples.

A fetch answered as `application/vnd.kafka.recordbatch` is whole batches back to back, exactly as
stored (docs/http-api.md#fetch). Per batch, as Kafka's consumer does with `check.crcs=true`: the
framing and magic are checked, the CRC-32C over attributes..end is checked, control batches are
skipped (they carry no application records), the records section is inflated with the batch's
codec, and the records at or above the requested offset are decoded — by the C extension
(`_batchbuild.decode_records`) when it is built, else by `RecordBatch.records()` (the reference;
tests check both give the same messages). A LogAppendTime batch gives every record its max
timestamp. The first batch may start below the requested offset (batches are never split).

Pure functions; no I/O.
"""

from __future__ import annotations

from typing import NamedTuple

from lakelog.logstore.compression import Compression, decompress
from lakelog.logstore.errors import CorruptRecordError
from lakelog.logstore.record_batch import (
    DEFAULT_MAX_UNCOMPRESSED_BYTES,
    HEADER_SIZE,
    MAGIC,
    TimestampType,
    iter_batches,
)

from lakelog.logstore.native import batchbuild as _batchbuild

NATIVE = _batchbuild is not None


class Message(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int


class Fetched(NamedTuple):
    """What one fetch response held: the messages, and the offset to fetch next."""

    messages: list[Message]
    next_offset: int


def decode_fetch(data: bytes, topic: str, partition: int, offset: int, *, native: bool = True,
                 max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> Fetched:
    """Decode a binary fetch response asked from `offset`. Raises CorruptRecordError on a torn
    or corrupt batch (naming the batch's base offset and its position in the response)."""
    out: list[Message] = []
    next_offset = offset
    use_native = native and _batchbuild is not None
    for pos, b in iter_batches(data):
        where = f"fetch of {topic}-{partition} at {offset}"
        if b.magic != MAGIC:
            raise CorruptRecordError(f"batch has magic {b.magic}, expected {MAGIC}", file=where, position=pos,
                                     offset=b.base_offset)
        b.ensure_valid(file=where, position=pos)
        next_offset = max(next_offset, b.next_offset)
        if b.is_control or b.last_offset < offset:
            continue
        append_ts = b.max_timestamp if b.timestamp_type == TimestampType.LOG_APPEND_TIME else -1
        if use_native:
            raw = b.buffer[HEADER_SIZE:]
            if b.compression != Compression.NONE:
                raw = decompress(b.compression, raw, max_uncompressed_bytes)
            try:
                out.extend(_batchbuild.decode_records(raw, b.base_offset, b.base_timestamp, append_ts, offset,
                                                      topic, partition, Message))
            except ValueError as e:
                raise CorruptRecordError(str(e), file=where, position=pos, offset=b.base_offset) from None
        else:
            for r in b.records(max_uncompressed_bytes):
                if r.offset >= offset:
                    out.append(Message(topic, partition, r.offset, r.key, r.value, list(r.headers),
                                       append_ts if append_ts >= 0 else r.timestamp))
    return Fetched(out, next_offset)
