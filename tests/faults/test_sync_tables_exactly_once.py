"""sync-tables exactly once into Delta (spark_log/sync_state.py), against real Delta writes on the
filesystem store: a run that dies between its Delta append and its follow-ups, then reruns; two
syncs started at once; a step planned from a stale state. After each, every tiered record is in
`<topic>` exactly once and `<topic>_latest` is the newest value per key."""

from __future__ import annotations

import random
import threading

import pytest

from lakelog.logstore.record_batch import Record, build_batch
from lakelog.spark_log import tables as sync_tables
from lakelog.spark_log.delta_log import newest_version, read_commit
from lakelog.spark_log.jobs import run_job
from lakelog.spark_log.session import remote_session
from lakelog.spark_log.sync_state import SyncRange, app_id, read_sync_state
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor
from tests.faults.test_replication_faults import _seed
from tests.integration.test_remote_compaction import TOPIC, build_remote, remote_records

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "4000"}


class Crash(Exception):
    """The sync process dying right after its Delta append."""


@pytest.fixture(scope="module")
def spark():
    session = remote_session(None, app_name="lakelog-sync-exactly-once-test")
    yield session
    session.stop()


def _rows(spark, remote: str, name: str) -> list:
    return spark.read.format("delta").load(f"{remote}/tables/{name}").collect()


def _offsets(spark, remote: str) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in _rows(spark, remote, TOPIC))


def _expected_offsets(store) -> list[tuple[int, int]]:
    return sorted((p, o) for p in (0, 1) for o, _, _, _ in remote_records(store, p))


def _latest(spark, remote: str) -> dict:
    return {(r["partition"], bytes(r["key"])): bytes(r["value"]) for r in _rows(spark, remote, TOPIC + "_latest")}


def _expected_latest(store) -> dict:
    out: dict = {}
    for p in (0, 1):
        for _, _, k, v in remote_records(store, p):
            if k is not None:
                out[(p, k)] = v
    return {pk: v for pk, v in out.items() if v is not None}


def _more(rng: random.Random, log, tier, p: int, n: int) -> None:
    """Append `n` keyed records (some tombstones) to partition `p` and tier them."""
    recs = [Record(i, 9_000_000 + i, f"key-{rng.randrange(30)}".encode(),
                   None if rng.random() < 0.15 else f"late-{rng.random():.6f}".encode()) for i in range(n)]
    log.append_as_leader(build_batch(recs), 1)
    log.roll()
    tier.partition(TOPIC, p).copy_segments(log, 1, log.log_end_offset)


def _build(tmp_path, seed: int):
    store, tier0, log0, _ = build_remote(tmp_path, batches=80, keys=25, partition=0, seed=seed)
    _, tier1, log1, _ = build_remote(tmp_path, batches=60, keys=25, partition=1, seed=seed + 1)
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 2, COMPACT))
    return store, (tier0, tier1), (log0, log1), (tmp_path / "remote").as_uri()


def test_a_sync_killed_after_its_delta_append_reruns_to_each_record_once(tmp_path, spark, monkeypatch):
    rng = random.Random(_seed("sync-tables killed between its Delta append and its follow-ups"))
    store, tiers, logs, remote = _build(tmp_path, rng.randrange(1000))
    assert run_job(spark, "sync-tables", remote).totals["rows_added"] == len(_expected_offsets(store))
    for p in (0, 1):
        _more(rng, logs[p], tiers[p], p, rng.randint(5, 20))

    real = sync_tables.appended_rows
    calls = []

    def dies_after_the_append(*args, **kwargs):
        calls.append(args)
        raise Crash("killed right after the Delta append")

    monkeypatch.setattr(sync_tables, "appended_rows", dies_after_the_append)
    with pytest.raises(Exception, match="killed right after the Delta append"):
        run_job(spark, "sync-tables", remote, topics=[TOPIC])
    assert calls
    # The append is in the table (with its range); <topic>_latest was never brought up to it.
    assert _offsets(spark, remote) == _expected_offsets(store)
    assert _latest(spark, remote) != _expected_latest(store)
    state = read_sync_state(store, TOPIC, app_id(TOPIC))
    assert state.last is not None and state.last.seq == 1
    assert state.last.nexts == {p: remote_records(store, p)[-1][0] + 1 for p in (0, 1)}

    monkeypatch.setattr(sync_tables, "appended_rows", real)
    rerun = run_job(spark, "sync-tables", remote)
    assert rerun.totals["rows_added"] == 0  # nothing twice ...
    assert _offsets(spark, remote) == _expected_offsets(store)  # ... nothing skipped
    assert _latest(spark, remote) == _expected_latest(store)  # the follow-up was done by the rerun
    version = newest_version(store, TOPIC)
    assert run_job(spark, "sync-tables", remote).totals["rows_added"] == 0
    assert newest_version(store, TOPIC) == version
    for log in logs:
        log.close()


def test_two_syncs_started_at_once_add_each_record_once(tmp_path, spark):
    rng = random.Random(_seed("two sync-tables at once"))
    store, tiers, logs, remote = _build(tmp_path, rng.randrange(1000))
    for round_ in range(2):
        results: list = []
        errors: list = []
        gate = threading.Barrier(2)

        def sync() -> None:
            try:
                gate.wait(timeout=60)
                results.append(sync_tables.sync_topic(spark, remote, TOPIC, COMPACT, [0, 1]))
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=sync) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=500)
        assert not errors, errors
        expected = _expected_offsets(store)
        got = _offsets(spark, remote)
        assert got == expected, f"round {round_}: {len(got)} rows for {len(expected)} records"
        assert sum(r["rows_added"] for r in results) <= len(expected)
        assert _latest(spark, remote) == _expected_latest(store)
        for p in (0, 1):
            _more(rng, logs[p], tiers[p], p, rng.randint(5, 20))
    for log in logs:
        log.close()


def test_a_step_planned_from_a_stale_state_is_skipped_by_delta(tmp_path, spark):
    """A sync that planned its step, then lost the race: another sync committed the same sequence
    number with a longer range. The stale step's append is skipped and it writes nothing else."""
    rng = random.Random(_seed("stale sync step"))
    store, tiers, logs, remote = _build(tmp_path, rng.randrange(1000))
    run_job(spark, "sync-tables", remote)
    state = read_sync_state(store, TOPIC, app_id(TOPIC))
    starts = dict(state.last.nexts)
    _more(rng, logs[0], tiers[0], 0, 7)
    stale = SyncRange(state.next_seq, starts, {0: remote_records(store, 0)[-1][0] + 1, 1: starts[1]})
    _more(rng, logs[0], tiers[0], 0, 9)
    run_job(spark, "sync-tables", remote)  # commits seq state.next_seq over everything
    version = newest_version(store, TOPIC)
    out = sync_tables._run_step(spark, store, remote, TOPIC, COMPACT, stale, sync_tables._TableStates(spark),
                                compacted=True, replay=False)
    assert out == (None, 0, None)
    assert newest_version(store, TOPIC) == version
    assert _offsets(spark, remote) == _expected_offsets(store)
    assert _latest(spark, remote) == _expected_latest(store)
    # The table's newest commit carries the txn and the range of the step that won.
    actions = read_commit(store, TOPIC, version)
    assert [a["txn"]["version"] for a in actions if "txn" in a] == [stale.seq]
    for log in logs:
        log.close()
