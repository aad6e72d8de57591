"""The `lakelog` Spark data source: topics read straight from the remote tier.

    spark.read.format("lakelog").option("remote", "s3://bucket/prefix").option("topic", "orders").load()

Columns (as Spark's Kafka source, in snake case): topic STRING, partition INT, offset BIGINT,
timestamp TIMESTAMP, timestamp_type INT (0 CreateTime, 1 LogAppendTime), key BINARY, value BINARY,
headers ARRAY<STRUCT<key STRING, value BINARY>>, leader_epoch INT, producer_id BIGINT.

Options: `remote` (required unless `LAKELOG_REMOTE` is set), `topic` (required), `nodes` (a node
URL: also read what the remote tier does not hold yet, see below), `partitions`
(comma-separated), `startingOffset` / `endingOffset` (inclusive, applied to every partition),
`startingTimestamp` / `endingTimestamp` (inclusive, ms since the epoch), `chunkBytes` (ranged GET
size, default 8 MiB), `maxPartitionBytes` (segments read by one Spark task, default 128 MiB),
`arrowBatchRows` (rows per Arrow batch, default 65,536), `storeTimeoutMs` (the deadline of each
object-store call, planning's and the tasks', as `remote.job.store.timeout.ms`, whose default and
bounds it takes; sync-tables passes its run's value), `isolation` (`read_committed`, the default:
committed records only; `read_uncommitted`: every data record). All optional but the first two.

Transactions (logstore/read_committed.py's rules): control records are never rows. With
read_committed, planning gives each remote input partition the aborted transactions overlapping
its offsets, from the `.txnindex` objects of the segments from the read's start on (read only
when the manifest lists one), and the task leaves their batches out; the hot tail is read up to
the last stable offset with the node's read_committed answer (spark_log/hot_tail.py).

Planning reads each partition's manifest once (in the driver) and makes one Spark partition per
run of consecutive remote segments (up to `maxPartitionBytes`) that can hold a wanted row: the options prune partitions, segments (by offset range
and max timestamp) and, inside a segment, start the read at the offset index's floor entry. Every
batch is CRC-checked before its records are returned; a corrupt object fails the query with
`RemoteCorruptionError` (never wrong rows).

Why options and not filter pushdown: with `spark.sql.python.filterPushdown.enabled`, Spark 4.2
keeps the planned reader of a DataFrame and reuses it for later queries over the same DataFrame,
so filters pushed by one query silently prune the next one (seen: `df.where(...).count()` then
`df.count()` returned the filtered count). Options are part of the DataFrame, so they cannot leak.

Without `nodes`, only the COPY_FINISHED segments at or above the remote log start offset are
read: what the nodes hold and have not tiered yet is not visible. With `nodes`, the read is the
whole topic as a consumer from offset 0 sees it: planning lists the partitions from the nodes and
the remote segments, and adds one input partition per topic partition for the rest: from one past
the remote tier's last planned offset up to the high watermark that partition's task reads when it
starts, over the nodes' binary fetch path (spark_log/hot_tail.py). A topic without a remote tier is
read from the nodes alone. This is what `lakelog.<topic>` is in SQL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from lakelog.tiering.remote_scan import (
    ARROW_BATCH_ROWS,
    DEFAULT_CHUNK_BYTES,
    has_txn_index,
    iter_segment_arrow,
    job_store_timeout_ms,
    load_manifest,
    open_remote,
    overlapping,
    readable_segments,
    remote_aborted_transactions,
)
from lakelog.spark_log.hot_tail import NodeAccess, iter_hot_records, partition_ids
from lakelog.index.transaction_index import AbortedTxn
from lakelog.logstore.read_committed import ISOLATION_LEVELS, READ_COMMITTED
from lakelog.spark_log.jvm_source import ISOLATION_OPTION
from lakelog.tiering.manifest_model import PartitionManifest, RemoteSegment

REMOTE_ENV = "LAKELOG_REMOTE"
SCHEMA = ("topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP, timestamp_type INT, key BINARY, "
          "value BINARY, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, leader_epoch INT, producer_id BIGINT")
FIELDS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers", "leader_epoch",
          "producer_id")
_LONG_MAX = (1 << 63) - 1
#: Segments read by one Spark task, at most (Spark's spark.sql.files.maxPartitionBytes default).
DEFAULT_MAX_PARTITION_BYTES = 128 * 1024 * 1024
#: The option that carries `remote.job.store.timeout.ms` to planning and to every task.
STORE_TIMEOUT_OPTION = "storeTimeoutMs"


@dataclass
class Bounds:
    """Inclusive bounds on one column (None: unbounded); `values`: only these."""

    low: int | None = None
    high: int | None = None
    values: frozenset[int] | None = None

    def restrict(self, low: int | None = None, high: int | None = None, values=None) -> None:
        if low is not None:
            self.low = low if self.low is None else max(self.low, low)
        if high is not None:
            self.high = high if self.high is None else min(self.high, high)
        if values is not None:
            vs = frozenset(values)
            self.values = vs if self.values is None else self.values & vs

    def admits(self, v: int) -> bool:
        return (self.low is None or v >= self.low) and (self.high is None or v <= self.high) and \
            (self.values is None or v in self.values)

    @property
    def effective_low(self) -> int | None:
        lows = [x for x in (self.low, min(self.values) if self.values else None) if x is not None]
        return max(lows) if lows else None

    @property
    def effective_high(self) -> int | None:
        highs = [x for x in (self.high, max(self.values) if self.values else None) if x is not None]
        return min(highs) if highs else None


@dataclass(frozen=True)
class SegmentPartition(InputPartition):
    """One Spark partition: the wanted rows of one remote segment."""

    remote: str
    topic: str
    partition: int
    segment: RemoteSegment
    from_offset: int
    to_offset: int
    min_timestamp: int | None
    max_timestamp: int | None
    offsets: frozenset[int] | None
    chunk_bytes: int
    arrow_rows: int = ARROW_BATCH_ROWS
    store_timeout_ms: int | None = None  # None: remote.job.store.timeout.ms's default
    aborted: tuple[AbortedTxn, ...] = ()  # aborted transactions overlapping the read: left out


@dataclass(frozen=True)
class SegmentGroup(InputPartition):
    """Consecutive segments read by one Spark task: each task of a Python data source costs a
    Python worker round trip (about half a second on a busy machine), so small segments are read
    together up to `maxPartitionBytes`, as Spark packs small files."""

    parts: tuple[SegmentPartition, ...]


def group_segments(parts: list[SegmentPartition], max_bytes: int) -> list[SegmentGroup]:
    """`parts` in order, cut into groups of at most `max_bytes` of `.log` (at least one each)."""
    groups: list[SegmentGroup] = []
    current: list[SegmentPartition] = []
    size = 0
    for part in parts:
        if current and size + part.segment.size_in_bytes > max_bytes:
            groups.append(SegmentGroup(tuple(current)))
            current, size = [], 0
        current.append(part)
        size += part.segment.size_in_bytes
    if current:
        groups.append(SegmentGroup(tuple(current)))
    return groups


@dataclass(frozen=True)
class HotPartition(InputPartition):
    """One Spark partition: a topic partition's offsets from `from_offset` up to `to_offset`
    (inclusive, None: unbounded) below the high watermark its task reads, read from the nodes."""

    nodes: NodeAccess
    topic: str
    partition: int
    from_offset: int
    to_offset: int | None
    min_timestamp: int | None
    max_timestamp: int | None
    offsets: frozenset[int] | None
    read_committed: bool = True  # below the last stable offset, aborted transactions left out


class LakelogDataSource(DataSource):
    """`spark.read.format("lakelog")` (register with `spark.dataSource.register(LakelogDataSource)`)."""

    @classmethod
    def name(cls) -> str:
        return "lakelog"

    def schema(self) -> str:
        from lakelog.spark_log.decoded_read import wants_decoding

        if wants_decoding({k.lower(): v for k, v in self.options.items()}):  # the wrapper removes them
            raise ValueError("option valueFormat / keyFormat of the lakelog data source is applied by Lakelog's "
                             "DataFrameReader wrapper: call lakelog.spark_log.datasource.register(spark) first")
        return SCHEMA

    def reader(self, schema: StructType) -> "LakelogReader":
        return LakelogReader(dict(self.options), _fields(schema))

    def streamReader(self, schema: StructType) -> "LakelogStreamReader":
        return LakelogStreamReader(dict(self.options), _fields(schema))


def _fields(schema: StructType | None) -> tuple[str, ...]:
    """The columns to produce: a schema given with `.schema(...)` may name a subset of SCHEMA's,
    in any order; the columns left out are never decoded."""
    if schema is None:
        return FIELDS
    names = tuple(f.name for f in schema.fields)
    unknown = [n for n in names if n not in FIELDS]
    if unknown:
        raise ValueError(f"the lakelog data source has no columns {unknown}; it has {', '.join(FIELDS)}")
    return names


class LakelogReader(DataSourceReader):
    def __init__(self, options: dict[str, str], fields: tuple[str, ...] = FIELDS) -> None:
        self.fields = fields
        options = {k.lower(): v for k, v in options.items()}  # Spark's option keys are case-insensitive
        self.remote = options.get("remote") or os.environ.get(REMOTE_ENV)
        self.topic = options.get("topic")
        if not self.remote:
            raise ValueError("the lakelog data source needs option('remote', URL) (or LAKELOG_REMOTE)")
        if not self.topic:
            raise ValueError("the lakelog data source needs option('topic', NAME)")
        self.chunk_bytes = int(options.get("chunkbytes", DEFAULT_CHUNK_BYTES))
        if not 64 * 1024 <= self.chunk_bytes <= 256 * 1024 * 1024:
            raise ValueError("chunkBytes must lie between 64 KiB and 256 MiB")
        self.nodes = NodeAccess.from_options(options["nodes"], options) if options.get("nodes") else None
        self.max_partition_bytes = int(options.get("maxpartitionbytes", DEFAULT_MAX_PARTITION_BYTES))
        if not 1 <= self.max_partition_bytes <= 1 << 40:
            raise ValueError("maxPartitionBytes must lie between 1 and 1 TiB")
        self.arrow_rows = int(options.get("arrowbatchrows", ARROW_BATCH_ROWS))
        if not 1 <= self.arrow_rows <= 1 << 20:
            raise ValueError("arrowBatchRows must lie between 1 and 1048576")
        given = options.get(STORE_TIMEOUT_OPTION.lower())
        self.store_timeout_ms = None if given is None else job_store_timeout_ms(given)  # checked: bounds
        isolation = str(options.get(ISOLATION_OPTION, READ_COMMITTED)).lower()
        if isolation not in ISOLATION_LEVELS:
            raise ValueError(f"option isolation must be one of {', '.join(ISOLATION_LEVELS)}, not {isolation!r}")
        self.read_committed = isolation == READ_COMMITTED
        self.partitions_ = Bounds()
        self.offsets = Bounds()
        self.timestamps = Bounds()
        if options.get("partitions"):
            self.partitions_.restrict(values=[int(p) for p in options["partitions"].split(",") if p.strip()])
        if options.get("startingoffset") is not None:
            self.offsets.restrict(low=int(options["startingoffset"]))
        if options.get("endingoffset") is not None:
            self.offsets.restrict(high=int(options["endingoffset"]))
        if options.get("startingtimestamp") is not None:
            self.timestamps.restrict(low=int(options["startingtimestamp"]))
        if options.get("endingtimestamp") is not None:
            self.timestamps.restrict(high=int(options["endingtimestamp"]))

    def partitions(self):
        from lakelog.spark_log.native import prepare_executor

        prepare_executor()  # planning runs in a Python worker of the driver: the shipped packages
        live = set(partition_ids(self.nodes, self.topic)) if self.nodes is not None else None
        store = _open_store(self.remote, self.store_timeout_ms)
        try:
            from lakelog.tiering.remote_scan import remote_partitions

            found = remote_partitions(store, self.topic).get(self.topic, [])
            out: list[SegmentPartition] = []
            hot: list[HotPartition] = []
            lo = self.offsets.effective_low
            hi = self.offsets.effective_high
            for p in sorted(set(found) | (live or set())):
                if not self.partitions_.admits(p) or (live is not None and p not in live):
                    continue
                top = hi if hi is not None else _LONG_MAX
                next_remote = None
                if p in found:
                    m = load_manifest(store, self.topic, p)
                    aborted = self.aborted_from(store, p, m, max(m.log_start_offset, lo or 0))
                    for seg in readable_segments(m, from_offset=lo, to_offset=hi, min_timestamp=self.timestamps.low):
                        start = max(seg.base_offset, m.log_start_offset, lo if lo is not None else 0)
                        end = min(seg.end_offset, top)
                        if start > end:
                            continue
                        out.append(SegmentPartition(self.remote, self.topic, p, seg, start, end, self.timestamps.low,
                                                    self.timestamps.high, self.offsets.values, self.chunk_bytes,
                                                    self.arrow_rows, self.store_timeout_ms,
                                                    overlapping(aborted, start, end)))
                    if m.end_offset is not None:
                        next_remote = m.end_offset + 1
                if live is not None:
                    start = max(next_remote or 0, lo if lo is not None else 0)
                    if start <= top:
                        hot.append(HotPartition(self.nodes, self.topic, p, start, hi, self.timestamps.low,
                                                self.timestamps.high, self.offsets.values, self.read_committed))
            if not out and not hot:
                return [SegmentPartition(self.remote, self.topic, -1, None, 0, -1, None, None, None,  # type: ignore[arg-type]
                                         self.chunk_bytes)]
            return group_segments(out, self.max_partition_bytes) + hot
        finally:
            store.close()

    def aborted_from(self, store, partition: int, m: PartitionManifest, from_offset: int) -> list[AbortedTxn]:
        """The remote tier's aborted transactions a read of `partition` from `from_offset` may
        meet ([] with isolation read_uncommitted, or when no segment from there has a `.txnindex`)."""
        if not self.read_committed or not has_txn_index(m, from_offset):
            return []
        return remote_aborted_transactions(store, self.topic, partition, m, from_offset)

    def read(self, partition):
        if isinstance(partition, HotPartition):
            return _read_hot_rows(partition, self.fields)
        if isinstance(partition, SegmentGroup):
            return (b for part in partition.parts for b in _read_rows(part, self.fields))
        if partition.segment is None:
            return iter(())
        return _read_rows(partition, self.fields)


class LakelogStreamReader(DataSourceStreamReader):
    """`spark.readStream.format("lakelog")`: micro-batches of what the remote tier gained.

    Offsets are `{"<partition>": next offset}` (per-partition log offsets, as Spark's Kafka
    source keeps them in its checkpoint). A batch reads, per partition, [start, end) where end is
    one past the last COPY_FINISHED offset when the batch was planned; a partition that appears
    later starts at its remote log start offset, and a start that retention overtook moves up to
    the log start (records expired before they were read are skipped, as with
    failOnDataLoss=false). Options as the batch reader (`partitions`, `chunkBytes`).
    """

    def __init__(self, options: dict[str, str], fields: tuple[str, ...] = FIELDS) -> None:
        self.batch = LakelogReader(options, fields)

    def _ends(self) -> dict[str, tuple[int, int]]:
        """partition -> (remote log start offset, next offset after the remote end)."""
        from lakelog.tiering.remote_scan import remote_partitions

        store = _open_store(self.batch.remote, self.batch.store_timeout_ms)
        try:
            out = {}
            for p in remote_partitions(store, self.batch.topic).get(self.batch.topic, []):
                if self.batch.partitions_.admits(p):
                    m = load_manifest(store, self.batch.topic, p)
                    end = m.end_offset
                    out[str(p)] = (m.log_start_offset, m.log_start_offset if end is None else end + 1)
            return out
        finally:
            store.close()

    def initialOffset(self) -> dict:
        return {p: start for p, (start, _) in self._ends().items()}

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        return {p: end for p, (_, end) in self._ends().items()}

    def partitions(self, start: dict, end: dict):
        store = _open_store(self.batch.remote, self.batch.store_timeout_ms)
        try:
            out = []
            for p, stop in end.items():
                m = load_manifest(store, self.batch.topic, int(p))
                first = max(int(start.get(p, m.log_start_offset)), m.log_start_offset)
                if first >= stop:
                    continue
                aborted = self.batch.aborted_from(store, int(p), m, first)
                for seg in readable_segments(m, from_offset=first, to_offset=stop - 1):
                    lo, hi = max(first, seg.base_offset), min(stop - 1, seg.end_offset)
                    out.append(SegmentPartition(self.batch.remote, self.batch.topic, int(p), seg, lo, hi,
                                                None, None, None, self.batch.chunk_bytes, self.batch.arrow_rows,
                                                self.batch.store_timeout_ms, overlapping(aborted, lo, hi)))
            return out
        finally:
            store.close()

    def read(self, partition: SegmentPartition):
        return _read_rows(partition, self.batch.fields)

    def commit(self, end: dict) -> None:
        pass  # nothing to release: the remote tier is read, never consumed


def _arrow_schema(fields: tuple[str, ...]):
    import pyarrow as pa

    from lakelog.logstore.record_arrow import TYPES

    return pa.schema([(f, pa.string() if f == "topic" else pa.int32() if f == "partition" else TYPES[f])
                      for f in fields])


def _open_store(remote: str, timeout_ms: int | None):
    """The remote store, from a Python worker (planning on the driver, reading on executors) that
    may have only pyspark and pyarrow: the application's shipped packages are loaded first. Each
    call has the deadline `timeout_ms` (the reader's `storeTimeoutMs`; None: the default)."""
    from lakelog.spark_log.native import prepare_executor

    prepare_executor()
    return open_remote(remote, timeout_ms)


def _read_rows(p: SegmentPartition, fields: tuple[str, ...]):
    """The rows of one Spark partition as Arrow record batches, decoded natively (remote_scan.
    iter_segment_arrow): only the columns of the reader's schema are filled."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = _arrow_schema(fields)
    wanted = [f for f in fields if f not in ("topic", "partition")]
    if p.offsets is not None and "offset" not in wanted:
        wanted.append("offset")
    store = _open_store(p.remote, p.store_timeout_ms)
    try:
        for n, cols in iter_segment_arrow(store, p.topic, p.partition, p.segment, columns=wanted,
                                          from_offset=p.from_offset, to_offset=p.to_offset,
                                          min_timestamp=p.min_timestamp, max_timestamp=p.max_timestamp,
                                          chunk_bytes=p.chunk_bytes, max_rows=p.arrow_rows, aborted=p.aborted):
            if p.offsets is not None:
                keep = pc.is_in(cols["offset"], value_set=pa.array(sorted(p.offsets), pa.int64()))
                cols = {k: v.filter(keep) for k, v in cols.items()}
                n = len(cols["offset"])
            arrays = [pa.repeat(pa.scalar(p.topic, pa.string()), n) if f == "topic"
                      else pa.repeat(pa.scalar(p.partition, pa.int32()), n) if f == "partition" else cols[f]
                      for f in fields]
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)
    finally:
        store.close()


def _read_hot_rows(p: HotPartition, fields: tuple[str, ...]):
    """The rows the nodes serve for one topic partition (spark_log/hot_tail.py), as Arrow record
    batches of the reader's columns. The hot tail is short (what the nodes have not tiered yet), so
    its records are decoded by the reference decoder."""
    import pyarrow as pa

    from lakelog.spark_log.native import prepare_executor

    prepare_executor()  # httpx from the shipped packages

    schema = _arrow_schema(fields)
    records = iter_hot_records(p.nodes, p.topic, p.partition, p.from_offset, to_offset=p.to_offset,
                               min_timestamp=p.min_timestamp, max_timestamp=p.max_timestamp,
                               read_committed=p.read_committed)
    batch: list = []

    def flush():
        columns = {"topic": lambda: pa.repeat(pa.scalar(p.topic, pa.string()), len(batch)),
                   "partition": lambda: pa.repeat(pa.scalar(p.partition, pa.int32()), len(batch)),
                   "offset": lambda: [r.offset for r in batch],
                   "timestamp": lambda: pa.array([r.timestamp * 1000 for r in batch], pa.int64()).cast(schema.field("timestamp").type),
                   "timestamp_type": lambda: [r.timestamp_type for r in batch],
                   "key": lambda: [r.key for r in batch], "value": lambda: [r.value for r in batch],
                   "headers": lambda: [[{"key": k, "value": v} for k, v in r.headers] for r in batch],
                   "leader_epoch": lambda: [r.leader_epoch for r in batch],
                   "producer_id": lambda: [r.producer_id for r in batch]}
        arrays = []
        for f in fields:
            col = columns[f]()
            arrays.append(col if isinstance(col, pa.Array) else pa.array(col, schema.field(f).type))
        batch.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    for r in records:
        if p.offsets is not None and r.offset not in p.offsets:
            continue
        batch.append(r)
        if len(batch) >= ARROW_BATCH_ROWS:
            yield flush()
    if batch:
        yield flush()


class ReferenceDataSource(LakelogDataSource):
    """This source under the name `lakelog_python`, beside the JVM source (spark_log/jvm_source.py)."""

    @classmethod
    def name(cls) -> str:
        from lakelog.spark_log.jvm_source import PYTHON_SOURCE_NAME

        return PYTHON_SOURCE_NAME


def register(spark) -> None:
    """Make `spark.read.format("lakelog")` available in `spark` (idempotent): the JVM source when
    its jar is on the class path (nothing to register), else this one; this one is also
    `lakelog_python` either way. Also installs the decoding options (`valueFormat`, ...:
    spark_log/decoded_read.py), which work with either reader."""
    from lakelog.spark_log.decoded_read import install as install_decoding
    from lakelog.spark_log.jvm_source import jvm_source_loaded

    install_decoding()
    spark.dataSource.register(ReferenceDataSource)
    if not jvm_source_loaded(spark):
        spark.dataSource.register(LakelogDataSource)
