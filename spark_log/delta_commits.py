"""What a Delta append committed, read from the table's log in the object store (no pyspark here),
and the session settings `sync-tables` writes its tables under.

The Delta log (Delta's PROTOCOL.md, "Delta Log Entries" and "Checkpoints"), under a table's root:

    _delta_log/<version>.json      one commit: newline-delimited JSON actions; the version is
                                   zero-padded to 20 digits; versions are numbered 0, 1, 2, ...
                                   without gaps
    _delta_log/_last_checkpoint    JSON `{"version": N, ...}`: the newest checkpoint (absent until
                                   the first one); the commits after N are JSON files

A commit made with the writer options `txnAppId` / `txnVersion` carries the action
`{"txn": {"appId": ..., "version": ...}}`; every commit carries `{"commitInfo": {...}}`, whose
`operationMetrics` (strings, written while `spark.databricks.delta.history.metricsEnabled` is on,
Delta's default) hold `numOutputRows` for a WRITE.

`appended_rows` answers how many rows the append with a given transaction id added, from that
commit's metrics: the sync's row count without a second pass (or a cached `count()`) over the rows.
It finds the newest version (from the last checkpoint: HEADs doubling their step, then halving) and
reads commits back from it, at most MAX_COMMITS_BACK. Delta skips an append whose transaction id
the table already holds (a retried sync) without committing anything: the answer is then 0.

Concurrency: read-only; a commit made while it looks may or may not be seen (the caller's own
commit is done before it asks).
"""

from __future__ import annotations

import json

from lakelog.tiering.errors import ObjectNotFoundError
from lakelog.tiering.remote_scan import TABLES_DIR
from lakelog.tiering.store import ObjectStore

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = "_last_checkpoint"
#: Commits read back from the newest looking for the append's own; only sync-tables writes a
#: topic's table, so its commit is the newest but for a concurrent run's.
MAX_COMMITS_BACK = 16
#: The newest version is searched for at most this far past the last checkpoint (Delta writes one
#: every 10 commits by default: `delta.checkpointInterval`).
MAX_VERSIONS_PAST_CHECKPOINT = 1 << 20

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


def commit_key(table: str, version: int) -> str:
    """The store key of commit `version` of the table `<remote>/tables/<table>`."""
    return f"{TABLES_DIR}/{table}/{LOG_DIR}/{version:020d}.json"


def _exists(store: ObjectStore, table: str, version: int) -> bool:
    try:
        store.head(commit_key(table, version))
        return True
    except ObjectNotFoundError:
        return False


def last_checkpoint(store: ObjectStore, table: str) -> int:
    """The version of the table's newest checkpoint, -1 without one."""
    try:
        data, _ = store.get(f"{TABLES_DIR}/{table}/{LOG_DIR}/{LAST_CHECKPOINT}")
    except ObjectNotFoundError:
        return -1
    return int(json.loads(data)["version"])


def newest_version(store: ObjectStore, table: str) -> int:
    """The table's newest commit version, -1 for no commit."""
    low = max(last_checkpoint(store, table), 0)  # a checkpoint's own commit file is kept
    if not _exists(store, table, low):
        return -1
    step = 1
    while _exists(store, table, low + step):  # low exists; find a missing version above it
        low += step
        step *= 2
        if step > MAX_VERSIONS_PAST_CHECKPOINT:
            raise ValueError(f"Delta table {table}: more than {MAX_VERSIONS_PAST_CHECKPOINT} commits "
                             f"after its last checkpoint")
    high = low + step  # missing; low exists
    while high - low > 1:
        mid = (low + high) // 2
        if _exists(store, table, mid):
            low = mid
        else:
            high = mid
    return low


def read_commit(store: ObjectStore, table: str, version: int) -> list[dict]:
    """The actions of one commit, in order."""
    data, _ = store.get(commit_key(table, version))
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def appended_rows(store: ObjectStore, table: str, app_id: str, txn_version: int) -> int:
    """Rows added by the commit carrying the transaction (`app_id`, `txn_version`): its
    `numOutputRows`; 0 when no commit near the newest carries it (Delta skipped the append)."""
    newest = newest_version(store, table)
    for version in range(newest, max(newest - MAX_COMMITS_BACK, -1), -1):
        actions = read_commit(store, table, version)
        txn = next((a["txn"] for a in actions if "txn" in a and a["txn"].get("appId") == app_id), None)
        if txn is None or int(txn["version"]) != txn_version:
            continue
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        metrics = info.get("operationMetrics") or {}
        if "numOutputRows" not in metrics:
            raise ValueError(f"Delta table {table}: commit {version} has no numOutputRows "
                             f"(spark.databricks.delta.history.metricsEnabled is off?)")
        return int(metrics["numOutputRows"])
    return 0
