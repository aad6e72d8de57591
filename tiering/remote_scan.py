"""The remote tier as Spark jobs and the `lakelog` data source see it (no pyspark here).

What lives where, under a remote root URL (`file:///path` or `s3://bucket/prefix`):

    <topic>-<partition>/manifest.json, segment objects     the tiering layout (tiering/layout.py)
    _topics/<topic>.json                                    topic descriptor written by the nodes
    _jobs/<topic>-<partition>.lease                         job leases (tiering/lease.py)
    tables/<topic>, tables/<topic>_latest, tables/_remote_index    Delta tables (sync-tables, rebuild-index)

Reading a segment (`iter_segment_batches`): the offset index (size and CRC-32C checked against the
manifest entry) gives the position of the floor entry of the first wanted offset; from there the
`.log` object is read with ranged GETs of `chunk_bytes`, every batch framed and CRC-checked before
any of its records is used. A failed check raises `RemoteCorruptionError` naming the object, the
byte position and the offset; nothing of a bad batch is ever returned.

Concurrency: the functions are pure apart from the store; each Spark task opens its own store.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator, Sequence
from urllib.parse import urlparse

from lakelog.index import offset_index
from lakelog.index.errors import CorruptIndexError
from lakelog.index.transaction_index import AbortedTxn, check_entries, decode_entries
from lakelog.logstore.errors import CorruptRecordError, InvalidRecordError
from lakelog.logstore.read_committed import AbortedTransactions
from lakelog.logstore.record_batch import (
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RecordBatch,
    TimestampType,
    TruncatedBatchError,
    crc32c,
    iter_batches,
)
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.deadline_store import DeadlineStore, Deadlines
from lakelog.tiering.errors import ObjectNotFoundError, RemoteCorruptionError
from lakelog.logstore.segment import INDEX_SUFFIX, LOG_SUFFIX, TXN_INDEX_SUFFIX
from lakelog.tiering.layout import MANIFEST_NAME, segment_key
from lakelog.tiering.manifest_model import PartitionManifest, RemoteSegment
from lakelog.tiering.store import ObjectStore
from lakelog.tiering.stores import open_store

TABLES_DIR = "tables"
REMOTE_INDEX_TABLE = "_remote_index"
DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024
#: A record timestamp (ms) whose microseconds do not fit an int64 (Spark's TIMESTAMP) is corrupt.
MAX_TIMESTAMP_MS = ((1 << 63) - 1) // 1000
_MANIFEST_KEY = re.compile(r"^([A-Za-z0-9._-]{1,249})-(\d+)/" + re.escape(MANIFEST_NAME) + "$")


# ---------------------------------------------------------------------------------------------
# URLs


def spark_path(remote_url: str, *parts: str) -> str:
    """A Hadoop path under the remote root: `s3://b/p` -> `s3a://b/p/...`, `file:///x` -> `file:///x/...`."""
    parsed = urlparse(remote_url)
    if parsed.scheme not in ("s3", "s3a", "file"):
        raise ValueError(f"remote URL {remote_url!r}: the scheme must be s3:// or file://")
    base = remote_url.rstrip("/")
    if parsed.scheme == "s3":
        base = "s3a://" + base[len("s3://"):]
    return "/".join([base, *parts])


def tables_path(remote_url: str, table: str) -> str:
    return spark_path(remote_url, TABLES_DIR, table)


def store_url(remote_url: str) -> str:
    """The object-store URL for a remote root (an `s3a://` URL is accepted as `s3://`)."""
    return "s3://" + remote_url[len("s3a://"):] if remote_url.startswith("s3a://") else remote_url


#: The config key of a job run's deadline on each object-store call (tiering/config.py).
JOB_STORE_TIMEOUT_KEY = "remote.job.store.timeout.ms"


def open_remote(remote_url: str, timeout_ms: int | None = None) -> ObjectStore:
    """The store of a remote tier for the Spark jobs, the SQL catalog and the CLI: every call has
    the deadline `remote.job.store.timeout.ms` (`timeout_ms`, else the declared default), so a job
    facing a hung store fails within it with an error that names the store, the call and the key
    (tiering/deadline_store.py). A job run resolves its value once on the driver
    (`job_store_timeout_ms`) and passes it to every store it opens, in its tasks too: they carry
    it in their arguments (spark_log/jobs.py), the data source in its option `storeTimeoutMs`."""
    cfg = TieringConfig({} if timeout_ms is None else {JOB_STORE_TIMEOUT_KEY: timeout_ms})
    return DeadlineStore(open_store(store_url(remote_url), cfg), Deadlines.for_jobs(cfg))


def job_store_timeout_ms(value: int | str | None = None) -> int:
    """`remote.job.store.timeout.ms` from `value` (a run's `--config`, checked against the key's
    bounds), else the declared default."""
    return TieringConfig({} if value is None else {JOB_STORE_TIMEOUT_KEY: value}).remote_job_store_timeout_ms


# ---------------------------------------------------------------------------------------------
# topics


def remote_partitions(store: ObjectStore, topic: str | None = None) -> dict[str, list[int]]:
    """Topic -> sorted partitions that have a manifest in the remote tier (optionally one topic)."""
    out: dict[str, set[int]] = {}
    for info in store.list(f"{topic}-" if topic else ""):
        m = _MANIFEST_KEY.match(info.key)
        if m and (topic is None or m.group(1) == topic):
            out.setdefault(m.group(1), set()).add(int(m.group(2)))
    return {t: sorted(ps) for t, ps in sorted(out.items())}


def load_manifest(store: ObjectStore, topic: str, partition: int) -> PartitionManifest:
    from lakelog.tiering.metadata import ManifestStore

    return ManifestStore(store, topic, partition).load()


# ---------------------------------------------------------------------------------------------
# reading segments


@dataclass(frozen=True, slots=True)
class RemoteRecord:
    """One record as the data source returns it."""

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int
    producer_id: int


def _checked_object(store: ObjectStore, key: str, size: int, crc: int) -> bytes:
    try:
        data = store.get_range(key, 0, size) if size else b""
    except ObjectNotFoundError:
        raise RemoteCorruptionError(f"{key} is missing", key=key) from None
    if len(data) != size or crc32c(data) != crc:
        raise RemoteCorruptionError(f"{key}: {len(data)} bytes with CRC-32C {crc32c(data):#010x}, the manifest "
                                    f"says {size} bytes with {crc:#010x}", key=key)
    return data


def index_entries(store: ObjectStore, topic: str, partition: int, seg: RemoteSegment):
    """(relative offsets, positions) of `seg`'s remote offset index, CRC-checked against the
    manifest (two empty arrays when the segment has no index)."""
    if seg.index_bytes == 0:
        return offset_index.decode(b"")
    key = segment_key(topic, partition, seg.base_offset, seg.segment_id, INDEX_SUFFIX)
    data = _checked_object(store, key, seg.index_bytes, seg.index_crc32c)
    try:
        return offset_index.decode(data, file=key)
    except CorruptIndexError as e:
        raise RemoteCorruptionError(str(e), key=key) from None


def txn_index_entries(store: ObjectStore, topic: str, partition: int, seg: RemoteSegment) -> list[AbortedTxn]:
    """The aborted transactions of `seg`'s `.txnindex` object, CRC-checked against the manifest and
    checked structurally ([] when the segment has none)."""
    if seg.txn_index_bytes == 0:
        return []
    key = segment_key(topic, partition, seg.base_offset, seg.segment_id, TXN_INDEX_SUFFIX)
    data = _checked_object(store, key, seg.txn_index_bytes, seg.txn_index_crc32c)
    try:
        entries = decode_entries(data, file=key)
        check_entries(entries, seg.base_offset, seg.end_offset + 1, file=key)
    except CorruptIndexError as e:
        raise RemoteCorruptionError(str(e), key=key) from None
    return entries


def has_txn_index(m: PartitionManifest, from_offset: int | None = None) -> bool:
    """Whether a COPY_FINISHED segment ending at or after `from_offset` has a `.txnindex` (an
    aborted transaction whose marker it holds) or lists aborted transactions whose marker lies
    after it (`later_aborts`, the marker maybe not tiered yet): only then can a read from there
    meet aborted data."""
    return any((s.txn_index_bytes > 0 or s.later_aborts) and (from_offset is None or s.end_offset >= from_offset)
               for s in m.copy_finished)


def remote_aborted_transactions(store: ObjectStore, topic: str, partition: int, m: PartitionManifest,
                                from_offset: int) -> list[AbortedTxn]:
    """Every aborted transaction the remote tier knows with an ABORT marker at or after
    `from_offset`: the `.txnindex` objects of the COPY_FINISHED segments from there on, each read
    once, and their `later_aborts` (transactions whose marker is not in a tiered segment, or not
    tiered yet); a reader keeps the ones overlapping each part it reads (`overlapping`)."""
    out: dict[tuple[int, int], AbortedTxn] = {}
    for seg in m.copy_finished:
        if seg.end_offset < from_offset:
            continue
        listed = txn_index_entries(store, topic, partition, seg) + list(seg.later_aborts or ())
        for e in listed:
            if e.last_offset >= from_offset:
                out.setdefault((e.producer_id, e.first_offset), e)
    return sorted(out.values(), key=lambda e: e.last_offset)


def segments_aborted_transactions(store: ObjectStore, topic: str, partition: int,
                                  segments: Sequence[RemoteSegment]) -> list[AbortedTxn]:
    """The aborted transactions of `segments` (consecutive): their `.txnindex` entries and their
    `later_aborts`, each once, in marker order."""
    out: dict[tuple[int, int], AbortedTxn] = {}
    for seg in segments:
        for e in txn_index_entries(store, topic, partition, seg) + list(seg.later_aborts or ()):
            out.setdefault((e.producer_id, e.first_offset), e)
    return sorted(out.values(), key=lambda e: e.last_offset)


def overlapping(aborted: Sequence[AbortedTxn], from_offset: int, to_offset: int) -> tuple[AbortedTxn, ...]:
    """The transactions of `aborted` overlapping offsets [from_offset, to_offset] (inclusive)."""
    return tuple(a for a in aborted if a.last_offset >= from_offset and a.first_offset <= to_offset)


def start_position(store: ObjectStore, topic: str, partition: int, seg: RemoteSegment, offset: int) -> int:
    """File position of the index floor entry of `offset` in `seg` (0 at or below its base)."""
    if offset <= seg.base_offset or seg.index_bytes == 0:
        return 0
    rel, pos = index_entries(store, topic, partition, seg)
    from bisect import bisect_right

    i = bisect_right(rel, offset - seg.base_offset)
    return int(pos[i - 1]) if i else 0


def iter_segment_batches(store: ObjectStore, topic: str, partition: int, seg: RemoteSegment, *,
                         from_offset: int | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                         check_crc: bool = True) -> Iterator[tuple[int, RecordBatch]]:
    """(position, batch) of every batch of `seg` whose last offset is >= `from_offset`, CRC-checked."""
    key = segment_key(topic, partition, seg.base_offset, seg.segment_id, LOG_SUFFIX)
    size = seg.size_in_bytes
    position = start_position(store, topic, partition, seg, from_offset) if from_offset is not None else 0
    target = seg.base_offset if from_offset is None else from_offset
    carry = b""
    prev_last = seg.base_offset - 1
    while position < size:
        want = min(chunk_bytes, size - position)
        try:
            data = store.get_range(key, position, position + want)
        except ObjectNotFoundError:
            raise RemoteCorruptionError(f"{key} is missing", key=key) from None
        if not data:
            raise RemoteCorruptionError(f"{key} is shorter than the {size} bytes the manifest says", key=key,
                                        position=position)
        buf = carry + data if carry else data
        base_pos = position - len(carry)
        position += len(data)
        at = 0
        try:
            for pos, batch in iter_batches(buf, base_position=base_pos, file=key):
                at = pos - base_pos + batch.size_in_bytes
                # The base offset lies outside the CRC: offsets that leave the segment or do not
                # increase are damage (the uploader only stores increasing batches inside [base, end]).
                if batch.base_offset <= prev_last or batch.last_offset > seg.end_offset or batch.last_offset_delta < 0:
                    raise RemoteCorruptionError(f"{key}: batch [{batch.base_offset}, {batch.last_offset}] does not "
                                                f"follow offset {prev_last} inside the segment (ends at "
                                                f"{seg.end_offset})", key=key, position=pos)
                prev_last = batch.last_offset
                if batch.last_offset < target:
                    continue
                if check_crc:
                    batch.ensure_valid(file=key, position=pos)
                yield pos, batch
        except TruncatedBatchError:
            if position < size:
                carry = bytes(memoryview(buf)[at:])
                if len(carry) > max(chunk_bytes, 64 * 1024 * 1024) + LOG_OVERHEAD:
                    raise RemoteCorruptionError(f"{key}: a batch larger than the read limit at {base_pos + at}",
                                                key=key, position=base_pos + at) from None
                continue
            raise RemoteCorruptionError(f"{key}: torn batch at the end", key=key, position=base_pos + at) from None
        except CorruptRecordError as e:
            raise RemoteCorruptionError(f"{key}: {e}", key=key, position=e.position) from None
        carry = b""
    if carry:
        raise RemoteCorruptionError(f"{key}: torn batch at the end", key=key, position=size - len(carry))


def iter_segment_records(store: ObjectStore, topic: str, partition: int, seg: RemoteSegment, *,
                         from_offset: int | None = None, to_offset: int | None = None,
                         min_timestamp: int | None = None, max_timestamp: int | None = None,
                         chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                         aborted: Sequence[AbortedTxn] = ()) -> Iterator[RemoteRecord]:
    """Records of `seg` with from_offset <= offset <= to_offset and min_timestamp <= timestamp <=
    max_timestamp (each bound optional); control batches (transaction markers) are skipped, and so
    are the batches of the transactions `aborted` lists (logstore/read_committed.py's walk)."""
    lo = seg.base_offset if from_offset is None else from_offset
    hi = seg.end_offset if to_offset is None else to_offset
    key = segment_key(topic, partition, seg.base_offset, seg.segment_id, LOG_SUFFIX)
    tracker = AbortedTransactions(aborted) if aborted else None
    for pos, batch in iter_segment_batches(store, topic, partition, seg, from_offset=lo, chunk_bytes=chunk_bytes):
        if batch.base_offset > hi:
            return
        if tracker is not None and tracker.is_aborted(batch):
            continue
        if batch.is_control:
            continue
        if min_timestamp is not None and batch.max_timestamp < min_timestamp:
            continue
        log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
        ts_type = int(batch.timestamp_type)
        epoch, pid = batch.partition_leader_epoch, batch.producer_id
        try:
            records = batch.records()
        except (InvalidRecordError, CorruptRecordError) as e:  # a CRC-valid batch a buggy writer made
            raise RemoteCorruptionError(f"{key}: {e}", key=key, position=pos) from None
        for i, r in enumerate(records):
            ts = batch.max_timestamp if log_append else r.timestamp
            if not -MAX_TIMESTAMP_MS <= ts <= MAX_TIMESTAMP_MS:
                raise RemoteCorruptionError(f"{key}: record {i} timestamp is out of range", key=key, position=pos)
        for r in records:
            if r.offset < lo or r.offset > hi:
                continue
            ts = batch.max_timestamp if log_append else r.timestamp
            if (min_timestamp is not None and ts < min_timestamp) or (max_timestamp is not None and ts > max_timestamp):
                continue
            yield RemoteRecord(r.offset, ts, ts_type, r.key, r.value, r.headers, epoch, pid)


#: Rows per Arrow record batch handed to Spark, and the most key/value/header bytes in one.
ARROW_BATCH_ROWS = 65536
ARROW_BATCH_BYTES = 64 * 1024 * 1024


def iter_segment_arrow(store: ObjectStore, topic: str, partition: int, seg: RemoteSegment, *,
                       columns: Sequence[str] | None = None, from_offset: int | None = None,
                       to_offset: int | None = None, min_timestamp: int | None = None,
                       max_timestamp: int | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
                       max_rows: int = ARROW_BATCH_ROWS, max_bytes: int = ARROW_BATCH_BYTES,
                       native: bool | None = None, aborted: Sequence[AbortedTxn] = ()) -> Iterator[tuple[int, dict]]:
    """The rows `iter_segment_records` returns, as (rows, column name -> pyarrow.Array) of at most
    about `max_rows` rows, only the `columns` asked for (default: all of record_arrow.COLUMNS).

    `native` (default: when the extension is built) decodes with _arrowscan.c, which frames,
    CRC-checks and decodes in one pass with no Python object per record; otherwise the rows come
    from `iter_segment_records` (the reference). Both raise `RemoteCorruptionError` naming the
    object and the batch's position for the same bytes.

    `aborted` (the transactions overlapping the read, `overlapping`): their batches are left out.
    The native decoder knows nothing of transactions, so a segment read with any goes the
    reference way (only segments that meet an aborted transaction pay for it).
    """
    from lakelog.logstore import record_arrow

    cols = record_arrow.check_columns(record_arrow.COLUMNS if columns is None else columns)
    if native is None:
        native = record_arrow.native_available()
    if not native or aborted:
        rows: list[RemoteRecord] = []
        for r in iter_segment_records(store, topic, partition, seg, from_offset=from_offset, to_offset=to_offset,
                                      min_timestamp=min_timestamp, max_timestamp=max_timestamp,
                                      chunk_bytes=chunk_bytes, aborted=aborted):
            rows.append(r)
            if len(rows) >= max_rows:
                yield len(rows), record_arrow.reference_arrays(rows, cols)
                rows = []
        if rows:
            yield len(rows), record_arrow.reference_arrays(rows, cols)
        return
    yield from _native_arrow(store, topic, partition, seg, cols, from_offset, to_offset, min_timestamp,
                             max_timestamp, chunk_bytes, max_rows, max_bytes)


def _native_arrow(store, topic, partition, seg, cols, from_offset, to_offset, min_ts, max_ts, chunk_bytes,
                  max_rows, max_bytes):
    from lakelog.logstore import record_arrow as ra
    from lakelog.logstore.compression import decompress
    from lakelog.logstore.record_batch import ATTRIBUTES_OFFSET, COMPRESSION_MASK, DEFAULT_MAX_UNCOMPRESSED_BYTES, HEADER_SIZE

    key = segment_key(topic, partition, seg.base_offset, seg.segment_id, LOG_SUFFIX)
    lo = seg.base_offset if from_offset is None else from_offset
    hi = seg.end_offset if to_offset is None else to_offset
    size = seg.size_in_bytes
    position = start_position(store, topic, partition, seg, lo)
    decoder = ra.NativeDecoder(cols, max_rows=max_rows, max_bytes=max_bytes, segment_base=seg.base_offset,
                               segment_end=seg.end_offset)
    carry = b""
    while position < size:
        want = min(chunk_bytes, size - position)
        try:
            data = store.get_range(key, position, position + want)
        except ObjectNotFoundError:
            raise RemoteCorruptionError(f"{key} is missing", key=key) from None
        if not data:
            raise RemoteCorruptionError(f"{key} is shorter than the {size} bytes the manifest says", key=key,
                                        position=position)
        buf = carry + data if carry else data
        base_pos = position - len(carry)
        position += len(data)
        at = 0
        while True:
            status, at, detail = decoder.feed(buf, at, lo, hi, min_ts, max_ts)
            if status == ra.DONE:
                break
            if status == ra.FULL:
                yield decoder.take()
            elif status == ra.INFLATE:
                batch = memoryview(buf)[at:at + detail]
                codec = batch[ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK
                try:
                    records = decompress(codec, batch[HEADER_SIZE:], DEFAULT_MAX_UNCOMPRESSED_BYTES)
                except InvalidRecordError as e:
                    raise RemoteCorruptionError(f"{key}: {e}", key=key, position=base_pos + at) from None
                failure = decoder.add_inflated(batch, records, lo, hi, min_ts, max_ts)
                if failure is not None:
                    raise RemoteCorruptionError(f"{key}: {failure}", key=key, position=base_pos + at)
                at += detail
            elif status == ra.STOP:
                if decoder.rows:
                    yield decoder.take()
                return
            else:
                raise RemoteCorruptionError(f"{key}: {detail}", key=key, position=base_pos + at)
        if at < len(buf):  # a batch continues past this chunk (or the object is torn)
            if position < size:
                carry = bytes(memoryview(buf)[at:])
                if len(carry) > max(chunk_bytes, 64 * 1024 * 1024) + LOG_OVERHEAD:
                    raise RemoteCorruptionError(f"{key}: a batch larger than the read limit at {base_pos + at}",
                                                key=key, position=base_pos + at)
                continue
            raise RemoteCorruptionError(f"{key}: torn batch at the end", key=key, position=base_pos + at)
        carry = b""
    if decoder.rows:
        yield decoder.take()


def readable_segments(m: PartitionManifest, *, from_offset: int | None = None, to_offset: int | None = None,
                      min_timestamp: int | None = None) -> list[RemoteSegment]:
    """The COPY_FINISHED segments that may hold offsets in [from, to] at or after `min_timestamp`."""
    out = []
    for s in m.copy_finished:
        if s.end_offset < m.log_start_offset:
            continue
        if from_offset is not None and s.end_offset < from_offset:
            continue
        if to_offset is not None and s.base_offset > to_offset:
            continue
        if min_timestamp is not None and s.max_timestamp != NO_TIMESTAMP and s.max_timestamp < min_timestamp:
            continue
        out.append(s)
    return out
