"""The first query of a new topic: a `lakelog.<topic>` the SQL server has not registered yet (it
refreshes its views every `--refresh-ms`; here never, in the test's time) is looked up on the nodes
and registered before the query would fail — on the HTTP path of `lakelog sql` and on the JSON calls
the nodes relay their console's SQL page to. A real node, a real `lakelog sql-server`, real
`lakelog sql` processes."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from tests.integration.test_sql_views import FAST_TIER, create_topic, produce
from tests.support.nodes import LAKELOG, start_node
from tests.support.sql_server import start_sql_server

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sqlnew")
    node = start_node(tmp / "node", **FAST_TIER, **{"remote.storage.url": (tmp / "remote").as_uri()})
    server = None
    try:
        create_topic(node.url, "orders", 1, {})
        produce(node.url, "orders", 0, ["a", "b"])
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}
        env.update(PYSPARK_PYTHON=sys.executable)
        # --refresh-ms of an hour: only the lookup a query makes can register a new topic's view.
        server = start_sql_server(tmp, env, "--remote", (tmp / "remote").as_uri(), "--nodes", node.url,
                                  "--refresh-ms", "3600000", "--master", "local[1]", wait_for_table="orders")
        yield {"tmp": tmp, "node": node, "server": server, "env": env}
    finally:
        if server is not None:
            server.stop()
        node.stop()


def test_lakelog_sql_answers_the_first_query_of_a_topic_created_a_moment_ago(setup):
    create_topic(setup["node"].url, "fresh", 2, {"remote.storage.enable": "true"})
    for p in (0, 1):
        produce(setup["node"].url, "fresh", p, [f"v-{p}-{i}" for i in range(25)])
    out = subprocess.run([LAKELOG, "sql", "SELECT count(*) AS n FROM lakelog.fresh", "--format", "csv"],
                         cwd=setup["tmp"], env=setup["env"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["n", "50"]
    # A table that is no topic still fails with the hint, which now names the new topic too.
    out = subprocess.run([LAKELOG, "sql", "SELECT * FROM lakelog.nope"], cwd=setup["tmp"], env=setup["env"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1
    assert out.stderr.strip() == "lakelog sql: no table lakelog.nope (tables: lakelog.fresh, lakelog.orders)", \
        out.stderr


def test_the_console_calls_see_a_topic_created_a_moment_ago(setup):
    create_topic(setup["node"].url, "fresh_console", 1, {})
    produce(setup["node"].url, "fresh_console", 0, ["x", "y", "z"])
    auth = {"Authorization": f"Bearer {setup['server'].token}"}
    query = "SELECT count(*) AS n FROM lakelog.fresh_console"
    r = httpx.post(f"{setup['server'].http_url}/v1/views", json={"query": query}, headers=auth, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["views"] == ["fresh_console"]
    r = httpx.post(f"{setup['server'].http_url}/v1/query", json={"query": query, "views": ["fresh_console"]},
                   headers=auth, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["rows"] == [[3]]
