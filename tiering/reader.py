"""Reads from the remote tier: fetches below the local log start offset, and ListOffsets by timestamp.

`read(offset, max_bytes)` mirrors `PartitionLog.read`:
  1. the manifest (cached up to `remote.log.metadata.max.age.ms`; re-read once when the offset falls
     outside it) gives the COPY_FINISHED segment covering the offset;
  2. its `.index` (GET once, checked against the size and CRC-32C in the manifest, kept in the
     index LRU cache) gives the floor entry: the position of a batch at or before the offset;
  3. ranged GETs of the `.log`, in aligned chunks of `remote.fetch.chunk.bytes` kept in the chunk
     LRU cache (several missing chunks are fetched in parallel), from that position: batch headers
     are skipped up to the batch holding the offset, then whole batches are returned up to
     `max_bytes` (at least one), each CRC-checked — a mismatch raises RemoteCorruptionError and
     drops the segment's cached chunks; wrong bytes are never returned;
  4. a read that continues where a previous one ended (a sequential consumer) starts at the position
     where that read ended, and a read entering a segment at its base offset at its first byte:
     neither needs the `.index`, so a consumer reading from the start GETs no index at all; it
     prefetches the next `remote.fetch.prefetch.chunks` chunks (crossing into the next segment)
     on a bounded pool.

`offset_for_timestamp(ts)` reads no `.log` data except one ranged GET: the manifest's max
timestamps pick the first segment reaching `ts`; its `.timeindex` gives the last entry below `ts`
(the answer lies after it) and the first entry at or above it (the answer lies at or before it);
the `.index` turns both into byte positions; one ranged GET of those bytes finds the batch, whose
records give the exact offset (as the local log does).

Errors: RemoteOffsetOutOfRangeError (outside [log start, last tiered offset], or a segment deleted
by retention under the read), RemoteCorruptionError, TransientStoreError.

Concurrency: thread-safe; many reads may run at once (they share the caches). Calls block on the
store: run them on a worker thread, not on the event loop.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from concurrent.futures import Executor
from dataclasses import dataclass

from lakelog.index import offset_index, time_index
from lakelog.index.errors import CorruptIndexError
from lakelog.index.transaction_index import AbortedTxn, TxnIndexSearch, check_entries, decode_entries
from lakelog.logstore.errors import CorruptRecordError
from lakelog.logstore.record_batch import _OFFSET_AND_LENGTH, HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC, RecordBatch, crc32c
from lakelog.tiering.cache import ByteLRUCache
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.errors import ObjectNotFoundError, RemoteCorruptionError, RemoteOffsetOutOfRangeError, TieringError
from lakelog.logstore.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from lakelog.tiering.layout import segment_key
from lakelog.tiering.manifest_model import PartitionManifest, RemoteSegment, SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.metrics import TieringMetrics
from lakelog.tiering.store import ObjectStore

#: Recent read end offsets remembered per partition to recognise sequential readers.
_RECENT_READS = 64  # with where each ended (segment id, position): the next read needs no index
#: Bytes charged per cached index on top of its data (arrays, keys).
_INDEX_OVERHEAD = 128


@dataclass(frozen=True, slots=True)
class RemoteFetchResult:
    """Whole, CRC-checked batches read from the remote tier, with the remote tier's bounds."""

    records: bytes
    first_offset: int  # base offset of the first batch returned (may be below the offset asked)
    next_offset: int  # one past the last offset returned: where a sequential reader continues
    log_start_offset: int  # the remote log start offset
    end_offset: int  # one past the last tiered offset


@dataclass(frozen=True, slots=True)
class _SegmentRead:
    data: bytes
    first_offset: int
    last_offset: int
    end_position: int  # where the read stopped in the segment's .log
    complete: bool  # reached the end of the segment's data


class _SegmentBytes:
    """Byte ranges of one remote `.log`, served from the chunk cache; holds the chunks it used so
    that a long read is not affected by evictions meanwhile."""

    def __init__(self, reader: "RemoteLogReader", seg: RemoteSegment) -> None:
        self.reader = reader
        self.seg = seg
        self.chunk_bytes = reader.chunk_bytes
        self.chunks: dict[int, bytes] = {}

    def ensure(self, start: int, end: int) -> None:
        end = min(end, self.seg.size_in_bytes)
        if start >= end:
            return
        cb = self.chunk_bytes
        missing = [n for n in range(start // cb, (end - 1) // cb + 1) if n not in self.chunks]
        if len(missing) > 1 and self.reader.fetch_executor is not None:
            futures = [(n, self.reader.fetch_executor.submit(self.reader._chunk, self.seg, n)) for n in missing]
            for n, fut in futures:
                self.chunks[n] = fut.result()
        else:
            for n in missing:
                self.chunks[n] = self.reader._chunk(self.seg, n)

    def slice(self, start: int, end: int) -> bytes:
        end = min(end, self.seg.size_in_bytes)
        self.ensure(start, end)
        cb = self.chunk_bytes
        parts = []
        pos = start
        while pos < end:
            n = pos // cb
            chunk = self.chunks[n]
            off = pos - n * cb
            take = min(end - pos, len(chunk) - off)
            parts.append(chunk[off:off + take])
            pos += take
        return parts[0] if len(parts) == 1 else b"".join(parts)


class RemoteLogReader:
    """Reads of one partition's remote tier (see the module docstring)."""

    def __init__(self, meta: ManifestStore, store: ObjectStore, *, config: TieringConfig | None = None,
                 index_cache: ByteLRUCache | None = None, chunk_cache: ByteLRUCache | None = None,
                 fetch_executor: Executor | None = None, prefetch_executor: Executor | None = None,
                 metrics: TieringMetrics | None = None) -> None:
        self.meta = meta
        self.store = store
        self.topic = meta.topic
        self.partition = meta.partition
        self.config = config if config is not None else TieringConfig()
        self.chunk_bytes = self.config.remote_fetch_chunk_bytes
        self.index_cache = index_cache if index_cache is not None else ByteLRUCache(
            self.config.remote_log_index_file_cache_total_size_bytes)
        self.chunk_cache = chunk_cache if chunk_cache is not None else ByteLRUCache(
            self.config.remote_fetch_chunk_cache_bytes)
        self.fetch_executor = fetch_executor
        self.prefetch_executor = prefetch_executor
        self.metrics = metrics if metrics is not None else TieringMetrics()
        self._recent: OrderedDict[int, tuple[str, int] | None] = OrderedDict()
        self._recent_lock = threading.Lock()

    # ------------------------------------------------------------------ helpers

    def _key(self, seg: RemoteSegment, suffix: str) -> str:
        return segment_key(self.topic, self.partition, seg.base_offset, seg.segment_id, suffix)

    def manifest(self) -> PartitionManifest:
        return self.meta.current(self.config.remote_log_metadata_max_age_ms)

    def _missing(self, seg: RemoteSegment, key: str) -> TieringError:
        """An object of `seg` is gone: deleted by retention under the read, or lost."""
        now = self.meta.load().segment(seg.segment_id)
        if now is None or now.state != SegmentState.COPY_FINISHED:
            return RemoteOffsetOutOfRangeError(f"remote segment [{seg.base_offset}, {seg.end_offset}] was deleted "
                                               f"(retention) while it was read")
        return RemoteCorruptionError("a COPY_FINISHED segment's object is missing", key=key)

    def _load_checked(self, seg: RemoteSegment, suffix: str, size: int, crc: int) -> bytes:
        key = self._key(seg, suffix)
        if size == 0 and crc == 0:
            return b""  # an empty index (a small segment): no request needed
        try:
            data, _ = self.store.get(key)
        except ObjectNotFoundError:
            raise self._missing(seg, key) from None
        if len(data) != size or crc32c(data) != crc:
            self.metrics.add("corrupt_reads")
            raise RemoteCorruptionError(f"{suffix} object has {len(data)} bytes / CRC-32C {crc32c(data)}, the "
                                        f"manifest says {size} / {crc}", key=key)
        return data

    def _offset_index_loader(self, seg: RemoteSegment):
        def load():
            key = self._key(seg, INDEX_SUFFIX)
            data = self._load_checked(seg, INDEX_SUFFIX, seg.index_bytes, seg.index_crc32c)
            try:
                rel, pos = offset_index.decode(data, file=key)
            except CorruptIndexError as e:
                raise RemoteCorruptionError(str(e)) from None
            for a, b, p, q in zip(rel, rel[1:], pos, pos[1:]):
                if b <= a or q <= p:
                    raise RemoteCorruptionError("offset index entries do not increase", key=key)
            if len(pos) and (pos[-1] >= seg.size_in_bytes or seg.base_offset + rel[-1] > seg.end_offset):
                raise RemoteCorruptionError("offset index points past its segment", key=key)
            return (rel, pos), len(data) + _INDEX_OVERHEAD

        return load

    def _offset_index(self, seg: RemoteSegment):
        return self.index_cache.get_or_load((seg.segment_id, INDEX_SUFFIX), self._offset_index_loader(seg))

    def _time_index(self, seg: RemoteSegment):
        def load():
            key = self._key(seg, TIME_INDEX_SUFFIX)
            data = self._load_checked(seg, TIME_INDEX_SUFFIX, seg.time_index_bytes, seg.time_index_crc32c)
            try:
                ts, rel = time_index.decode(data, file=key)
            except CorruptIndexError as e:
                raise RemoteCorruptionError(str(e)) from None
            for a, b, r, q in zip(ts, ts[1:], rel, rel[1:]):
                if b <= a or q < r:
                    raise RemoteCorruptionError("time index entries do not increase", key=key)
            if rel and seg.base_offset + rel[-1] > seg.end_offset:
                raise RemoteCorruptionError("time index points past its segment", key=key)
            return (ts, rel), len(data) + _INDEX_OVERHEAD

        return self.index_cache.get_or_load((seg.segment_id, TIME_INDEX_SUFFIX), load)

    def _txn_index(self, seg: RemoteSegment) -> list[AbortedTxn]:
        """The segment's aborted transactions (its `.txnindex`, size and CRC-32C checked against
        the manifest, then checked structurally); [] when it has none."""
        if not seg.txn_index_bytes:
            return []

        def load():
            key = self._key(seg, TXN_INDEX_SUFFIX)
            data = self._load_checked(seg, TXN_INDEX_SUFFIX, seg.txn_index_bytes, seg.txn_index_crc32c)
            try:
                entries = decode_entries(data, file=key)
                check_entries(entries, seg.base_offset, seg.end_offset + 1, file=key)
            except CorruptIndexError as e:
                raise RemoteCorruptionError(str(e)) from None
            return entries, len(data) + _INDEX_OVERHEAD

        return self.index_cache.get_or_load((seg.segment_id, TXN_INDEX_SUFFIX), load)

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearch:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset): the `.txnindex`
        objects of the remote segments from the one holding `fetch_offset` to the one holding
        `upper_bound_offset - 1`, and that last segment's `later_aborts` (the transactions whose
        marker lies after it, tiered or not) — then the search is complete. A segment written
        without `later_aborts` makes the walk go on through the later `.txnindex` objects until an
        entry's LSO reaches the bound (Kafka's walk); `complete` False: it ran out of segments and
        the local log's indexes must be searched too."""
        m = self.manifest()
        current = m.segment_for_offset(max(fetch_offset, m.log_start_offset))
        found: dict[tuple[int, int], AbortedTxn] = {}

        def add(entries) -> None:
            for e in entries:
                if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
                    found.setdefault((e.producer_id, e.first_offset), e)

        def result(complete: bool) -> TxnIndexSearch:
            return TxnIndexSearch(tuple(sorted(found.values(), key=lambda e: e.last_offset)), complete)

        while current is not None:
            for e in self._txn_index(current):
                add((e,))
                if e.last_stable_offset >= upper_bound_offset:
                    return result(True)
            if current.end_offset + 1 >= upper_bound_offset and current.later_aborts is not None:
                add(current.later_aborts)
                return result(True)
            current = m.next_segment(current)
        return result(False)

    def _chunk_loader(self, seg: RemoteSegment, n: int):
        def load():
            start = n * self.chunk_bytes
            end = min(start + self.chunk_bytes, seg.size_in_bytes)
            key = self._key(seg, LOG_SUFFIX)
            try:
                data = self.store.get_range(key, start, end)
            except ObjectNotFoundError:
                raise self._missing(seg, key) from None
            if len(data) != end - start:
                self.metrics.add("corrupt_reads")
                raise RemoteCorruptionError(f"ranged GET [{start}, {end}) returned {len(data)} bytes: the object is "
                                            f"shorter than the manifest says", key=key, position=start)
            return data, len(data)

        return load

    def _chunk(self, seg: RemoteSegment, n: int) -> bytes:
        return self.chunk_cache.get_or_load((seg.segment_id, n), self._chunk_loader(seg, n))

    def _corrupt(self, seg: RemoteSegment, message: str, position: int, offset: int | None = None) -> RemoteCorruptionError:
        self.chunk_cache.invalidate_where(lambda k: k[0] == seg.segment_id)
        self.metrics.add("corrupt_reads")
        return RemoteCorruptionError(message, key=self._key(seg, LOG_SUFFIX), position=position, offset=offset)

    def _header(self, view: _SegmentBytes, position: int) -> tuple[int, int, int, int]:
        """(base offset, size, last offset, max timestamp) of the batch at `position`, checked."""
        seg = view.seg
        if position + HEADER_SIZE > seg.size_in_bytes:
            raise self._corrupt(seg, "a batch header runs past the end of the segment", position)
        head = view.slice(position, position + HEADER_SIZE)
        base, length, _ple, magic, _crc, _attrs, lod, _bts, max_ts, *_ = HEADER.unpack(head)
        size = length + LOG_OVERHEAD
        if magic != MAGIC or length < HEADER_SIZE - LOG_OVERHEAD or position + size > seg.size_in_bytes:
            raise self._corrupt(seg, f"impossible batch header (magic {magic}, length {length})", position, base)
        return base, size, base + lod, max_ts

    # ------------------------------------------------------------------ read

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> RemoteFetchResult:
        """Whole batches from the one holding `offset`, at most `max_bytes` (at least one batch when
        `min_one_batch`), all below `max_offset` (exclusive), crossing remote segments as needed."""
        started = time.monotonic()
        try:
            result = self._read(offset, max_bytes, max_offset, min_one_batch)
        except TieringError:
            self.metrics.add("remote_fetch_errors")
            raise
        finally:
            self.metrics.remote_fetch_latency.observe((time.monotonic() - started) * 1000)
        self.metrics.add("remote_fetches")
        self.metrics.add("remote_fetch_bytes", len(result.records))
        return result

    def _locate(self, offset: int) -> tuple[PartitionManifest, RemoteSegment]:
        m = self.manifest()
        seg = m.segment_for_offset(offset)
        if seg is None:
            m = self.meta.load()
            seg = m.segment_for_offset(offset)
        if seg is None:
            end = m.end_offset
            raise RemoteOffsetOutOfRangeError(
                f"offset {offset} is outside the remote tier of {self.topic}-{self.partition} "
                f"[{m.log_start_offset}, {'none' if end is None else end}]")
        return m, seg

    def _read(self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool) -> RemoteFetchResult:
        m, seg = self._locate(offset)
        end_offset = (m.end_offset or 0) + 1
        with self._recent_lock:
            sequential = offset in self._recent
            hint = self._recent.get(offset)
        if max_offset is not None and offset >= max_offset:
            return RemoteFetchResult(b"", offset, offset, m.log_start_offset, end_offset)
        parts: list[bytes] = []
        first_offset = -1
        remaining = max_bytes
        target = offset
        last_read: tuple[RemoteSegment, int] | None = None
        current: RemoteSegment | None = seg
        while current is not None and (remaining > 0 or not parts):
            at = hint[1] if hint is not None and hint[0] == current.segment_id and target == offset else None
            got = self._read_segment(current, target, remaining, max_offset, min_one_batch and not parts,
                                     position_hint=at)
            if got is not None:
                if not got.data:
                    break  # the next batch does not fit in max_bytes
                parts.append(got.data)
                if first_offset < 0:
                    first_offset = got.first_offset
                remaining -= len(got.data)
                target = got.last_offset + 1
                last_read = (current, got.end_position)
                if not got.complete:
                    break  # stopped inside the segment: out of bytes or at max_offset
            elif parts:
                break
            target = max(target, current.end_offset + 1)
            if max_offset is not None and target >= max_offset:
                break
            current = m.next_segment(current)
        records = parts[0] if len(parts) == 1 else b"".join(parts)
        next_offset = target if records else offset
        self._remember(next_offset, (last_read[0].segment_id, last_read[1]) if last_read is not None else None)
        if sequential and last_read is not None:
            self._prefetch(m, *last_read)
        return RemoteFetchResult(records, first_offset if records else offset, next_offset, m.log_start_offset,
                                 end_offset)

    def _remember(self, next_offset: int, position: tuple[str, int] | None) -> None:
        """Remember where a read ended: (segment id, position in its .log) of `next_offset`."""
        with self._recent_lock:
            self._recent[next_offset] = position
            self._recent.move_to_end(next_offset)
            while len(self._recent) > _RECENT_READS:
                self._recent.popitem(last=False)

    def _read_segment(self, seg: RemoteSegment, target: int, max_bytes: int, max_offset: int | None,
                      min_one: bool, *, position_hint: int | None = None) -> _SegmentRead | None:
        """Batches of `seg` from the one holding `target`; None when none lies at or after it.

        The start needs no index when it is known: `position_hint` (where the previous read of a
        sequential reader ended, a batch boundary at or before `target`), or the segment's first
        byte when `target` is at or below its base offset (a read crossing into the segment)."""
        size = seg.size_in_bytes
        if size == 0:
            return None
        entry_offset = None  # the offset of the index entry used, checked against its batch
        if position_hint is not None and 0 <= position_hint <= size:
            position = position_hint
        elif target <= seg.base_offset:
            position = 0
        else:
            rel, pos = self._offset_index(seg)
            i = bisect_right(rel, target - seg.base_offset)
            position = pos[i - 1] if i else 0
            entry_offset = seg.base_offset + rel[i - 1] if i else None
        view = _SegmentBytes(self, seg)
        if entry_offset is not None:
            base, _, last, _ = self._header(view, position)
            if not base <= entry_offset <= last:
                raise self._corrupt(seg, f"offset index entry ({entry_offset}, {position}) does not point at the "
                                         f"batch holding that offset", position, base)
        while position < size:
            base, bsize, last, _ = self._header(view, position)
            if last >= target:
                break
            position += bsize
        else:
            return None
        start = position
        want = max(max_bytes, bsize) if min_one else max_bytes
        buf = view.slice(start, min(size, start + max(want, 0)))
        mv = memoryview(buf)
        at = 0
        first = last_offset = -1
        stopped = False
        while at + LOG_OVERHEAD <= len(buf):
            _, length = _OFFSET_AND_LENGTH.unpack_from(mv, at)
            batch_size = length + LOG_OVERHEAD
            if length < HEADER_SIZE - LOG_OVERHEAD:
                raise self._corrupt(seg, f"batch length {length} is impossible", start + at)
            if at + batch_size > len(buf):
                stopped = True
                break
            batch = RecordBatch(mv[at:at + batch_size])
            if max_offset is not None and batch.last_offset >= max_offset:
                stopped = True
                break
            try:
                batch.ensure_valid(file=self._key(seg, LOG_SUFFIX), position=start + at)
            except CorruptRecordError as e:
                raise self._corrupt(seg, f"batch failed its check: {e}", start + at, batch.base_offset) from None
            if first < 0:
                first = batch.base_offset
            last_offset = batch.last_offset
            at += batch_size
        if at < len(buf) and not stopped:
            stopped = True  # a torn tail inside the bytes fetched: the next read continues there
        data = buf if at == len(buf) else buf[:at]
        end_position = start + at
        if at == 0:
            return _SegmentRead(b"", target, target - 1, end_position, False)
        return _SegmentRead(data, first, last_offset, end_position, end_position >= size and not stopped)

    def _prefetch(self, m: PartitionManifest, seg: RemoteSegment, end_position: int) -> None:
        """Load, in the background, the chunk where the next read starts and the
        `remote.fetch.prefetch.chunks` after it, crossing into the next segments (a sequential
        reader needs no index: it starts a segment at its first byte)."""
        executor = self.prefetch_executor
        count = self.config.remote_fetch_prefetch_chunks
        if executor is None or count <= 0:
            return
        cb = self.chunk_bytes
        current: RemoteSegment | None = seg
        n = end_position // cb
        left = count + 1
        while current is not None and left > 0:
            if n * cb >= current.size_in_bytes:
                current = m.next_segment(current)
                n = 0
                continue
            if self.chunk_cache.prefetch((current.segment_id, n), self._chunk_loader(current, n), executor):
                self.metrics.add("prefetches")
            left -= 1
            n += 1

    # ------------------------------------------------------------------ timestamps

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first remote record with timestamp >= `timestamp`, or None
        when no tiered record reaches it (the caller then asks the local log)."""
        self.metrics.add("timestamp_lookups")
        m = self.manifest()
        for seg in m.copy_finished:
            if seg.max_timestamp < timestamp or seg.size_in_bytes == 0:
                continue
            found = self._find_in_segment(m, seg, timestamp)
            if found is not None:
                return found
        return None

    def _find_in_segment(self, m: PartitionManifest, seg: RemoteSegment, timestamp: int) -> tuple[int, int] | None:
        ts_list, ts_rel = self._time_index(seg)
        i = bisect_left(ts_list, timestamp)
        # Every record up to the entry before i is older than `timestamp`; the batch ending at entry
        # i's offset reaches it. The answer lies between.
        lower = seg.base_offset + ts_rel[i - 1] + 1 if i else seg.base_offset
        lower = max(lower, m.log_start_offset)
        upper = seg.base_offset + ts_rel[i] if i < len(ts_list) else seg.end_offset
        rel, pos = self._offset_index(seg)
        j = bisect_right(rel, lower - seg.base_offset)
        start = pos[j - 1] if j else 0
        k = bisect_right(rel, upper - seg.base_offset)
        end = pos[k] if k < len(pos) else seg.size_in_bytes
        key = self._key(seg, LOG_SUFFIX)
        try:
            data = self.store.get_range(key, start, end)
        except ObjectNotFoundError:
            raise self._missing(seg, key) from None
        if len(data) != end - start:
            raise RemoteCorruptionError("ranged GET returned fewer bytes than the manifest promises", key=key,
                                        position=start)
        mv = memoryview(data)
        at = 0
        while at + LOG_OVERHEAD <= len(data):
            _, length = _OFFSET_AND_LENGTH.unpack_from(mv, at)
            size = length + LOG_OVERHEAD
            if length < HEADER_SIZE - LOG_OVERHEAD or at + size > len(data):
                raise RemoteCorruptionError("a batch runs past the range its indexes promise", key=key,
                                            position=start + at)
            batch = RecordBatch(mv[at:at + size])
            at += size
            if batch.last_offset < lower or batch.max_timestamp < timestamp:
                continue
            try:
                batch.ensure_valid(file=key, position=start + at - size)
            except CorruptRecordError as e:
                self.metrics.add("corrupt_reads")
                raise RemoteCorruptionError(f"batch failed its check: {e}", key=key, position=start + at - size,
                                            offset=batch.base_offset) from None
            if batch.timestamp_type == 1:  # LogAppendTime: every record carries the batch time
                return max(batch.base_offset, lower), batch.max_timestamp
            for rec in batch.records():
                if rec.timestamp >= timestamp and rec.offset >= lower:
                    return rec.offset, rec.timestamp
        return None
