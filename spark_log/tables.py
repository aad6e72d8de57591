"""Delta tables of topics (`sync-tables`) and the SQL catalog over them (`lakelog sql`).

`<remote>/tables/<topic>`: every record of the topic's remote tier, partitioned by `partition`
and `date` (the UTC day of the record's timestamp), with the data source's columns. With the topic
config `value.schema` (a Spark DDL string such as `id BIGINT, amount DOUBLE`), JSON values are
also parsed into those typed columns. Compacted topics also get `<remote>/tables/<topic>_latest`:
the latest record per (partition, key), tombstoned keys left out: written whole by the first sync,
then kept by one Delta MERGE per sync of the new rows' latest record per key (a newer value
updates or inserts, a newer tombstone deletes), so a sync reads only what it appends.

Incremental and idempotent: a sync reads the highest synced offset per partition from the table
itself and appends only the records above it. The append carries a Delta transaction id
(`txnAppId` = `lakelog-sync-<topic>`, `txnVersion` = the sum over partitions of the first offset
it starts from): that number grows with every append, and a retried or concurrent append of the
same range has the same one, so Delta skips it. Running sync twice adds nothing.

Records reach a table once they are in the remote tier (COPY_FINISHED), so a table trails the
log by what the nodes have not tiered yet.
"""

from __future__ import annotations

import time

from lakelog.tiering.remote_scan import TABLES_DIR, open_remote, tables_path

LATEST_SUFFIX = "_latest"
SQL_DATABASE = "lakelog"


def _table_exists(spark, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def sync_topic(spark, remote: str, topic: str, config: dict[str, str], partitions: list[int], *,
               owner: str = "sync") -> dict:
    """Append the topic's new remote records to its Delta table; returns a summary row."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    path = tables_path(remote, topic)
    synced: dict[int, int] = {}
    if _table_exists(spark, path):
        for r in spark.read.format("delta").load(path).groupBy("partition").agg(F.max("offset").alias("o")).collect():
            synced[int(r["partition"])] = int(r["o"])
    starts = {p: synced.get(p, -1) + 1 for p in partitions}
    lowest = min(starts.values()) if starts else 0
    df = (spark.read.format("lakelog").option("remote", remote).option("topic", topic)
          .option("startingOffset", lowest).load())
    condition = None
    for p, start in starts.items():
        c = (F.col("partition") == p) & (F.col("offset") >= start)
        condition = c if condition is None else condition | c
    if condition is None:
        return {"topic": topic, "table": path, "rows_added": 0, "seconds": time.monotonic() - started}
    new = df.where(condition).withColumn(
        "date", F.date_from_unix_date(F.floor(F.unix_millis(F.col("timestamp")) / 86_400_000).cast("int")))
    schema = (config.get("value.schema") or "").strip()
    if schema:
        parsed = F.from_json(F.col("value").cast("string"), schema)
        names = [f.name for f in spark.createDataFrame([], schema).schema.fields]
        clash = set(names) & set(new.columns)
        if clash:
            raise ValueError(f"value.schema of {topic} names columns the table already has: {sorted(clash)}")
        new = new.withColumn("_parsed", parsed).select(*new.columns, *[F.col("_parsed." + n).alias(n) for n in names])
    compacted = "compact" in {p.strip() for p in config.get("cleanup.policy", "delete").split(",")}
    latest_exists = compacted and _table_exists(spark, tables_path(remote, topic + LATEST_SUFFIX))
    new = new.persist()
    latest_path = None
    try:
        added = new.count()
        if added:
            version = sum(starts.values())
            (new.write.format("delta").mode("append").partitionBy("partition", "date")
             .option("txnAppId", f"lakelog-sync-{topic}").option("txnVersion", version)
             .option("mergeSchema", "true").save(path))
            if latest_exists:
                latest_path = merge_latest_table(spark, remote, topic, new)
    finally:
        new.unpersist()
    if compacted and not latest_exists and _table_exists(spark, path):
        latest_path = write_latest_table(spark, remote, topic)
    return {"topic": topic, "table": path, "rows_added": added, "latest_table": latest_path,
            "seconds": time.monotonic() - started}


def _latest_per_key(df):
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    w = Window.partitionBy("partition", "key").orderBy(F.col("offset").desc())
    return df.where(F.col("key").isNotNull()).withColumn("_rank", F.row_number().over(w)) \
        .where("_rank = 1").drop("_rank")


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


def write_latest_table(spark, remote: str, topic: str) -> str:
    """Rewrite `<topic>_latest`: the newest record per (partition, key), tombstoned keys left out."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    full = spark.read.format("delta").load(tables_path(remote, topic)).where(F.col("key").isNotNull())
    w = Window.partitionBy("partition", "key").orderBy(F.col("offset").desc())
    latest = (full.withColumn("_rank", F.row_number().over(w)).where("_rank = 1").drop("_rank")
              .where(F.col("value").isNotNull()))
    path = tables_path(remote, topic + LATEST_SUFFIX)
    latest.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path)
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


def register_topics(spark, remote: str, database: str = SQL_DATABASE) -> list[str]:
    """Make every Delta table under `<remote>/tables/` queryable as `<database>.<name>`
    (`lakelog.orders`, `lakelog.orders_latest`, `lakelog._remote_index`); returns the names.
    This is the one call an analyst's own SparkSession needs (with Lakelog's jars)."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    names = table_names(remote)
    for name in names:
        location = tables_path(remote, name).replace("'", "\\'")
        spark.sql(f"CREATE TABLE IF NOT EXISTS `{database}`.`{name}` USING delta LOCATION '{location}'")
    return names
