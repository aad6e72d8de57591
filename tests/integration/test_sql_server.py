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
    port = free_port()
    address = f"sc://127.0.0.1:{port}"
    up = Launcher(tmp_path, "--sql", "--sql-port", str(port), nodes=1)
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
        # Only who can read the data directory can query: no token, or a wrong one, is refused.
        for wrong in (None, "0" * 64):
            refused = sql(address, "SELECT count(*) AS n FROM lakelog.orders", elsewhere, wrong)
            assert refused.returncode == 1 and "refused the connection" in refused.stderr, refused.stderr
            assert refused.stdout == "" and len(refused.stderr.strip().splitlines()) == 1

        # Supervised: killed, it is restarted and answers again.
        pid = int(re.search(rf"sql: {re.escape(address)} \(pid (\d+)", up.output()).group(1))
        os.killpg(pid, signal.SIGKILL)
        wait_for(lambda: "sql is back" in up.output(), SQL_READY_TIMEOUT_S, "the SQL server's restart")
        again = count_when_ready(address, "SELECT count(*) AS n FROM lakelog.orders", elsewhere, token)
        assert again.stdout.splitlines() == ["n", "500"], again.stderr

        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(STOP_BOUND_S) == 0, up.output()
    finally:
        up.close()
    out = up.output()
    assert "sql (pid" in out and "was killed by SIGKILL" in out and "stopped cleanly" in out, out
    assert (up.data_dir / "sql.log").exists()
