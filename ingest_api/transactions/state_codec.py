"""Records of the internal compacted topic `__transaction_state`: one transactional id's metadata.

Each change of a transaction's state is one record, key = the transactional id, value = the whole
metadata after the change (Kafka's TransactionLogKey / TransactionLogValue, version 0, byte for
byte). The topic is compacted, so the latest record per transactional id survives; a record with a
null value (a tombstone) removes an expired transactional id. Integers are big-endian; strings are
a signed 16-bit byte length then UTF-8; arrays a signed 32-bit count (-1: null) then the elements.

Key (version 0):

    offset  size  type    field
    0       2     int16   key version = 0
    2       2     int16   transactional id length T
    4       T     utf-8   transactional id

Value (version 0):

    offset  size  type    field
    0       2     int16   value version = 0
    2       8     int64   producer id
    10      2     int16   producer epoch
    12      4     int32   transaction timeout, ms
    16      1     int8    state (TxnState's value: 0 Empty .. 7 PrepareEpochFence)
    17      4     int32   topic count N (-1: null; written as 0 when there is no partition)
    21      ...   N x { int16 topic length, utf-8 topic, int32 partition count K, K x int32 partition }
    ..      8     int64   last update timestamp, ms since the epoch
    ..      8     int64   transaction start timestamp, ms since the epoch (-1: no transaction)

Checksums: the record batch that carries the record has a CRC-32C over every record; these layouts
add none. After a crash, recovery cuts a torn batch, and the state change it held was never
acknowledged (the coordinator appends with acks=all and answers after the high watermark passes it).
Readers refuse unknown key or value versions with `TransactionStateRecordError` (the loader logs and
skips that one record rather than guessing).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from lakelog.infra.errors import ErrorKind
from lakelog.ingest_api.errors import NodeError

KEY_VERSION = 0
VALUE_VERSION = 0
MAX_STRING_BYTES = 32767
#: Most partitions one transaction holds (a bound on a record and on a request).
MAX_TXN_PARTITIONS = 100_000

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer id, producer epoch, timeout, state
_TIMES = struct.Struct(">qq")  # last update, transaction start
if (_I16.size, _I32.size, _I64.size, _VALUE_HEAD.size, _TIMES.size) != (2, 4, 8, 17, 16):
    raise AssertionError("the __transaction_state struct layouts changed size")


class TransactionStateRecordError(NodeError):
    """A `__transaction_state` record is malformed or of an unknown version."""

    kind = ErrorKind.CORRUPT


@dataclass(frozen=True)
class TxnRecord:
    """One transactional id's metadata as stored (the value of its latest record)."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int
    partitions: tuple[tuple[str, int], ...]
    last_update_ms: int
    start_ms: int


def _put_str(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > MAX_STRING_BYTES:
        raise ValueError(f"string of {len(b)} bytes is longer than {MAX_STRING_BYTES}")
    return _I16.pack(len(b)) + b


class _Reader:
    def __init__(self, buf: bytes, what: str) -> None:
        self.buf, self.pos, self.what = buf, 0, what

    def take(self, st: struct.Struct, field: str) -> tuple:
        if self.pos + st.size > len(self.buf):
            raise TransactionStateRecordError(f"{self.what}.{field}: past the end at byte {self.pos}")
        out = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return out

    def string(self, field: str) -> str:
        (n,) = self.take(_I16, field)
        if n < 0 or self.pos + n > len(self.buf):
            raise TransactionStateRecordError(f"{self.what}.{field}: bad length {n} at byte {self.pos - 2}")
        try:
            s = self.buf[self.pos:self.pos + n].decode("utf-8")
        except UnicodeDecodeError:
            raise TransactionStateRecordError(f"{self.what}.{field}: not UTF-8 at byte {self.pos}") from None
        self.pos += n
        return s

    def count(self, field: str, nullable: bool) -> int:
        (n,) = self.take(_I32, field)
        if n == -1 and nullable:
            return 0
        if n < 0 or n > MAX_TXN_PARTITIONS:
            raise TransactionStateRecordError(f"{self.what}.{field}: bad count {n} at byte {self.pos - 4}")
        return n

    def end(self) -> None:
        if self.pos != len(self.buf):
            raise TransactionStateRecordError(f"{self.what}: {len(self.buf)} bytes, expected {self.pos}")


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _put_str(transactional_id)


def decode_key(buf: bytes) -> str:
    r = _Reader(bytes(buf), "key")
    (version,) = r.take(_I16, "version")
    if version != KEY_VERSION:
        raise TransactionStateRecordError(f"key: unknown version {version} (this release reads {KEY_VERSION})")
    tid = r.string("transactional_id")
    r.end()
    return tid


def encode_value(v: TxnRecord) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in v.partitions:
        by_topic.setdefault(topic, []).append(partition)
    out = bytearray(_VALUE_HEAD.pack(VALUE_VERSION, v.producer_id, v.producer_epoch, v.timeout_ms, v.state))
    out += _I32.pack(len(by_topic))
    for topic in sorted(by_topic):
        parts = sorted(by_topic[topic])
        out += _put_str(topic) + _I32.pack(len(parts)) + b"".join(_I32.pack(p) for p in parts)
    out += _TIMES.pack(v.last_update_ms, v.start_ms)
    return bytes(out)


def decode_value(buf: bytes | None) -> TxnRecord | None:
    """The transactional id's metadata, or None for a tombstone."""
    if buf is None:
        return None
    r = _Reader(bytes(buf), "value")
    version, pid, epoch, timeout, state = r.take(_VALUE_HEAD, "head")
    if version != VALUE_VERSION:
        raise TransactionStateRecordError(f"value: unknown version {version} (this release reads {VALUE_VERSION})")
    partitions: list[tuple[str, int]] = []
    for _ in range(r.count("topics", nullable=True)):
        topic = r.string("topic")
        for _ in range(r.count("partitions", nullable=False)):
            partitions.append((topic, r.take(_I32, "partition")[0]))
    last_update, start = r.take(_TIMES, "timestamps")
    r.end()
    return TxnRecord(pid, epoch, timeout, state, tuple(sorted(partitions)), last_update, start)
