"""Key compaction as pure functions over record batches (no files, no clocks, no threads).

The local cleaner (`compaction/cleaner.py`) and the Spark compaction job over the remote tier
call the same functions, per segment. Vocabulary (Kafka's):

    log start offset ... first dirty offset ... first uncleanable offset ... log end offset
    |---- clean section ----|---- dirty section ----|---- never touched ----|

  * The clean section was compacted before: it holds at most one record per key (the latest as of
    that round). The cleaner checkpoint stores where it ends (the first dirty offset).
  * The dirty section is what a round maps. It ends at the first uncleanable offset
    = min(active segment base offset, high watermark, first batch younger than
    `min.compaction.lag.ms`) — see `first_uncleanable_offset`.
  * The offset map holds key -> latest offset over the dirty section. It is bounded
    (`max_entries`, like Kafka's dedupe buffer): when full, the round maps only a prefix and ends
    at `map_end_offset`, a batch boundary; what lies beyond stays dirty for the next round.

A round: `build_offset_map` over the dirty section, then `clean_batch` (or `compact_batches`) on
every batch of the segments below `map_end_offset`, then the caller writes the survivors into
replacement segments, swaps them in and stores `next_first_dirty_offset(...)` as its checkpoint.

Record rules (`decide_record`), for a batch below `map_end_offset`; the first that applies wins:
  1. a record without a key is dropped (Kafka's cleaner does the same; a compacted topic refuses
     them on produce, but a topic switched from `delete` may hold some);
  2. a record whose key maps to a higher offset is superseded: dropped;
  3. a tombstone (null value) in a batch whose delete horizon has passed (now >= horizon) is
     dropped; before that it is kept;
  4. everything else is kept;
  5. but a record younger than `min.compaction.lag.ms` (timestamp > now - lag) is always kept.
     The lowest such offset that a rule above would have dropped is reported so the caller keeps
     the first dirty offset at or below it: otherwise an older value kept only for its age would
     sit in the clean section forever, and could resurface once a later tombstone of its key
     expires.
Batches at or above `map_end_offset` are copied byte for byte; control batches below it follow the
transaction rules below.

Batch rules (`clean_batch`):
  * A batch whose records all survive and that needs no delete horizon is returned as its
    original bytes (same CRC).
  * Otherwise its survivors are re-encoded into one batch that keeps the original base offset,
    last offset delta (so the batch's offset range, and the producer's sequence range
    base sequence .. base sequence + last offset delta, are unchanged), base timestamp (unless a
    delete horizon takes its place, below), partition leader epoch, producer id / epoch, base sequence, compression codec, timestamp
    type and transactional flag. Every surviving record keeps its offset, timestamp, key, value
    and headers. The max timestamp becomes the survivors' max (LogAppendTime batches keep theirs).
  * Delete horizon (KIP-534): the first round that keeps a tombstone in a batch without a delete
    horizon stamps it with horizon = now + `delete.retention.ms` (attribute bit 6; the base
    timestamp field then carries the horizon and record timestamps stay exact through their
    deltas). A later round drops the tombstone once now >= horizon, so consumers have
    `delete.retention.ms` after the tombstone was first cleaned to see it. A batch keeps its
    horizon when it is rebuilt again.
  * Emptied batches (every record dropped) are dropped. Kafka keeps the emptied last batch of an
    idempotent producer as an empty batch (record count 0) so producer state rebuilt from the log
    keeps that producer's last sequence. `clean_batch(keep_if_emptied=True)` does exactly that
    (`encode_empty_batch`), and `compact_batches` uses it for the batches named in
    `producer_last_offsets`; the local cleaner does not, because a follower refuses a batch of
    zero records (`validate_batch`), so such a batch could not be replicated. Keeping a
    superseded record instead is not an option: it could resurface once its key's tombstone
    expires. Producer state must therefore come from its own snapshots (as Kafka's
    `.snapshot` files), not from a producer's batches surviving compaction.
  * Transactions (Kafka's cleaner rules, compaction/txn_markers.py): the dirty section ends at
    the first unstable offset (`first_uncleanable_offset`), so no undecided transaction is
    cleaned — a record of an open transaction must not supersede a committed one it may yet be
    aborted over. Data batches of aborted transactions below the map end (`aborted`, from the
    `.txnindex` files) are dropped whole and never enter the offset map. A COMMIT / ABORT marker
    stays while the round still saw data of its transaction; once none is left below it, the
    marker is stamped with a delete horizon (`clean_marker`, as a tombstone's batch) and dropped
    by the first round past it. The remote compaction job applies the same rules from the remote
    `.txnindex` objects and the manifest's `later_aborts` in its one-task round (the tier holds
    only decided transactions: segments are copied below the LSO), and writes the entries it keeps
    into its replacements; its split round (remote_split.py), which maps over decoded columns
    and cannot drop them, ends its dirty section at the first aborted transaction's first offset
    instead and copies markers as they are.

Invariants (checked with `invariant()`): output batches keep their input order and offsets, so
offsets strictly increase; the map only grows to `max_entries`; a mapped offset never decreases.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Sequence

from lakelog.compaction.errors import OffsetMapTooSmallError
from lakelog.compaction.txn_markers import MarkerVerdict, TransactionCleaning, decide_marker
from lakelog.infra.errors import invariant
from lakelog.index.transaction_index import AbortedTxn
from lakelog.logstore.compression import Compression
from lakelog.logstore.read_committed import AbortedTransactions
from lakelog.logstore.record_batch import (
    ATTRIBUTES_OFFSET,
    CONTROL_MASK,
    CRC_OFFSET,
    DEFAULT_MAX_UNCOMPRESSED_BYTES,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    crc32c,
)

#: Default bound on the keys a round maps (Kafka's dedupe buffer holds ~4M 24-byte entries).
DEFAULT_MAX_OFFSET_MAP_ENTRIES = 1_000_000
#: Relative offsets in a segment's indexes are stored as u32; Kafka keeps groups within an int32.
MAX_GROUP_OFFSET_SPAN = 2**31 - 1


# ---------------------------------------------------------------------------------------------
# The offset map


class OffsetMap:
    """key -> latest offset of that key, holding at most `max_entries` keys.

    Keys are stored whole (no hash, so no collision can drop a live record); memory is bounded by
    `max_entries` times the largest key. Not thread-safe: one cleaning round owns it.
    """

    __slots__ = ("max_entries", "_offsets", "latest_offset")

    def __init__(self, max_entries: int = DEFAULT_MAX_OFFSET_MAP_ENTRIES) -> None:
        invariant(max_entries >= 1, f"offset map needs room for at least one key, got {max_entries}")
        self.max_entries = max_entries
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # the highest offset put, -1 when empty

    def __len__(self) -> int:
        return len(self._offsets)

    def __contains__(self, key: bytes) -> bool:
        return key in self._offsets

    def get(self, key: bytes) -> int | None:
        return self._offsets.get(key)

    def free_entries(self) -> int:
        return self.max_entries - len(self._offsets)

    def new_keys(self, keys: Iterable[bytes]) -> int:
        """How many distinct keys of `keys` the map does not hold yet."""
        return len({k for k in keys if k not in self._offsets})

    def put(self, key: bytes, offset: int) -> None:
        previous = self._offsets.get(key)
        invariant(previous is not None or len(self._offsets) < self.max_entries, "offset map is full")
        invariant(previous is None or offset > previous,
                  f"offset {offset} for a key already mapped at {previous}: offsets must increase")
        self._offsets[key] = offset
        if offset > self.latest_offset:
            self.latest_offset = offset

    def items(self) -> Iterator[tuple[bytes, int]]:
        return iter(self._offsets.items())


@dataclass(frozen=True, slots=True)
class OffsetMapResult:
    """The map of one round and how far it reaches."""

    offset_map: OffsetMap
    map_end_offset: int  # batches at or above it are outside this round (copied as they are)
    full: bool  # the map stopped before the end of the dirty section
    batches_mapped: int
    records_mapped: int


def _has_key(record: Record) -> bool:
    return record.key is not None


def build_offset_map(batches: Iterable[RecordBatch], *, start_offset: int, end_offset: int,
                     max_entries: int = DEFAULT_MAX_OFFSET_MAP_ENTRIES,
                     max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES,
                     aborted: Sequence[AbortedTxn] = ()) -> OffsetMapResult:
    """Map key -> latest offset over the batches of the dirty section [start_offset, end_offset).

    `batches` are every batch of the log from (at most) `start_offset` on, in offset order. A batch
    is mapped whole or not at all; mapping stops at the first batch reaching `end_offset` or whose
    new keys do not fit, and `map_end_offset` is that batch's base offset (`end_offset` when the
    input runs out first). Tombstones are mapped like values: they supersede older records.
    Batches of the aborted transactions in `aborted` are not mapped: their records are dropped.
    Raises OffsetMapTooSmallError when not even the first batch fits.
    """
    invariant(start_offset <= end_offset, f"dirty section [{start_offset}, {end_offset}) is reversed")
    offset_map = OffsetMap(max_entries)
    map_end = end_offset
    full = False
    batches_mapped = records_mapped = 0
    tracker = AbortedTransactions(aborted)
    for batch in batches:
        if batch.last_offset < start_offset:
            tracker.is_aborted(batch)  # an ABORT marker here ends its producer's transaction
            continue
        if batch.last_offset >= end_offset:
            map_end = min(end_offset, max(start_offset, batch.base_offset))
            break
        if tracker.is_aborted(batch) or batch.is_control:
            batches_mapped += 1
            continue
        keyed = [r for r in batch.records(max_uncompressed_bytes) if _has_key(r)]
        needed = offset_map.new_keys(r.key for r in keyed)  # type: ignore[misc]
        if needed > offset_map.free_entries():
            if batches_mapped == 0 and len(offset_map) == 0:
                raise OffsetMapTooSmallError(
                    f"batch at offset {batch.base_offset} holds {needed} distinct keys but the offset "
                    f"map holds at most {max_entries}")
            map_end = max(start_offset, batch.base_offset)
            full = True
            break
        for r in keyed:
            offset_map.put(r.key, r.offset)  # type: ignore[arg-type]
        batches_mapped += 1
        records_mapped += len(keyed)
    return OffsetMapResult(offset_map, map_end, full, batches_mapped, records_mapped)


# ---------------------------------------------------------------------------------------------
# Per-record and per-batch decisions


class Verdict(enum.Enum):
    """What happens to one record."""

    KEEP = "keep"
    KEEP_FOR_LAG = "keep: younger than min.compaction.lag.ms"
    DROP_SUPERSEDED = "drop: a later record has the same key"
    DROP_EXPIRED_TOMBSTONE = "drop: tombstone past its delete horizon"
    DROP_NO_KEY = "drop: no key"

    @property
    def kept(self) -> bool:
        return self in (Verdict.KEEP, Verdict.KEEP_FOR_LAG)


@dataclass(frozen=True, slots=True)
class CleaningParams:
    """The knobs and the clock of one round (times in ms since the epoch)."""

    now_ms: int
    delete_retention_ms: int
    min_compaction_lag_ms: int = 0
    max_uncompressed_bytes: int = DEFAULT_MAX_UNCOMPRESSED_BYTES

    @classmethod
    def from_config(cls, config, now_ms: int) -> "CleaningParams":
        """From a LogConfig: `delete.retention.ms`, `min.compaction.lag.ms`."""
        return cls(now_ms, config.delete_retention_ms, config.min_compaction_lag_ms,
                   config.max_uncompressed_batch_bytes)


def decide_record(*, offset: int, timestamp: int, key: bytes | None, is_tombstone: bool,
                  latest_offset: int | None, delete_horizon_ms: int | None,
                  params: CleaningParams) -> Verdict:
    """The verdict on one record of a batch below the map end (see the module docstring)."""
    if key is None:
        verdict = Verdict.DROP_NO_KEY
    elif latest_offset is not None and offset < latest_offset:
        verdict = Verdict.DROP_SUPERSEDED
    elif is_tombstone and delete_horizon_ms is not None and params.now_ms >= delete_horizon_ms:
        verdict = Verdict.DROP_EXPIRED_TOMBSTONE
    else:
        return Verdict.KEEP
    if params.min_compaction_lag_ms > 0 and timestamp > params.now_ms - params.min_compaction_lag_ms:
        return Verdict.KEEP_FOR_LAG
    return verdict


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What cleaning did to one batch."""

    data: bytes | None  # the batch to write (the original bytes when unchanged); None: dropped
    rewritten: bool  # data differs from the input bytes
    records_before: int
    records_kept: int
    dropped_superseded: int = 0
    dropped_tombstones: int = 0
    dropped_without_key: int = 0
    kept_for_lag: int = 0
    dropped_aborted: int = 0  # records of an aborted transaction
    first_kept_for_lag_offset: int | None = None
    delete_horizon_ms: int | None = None  # set when the written batch keeps a tombstone
    horizon_stamped: bool = False  # this round set the delete horizon
    dropped_marker: bool = False  # an empty COMMIT / ABORT marker past its delete horizon

    def batch(self) -> RecordBatch | None:
        return None if self.data is None else RecordBatch(self.data)


def record_timestamp(batch: RecordBatch, record: Record) -> int:
    """A record's effective timestamp: LogAppendTime batches stamp every record with the batch time."""
    return batch.max_timestamp if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else record.timestamp


def verbatim(batch: RecordBatch) -> BatchOutcome:
    """The outcome of a batch copied unchanged (beyond the map end, or a control batch)."""
    return BatchOutcome(bytes(batch.buffer), False, batch.record_count, batch.record_count)


def clean_batch(batch: RecordBatch, offset_map: OffsetMap, params: CleaningParams, *,
                keep_if_emptied: bool = False) -> BatchOutcome:
    """Apply the record rules to one batch below the map end and re-batch the survivors.

    Control batches are copied unchanged here (a round decides markers with `clean_marker`).
    With `keep_if_emptied`, a batch that loses every record is kept as an empty batch
    (`encode_empty_batch`) instead of being dropped.
    """
    if batch.is_control:
        return verbatim(batch)
    records = batch.records(params.max_uncompressed_bytes)
    horizon = batch.delete_horizon_ms
    kept: list[Record] = []
    counts = {v: 0 for v in Verdict}
    first_lag: int | None = None
    for r in records:
        verdict = decide_record(offset=r.offset, timestamp=record_timestamp(batch, r), key=r.key,
                                is_tombstone=r.value is None,
                                latest_offset=offset_map.get(r.key) if r.key is not None else None,
                                delete_horizon_ms=horizon, params=params)
        counts[verdict] += 1
        if verdict.kept:
            kept.append(r)
        if verdict is Verdict.KEEP_FOR_LAG and first_lag is None:
            first_lag = r.offset
    keeps_tombstone = any(r.value is None for r in kept)
    stamp = keeps_tombstone and horizon is None
    new_horizon = params.now_ms + params.delete_retention_ms if stamp else horizon
    common = dict(records_before=len(records), records_kept=len(kept),
                  dropped_superseded=counts[Verdict.DROP_SUPERSEDED],
                  dropped_tombstones=counts[Verdict.DROP_EXPIRED_TOMBSTONE],
                  dropped_without_key=counts[Verdict.DROP_NO_KEY],
                  kept_for_lag=counts[Verdict.KEEP_FOR_LAG], first_kept_for_lag_offset=first_lag)
    if not kept:
        data = encode_empty_batch(batch) if keep_if_emptied else None
        return BatchOutcome(data, True, **common)  # type: ignore[arg-type]
    if len(kept) == len(records) and not stamp:
        return BatchOutcome(bytes(batch.buffer), False,
                            delete_horizon_ms=horizon if keeps_tombstone else None, **common)  # type: ignore[arg-type]
    log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    data = build_batch(
        kept, base_offset=batch.base_offset, compression=Compression(batch.compression),
        timestamp_type=batch.timestamp_type, log_append_time=batch.max_timestamp if log_append else None,
        producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence, partition_leader_epoch=batch.partition_leader_epoch,
        is_transactional=batch.is_transactional, last_offset_delta=batch.last_offset_delta,
        base_timestamp=batch.base_timestamp, delete_horizon_ms=new_horizon)
    out = RecordBatch(data)
    invariant(out.base_offset == batch.base_offset and out.last_offset == batch.last_offset,
              f"cleaned batch {out.base_offset}..{out.last_offset} lost the range "
              f"{batch.base_offset}..{batch.last_offset}")
    return BatchOutcome(data, True, delete_horizon_ms=new_horizon if keeps_tombstone else None,
                        horizon_stamped=stamp, **common)  # type: ignore[arg-type]


def clean_marker(batch: RecordBatch, data_below: bool, params: CleaningParams) -> BatchOutcome:
    """A COMMIT / ABORT marker below the map end (compaction/txn_markers.py's rules 2 and 3):
    kept as it is while data of its transaction remains; once empty, stamped with a delete horizon
    (now + `delete.retention.ms`) and kept, then dropped at or after that horizon."""
    horizon = batch.delete_horizon_ms
    verdict = decide_marker(data_below=data_below, delete_horizon_ms=horizon, now_ms=params.now_ms)
    n = batch.record_count
    if verdict is MarkerVerdict.DROP or (n == 0 and verdict is MarkerVerdict.KEEP_UNTIL_HORIZON):
        # A control batch without a record holds no marker to show anyone (Kafka drops it too).
        return BatchOutcome(None, True, n, 0, dropped_marker=True)
    if verdict is MarkerVerdict.KEEP or horizon is not None:
        return BatchOutcome(bytes(batch.buffer), False, n, n,
                            delete_horizon_ms=None if verdict is MarkerVerdict.KEEP else horizon)
    new_horizon = params.now_ms + params.delete_retention_ms
    data = build_batch(batch.records(params.max_uncompressed_bytes), base_offset=batch.base_offset,
                       timestamp_type=batch.timestamp_type, producer_id=batch.producer_id,
                       producer_epoch=batch.producer_epoch, base_sequence=batch.base_sequence,
                       partition_leader_epoch=batch.partition_leader_epoch, is_transactional=True,
                       is_control=True, last_offset_delta=batch.last_offset_delta,
                       base_timestamp=batch.base_timestamp, delete_horizon_ms=new_horizon)
    return BatchOutcome(data, True, n, n, delete_horizon_ms=new_horizon, horizon_stamped=True)


def encode_empty_batch(batch: RecordBatch) -> bytes:
    """`batch` with no records, as Kafka writes an emptied batch it must keep.

    Keeps the base offset, last offset delta, partition leader epoch, producer id / epoch, base
    sequence, timestamp type and transactional / control flags; both timestamps become the batch's
    max timestamp; no compression, no delete horizon.
    """
    attributes = batch.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    out = bytearray(HEADER_SIZE)
    HEADER.pack_into(out, 0, batch.base_offset, HEADER_SIZE - LOG_OVERHEAD, batch.partition_leader_epoch,
                     MAGIC, 0, attributes, batch.last_offset_delta, batch.max_timestamp,
                     batch.max_timestamp, batch.producer_id, batch.producer_epoch, batch.base_sequence, 0)
    out[CRC_OFFSET:CRC_OFFSET + 4] = crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]).to_bytes(4, "big")
    return bytes(out)


def is_last_batch_of_producer(batch: RecordBatch, producer_last_offsets: Mapping[int, int] | None) -> bool:
    """Whether `batch` is its idempotent producer's last batch in the log."""
    return (producer_last_offsets is not None and batch.producer_id >= 0
            and producer_last_offsets.get(batch.producer_id) == batch.last_offset)


@dataclass(slots=True)
class CompactionStats:
    """Totals over the batches of a round (mutable accumulator)."""

    batches_read: int = 0
    batches_written: int = 0
    batches_rewritten: int = 0
    batches_dropped: int = 0
    records_read: int = 0
    records_kept: int = 0
    dropped_superseded: int = 0
    dropped_tombstones: int = 0
    dropped_without_key: int = 0
    kept_for_lag: int = 0
    dropped_aborted: int = 0
    tombstone_batches_stamped: int = 0
    markers_dropped: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    first_kept_for_lag_offset: int | None = None
    earliest_delete_horizon_ms: int | None = None  # the next time a kept tombstone can go

    def add(self, input_size: int, outcome: BatchOutcome) -> None:
        self.batches_read += 1
        self.bytes_read += input_size
        self.records_read += outcome.records_before
        self.records_kept += outcome.records_kept
        self.dropped_superseded += outcome.dropped_superseded
        self.dropped_tombstones += outcome.dropped_tombstones
        self.dropped_without_key += outcome.dropped_without_key
        self.kept_for_lag += outcome.kept_for_lag
        self.dropped_aborted += outcome.dropped_aborted
        self.tombstone_batches_stamped += int(outcome.horizon_stamped)
        self.markers_dropped += int(outcome.dropped_marker)
        if outcome.data is None:
            self.batches_dropped += 1
        else:
            self.batches_written += 1
            self.bytes_written += len(outcome.data)
            self.batches_rewritten += int(outcome.rewritten)
        if outcome.first_kept_for_lag_offset is not None and self.first_kept_for_lag_offset is None:
            self.first_kept_for_lag_offset = outcome.first_kept_for_lag_offset
        h = outcome.delete_horizon_ms
        if h is not None and (self.earliest_delete_horizon_ms is None or h < self.earliest_delete_horizon_ms):
            self.earliest_delete_horizon_ms = h


def compact_batches(batches: Iterable[RecordBatch], offset_map: OffsetMap, map_end_offset: int,
                    params: CleaningParams, *, stats: CompactionStats | None = None,
                    producer_last_offsets: Mapping[int, int] | None = None,
                    aborted: Sequence[AbortedTxn] = (),
                    txns: TransactionCleaning | None = None) -> Iterator[BatchOutcome]:
    """Clean a run of batches (one segment, or several) in offset order; yield one outcome each.

    Batches whose base offset is at or above `map_end_offset` are copied unchanged. With
    `producer_last_offsets` (producer id -> last offset of its last batch in the log), an emptied
    batch that is its producer's last is kept empty, as Kafka does. Batches of the aborted
    transactions below `map_end_offset` are dropped. With `txns` (the round's bookkeeping, shared
    by its groups in offset order, walked from the log start) they are its aborted transactions
    and markers follow `clean_marker`; without it, those of `aborted`, and markers are copied as
    they are (a caller that sees only part of the round cannot tell a marker empty).
    Outcomes are added to `stats`.
    """
    previous_last = -1
    decide_markers = txns is not None
    tracker = txns if txns is not None else TransactionCleaning(aborted)
    for batch in batches:
        invariant(batch.base_offset > previous_last,
                  f"batch at {batch.base_offset} does not follow offset {previous_last}")
        previous_last = batch.last_offset
        below = batch.base_offset < map_end_offset
        if tracker.is_aborted(batch) and below:
            outcome = BatchOutcome(None, True, batch.record_count, 0, dropped_aborted=batch.record_count)
        elif batch.is_control:
            data_below = tracker.on_marker(batch, below_map_end=below)
            outcome = clean_marker(batch, data_below, params) if below and decide_markers else verbatim(batch)
        elif not below:
            outcome = verbatim(batch)
        else:
            outcome = clean_batch(batch, offset_map, params,
                                  keep_if_emptied=is_last_batch_of_producer(batch, producer_last_offsets))
        if stats is not None:
            stats.add(batch.size_in_bytes, outcome)
        yield outcome


def next_first_dirty_offset(map_end_offset: int, first_kept_for_lag_offset: int | None) -> int:
    """Where the next round's dirty section starts (the new cleaner checkpoint)."""
    if first_kept_for_lag_offset is None:
        return map_end_offset
    return min(map_end_offset, first_kept_for_lag_offset)


# ---------------------------------------------------------------------------------------------
# When to clean, and how far


class CleaningTrigger(enum.Enum):
    """Why a round runs."""

    DIRTY_RATIO = "min.cleanable.dirty.ratio reached"
    MAX_COMPACTION_LAG = "max.compaction.lag.ms passed"
    DELETE_HORIZON = "a kept tombstone's delete horizon passed"
    FORCED = "forced"


def dirty_ratio(clean_bytes: int, dirty_bytes: int) -> float:
    """Dirty bytes / (clean + dirty bytes); 0.0 for an empty log."""
    invariant(clean_bytes >= 0 and dirty_bytes >= 0, "byte counts cannot be negative")
    total = clean_bytes + dirty_bytes
    return dirty_bytes / total if total else 0.0


def cleaning_trigger(*, clean_bytes: int, dirty_bytes: int, min_cleanable_dirty_ratio: float,
                     earliest_dirty_timestamp_ms: int, max_compaction_lag_ms: int,
                     next_delete_horizon_ms: int | None, now_ms: int) -> CleaningTrigger | None:
    """Whether a log needs a round now, and why (None: not yet).

    `earliest_dirty_timestamp_ms` is the smallest first-batch timestamp of the dirty segments
    (-1 if unknown); `next_delete_horizon_ms` the earliest horizon of a kept tombstone (None: none).
    """
    if dirty_bytes > 0:
        if dirty_ratio(clean_bytes, dirty_bytes) >= min_cleanable_dirty_ratio:
            return CleaningTrigger.DIRTY_RATIO
        if earliest_dirty_timestamp_ms > NO_TIMESTAMP and \
                earliest_dirty_timestamp_ms < now_ms - max_compaction_lag_ms:
            return CleaningTrigger.MAX_COMPACTION_LAG
    if next_delete_horizon_ms is not None and now_ms >= next_delete_horizon_ms:
        return CleaningTrigger.DELETE_HORIZON
    return None


def first_offset_younger_than(batch_headers: Iterable[tuple[int, int]], cutoff_ms: int) -> int | None:
    """Base offset of the first batch, as (base offset, max timestamp), with max timestamp > cutoff."""
    for base_offset, max_timestamp in batch_headers:
        if max_timestamp > cutoff_ms:
            return base_offset
    return None


def first_uncleanable_offset(active_segment_base_offset: int, high_watermark: int | None = None,
                             first_young_offset: int | None = None, first_unstable_offset: int | None = None) -> int:
    """min(active segment base, HW, first offset younger than `min.compaction.lag.ms`, first
    offset of an undecided transaction)."""
    bounds = [active_segment_base_offset]
    bounds += [b for b in (high_watermark, first_young_offset, first_unstable_offset) if b is not None]
    return min(bounds)


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """What grouping needs to know about a segment to be cleaned."""

    base_offset: int
    next_offset: int
    size_in_bytes: int
    offset_index_bytes: int = 0
    time_index_bytes: int = 0


def group_segments(segments: Sequence[SegmentSpan], *, max_segment_bytes: int,
                   max_index_bytes: int) -> list[list[SegmentSpan]]:
    """Consecutive segments grouped so each group's cleaned output fits one segment (Kafka's
    `groupSegmentsBySize`): sizes (an upper bound of the cleaned size) within `max_segment_bytes`,
    index sizes within `max_index_bytes`, and offsets within an int32 of the group's base offset.
    Every group holds at least one segment.
    """
    groups: list[list[SegmentSpan]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size, oix, tix = segments[i].size_in_bytes, segments[i].offset_index_bytes, segments[i].time_index_bytes
        i += 1
        while i < len(segments):
            s = segments[i]
            if size + s.size_in_bytes > max_segment_bytes or oix + s.offset_index_bytes > max_index_bytes \
                    or tix + s.time_index_bytes > max_index_bytes \
                    or s.next_offset - 1 - group[0].base_offset > MAX_GROUP_OFFSET_SPAN:
                break
            group.append(s)
            size, oix, tix = size + s.size_in_bytes, oix + s.offset_index_bytes, tix + s.time_index_bytes
            i += 1
        groups.append(group)
    return groups

