"""A producer's RecordBatch v2 built from columns: the records section in C (`_batchbuild.encode_columns`)
when the extension is built, else record by record in Python (`record_batch.encode_record`, the
reference); the 61-byte header, compression and CRC-32C here.

Callers that hold many records (the node's JSON / binary-embedded produce path, the client's
batches) pass lists — values, and optionally keys, timestamps and headers — instead of one object
per record: the per-record work is then C's.

The batch is what `record_batch.build_batch` gives for records at offsets 0..n-1 (tests check it):
base offset 0 (the leader assigns offsets), partition leader epoch -1, magic 2, CreateTime,
compression as asked, base timestamp the first record's, max timestamp the greatest, and the
producer id / epoch / base sequence of an idempotent producer (or -1).
"""

from __future__ import annotations

import struct
from typing import Sequence

from lakelog.logstore.compression import Compression, compress
from lakelog.logstore.errors import InvalidRecordError
from lakelog.logstore.record_batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_MASK,
    crc32c,
    encode_record,
)

from lakelog.logstore.native import batchbuild as _batchbuild

NATIVE = _batchbuild is not None
_U32 = struct.Struct(">I")

Headers = Sequence[tuple[str, bytes | None]]


def encode_columns_python(base_timestamp: int, timestamps: int | Sequence[int], keys: Sequence[bytes | None] | None,
                          values: Sequence[bytes | None], headers: Sequence[Headers] | None) -> bytes:
    n = len(values)
    ts = [timestamps] * n if isinstance(timestamps, int) else timestamps
    ks = [None] * n if keys is None else keys
    hs = [()] * n if headers is None else headers
    if not len(ts) == len(ks) == len(hs) == n:
        raise ValueError("the columns differ in length")
    return b"".join(encode_record(i, ts[i] - base_timestamp, ks[i], values[i], list(hs[i])) for i in range(n))


def encode_columns(base_timestamp: int, timestamps: int | Sequence[int], keys: Sequence[bytes | None] | None,
                   values: Sequence[bytes | None], headers: Sequence[Headers] | None, *, native: bool = True) -> bytes:
    """The uncompressed records section: record i at offset delta i."""
    if native and _batchbuild is not None:
        return _batchbuild.encode_columns(base_timestamp, timestamps, keys, values, headers)
    return encode_columns_python(base_timestamp, timestamps, keys, values, headers)


def build_batch_columns(values: Sequence[bytes | None], *, timestamps: int | Sequence[int],
                        keys: Sequence[bytes | None] | None = None, headers: Sequence[Headers] | None = None,
                        compression: Compression = Compression.NONE, producer_id: int = NO_PRODUCER_ID,
                        producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                        is_transactional: bool = False, native: bool = True) -> bytes:
    """One batch of `len(values)` records. `timestamps`: one int for all, or one per record;
    `keys` / `headers`: None for all-null keys / no headers, else one per record; `is_transactional`
    sets the attribute bit of a transaction's batch (a producer id and epoch go with it)."""
    n = len(values)
    if not n:
        raise InvalidRecordError("a batch needs at least one record")
    if isinstance(timestamps, int):
        base_ts = max_ts = timestamps
    else:
        base_ts, max_ts = timestamps[0], max(timestamps)
    if compression == Compression.NONE and native and _batchbuild is not None:
        # The records land right after room for the header: one allocation, one copy of the values.
        batch = _batchbuild.encode_columns(base_ts, timestamps, keys, values, headers, HEADER_SIZE)
        payload_len = len(batch) - HEADER_SIZE
    else:
        payload = compress(compression, encode_columns(base_ts, timestamps, keys, values, headers, native=native))
        payload_len = len(payload)
        batch = bytearray(HEADER_SIZE + payload_len)
        batch[HEADER_SIZE:] = payload
    HEADER.pack_into(batch, 0, 0, HEADER_SIZE - LOG_OVERHEAD + payload_len, NO_PARTITION_LEADER_EPOCH, MAGIC, 0,
                     (int(compression) & COMPRESSION_MASK) | (TRANSACTIONAL_MASK if is_transactional else 0), n - 1, base_ts, max_ts, producer_id, producer_epoch,
                     base_sequence, n)
    _U32.pack_into(batch, CRC_OFFSET, crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]))
    return bytes(batch)
