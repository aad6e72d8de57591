"""Kafka's control records: the COMMIT / ABORT markers that end a transaction in a partition.

A control batch is a RecordBatch v2 (record_batch.py) with attribute bits 4 (transactional) and
5 (control) set, the producer id and epoch of the transaction it ends, base sequence -1, and one
record. That record's key and value (all integers big-endian):

    key (ControlRecordType)                      value (EndTransactionMarker)
    offset  size  field                          offset  size  field
    0       2     version   int16 = 0            0       2     version            int16 = 0
    2       2     type      int16                2       4     coordinator epoch  int32
                   0 = ABORT, 1 = COMMIT

A key of another version is refused (UnsupportedFormatVersionError); unknown types decode as
UNKNOWN (Kafka's readers skip them). Pure codecs: bytes in, values out.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from lakelog.logstore.errors import CorruptRecordError, UnsupportedFormatVersionError
from lakelog.logstore.record_batch import NO_SEQUENCE, Record, RecordBatch, build_batch

CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
assert _KEY.size == 4 and _VALUE.size == 6


class ControlRecordType(enum.IntEnum):
    """The type field of a control record's key (Kafka's names and numbers)."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1


@dataclass(frozen=True, slots=True)
class EndTransactionMarker:
    """A decoded COMMIT / ABORT marker."""

    type: ControlRecordType
    coordinator_epoch: int

    @property
    def commit(self) -> bool:
        return self.type is ControlRecordType.COMMIT


def encode_key(record_type: ControlRecordType) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, int(record_type))


def encode_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def decode_key(key: bytes | None) -> ControlRecordType:
    """The type of a control record's key; CorruptRecordError on a short key."""
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(f"control record key of {0 if key is None else len(key)} bytes, need {_KEY.size}")
    version, type_id = _KEY.unpack_from(key, 0)
    if version != CONTROL_KEY_VERSION:
        raise UnsupportedFormatVersionError(f"control record key version {version}, this code reads "
                                            f"version {CONTROL_KEY_VERSION}")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


def decode_marker(key: bytes | None, value: bytes | None) -> EndTransactionMarker | None:
    """The marker a control record holds, or None when it is not a COMMIT / ABORT record."""
    record_type = decode_key(key)
    if record_type is ControlRecordType.UNKNOWN:
        return None
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(f"end transaction marker value of {0 if value is None else len(value)} bytes, "
                                 f"need {_VALUE.size}")
    version, coordinator_epoch = _VALUE.unpack_from(value, 0)
    if version != END_TXN_MARKER_VERSION:
        raise UnsupportedFormatVersionError(f"end transaction marker version {version}, this code reads "
                                            f"version {END_TXN_MARKER_VERSION}")
    return EndTransactionMarker(record_type, coordinator_epoch)


def batch_marker(batch: RecordBatch) -> EndTransactionMarker | None:
    """The marker of a control batch (its first record), None for any other batch."""
    if not batch.is_control:
        return None
    records = batch.records()
    if not records:
        return None
    return decode_marker(records[0].key, records[0].value)


def build_control_batch(*, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                        timestamp: int, base_offset: int = 0, partition_leader_epoch: int = -1) -> bytes:
    """A control batch holding one COMMIT or ABORT marker."""
    record_type = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
    record = Record(base_offset, timestamp, encode_key(record_type), encode_value(coordinator_epoch))
    return build_batch([record], base_offset=base_offset, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=NO_SEQUENCE, partition_leader_epoch=partition_leader_epoch,
                       is_transactional=True, is_control=True)
