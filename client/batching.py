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

from lakelog.logstore.batch_columns import build_batch_columns
from lakelog.logstore.compression import Compression
from lakelog.logstore.record_batch import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
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
    """One batch of record tuples: logstore's column builder (`batch_columns.build_batch_columns`)
    over the tuples' columns, so the header and CRC are assembled in one place."""
    if not records:
        raise ValueError("a batch needs at least one record")
    return build_batch_columns([r[2] for r in records], timestamps=[r[0] for r in records],
                               keys=[r[1] for r in records], headers=[list(r[3]) for r in records],
                               compression=compression, producer_id=producer_id, producer_epoch=producer_epoch,
                               base_sequence=base_sequence, native=native)
