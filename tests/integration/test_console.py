"""The web console in a real browser (Debian's Chromium driven by Playwright) on three real node
processes: every page loads with no console error and no failed request; what the CLI does shows
in the browser and what the browser does shows in the CLI; bad input is refused before it is sent
or with the node's own message; a killed node shows as down, then up again.

Screenshots land in the test's tmp folder, or in $LAKELOG_CONSOLE_SCREENSHOTS (docs/console.md
uses the ones taken with it set to docs/images/console).
"""

from __future__ import annotations

import json
import subprocess
import time

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.support.browser import launch, screenshot, watch
from tests.support.nodes import LAKELOG, Cluster

WAIT_MS = 45_000  # generous: the machine may be busy; a pass never waits this long


def cli(url: str, *args: str, stdin: bytes | None = None, env: dict | None = None) -> str:
    r = subprocess.run([LAKELOG, *args, "--bootstrap-server", url], input=stdin, capture_output=True, timeout=60,
                       env=env)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout.decode()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("console")
    c = Cluster(root, size=3, overrides={
        # Few coordinator partitions: a killed node's leader changes of 50 `__transaction_state`
        # partitions would crowd the events table the node-down test reads.
        "offsets.topic.num.partitions": "3", "transaction.state.log.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
        "remote.storage.url": (root / "remote").as_uri(), "remote.log.manager.task.interval.ms": "200",
        "remote.log.metadata.max.age.ms": "0",
        "console.download.max.records": "1000", "console.download.max.bytes": str(1 << 20),
        # Slower than FAST_CLUSTER: a browser, three nodes and the tests share a busy 2-core machine.
        "controller.quorum.election.timeout.ms": "2000", "broker.session.timeout.ms": "5000",
        "replica.lag.time.max.ms": "3000"})
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


@pytest.fixture
def page(browser, cluster):
    w = watch(browser, cluster.node(1).url)
    try:
        yield w
    finally:
        w.page.close()


def test_root_is_the_console_for_browsers_and_left_to_the_api_otherwise(cluster):
    url = cluster.node(2).url
    r = httpx.get(url + "/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="/console/app.js">' in r.text
    csp = r.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "'sha256-" in csp  # the import map, by its hash; nothing else inline
    api = httpx.get(url + "/", headers={"Accept": "application/json"})
    assert not api.headers.get("content-type", "").startswith("text/html")
    for path, ctype in (("/console/app.js", "text/javascript"), ("/console/vendor/preact.mjs", "text/javascript"),
                        ("/console/vendor/uPlot.esm.js", "text/javascript"), ("/console/style.css", "text/css")):
        r = httpx.get(url + path)
        assert r.status_code == 200 and r.headers["content-type"].startswith(ctype), path
    for path in ("/console/nope.js", "/console/../pyproject.toml", "/console/vendor/.installed"):
        assert httpx.get(url + path).status_code == 404, path
    session = httpx.get(url + "/console/session.json").json()
    assert session["authentication"] is False and session["cluster_id"] == "testcluster0000000000"


def test_every_page_loads_without_errors(page, cluster, tmp_path):
    url = cluster.node(1).url
    cli(url, "topics", "create", "clicks", "--partitions", "3")
    lines = "\n".join(f"user-{i}:{{\"n\": {i}, \"page\": \"/p/{i % 7}\"}}" for i in range(60)).encode()
    cli(url, "produce", "clicks", "--key-separator", ":", stdin=lines)
    cli(url, "consume", "clicks", "--group", "dashboards", "--from-beginning", "--max-messages", "10")
    p = page.page
    p.goto("/")
    expect(p.locator("#nodes tbody tr")).to_have_count(3, timeout=WAIT_MS)
    expect(p.locator("#nodes-up")).to_have_text("3 / 3", timeout=WAIT_MS)
    expect(p.locator("#nodes")).to_contain_text("active controller")
    for _ in range(2):  # traffic between samples: the charts have something to show
        # to partition 0, which the consume below reads: keyless records go to one sticky partition per batch
        cli(url, "produce", "clicks", "--partition", "0", stdin="\n".join(f"more-{i}" for i in range(3000)).encode())
        cli(url, "consume", "clicks", "--partition", "0", "--from-beginning", "--max-messages", "500")
        p.wait_for_timeout(2200)
    screenshot(p, tmp_path, "overview")
    p.goto("/#/topics")
    expect(p.locator("#topics tr[data-topic=clicks]")).to_contain_text("3", timeout=WAIT_MS)
    screenshot(p, tmp_path, "topics")
    p.click("#topics a:text('clicks')")
    expect(p.locator("#partitions tbody tr")).to_have_count(3, timeout=WAIT_MS)
    expect(p.locator("#configs")).to_contain_text("min.insync.replicas", timeout=WAIT_MS)
    screenshot(p, tmp_path, "topic")
    p.click("#browse")
    expect(p.locator("#records tbody tr").first).to_be_visible(timeout=WAIT_MS)
    screenshot(p, tmp_path, "messages")
    p.goto("/#/groups")
    expect(p.locator("#groups tr[data-group=dashboards]")).to_be_visible(timeout=WAIT_MS)
    p.click("#groups a:text('dashboards')")
    lag = sum(row["lag"] or 0 for row in httpx.get(f"{url}/groups/dashboards").json()["partitions"])
    assert lag > 0
    expect(p.locator("#total-lag")).to_have_text(f"{lag:,}", timeout=WAIT_MS)
    p.wait_for_timeout(2500)
    screenshot(p, tmp_path, "group")
    p.goto("/#/nowhere")
    expect(p.locator("main h1")).to_have_text("Not found")
    assert page.problems == []


def test_a_topic_created_in_the_browser_is_listed_by_the_cli(page, cluster):
    p = page.page
    p.goto("/#/topics")
    p.click("summary:text('Create a topic')")
    form = p.locator("#create-topic")
    # Refused before anything is sent: a bad name, a bad partition count.
    form.locator("input[name=name]").fill("no spaces allowed")
    form.locator("button[type=submit]").click()
    expect(form.locator(".error")).to_contain_text("a topic name is 1 to 249 letters")
    form.locator("input[name=name]").fill("from-browser")
    form.locator("input[name=partitions]").fill("zero")
    form.locator("button[type=submit]").click()
    expect(form.locator(".error")).to_contain_text("partitions must be a whole number")
    form.locator("input[name=partitions]").fill("4")
    form.locator("select[name=cleanup]").select_option("compact")
    form.locator("button[type=submit]").click()
    expect(p.locator("h1")).to_have_text("Topic from-browser", timeout=WAIT_MS)
    expect(p.locator("#partitions tbody tr")).to_have_count(4, timeout=WAIT_MS)
    assert "from-browser" in cli(cluster.node(2).url, "topics", "list").split()
    assert page.problems == []
    # The node refuses a duplicate: its own message is shown.
    page.expected_statuses.add(400)
    page.expected_statuses.add(409)
    p.goto("/#/topics")
    p.click("summary:text('Create a topic')")
    form = p.locator("#create-topic")
    form.locator("input[name=name]").fill("from-browser")
    form.locator("button[type=submit]").click()
    expect(form.locator(".error")).to_contain_text("already exists", timeout=WAIT_MS)


def test_alter_configs_add_partitions_and_delete_with_confirmation(page, cluster):
    url = cluster.node(1).url
    cli(url, "topics", "create", "doomed", "--partitions", "1")
    p = page.page
    p.goto("/#/topics/doomed")
    expect(p.locator("#partitions tbody tr")).to_have_count(1, timeout=WAIT_MS)
    alter = p.locator("#alter-config")
    alter.locator("select[name=name]").select_option("retention.ms")
    alter.locator("input[name=value]").fill("3600000")
    alter.locator("button[type=submit]").click()
    expect(alter.locator(".done")).to_contain_text("retention.ms = 3600000", timeout=WAIT_MS)
    assert "retention.ms=3600000" in cli(url, "topics", "describe", "doomed").replace(" ", "")
    add = p.locator("#add-partitions")
    add.locator("input[name=count]").fill("1")
    add.locator("button[type=submit]").click()
    expect(add.locator(".error")).to_contain_text("between 2 and")  # checked before sending
    add.locator("input[name=count]").fill("3")
    add.locator("button[type=submit]").click()
    expect(p.locator("#partitions tbody tr")).to_have_count(3, timeout=WAIT_MS)
    p.click("#delete")
    confirm = p.locator("#delete-topic")
    confirm.locator("input[name=confirm]").fill("wrong-name")
    confirm.locator("button[type=submit]").click()
    expect(confirm.locator(".error")).to_contain_text("type doomed to confirm")
    assert "doomed" in cli(url, "topics", "list").split()
    confirm.locator("input[name=confirm]").fill("doomed")
    confirm.locator("button[type=submit]").click()
    expect(p.locator("h1")).to_have_text("Topics", timeout=WAIT_MS)
    assert "doomed" not in cli(url, "topics", "list").split()
    assert page.problems == []


def test_records_from_the_cli_show_in_the_browser_and_its_live_tail(page, cluster, tmp_path):
    url = cluster.node(3).url
    cli(url, "topics", "create", "events", "--partitions", "2")
    cli(url, "produce", "events", "--partition", "1",
        stdin="\n".join(f'{{"event": {i}}}' for i in range(45)).encode())
    big = "x" * 5000
    cli(url, "produce", "events", "--partition", "1", stdin=big.encode())
    p = page.page
    p.goto("/#/topics/events/messages")
    p.select_option("#partition", "1")
    expect(p.locator("#records tr[data-offset='0']")).to_contain_text('{"event":0}', timeout=WAIT_MS)
    expect(p.locator("#records tbody tr")).to_have_count(20)
    p.click("#next")
    expect(p.locator("#records tbody tr").first).to_have_attribute("data-offset", "20", timeout=WAIT_MS)
    p.click("#next")
    expect(p.locator("#records tr[data-offset='45']")).to_contain_text("all 4.9 KiB", timeout=WAIT_MS)  # truncated
    p.click("#prev")
    expect(p.locator("#records tbody tr").first).to_have_attribute("data-offset", "20", timeout=WAIT_MS)
    with p.expect_download() as got:
        p.click("#download")
    saved = tmp_path / "page.jsonl"
    got.value.save_as(saved)
    assert got.value.suggested_filename == "events-1-20-39.jsonl"
    rows = [json.loads(line) for line in saved.read_text().splitlines()]
    assert [r["offset"] for r in rows] == list(range(20, 40))
    assert rows[0]["value"] == '{"event": 20}' and rows[0]["key"] is None
    p.select_option("#format", "hex")
    expect(p.locator("#records tr[data-offset='20']")).to_contain_text("7b 22 65 76 65 6e 74 22")  # {"event"
    p.select_option("#format", "auto")
    seek = p.locator("#seek")
    seek.locator("input[name=at]").fill("-3")
    seek.locator("button[type=submit]").click()
    expect(seek.locator(".error")).to_contain_text("offset must be between 0")
    seek.locator("input[name=at]").fill("40")
    seek.locator("button[type=submit]").click()
    expect(p.locator("#records tbody tr").first).to_have_attribute("data-offset", "40", timeout=WAIT_MS)

    p.check("#live")
    expect(p.locator("#tail")).to_be_visible()
    p.wait_for_timeout(1500)  # the tail's first long-poll is waiting at the end of the partition
    cli(url, "produce", "events", "--partition", "1", stdin=b"tailed-1\ntailed-2")
    expect(p.locator("#tail #records")).to_contain_text("tailed-2", timeout=WAIT_MS)
    expect(p.locator("#tail #records tbody tr")).to_have_count(2)
    screenshot(p, tmp_path, "tail")
    p.uncheck("#live")

    # Produce a test record from the browser: it reads back with the CLI.
    p.click("summary:text('Produce a test record')")
    form = p.locator("#produce")
    form.locator("select[name=partition]").select_option("0")
    form.locator("input[name=key]").fill("k1")
    form.locator("textarea[name=value]").fill("from the browser")
    form.locator("textarea[name=headers]").fill("no equals sign")
    form.locator("button[type=submit]").click()
    expect(form.locator(".error")).to_contain_text("a header is name=value")
    form.locator("textarea[name=headers]").fill("source=console")
    form.locator("button[type=submit]").click()
    expect(form.locator(".done")).to_contain_text("partition 0, offset 0", timeout=WAIT_MS)
    out = cli(url, "consume", "events", "--partition", "0", "--from-beginning", "--max-messages", "1", "--print-key")
    assert out.split() == ["k1", "from", "the", "browser"] or out.strip().endswith("from the browser"), out
    assert page.problems == []


def test_a_consumer_groups_lag_shows_and_a_reset_shows_its_dry_run_first(page, cluster):
    url = cluster.node(1).url
    cli(url, "topics", "create", "orders", "--partitions", "1")
    cli(url, "produce", "orders", stdin="\n".join(f"o{i}" for i in range(30)).encode())
    cli(url, "consume", "orders", "--group", "billing", "--from-beginning", "--max-messages", "30")
    p = page.page
    p.goto("/#/groups/billing")
    expect(p.locator("#total-lag")).to_have_text("0", timeout=WAIT_MS)
    cli(url, "produce", "orders", stdin="\n".join(f"late{i}" for i in range(12)).encode())
    expect(p.locator("#total-lag")).to_have_text("12", timeout=WAIT_MS)  # the lag rises as records arrive
    chart = p.locator("figure[data-chart=Lag]")
    expect(chart).to_have_attribute("data-last", "12", timeout=WAIT_MS)
    p.click("summary:text('Reset offsets')")
    plan = p.locator("#reset-plan")
    plan.locator("select[name=strategy]").select_option("offset")
    plan.locator("input[name=arg]").fill("ten")
    plan.locator("button[type=submit]").click()
    expect(plan.locator(".error")).to_contain_text("offset must be a whole number")
    plan.locator("input[name=arg]").fill("5")
    plan.locator("button[type=submit]").click()
    cells = p.locator("#reset-preview tbody tr td")
    expect(cells).to_have_text(["orders-0", "30", "5"], timeout=WAIT_MS)  # committed 30, would become 5
    assert json.loads(httpx.get(f"{url}/groups/billing").text)["partitions"][0]["current_offset"] == 30  # dry run
    p.click("#reset-execute button[type=submit]")
    expect(p.locator("#total-lag")).to_have_text("37", timeout=WAIT_MS)
    expect(chart).to_have_attribute("data-last", "37", timeout=WAIT_MS)
    cli(url, "consume", "orders", "--group", "billing", "--max-messages", "20")  # from offset 5: commits 25
    expect(p.locator("#total-lag")).to_have_text("17", timeout=WAIT_MS)  # and falls as the group consumes
    expect(chart).to_have_attribute("data-last", "17", timeout=WAIT_MS)
    assert int(chart.get_attribute("data-points")) >= 4
    assert "billing" in cli(url, "groups", "list")
    assert page.problems == []


def test_the_remote_tier_of_a_topic_shows_what_is_tiered_and_what_waits(page, cluster, tmp_path):
    url = cluster.node(1).url
    cli(url, "topics", "create", "history", "--partitions", "1", "--config", "remote.storage.enable=true",
        "--config", "segment.bytes=2048")
    cli(url, "topics", "create", "plain", "--partitions", "1")
    cli(url, "produce", "history", "--partition", "0", "--batch-size", "10", stdin="\n".join(f"row-{i:05d}-" + "z" * 80
                                                                       for i in range(200)).encode())
    p = page.page
    p.goto("/#/topics/history")
    row = p.locator("#partitions tr[data-partition='0']")
    expect(row).to_contain_text("segment(s), offsets 0–", timeout=WAIT_MS)  # sealed segments uploaded
    expect(p.locator("#partitions thead")).to_contain_text("Waiting to tier")
    screenshot(p, tmp_path, "remote")
    p.goto("/#/topics")
    expect(p.locator("#topics tr[data-topic=history] td").nth(7)).not_to_have_text("0 B", timeout=WAIT_MS)
    expect(p.locator("#topics tr[data-topic=plain] td").nth(7)).to_have_text("not tiered")
    assert page.problems == []


def test_the_partition_table_shows_open_transactions_beside_the_lso_and_hw(page, cluster, tmp_path):
    url = cluster.node(1).url
    cli(url, "topics", "create", "ledger", "--partitions", "2", "--replication-factor", "3")
    cli(url, "produce", "ledger", "--partition", "0", stdin=b"\n".join(b"plain-%d" % i for i in range(5)))
    http = httpx.Client(base_url=url, timeout=60)
    txns = f"/v3/clusters/{http.get('/v3/clusters').json()['data'][0]['cluster_id']}/transactions"
    r = http.post(txns, json={"transactional_id": "console-ledger"})
    assert r.status_code == 200, r.text
    ids = {"producer_id": r.json()["producer_id"], "producer_epoch": r.json()["producer_epoch"]}
    r = http.post("/topics/ledger/partitions/0", headers={"Content-Type": "application/vnd.kafka.json.v2+json"},
                  json={"transactional_id": "console-ledger", **ids, "sequence": 0,
                        "records": [{"value": {"n": i}} for i in range(3)]})
    assert r.status_code == 200, r.text
    p = page.page
    p.goto("/#/topics/ledger")
    head = p.locator("#partitions thead th")
    expect(head.nth(6)).to_have_text("High watermark", timeout=WAIT_MS)
    expect(head.nth(7)).to_have_text("Last stable")
    expect(head.nth(8)).to_have_text("Open transactions")
    row = p.locator("#partitions tr[data-partition='0'] td")
    # Open: the LSO stays at the transaction's first offset (5), below the HW (8), and is flagged.
    expect(row.nth(8)).to_have_text("1", timeout=WAIT_MS)
    expect(row.nth(6)).to_have_text("8", timeout=WAIT_MS)
    expect(row.nth(7)).to_have_text("5")
    expect(row.nth(7)).to_have_class("warn")
    expect(p.locator("#partitions tr[data-partition='1'] td").nth(8)).to_have_text("0")
    screenshot(p, tmp_path, "open-transaction")
    r = http.post(f"{txns}/console-ledger:commit", json=ids)
    assert r.status_code == 200, r.text
    p.goto("/#/topics")
    p.goto("/#/topics/ledger")
    # Committed: the marker (offset 8) is below the HW, no transaction is open, LSO = HW.
    expect(row.nth(8)).to_have_text("0", timeout=WAIT_MS)
    expect(row.nth(6)).to_have_text("9", timeout=WAIT_MS)
    expect(row.nth(7)).to_have_text("9")
    expect(row.nth(7)).not_to_have_class("warn")
    http.close()
    assert page.problems == []


def test_a_killed_node_shows_as_down_then_up_again_with_the_cluster_events(page, cluster, tmp_path):
    url = cluster.node(1).url
    cli(url, "topics", "create", "failover", "--partitions", "3", "--replication-factor", "3")
    leaders = {p["partition"]: p["leader"] for p in httpx.get(f"{url}/stats/topics/failover").json()["partitions"]}
    led_by_3 = [p for p, leader in leaders.items() if leader == 3]
    assert led_by_3  # one partition in three has node 3 first (round-robin placement)
    p = page.page
    p.goto("/")
    expect(p.locator("#nodes-up")).to_have_text("3 / 3", timeout=WAIT_MS)
    events = p.locator("#events")
    expect(events.locator("tr[data-kind=topic_created]", has_text="topic failover created: 3 partition(s), "
                          "replication factor 3")).to_have_count(1, timeout=WAIT_MS)
    # While the cluster moves leaderships (and the controller, when node 3 held it) a node may answer
    # 503 "not ready" for a moment: the page keeps its last figures and polls again.
    page.expected_statuses.add(503)
    cluster.node(3).kill()
    try:
        expect(p.locator("#nodes tr[data-node='3'] .badge")).to_have_text("down", timeout=WAIT_MS)
        expect(p.locator("#nodes-up")).to_have_text("2 / 3")
        expect(events.locator("tr[data-kind=node_fenced]", has_text="node 3 fenced").first).to_be_visible(
            timeout=WAIT_MS)
        moved = f"failover-{led_by_3[0]}: leader node 3 -> node"
        expect(events.locator("tr[data-kind=leader_changed]", has_text=moved).first).to_be_visible(timeout=WAIT_MS)
        expect(events.locator("tr[data-kind=isr_shrunk]", has_text="(out: 3)").first).to_be_visible(timeout=WAIT_MS)
        screenshot(p, tmp_path, "node-down")
    finally:  # the module's later tests need all three nodes, whatever happened here
        cluster.node(3).start(timeout_s=60)
    expect(p.locator("#nodes tr[data-node='3'] .badge")).to_have_text("up", timeout=WAIT_MS)
    expect(p.locator("#nodes-up")).to_have_text("3 / 3", timeout=WAIT_MS)
    expect(events.locator("tr[data-kind=node_restarted]", has_text="node 3 registered again").first).to_be_visible(
        timeout=WAIT_MS)
    expect(events.locator("tr[data-kind=isr_expanded]", has_text="(in: 3)").first).to_be_visible(timeout=WAIT_MS)
    # Node 3 was SIGKILLed and restarted: the events it saw before are still its own (its events file),
    # numbered before the ones it has seen since.
    own = httpx.get(f"{cluster.node(3).url}/stats/events", params={"limit": 1000}).json()
    created = [e for e in own["events"] if e["kind"] == "topic_created" and e.get("topic") == "failover"]
    assert len(created) == 1 and own["since_ms"] <= created[0]["time_ms"], own
    assert all(e["seq"] > created[0]["seq"] for e in own["events"] if e["time_ms"] > created[0]["time_ms"])
    # What the page shows is what the endpoint answers: newest first, seq growing.
    doc = httpx.get(f"{url}/stats/events", params={"limit": 1000}).json()
    seqs = [e["seq"] for e in doc["events"]]
    assert doc["served_by"] == 1 and seqs == sorted(seqs, reverse=True) and len(set(seqs)) == len(seqs)
    assert httpx.get(f"{url}/stats/events", params={"limit": 0}).json()["error_code"] == 42201
    p.locator("h2:text('Recent cluster events')").scroll_into_view_if_needed()
    screenshot(p, tmp_path, "events")
    assert page.problems == []


def test_thousands_of_topics_are_paged(page, cluster):
    url = cluster.node(1).url
    cid = "testcluster0000000000"
    with httpx.Client(base_url=url, timeout=60) as c:
        for i in range(120):
            for _ in range(100):  # a node answers 503 (Retry-After) while it re-confirms its session
                r = c.post(f"/v3/clusters/{cid}/topics", json={"topic_name": f"bulk-{i:04d}", "partitions_count": 1,
                                                              "replication_factor": 1})
                if r.status_code != 503:
                    break
                time.sleep(0.2)
            assert r.status_code == 201, r.text
    p = page.page
    p.goto("/#/topics")
    expect(p.locator("#topics tbody tr")).to_have_count(50, timeout=WAIT_MS)
    p.fill("input[type=search]", "bulk-")
    expect(p.locator(".pager span")).to_have_text("1–50 of 120", timeout=WAIT_MS)
    p.click(".pager button:text('Next ▶')")
    p.click(".pager button:text('Next ▶')")
    expect(p.locator(".pager span")).to_have_text("101–120 of 120", timeout=WAIT_MS)
    expect(p.locator("#topics tbody tr")).to_have_count(20)
    expect(p.locator("#topics tbody tr").first).to_have_attribute("data-topic", "bulk-0100")
    assert page.problems == []


def test_a_fresh_lakelog_up_shows_its_three_nodes(browser, tmp_path):
    from tests.integration.test_launcher import Launcher

    up = Launcher(tmp_path)
    try:
        up.wait_ready()
        assert f"Web console: {up.url}/" in up.output()
        w = watch(browser, up.url)
        try:
            w.page.goto("/")
            expect(w.page.locator("#nodes-up")).to_have_text("3 / 3", timeout=WAIT_MS)
            w.page.goto("/#/topics")
            expect(w.page.locator("#no-topics")).to_have_text("No topics yet: create one above.", timeout=WAIT_MS)
            w.page.goto("/#/groups")
            expect(w.page.locator("main")).to_contain_text("No consumer groups yet", timeout=WAIT_MS)
            assert w.problems == []
        finally:
            w.page.close()
    finally:
        up.close()


# ------------------------------------------------------------------------------ with security on

PASSWORDS = {"admin": "admin-pw-Console1", "reader": "reader-pw-Console2"}


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """One node with authentication and the authorizer; User:reader may describe and read, nothing more."""
    from lakelog.ingest_api.security.cluster_auth import ClusterAuth
    from tests.support.nodes import start_node

    secret = "console-test-cluster-secret-0123"
    node = start_node(tmp_path_factory.mktemp("secure"), **{
        "authentication.enabled": "true", "authorizer.enabled": "true", "super.users": "User:admin",
        "cluster.secret": secret, "offsets.topic.num.partitions": "1"})
    try:
        with httpx.Client(base_url=node.url, auth=ClusterAuth(secret.encode(), 0, principal="User:__cluster"), timeout=30) as root:
            cid = root.get("/v3/clusters").json()["data"][0]["cluster_id"]
            for name, pw in PASSWORDS.items():
                assert root.post(f"/v3/clusters/{cid}/users", json={"name": name, "password": pw}).status_code == 201
            assert root.post(f"/v3/clusters/{cid}/topics", json={"topic_name": "ledger", "partitions_count": 1}
                             ).status_code == 201
            for rtype, name, op in (("CLUSTER", "kafka-cluster", "DESCRIBE"), ("TOPIC", "*", "DESCRIBE"),
                                    ("TOPIC", "*", "READ"), ("GROUP", "*", "DESCRIBE")):
                r = root.post(f"/v3/clusters/{cid}/acls", json={
                    "principal": "User:reader", "resource_type": rtype, "resource_name": name,
                    "pattern_type": "LITERAL", "operation": op, "permission": "ALLOW"})
                assert r.status_code == 201, r.text
            key = root.post(f"/v3/clusters/{cid}/api-keys", json={"principal": "User:reader"}).json()["api_key"]
        node.cluster_id, node.reader_key = cid, key
        yield node
    finally:
        try:
            node.stop()
        finally:
            node.kill()


def _login(p, user: str, password: str) -> None:
    form = p.locator("#login")
    form.locator("input[name=user]").fill(user)
    form.locator("input[name=password]").fill(password)
    form.locator("button[type=submit]").click()


def test_with_security_a_wrong_password_is_refused_and_a_reader_cannot_delete(browser, secure, tmp_path):
    w = watch(browser, secure.url)
    p = w.page
    try:
        p.goto("/")
        expect(p.locator("#login")).to_be_visible(timeout=WAIT_MS)
        assert w.problems == []  # the page knew to ask first: no request was refused
        screenshot(p, tmp_path, "login")
        w.expected_statuses.add(401)
        _login(p, "reader", "not-the-password")
        expect(p.locator("#login .error")).to_contain_text("authentication failed", timeout=WAIT_MS)
        _login(p, "reader", PASSWORDS["reader"])
        expect(p.locator("#nodes-up")).to_have_text("1 / 1", timeout=WAIT_MS)
        expect(p.locator("header .who")).to_contain_text("reader")
        p.goto("/#/topics/ledger")
        expect(p.locator("#partitions tbody tr")).to_have_count(1, timeout=WAIT_MS)
        w.expected_statuses.add(403)
        p.click("#delete")
        p.locator("#delete-topic input[name=confirm]").fill("ledger")
        p.locator("#delete-topic button[type=submit]").click()
        expect(p.locator("#delete-topic .error")).to_contain_text("User:reader is not authorized to DELETE",
                                                                  timeout=WAIT_MS)
        p.goto("/#/security")
        expect(p.locator("#users")).to_contain_text("reader", timeout=WAIT_MS)  # DESCRIBE on the cluster: may look
        form = p.locator("#create-user")
        form.locator("input[name=name]").fill("carol")
        form.locator("input[name=password]").fill("carol-pw-1234")
        form.locator("button[type=submit]").click()
        expect(form.locator(".error")).to_contain_text("User:reader is not authorized", timeout=WAIT_MS)  # not change
        admin = {"Authorization": "Basic " + __import__("base64").b64encode(
            f"admin:{PASSWORDS['admin']}".encode()).decode()}
        assert httpx.get(f"{secure.url}/topics/ledger", headers=admin).status_code == 200  # still there
        # Log out; an API key logs in too, as its principal.
        p.click("header button:text('Log out')")
        p.locator("#login input[name=apikey]").fill(secure.reader_key)
        p.locator("#login button[type=submit]").click()
        expect(p.locator("header .who")).to_contain_text("API key", timeout=WAIT_MS)  # back on the same page
        expect(p.locator("#users")).to_contain_text("reader", timeout=WAIT_MS)
        # The admin may delete.
        p.click("header button:text('Log out')")
        _login(p, "admin", PASSWORDS["admin"])
        expect(p.locator("header .who")).to_contain_text("admin", timeout=WAIT_MS)
        p.goto("/#/topics/ledger")
        expect(p.locator("#partitions tbody tr")).to_have_count(1, timeout=WAIT_MS)
        p.click("#delete")
        p.locator("#delete-topic input[name=confirm]").fill("ledger")
        p.locator("#delete-topic button[type=submit]").click()
        expect(p.locator("h1")).to_have_text("Topics", timeout=WAIT_MS)
        assert httpx.get(f"{secure.url}/topics/ledger", headers=admin).status_code == 404
        # The admin manages users and ACLs on the security page.
        p.goto("/#/security")
        form = p.locator("#create-user")
        form.locator("input[name=name]").fill("carol")
        form.locator("input[name=password]").fill("carol-pw-1234")
        form.locator("button[type=submit]").click()
        expect(p.locator("#users")).to_contain_text("carol", timeout=WAIT_MS)
        acl = p.locator("#create-acl")
        acl.locator("input[name=principal]").fill("carol")
        acl.locator("input[name=resource_name]").fill("ledger")
        acl.locator("button[type=submit]").click()
        expect(acl.locator(".error")).to_contain_text("a principal is User:<name>")
        acl.locator("input[name=principal]").fill("User:carol")
        acl.locator("select[name=operation]").select_option("DELETE")
        acl.locator("button[type=submit]").click()
        expect(p.locator("#acls")).to_contain_text("User:carol", timeout=WAIT_MS)
        acls = httpx.get(f"{secure.url}/v3/clusters/{secure.cluster_id}/acls?principal=User:carol", headers=admin)
        assert [(a["operation"], a["resource_name"]) for a in acls.json()["data"]] == [("DELETE", "ledger")]
        # Quotas: set from the page (checked before sending), seen through the API, removed.
        quotas = p.locator("#set-quotas")
        quotas.locator("input[name=principal]").fill("User:carol")
        quotas.locator("input[name='producer.byte.rate']").fill("-5")
        quotas.locator("button[type=submit]").click()
        expect(quotas.locator(".error")).to_contain_text("Produce bytes/s must be between 0 and")
        quotas.locator("input[name='producer.byte.rate']").fill("1048576")
        quotas.locator("input[name='request.rate']").fill("50")
        quotas.locator("button[type=submit]").click()
        row = p.locator("#quotas tr[data-principal='User:carol']")
        expect(row).to_contain_text("producer.byte.rate=1048576", timeout=WAIT_MS)
        expect(row).to_contain_text("request.rate=50")
        q = httpx.get(f"{secure.url}/v3/clusters/{secure.cluster_id}/quotas", headers=admin).json()["data"]
        assert q == [{"principal": "User:carol", "quotas": {"producer.byte.rate": 1048576, "request.rate": 50}}]
        screenshot(p, tmp_path, "security")
        row.locator("button:text('remove')").click()
        expect(p.locator("#no-quotas")).to_be_visible(timeout=WAIT_MS)
        assert httpx.get(f"{secure.url}/v3/clusters/{secure.cluster_id}/quotas", headers=admin).json()["data"] == []
        assert [x for x in w.problems if "401" not in x and "403" not in x] == []
    finally:
        p.close()


def test_values_registered_in_the_schema_registry_are_shown_decoded(page, cluster, tmp_path):
    import base64

    from lakelog.ingest_api.schemas import wire

    url = cluster.node(2).url
    cli(url, "topics", "create", "people", "--partitions", "1")
    user = {"type": "record", "name": "User", "fields": [{"name": "name", "type": "string"},
                                                         {"name": "age", "type": "int"}]}
    r = httpx.post(f"{url}/topics/people", headers={"Content-Type": "application/vnd.kafka.avro.v2+json"},
                   content=json.dumps({"value_schema": json.dumps(user), "key_schema": '"string"', "records": [
                       {"key": "k1", "value": {"name": "ada", "age": 36}},
                       {"key": "k2", "value": {"name": "bob", "age": 7}}]}), timeout=30)
    assert r.status_code == 200, r.text
    value_id, key_id = r.json()["value_schema_id"], r.json()["key_schema_id"]
    point = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    r = httpx.post(f"{url}/subjects/points-value/versions", json={"schema": json.dumps(point),
                                                                  "schemaType": "JSON"}, timeout=30)
    assert r.status_code == 200, r.text
    json_id = r.json()["id"]
    proto = ('syntax = "proto3";\npackage shop;\nmessage Order { string id = 1; int64 amount = 2; }\n'
             'message Refund { string order_id = 1; }\n')
    r = httpx.post(f"{url}/subjects/shop-value/versions", json={"schema": proto, "schemaType": "PROTOBUF"}, timeout=30)
    assert r.status_code == 200, r.text
    proto_id = r.json()["id"]
    framed = [wire.encode(json_id, b'{"x":5}'), wire.encode(999_999, b"\x02\x04"), b"plain text",
              wire.encode(proto_id, b"\x0a\x02o1\x10\x05", [0]),  # Order {id: "o1", amount: 5}
              wire.encode(proto_id, b"\x0a\x02o1", [1])]  # the second message: Refund {order_id: "o1"}
    r = httpx.post(f"{url}/topics/people/partitions/0", headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
                   json={"records": [{"value": base64.b64encode(v).decode()} for v in framed]}, timeout=30)
    assert r.status_code == 200, r.text
    p = page.page
    p.goto("/#/topics/people/messages")
    rows = p.locator("#records tbody tr")
    expect(rows).to_have_count(7, timeout=WAIT_MS)
    value = rows.nth(0).locator("td").nth(3)
    expect(value.locator(".schema")).to_have_text(f"schema {value_id} (AVRO) · people-value v1")
    expect(value).to_contain_text('{"name":"ada","age":36}')
    expect(rows.nth(0).locator("td").nth(2)).to_contain_text(f"schema {key_id} (AVRO) · people-key v1")
    expect(rows.nth(0).locator("td").nth(2)).to_contain_text('"k1"')
    expect(rows.nth(2).locator("td").nth(3)).to_contain_text(f"schema {json_id} (JSON) · points-value v1")
    expect(rows.nth(2).locator("td").nth(3)).to_contain_text('{"x":5}')
    expect(rows.nth(3).locator("td .schema.bad")).to_have_text("schema 999999: schema 999999 is not in the registry")
    expect(rows.nth(3).locator("td .value.hex")).to_contain_text("00 00 0f 42 3f 02 04")
    expect(rows.nth(4).locator("td").nth(3)).to_have_text("plain text")
    # Protobuf: the message the wire format's message indexes name, in Protobuf's JSON mapping.
    order = rows.nth(5).locator("td").nth(3)
    expect(order.locator(".schema")).to_have_text(f"schema {proto_id} (PROTOBUF) · shop-value v1 · shop.Order")
    expect(order).to_contain_text('{"id":"o1","amount":"5"}')
    expect(rows.nth(6).locator("td .schema")).to_contain_text("shop.Refund")
    expect(rows.nth(6).locator("td").nth(3)).to_contain_text('{"orderId":"o1"}')
    p.select_option("#format", "schema")
    expect(value).to_contain_text('"name": "ada"')  # pretty-printed
    screenshot(p, tmp_path, "schema")
    p.select_option("#format", "hex")
    expect(value.locator(".schema")).to_have_count(0)
    expect(value).to_contain_text(f"00 00 00 00 {value_id:02x}")
    # The endpoint on its own: null for bytes not in the wire format, bad base64 refused.
    doc = httpx.post(f"{url}/stats/decode", json={"data": [None, base64.b64encode(b"x").decode()]}).json()
    assert doc == {"results": [None, None]}
    bad = httpx.post(f"{url}/stats/decode", json={"data": ["%%%"]})
    assert bad.status_code == 422 and bad.json()["error_code"] == 42201
    assert page.problems == []


def wait_ready(url: str) -> None:
    """A node on a busy machine may be re-confirming its session (503) for a moment: wait it out."""
    for _ in range(300):
        if httpx.get(f"{url}/readyz", timeout=10).status_code == 200:
            return
        time.sleep(0.2)
    raise AssertionError(f"{url} not ready")


def test_a_range_across_pages_downloads_within_the_configured_limits(page, cluster, tmp_path):
    url = cluster.node(1).url
    wait_ready(url)
    cli(url, "topics", "create", "ranges", "--partitions", "2")
    big = [f"big-{i:04d}-" + "b" * 5000 for i in range(250)]  # 1.25 MB: five 256 KiB fetches
    small = [f"small-{i}" for i in range(1100)]
    binary = {"Content-Type": "application/vnd.kafka.binary.v2+json"}
    for partition, values, step in ((0, big, 25), (1, small, 1100)):
        for i in range(0, len(values), step):
            body = {"records": [{"value": __import__("base64").b64encode(v.encode()).decode()} for v in values[i:i + step]]}
            for _ in range(100):  # a node answers 503 while it re-confirms its session (a busy machine)
                r = httpx.post(f"{url}/topics/ranges/partitions/{partition}", headers=binary, timeout=120, json=body)
                if r.status_code != 503:
                    break
                time.sleep(0.5)
            assert r.status_code == 200, r.text
    assert httpx.get(f"{url}/console/session.json").json()["download_max_records"] == 1000
    page.expected_statuses.add(503)  # a busy node may be re-confirming its session: the page asks again
    p = page.page
    p.goto("/#/topics/ranges/messages")
    expect(p.locator("#records tr[data-offset='0']")).to_be_visible(timeout=WAIT_MS)
    p.click("summary:text('Download a range')")
    form = p.locator("#download-range")
    form.locator("input[name=from]").fill("10")
    form.locator("input[name=to]").fill("5000")
    form.locator("button[type=submit]").click()
    expect(form.locator(".error")).to_contain_text("to offset must be between 10 and 249")  # checked before fetching
    form.locator("input[name=to]").fill("139")
    with p.expect_download(timeout=WAIT_MS) as got:
        form.locator("button[type=submit]").click()
        form.locator("#downloaded, .error").wait_for(timeout=WAIT_MS)
        assert form.locator(".error").count() == 0, form.locator(".error").inner_text()
    expect(form.locator("#downloaded")).to_have_text("downloaded 130 records, offsets 10–139", timeout=WAIT_MS)
    path = tmp_path / "range.jsonl"
    got.value.save_as(path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["offset"] for r in rows] == list(range(10, 140))
    assert [r["value"] for r in rows] == big[10:140]
    # Over the byte bound (1 MiB here): refused, nothing saved.
    form.locator("input[name=from]").fill("0")
    form.locator("input[name=to]").fill("249")
    form.locator("button[type=submit]").click()
    expect(form.locator(".error")).to_contain_text("more than 1.0 MiB (console.download.max.bytes)", timeout=WAIT_MS)
    # Over the record bound (1,000 here).
    p.select_option("#partition", "1")
    expect(p.locator("#records tr[data-offset='0']")).to_contain_text("small-0", timeout=WAIT_MS)
    p.click("summary:text('Download a range')")  # a new partition: a new, closed panel
    form = p.locator("#download-range")
    form.locator("input[name=from]").fill("0")
    form.locator("input[name=to]").fill("1099")
    form.locator("button[type=submit]").click()
    expect(form.locator(".error")).to_contain_text("at most 1,000 records in one download")
    assert page.problems == []


def test_topic_page_shows_its_partitions_a_page_at_a_time(page, cluster):
    url = cluster.node(1).url
    cli(url, "topics", "create", "wide", "--partitions", "120", "--replication-factor", "1")
    detail = httpx.get(f"{url}/stats/topics/wide", params={"offset": 100, "limit": 100}, timeout=30).json()
    assert detail["partitions_count"] == 120 and detail["offset"] == 100
    assert [row["partition"] for row in detail["partitions"]] == list(range(100, 120))
    p = page.page
    p.goto("/#/topics/wide")
    expect(p.locator("#partitions tbody tr")).to_have_count(100, timeout=WAIT_MS)  # one page, not all 120
    expect(p.locator(".pager")).to_contain_text("1–100 of 120")
    p.get_by_role("button", name="Next ▶").click()
    expect(p.locator("#partitions tbody tr")).to_have_count(20, timeout=WAIT_MS)
    expect(p.locator("#partitions tr[data-partition='119']")).to_have_count(1)
