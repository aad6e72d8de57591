"""`lakelog sql` through the SQL server's HTTP endpoint (`POST /v1/sql`): found through the address
file beside the token, no pyspark imported, the same output and one-line errors as through Spark
Connect, and Spark Connect next for what the endpoint leaves to it — a real node, a real
`lakelog sql-server` (Spark), real `lakelog sql` processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.test_sql_views import FAST_TIER, create_topic, produce
from tests.support.nodes import LAKELOG, start_node
from tests.support.sql_server import start_sql_server

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]
N = 600
TYPES_QUERY = ("SELECT partition, count(*) AS n, max(offset) AS last, CAST(1.5 AS DECIMAL(3,1)) AS d, "
               "DATE'2024-01-02' AS day, named_struct('a', 1, 'b', 'x') AS s, array(1, 2) AS xs, X'41ff' AS raw, "
               "CAST(NULL AS STRING) AS nothing, 'a,\"b' AS quoted FROM lakelog.orders GROUP BY partition "
               "ORDER BY partition")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sqlhttp")
    node = start_node(tmp / "node", **FAST_TIER, **{"remote.storage.url": (tmp / "remote").as_uri()})
    server = None
    try:
        create_topic(node.url, "orders", 2, {"remote.storage.enable": "true", "segment.bytes": "4096"})
        for p in (0, 1):
            produce(node.url, "orders", p, [f"order-{p}-{i}" for i in range(N // 2)])
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}
        env.update(PYSPARK_PYTHON=sys.executable)
        server = start_sql_server(tmp, env, "--remote", (tmp / "remote").as_uri(), "--nodes", node.url,
                                  "--refresh-ms", "500", "--master", "local[1]", wait_for_table="orders")
        # A `pyspark` that cannot be imported: a `lakelog sql` that answers with it on the path did not use Spark.
        fake = tmp / "no-pyspark" / "pyspark"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text("raise ImportError('pyspark was imported')\n")
        yield {"tmp": tmp, "server": server, "env": dict(env, LAKELOG_SQL_URL=server.address),
               "no_pyspark": str(fake.parent)}
    finally:
        if server is not None:
            server.stop()
        node.stop()


def sql(setup, *args: str, spark: bool, cwd=None, **env) -> subprocess.CompletedProcess:
    """`lakelog sql ARGS` in the server's working directory (data/sql.token, data/sql.http); `spark`
    False: pyspark cannot be imported."""
    e = dict(setup["env"], **env)
    if not spark:
        e["PYTHONPATH"] = setup["no_pyspark"]
    return subprocess.run([LAKELOG, "sql", *args], cwd=cwd or setup["tmp"], env=e, capture_output=True, text=True,
                          timeout=300)


def test_the_address_file_names_both_endpoints_and_lakelog_sql_answers_without_pyspark(setup):
    doc = json.loads((setup["tmp"] / "data" / "sql.http").read_text())
    assert doc["version"] == 1 and doc["connect"] == setup["server"].address and doc["http"] == setup["server"].http_url
    assert (setup["tmp"] / "data" / "sql.http").stat().st_mode & 0o777 == 0o600
    out = sql(setup, "SELECT count(*) AS n FROM lakelog.orders", "--format", "csv", spark=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["n", str(N)]
    assert out.stderr == ""


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_the_http_path_prints_what_the_spark_connect_path_prints(setup, fmt, tmp_path):
    fast = sql(setup, TYPES_QUERY, "--format", fmt, spark=False)
    assert fast.returncode == 0, fast.stderr
    # Elsewhere (no address file, the token from the environment): through Spark Connect.
    slow = sql(setup, TYPES_QUERY, "--format", fmt, spark=True, cwd=tmp_path, LAKELOG_SQL_TOKEN=setup["server"].token)
    assert slow.returncode == 0, slow.stderr
    assert fast.stdout == slow.stdout
    assert str(N // 2 - 1) in fast.stdout and "1.5" in fast.stdout and "2024-01-02" in fast.stdout


def test_errors_are_one_line_with_the_hint(setup):
    out = sql(setup, "SELECT * FROM lakelog.nope", spark=False)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == "lakelog sql: no table lakelog.nope (tables: lakelog.orders)", out.stderr
    out = sql(setup, "SELECT nonexistent FROM lakelog.orders", spark=False)
    assert out.returncode == 1 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "UNRESOLVED_COLUMN" in out.stderr and "(tables: lakelog.orders)" in out.stderr
    out = sql(setup, "SELECT 1", "--token-file", str(setup["tmp"] / "wrong.token"), spark=False)
    assert out.returncode == 1 and "cannot read the token file" in out.stderr
    (setup["tmp"] / "wrong.token").write_text("0" * 64)
    (setup["tmp"] / "wrong.http").write_text((setup["tmp"] / "data" / "sql.http").read_text())
    out = sql(setup, "SELECT 1", "--token-file", str(setup["tmp"] / "wrong.token"), spark=False)
    assert out.returncode == 1 and "refused the connection: its token differs" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_what_the_http_endpoint_does_not_serve_goes_to_spark_connect(setup):
    # A statement, not a query: the HTTP endpoint refuses it, Spark Connect answers it.
    out = sql(setup, "SHOW TABLES IN lakelog", "--format", "csv", spark=True)
    assert out.returncode == 0, out.stderr
    assert "orders" in out.stdout
    out = sql(setup, "SHOW TABLES IN lakelog", "--format", "csv", spark=False)
    assert out.returncode != 0 and "pyspark was imported" in out.stderr  # it did go on to Spark Connect
    # Nothing listens at the HTTP address: Spark Connect answers.
    out = sql(setup, "SELECT count(*) AS n FROM lakelog.orders", "--format", "csv", spark=True,
              LAKELOG_SQL_HTTP_URL="http://127.0.0.1:9")
    assert out.returncode == 0 and out.stdout.splitlines() == ["n", str(N)], out.stderr
