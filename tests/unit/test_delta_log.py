"""spark_log/delta_log.py, the one reader of Delta logs: the newest version over valid and odd logs
(gaps, a log that starts at a checkpoint, multi-part and V2 checkpoints, a lagging or broken
`_last_checkpoint`), the requests it makes, and the one parser of commit files."""

from __future__ import annotations

import json

import pytest

from lakelog.spark_log import delta_log
from lakelog.spark_log.delta_log import (
    DeltaLogCorruptError,
    DeltaLogGapError,
    LogTail,
    commit_info,
    commit_key,
    last_checkpoint,
    log_tail,
    newest_version,
    parse_commit,
    read_commit,
    transaction,
)
from lakelog.tiering.fs_store import FileSystemStore
from tests.support.tiering import InstrumentedStore

LOG = "tables/t/_delta_log/"


@pytest.fixture
def store(tmp_path) -> InstrumentedStore:
    return InstrumentedStore(FileSystemStore(tmp_path))


def _commit(store, version: int, *actions: dict) -> None:
    actions = actions or ({"commitInfo": {"operation": "WRITE", "n": version}},
                          {"add": {"path": f"part-{version}.parquet", "size": 1, "dataChange": True}})
    store.put(commit_key("t", version), "\n".join(json.dumps(a) for a in actions).encode() + b"\n")


def _commits(store, versions) -> None:
    for v in versions:
        _commit(store, v)


def _pointer(store, version: int, **extra) -> None:
    store.put(LOG + "_last_checkpoint", json.dumps({"version": version, "size": 3, **extra}).encode())


def _checkpoint(store, version: int) -> None:
    store.put(f"{LOG}{version:020d}.checkpoint.parquet", b"PAR1")


def test_keys_are_the_protocols_zero_padded_versions():
    assert commit_key("orders", 12) == "tables/orders/_delta_log/00000000000000000012.json"
    assert delta_log.log_prefix("orders") == "tables/orders/_delta_log/"


def _requests(store) -> dict[str, int]:
    return {op: store.count(op) for op in ("get", "get_range", "head", "list", "list_after") if store.count(op)}


@pytest.mark.parametrize("commits", [1, 2, 3, 5, 8, 13, 40])
def test_newest_version_without_a_checkpoint_by_one_list(store, commits):
    _commits(store, range(commits))
    store.reset_calls()
    assert log_tail(store, "t") == LogTail(commits - 1, True)
    # One (missing) `_last_checkpoint` and one LIST of the log, from its start.
    assert _requests(store) == {"get_range": 1, "list_after": 1}
    assert [c[2][0] for c in store.calls if c[0] == "list_after"] == [LOG]


@pytest.mark.parametrize("checkpoint,commits", [(10, 11), (10, 17), (20, 21), (30, 64)])
def test_newest_version_by_one_list_from_the_last_checkpoint(store, checkpoint, commits):
    _commits(store, range(commits))
    for v in range(0, checkpoint + 1, 10):
        _checkpoint(store, v)
    _pointer(store, checkpoint)
    store.reset_calls()
    assert log_tail(store, "t") == LogTail(commits - 1, True)
    assert _requests(store) == {"get_range": 1, "list_after": 1}
    # The LIST starts at the checkpoint's version: what it returns does not grow with the log.
    listed = store.inner.list_after(LOG, f"{LOG}{checkpoint:020d}", 1000)
    assert [c[2][0] for c in store.calls if c[0] == "list_after"] == [f"{LOG}{checkpoint:020d}"]
    assert len(listed) == commits - checkpoint + 2  # commits, the checkpoint, _last_checkpoint


def test_no_table_and_a_log_without_versions(store):
    assert log_tail(store, "t") == LogTail(-1, False)
    store.put(LOG + "00000000000000000003.crc", b"{}")  # a stray file: a log, but no version in it
    assert log_tail(store, "t") == LogTail(-1, True)
    assert newest_version(store, "t") == -1


def test_a_log_that_starts_at_a_checkpoint(store):
    # Metadata cleanup kept the checkpoint of version 10 but (an older Delta) not its commit file.
    _checkpoint(store, 10)
    _pointer(store, 10)
    assert log_tail(store, "t") == LogTail(10, True)  # the checkpoint's version is the newest
    _commits(store, [11, 12, 13])
    assert newest_version(store, "t") == 13
    # The same log without `_last_checkpoint` (lost, or unreadable: it is ignored).
    store.delete(LOG + "_last_checkpoint")
    assert newest_version(store, "t") == 13
    store.put(LOG + "_last_checkpoint", b'{"version": 1')  # torn
    assert last_checkpoint(store, "t") is None
    assert newest_version(store, "t") == 13


def test_a_gap_no_checkpoint_covers_is_corruption_not_a_newest_version(store):
    # Commits 0, 11 and 13 only: probing would stop at 0, a LIST would end at 13; neither is a table.
    _commits(store, [0, 11, 13])
    with pytest.raises(DeltaLogGapError) as e:
        newest_version(store, "t")
    assert (e.value.table, e.value.missing, e.value.later) == ("t", 1, 13)
    assert "not contiguous" in str(e.value)
    # A log whose first commits are gone with no checkpoint covering them: the same.
    for v in (0, 11, 13):
        store.delete(commit_key("t", v))
    _commits(store, [5, 6])
    with pytest.raises(DeltaLogGapError, match="commit 0 is missing"):
        newest_version(store, "t")


def test_a_gap_after_the_last_checkpoint_is_corruption_and_one_below_it_is_cleanup(store):
    _commits(store, [0, 1, 2, 5, 10, 11, 13])  # 3, 4, 6-9 cleaned up below the checkpoint
    _checkpoint(store, 10)
    _pointer(store, 10)
    with pytest.raises(DeltaLogGapError) as e:
        newest_version(store, "t")
    assert (e.value.missing, e.value.later) == (12, 13)
    # Probing by HEADs from 10 (11 exists, then 13: doubling the step) would have jumped it.
    _commit(store, 12)
    assert newest_version(store, "t") == 13


def test_a_lagging_last_checkpoint_is_read_past(store):
    # `_last_checkpoint` still names 10 (its update after checkpoint 20 failed), and cleanup
    # removed everything below 20: the anchor's commit is gone, a LIST from it finds checkpoint 20.
    _checkpoint(store, 20)
    _commits(store, range(20, 26))
    _pointer(store, 10)
    store.reset_calls()
    assert log_tail(store, "t") == LogTail(25, True)
    assert _requests(store) == {"get_range": 1, "list_after": 1}


def test_a_last_checkpoint_past_the_log_is_not_believed(store):
    _commits(store, range(4))
    _pointer(store, 50)
    store.reset_calls()
    assert newest_version(store, "t") == 3
    assert _requests(store) == {"get_range": 1, "list_after": 2}  # from 50, then from the start


def test_multi_part_checkpoints_count_only_when_whole(store):
    _commits(store, [11, 12])
    for part in (1, 2, 3):
        store.put(f"{LOG}{10:020d}.checkpoint.{part:010d}.{3:010d}.parquet", b"PAR1")
    assert newest_version(store, "t") == 12
    store.delete(f"{LOG}{10:020d}.checkpoint.{2:010d}.{3:010d}.parquet")  # a part missing: ignored
    with pytest.raises(DeltaLogGapError, match="commit 0 is missing"):
        newest_version(store, "t")
    _commits(store, range(5, 11))  # an older, whole checkpoint covers what is cleaned up
    _checkpoint(store, 5)
    assert newest_version(store, "t") == 12


def test_a_v2_checkpoint_covers_a_cleaned_up_log(store):
    store.put(f"{LOG}{7:020d}.checkpoint.80a083e8-7026-4e79-81be-64bd76c43a11.json", b"{}")
    store.put(f"{LOG}{4:020d}.{6:020d}.compacted.json", b"{}")  # a log compaction: not a commit
    _commits(store, [7, 8])
    assert newest_version(store, "t") == 8


def test_commit_actions_and_the_one_parser(store):
    _commit(store, 0, {"commitInfo": {"operation": "WRITE", "userMetadata": "m"}},
            {"txn": {"appId": "app", "version": 70, "lastUpdated": 1}},
            {"add": {"path": "a"}}, {"remove": {"path": "b"}}, {"metaData": {"id": "x"}})
    actions = read_commit(store, "t", 0)
    assert [next(iter(a)) for a in actions] == ["commitInfo", "txn", "add", "remove", "metaData"]
    assert commit_info(actions)["userMetadata"] == "m"
    assert transaction(actions, "app") == 70 and transaction(actions, "other") is None
    assert commit_info([{"add": {"path": "a"}}]) == {}
    with pytest.raises(DeltaLogCorruptError, match="not an integer"):
        transaction([{"txn": {"appId": "app", "version": "70"}}], "app")


@pytest.mark.parametrize("data,error", [
    (b'{"commitInfo": {}}\n{"add": {"pa', "line 2 is not JSON"),  # torn
    (b"", "holds no action"),  # empty
    (b"\n\n", "holds no action"),
    (b'{"commitInfo": {}}\n\xff\n', "not UTF-8 at byte 19"),
    (b'{"commitInfo": {}}\n[1, 2]\n', "line 2 is not one action"),
    (b'{"commitInfo": {}, "add": {}}\n', "line 1 is not one action"),
])
def test_a_torn_or_empty_commit_is_corrupt(store, data, error):
    with pytest.raises(DeltaLogCorruptError, match=error):
        parse_commit(data, "k")
    _commits(store, range(3))
    store.put(commit_key("t", 3), data)
    assert newest_version(store, "t") == 3  # the newest version is there; its content is corrupt
    with pytest.raises(DeltaLogCorruptError, match=f"00000000000000000003.json: {error}"):
        read_commit(store, "t", 3)


def test_a_commit_over_the_limit_is_not_read(store, monkeypatch):
    monkeypatch.setattr(delta_log, "MAX_COMMIT_BYTES", 64)
    _commit(store, 0, {"commitInfo": {"operation": "WRITE", "pad": "x" * 100}})
    with pytest.raises(DeltaLogCorruptError, match="more than 64 bytes"):
        read_commit(store, "t", 0)
