"""The console's SQL page in a real browser: a secured two-node cluster, a real `lakelog sql-server`
(Spark Connect and its JSON endpoint for the console; one JVM), a user who may read one topic.

What a person sees: a query's rows as a table and, for two columns, as a bar chart; a query over a
topic they may not read refused in one line, as are a SQL error and a statement that is not a query.
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest
from playwright.sync_api import expect, sync_playwright

from tests.support.browser import launch, screenshot, watch
from tests.support.faults import wait_for
from tests.support.nodes import LAKELOG, Cluster, free_port

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
SECRET = "test-cluster-secret-0123456789"  # tests.support.nodes.Cluster's
ADMIN, READER = ("admin", "admin-pw-Sql1"), ("reader", "reader-pw-Sql2")
SQL_READY_TIMEOUT_S = 420  # a JVM start on a busy machine, then the first query
WAIT_MS = 120_000  # a query's Spark jobs on a busy 2-core machine; a pass never waits this long


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from lakelog.ingest_api.security.cluster_auth import ClusterAuth

    root = tmp_path_factory.mktemp("console-sql")
    token_file = root / "sql.token"
    token_file.write_text("console-sql-test-token-0123456789\n")
    token_file.chmod(0o600)
    connect_port, http_port = free_port(), free_port()
    remote = (root / "remote").as_uri()
    cluster = Cluster(root, size=2, overrides={
        "authentication.enabled": "true", "authorizer.enabled": "true", "super.users": "User:admin",
        "offsets.topic.num.partitions": "1", "remote.storage.url": remote,
        "console.sql.url": f"http://127.0.0.1:{http_port}", "console.sql.token.file": str(token_file),
        "controller.quorum.election.timeout.ms": "2000", "broker.session.timeout.ms": "5000"})
    server = None
    log = open(root / "sql.log", "wb")
    try:
        cluster.start()
        url = cluster.node(1).url
        with httpx.Client(base_url=url, auth=ClusterAuth(SECRET.encode(), 0, principal="User:__cluster"),
                          timeout=30) as c:
            cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
            for name, pw in (ADMIN, READER):
                assert c.post(f"/v3/clusters/{cid}/users", json={"name": name, "password": pw}).status_code == 201
            for topic in ("orders", "secret"):
                r = c.post(f"/v3/clusters/{cid}/topics", json={"topic_name": topic, "partitions_count": 2})
                assert r.status_code == 201, r.text
            for rtype, name, op in (("TOPIC", "orders", "READ"), ("TOPIC", "orders", "DESCRIBE")):
                r = c.post(f"/v3/clusters/{cid}/acls", json={
                    "principal": "User:reader", "resource_type": rtype, "resource_name": name,
                    "pattern_type": "LITERAL", "operation": op, "permission": "ALLOW"})
                assert r.status_code == 201, r.text
            key = c.post(f"/v3/clusters/{cid}/api-keys", json={"principal": "User:admin"}).json()["api_key"]
        with httpx.Client(base_url=url, auth=ADMIN, timeout=30) as admin:
            for topic, n in (("orders", 30), ("secret", 5)):
                r = admin.post(f"/topics/{topic}", json={"records": [
                    {"key": f"k{i % 3}", "value": f"{topic}-{i}", "partition": i % 2} for i in range(n)]})
                assert r.status_code == 200, r.text
        env = {**os.environ, "LAKELOG_API_KEY": key, "PYSPARK_PYTHON": sys.executable}
        nodes = ",".join(n.url for n in cluster.nodes)
        server = subprocess.Popen(
            [LAKELOG, "sql-server", "--remote", remote, "--nodes", nodes, "--listen",
             f"sc://127.0.0.1:{connect_port}", "--token-file", str(token_file), "--refresh-ms", "1000",
             "--http-listen", f"http://127.0.0.1:{http_port}"], stdout=log, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
        last: list = []

        def answered() -> bool:
            assert server.poll() is None, (root / "sql.log").read_text()[-3000:]
            r = httpx.post(url + "/console/sql", json={"query": "SELECT count(*) AS n FROM lakelog.orders"},
                           auth=ADMIN, timeout=300)
            last[:] = [r.status_code, r.text]
            return r.status_code == 200
        try:
            wait_for(answered, SQL_READY_TIMEOUT_S, "the SQL server's first answer", interval_s=2.0)
        except AssertionError:
            raise AssertionError(f"no answer: {last}; log: {(root / 'sql.log').read_text()[-3000:]}") from None
        yield cluster, root
    finally:
        try:
            if server is not None and server.poll() is None:
                os.killpg(server.pid, 15)
                try:
                    server.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, 9)
                    server.wait(10)
        finally:
            log.close()
            cluster.stop()


def _sql(url: str, query: str, auth=ADMIN) -> httpx.Response:
    return httpx.post(url + "/console/sql", json={"query": query}, auth=auth, timeout=300)


def test_the_sql_page_shows_rows_and_a_chart_and_refuses_what_the_user_may_not_read(setup, tmp_path):
    cluster, _ = setup
    url = cluster.node(2).url  # the other node relays as well
    # The endpoint: rows, column types, the views read; the same ACLs as every endpoint.
    r = _sql(url, "SELECT partition, count(*) AS n FROM lakelog.orders GROUP BY partition ORDER BY partition")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["columns"] == [{"name": "partition", "type": "int"}, {"name": "n", "type": "bigint"}]
    assert doc["rows"] == [[0, 15], [1, 15]] and doc["views"] == ["orders"] and doc["truncated"] is False
    assert _sql(url, "SELECT count(*) FROM lakelog.secret").json()["rows"] == [[5]]  # admin: a super user
    assert _sql(url, "SELECT 1", auth=None).status_code == 401
    refused = _sql(url, "SELECT s.value FROM lakelog.orders o JOIN lakelog.secret s ON o.offset = s.offset",
                   auth=READER)
    assert refused.status_code == 403 and refused.json()["error_code"] == 40301, refused.text
    assert "secret" in refused.json()["message"]
    for query, status in (("DROP VIEW lakelog.orders", 422), ("SELECT * FROM json.`/etc/passwd`", 403),
                          ("SELECT * FROM lakelog.orders WHERE offset IN (SELECT offset FROM lakelog.secret)", 403),
                          ("SELECT reflect('java.lang.Thread', 'sleep', 1L)", 403),
                          ("WITH s AS (SELECT * FROM lakelog.secret) SELECT count(*) FROM s", 403),
                          ("WITH f AS (SELECT * FROM json.`/etc/hostname`) SELECT * FROM f", 403)):
        bad = _sql(url, query, auth=READER)
        assert bad.status_code == status, (query, bad.text)
        assert "\n" not in bad.json()["message"]
    assert _sql(url, "SELECT count(*) FROM lakelog.orders", auth=READER).json()["rows"] == [[30]]
    cte = _sql(url, "WITH o AS (SELECT * FROM lakelog.orders) SELECT count(*) FROM o JOIN o p USING (offset, partition)",
               auth=READER)
    assert cte.status_code == 200 and cte.json()["rows"] == [[30]], cte.text

    # The page, as the reader.
    with sync_playwright() as p:
        browser = launch(p)
        try:
            w = watch(browser, url)
            w.expected_statuses.update({403, 422})  # the refusals this test asks for
            page = w.page
            page.goto("/#/sql")
            form = page.locator("#login")
            form.locator("input[name=user]").fill(READER[0])
            form.locator("input[name=password]").fill(READER[1])
            form.locator("button[type=submit]").click()
            expect(page.locator("#sql-query")).to_be_visible(timeout=30_000)
            page.fill("#sql-query", "SELECT key, count(*) AS records FROM lakelog.orders GROUP BY key ORDER BY key")
            page.click("#sql-run")
            rows = page.locator("#sql-results tbody tr")
            expect(rows).to_have_count(3, timeout=WAIT_MS)
            # Keys as the v2 JSON produce stored them (JSON text), shown as UTF-8 text.
            expect(rows.nth(0).locator("td").nth(0)).to_have_text('"k0"')
            expect(rows.nth(0).locator("td").nth(1)).to_have_text("10")
            expect(page.locator("#sql-chart")).to_have_attribute("data-bars", "3")
            expect(page.locator("#sql-summary")).to_contain_text("3 rows")
            screenshot(page, tmp_path, "sql")
            page.fill("#sql-query", "SELECT * FROM lakelog.secret")
            page.keyboard.press("Control+Enter")
            error = page.locator("#sql-error .error")
            expect(error).to_contain_text("40301", timeout=WAIT_MS)
            expect(error).to_contain_text("secret")
            expect(page.locator("#sql-results")).to_have_count(0)
            page.fill("#sql-query", "SELEC partition FROM lakelog.orders")
            page.click("#sql-run")
            expect(error).to_contain_text("PARSE_SYNTAX_ERROR", timeout=WAIT_MS)
            assert "\n" not in error.inner_text()
            page.fill("#sql-query", "SELECT offset, value FROM lakelog.orders WHERE partition = 1 ORDER BY offset")
            page.click("#sql-run")
            expect(rows).to_have_count(15, timeout=WAIT_MS)
            expect(page.locator("#sql-chart")).to_have_count(0)  # a text column: no chart
            assert w.problems == []
        finally:
            browser.close()
