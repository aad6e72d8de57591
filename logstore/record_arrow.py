"""RecordBatch v2 bytes -> Arrow columns: the native decoder and the pure-Python reference.

The columns (Spark's Kafka source's, in snake case; `topic` and `partition` are constants the
caller adds):

    name            Arrow type                                  from
    offset          int64                                       base offset + record offset delta
    timestamp       timestamp[us, UTC]                          base timestamp + delta, or the
                                                                batch's max timestamp (LogAppendTime)
    timestamp_type  int32                                       attribute bit 3
    key, value      binary (null: length -1)                    the record
    headers         list<struct<key: string, value: binary>>    the record (invalid UTF-8 in a key
                                                                becomes U+FFFD, as Kafka's reader)
    leader_epoch    int32                                       partition leader epoch of the batch
    producer_id     int64                                       producer id of the batch (-1: none)

`NativeDecoder` drives `_arrowscan.c` over chunks of a `.log` (whole batches back to back): one
pass frames each batch, checks its magic and CRC-32C, walks its records with the reference's
checks and appends the wanted rows to column buffers that become Arrow arrays with
`pyarrow.Array.from_buffers` — no Python object per record. Columns left out of `columns` are not
filled at all. Compressed batches are inflated by logstore.compression and handed back to C.

`reference_arrays` builds the same arrays from `Record`s (the pure-Python path the tests compare
the native one against, and the fallback when the extension is not built).

Rows of a batch are all-or-nothing: a batch whose records fail a check contributes no row; the
caller raises. Not thread-safe: one decoder per reader.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import pyarrow as pa

try:  # the C decoder (see _arrowscan.c); the pure-Python reference otherwise
    from lakelog.logstore import _arrowscan
except ImportError:  # pragma: no cover - depends on the build
    _arrowscan = None

COLUMNS = ("offset", "timestamp", "timestamp_type", "key", "value", "headers", "leader_epoch", "producer_id")
_MASK = {name: 1 << i for i, name in enumerate(COLUMNS)}
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TYPES = {"offset": pa.int64(), "timestamp": pa.timestamp("us", tz="UTC"), "timestamp_type": pa.int32(),
         "key": pa.binary(), "value": pa.binary(), "headers": HEADERS_TYPE, "leader_epoch": pa.int32(),
         "producer_id": pa.int64()}
assert set(TYPES) == set(COLUMNS)

#: Sentinels for "no bound" in the native calls (the C side compares int64s).
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
#: A record timestamp (ms) whose microseconds do not fit an int64 cannot be a timestamp[us] value.
MAX_TIMESTAMP_MS = INT64_MAX // 1000

# Statuses of Decoder.feed (see _arrowscan.c).
DONE, FULL, INFLATE, STOP, CORRUPT, INVALID = range(6)


def native_available() -> bool:
    return _arrowscan is not None


def check_columns(columns: Iterable[str]) -> tuple[str, ...]:
    cols = tuple(columns)
    unknown = [c for c in cols if c not in _MASK]
    if unknown:
        raise ValueError(f"unknown record columns {unknown}; known: {', '.join(COLUMNS)}")
    return cols


class NativeDecoder:
    """Column buffers filled by the C decoder; `take()` turns them into Arrow arrays."""

    def __init__(self, columns: Sequence[str], *, max_rows: int, max_bytes: int,
                 segment_base: int = INT64_MIN, segment_end: int = INT64_MAX) -> None:
        """Batches must lie in [segment_base, segment_end] with increasing offsets (the base offset
        is outside the CRC: this is what catches a damaged one)."""
        self.columns = check_columns(columns)
        mask = 0
        for c in self.columns:
            mask |= _MASK[c]
        self._decoder = _arrowscan.Decoder(mask, max_rows, max_bytes, segment_base, segment_end)

    @property
    def rows(self) -> int:
        return self._decoder.rows

    def feed(self, buf, start: int, lo: int | None, hi: int | None, min_ts: int | None,
             max_ts: int | None) -> tuple[int, int, object]:
        """(status, position, detail): see the statuses in _arrowscan.c."""
        return self._decoder.feed(buf, start, INT64_MIN if lo is None else lo, INT64_MAX if hi is None else hi,
                                  INT64_MIN if min_ts is None else min_ts, INT64_MAX if max_ts is None else max_ts)

    def add_inflated(self, batch, records, lo, hi, min_ts, max_ts) -> str | None:
        """Decode an inflated batch's records; a message when they are malformed."""
        return self._decoder.add_inflated(batch, records, INT64_MIN if lo is None else lo,
                                          INT64_MAX if hi is None else hi, INT64_MIN if min_ts is None else min_ts,
                                          INT64_MAX if max_ts is None else max_ts)

    def take(self) -> tuple[int, dict[str, pa.Array]]:
        """(rows, name -> array) of what was decoded since the last take; the buffers move to Arrow."""
        (n, offset, timestamp, ts_type, key, value, headers, epoch, pid) = self._decoder.take()
        raw = {"offset": offset, "timestamp": timestamp, "timestamp_type": ts_type, "leader_epoch": epoch,
               "producer_id": pid}
        out: dict[str, pa.Array] = {}
        for name in self.columns:
            if name in raw:
                out[name] = pa.Array.from_buffers(TYPES[name], n, [None, pa.py_buffer(raw[name])])
            elif name == "key":
                out[name] = _binary(pa.binary(), n, key)
            elif name == "value":
                out[name] = _binary(pa.binary(), n, value)
            else:
                list_offsets, entries, hkeys, hvalues = headers
                struct = pa.StructArray.from_arrays([_binary(pa.string(), entries, hkeys),
                                                     _binary(pa.binary(), entries, hvalues)],
                                                    fields=list(HEADERS_TYPE.value_type))
                out[name] = pa.Array.from_buffers(HEADERS_TYPE, n, [None, pa.py_buffer(list_offsets)],
                                                  children=[struct])
        return n, out


def _binary(type_: pa.DataType, n: int, parts) -> pa.Array:
    valid, offsets, data, nulls = parts
    return pa.Array.from_buffers(type_, n, [None if valid is None else pa.py_buffer(valid), pa.py_buffer(offsets),
                                            pa.py_buffer(data)], null_count=nulls)


def reference_arrays(rows: Sequence, columns: Sequence[str]) -> dict[str, pa.Array]:
    """The same arrays built from objects with the column names as attributes (the reference)."""
    out: dict[str, pa.Array] = {}
    for name in check_columns(columns):
        if name == "timestamp":
            out[name] = pa.array([r.timestamp * 1000 for r in rows], pa.int64()).cast(TYPES[name])
        elif name == "headers":
            out[name] = pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in rows], HEADERS_TYPE)
        else:
            out[name] = pa.array([getattr(r, name) for r in rows], TYPES[name])
    return out
