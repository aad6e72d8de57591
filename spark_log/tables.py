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

Incremental and idempotent: a sync reads the highest synced offset per partition from the table
itself and appends only the records above it. The append carries a Delta transaction id
(`txnAppId` = `lakelog-sync-<topic>`, `txnVersion` = the sum over partitions of the first offset
it starts from): that number grows with every append, and a retried or concurrent append of the
same range has the same one, so Delta skips it. Running sync twice adds nothing.

Records reach a table once they are in the remote tier (COPY_FINISHED), so a table trails the
log by what the nodes have not tiered yet.

What one sync costs: each table's existence is asked once (`_TableStates`); when no partition's
manifest reaches its start offset, no Spark job runs. Otherwise the new rows are read once, cached
by the append (for `<topic>_latest`; uncompressed: `SYNC_CACHE_CONF`), and counted from the
append's own Delta commit (`delta_commits.appended_rows`: its `numOutputRows`; 0 when Delta skipped
the append as already made). The latest record per key is a hash aggregate of `max(offset)` per
(partition, key) and a semi-join of the rows at those offsets (`_latest_per_key`): no sort of whole
rows. The writes make no Delta checksum files (`delta_commits.SYNC_WRITE_CONF`). The rare append of no rows (a manifest whose last offsets are
control records or compacted away) commits an empty version once: its transaction id then repeats
and Delta skips it.
"""

from __future__ import annotations

import re
import time

from lakelog.spark_log.delta_commits import SYNC_WRITE_CONF, appended_rows, session_conf
from lakelog.tiering.remote_scan import TABLES_DIR, open_remote, tables_path

LATEST_SUFFIX = "_latest"
ERRORS_SUFFIX = "_errors"
REGISTRY_URL_KEY = "schema.registry.url"
TYPE_WIDENING = "delta.enableTypeWidening"
TYPE_WIDENING_DEFAULT = "spark.databricks.delta.properties.defaults.enableTypeWidening"
SQL_DATABASE = "lakelog"
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


def _has_records_from(remote: str, topic: str, starts: dict[int, int]) -> bool:
    """Whether some partition's remote tier (COPY_FINISHED segments, what the data source reads)
    reaches its start offset: without, there is nothing to append and no Spark job runs."""
    from lakelog.tiering.remote_scan import load_manifest

    store = open_remote(remote)
    try:
        for p, start in starts.items():
            end = load_manifest(store, topic, p).end_offset
            if end is not None and end >= start:
                return True
        return False
    finally:
        store.close()


def sync_topic(spark, remote: str, topic: str, config: dict[str, str], partitions: list[int], *,
               owner: str = "sync") -> dict:
    """Append the topic's new remote records to its Delta table; returns a summary row."""
    with session_conf(spark, {**SYNC_WRITE_CONF, **SYNC_CACHE_CONF}):
        return _sync_topic(spark, remote, topic, config, partitions, _TableStates(spark))


def _sync_topic(spark, remote: str, topic: str, config: dict[str, str], partitions: list[int],
                tables: _TableStates) -> dict:
    from pyspark.sql import functions as F

    started = time.monotonic()
    path = tables_path(remote, topic)
    synced: dict[int, int] = {}
    errors_path = tables_path(remote, topic + ERRORS_SUFFIX)
    latest_table = tables_path(remote, topic + LATEST_SUFFIX)
    for done in (path, errors_path):  # a record is synced once it is in the table or in its dead letters
        if tables.exists(done):
            for r in spark.read.format("delta").load(done).groupBy("partition").agg(F.max("offset").alias("o")).collect():
                synced[int(r["partition"])] = max(synced.get(int(r["partition"]), -1), int(r["o"]))
    table_existed = tables.exists(path)
    compacted = "compact" in {p.strip() for p in config.get("cleanup.policy", "delete").split(",")}
    starts = {p: synced.get(p, -1) + 1 for p in partitions}
    added = errors_added = 0
    latest_path = None
    if starts and _has_records_from(remote, topic, starts):
        added, errors_added, latest_path = _append_new(spark, remote, topic, config, starts, tables,
                                                       table_existed=table_existed, compacted=compacted)
    if compacted and latest_path is None and not tables.exists(latest_table) and tables.exists(path):
        latest_path = write_latest_table(spark, remote, topic, exists=False)
    return {"topic": topic, "table": path, "rows_added": added, "latest_table": latest_path,
            "errors_added": errors_added, "seconds": time.monotonic() - started}


def _append_new(spark, remote: str, topic: str, config: dict[str, str], starts: dict[int, int],
                tables: _TableStates, *, table_existed: bool, compacted: bool) -> tuple[int, int, str | None]:
    """Append the records from `starts` on; returns (rows added, dead letters added, the latest
    table's path when written). The rows are cached for the latest table's step; their count is the
    append commit's `numOutputRows` (`delta_commits.appended_rows`), not a pass of its own."""
    from pyspark.sql import functions as F

    path = tables_path(remote, topic)
    errors_path = tables_path(remote, topic + ERRORS_SUFFIX)
    lowest = min(starts.values())
    # "lakelog": the JVM reader when its jar is on the session's class path, else the Python reader.
    from lakelog.spark_log.datasource import register as register_source

    register_source(spark)
    df = (spark.read.format("lakelog").option("remote", remote).option("topic", topic)
          .option("startingOffset", lowest).load())
    condition = None
    for p, start in starts.items():
        c = (F.col("partition") == p) & (F.col("offset") >= start)
        condition = c if condition is None else condition | c
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
    latest_exists = compacted and tables.exists(tables_path(remote, topic + LATEST_SUFFIX))
    version = sum(starts.values())
    app_id = f"lakelog-sync-{topic}"
    new = new.persist()
    errors_added = 0
    latest_path = None
    try:
        # Registry-decoded rows may all be dead letters: no append (and no empty table) then.
        added = 0
        if dead is None or new.count():
            _append_typed(spark, new, path, topic, version, widen=bool(registry), tables=tables)
            store = open_remote(remote)
            try:
                added = appended_rows(store, topic, app_id, version)
            finally:
                store.close()
        if added:
            tables.written(path)
            if latest_exists:
                latest_path = merge_latest_table(spark, remote, topic, new)
            elif compacted and not table_existed:
                # the table is exactly these rows: its latest table from them (cached), not read back
                latest_path = write_latest_table(spark, remote, topic, source=new,
                                                 exists=tables.exists(tables_path(remote, topic + LATEST_SUFFIX)))
                tables.written(latest_path)
        if dead is not None:
            dead = dead.persist()
            errors_added = dead.count()
            if errors_added:
                (dead.write.format("delta").mode("append").partitionBy("partition", "date")
                 .option("txnAppId", f"{app_id}{ERRORS_SUFFIX}").option("txnVersion", version)
                 .save(errors_path))
    finally:
        new.unpersist()
        if dead is not None:
            dead.unpersist()
    return added, errors_added, latest_path


def _append_typed(spark, new, path: str, topic: str, version: int, *, widen: bool, tables: _TableStates) -> None:
    """Append with schema merge. With `widen` (registry-typed tables), a compatible schema change widens a
    column in place (int -> long, float -> double) by Delta type widening: a new table is created with
    `delta.enableTypeWidening` (the session default for new tables, set around its creation), and a
    table made before it (whose merge then fails on the type change) gets it once, then the append is
    retried. The property adds Delta's `typeWidening` table feature (readers need Delta 3.2+)."""
    from pyspark.errors import AnalysisException

    def append() -> None:
        (new.write.format("delta").mode("append").partitionBy("partition", "date")
         .option("txnAppId", f"lakelog-sync-{topic}").option("txnVersion", version)
         .option("mergeSchema", "true").save(path))

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

    - `lakelog.<topic>`: the whole topic (the data source with `nodes`: the remote tier and the
      nodes' hot tail up to each partition's high watermark when the query runs). Without `nodes`
      (or when the nodes cannot be reached), only the remote tier.
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
