"""The SQL server's Thrift JDBC/ODBC server (`lakelog sql-server --thrift-port`): a real JDBC client
(the Hive JDBC driver from pyspark's jars, run by the JDK) counts `lakelog.<topic>` exactly, with
the server's token as its password; with the cluster's authentication on it does not start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark
import pytest

from tests.integration.test_sql_views import FAST_TIER, create_topic, produce
from tests.support.faults import wait_for
from tests.support.nodes import LAKELOG, free_port, start_node
from tests.support.sql_server import start_sql_server

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]
N = 450
CLIENT = Path(__file__).resolve().parents[1] / "support" / "JdbcQuery.java"
JARS = os.path.join(os.path.dirname(pyspark.__file__), "jars")


def jdbc(url: str, user: str, password: str, query: str) -> subprocess.CompletedProcess:
    return subprocess.run(["java", "-cp", os.path.join(JARS, "*"), str(CLIENT), url, user, password, query],
                          capture_output=True, text=True, timeout=300)


def test_a_jdbc_client_counts_a_topic_exactly_with_the_token_as_its_password(tmp_path):
    node = start_node(tmp_path / "node", **FAST_TIER, **{"remote.storage.url": (tmp_path / "remote").as_uri()})
    server = None
    try:
        create_topic(node.url, "orders", 2, {"remote.storage.enable": "true", "segment.bytes": "4096"})
        for p in (0, 1):
            produce(node.url, "orders", p, [f"order-{p}-{i}" for i in range(N // 2 + p)])
        total = N // 2 * 2 + 1
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}
        env.update(PYSPARK_PYTHON=sys.executable)
        port = free_port()
        server = start_sql_server(tmp_path, env, "--remote", (tmp_path / "remote").as_uri(), "--nodes", node.url,
                                  "--refresh-ms", "500", "--master", "local[1]", "--thrift-port", str(port),
                                  wait_for_table="orders")
        server.wait_until(f"Thrift JDBC/ODBC server on jdbc:hive2://127.0.0.1:{port}/default")
        url = f"jdbc:hive2://127.0.0.1:{port}/default"
        tries: list[subprocess.CompletedProcess] = []

        def answered():
            tries.append(jdbc(url, "analyst", server.token, "SELECT count(*) FROM lakelog.orders"))
            return tries[-1] if tries[-1].returncode == 0 else None

        try:
            got = wait_for(answered, 120, "a JDBC answer", interval_s=1.0)
        except AssertionError:
            raise AssertionError(tries[-1].stdout + tries[-1].stderr[-3000:] if tries else "no try") from None
        assert got.stdout.split() == [str(total)], got.stdout
        # Later records too: each JDBC query reads up to the high watermark when it runs.
        produce(node.url, "orders", 0, ["one-more"])
        got = jdbc(url, "analyst", server.token, "SELECT partition, count(*) FROM lakelog.orders GROUP BY partition "
                                                 "ORDER BY partition")
        assert got.returncode == 0, got.stdout + got.stderr[-2000:]
        assert got.stdout.splitlines() == [f"0\t{N // 2 + 1}", f"1\t{N // 2 + 1}"]
        refused = jdbc(url, "analyst", "not-the-token", "SELECT 1")
        assert refused.returncode == 1 and refused.stdout.startswith("ERROR "), refused.stdout + refused.stderr[-2000:]
    finally:
        if server is not None:
            assert server.stop() == 0, server.output()[-3000:]
        node.stop()
    assert "Traceback" not in server.output()


def test_with_the_cluster_authentication_on_the_thrift_server_does_not_start(tmp_path):
    out = subprocess.run([LAKELOG, "sql-server", "--cluster-auth", "on", "--thrift-port", str(free_port()),
                          "--remote", (tmp_path / "remote").as_uri(), "--nodes", "http://127.0.0.1:9"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "lakelog sql-server: --thrift-port: the Thrift JDBC/ODBC server does not start while the cluster's "
        "authentication is on (it cannot apply the users' READ ACLs); use Spark Connect or `lakelog sql`"]
