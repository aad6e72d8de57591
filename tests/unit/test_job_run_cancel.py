"""Cancelling a job run (tiering/job_runs.cancel_run) and the runner honouring it (spark_log/runs.py),
on a real filesystem remote tier; the job itself is a stand-in that reports progress (no JVM)."""

from __future__ import annotations

import threading
import time

import pytest

from lakelog.spark_log import jobs as spark_jobs
from lakelog.spark_log import runs
from lakelog.tiering import job_runs as jr
from lakelog.tiering.stores import open_store


@pytest.fixture
def remote(tmp_path):
    return (tmp_path / "remote").as_uri()


@pytest.fixture
def store(remote):
    s = open_store(remote)
    yield s
    s.close()


def test_a_queued_run_is_cancelled_at_once_and_no_scheduler_takes_it(store):
    run = jr.queue_run(store, "retention", None, "User:alice")
    cancelled, pending = jr.cancel_run(store, run.id, "User:bob")
    assert pending is False and cancelled.state is jr.RunState.CANCELLED
    stored, _ = jr.read_run(store, run.id)
    assert stored.state is jr.RunState.CANCELLED and stored.finished_ms is not None
    assert "cancelled by User:bob" in stored.log[-1]
    assert jr.queued_runs(store) == [] and jr.claim_run(store, run.id, "scheduler") is None
    with pytest.raises(jr.RunFinishedError, match="already finished \\(CANCELLED\\)"):
        jr.cancel_run(store, run.id, "User:bob")
    with pytest.raises(KeyError):
        jr.cancel_run(store, jr.new_run_id(), "User:bob")


def test_a_claim_racing_the_cancel_turns_it_into_a_request_for_the_runner(store, monkeypatch):
    run = jr.queue_run(store, "retention", None, "User:alice")
    real_read = jr.read_run
    raced = []

    def read_then_claim(s, run_id):  # a scheduler claims the run between the cancel's read and its write
        found = real_read(s, run_id)
        if not raced:
            raced.append(None)
            monkeypatch.setattr(jr, "read_run", real_read)  # the claim and every later read: the real one
            raced[0] = jr.claim_run(s, run_id, "scheduler")
            monkeypatch.setattr(jr, "read_run", read_then_claim)
        return found

    monkeypatch.setattr(jr, "read_run", read_then_claim)
    current, pending = jr.cancel_run(store, run.id, "User:bob")
    assert raced[0] is not None and pending is True and current.state is jr.RunState.RUNNING
    assert jr.cancel_requests(store) == {run.id}
    assert jr.read_cancel_request(store, run.id)["by"] == "User:bob"
    stored, _ = real_read(store, run.id)
    assert stored.state is jr.RunState.RUNNING  # the runner's record is left to the runner


def test_a_lost_run_is_cancelled_at_once(store):
    run = jr.queue_run(store, "compaction", None, "User:alice")
    claimed = jr.claim_run(store, run.id, "scheduler")
    claimed.heartbeat_ms = claimed.started_ms = jr.now_ms() - jr.LOST_AFTER_MS - 1000
    jr.write_run(store, claimed)
    assert claimed.view()["state"] == "LOST"
    cancelled, pending = jr.cancel_run(store, run.id, "User:bob")
    assert pending is False and cancelled.state is jr.RunState.CANCELLED
    assert "its runner had stopped reporting" in cancelled.log[-1]


class _FakeContext:
    def __init__(self) -> None:
        self.cancels = 0

    def cancelAllJobs(self) -> None:  # noqa: N802 (Spark's name)
        self.cancels += 1


class _FakeSpark:
    def __init__(self) -> None:
        self.sparkContext = _FakeContext()


def test_the_scheduler_stops_a_running_run_asked_to_cancel_and_records_it(remote, store, monkeypatch):
    monkeypatch.setattr(jr, "HEARTBEAT_MS", 50)
    started = threading.Event()

    def endless_job(spark, job, remote, *, progress=None, on_plan=None, **kwargs):
        on_plan(10)
        started.set()
        deadline = time.monotonic() + 60
        done = 0
        while time.monotonic() < deadline:  # a job reporting its tasks as they finish, as _run_tasks does
            progress(done)
            time.sleep(0.02)
        raise AssertionError("the run was not stopped")

    monkeypatch.setattr(spark_jobs, "run_job", endless_job)
    run = jr.queue_run(store, "compaction", None, "User:alice")
    spark = _FakeSpark()
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("ran", runs.serve_queued(spark, remote, "scheduler-1")))
    t.start()
    assert started.wait(30)
    current, pending = jr.cancel_run(store, run.id, "User:bob")
    assert pending is True and current.state is jr.RunState.RUNNING
    assert current.view(cancel_requested=pending)["cancel_requested"] is True
    t.join(30)
    assert not t.is_alive() and out["ran"] == 1
    stored, _ = jr.read_run(store, run.id)
    assert stored.state is jr.RunState.CANCELLED and stored.finished_ms is not None and stored.error == ""
    assert any("cancel asked by User:bob" in line for line in stored.log)
    assert stored.log[-1].endswith("cancelled by User:bob")
    assert spark.sparkContext.cancels >= 1  # its Spark jobs were cancelled
    assert jr.cancel_requests(store) == set()  # the request is gone with the run
    assert stored.view(cancel_requested=True)["cancel_requested"] is False  # finished: nothing pending


def test_a_run_that_finishes_first_stays_succeeded_and_its_late_cancel_is_cleared(remote, store, monkeypatch):
    from lakelog.spark_log.jobs import JobSummary

    def quick_job(spark, job, remote, *, progress=None, on_plan=None, **kwargs):
        on_plan(1)
        asked.append(jr.cancel_run(store, run.id, "User:bob"))  # asked while it finishes
        progress(1)
        return JobSummary(job=job, remote=remote, topics=["t"], seconds=0.1, totals={"n": 1}, rows=[])

    asked = []
    monkeypatch.setattr(jr, "HEARTBEAT_MS", 60_000)  # no heartbeat sees it before the end
    monkeypatch.setattr(spark_jobs, "run_job", quick_job)
    run = jr.queue_run(store, "retention", None, "User:alice")
    assert runs.serve_queued(_FakeSpark(), remote, "scheduler-1") == 1
    stored, _ = jr.read_run(store, run.id)
    assert asked[0][1] is True  # it was running: a request for the runner
    assert stored.state is jr.RunState.SUCCEEDED and jr.cancel_requests(store) == set()
