"""RecordBatch v2 building from record tuples: the records section natively (`_batchbuild`, C), or in
pure Python (`logstore.record_batch.encode_record`, the reference); header, compression and CRC-32C
here. Both paths give the same bytes as `logstore.record_batch.build_batch` (tests check it). The
Producer itself holds a batch as columns and builds it with `logstore.batch_columns` (same bytes);
`record_size_estimate` and `CODECS` are its, the tuple builders serve tools and tests.

A producer batch: base offset 0 (the leader assigns offsets), partition leader epoch -1, magic 2,
CreateTime, offset deltas 0..n-1, base timestamp = the first record's, and the producer id / epoch /
base sequence of an idempotent producer (or -1).
"""

from __future__ import annotations

from typing import Sequence

from lakelog.logstore.compression import Compression, compress
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
    crc32c,
    encode_record,
)

from lakelog.logstore.native import batchbuild as _batchbuild

#: One record as the producer holds it: (timestamp ms, key, value, headers).
RecordTuple = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]

CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}

NATIVE = _batchbuild is not None


def encode_records_python(base_timestamp: int, records: Sequence[RecordTuple]) -> bytes:
    return b"".join(encode_record(i, ts - base_timestamp, k, v, list(h)) for i, (ts, k, v, h) in enumerate(records))


def encode_records(base_timestamp: int, records: Sequence[RecordTuple], *, native: bool = True) -> bytes:
    if native and _batchbuild is not None:
        return _batchbuild.encode_records(base_timestamp, records)
    return encode_records_python(base_timestamp, records)


def record_size_estimate(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]) -> int:
    """Upper bound of one record's encoded size (what batch.size counts)."""
    return 21 + len(key or b"") + len(value or b"") + sum(10 + len(n) * 4 + len(v or b"") for n, v in headers)


def build_producer_batch(records: Sequence[RecordTuple], *, compression: Compression = Compression.NONE,
                         producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                         base_sequence: int = NO_SEQUENCE, native: bool = True) -> bytes:
    if not records:
        raise ValueError("a batch needs at least one record")
    base_ts = records[0][0]
    max_ts = max(r[0] for r in records)
    payload = compress(compression, encode_records(base_ts, records, native=native))
    batch = bytearray(HEADER_SIZE + len(payload))
    HEADER.pack_into(batch, 0, 0, HEADER_SIZE - LOG_OVERHEAD + len(payload), NO_PARTITION_LEADER_EPOCH, MAGIC, 0,
                     int(compression) & COMPRESSION_MASK, len(records) - 1, base_ts, max_ts, producer_id,
                     producer_epoch, base_sequence, len(records))
    batch[HEADER_SIZE:] = payload
    batch[CRC_OFFSET:CRC_OFFSET + 4] = crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    return bytes(batch)
