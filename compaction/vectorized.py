"""Compaction decided over decoded columns: compactor.py's rules, in bulk.

The reference (`compactor.build_offset_map`, `compactor.compact_batches`) decodes every record into
a Python object, decides record by record and re-encodes. Here the records of many batches are
decoded at once by the native decoder (logstore/record_arrow.py) into Arrow columns, and:

  * the offset map is key -> max(offset) over the keyed records of the mapped batches, a
    sort per chunk of batches (`bounded_map.latest`), the chunks' maps merged (`build_offset_map`);
  * each record's verdict is computed for a whole chunk with Arrow compute, by the same numbered
    rules as `compactor.decide_record`: no key -> drop; a later offset for the key -> drop;
    a tombstone past its batch's delete horizon -> drop; else keep; and a record younger than
    `min.compaction.lag.ms` is kept whatever the rule said (`compact_batches`);
  * a batch whose records all survive (and needs no delete horizon) is its original bytes; an
    emptied one is dropped; the others are re-encoded from their surviving rows only, with the
    same header fields as `compactor.clean_batch` (LogAppendTime batches, whose record timestamps
    the columns do not carry, go through `clean_batch` itself).

Every outcome equals the reference's byte for byte (tests/unit/test_compactor.py checks it); the
batch framing, order and offset checks are the caller's (the remote reader checks CRCs and
offsets before a batch arrives here). `build_offset_map` returns None when the distinct keys do not
fit `max_entries`: the caller then uses the reference, which maps a prefix.

Not thread-safe; pure apart from the decoder's buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.compaction.bounded_map import latest
from lakelog.compaction.compactor import (
    BatchOutcome,
    CleaningParams,
    CompactionStats,
    OffsetMap,
    OffsetMapResult,
    clean_batch,
    clean_marker,
    verbatim,
)
from lakelog.compaction.txn_markers import TransactionCleaning
from lakelog.infra.errors import invariant
from lakelog.logstore import record_arrow as ra
from lakelog.logstore.compression import Compression, decompress
from lakelog.logstore.errors import CorruptRecordError, InvalidRecordError
from lakelog.logstore.record_batch import HEADER_SIZE, Record, RecordBatch, TimestampType, build_batch

#: Rows decoded at once, and the most key/value bytes held: bounds a task's memory, not a segment's.
CHUNK_ROWS = 262_144
CHUNK_BYTES = 64 * 1024 * 1024


def available() -> bool:
    return ra.native_available()


@dataclass(frozen=True, slots=True)
class ArrowOffsetMap:
    """key -> latest offset as two aligned Arrow arrays (keys distinct)."""

    keys: pa.Array
    offsets: pa.Array

    def __len__(self) -> int:
        return len(self.keys)

    def latest(self, keys: pa.Array) -> pa.Array:
        """The mapped offset of each key (null: not mapped, or a null key)."""
        return pc.take(self.offsets, pc.index_in(keys, value_set=self.keys))

    def to_offset_map(self, max_entries: int) -> OffsetMap:
        m = OffsetMap(max(max_entries, len(self.keys), 1))
        for k, o in sorted(zip(self.keys.to_pylist(), self.offsets.to_pylist()), key=lambda kv: kv[1]):
            m.put(k, o)
        return m


@dataclass(frozen=True, slots=True)
class BatchStart:
    """What `_chunks(keep_batches=False)` keeps of a decoded batch: its base offset only."""

    base_offset: int


def _chunks(batches: Iterable[RecordBatch], columns: list[str], max_uncompressed_bytes: int, *,
            keep_batches: bool = True, max_rows: int | None = None
            ) -> Iterator[tuple[list[tuple[RecordBatch, int, int]], int, dict]]:
    """Decode `batches` in chunks of at most `max_rows` (default CHUNK_ROWS) rows:
    ([(batch, first row, end row)], rows, name -> array).
    Control batches have no rows. With `keep_batches=False` a span holds a `BatchStart` instead
    of the batch: the decoder copies what it decodes, and a batch's buffer is a view that keeps
    its whole read of the segment alive, so a map over the keys (which never needs the bytes
    again) holds one batch's read at a time instead of a whole chunk of rows' reads (up to
    CHUNK_ROWS rows of batches: the whole run with large values, whose keys stay far below
    CHUNK_BYTES)."""
    decoder = ra.NativeDecoder(columns, max_rows=max_rows or CHUNK_ROWS, max_bytes=CHUNK_BYTES)
    spans: list[tuple[RecordBatch, int, int]] = []
    for batch in batches:
        while True:
            start = decoder.rows
            status, pos, detail = decoder.feed(batch.buffer, 0, None, None, None, None)
            if status == ra.FULL:
                n, cols = decoder.take()
                yield spans, n, cols
                spans = []
                continue
            if status == ra.INFLATE:
                raw = memoryview(batch.buffer)[HEADER_SIZE:batch.size_in_bytes]
                failure = decoder.add_inflated(batch.buffer, decompress(batch.compression, raw, max_uncompressed_bytes),
                                               None, None, None, None)
                if failure is not None:
                    raise InvalidRecordError(failure)
            elif status == ra.INVALID:
                raise InvalidRecordError(detail)
            elif status != ra.DONE:
                raise CorruptRecordError(f"batch at offset {batch.base_offset}: {detail}", offset=batch.base_offset)
            spans.append((batch if keep_batches else BatchStart(batch.base_offset), start,  # type: ignore[arg-type]
                          decoder.rows))
            break
    if spans:
        n, cols = decoder.take()
        yield spans, n, cols


def build_offset_map(batches: Iterable[RecordBatch], *, start_offset: int, end_offset: int, max_entries: int,
                     max_uncompressed_bytes: int) -> tuple[OffsetMapResult, ArrowOffsetMap] | None:
    """`compactor.build_offset_map` over decoded columns; None when the keys do not all fit."""
    invariant(start_offset <= end_offset, f"dirty section [{start_offset}, {end_offset}) is reversed")
    state = {"map_end": end_offset, "batches": 0}

    def mapped() -> Iterator[RecordBatch]:
        for batch in batches:
            if batch.last_offset < start_offset:
                continue
            if batch.last_offset >= end_offset:
                state["map_end"] = min(end_offset, max(start_offset, batch.base_offset))
                return
            state["batches"] += 1
            yield batch

    parts: list[pa.Table] = []
    records = 0
    for _, _, cols in _chunks(mapped(), ["offset", "key"], max_uncompressed_bytes, keep_batches=False):
        table = pa.table({"key": cols["key"], "offset": cols["offset"]}).filter(pc.is_valid(cols["key"]))
        records += table.num_rows
        part = latest(table)
        parts.append(part)
        if part.num_rows > max_entries:
            return None
    if parts:
        merged = latest(pa.concat_tables(parts)) if len(parts) > 1 else parts[0]
        keys, offsets = merged.column("key"), merged.column("offset")
        keys, offsets = keys.combine_chunks(), offsets.combine_chunks()
    else:
        keys, offsets = pa.array([], pa.binary()), pa.array([], pa.int64())
    if len(keys) > max_entries:
        return None
    arrow_map = ArrowOffsetMap(keys, offsets)
    result = OffsetMapResult(_LazyOffsetMap(arrow_map, max_entries), state["map_end"], False, state["batches"], records)
    return result, arrow_map


class _LazyOffsetMap(OffsetMap):
    """An OffsetMap whose dict is built only if some code asks a key of it (the reference path)."""

    __slots__ = ("_arrow", "_built")

    def __init__(self, arrow_map: ArrowOffsetMap, max_entries: int) -> None:
        super().__init__(max(max_entries, 1))
        self._arrow = arrow_map
        self._built = False
        if len(arrow_map):
            self.latest_offset = pc.max(arrow_map.offsets).as_py()

    def _build(self) -> None:
        if not self._built:
            self._built = True
            self._offsets.update(zip(self._arrow.keys.to_pylist(), self._arrow.offsets.to_pylist()))

    def __len__(self) -> int:
        return len(self._arrow)

    def __contains__(self, key: bytes) -> bool:
        self._build()
        return key in self._offsets

    def get(self, key: bytes) -> int | None:
        self._build()
        return self._offsets.get(key)

    def items(self):
        self._build()
        return iter(self._offsets.items())


def _cumulative(mask: pa.Array) -> list[int]:
    """[0, c1, c2, ...]: the running count of true values (for per-batch counts by difference)."""
    if len(mask) == 0:
        return [0]
    return [0] + pc.cumulative_sum(pc.cast(mask, pa.int64())).to_pylist()


def compact_batches(batches: Iterable[RecordBatch], arrow_map: ArrowOffsetMap, map_end_offset: int,
                    params: CleaningParams, *, stats: CompactionStats | None = None,
                    txns: TransactionCleaning | None = None) -> Iterator[BatchOutcome]:
    """`compactor.compact_batches` (without `producer_last_offsets`) over decoded columns, for a
    round without aborted transactions; markers follow `clean_marker` by `txns` (the round's),
    and are copied as they are without it."""
    tracker = txns if txns is not None else TransactionCleaning(())
    previous_last = [-1]

    def checked() -> Iterator[RecordBatch]:
        for batch in batches:
            invariant(batch.base_offset > previous_last[0],
                      f"batch at {batch.base_offset} does not follow offset {previous_last[0]}")
            previous_last[0] = batch.last_offset
            yield batch

    columns = ["offset", "timestamp", "key", "value", "headers"]
    lag = params.min_compaction_lag_ms
    for spans, n, cols in _chunks(checked(), columns, params.max_uncompressed_bytes):
        offsets, keys, values = cols["offset"], cols["key"], cols["value"]
        ts_ms = pc.divide(pc.cast(cols["timestamp"], pa.int64()), 1000)
        latest = arrow_map.latest(keys)
        no_key = pc.is_null(keys)
        superseded = pc.and_(pc.invert(no_key), pc.fill_null(pc.less(offsets, latest), False))
        tomb = pc.is_null(values)
        passed = [(b.has_delete_horizon and params.now_ms >= b.base_timestamp, r0, r1) for b, r0, r1 in spans]
        if any(p for p, _, _ in passed):
            flags: list[bool] = []
            for p, r0, r1 in passed:
                flags.extend([p] * (r1 - r0))
            expired = pc.and_(pc.and_(tomb, pa.array(flags, pa.bool_())),
                              pc.invert(pc.or_(no_key, superseded)))
        else:
            expired = pa.array([False] * n, pa.bool_())
        dropped = pc.or_(pc.or_(no_key, superseded), expired)
        young = pc.greater(ts_ms, params.now_ms - lag) if lag > 0 else pa.array([False] * n, pa.bool_())
        for_lag = pc.and_(dropped, young)
        kept = pc.or_(pc.invert(dropped), young)
        kept_tomb = pc.and_(kept, tomb)
        c_kept, c_tomb = _cumulative(kept), _cumulative(kept_tomb)
        c_sup = _cumulative(pc.and_(superseded, pc.invert(young)))
        c_exp = _cumulative(pc.and_(expired, pc.invert(young)))
        c_nokey = _cumulative(pc.and_(no_key, pc.invert(young)))
        c_lag = _cumulative(for_lag)
        for batch, r0, r1 in spans:
            tracker.is_aborted(batch)  # for the markers' bookkeeping: no transaction here is aborted
            if batch.is_control:
                below = batch.base_offset < map_end_offset
                data_below = tracker.on_marker(batch, below_map_end=below)
                outcome = clean_marker(batch, data_below, params) if below and txns is not None \
                    else verbatim(batch)
            elif batch.base_offset >= map_end_offset:
                outcome = verbatim(batch)
            else:
                outcome = _clean(batch, r0, r1, cols, kept, for_lag, arrow_map, params,
                                 kept_n=c_kept[r1] - c_kept[r0], keeps_tombstone=c_tomb[r1] > c_tomb[r0],
                                 superseded=c_sup[r1] - c_sup[r0], expired=c_exp[r1] - c_exp[r0],
                                 no_key=c_nokey[r1] - c_nokey[r0], lag_n=c_lag[r1] - c_lag[r0])
            if stats is not None:
                stats.add(batch.size_in_bytes, outcome)
            yield outcome


def _clean(batch: RecordBatch, r0: int, r1: int, cols: dict, kept: pa.Array, for_lag: pa.Array,
           arrow_map: ArrowOffsetMap, params: CleaningParams, *, kept_n: int, keeps_tombstone: bool,
           superseded: int, expired: int, no_key: int, lag_n: int) -> BatchOutcome:
    """`compactor.clean_batch` for one batch whose verdicts are known (keep_if_emptied=False)."""
    n = r1 - r0
    horizon = batch.delete_horizon_ms
    first_lag = None
    if lag_n:
        first_lag = pc.min(pc.filter(cols["offset"].slice(r0, n), for_lag.slice(r0, n))).as_py()
    common = dict(records_before=n, records_kept=kept_n, dropped_superseded=superseded, dropped_tombstones=expired,
                  dropped_without_key=no_key, kept_for_lag=lag_n, first_kept_for_lag_offset=first_lag)
    stamp = keeps_tombstone and horizon is None
    if kept_n == 0:
        return BatchOutcome(None, True, **common)  # type: ignore[arg-type]
    if kept_n == n and not stamp:
        return BatchOutcome(bytes(batch.buffer), False, delete_horizon_ms=horizon if keeps_tombstone else None,
                            **common)  # type: ignore[arg-type]
    if batch.timestamp_type == TimestampType.LOG_APPEND_TIME:
        # The columns hold the batch time, not the records' own timestamps: the reference it is.
        keys = [k for k in cols["key"].slice(r0, n).to_pylist() if k is not None]
        small = OffsetMap(max(1, len(keys)))
        if keys:
            for k, o in zip(keys, arrow_map.latest(pa.array(keys, pa.binary())).to_pylist()):
                if o is not None and k not in small:
                    small.put(k, o)
        return clean_batch(batch, small, params)
    mask = kept.slice(r0, n)
    rows = pa.table({name: cols[name].slice(r0, n) for name in ("offset", "timestamp", "key", "value", "headers")}
                    ).filter(mask)
    records = [Record(o, t // 1000, k, v, tuple((h["key"], h["value"]) for h in hs))
               for o, t, k, v, hs in zip(rows.column("offset").to_pylist(),
                                         pc.cast(rows.column("timestamp"), pa.int64()).to_pylist(),
                                         rows.column("key").to_pylist(), rows.column("value").to_pylist(),
                                         rows.column("headers").to_pylist())]
    new_horizon = params.now_ms + params.delete_retention_ms if stamp else horizon
    data = build_batch(
        records, base_offset=batch.base_offset, compression=Compression(batch.compression),
        timestamp_type=batch.timestamp_type, producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence, partition_leader_epoch=batch.partition_leader_epoch,
        is_transactional=batch.is_transactional, last_offset_delta=batch.last_offset_delta,
        base_timestamp=batch.base_timestamp, delete_horizon_ms=new_horizon)
    return BatchOutcome(data, True, delete_horizon_ms=new_horizon if keeps_tombstone else None,
                        horizon_stamped=stamp, **common)  # type: ignore[arg-type]
