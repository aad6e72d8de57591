"""The remote tier end to end, against the filesystem store and against moto's S3 server over HTTP
(a real subprocess, `tests/support/s3server.py`): offload and consume from offset 0, a crash mid-upload
finished by a new leader, a store outage, a flipped byte, timestamp lookups, racing writers."""

from __future__ import annotations

import uuid

import pytest

from lakelog.infra.config import LogConfig
from tests.support.s3server import S3Server
from lakelog.logstore.compression import Compression
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import RecordBatch, iter_batches
from lakelog.tiering import manifest_transitions
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.errors import (
    FencedLeaderEpochError,
    ManifestInvariantError,
    RemoteCorruptionError,
    TransientStoreError,
)
from lakelog.logstore.segment import LOG_SUFFIX, TIME_INDEX_SUFFIX
from lakelog.tiering.layout import segment_key, segment_keys
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.manifest_model import RemoteSegment, SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.stores import open_store
from tests.support.tiering import InstrumentedStore, fill_log

TOPIC = "orders"
STORE_CONFIG = {"remote.storage.max.attempts": 2, "remote.storage.connect.timeout.ms": 1000,
                "remote.storage.request.timeout.ms": 5000}


@pytest.fixture(scope="module")
def s3_server():
    server = S3Server()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["fs", "s3"])
def backend(request, tmp_path, monkeypatch):
    """A factory of stores over one fresh remote location (a directory, or a new bucket)."""
    if request.param == "fs":
        url = f"file://{tmp_path}/remote"
        server = None
    else:
        server = request.getfixturevalue("s3_server")
        for k, v in server.env().items():
            monkeypatch.setenv(k, v)
        bucket = f"lakelog-{uuid.uuid4().hex[:12]}"
        server.create_bucket(bucket)
        url = f"s3://{bucket}/tier"
    opened = []

    def factory():
        store = InstrumentedStore(open_store(url, TieringConfig(STORE_CONFIG)))
        opened.append(store)
        return store

    factory.kind = request.param
    factory.server = server
    yield factory
    if server is not None and server.paused:
        server.resume()
    for store in opened:
        store.close()


def make_tier(store, **kw) -> RemoteTier:
    cfg = dict(STORE_CONFIG)
    cfg.update({"remote.segment.delete.delay.ms": 0, "remote.fetch.chunk.bytes": 8192,
                "remote.log.copy.max.segments.per.round": 1000})
    cfg.update(kw)
    return RemoteTier(store, TieringConfig(cfg))


def make_log(tmp_path, name="leader", **kw) -> PartitionLog:
    cfg = {"segment.bytes": 4096, "index.interval.bytes": 512, "retention.ms": -1, "local.retention.ms": 0}
    cfg.update({k.replace("_", "."): v for k, v in kw.items()})
    return PartitionLog(tmp_path / name / f"{TOPIC}-0", LogConfig(cfg))


def produce(log, batches: int, epoch: int = 1) -> None:
    half = batches // 2
    fill_log(log, half, leader_epoch=epoch, records_per_batch=4, value_size=40)
    fill_log(log, batches - half, leader_epoch=epoch, records_per_batch=4, value_size=40,
             compression=Compression.GZIP, first_timestamp=2_000_000)


def records_of(data: bytes) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp, r.key, r.value) for _, b in iter_batches(data)
            for r in RecordBatch(bytes(b.buffer)).records()]


def consume_all(log, rp, end: int, max_bytes: int = 3000) -> bytes:
    """A consumer from offset 0: the remote tier below the local log start, the local log above."""
    parts, offset = [], 0
    while offset < end:
        if offset < log.log_start_offset:
            r = rp.read(offset, max_bytes, max_offset=end)
            data, nxt = r.records, r.next_offset
        else:
            data = bytes(log.read(offset, max_bytes, max_offset=end).records)
            nxt = RecordBatch(data[[p for p, _ in iter_batches(data)][-1]:]).last_offset + 1
        assert data, f"no progress at offset {offset}"
        parts.append(data)
        offset = nxt
    return b"".join(parts)


def check_clean(store, rp) -> None:
    """No gap, no duplicate, nothing half done, no orphan object."""
    m = rp.meta.load()
    done = m.copy_finished
    assert done, "nothing tiered"
    for a, b in zip(done, done[1:]):
        assert b.base_offset == a.end_offset + 1
    assert not m.in_state(SegmentState.COPY_STARTED, SegmentState.DELETE_STARTED)
    objects = {o.key for o in store.list(f"{TOPIC}-0/") if not o.key.endswith("manifest.json")}
    assert objects == {k for s in done for k in segment_keys(TOPIC, 0, s.base_offset, s.segment_id)}


# ---------------------------------------------------------------------------------------------


def test_offload_delete_locally_and_consume_from_offset_zero(tmp_path, backend):
    store = backend()
    log = make_log(tmp_path)
    produce(log, 160)
    hw = log.log_end_offset
    original = b"".join(bytes(b.buffer) for b in log.batches())
    with make_tier(store) as tier:
        rp = tier.partition(TOPIC, 0)
        report = rp.copy_segments(log, 1, hw)
        assert len(report.uploaded) == len(log.segments) - 1 > 6
        deleted = rp.apply_local_retention(log, hw, now_ms=10**13).deleted_base_offsets
        assert len(deleted) == len(report.uploaded)
        assert log.log_start_offset == log.active_segment.base_offset > 0
        got = consume_all(log, rp, hw)
        assert got == original
        assert records_of(got) == records_of(original)
        assert [r[0] for r in records_of(got)] == list(range(hw))
        check_clean(store, rp)
    # a node that never saw the data reads it the same way
    with make_tier(backend()) as other:
        assert consume_all(log, other.partition(TOPIC, 0), hw, max_bytes=50_000) == original


def test_crash_mid_upload_then_a_new_leader_finishes(tmp_path, backend):
    store = backend()
    log = make_log(tmp_path)
    produce(log, 100)
    store.fail("put", suffix=TIME_INDEX_SUFFIX, after=3, error=RuntimeError("killed mid-upload"))
    with make_tier(store) as old:
        with pytest.raises(RuntimeError):
            old.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
        half_done = old.partition(TOPIC, 0).meta.load()
        assert len(half_done.copy_finished) == 3 and len(half_done.in_state(SegmentState.COPY_STARTED)) == 1
        # the new leader, on another node (another store client), in a higher epoch
        with make_tier(backend()) as new:
            rp = new.partition(TOPIC, 0)
            report = rp.copy_segments(log, 2, log.log_end_offset)
            assert len(report.abandoned) == 1 and len(report.uploaded) == len(log.segments) - 1 - 3
            check_clean(store, rp)
            end = log.active_segment.base_offset
            assert rp.read(0, 10**7).records == b"".join(bytes(b.buffer) for b in log.batches(0, max_offset=end))
        store.clear_faults()
        with pytest.raises(FencedLeaderEpochError):
            old.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)


def test_a_store_outage_keeps_local_data_and_uploads_resume(tmp_path, backend):
    store = backend()
    log = make_log(tmp_path)
    produce(log, 40)
    with make_tier(store) as tier:
        rp = tier.partition(TOPIC, 0)
        rp.copy_segments(log, 1, log.log_end_offset)
        tiered = rp.tiered_offset(max_age_ms=0)
        produce(log, 60)  # more sealed segments, not yet tiered
        hw = log.log_end_offset
        if backend.kind == "s3":
            backend.server.pause()  # connections refused; the server keeps its objects
        else:
            store.fail(error=TransientStoreError("store down"), times=None)
        with pytest.raises(TransientStoreError):
            rp.copy_segments(log, 1, hw)
        assert rp.tiered_offset(max_age_ms=0) == tiered  # the last manifest seen still answers
        deletable = rp.eligible_for_local_deletion(log, max_age_ms=0)
        assert deletable and all(s.base_offset < tiered for s in deletable)
        rp.apply_local_retention(log, hw, now_ms=10**13)
        assert log.log_start_offset == tiered  # untiered segments stay local
        if backend.kind == "s3":
            backend.server.resume()
        else:
            store.clear_faults()
        rp.copy_segments(log, 1, hw)
        assert rp.tiered_offset(max_age_ms=0) == log.active_segment.base_offset
        rp.apply_local_retention(log, hw, now_ms=10**13)
        assert log.log_start_offset == log.active_segment.base_offset
        check_clean(store, rp)
        assert tier.metrics_snapshot()["upload_failures"] == 1


def test_a_flipped_byte_in_a_remote_log_fails_with_a_typed_error(tmp_path, backend):
    store = backend()
    log = make_log(tmp_path)
    produce(log, 60)
    with make_tier(store) as tier:
        rp = tier.partition(TOPIC, 0)
        rp.copy_segments(log, 1, log.log_end_offset)
        seg = rp.meta.load().copy_finished[2]
        key = segment_key(TOPIC, 0, seg.base_offset, seg.segment_id, LOG_SUFFIX)
        data = bytearray(store.get(key)[0])
        data[len(data) // 2] ^= 0x10
        store.put(key, bytes(data))
    with make_tier(backend()) as fresh:
        rp = fresh.partition(TOPIC, 0)
        assert rp.read(0, 100).records  # other segments are fine
        with pytest.raises(RemoteCorruptionError) as caught:
            offset = seg.base_offset
            while offset <= seg.end_offset:
                offset = rp.read(offset, 2000).next_offset
        assert caught.value.kind.value == "corrupt" and caught.value.key.endswith(key)


def test_timestamp_lookup_over_many_remote_segments_reads_no_log_data(tmp_path, backend):
    store = backend()
    log = make_log(tmp_path, segment_bytes=1200, index_interval_bytes=256)
    fill_log(log, 300, leader_epoch=1, records_per_batch=2, timestamp_step=10)
    with make_tier(store) as tier:
        tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    with make_tier(store) as tier:
        rp = tier.partition(TOPIC, 0)
        m = rp.meta.load()
        assert len(m.copy_finished) >= 30
        for ts in [1_000_000, 1_000_001, 1_001_505, 1_002_222, m.max_timestamp]:
            store.reset_calls()
            assert rp.offset_for_timestamp(ts) == log.offset_for_timestamp(ts)
            assert store.count("get", LOG_SUFFIX) == 0, "a whole .log was downloaded"
            assert store.count("get_range", LOG_SUFFIX) == 1
            assert store.count("get") <= 2  # the found segment's .timeindex and .index, at most
        assert rp.offset_for_timestamp(m.max_timestamp + 1) is None


def test_racing_writers_one_wins_the_other_retries_and_a_stale_epoch_is_refused(backend):
    a = ManifestStore(backend(), TOPIC, 0, sleep=lambda s: None)
    b = ManifestStore(backend(), TOPIC, 0, sleep=lambda s: None)

    def add(base, end, n, epoch):
        s = RemoteSegment(f"{n:032x}", base, end, 5, 10, (), SegmentState.COPY_STARTED, epoch)
        return lambda m: manifest_transitions.finish_copy(manifest_transitions.start_copy(m, s), s.segment_id, epoch=epoch, now_ms=1)

    a.commit(1, add(0, 9, 1, 1))
    b.load()
    a.commit(1, add(10, 19, 2, 1))
    # b's etag is stale: its conditional PUT fails, it re-reads, and its change still applies
    m = b.commit(1, lambda cur: manifest_transitions.set_cleaner_checkpoint(cur, 7))
    assert b.conflicts == 1 and m.end_offset == 19 and m.cleaner_checkpoint == 7
    # a's retry of an addition that b's state makes invalid is refused, not duplicated
    with pytest.raises(ManifestInvariantError):
        a.commit(1, add(10, 19, 3, 1))
    b.commit(4, lambda cur: manifest_transitions.claim(cur, 4))
    with pytest.raises(FencedLeaderEpochError):
        a.commit(3, lambda cur: manifest_transitions.set_cleaner_checkpoint(cur, 9))
    final = ManifestStore(backend(), TOPIC, 0).load()
    assert (final.leader_epoch, final.cleaner_checkpoint, final.end_offset) == (4, 7, 19)
