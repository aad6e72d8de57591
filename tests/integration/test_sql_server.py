"""The SQL server as `lakelog up --sql` runs it: started after the nodes, supervised like them,
found by `lakelog sql` — real `lakelog up`, real Spark Connect, real queries."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from tests.integration.test_launcher import STOP_BOUND_S, Launcher, cli
from tests.integration.test_sql_thrift import jdbc
from tests.support.faults import wait_for
from tests.support.nodes import LAKELOG, free_port

#: Two JVM starts (the server, then its restart) and a Spark Connect client per query, on a shared machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]
SQL_READY_TIMEOUT_S = 300  # a JVM start on a busy machine


def sql(address: str, query: str, cwd, token: str | None = None) -> subprocess.CompletedProcess:
    # No --remote, no --nodes, an empty working directory: a local session here would find no
    # topic at all, so a right answer comes from the server.
    env = {k: v for k, v in os.environ.items() if k not in ("LAKELOG_URL", "LAKELOG_REMOTE", "LAKELOG_SQL_TOKEN")}
    env.update(LAKELOG_SQL_URL=address, PYSPARK_PYTHON=sys.executable)
    if token is not None:
        env["LAKELOG_SQL_TOKEN"] = token
    return subprocess.run([LAKELOG, "sql", query, "--format", "csv"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def fast_sql(address: str, query: str, tmp_path, token_file) -> subprocess.CompletedProcess:
    """`lakelog sql` with `lakelog up`'s token file, where pyspark cannot be imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}
    env.update(LAKELOG_SQL_URL=address, PYTHONPATH=_no_pyspark(tmp_path))
    return subprocess.run([LAKELOG, "sql", query, "--format", "csv", "--token-file", str(token_file)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)


def count_when_ready(address: str, query: str, cwd, token: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    """`lakelog sql` until it answers (the server registers a new topic within its refresh interval)."""
    last: list[subprocess.CompletedProcess] = []

    def answered():
        last[:] = [sql(address, query, cwd, token)]
        return last[0].returncode == 0

    try:
        wait_for(answered, timeout_s, f"an answer to {query!r}", interval_s=1.0)
    except AssertionError:
        raise AssertionError(f"no answer to {query!r}: {last[0].stderr if last else ''}") from None
    return last[0]


def test_up_with_sql_runs_a_supervised_sql_server_that_lakelog_sql_uses(tmp_path):
    port, thrift_port = free_port(), free_port()
    address = f"sc://127.0.0.1:{port}"
    up = Launcher(tmp_path, "--sql", "--sql-port", str(port), "--sql-thrift-port", str(thrift_port), nodes=1)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    try:
        up.wait_ready()
        assert f"sql: {address}" in up.output()
        wait_for(lambda: f"sql is ready on {address}" in up.output(), SQL_READY_TIMEOUT_S, "the SQL server")
        cli(up.url, "topics", "create", "orders", "--partitions", "2", "--config", "remote.storage.enable=true",
            "--config", "segment.bytes=4096")
        cli(up.url, "produce", "orders", "--batch-size", "50", stdin="".join(f"order-{i}\n" for i in range(500)).encode())
        # The server looks for new topics every 5 s; then the topic answers in full at once.
        token_file = up.data_dir / "sql.token"
        assert token_file.stat().st_mode & 0o777 == 0o600
        token = token_file.read_text().strip()
        out = count_when_ready(address, "SELECT count(*) AS n FROM lakelog.orders", elsewhere, token)
        assert out.stdout.splitlines() == ["n", "500"], out.stderr
        # With up's token file, `lakelog sql` finds the HTTP endpoint beside it and needs no pyspark.
        fast = wait_for(lambda: (lambda o: o if o.returncode == 0 else None)(
            fast_sql(address, "SELECT count(*) AS n FROM lakelog.orders", tmp_path, token_file)), 60, "the HTTP path")
        assert fast.stdout.splitlines() == ["n", "500"], fast.stderr
        # Only who can read the data directory can query: no token, or a wrong one, is refused.
        for wrong in (None, "0" * 64):
            refused = sql(address, "SELECT count(*) AS n FROM lakelog.orders", elsewhere, wrong)
            assert refused.returncode == 1 and "refused the connection" in refused.stderr, refused.stderr
            assert refused.stdout == "" and len(refused.stderr.strip().splitlines()) == 1
        # A JDBC client of the Thrift server `--sql-thrift-port` adds, with the token as its password.
        jdbc_url = f"jdbc:hive2://127.0.0.1:{thrift_port}/default"
        counted = wait_for(lambda: (lambda o: o if o.returncode == 0 else None)(
            jdbc(jdbc_url, "analyst", token, "SELECT count(*) FROM lakelog.orders")), 120, "a JDBC answer", 1.0)
        assert counted.stdout.split() == ["500"], counted.stdout

        # Supervised: killed, it is restarted and answers again.
        pid = int(re.search(rf"sql: {re.escape(address)} \(pid (\d+)", up.output()).group(1))
        os.killpg(pid, signal.SIGKILL)
        wait_for(lambda: "sql is back" in up.output(), SQL_READY_TIMEOUT_S, "the SQL server's restart")
        again = count_when_ready(address, "SELECT count(*) AS n FROM lakelog.orders", elsewhere, token)
        assert again.stdout.splitlines() == ["n", "500"], again.stderr
        fast = wait_for(lambda: (lambda o: o if o.returncode == 0 else None)(
            fast_sql(address, "SELECT count(*) AS n FROM lakelog.orders", tmp_path, token_file)), 60, "the HTTP path")
        assert fast.stdout.splitlines() == ["n", "500"], fast.stderr

        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(STOP_BOUND_S) == 0, up.output()
    finally:
        up.close()
    out = up.output()
    assert "sql (pid" in out and "was killed by SIGKILL" in out and "stopped cleanly" in out, out
    assert (up.data_dir / "sql.log").exists()


def _no_pyspark(tmp_path) -> str:
    """A path where `import pyspark` fails: a `lakelog sql` that answers with it did not use Spark."""
    fake = tmp_path / "no-pyspark" / "pyspark"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text("raise ImportError('pyspark was imported')\n")
    return str(fake.parent)


def test_up_with_sql_and_authentication_gives_its_sql_server_a_service_user(tmp_path):
    port = free_port()
    address = f"sc://127.0.0.1:{port}"
    up = Launcher(tmp_path, "--sql", "--sql-port", str(port), "--set", "authentication.enabled=true",
                  "--set", "authorizer.enabled=true", nodes=1)
    secret_file = str(up.data_dir / "cluster.properties")
    try:
        up.wait_ready()
        wait_for(lambda: f"sql is ready on {address}" in up.output(), SQL_READY_TIMEOUT_S, "the SQL server")
        service = up.data_dir / "sql-service.properties"
        assert service.stat().st_mode & 0o777 == 0o600
        assert "password=" not in up.output() and service.read_text().split("password=")[1].strip() not in up.output()

        def admin(*args: str, stdin: bytes | None = None) -> None:
            r = subprocess.run([LAKELOG, *args, "--bootstrap-server", up.url, "--cluster-secret-file", secret_file],
                               input=stdin, capture_output=True, timeout=60)
            assert r.returncode == 0, (args, r.stdout, r.stderr)

        admin("users", "add", "alice", "--new-password", "alice-pw-Up55")
        admin("acls", "add", "--allow-principal", "User:alice", "--operation", "read", "--topic", "orders")
        for topic in ("orders", "payroll"):
            admin("topics", "create", topic, "--partitions", "1")
        admin("produce", "orders", stdin="".join(f"order-{i}\n" for i in range(300)).encode())
        admin("produce", "payroll", stdin=b"salary\n" * 7)

        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}
        env.update(LAKELOG_SQL_URL=address, LAKELOG_USER="alice", LAKELOG_PASSWORD="alice-pw-Up55",
                   PYSPARK_PYTHON=sys.executable, PYTHONPATH=_no_pyspark(tmp_path))

        def sql(query: str) -> subprocess.CompletedProcess:  # through the HTTP endpoint (pyspark cannot load)
            return subprocess.run([LAKELOG, "sql", query, "--format", "csv", "--token-file",
                                   str(up.data_dir / "sql.token")], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=300)

        # The server registers the views by reading the nodes as its service user; alice reads what she may.
        last: list[subprocess.CompletedProcess] = []
        wait_for(lambda: (last.append(sql("SELECT count(*) AS n FROM lakelog.orders")) or
                          last[-1].stdout.splitlines() == ["n", "300"]), 120, "alice's count", interval_s=1.0)
        refused = sql("SELECT count(*) AS n FROM lakelog.payroll")
        assert refused.returncode == 1 and "User:alice is not authorized to READ topic 'payroll'" in refused.stderr, \
            refused.stderr
        assert "as lakelog-sql" not in refused.stderr
        sql_log = (up.data_dir / "sql.log").read_text()
        assert "authentication is on" in sql_log and "cannot be reached" not in sql_log, sql_log[-3000:]
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(STOP_BOUND_S) == 0, up.output()
    finally:
        up.close()
