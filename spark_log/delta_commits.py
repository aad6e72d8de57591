"""What a Delta append committed, read from the table's log in the object store (no pyspark here),
and the session settings `sync-tables` writes its tables under.

A commit made with the writer options `txnAppId` / `txnVersion` carries the action
`{"txn": {"appId": ..., "version": ...}}`; every commit carries `{"commitInfo": {...}}`, whose
`operationMetrics` (strings, written while `spark.databricks.delta.history.metricsEnabled` is on,
Delta's default) hold `numOutputRows` for a WRITE.

`appended_rows` answers how many rows the append with a given transaction id added, from that
commit's metrics: the sync's row count without a second pass (or a cached `count()`) over the rows.
It finds the newest version and reads commits back from it, at most MAX_COMMITS_BACK, through the
one reader of Delta logs (`spark_log/delta_log.py`: the log's layout, how the newest version is
found, what a gap or a torn commit is). Delta skips an append whose transaction id the table already
holds (a retried sync) without committing anything: the answer is then 0.

Concurrency: read-only; a commit made while it looks may or may not be seen (the caller's own
commit is done before it asks).
"""

from __future__ import annotations

from lakelog.spark_log.delta_log import commit_info, newest_version, read_commit, transaction
from lakelog.tiering.errors import ObjectNotFoundError
from lakelog.tiering.store import ObjectStore

#: Commits read back from the newest looking for the append's own; only sync-tables writes a
#: topic's table, so its commit is the newest but for a concurrent run's.
MAX_COMMITS_BACK = 16
#: Session settings for the sync's Delta writes. No post-commit checksum file (`.crc`): readers
#: do without it, and writing it costs a state computation and requests per commit (rebuild-index's
#: `_remote_index` write does the same, `jobs.REMOTE_INDEX_WRITE_CONF`).
SYNC_WRITE_CONF = {"spark.databricks.delta.writeChecksumFile.enabled": "false"}


class session_conf:
    """`with session_conf(spark, {key: value}):` sets the keys for the block and restores them after."""

    def __init__(self, spark, conf: dict[str, str]) -> None:
        self.spark = spark
        self.conf = conf
        self.saved: dict[str, str | None] = {}

    def __enter__(self) -> "session_conf":
        for k, v in self.conf.items():
            self.saved[k] = self.spark.conf.get(k, None)
            self.spark.conf.set(k, v)
        return self

    def __exit__(self, *exc: object) -> None:
        for k, v in self.saved.items():
            if v is None:
                self.spark.conf.unset(k)
            else:
                self.spark.conf.set(k, v)


def appended_rows(store: ObjectStore, table: str, app_id: str, txn_version: int) -> int:
    """Rows added by the commit carrying the transaction (`app_id`, `txn_version`): its
    `numOutputRows`; 0 when no commit near the newest carries it (Delta skipped the append)."""
    newest = newest_version(store, table)
    for version in range(newest, max(newest - MAX_COMMITS_BACK, -1), -1):
        try:
            actions = read_commit(store, table, version)
        except ObjectNotFoundError:
            break  # cleaned up below a checkpoint (delta_log.py, rule 2): so are the older ones
        if transaction(actions, app_id) != txn_version:
            continue
        metrics = commit_info(actions).get("operationMetrics") or {}
        if "numOutputRows" not in metrics:
            raise ValueError(f"Delta table {table}: commit {version} has no numOutputRows "
                             f"(spark.databricks.delta.history.metricsEnabled is off?)")
        return int(metrics["numOutputRows"])
    return 0
