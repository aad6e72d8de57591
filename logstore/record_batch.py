"""Kafka RecordBatch v2 (magic 2), byte for byte.

Batch layout (all integers big-endian):

    offset  size  field
    0       8     base offset            int64   (rewritten by the leader; outside the CRC)
    8       4     batch length           int32   bytes that follow this field
    12      4     partition leader epoch int32   (stamped by the leader; outside the CRC)
    16      1     magic                  int8    = 2
    17      4     crc                    uint32  CRC-32C of bytes 21 .. end of batch
    21      2     attributes             int16   bits 0-2 compression, 3 timestamp type
                                                 (1 = LogAppendTime), 4 transactional, 5 control,
                                                 6 delete horizon set
    23      4     last offset delta      int32
    27      8     base timestamp         int64
    35      8     max timestamp          int64
    43      8     producer id            int64   -1 = none
    51      2     producer epoch         int16
    53      4     base sequence          int32
    57      4     record count           int32
    61      ...   records (compressed as one block when compression != none)

Record layout (varints are zig-zag encoded, as protobuf's sint32/sint64):

    length varint | attributes int8 | timestamp delta varlong | offset delta varint |
    key length varint (-1 = null) | key | value length varint (-1 = null) | value |
    header count varint | { key length varint | key utf-8 | value length varint | value }*

Because the base offset and the leader epoch are outside the CRC, a leader assigns offsets and
stamps its epoch without touching the payload: what a producer sent is what is stored and what a
consumer receives. Every batch that arrives from outside is checked by `validate_batch`; every batch
read back from disk has its CRC checked by the reader.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Iterable, Iterator, Sequence

try:
    from crc32c import crc32c as _crc32c_of
except ImportError:  # an executor with only pyspark + pyarrow: the native decoder's, else Python
    from lakelog.logstore.crc import crc32c as _crc32c_of

from lakelog.logstore.compression import Compression, compress, decompress
from lakelog.logstore.errors import (
    CorruptBatchError,
    CorruptRecordError,
    InvalidRecordError,
    RecordKeyRequiredError,
    RecordTooLargeError,
    UnsupportedCompressionError,
    UnsupportedMagicError,
)

try:  # the C fast path of the record walk (see _recordscan.c); pure Python otherwise
    from lakelog.logstore import _recordscan
except ImportError:  # pragma: no cover - depends on the build
    _recordscan = None

MAGIC = 2
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size
assert HEADER_SIZE == 61

#: base offset + batch length: the part of a batch not counted by `batch length`.
LOG_OVERHEAD = 12
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
RECORDS_COUNT_OFFSET = 57

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_OFFSET_AND_LENGTH = struct.Struct(">qi")
assert _OFFSET_AND_LENGTH.size == LOG_OVERHEAD

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

#: Upper bound on a batch's records once inflated; a configured limit overrides it.
DEFAULT_MAX_UNCOMPRESSED_BYTES = 64 * 1024 * 1024


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def label(self) -> str:
        return "CreateTime" if self == TimestampType.CREATE_TIME else "LogAppendTime"


def crc32c(data: bytes | bytearray | memoryview) -> int:
    """CRC-32C (Castagnoli), as Kafka's batch checksum."""
    return _crc32c_of(data)


# ---------------------------------------------------------------------------------------------
# Varints (zig-zag), as Kafka's ByteUtils.writeVarint / writeVarlong.

def encode_varint(value: int) -> bytes:
    """Zig-zag varint of a signed 64-bit value."""
    v = (value << 1) ^ (value >> 63)
    v &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def decode_varint(buf: bytes | memoryview, pos: int, limit: int | None = None,
                  max_bytes: int = 10) -> tuple[int, int]:
    """Decode one zig-zag varint at `pos`; return (value, next position). Raises ValueError."""
    end = len(buf) if limit is None else limit
    result = shift = 0
    for i in range(max_bytes):
        if pos >= end:
            raise ValueError("varint runs past the end of its buffer")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise ValueError(f"varint is longer than {max_bytes} bytes")


# ---------------------------------------------------------------------------------------------
# Records


@dataclass(frozen=True, slots=True)
class Record:
    """One record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


def encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                  headers: Sequence[tuple[str, bytes | None]] = ()) -> bytes:
    """Encode one record body and prefix it with its varint length."""
    body = bytearray(b"\x00")  # attributes: unused, always 0
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    if key is None:
        body += b"\x01"  # varint(-1)
    else:
        body += encode_varint(len(key))
        body += key
    if value is None:
        body += b"\x01"
    else:
        body += encode_varint(len(value))
        body += value
    body += encode_varint(len(headers))
    for hkey, hvalue in headers:
        kb = hkey.encode("utf-8")
        body += encode_varint(len(kb))
        body += kb
        if hvalue is None:
            body += b"\x01"
        else:
            body += encode_varint(len(hvalue))
            body += hvalue
    return encode_varint(len(body)) + bytes(body)


def build_batch(records: Sequence[Record], *, base_offset: int | None = None,
                compression: Compression = Compression.NONE,
                timestamp_type: TimestampType = TimestampType.CREATE_TIME,
                log_append_time: int | None = None,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                is_transactional: bool = False, is_control: bool = False,
                last_offset_delta: int | None = None,
                base_timestamp: int | None = None,
                delete_horizon_ms: int | None = None) -> bytes:
    """Encode a batch holding `records` (absolute offsets and timestamps).

    `last_offset_delta` and `base_timestamp` may be given to preserve a batch's original metadata
    when some of its records were removed (compaction keeps the batch's offset range).
    With `delete_horizon_ms`, the base timestamp carries the delete horizon (attribute bit 6).
    """
    if not records:
        raise InvalidRecordError("a batch needs at least one record")
    if base_offset is None:
        base_offset = records[0].offset
    if base_timestamp is None:
        base_timestamp = records[0].timestamp
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    body = bytearray()
    max_ts = NO_TIMESTAMP
    prev = -1
    for r in records:
        delta = r.offset - base_offset
        if delta <= prev:
            raise InvalidRecordError("record offsets in a batch must be strictly increasing")
        prev = delta
        max_ts = max(max_ts, r.timestamp)
        body += encode_record(delta, r.timestamp - base_timestamp, r.key, r.value, r.headers)
    if last_offset_delta is None:
        last_offset_delta = prev
    if last_offset_delta < prev:
        raise InvalidRecordError("last offset delta is below the last record's offset delta")
    payload = compress(compression, bytes(body))
    attributes = int(compression) & COMPRESSION_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
        max_ts = log_append_time if log_append_time is not None else max_ts
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
    batch = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(batch, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload),
                     partition_leader_epoch, MAGIC, 0, attributes, last_offset_delta,
                     base_timestamp, max_ts, producer_id, producer_epoch, base_sequence,
                     len(records))
    batch[HEADER_SIZE:] = payload
    _U32.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)


def simple_batch(values: Iterable[tuple[bytes | None, bytes | None]], *, timestamp: int,
                 base_offset: int = 0, compression: Compression = Compression.NONE,
                 headers: Sequence[tuple[str, bytes | None]] = ()) -> bytes:
    """Convenience for producers: (key, value) pairs at consecutive offsets, one timestamp."""
    recs = [Record(base_offset + i, timestamp, k, v, tuple(headers)) for i, (k, v) in enumerate(values)]
    return build_batch(recs, compression=compression)


# ---------------------------------------------------------------------------------------------
# Batches


class RecordBatch:
    """A read-only view of one encoded batch. Cheap to build: only the 61-byte header is parsed.

    Not thread-safe to mutate; the underlying buffer must not change while the view is used.
    """

    __slots__ = ("buffer", "base_offset", "batch_length", "partition_leader_epoch", "magic", "crc",
                 "attributes", "last_offset_delta", "base_timestamp", "max_timestamp",
                 "producer_id", "producer_epoch", "base_sequence", "record_count")

    def __init__(self, buffer: bytes | bytearray | memoryview) -> None:
        if len(buffer) < HEADER_SIZE:
            raise CorruptRecordError(f"batch of {len(buffer)} bytes is shorter than its header")
        self.buffer = buffer
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic, self.crc,
         self.attributes, self.last_offset_delta, self.base_timestamp, self.max_timestamp,
         self.producer_id, self.producer_epoch, self.base_sequence,
         self.record_count) = HEADER.unpack_from(buffer, 0)

    # -- header-derived properties
    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.has_delete_horizon else None

    def compute_crc(self) -> int:
        return crc32c(memoryview(self.buffer)[ATTRIBUTES_OFFSET:self.size_in_bytes])

    def is_valid(self) -> bool:
        """Magic is 2, the length matches the buffer, and the CRC matches."""
        return (self.magic == MAGIC and self.size_in_bytes == len(self.buffer)
                and self.batch_length >= HEADER_SIZE - LOG_OVERHEAD and self.compute_crc() == self.crc)

    def ensure_valid(self, *, file: str | None = None, position: int | None = None) -> None:
        if self.magic != MAGIC:
            raise CorruptRecordError(f"batch has magic {self.magic}, expected {MAGIC}", file=file,
                                     position=position, offset=self.base_offset)
        if self.size_in_bytes != len(self.buffer) or self.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(f"batch length {self.batch_length} does not match its bytes",
                                     file=file, position=position, offset=self.base_offset)
        crc = self.compute_crc()
        if crc != self.crc:
            raise CorruptRecordError(f"batch CRC-32C is {crc:#010x}, header says {self.crc:#010x}",
                                     file=file, position=position, offset=self.base_offset)

    # -- records
    def records_bytes(self, max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> bytes:
        """The (inflated) concatenated records."""
        raw = memoryview(self.buffer)[HEADER_SIZE:self.size_in_bytes]
        if self.compression == Compression.NONE:
            return bytes(raw)
        return decompress(self.compression, raw, max_uncompressed_bytes)

    def records(self, max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> list[Record]:
        """Decode every record (absolute offsets and timestamps)."""
        data = self.records_bytes(max_uncompressed_bytes)
        out: list[Record] = []
        _walk_records(data, self.record_count, self.last_offset_delta, consecutive=False,
                      require_keys=False, sink=out, base_offset=self.base_offset,
                      base_timestamp=self.base_timestamp)
        return out

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.record_count}, size={self.size_in_bytes}, "
                f"compression={Compression(self.compression).name if self.compression <= 4 else self.compression})")


def set_offset_and_epoch(buf: bytearray | memoryview, position: int, base_offset: int,
                         partition_leader_epoch: int) -> None:
    """Rewrite a batch's base offset and leader epoch in place; both lie outside the CRC."""
    _I64.pack_into(buf, position + BASE_OFFSET_OFFSET, base_offset)
    _I32.pack_into(buf, position + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, position: int, size: int, timestamp: int) -> None:
    """Mark a batch LogAppendTime with `timestamp` as its max timestamp and refresh its CRC."""
    (attributes,) = _I16.unpack_from(buf, position + ATTRIBUTES_OFFSET)
    _I16.pack_into(buf, position + ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, position + MAX_TIMESTAMP_OFFSET, timestamp)
    crc = crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET:position + size])
    _U32.pack_into(buf, position + CRC_OFFSET, crc)


def peek_offset_and_size(buf: bytes | memoryview, position: int) -> tuple[int, int]:
    """(base offset, total size) of the batch at `position`, from its first 12 bytes."""
    base_offset, length = _OFFSET_AND_LENGTH.unpack_from(buf, position)
    return base_offset, length + LOG_OVERHEAD


class TruncatedBatchError(CorruptRecordError):
    """The buffer ends inside a batch: a torn write at the tail of a log, or a cut request body."""


def iter_batches(buf: bytes | bytearray | memoryview, *, start: int = 0, end: int | None = None,
                 file: str | None = None, base_position: int = 0,
                 max_batch_bytes: int | None = None) -> Iterator[tuple[int, RecordBatch]]:
    """Split `buf[start:end]` into batches: yields (position, batch). Framing only, no CRC check.

    Raises TruncatedBatchError when the buffer ends inside a batch and CorruptRecordError when a
    length field is impossible. Positions are reported relative to `base_position` (a file offset).
    """
    view = memoryview(buf)
    end = len(view) if end is None else end
    pos = start
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise TruncatedBatchError(f"{end - pos} trailing bytes are shorter than a batch header",
                                      file=file, position=base_position + pos)
        _, length = _OFFSET_AND_LENGTH.unpack_from(view, pos)
        size = length + LOG_OVERHEAD
        if length < HEADER_SIZE - LOG_OVERHEAD or (max_batch_bytes is not None and size > max_batch_bytes):
            raise CorruptRecordError(f"batch length {length} is impossible", file=file,
                                     position=base_position + pos)
        if pos + size > end:
            raise TruncatedBatchError(f"batch of {size} bytes runs past the end ({end - pos} left)",
                                      file=file, position=base_position + pos)
        yield base_position + pos, RecordBatch(view[pos:pos + size])
        pos += size


# ---------------------------------------------------------------------------------------------
# Validation of batches that arrive from outside


@dataclass(frozen=True, slots=True)
class BatchSummary:
    """What validation learnt about a batch."""

    record_count: int
    max_timestamp: int
    size_in_bytes: int


def validate_batch(batch: RecordBatch, *, max_message_bytes: int,
                   consecutive_offsets: bool = True, require_keys: bool = False,
                   allow_control: bool = False,
                   max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES) -> BatchSummary:
    """Check everything about a batch before it may be appended; raise a typed error otherwise.

    `consecutive_offsets` is what a leader demands of a producer (offset deltas 0..n-1);
    replicas and compacted segments only need strictly increasing deltas.
    """
    size = batch.size_in_bytes
    if batch.magic != MAGIC:
        raise UnsupportedMagicError(f"batch magic {batch.magic} is not supported (only magic 2)")
    if size != len(batch.buffer) or batch.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptBatchError(f"batch length {batch.batch_length} does not match its {len(batch.buffer)} bytes")
    if size > max_message_bytes:
        raise RecordTooLargeError(f"batch of {size} bytes exceeds max.message.bytes={max_message_bytes}")
    crc = batch.compute_crc()
    if crc != batch.crc:
        raise CorruptBatchError(f"batch CRC-32C is {crc:#010x} but its header says {batch.crc:#010x}")
    if batch.compression > Compression.ZSTD:
        raise UnsupportedCompressionError(f"unknown compression codec id {batch.compression}")
    if batch.is_control and not allow_control:
        raise InvalidRecordError("control batches may not be produced by clients")
    count = batch.record_count
    # A producer's batch holds at least one record; a replicated one may be empty (compaction
    # keeps an idempotent producer's emptied last batch so its sequence state survives).
    if count < (1 if consecutive_offsets else 0):
        raise InvalidRecordError(f"batch record count {count} must be at least 1")
    if batch.last_offset_delta < 0:
        raise InvalidRecordError(f"last offset delta {batch.last_offset_delta} is negative")
    if consecutive_offsets and batch.last_offset_delta != count - 1:
        raise InvalidRecordError(f"last offset delta {batch.last_offset_delta} does not match "
                                 f"record count {count}")
    if batch.compression == Compression.NONE:
        data: bytes | memoryview = memoryview(batch.buffer)[HEADER_SIZE:size]
    else:
        data = batch.records_bytes(max_uncompressed_bytes)
    if _recordscan is not None:
        failure = _recordscan.walk(data, count, batch.last_offset_delta, consecutive_offsets, require_keys)
        if failure is not None:
            code, message = failure
            raise (RecordKeyRequiredError if code == 2 else InvalidRecordError)(message)
    else:
        _walk_records(data, count, batch.last_offset_delta, consecutive=consecutive_offsets,
                      require_keys=require_keys, sink=None, base_offset=0, base_timestamp=0)
    return BatchSummary(count, batch.max_timestamp, size)


def _walk_records(data: bytes | memoryview, count: int, last_offset_delta: int, *, consecutive: bool,
                  require_keys: bool, sink: list[Record] | None, base_offset: int,
                  base_timestamp: int) -> None:
    """Walk the records of a batch checking every length; decode into `sink` when given."""
    pos = 0
    end = len(data)
    prev_delta = -1
    dv = decode_varint
    try:
        for i in range(count):
            length, pos = dv(data, pos, end, 5)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                raise InvalidRecordError(f"record {i} length {length} is impossible")
            pos += 1  # attributes
            ts_delta, pos = dv(data, pos, rec_end)
            off_delta, pos = dv(data, pos, rec_end, 5)
            if consecutive:
                if off_delta != i:
                    raise InvalidRecordError(f"record {i} has offset delta {off_delta}: "
                                             f"offsets must be consecutive")
            elif off_delta <= prev_delta or off_delta > last_offset_delta:
                raise InvalidRecordError(f"record {i} offset delta {off_delta} is not increasing "
                                         f"within 0..{last_offset_delta}")
            prev_delta = off_delta
            klen, pos = dv(data, pos, rec_end, 5)
            if klen < -1 or pos + max(klen, 0) > rec_end:
                raise InvalidRecordError(f"record {i} key length {klen} is impossible")
            if klen == -1:
                if require_keys:
                    raise RecordKeyRequiredError("compacted topics require a key on every record")
                key = None
            else:
                key = bytes(data[pos:pos + klen]) if sink is not None else None
                pos += klen
            vlen, pos = dv(data, pos, rec_end, 5)
            if vlen < -1 or pos + max(vlen, 0) > rec_end:
                raise InvalidRecordError(f"record {i} value length {vlen} is impossible")
            if vlen == -1:
                value = None
            else:
                value = bytes(data[pos:pos + vlen]) if sink is not None else None
                pos += vlen
            nheaders, pos = dv(data, pos, rec_end, 5)
            if nheaders < 0 or nheaders > length:
                raise InvalidRecordError(f"record {i} header count {nheaders} is impossible")
            headers = []
            for _ in range(nheaders):
                hklen, pos = dv(data, pos, rec_end, 5)
                if hklen < 0 or pos + hklen > rec_end:
                    raise InvalidRecordError(f"record {i} header key length {hklen} is impossible")
                hkey = bytes(data[pos:pos + hklen])
                pos += hklen
                hvlen, pos = dv(data, pos, rec_end, 5)
                if hvlen < -1 or pos + max(hvlen, 0) > rec_end:
                    raise InvalidRecordError(f"record {i} header value length {hvlen} is impossible")
                if hvlen == -1:
                    hval = None
                else:
                    hval = bytes(data[pos:pos + hvlen])
                    pos += hvlen
                if sink is not None:
                    # As Kafka's Java reader: invalid UTF-8 in a header key becomes U+FFFD.
                    headers.append((hkey.decode("utf-8", errors="replace"), hval))
            if pos != rec_end:
                raise InvalidRecordError(f"record {i} length {length} does not match its fields")
            if sink is not None:
                sink.append(Record(base_offset + off_delta, base_timestamp + ts_delta, key, value,
                                   tuple(headers)))
    except ValueError as e:  # a varint that runs off its record, or undecodable utf-8
        raise InvalidRecordError(f"malformed record: {e}") from e
    if consecutive and prev_delta != last_offset_delta:
        raise InvalidRecordError(f"last offset delta {last_offset_delta} does not match the last record")
    if pos != end:
        raise InvalidRecordError(f"{end - pos} bytes follow the last of {count} records")
