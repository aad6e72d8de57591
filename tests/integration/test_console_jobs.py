"""The console's jobs page in a real browser, with a real Spark run: a run asked for in the browser
is claimed by a real `lakelog jobs schedule` (local Spark) and its outcome, figures and log show;
a run by `lakelog jobs run` is listed too. The endpoint's refusals are Confluent-style errors.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from lakelog.tiering.remote_scan import load_manifest, open_remote
from tests.support.browser import launch, screenshot, watch
from tests.support.nodes import LAKELOG, Cluster

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]  # two JVM starts and Delta writes on a busy machine
WAIT_MS = 45_000
SPARK_WAIT_MS = 900_000  # a JVM start and a Delta write on a machine at load 30-40; a pass never waits this long


def cli(url: str, *args: str, stdin: bytes | None = None) -> str:
    r = subprocess.run([LAKELOG, *args, "--bootstrap-server", url], input=stdin, capture_output=True, timeout=60)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout.decode()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("console-jobs")
    c = Cluster(root, size=1, overrides={
        "remote.storage.url": (root / "remote").as_uri(), "remote.log.manager.task.interval.ms": "200",
        "remote.log.metadata.max.age.ms": "0"})
    c.remote = (root / "remote").as_uri()
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        b = launch(p)
        try:
            yield b
        finally:
            b.close()


def tiered_records(remote: str, topic: str) -> int:
    store = open_remote(remote)
    try:
        m = load_manifest(store, topic, 0)
        return sum(s.end_offset - s.base_offset + 1 for s in m.copy_finished)
    finally:
        store.close()


def test_the_jobs_endpoint_refuses_bad_input_confluent_style(cluster):
    url = cluster.node(1).url
    r = httpx.post(url + "/jobs/runs", json={"job": "vacuum"})
    assert r.status_code == 422 and r.json()["error_code"] == 42201 and "unknown job 'vacuum'" in r.json()["message"]
    r = httpx.post(url + "/jobs/runs", json={"job": "retention", "topics": ["no spaces"]})
    assert r.status_code == 422 and "may only contain" in r.json()["message"]
    r = httpx.post(url + "/jobs/runs", json={"job": "retention", "topics": []})
    assert r.status_code == 422 and "1 to 100 names" in r.json()["message"]
    assert httpx.get(url + "/jobs/runs/0000000000000-deadbeef").json()["error_code"] == 40410
    assert httpx.get(url + "/jobs/runs/../../etc").status_code == 404
    r = httpx.get(url + "/jobs/runs", params={"job": "nope"})
    assert r.status_code == 422 and r.json()["error_code"] == 42201
    assert httpx.get(url + "/jobs/runs", params={"limit": 0}).status_code == 422


def test_a_run_started_in_the_browser_is_run_by_the_scheduler_and_shows_its_figures(browser, cluster, tmp_path):
    url = cluster.node(1).url
    cli(url, "topics", "create", "pageviews", "--partitions", "1", "--config", "remote.storage.enable=true",
        "--config", "segment.bytes=2048")
    cli(url, "produce", "pageviews", "--partition", "0", "--batch-size", "10",
        stdin="\n".join(f"view-{i:05d}-" + "p" * 80 for i in range(200)).encode())
    w = watch(browser, url)
    p = w.page
    try:
        p.goto("/#/jobs")
        expect(p.locator("#scheduler")).to_contain_text("No scheduler is running", timeout=WAIT_MS)
        expect(p.locator("#no-runs")).to_be_visible()
        # Checked before sending: a bad topic name.
        form = p.locator("#start-run")
        form.locator("input[name=topics]").fill("pageviews, page/views")
        form.locator("button[type=submit]").click()
        expect(form.locator(".error")).to_contain_text("page/views is not a topic name")
        expect(p.locator("#no-runs")).to_be_visible()
        # Wait until every sealed segment is in the remote tier (all records below the active
        # segment's base offset): sync-tables copies what is there, and nothing rolls after the produce.
        active_base = max(int(f.stem) for f in cluster.root.glob("node-1/**/pageviews-0/*.log"))
        assert active_base > 0
        for _ in range(600):
            if tiered_records(cluster.remote, "pageviews") == active_base:
                break
            p.wait_for_timeout(200)
        expected = tiered_records(cluster.remote, "pageviews")
        assert expected == active_base
        form.locator("select[name=job]").select_option("sync-tables")
        form.locator("input[name=topics]").fill("pageviews")
        form.locator("button[type=submit]").click()
        expect(form.locator(".done")).to_contain_text("asked for sync-tables", timeout=WAIT_MS)
        row = p.locator("#runs tbody tr").first
        expect(row).to_have_attribute("data-state", "QUEUED", timeout=WAIT_MS)
        run_id = row.get_attribute("data-run")
        queued = httpx.get(f"{url}/jobs/runs/{run_id}").json()
        assert queued["job"] == "sync-tables" and queued["topics"] == ["pageviews"]
        assert queued["requested_by"] == "User:ANONYMOUS"

        env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
        sched = subprocess.Popen([LAKELOG, "jobs", "schedule", "--remote", cluster.remote, "--poll-ms", "500",
                                  *[a for j in ("compaction", "retention", "rebuild-index", "sync-tables")
                                    for a in ("--every", f"{j}=0")]],
                                 cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 start_new_session=True)
        try:
            expect(p.locator("#scheduler")).to_contain_text("is running", timeout=SPARK_WAIT_MS)
            expect(row).to_have_attribute("data-state", "SUCCEEDED", timeout=SPARK_WAIT_MS)
            expect(p.locator("#scheduler")).to_contain_text("is running")  # it beats while a run holds it
            screenshot(p, tmp_path, "jobs")
            p.click(f"#runs a:text('{run_id}')")
            expect(p.locator("#run-state")).to_have_text("succeeded", timeout=WAIT_MS)
            expect(p.locator("#run-tasks")).to_have_text("1 / 1")
            done = httpx.get(f"{url}/jobs/runs/{run_id}").json()
            assert done["rows"][0]["topic"] == "pageviews" and done["rows"][0]["rows_added"] == expected > 0
            expect(p.locator("#run-totals")).to_contain_text(f"rows added {expected:,}")
            expect(p.locator("#run-rows")).to_contain_text("pageviews")
            expect(p.locator("#run-log")).to_contain_text("planned 1 task(s)")
            expect(p.locator("#run-log")).to_contain_text("succeeded in")
            screenshot(p, tmp_path, "job-run")
        finally:
            sched.send_signal(signal.SIGTERM)  # the scheduler stops its Spark session itself
            _, err = sched.communicate(timeout=120)
            try:
                os.killpg(sched.pid, signal.SIGKILL)  # anything of its group left behind
            except ProcessLookupError:
                pass
        assert sched.returncode == 0, err.decode()[-2000:]

        # A run by `lakelog jobs run` is recorded too; sync-tables is incremental: nothing new to add.
        r = subprocess.run([LAKELOG, "jobs", "run", "sync-tables", "--remote", cluster.remote, "--topic", "pageviews"],
                           cwd=tmp_path, env=env, capture_output=True, timeout=SPARK_WAIT_MS / 1000)
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        p.goto("/#/jobs")
        expect(p.locator("#runs tbody tr")).to_have_count(2, timeout=WAIT_MS)
        first = p.locator("#runs tbody tr").first
        expect(first).to_have_attribute("data-state", "SUCCEEDED")
        expect(first).to_contain_text("lakelog jobs run@")
        expect(first.locator("td.figures")).to_contain_text("rows added 0")
        assert w.problems == []
    finally:
        p.close()


def test_a_queued_run_is_cancelled_from_the_browser_and_no_scheduler_runs_it(browser, cluster, tmp_path):
    url = cluster.node(1).url
    run = httpx.post(url + "/jobs/runs", json={"job": "retention", "topics": ["pageviews"]}).json()
    assert run["state"] == "QUEUED" and run["cancel_requested"] is False
    w = watch(browser, url)
    p = w.page
    try:
        p.on("dialog", lambda d: d.accept())  # "Cancel run ...?"
        p.goto(f"/#/jobs/{run['id']}")
        expect(p.locator("#run-state")).to_have_text("queued", timeout=WAIT_MS)
        p.click(f"button[data-cancel='{run['id']}']")
        expect(p.locator("#run-state")).to_have_text("cancelled", timeout=WAIT_MS)
        expect(p.locator("#run-log")).to_contain_text("cancelled by User:ANONYMOUS")
        expect(p.locator(f"button[data-cancel='{run['id']}']")).to_have_count(0)  # nothing left to cancel
        screenshot(p, tmp_path, "job-cancelled")
        p.goto("/#/jobs")
        expect(p.locator(f"#runs tr[data-run='{run['id']}']")).to_have_attribute("data-state", "CANCELLED",
                                                                                 timeout=WAIT_MS)
        assert w.problems == []
    finally:
        p.close()
    # Cancelling it again, or a run that does not exist: Confluent-style refusals.
    again = httpx.post(f"{url}/jobs/runs/{run['id']}/cancel")
    assert again.status_code == 409 and again.json()["error_code"] == 40903
    assert "already finished (CANCELLED)" in again.json()["message"]
    assert httpx.post(f"{url}/jobs/runs/0000000000000-deadbeef/cancel").json()["error_code"] == 40410
    # A scheduler never takes it.
    from lakelog.tiering import job_runs

    store = open_remote(cluster.remote)
    try:
        assert job_runs.queued_runs(store) == [] and job_runs.claim_run(store, run["id"], "test") is None
    finally:
        store.close()
