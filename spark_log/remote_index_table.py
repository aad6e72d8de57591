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
  * before writing, the runner reads the LATEST commit file (a LIST of `_delta_log/` and one GET)
    and skips the write when its fingerprint is this run's. Any other latest commit (another
    writer's, a user's DELETE, one without the field, an unreadable one) means "write".

Only the filesystem and S3 stores' plain `_delta_log/` layout is read (a table with coordinated
commits, whose latest commits are not there yet, is not one this job creates). No pyspark here.
"""

from __future__ import annotations

import hashlib
import json
import re

from lakelog.tiering.errors import TieringError
from lakelog.tiering.remote_scan import REMOTE_INDEX_TABLE, TABLES_DIR
from lakelog.tiering.store import ObjectStore

FINGERPRINT_PREFIX = "lakelog-remote-index:v1:"
LOG_DIR = f"{TABLES_DIR}/{REMOTE_INDEX_TABLE}/_delta_log/"
_COMMIT = re.compile(r"(\d{20})\.json$")
#: A commit file larger than this is not one of ours (ours hold a few actions): not read.
MAX_COMMIT_BYTES = 16 * 1024 * 1024


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
    """(whether the table may exist, `latest_fingerprint`): False only when the listing of
    `_delta_log/` succeeded and is empty (the writer then creates the table rather than
    overwriting one, which spares Delta's search for files to remove)."""
    try:
        listed = store.list(LOG_DIR)
    except (TieringError, OSError):
        return True, None
    commits = [(int(m.group(1)), o) for o in listed if (m := _COMMIT.fullmatch(o.key[len(LOG_DIR):]))]
    if not commits:
        return bool(listed), None
    return True, _fingerprint_of(store, max(commits, key=lambda c: c[0])[1])


def _fingerprint_of(store: ObjectStore, info) -> str | None:
    try:
        if info.size > MAX_COMMIT_BYTES:
            return None
        data, _ = store.get(info.key)
        for line in data.decode("utf-8").splitlines():
            action = json.loads(line) if line.strip() else {}
            if "commitInfo" in action:
                meta = action["commitInfo"].get("userMetadata")
                return meta if isinstance(meta, str) and meta.startswith(FINGERPRINT_PREFIX) else None
    except (TieringError, OSError, ValueError, AttributeError):
        return None  # whatever went wrong, the table is written as before
    return None
