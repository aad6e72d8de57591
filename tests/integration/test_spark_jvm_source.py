"""The JVM `lakelog` data source (spark_log/jvm/) against the Python one (`lakelog_python`, the
reference): the same rows, column for column, over every codec, batches with offset gaps
(compacted), headers, null keys and values, LogAppendTime, transactional batches and their
control batches, several segments and partitions, on the filesystem store and on moto's S3 server
through S3A; column and filter pruning; and damaged bytes in every field of a batch, where both
fail with RemoteCorruptionError naming the object (never rows) or both return the same rows."""

from __future__ import annotations

import random

import pytest

from lakelog.infra.config import LogConfig
from lakelog.logstore.compression import Compression
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, TimestampType, build_batch, crc32c
from lakelog.spark_log.jvm_source import PYTHON_SOURCE_NAME, jvm_source_loaded
from lakelog.spark_log.session import remote_session
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.remote_scan import load_manifest
from tests.support.spark_jvm import copy_to_s3, plain

pytestmark = pytest.mark.spark
TOPIC = "jvm-orders"
PARTITIONS = 2
TS0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def s3(spark_s3):
    return spark_s3  # shared by the session: see tests/integration/conftest.py


@pytest.fixture(scope="module")
def spark(s3):
    session = remote_session("s3://lakelog-jvm/x", app_name="lakelog-jvm-source-test")
    assert jvm_source_loaded(session), "make jvm builds spark_log/jvm/lakelog-spark.jar"
    yield session
    session.stop()


def _records(rng: random.Random, first: int, i: int) -> tuple[list[Record], int]:
    """1-5 records from `first` with gaps between their offsets (as compaction leaves them);
    returns them and the batch's last offset (which may lie past the last record's)."""
    recs, offset = [], first
    for r in range(rng.randint(1, 5)):
        key = None if rng.random() < 0.2 else f"key-{rng.randrange(30)}".encode()
        value = None if rng.random() < 0.15 else (f"value-{i}-{r}-".encode() + bytes(rng.randrange(256) for _ in range(rng.randrange(40))))
        headers = tuple((name, None if rng.random() < 0.3 else bytes([rng.randrange(256)]) * rng.randrange(5))
                        for name in rng.sample(["trace", "clé-ü", "", "h" * 20], rng.randrange(4)))
        recs.append(Record(offset, TS0 + i * 1000 + r, key, value, headers))
        offset += rng.choice((1, 1, 2, 5))
    return recs, offset - 1 + rng.choice((0, 0, 3))


def build_topic(root) -> FileSystemStore:
    """PARTITIONS partitions of batches in every codec, tiered into a filesystem store at root/remote."""
    store = FileSystemStore(root / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000}))
    codecs = list(Compression)
    for p in range(PARTITIONS):
        rng = random.Random(100 + p)
        log = PartitionLog(root / "log" / f"{TOPIC}-{p}",
                           LogConfig({"segment.bytes": 5000, "index.interval.bytes": 256, "retention.ms": -1}))
        offset = 0
        for i in range(90):
            recs, last = _records(rng, offset, i)
            kw = dict(compression=codecs[i % len(codecs)], partition_leader_epoch=1 + i // 30,
                      last_offset_delta=last - offset)
            if i % 7 == 3:
                kw.update(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=TS0 + 500_000 + i)
            if i % 11 == 5:  # an aborted transaction: the marker is skipped, the records kept (read_uncommitted)
                kw.update(producer_id=4000 + i, producer_epoch=0, base_sequence=0, is_transactional=True)
            log.append_as_follower(build_batch(recs, base_offset=offset, **kw))
            offset = last + 1
            if i % 11 == 5:
                marker = Record(offset, TS0 + i * 1000 + 999, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")
                log.append_as_follower(build_batch([marker], base_offset=offset, producer_id=4000 + i, producer_epoch=0,
                                                   is_transactional=True, is_control=True,
                                                   partition_leader_epoch=1 + i // 30))
                offset += 1
        log.roll()
        tier.partition(TOPIC, p).copy_segments(log, 3, log.log_end_offset)
        log.close()
    return store


def read(spark, fmt: str, remote: str, *, schema: str | None = None, where: str | None = None, **options):
    """The rows of the topic through `fmt`, read_uncommitted unless `isolation` is given (the
    topic's aborted transactions are rows; read_committed leaves them out)."""
    reader = spark.read.format(fmt)
    if schema:
        reader = reader.schema(schema)
    reader = reader.option("remote", remote).option("topic", TOPIC).option("isolation", "read_uncommitted")
    for k, v in options.items():
        reader = reader.option(k, v)
    df = reader.load()
    if where:
        df = df.where(where)
    order = [c for c in ("partition", "offset") if c in df.columns]
    return [plain(r.asDict(recursive=True)) for r in (df.orderBy(*order) if order else df).collect()]


def same(spark, remote: str, **kw) -> list[dict]:
    jvm = read(spark, "lakelog", remote, **kw)
    ref = read(spark, PYTHON_SOURCE_NAME, remote, **kw)
    assert jvm == ref
    return jvm


@pytest.fixture(scope="module")
def topic(tmp_path_factory, s3):
    root = tmp_path_factory.mktemp("jvm-source")
    store = build_topic(root)
    return store, (root / "remote").as_uri(), copy_to_s3(s3, store)[1]


def test_jvm_rows_equal_the_reference_on_both_stores(spark, topic):
    store, fs_remote, s3_remote = topic
    segments = [load_manifest(store, TOPIC, p).copy_finished for p in range(PARTITIONS)]
    assert all(len(s) >= 4 for s in segments)
    for remote in (fs_remote, s3_remote):
        rows = same(spark, remote)
        assert {r["partition"] for r in rows} == set(range(PARTITIONS)) and {r["topic"] for r in rows} == {TOPIC}
        offsets = [r["offset"] for r in rows if r["partition"] == 0]
        assert len(rows) > 400 and max(offsets) - min(offsets) + 1 > len(offsets)  # offset gaps
        assert {r["timestamp_type"] for r in rows} == {0, 1} and {r["leader_epoch"] for r in rows} == {1, 2, 3}
        assert any(r["key"] is None for r in rows) and any(r["value"] is None for r in rows)
        assert any(h["value"] is None for r in rows for h in r["headers"])
        assert any(h["key"] == "clé-ü" for r in rows for h in r["headers"])
        assert any(r["producer_id"] >= 4000 for r in rows)
        # read_committed: the aborted transactions (from the `.txnindex` objects) are left out by both
        committed = same(spark, remote, isolation="read_committed")
        assert committed == [r for r in rows if r["producer_id"] < 4000] and len(committed) < len(rows)
        assert same(spark, remote, isolation="read_committed", partitions="1", startingOffset=40, endingOffset=160)
        assert spark.read.format("lakelog").option("remote", remote).option("topic", TOPIC) \
            .option("isolation", "read_uncommitted").load().count() == len(rows)
    # Options prune exactly as the reference's; a narrower schema; one column.
    same(spark, fs_remote, partitions="1", startingOffset=40, endingOffset=160)
    same(spark, s3_remote, startingTimestamp=TS0 + 20_000, endingTimestamp=TS0 + 60_000)
    narrow = same(spark, fs_remote, schema="value BINARY, offset BIGINT, partition INT")
    assert set(narrow[0]) == {"value", "offset", "partition"}
    offsets_only = read(spark, "lakelog", s3_remote, schema="offset BIGINT")
    assert sorted(r["offset"] for r in offsets_only) == sorted(r["offset"] for r in rows)


def test_pushed_filters_prune_and_never_change_a_result(spark, topic):
    _, fs_remote, _ = topic
    df = spark.read.format("lakelog").option("remote", fs_remote).option("topic", TOPIC) \
        .option("isolation", "read_uncommitted").load()
    where = "partition = 1 AND offset >= 50 AND offset < 120 AND timestamp >= TIMESTAMP_MILLIS(%d)" % (TS0 + 30_000)
    plan = df.where(where)._jdf.queryExecution().executedPlan().toString()
    assert "partitions [1], offsets 50..119" in plan and str(TS0 + 30_000) in plan, plan
    expected = read(spark, PYTHON_SOURCE_NAME, fs_remote, where=where)
    assert read(spark, "lakelog", fs_remote, where=where) == expected and expected
    # A DataFrame queried with a filter and then without: the second query is not narrowed.
    total = df.count()
    assert df.where("offset < 10").count() < total and df.count() == total
    assert df.where("partition IN (0) AND offset IN (3, 7, 300)").count() == \
        sum(1 for r in read(spark, PYTHON_SOURCE_NAME, fs_remote, partitions="0") if r["offset"] in (3, 7, 300))


def _outcome(spark, fmt, remote, key):
    try:
        return "rows", read(spark, fmt, remote, partitions="0")
    except Exception as e:  # noqa: BLE001 - Spark wraps the reader's error
        text = str(e)
        assert "RemoteCorruptionError" in text and key in text, text[:2000]
        return "error", None


def test_damaged_bytes_fail_both_paths_alike(spark, topic, tmp_path):
    """A byte flipped in each field of a batch header and in its records (CRC caught), a record
    damaged behind a valid CRC, a torn object: the JVM reader fails exactly when the reference
    does, naming the object, and otherwise returns the reference's rows."""
    store, _, _ = topic
    # A private copy: this test damages objects.
    copy = FileSystemStore(tmp_path / "remote")
    for info in store.list(""):
        copy.put(info.key, store.get(info.key)[0])
    remote = (tmp_path / "remote").as_uri()
    seg = load_manifest(copy, TOPIC, 0).copy_finished[1]
    key = f"{TOPIC}-0/{seg.base_offset:020d}-{seg.segment_id}.log"
    original = copy.get(key)[0]
    length = int.from_bytes(original[8:12], "big") + 12
    second = original[length:]  # the segment's second batch, damaged below
    assert len(second) > 61

    def damaged(data: bytes) -> None:
        copy.put(key, original[:length] + data)

    cases = {}
    # one byte flipped in each header field (base offset, length, epoch, magic, CRC, attributes,
    # last offset delta, timestamps, producer id/epoch, sequence, count) and in the records
    for at in (7, 11, 15, 16, 18, 22, 26, 42, 60, 64):
        flipped = bytearray(second)
        flipped[at] ^= 0x04
        cases[f"flip@{at}"] = bytes(flipped)
    # behind a valid CRC: a record's length and the record count changed, the CRC recomputed
    n2 = int.from_bytes(second[8:12], "big") + 12
    for name, at in (("crc-valid record length", 61), ("crc-valid count", 60)):
        b = bytearray(second[:n2])
        b[at] ^= 0x02
        b[17:21] = crc32c(bytes(b[21:])).to_bytes(4, "big")
        cases[name] = bytes(b) + second[n2:]
    cases["torn tail"] = second[: len(second) - 7]
    outcomes = {}
    try:
        for name, data in cases.items():
            damaged(data)
            jvm = _outcome(spark, "lakelog", remote, key)
            ref = _outcome(spark, PYTHON_SOURCE_NAME, remote, key)
            assert jvm == ref, name
            outcomes[name] = jvm[0]
    finally:
        copy.put(key, original)
    assert outcomes["flip@16"] == outcomes["flip@18"] == outcomes["flip@64"] == "error"  # magic, CRC, records
    assert outcomes["flip@15"] == "rows"  # the leader epoch lies outside the CRC, as in Kafka
    assert outcomes["crc-valid record length"] == outcomes["crc-valid count"] == outcomes["torn tail"] == "error"


def test_read_ahead_in_small_chunks_returns_the_same_rows_and_errors(spark, topic, tmp_path, s3):
    """The JVM reader reads a task's objects ahead on background threads (`prefetchChunks` chunks
    of `chunkBytes` per thread, `prefetchSegments` segments at once): segments many chunks long,
    a scan that stops inside a segment, and a missing object in the middle of a task's split give
    what reading inline (`prefetchChunks=0`) and the reference give."""
    store = FileSystemStore(tmp_path / "remote")
    tier = RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000}))
    rng = random.Random(7)
    log = PartitionLog(tmp_path / "log" / f"{TOPIC}-0",
                       LogConfig({"segment.bytes": 300_000, "index.interval.bytes": 4096, "retention.ms": -1}))
    offset = 0
    for i in range(120):  # ~1 MB of 1-3 KiB values: 4 segments of 4-5 chunks of 64 KiB each
        recs = [Record(offset + r, TS0 + offset + r, f"k{offset + r}".encode(), rng.randbytes(rng.randrange(1024, 3072)))
                for r in range(4)]
        log.append_as_follower(build_batch(recs, base_offset=offset,
                                           compression=(Compression.NONE, Compression.ZSTD)[i % 2]))
        offset += 4
    log.roll()
    tier.partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
    log.close()
    segments = load_manifest(store, TOPIC, 0).copy_finished
    assert len(segments) >= 3 and max(s.size_in_bytes for s in segments) > 4 * 65536
    remote = (tmp_path / "remote").as_uri()
    _, s3_url = copy_to_s3(s3, store)
    one_task = {"chunkBytes": 65536, "maxPartitionBytes": 1 << 30}
    ahead = {**one_task, "prefetchChunks": 2}
    # three segments read at once, each lane holding at most 2 chunks: a lane waits for the decoder
    lanes = {**one_task, "prefetchSegments": 3, "prefetchChunks": 1}
    for where in (None, "offset BETWEEN 100 AND 300"):  # the second stops inside the first segment
        for url in (remote, s3_url):
            ref = read(spark, PYTHON_SOURCE_NAME, url, where=where)
            assert len(ref) == (480 if where is None else 201)
            assert read(spark, "lakelog", url, where=where, **ahead) == ref
            assert read(spark, "lakelog", url, where=where, **lanes) == ref
            assert read(spark, "lakelog", url, where=where, prefetchSegments=2, maxPartitionBytes=1 << 30) == ref
            assert read(spark, "lakelog", url, where=where, **one_task) == ref  # inline, the default
            assert read(spark, "lakelog", url, where=where, prefetchChunks=1, chunkBytes=65536) == ref
    # A missing object in the middle of the task's split: the error names it, read ahead or not.
    missing = f"{TOPIC}-0/{segments[1].base_offset:020d}-{segments[1].segment_id}.log"
    (tmp_path / "remote" / missing).unlink()
    for ahead_options in ({"prefetchChunks": 2}, {"prefetchChunks": 0}, {"prefetchSegments": 2}):
        with pytest.raises(Exception) as e:
            read(spark, "lakelog", remote, **ahead_options, **one_task)
        assert "RemoteCorruptionError" in str(e.value) and missing in str(e.value) and "missing" in str(e.value)
