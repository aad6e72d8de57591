"""The fingerprint of the `_remote_index` table's rows and its reading from the table's latest
Delta commit (spark_log/remote_index_table.py): only an exact match of the latest commit skips."""

from __future__ import annotations

import json

from lakelog.spark_log.remote_index_table import (
    FINGERPRINT_PREFIX,
    LOG_DIR,
    latest_fingerprint,
    rows_fingerprint,
    table_state,
)
from lakelog.tiering.fs_store import FileSystemStore

COLUMNS = ["topic", "partition", "base_offset", "detail"]
ROWS = [{"topic": "t", "partition": 0, "base_offset": 0, "detail": ""},
        {"topic": "t", "partition": 1, "base_offset": 10, "detail": "", "extra": "not a column"}]


def _commit(store, version: int, *actions: dict) -> None:
    store.put(f"{LOG_DIR}{version:020d}.json", "\n".join(json.dumps(a) for a in actions).encode())


def test_the_fingerprint_covers_rows_and_schema_in_any_order():
    f = rows_fingerprint("s", COLUMNS, ROWS)
    assert f.startswith(FINGERPRINT_PREFIX)
    assert rows_fingerprint("s", COLUMNS, ROWS[::-1]) == f
    assert rows_fingerprint("s", COLUMNS, [ROWS[0], {**ROWS[1], "extra": "other"}]) == f  # not a column
    assert rows_fingerprint("s", COLUMNS, [ROWS[0], {**ROWS[1], "detail": "x"}]) != f
    assert rows_fingerprint("s", COLUMNS, ROWS[:1]) != f
    assert rows_fingerprint("s2", COLUMNS, ROWS) != f
    assert rows_fingerprint("s", COLUMNS, []) != f


def test_only_the_latest_commit_of_the_table_is_read(tmp_path):
    store = FileSystemStore(tmp_path)
    f = rows_fingerprint("s", COLUMNS, ROWS)
    assert latest_fingerprint(store) is None  # no table
    _commit(store, 0, {"commitInfo": {"operation": "WRITE", "userMetadata": f}}, {"protocol": {}})
    assert latest_fingerprint(store) == f
    store.put(f"{LOG_DIR}00000000000000000000.checkpoint.parquet", b"PAR1")  # not a commit file
    store.put(f"{LOG_DIR}00000000000000000005.00000000000000000009.compacted.json", b"{}")
    assert latest_fingerprint(store) == f
    for v in range(1, 11):
        _commit(store, v, {"commitInfo": {"operation": "WRITE", "userMetadata": f}})
    _commit(store, 11, {"commitInfo": {"operation": "DELETE"}}, {"remove": {"path": "x"}})  # another writer's
    assert latest_fingerprint(store) is None
    _commit(store, 12, {"commitInfo": {"operation": "WRITE", "userMetadata": "someone else's note"}})
    assert latest_fingerprint(store) is None
    _commit(store, 13, {"add": {"path": "y"}}, {"commitInfo": {"userMetadata": f}})
    assert latest_fingerprint(store) == f
    store.put(f"{LOG_DIR}{14:020d}.json", b"\xff not json")  # unreadable: write the table
    assert latest_fingerprint(store) is None
    store.put(f"{LOG_DIR}{14:020d}.json", b"")  # empty: the same
    assert latest_fingerprint(store) is None


def test_a_log_with_a_gap_is_written_not_trusted(tmp_path):
    """Commits 0, 11 and 13 only, no checkpoint: a corrupt log (spark_log/delta_log.py, rule 3), so
    the table is written (Delta's own write then refuses it) even though commit 13 holds this
    run's fingerprint. Before the one reader of Delta logs, a LIST found 13 and skipped the write."""
    store = FileSystemStore(tmp_path)
    f = rows_fingerprint("s", COLUMNS, ROWS)
    for v in (0, 11, 13):
        _commit(store, v, {"commitInfo": {"operation": "WRITE", "userMetadata": f}})
    assert table_state(store) == (True, None)
    store.put(f"{LOG_DIR}{10:020d}.checkpoint.parquet", b"PAR1")  # still 12 missing after checkpoint 10
    assert table_state(store) == (True, None)
    _commit(store, 12, {"commitInfo": {"operation": "WRITE"}})  # a checkpoint covers 1-9: a valid log
    assert table_state(store) == (True, f)


def test_the_table_is_created_only_where_its_log_is_empty(tmp_path):
    store = FileSystemStore(tmp_path)
    assert table_state(store) == (False, None)
    store.put(f"{LOG_DIR}00000000000000000010.checkpoint.parquet", b"PAR1")  # a log without commit files
    assert table_state(store) == (True, None)
    f = rows_fingerprint("s", COLUMNS, ROWS)
    _commit(store, 10, {"commitInfo": {"userMetadata": f}})
    assert table_state(store) == (True, f)
