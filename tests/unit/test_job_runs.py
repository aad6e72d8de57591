"""Job run records in the remote tier (tiering/job_runs.py): format, claim by CAS, listing, pruning."""

from __future__ import annotations

import json

import pytest

from lakelog.tiering import job_runs as jr
from lakelog.tiering.errors import RemoteCorruptionError
from lakelog.tiering.stores import open_store


@pytest.fixture
def store(tmp_path):
    s = open_store((tmp_path / "remote").as_uri())
    yield s
    s.close()


def test_a_record_round_trips_and_a_damaged_or_unknown_one_is_refused():
    run = jr.JobRun(jr.new_run_id(1_700_000_000_000), "compaction", ["orders"], jr.RunState.RUNNING, "cli", 1,
                    started_ms=2, tasks_total=4, tasks_done=1, totals={"records_read": 9})
    run.add_log("planned 4 task(s)")
    data = jr.encode_run(run)
    assert jr.decode_run(data) == run
    doc = json.loads(data)
    doc["run"]["tasks_done"] = 3
    with pytest.raises(RemoteCorruptionError, match="CRC-32C mismatch"):
        jr.decode_run(json.dumps(doc).encode(), "k")
    doc = json.loads(data)
    doc["version"] = 2
    with pytest.raises(RemoteCorruptionError, match="unsupported version 2"):
        jr.decode_run(json.dumps(doc).encode(), "k")


def test_transitions_only_go_forward():
    run = jr.JobRun(jr.new_run_id(), "retention")
    run.move(jr.RunState.RUNNING)
    run.move(jr.RunState.RUNNING)  # a repeated transition is allowed (retries)
    run.move(jr.RunState.SUCCEEDED)
    with pytest.raises(ValueError, match="SUCCEEDED -> RUNNING"):
        run.move(jr.RunState.RUNNING)


def test_a_queued_run_is_claimed_by_exactly_one_runner(store):
    run = jr.queue_run(store, "sync-tables", ["a", "b"], "User:alice")
    assert jr.queued_runs(store) == [run.id]
    first = jr.claim_run(store, run.id, "scheduler-1")
    second = jr.claim_run(store, run.id, "scheduler-2")
    assert first is not None and first.state is jr.RunState.RUNNING and first.runner == "scheduler-1"
    assert second is None
    stored, _ = jr.read_run(store, run.id)
    assert stored.runner == "scheduler-1" and stored.requested_by == "User:alice"
    assert jr.queued_runs(store) == []


def test_requests_are_checked():
    with pytest.raises(ValueError, match="unknown job 'vacuum'"):
        jr.check_request("vacuum", None)
    with pytest.raises(ValueError, match="1 to 100 names"):
        jr.check_request("retention", [])
    with pytest.raises(ValueError, match="1 to 100 names"):
        jr.check_request("retention", [f"t{i}" for i in range(101)])
    with pytest.raises(ValueError, match="not a run id"):
        jr.run_key("../etc")


def test_listing_is_newest_first_filtered_and_pruning_keeps_the_newest(store):
    ids = []
    for i, job in enumerate(["compaction", "retention", "compaction", "sync-tables"]):
        run = jr.JobRun(jr.new_run_id(1_000_000 + i), job, None, jr.RunState.SUCCEEDED, "cli", 1_000_000 + i)
        jr.write_run(store, run)
        ids.append(run.id)
    assert [r.id for r in jr.list_runs(store)] == ids[::-1]
    assert [r.id for r in jr.list_runs(store, job="compaction")] == [ids[2], ids[0]]
    assert [r.id for r in jr.list_runs(store, limit=1)] == [ids[3]]
    assert jr.prune_runs(store, keep=2) == 2
    assert jr.run_ids(store) == [ids[3], ids[2]]


def test_a_silent_runner_shows_as_lost_and_rows_and_logs_are_bounded():
    run = jr.JobRun(jr.new_run_id(), "compaction", None, jr.RunState.RUNNING, "cli", 0, started_ms=1000,
                    heartbeat_ms=1000)
    assert run.view(1000 + jr.LOST_AFTER_MS)["state"] == "RUNNING"
    assert run.view(1001 + jr.LOST_AFTER_MS)["state"] == "LOST"
    assert "log" not in run.view(full=False)
    run.set_rows([{"topic": "t", "partition": i, "nested": {"dropped": True}} for i in range(jr.MAX_ROWS + 5)])
    assert len(run.rows) == jr.MAX_ROWS and run.rows_total == jr.MAX_ROWS + 5 and "nested" not in run.rows[0]
    for i in range(jr.MAX_LOG_LINES + 10):
        run.add_log(f"line {i}")
    assert len(run.log) == jr.MAX_LOG_LINES and run.log[-1].endswith(f"line {jr.MAX_LOG_LINES + 9}")


def test_the_scheduler_heartbeat_says_whether_it_is_alive(store):
    assert jr.read_scheduler(store) is None
    jr.write_scheduler_heartbeat(store, "sched@host:1", {"retention": 300.0})
    beat = jr.read_scheduler(store)
    assert beat["alive"] and beat["runner"] == "sched@host:1" and beat["intervals_s"] == {"retention": 300.0}
    assert not jr.read_scheduler(store, beat["heartbeat_ms"] + jr.SCHEDULER_GONE_AFTER_MS + 1)["alive"]
