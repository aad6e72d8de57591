"""spark_log/delta_commits.py: an append's row count, read from a Delta log laid out as Delta's
protocol writes it (the newest version itself: tests/unit/test_delta_log.py)."""

from __future__ import annotations

import json

import pytest

from lakelog.spark_log.delta_commits import MAX_COMMITS_BACK, appended_rows, session_conf
from lakelog.spark_log.delta_log import commit_key
from lakelog.tiering.fs_store import FileSystemStore

APP = "lakelog-sync-t"


def _commit(store, version: int, *, txn: tuple[str, int] | None = None, rows: int | None = None) -> None:
    actions = [{"commitInfo": {"timestamp": 1, "operation": "WRITE",
                               "operationMetrics": {} if rows is None else {"numFiles": "1", "numOutputRows": str(rows)}}}]
    if txn is not None:
        actions.append({"txn": {"appId": txn[0], "version": txn[1], "lastUpdated": 1}})
    actions.append({"add": {"path": f"part-{version}.parquet", "size": 1, "dataChange": True}})
    store.put(commit_key("t", version), "\n".join(json.dumps(a) for a in actions).encode())


def test_appended_rows_is_the_matching_commits_num_output_rows(tmp_path):
    store = FileSystemStore(tmp_path)
    _commit(store, 0, txn=(APP, 0), rows=70)
    _commit(store, 1, txn=(APP, 70), rows=5)
    assert appended_rows(store, "t", APP, 70) == 5
    assert appended_rows(store, "t", APP, 0) == 70  # an older commit, within MAX_COMMITS_BACK
    # Another application's transaction, or this one's at another version: not this append.
    _commit(store, 2, txn=("other", 75), rows=9)
    assert appended_rows(store, "t", APP, 75) == 0
    assert appended_rows(store, "t", "other", 75) == 9


def test_an_append_delta_skipped_or_never_made_added_nothing(tmp_path):
    store = FileSystemStore(tmp_path)
    assert appended_rows(store, "t", APP, 0) == 0  # no table
    _commit(store, 0, txn=(APP, 0), rows=3)
    assert appended_rows(store, "t", APP, 3) == 0  # the retried append was skipped: no commit


def test_only_the_last_commits_are_read(tmp_path):
    store = FileSystemStore(tmp_path)
    _commit(store, 0, txn=(APP, 0), rows=4)
    for v in range(1, MAX_COMMITS_BACK + 1):
        _commit(store, v, txn=("other", v), rows=1)
    assert appended_rows(store, "t", APP, 0) == 0


def test_a_commit_without_metrics_is_an_error_not_a_guess(tmp_path):
    store = FileSystemStore(tmp_path)
    _commit(store, 0, txn=(APP, 0), rows=None)
    with pytest.raises(ValueError, match="numOutputRows"):
        appended_rows(store, "t", APP, 0)


class _Conf:
    def __init__(self, values):
        self.values = dict(values)

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = value

    def unset(self, key):
        self.values.pop(key, None)


class _Spark:
    def __init__(self, values):
        self.conf = _Conf(values)


def test_session_conf_restores_what_was_set_and_unsets_what_was_not():
    spark = _Spark({"a": "1"})
    with session_conf(spark, {"a": "2", "b": "3"}):
        assert spark.conf.values == {"a": "2", "b": "3"}
    assert spark.conf.values == {"a": "1"}
    with pytest.raises(RuntimeError):
        with session_conf(spark, {"a": "9"}):
            raise RuntimeError("boom")
    assert spark.conf.values == {"a": "1"}


def test_a_log_cleaned_up_below_a_checkpoint_is_read_back_to_its_first_commit(tmp_path):
    store = FileSystemStore(tmp_path)
    for v in range(10, 13):
        _commit(store, v, txn=(APP, v), rows=v)
    store.put("tables/t/_delta_log/00000000000000000010.checkpoint.parquet", b"PAR1")
    store.put("tables/t/_delta_log/_last_checkpoint", json.dumps({"version": 10, "size": 3}).encode())
    assert appended_rows(store, "t", APP, 12) == 12
    assert appended_rows(store, "t", APP, 10) == 10
    assert appended_rows(store, "t", APP, 9) == 0  # commits 0-9 are gone: not an error


def test_a_corrupt_log_fails_the_count_instead_of_answering(tmp_path):
    from lakelog.spark_log.delta_log import DeltaLogCorruptError, DeltaLogGapError

    store = FileSystemStore(tmp_path)
    for v in (0, 11, 13):
        _commit(store, v, txn=(APP, v), rows=1)
    with pytest.raises(DeltaLogGapError, match="commit 1 is missing"):
        appended_rows(store, "t", APP, 13)
    store = FileSystemStore(tmp_path / "torn")
    _commit(store, 0, txn=(APP, 0), rows=1)
    store.put(commit_key("t", 1), b'{"commitInfo": {"operationMetrics": {"numOutputRows": "3"}}}\n{"txn": {"app')
    with pytest.raises(DeltaLogCorruptError, match="line 2 is not JSON"):
        appended_rows(store, "t", APP, 1)
