"""Whether the `_remote_index` Delta table already holds a rebuild-index run's rows, so that the
run can leave it as it is instead of overwriting it with the same rows.

The table's contract (docs/spark.md) is its content: one row per COPY_FINISHED remote segment as
the last run found it. A scheduled `rebuild-index` over a tier that did not change finds the same
rows every time; overwriting the table with them costs a Delta transaction (seconds on a small
cluster: the log replay, a Parquet write job, the commit) and adds a version to its log. So:

  * every overwrite records a fingerprint of its rows in its commit's `userMetadata`
    (`commitInfo.userMetadata` in the commit file `_delta_log/<20-digit version>.json`, written by
    Delta from the writer's `userMetadata` option): "lakelog-remote-index:v1:" + SHA-256 over the
    table's schema and the rows, sorted, as canonical JSON;
  * before writing, the runner reads the LATEST commit of the table (its newest version and that
    commit's actions, by the one reader of Delta logs, spark_log/delta_log.py) and skips the write
    when its fingerprint is this run's. Any other latest commit (another writer's, a user's
    DELETE, one without the field, an unreadable one) means "write", and so does a log that
    delta_log refuses (a gap no checkpoint covers: Delta's own write then fails loudly, rather
    than this job reporting a table it cannot read as up to date).

Only the filesystem and S3 stores' plain `_delta_log/` layout is read (a table with coordinated
commits, whose latest commits are not there yet, is not one this job creates). No pyspark here.
"""

from __future__ import annotations

import hashlib
import json

from lakelog.spark_log.delta_log import DeltaLogError, commit_info, log_prefix, log_tail, read_commit
from lakelog.tiering.errors import TieringError
from lakelog.tiering.remote_scan import REMOTE_INDEX_TABLE
from lakelog.tiering.store import ObjectStore

FINGERPRINT_PREFIX = "lakelog-remote-index:v1:"
LOG_DIR = log_prefix(REMOTE_INDEX_TABLE)


def rows_fingerprint(schema: str, columns: list[str], rows: list[dict]) -> str:
    """The fingerprint of a table of `rows` (only `columns` of each) with `schema` (Spark DDL)."""
    canonical = sorted(json.dumps([r.get(c) for c in columns], separators=(",", ":")) for r in rows)
    digest = hashlib.sha256(json.dumps([schema, columns, canonical], separators=(",", ":")).encode())
    return FINGERPRINT_PREFIX + digest.hexdigest()


def latest_fingerprint(store: ObjectStore) -> str | None:
    """The fingerprint in the `userMetadata` of the table's latest commit, or None (no table, the
    latest commit is not a rebuild-index overwrite, or it could not be read)."""
    return table_state(store)[1]


def table_state(store: ObjectStore) -> tuple[bool, str | None]:
    """(whether the table may exist, `latest_fingerprint`): False only when `_delta_log/` holds
    no file (the writer then creates the table rather than overwriting one, which spares Delta's
    search for files to remove)."""
    try:
        tail = log_tail(store, REMOTE_INDEX_TABLE)
        if tail.newest < 0:
            return tail.exists, None
        meta = commit_info(read_commit(store, REMOTE_INDEX_TABLE, tail.newest)).get("userMetadata")
    except (DeltaLogError, TieringError, OSError):
        return True, None  # whatever went wrong, the table is written as before
    return True, meta if isinstance(meta, str) and meta.startswith(FINGERPRINT_PREFIX) else None
