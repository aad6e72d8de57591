"""Remote reads on the filesystem store: the same batches as the local log, fetch bounds, chunking,
caches and prefetch, CRC refusal, out-of-range, and timestamp lookups from the indexes."""

from __future__ import annotations

import pytest

from lakelog.infra.config import LogConfig
from lakelog.logstore.compression import Compression
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, RecordBatch, TimestampType, build_batch, iter_batches
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.errors import RemoteCorruptionError, RemoteOffsetOutOfRangeError
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.logstore.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from lakelog.tiering.layout import segment_key
from lakelog.tiering.manager import RemoteTier
from tests.support.tiering import InstrumentedStore, fill_log

TOPIC = "orders"


@pytest.fixture
def store(tmp_path):
    return InstrumentedStore(FileSystemStore(tmp_path / "remote"))


def make(tmp_path, store, *, batches=120, chunk=4096, log_overrides=None, prefetch=2, **fill):
    cfg = {"segment.bytes": 3000, "index.interval.bytes": 256, "retention.ms": -1}
    cfg.update(log_overrides or {})
    log = PartitionLog(tmp_path / "log" / f"{TOPIC}-0", LogConfig(cfg))
    if batches:
        fill_log(log, batches, leader_epoch=1, **fill)
    tier = RemoteTier(store, TieringConfig({"remote.fetch.chunk.bytes": chunk, "remote.segment.delete.delay.ms": 0,
                                            "remote.fetch.prefetch.chunks": prefetch,
                                            "remote.log.copy.max.segments.per.round": 10_000}))
    rp = tier.partition(TOPIC, 0)
    rp.copy_segments(log, 1, log.log_end_offset)
    return log, tier, rp


def batches_of(data: bytes) -> list[RecordBatch]:
    return [RecordBatch(bytes(b.buffer)) for _, b in iter_batches(data)]


def test_reads_return_what_the_local_log_returns(tmp_path, store):
    log, tier, rp = make(tmp_path, store)
    with tier:
        end = rp.tiered_offset(max_age_ms=0)
        for offset in [0, 1, 2, 3, 50, 151, end - 1]:
            for max_bytes in [1, 100, 700, 5000, 100_000]:
                local = log.read(offset, max_bytes, max_offset=end)
                remote = rp.read(offset, max_bytes, max_offset=end)
                assert remote.records == bytes(local.records), (offset, max_bytes)
                assert remote.first_offset == local.first_offset
                assert remote.end_offset == end and remote.log_start_offset == 0


def test_read_bounds(tmp_path, store):
    log, tier, rp = make(tmp_path, store)
    with tier:
        one = batches_of(rp.read(10, 1).records)
        assert len(one) == 1 and one[0].base_offset <= 10 <= one[0].last_offset  # at least one batch
        assert rp.read(10, 1, min_one_batch=False).records == b""
        capped = batches_of(rp.read(0, 100_000, max_offset=30).records)
        assert capped[-1].last_offset < 30 and capped[-1].last_offset >= 26
        assert rp.read(30, 1000, max_offset=30).records == b""
        whole = rp.read(0, 10**9)
        assert whole.next_offset == rp.tiered_offset()  # crossed every remote segment
        with pytest.raises(RemoteOffsetOutOfRangeError):
            rp.read(rp.tiered_offset(), 100)


def test_batches_larger_than_a_chunk_and_compressed(tmp_path, store):
    log = PartitionLog(tmp_path / "log" / f"{TOPIC}-0", LogConfig({"segment.bytes": 40_000, "retention.ms": -1}))
    for i in range(12):
        records = [Record(r, 5_000 + i, f"k{i}".encode(), bytes([i]) * 3000) for r in range(4)]
        log.append_as_leader(build_batch(records, compression=Compression.ZSTD if i % 2 else Compression.NONE), 1)
    log.roll()
    tier = RemoteTier(store, TieringConfig({"remote.fetch.chunk.bytes": 4096}))
    with tier:
        rp = tier.partition(TOPIC, 0)
        rp.copy_segments(log, 1, log.log_end_offset)
        got = rp.read(0, 10**6).records
        assert got == b"".join(bytes(b.buffer) for b in log.batches())
        assert [r.value for b in batches_of(got) for r in b.records()][:4] == [bytes([0]) * 3000] * 4


def test_out_of_range_below_the_remote_log_start(tmp_path, store):
    log, tier, rp = make(tmp_path, store)
    with tier:
        m = rp.meta.load()
        second = m.copy_finished[1]
        rp.enforce_retention(1, retention_ms=-1, retention_bytes=m.size_in_bytes - m.copy_finished[0].size_in_bytes,
                             now_ms=10**13)
        with pytest.raises(RemoteOffsetOutOfRangeError):
            rp.read(0, 100)
        assert rp.read(second.base_offset, 100).first_offset == second.base_offset


def test_a_flipped_byte_fails_the_read_and_is_not_cached(tmp_path, store):
    log, tier, rp = make(tmp_path, store)
    with tier:
        seg = rp.meta.load().copy_finished[1]
        path = store.inner.root / segment_key(TOPIC, 0, seg.base_offset, seg.segment_id, LOG_SUFFIX)
        good = path.read_bytes()
        bad = bytearray(good)
        bad[200] ^= 0x01
        path.write_bytes(bytes(bad))
        with pytest.raises(RemoteCorruptionError) as e:
            rp.read(seg.base_offset, 100_000)
        assert e.value.kind.value == "corrupt" and LOG_SUFFIX in str(e.value)
        # reading the segment before it still works; after a repair the data is served again
        assert rp.read(0, 100).records
        path.write_bytes(good)
        assert rp.read(seg.base_offset, 100_000).records
        assert tier.metrics_snapshot()["corrupt_reads"] >= 1


@pytest.mark.parametrize("suffix", [INDEX_SUFFIX, TIME_INDEX_SUFFIX])
def test_a_damaged_index_is_refused(tmp_path, store, suffix):
    log, tier, rp = make(tmp_path, store)
    with tier:
        seg = rp.meta.load().copy_finished[0]
        path = store.inner.root / segment_key(TOPIC, 0, seg.base_offset, seg.segment_id, suffix)
        raw = bytearray(path.read_bytes())
        raw[5] ^= 0x40
        path.write_bytes(bytes(raw))
        with pytest.raises(RemoteCorruptionError, match="manifest says"):
            if suffix == INDEX_SUFFIX:
                rp.read(seg.end_offset, 100)
            else:
                rp.offset_for_timestamp(0)


def test_a_missing_object_of_a_finished_segment_is_corruption(tmp_path, store):
    log, tier, rp = make(tmp_path, store)
    with tier:
        seg = rp.meta.load().copy_finished[0]
        store.delete(segment_key(TOPIC, 0, seg.base_offset, seg.segment_id, LOG_SUFFIX))
        with pytest.raises(RemoteCorruptionError, match="missing"):
            rp.read(0, 100)


def test_a_segment_deleted_under_a_reader_is_out_of_range(tmp_path, store):
    log, tier, rp = make(tmp_path, store)
    with tier:
        rp.read(0, 10)  # the reader caches the manifest
        stale = rp.meta.cached
        other = RemoteTier(store, TieringConfig({"remote.segment.delete.delay.ms": 0}))
        with other:
            other.partition(TOPIC, 0).enforce_retention(2, retention_ms=-1, retention_bytes=0, now_ms=10**13)
        rp.meta._cached = (stale, None, 1e18)  # a reader still holding the old manifest
        rp.reader.chunk_cache.clear()
        with pytest.raises(RemoteOffsetOutOfRangeError, match="deleted"):
            rp.read(0, 100)


def test_sequential_reads_prefetch_and_hit_the_cache(tmp_path, store):
    log, tier, rp = make(tmp_path, store, batches=300, chunk=4096, prefetch=2)
    with tier:
        end = rp.tiered_offset()
        offset = 0
        while offset < end:
            offset = rp.read(offset, 1000).next_offset
        tier.prefetch_executor.shutdown(wait=True)
        snap = tier.metrics_snapshot()
        assert snap["prefetches"] > 0
        assert snap["chunk_cache"]["hits"] > snap["chunk_cache"]["misses"]
        assert snap["remote_fetch_latency"]["count"] > 10


def test_chunk_cache_is_bounded(tmp_path, store):
    log = PartitionLog(tmp_path / "log" / f"{TOPIC}-0", LogConfig({"segment.bytes": 5000, "retention.ms": -1}))
    fill_log(log, 200, leader_epoch=1)
    tier = RemoteTier(store, TieringConfig({"remote.fetch.chunk.bytes": 4096, "remote.fetch.chunk.cache.bytes": 10_000,
                                            "remote.fetch.prefetch.chunks": 0}))
    with tier:
        rp = tier.partition(TOPIC, 0)
        rp.copy_segments(log, 1, log.log_end_offset)
        rp.read(0, 10**6)
        assert tier.chunk_cache.size_in_bytes <= 10_000 and tier.chunk_cache.evictions > 0


# ---------------------------------------------------------------------------------------------
# timestamps


def test_offset_for_timestamp_matches_the_local_log_with_one_ranged_read(tmp_path, store):
    log, tier, rp = make(tmp_path, store, batches=200, timestamp_step=10)
    with tier:
        end = rp.tiered_offset()
        rp.read(0, 1)  # manifest cached
        last_remote_ts = rp.meta.cached.max_timestamp
        for ts in [0, 1_000_000, 1_000_001, 1_000_555, 1_001_234, 1_001_999, last_remote_ts, last_remote_ts + 1]:
            store.reset_calls()
            expected = log.offset_for_timestamp(ts)
            got = rp.offset_for_timestamp(ts)
            if expected is not None and expected[0] < end:
                assert got == expected, ts
            else:
                assert got is None
            assert store.count("get", LOG_SUFFIX) == 0
            assert store.count("get_range", LOG_SUFFIX) <= 1
            ranges = [extra for op, key, extra in store.calls if op == "get_range"]
            assert all(b - a <= 2 * 256 + 1000 for a, b in ranges)  # about two index intervals


def test_offset_for_timestamp_log_append_time(tmp_path, store):
    log, tier, rp = make(tmp_path, store, batches=0, log_overrides={"message.timestamp.type": "LogAppendTime"})
    with tier:
        clock = iter(range(10_000, 10**9, 1000))
        log._clock = lambda: next(clock)  # LogAppendTime stamps batches with the log's clock (seconds)
        fill_log(log, 60, leader_epoch=1)
        rp.copy_segments(log, 1, log.log_end_offset)
        for ts in [0, 10_000_000, 10_000_001, 10_030_000]:
            expected = log.offset_for_timestamp(ts)
            assert rp.offset_for_timestamp(ts) == expected


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path, store):
    log = PartitionLog(tmp_path / "log" / f"{TOPIC}-0",
                       LogConfig({"segment.bytes": 1500, "index.interval.bytes": 100, "retention.ms": -1}))
    import random
    rnd = random.Random(7)
    for i in range(100):
        records = [Record(r, 1_000 + rnd.randrange(0, 5000), b"k", b"v" * 20) for r in range(3)]
        log.append_as_leader(build_batch(records, timestamp_type=TimestampType.CREATE_TIME), 1)
    log.roll()
    tier = RemoteTier(store, TieringConfig({"remote.fetch.chunk.bytes": 4096}))
    with tier:
        rp = tier.partition(TOPIC, 0)
        rp.copy_segments(log, 1, log.log_end_offset)
        for ts in range(900, 6100, 97):
            store.reset_calls()
            assert rp.offset_for_timestamp(ts) == log.offset_for_timestamp(ts), ts
            assert store.count("get_range", LOG_SUFFIX) <= 1


def test_concurrent_readers_share_the_caches_safely(tmp_path, store):
    from concurrent.futures import ThreadPoolExecutor

    log, tier, rp = make(tmp_path, store, batches=250, chunk=4096)
    with tier:
        end = rp.tiered_offset()
        expected = b"".join(bytes(b.buffer) for b in log.batches(0, max_offset=end))

        def consume(step: int) -> bytes:
            parts, offset = [], 0
            while offset < end:
                r = rp.read(offset, step, max_offset=end)
                parts.append(r.records)
                offset = r.next_offset
            return b"".join(parts)

        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(consume, [300, 700, 1500, 4000, 9000, 300, 700, 20_000]))
        assert all(r == expected for r in results)


def test_a_sequential_consumer_reads_no_index(tmp_path, store):
    log, tier, rp = make(tmp_path, store, batches=200, chunk=4096, prefetch=2)
    with tier:
        end = rp.tiered_offset(max_age_ms=0)
        store.reset_calls()
        offset, received = 0, []
        while offset < end:
            result = rp.read(offset, 700, max_offset=end)
            received.extend(batches_of(result.records))
            offset = result.next_offset
        tier.prefetch_executor.shutdown(wait=True)
        assert store.count("get", INDEX_SUFFIX) == 0
        assert [b.base_offset for b in received] == [b.base_offset for b in log.batches(0, max_offset=end)]
        assert b"".join(bytes(b.buffer) for b in received) == b"".join(
            bytes(b.buffer) for b in log.batches(0, max_offset=end))
        # a read in the middle of a segment, not continuing a previous one, uses the index
        seg = rp.meta.load().copy_finished[2]
        middle = (seg.base_offset + seg.end_offset) // 2
        assert rp.read(middle, 1).first_offset <= middle
        assert store.count("get", INDEX_SUFFIX) == 1
