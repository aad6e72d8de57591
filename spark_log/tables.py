"""Delta tables of topics (`sync-tables`) and the SQL catalog over them (`lakelog sql`).

`<remote>/tables/<topic>`: every record of the topic's remote tier, partitioned by `partition`
and `date` (the UTC day of the record's timestamp), with the data source's columns. With the topic
config `value.schema` (a Spark DDL string such as `id BIGINT, amount DOUBLE`), JSON values are
also parsed into those typed columns. Compacted topics also get `<remote>/tables/<topic>_latest`:
the latest record per (partition, key), tombstoned keys left out: written whole by the first sync,
then kept by one Delta MERGE per sync of the new rows' latest record per key (a newer value
updates or inserts, a newer tombstone deletes), so a sync reads only what it appends.

With the topic config (or `--config`) `schema.registry.url` naming a Lakelog node (any node serves
the Schema Registry), keys and values in Confluent's wire format are decoded by the registry
(`schema_columns.decode_columns`: Avro, JSON Schema and Protobuf, read as the latest version of
`<topic>-value` / `<topic>-key`): a record schema's fields become typed columns (records as
structs, arrays, maps, unions, enums as strings, decimals, dates and timestamps as Spark types),
a key `key_decoded`; a new compatible version adds its columns to the table (Delta schema merge)
and widens a column's type in place (int -> long, float -> double: Delta type widening, turned on
for the table by the first sync). A record that is not in the wire format, names a schema that is
unknown or of another type, or does not decode, goes to the dead-letter table
`<remote>/tables/<topic>_errors` (partition, offset, timestamp, key, value, schema_id, reason) and
the sync goes on.

Exactly once, with the table as the truth (spark_log/sync_state.py): each sync step covers
offsets [start, next) per partition, `next` being one past the remote tier's end when the step is
planned, and appends them in ONE Delta commit that also records that range (the commit's
userMetadata) under the transaction id `txnAppId` = `lakelog-sync-<topic>`, `txnVersion` = the
step's sequence number (the table's newest + 1). The next step starts where the table's newest
range ends, never at the sync's own memory; Delta skips a retried or stale step (its version is
not above the table's) and fails one of two steps committed at once (the loser plans again). The
step's follow-ups, dead letters and `<topic>_latest`, carry the same sequence number as their own
transaction ids; a sync that finds them behind the table's newest step (a run died between the
append and them) does them first, over that step's recorded range. Running sync twice adds nothing.

Records reach a table once they are in the remote tier (COPY_FINISHED), so a table trails the
log by what the nodes have not tiered yet.

What one sync costs: each table's existence is asked once (`_TableStates`); when no partition's
manifest reaches its start offset, no Spark job runs. Otherwise the new rows are read once, cached
by the append (for `<topic>_latest`; uncompressed: `SYNC_CACHE_CONF`), and counted from the
append's own Delta commit (`delta_commits.appended_rows`: its `numOutputRows`; 0 when Delta skipped
the append as already made). A step whose range holds no row (its last offsets are control records
or compacted away) commits an empty version that records the range. The latest record per key is a hash aggregate of `max(offset)` per
(partition, key) and a semi-join of the rows at those offsets (`_latest_per_key`): no sort of whole
rows. The writes make no Delta checksum files (`delta_commits.SYNC_WRITE_CONF`).
"""

from __future__ import annotations

import re
import time

from lakelog.spark_log.delta_commits import SYNC_WRITE_CONF, appended_rows, session_conf
from lakelog.spark_log.sync_pause import SYNC_PAUSE
from lakelog.spark_log.sync_state import SyncRange, app_id, read_sync_state, txn_version
from lakelog.tiering.remote_scan import TABLES_DIR, open_remote, tables_path

LATEST_SUFFIX = "_latest"
ERRORS_SUFFIX = "_errors"
REGISTRY_URL_KEY = "schema.registry.url"
TYPE_WIDENING = "delta.enableTypeWidening"
TYPE_WIDENING_DEFAULT = "spark.databricks.delta.properties.defaults.enableTypeWidening"
SQL_DATABASE = "lakelog"
#: Steps one sync plans before it gives up on concurrent syncs committing first.
MAX_STEP_ATTEMPTS = 5
#: Session settings of the sync on top of `SYNC_WRITE_CONF`: the new rows' cache (kept for
#: `<topic>_latest`) is not compressed. Its columns are mostly the records' keys and values, which
#: Spark's cache schemes leave as they are anyway (binary is passed through), and choosing and
#: running a scheme for the other columns costs about a second of CPU per million rows (measured:
#: JVM CPU of the append plus `<topic>_latest`, 7.9-8.8 s against 8.7-9.7 s compressed). The cache
#: is dropped at the end of the sync; spill to disk is Spark's `MEMORY_AND_DISK`, as before.
SYNC_CACHE_CONF = {"spark.sql.inMemoryColumnarStorage.compressed": "false"}


class _TableStates:
    """Whether each Delta table exists, asked once per sync (`DeltaTable.isDeltaTable` lists or
    replays the table's log every time) and updated by the sync's own writes."""

    def __init__(self, spark) -> None:
        self.spark = spark
        self.known: dict[str, bool] = {}

    def exists(self, path: str) -> bool:
        if path not in self.known:
            from delta.tables import DeltaTable

            self.known[path] = bool(DeltaTable.isDeltaTable(self.spark, path))
        return self.known[path]

    def written(self, path: str) -> None:
        self.known[path] = True


def _remote_ends(store, topic: str, partitions: list[int]) -> dict[int, int | None]:
    """The last offset of each partition's remote tier (COPY_FINISHED segments, what the data
    source reads), None for an empty one."""
    from lakelog.tiering.remote_scan import load_manifest

    return {p: load_manifest(store, topic, p).end_offset for p in partitions}


def _highest_synced(spark, remote: str, topic: str, tables: _TableStates) -> dict[int, int]:
    """The highest offset per partition in the table and its dead letters: where a table without
    a recorded sync range (made before sync ranges, `sync_state.py`) continues."""
    from pyspark.sql import functions as F

    synced: dict[int, int] = {}
    for done in (tables_path(remote, topic), tables_path(remote, topic + ERRORS_SUFFIX)):
        if tables.exists(done):
            for r in spark.read.format("delta").load(done).groupBy("partition").agg(F.max("offset").alias("o")).collect():
                synced[int(r["partition"])] = max(synced.get(int(r["partition"]), -1), int(r["o"]))
    return synced


def _concurrent_commit(e: Exception) -> bool:
    """Whether a Delta write failed because another writer committed first (plan again)."""
    text = f"{type(e).__name__}: {e}"
    return any(name in text for name in ("ConcurrentTransactionException", "ConcurrentAppendException",
                                         "MetadataChangedException", "ProtocolChangedException",
                                         "DELTA_CONCURRENT", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED"))


def sync_topic(spark, remote: str, topic: str, config: dict[str, str], partitions: list[int], *,
               owner: str = "sync", store_timeout_ms: int | None = None) -> dict:
    """Append the topic's new remote records to its Delta table; returns a summary row.
    `store_timeout_ms`: the run's deadline on each object-store call, the driver's and the data
    source's tasks' (its option `storeTimeoutMs`); None: the declared default."""
    with session_conf(spark, {**SYNC_WRITE_CONF, **SYNC_CACHE_CONF}):
        return _sync_topic(spark, remote, topic, config, partitions, _TableStates(spark), store_timeout_ms)


def _sync_topic(spark, remote: str, topic: str, config: dict[str, str], partitions: list[int],
                tables: _TableStates, store_timeout_ms: int | None) -> dict:
    """Plan one step from the table's sync state, finish the newest step's follow-ups first when
    they are behind, append; a step that lost a race to a concurrent sync is planned again."""
    started = time.monotonic()
    path = tables_path(remote, topic)
    compacted = "compact" in {p.strip() for p in config.get("cleanup.policy", "delete").split(",")}
    added = errors_added = 0
    latest_path = None
    store = open_remote(remote, store_timeout_ms)
    try:
        for attempt in range(1, MAX_STEP_ATTEMPTS + 1):
            state = read_sync_state(store, topic, app_id(topic))
            try:
                if state.last is not None:
                    if _follow_ups_behind(store, topic, state.last, compacted=compacted, tables=tables):
                        _, dead, lp = _run_step(spark, store, remote, topic, config, state.last, tables,
                                                compacted=compacted, replay=True, store_timeout_ms=store_timeout_ms)
                        errors_added += dead
                        latest_path = lp or latest_path
                    starts = {p: state.last.nexts.get(p, 0) for p in partitions}
                else:
                    synced = _highest_synced(spark, remote, topic, tables)
                    starts = {p: synced.get(p, -1) + 1 for p in partitions}
                ends = _remote_ends(store, topic, partitions) if starts else {}
                nexts = {p: max(s, ends[p] + 1) if ends[p] is not None else s for p, s in starts.items()}
                if nexts == starts:
                    break  # nothing new: no Spark job
                rng = SyncRange(state.next_seq, starts, nexts)
                n, dead, lp = _run_step(spark, store, remote, topic, config, rng, tables, compacted=compacted,
                                        replay=False, store_timeout_ms=store_timeout_ms)
            except Exception as e:  # noqa: BLE001 - only a lost race is retried
                if not _concurrent_commit(e) or attempt == MAX_STEP_ATTEMPTS:
                    raise
                tables.known.clear()
                continue
            if n is None:
                continue  # a concurrent sync committed this seq first: plan from the table again
            added += n
            errors_added += dead
            latest_path = lp or latest_path
            break
        if compacted and latest_path is None and tables.exists(path) and \
                not tables.exists(tables_path(remote, topic + LATEST_SUFFIX)):
            latest_path = write_latest_table(spark, remote, topic, exists=False)
    finally:
        store.close()
    return {"topic": topic, "table": path, "rows_added": added, "latest_table": latest_path,
            "errors_added": errors_added, "seconds": time.monotonic() - started}


def _follow_ups_behind(store, topic: str, rng: SyncRange, *, compacted: bool, tables: _TableStates) -> bool:
    """Whether the step `rng` (the table's newest) left its dead letters or `<topic>_latest` undone:
    the run that appended it died before them (`sync_state.py`)."""
    if rng.dead:
        done = txn_version(store, topic + ERRORS_SUFFIX, app_id(topic, ERRORS_SUFFIX))
        if done is None or done < rng.seq:
            return True
    if compacted:
        done = txn_version(store, topic + LATEST_SUFFIX, app_id(topic, LATEST_SUFFIX))
        if done is None or done < rng.seq:
            return True
    return False


def _run_step(spark, store, remote: str, topic: str, config: dict[str, str], rng: SyncRange,
              tables: _TableStates, *, compacted: bool, replay: bool,
              store_timeout_ms: int | None = None) -> tuple[int | None, int, str | None]:
    """One sync step over `rng`: its rows appended in one Delta commit that records `rng` (not with
    `replay`: the table holds it already), then its follow-ups (dead letters, `<topic>_latest`),
    each under txn version `rng.seq`. Returns (rows added, dead letters added, the latest table's
    path when written); rows added is None when a concurrent sync committed `rng.seq` with another
    range (this step's rows were skipped by Delta; nothing else was written). The rows are cached
    for the follow-ups; their count is the append commit's `numOutputRows`
    (`delta_commits.appended_rows`), not a pass of its own."""
    path = tables_path(remote, topic)
    errors_path = tables_path(remote, topic + ERRORS_SUFFIX)
    table_existed = tables.exists(path)
    new, dead, registry = _step_rows(spark, remote, topic, config, rng, store_timeout_ms)
    new = new.persist()
    if dead is not None:
        dead = dead.persist()
    errors_added = 0
    latest_path = None
    try:
        added = 0
        if not replay:
            rng = SyncRange(rng.seq, rng.starts, rng.nexts, dead.count() if dead is not None else 0)
            _append_typed(spark, new, path, topic, rng, widen=bool(registry), tables=tables)
            SYNC_PAUSE.after_append(topic, rng.seq)  # a test's kill point (sync_pause.py); nothing otherwise
            added = appended_rows(store, topic, app_id(topic), rng.seq)
            tables.written(path)
            if read_sync_state(store, topic, app_id(topic)).last != rng:
                return None, 0, None
        if dead is not None and rng.dead:
            errors_added = _append_dead(store, dead, errors_path, topic, rng)
        if compacted:
            latest_path = _follow_latest(spark, store, remote, topic, new, rng, tables,
                                         fresh=not table_existed and rng.seq == 0)
    finally:
        new.unpersist()
        if dead is not None:
            dead.unpersist()
    return added, errors_added, latest_path


def _step_rows(spark, remote: str, topic: str, config: dict[str, str], rng: SyncRange,
               store_timeout_ms: int | None = None):
    """(rows, dead letters or None, registry URL) of the records [start, next) of each partition;
    the data source's store calls have the deadline `store_timeout_ms` (None: the default)."""
    from pyspark.sql import functions as F

    # "lakelog": the JVM reader when its jar is on the session's class path, else the Python reader
    # (both read_committed by default).
    from lakelog.spark_log.datasource import STORE_TIMEOUT_OPTION, register as register_source

    register_source(spark)
    reader = (spark.read.format("lakelog").option("remote", remote).option("topic", topic)
              .option("startingOffset", min(rng.starts.values())))
    if store_timeout_ms is not None:
        reader = reader.option(STORE_TIMEOUT_OPTION, store_timeout_ms)
    df = reader.load()
    condition = F.lit(False)
    for p, start in rng.starts.items():
        if rng.nexts[p] > start:
            condition = condition | ((F.col("partition") == p) & (F.col("offset") >= start)
                                     & (F.col("offset") < rng.nexts[p]))
    new = df.where(condition).withColumn(
        "date", F.date_from_unix_date(F.floor(F.unix_millis(F.col("timestamp")) / 86_400_000).cast("int")))
    dead = None
    registry = (config.get(REGISTRY_URL_KEY) or "").strip()
    if registry:
        from lakelog.spark_log.schema_columns import decode_columns

        new, dead = decode_columns(new, registry, topic)
    schema = (config.get("value.schema") or "").strip()
    if schema and not registry:
        parsed = F.from_json(F.col("value").cast("string"), schema)
        names = [f.name for f in spark.createDataFrame([], schema).schema.fields]
        clash = set(names) & set(new.columns)
        if clash:
            raise ValueError(f"value.schema of {topic} names columns the table already has: {sorted(clash)}")
        new = new.withColumn("_parsed", parsed).select(*new.columns, *[F.col("_parsed." + n).alias(n) for n in names])
    return new, dead, registry


def _append_dead(store, dead, errors_path: str, topic: str, rng: SyncRange) -> int:
    """Append the step's dead letters to `<topic>_errors` under txn version `rng.seq`; the rows it
    added (0 when they were already there)."""
    app = app_id(topic, ERRORS_SUFFIX)
    (dead.write.format("delta").mode("append").partitionBy("partition", "date")
     .option("txnAppId", app).option("txnVersion", rng.seq).save(errors_path))
    return appended_rows(store, topic + ERRORS_SUFFIX, app, rng.seq)


def _follow_latest(spark, store, remote: str, topic: str, new, rng: SyncRange, tables: _TableStates, *,
                   fresh: bool) -> str | None:
    """Bring `<topic>_latest` up to step `rng` (txn version `rng.seq`): a MERGE of the step's rows
    when the table is exactly one step behind, else written whole (from the step's own rows when
    the step made the topic's table: `fresh`). None when it was there already."""
    latest = tables_path(remote, topic + LATEST_SUFFIX)
    done = txn_version(store, topic + LATEST_SUFFIX, app_id(topic, LATEST_SUFFIX))
    if done is not None and done >= rng.seq:
        return None
    txn = {"spark.databricks.delta.write.txnAppId": app_id(topic, LATEST_SUFFIX),
           "spark.databricks.delta.write.txnVersion": str(rng.seq)}
    exists = tables.exists(latest)
    with session_conf(spark, txn):
        if exists and (done is None or done == rng.seq - 1):
            path = merge_latest_table(spark, remote, topic, new)
        else:
            path = write_latest_table(spark, remote, topic, source=new if fresh else None, exists=exists)
    tables.written(path)
    return path


def _append_typed(spark, new, path: str, topic: str, rng: SyncRange, *, widen: bool, tables: _TableStates) -> None:
    """Append with schema merge, in one commit that carries the step's txn (`app_id(topic)`,
    `rng.seq`) and its range (userMetadata, `sync_state.py`). With `widen` (registry-typed tables), a compatible schema change widens a
    column in place (int -> long, float -> double) by Delta type widening: a new table is created with
    `delta.enableTypeWidening` (the session default for new tables, set around its creation), and a
    table made before it (whose merge then fails on the type change) gets it once, then the append is
    retried. The property adds Delta's `typeWidening` table feature (readers need Delta 3.2+)."""
    from pyspark.errors import AnalysisException

    def append() -> None:
        (new.write.format("delta").mode("append").partitionBy("partition", "date")
         .option("txnAppId", app_id(topic)).option("txnVersion", rng.seq)
         .option("userMetadata", rng.encode()).option("mergeSchema", "true").save(path))

    if not widen:
        return append()
    if not tables.exists(path):
        saved = spark.conf.get(TYPE_WIDENING_DEFAULT, None)
        spark.conf.set(TYPE_WIDENING_DEFAULT, "true")
        try:
            return append()
        finally:
            if saved is None:
                spark.conf.unset(TYPE_WIDENING_DEFAULT)
            else:
                spark.conf.set(TYPE_WIDENING_DEFAULT, saved)
    try:
        append()
    except AnalysisException as e:
        if "merge" not in str(e).lower():
            raise
        location = path.replace("`", "``")
        spark.sql(f"ALTER TABLE delta.`{location}` SET TBLPROPERTIES ('{TYPE_WIDENING}' = 'true')")
        append()


def _latest_per_key(df, *, live_only: bool = False):
    """The newest record of each (partition, key) of `df`, keyless records left out; with
    `live_only`, also the keys whose newest record is a tombstone (null value).

    Two steps, neither of which sorts or shuffles whole rows: the newest offset of each key is a
    hash aggregate of `max(offset)` over (partition, key, offset) alone (a `max_by` or `max` of the
    row as a struct keeps a non-fixed-width buffer, which Spark runs as a sort aggregate over every
    whole row); then the rows at those (partition, offset) pairs are kept by a left semi-join. The
    pairs are one per key, so Spark broadcasts them when they fit `spark.sql.autoBroadcastJoinThreshold`
    (decided by the plan's size estimate, or by adaptive execution from the shuffle's real size), and
    joins by shuffling otherwise. An offset appears once per partition in a topic's rows (a sync appends
    each offset once: its transaction ids), so the join keeps exactly one row per key."""
    from pyspark.sql import functions as F

    def col(name: str):
        return F.col("`" + name.replace("`", "``") + "`")

    taken = {c.lower() for c in df.columns}
    p, o = "_newest_partition", "_newest_offset"
    while p.lower() in taken or o.lower() in taken:  # names of the join's right side: not the rows'
        p, o = "_" + p, "_" + o
    newest = (df.where(col("key").isNotNull()).groupBy(col("partition").alias(p), col("key"))
              .agg(F.max(col("offset")).alias(o)).select(p, o))
    rows = df.where(col("value").isNotNull()) if live_only else df
    on = (col("partition") == F.col(p)) & (col("offset") == F.col(o))
    return rows.join(newest, on, "left_semi").select(*[col(c) for c in df.columns])


def merge_latest_table(spark, remote: str, topic: str, new) -> str:
    """Fold the rows just appended into `<topic>_latest` with one Delta MERGE of their latest record
    per (partition, key): a newer value replaces or inserts, a newer tombstone deletes; a row not
    newer than the table's (a retried sync) changes nothing. Reads only the new rows."""
    from delta.tables import DeltaTable

    path = tables_path(remote, topic + LATEST_SUFFIX)
    source = _latest_per_key(new)
    (DeltaTable.forPath(spark, path).alias("t")
     .merge(source.alias("s"), "t.partition = s.partition AND t.key = s.key")
     .whenMatchedDelete(condition="s.value IS NULL AND s.offset > t.offset")
     .whenMatchedUpdateAll(condition="s.offset > t.offset")
     .whenNotMatchedInsertAll(condition="s.value IS NOT NULL")
     .execute())
    return path


def write_latest_table(spark, remote: str, topic: str, source=None, *, exists: bool = True) -> str:
    """Rewrite `<topic>_latest`: the newest record per (partition, key), tombstoned keys left out;
    taken from `source` when given (the rows of a table that did not exist before this sync: all of
    it), else from the whole table. Without the table (`exists` false) it is created, sparing
    Delta's search for files to remove (as rebuild-index's `_remote_index`); if another run created
    it meanwhile, it is overwritten."""
    from pyspark.errors import AnalysisException

    if source is None:
        source = spark.read.format("delta").load(tables_path(remote, topic))
    latest = _latest_per_key(source, live_only=True)
    path = tables_path(remote, topic + LATEST_SUFFIX)

    def save(mode: str) -> None:
        latest.write.format("delta").mode(mode).option("overwriteSchema", "true").save(path)

    if exists:
        save("overwrite")
    else:
        try:
            save("errorifexists")
        except AnalysisException:
            save("overwrite")
    return path


def table_names(remote: str) -> list[str]:
    """Names of the Delta tables under `<remote>/tables/`."""
    store = open_remote(remote)
    try:
        names = set()
        for info in store.list(TABLES_DIR + "/"):
            parts = info.key.split("/")
            if len(parts) >= 3 and parts[2] == "_delta_log":
                names.add(parts[1])
        return sorted(names)
    finally:
        store.close()


#: The database name under which `lakelog.<name>` resolves: Spark's global temporary views, with
#: `spark.sql.globalTempDatabase` set to it (a static setting, made when the session starts; see
#: `session.SQL_CONF`). Global temporary views are seen by every session of the application, the
#: sessions of Spark Connect clients included.
TABLE_SUFFIX = "_table"
_SIMPLE_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def view_names(remote: str, topics: list[str]) -> dict[str, str]:
    """view name -> what it shows, for `register_topics` and the listing of `lakelog sql`."""
    out = {t: f"topic {t}" for t in topics}
    for name in table_names(remote):
        if name.startswith("_") or name.endswith(LATEST_SUFFIX):
            out[name] = f"Delta table {name}"
        else:
            out[name + TABLE_SUFFIX] = f"Delta table {name} (synced history)"
    return out


def register_topics(spark, remote: str, database: str = SQL_DATABASE, nodes: str | None = None,
                    node_options: dict[str, str] | None = None) -> list[str]:
    """Make the topics and their Delta tables queryable as `<database>.<name>`; returns the names.

    - `lakelog.<topic>`: the whole topic's committed records (the data source with `nodes`: the
      remote tier and the nodes' hot tail up to each partition's last stable offset when the query
      runs, aborted transactions left out).
      Without `nodes` (or when the nodes cannot be reached), only the remote tier.
    - `lakelog.<topic>_table`: the Delta table `sync-tables` keeps (read at its latest version at
      each query; time travel with `SELECT ... FROM delta.`<path>` VERSION AS OF n` on its path).
    - `lakelog.<topic>_latest` and `lakelog._remote_index`: the other Delta tables.

    The session must have been started with `spark.sql.globalTempDatabase` = `database`
    (`remote_session` does it); this is the one call an analyst's session needs.
    Topics come from the nodes when given, else from the remote tier's topic descriptors."""
    from lakelog.spark_log.datasource import register as register_source

    configured = spark.conf.get("spark.sql.globalTempDatabase", "global_temp")
    if configured != database:
        raise ValueError(f"the session's spark.sql.globalTempDatabase is {configured!r}, not {database!r}: start it "
                         f"with remote_session() or that setting")
    register_source(spark)
    if nodes:
        from lakelog.spark_log.hot_tail import NodeAccess, list_topics

        topics = list_topics(NodeAccess.from_options(nodes, {k.lower(): v for k, v in (node_options or {}).items()}))
    else:
        topics = remote_topics(remote)
    from lakelog.spark_log.decoded_read import ViewTyping

    typing = ViewTyping(remote, nodes, node_options)  # typed by the Schema Registry, as the tables
    registered = []
    for topic in topics:
        if not _SIMPLE_NAME.match(topic):
            continue  # a view name is an unquoted identifier; read such a topic with the data source
        reader = spark.read.format("lakelog").option("remote", remote).option("topic", topic)
        if nodes:
            reader = reader.option("nodes", nodes).options(**(node_options or {}))
        typing.apply(reader.load(), topic).createOrReplaceGlobalTempView(topic)
        registered.append(topic)
    for name in table_names(remote):
        view = name if name.startswith("_") or name.endswith(LATEST_SUFFIX) else name + TABLE_SUFFIX
        if not _SIMPLE_NAME.match(view):
            continue
        location = tables_path(remote, name).replace("`", "``")
        spark.sql(f"CREATE OR REPLACE GLOBAL TEMPORARY VIEW `{view}` AS SELECT * FROM delta.`{location}`")
        registered.append(view)
    return sorted(registered)


def remote_topics(remote: str) -> list[str]:
    """Topics with data or a descriptor in the remote tier."""
    from lakelog.tiering.remote_scan import remote_partitions

    store = open_remote(remote)
    try:
        return sorted(t for t in remote_partitions(store) if not t.startswith("__"))
    finally:
        store.close()
