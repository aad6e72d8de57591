"""`lakelog sql`'s HTTP path without a SQL server: the address file, the client's answers from a
real HTTP server on loopback standing in for the SQL server, and what `lakelog sql` imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lakelog.spark_log.sql_server import address as sql_address
from lakelog.spark_log.sql_cli import http_client as sql_client


def test_the_address_file_round_trips_and_names_the_http_endpoint_only_for_its_own_connect_server(tmp_path):
    path = sql_address.path_beside(tmp_path / "sql.token")
    assert path == tmp_path / "sql.http"
    sql_address.write(path, "sc://127.0.0.1:15002", "http://127.0.0.1:15003")
    assert path.stat().st_mode & 0o777 == 0o600
    assert sql_address.read(path)["pid"] == os.getpid()
    assert sql_address.http_for(path, "sc://127.0.0.1:15002") == "http://127.0.0.1:15003"
    assert sql_address.http_for(path, "sc://localhost:15002") == "http://127.0.0.1:15003"  # loopback is loopback
    assert sql_address.http_for(path, "sc://127.0.0.1:15004") is None  # another server: its own file, not this one
    assert sql_address.http_for(path, "sc://db.example:15002") is None


def test_an_unknown_version_or_a_malformed_file_is_not_read(tmp_path):
    path = tmp_path / "sql.http"
    path.write_text(json.dumps({"version": 2, "connect": "sc://127.0.0.1:1", "http": "http://127.0.0.1:2"}))
    assert sql_address.read(path) is None
    path.write_text("{not json")
    assert sql_address.read(path) is None
    path.write_text("x" * (sql_address.MAX_BYTES + 1))
    assert sql_address.read(path) is None
    assert sql_address.read(tmp_path / "missing.http") is None


def test_a_server_removes_only_its_own_address_file(tmp_path):
    path = tmp_path / "sql.http"
    path.write_text(json.dumps({"version": 1, "connect": "sc://h:1", "http": "http://h:2", "pid": os.getpid() + 1}))
    sql_address.remove(path)
    assert path.exists()  # a newer server's
    sql_address.write(path, "sc://h:1", "http://h:2")
    sql_address.remove(path)
    assert not path.exists()


def test_authorization_prefers_the_users_credentials_over_the_servers_token():
    assert sql_client.authorization({"api_key": "k1"}, "tok") == "Bearer k1"
    assert sql_client.authorization({"user": "alice", "password": "pw"}, "tok") == "Basic YWxpY2U6cHc="
    assert sql_client.authorization({}, "tok") == "Bearer tok"
    assert sql_client.authorization({}, None) is None


@pytest.fixture()
def fake_server():
    """A loopback HTTP server answering /v1/sql with the (status, body) the test sets."""
    seen: list[dict] = []
    answer: dict = {}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
            status, doc = answer["value"]
            raw = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", answer, seen
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_client_reads_rows_refusals_and_what_it_leaves_to_spark_connect(fake_server):
    url, answer, seen = fake_server
    answer["value"] = (200, {"columns": [{"name": "n", "type": "bigint"}], "rows": [[3]], "truncated": False})
    got = sql_client.ask(url, "SELECT 3 AS n", max_rows=10, timeout_ms=5000, header="Bearer t")
    assert got == sql_client.Rows(["n"], [[3]], False)
    assert seen[-1] == {"path": "/v1/sql", "auth": "Bearer t",
                        "body": {"query": "SELECT 3 AS n", "max_rows": 10, "timeout_ms": 5000}}
    answer["value"] = (422, {"error_code": 42201, "message": "[UNRESOLVED_COLUMN] x", "tables": ["orders"]})
    got = sql_client.ask(url, "SELECT x", max_rows=10, timeout_ms=5000, header=None)
    assert got == sql_client.Refusal(422, 42201, "[UNRESOLVED_COLUMN] x", ["orders"])
    assert seen[-1]["auth"] is None
    answer["value"] = (401, {"error_code": 40101, "message": "lakelog: credentials required"})
    assert sql_client.ask(url, "SELECT 1", max_rows=1, timeout_ms=1000, header=None).status == 401
    for status, doc in ((422, {"error_code": 42201, "message": "only queries", "try_spark_connect": True}),
                        (429, {"error_code": 42901, "message": "busy"}), (404, {"error_code": 404, "message": "?"}),
                        (503, {"error_code": 50301, "message": "no node"})):
        answer["value"] = (status, doc)
        assert sql_client.ask(url, "SHOW TABLES", max_rows=1, timeout_ms=1000, header=None) is None, status


def test_nothing_listening_is_left_to_spark_connect():
    import socket

    with socket.socket() as s:  # a port bound and not listening: connections to it are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert sql_client.ask(f"http://127.0.0.1:{port}", "SELECT 1", max_rows=1, timeout_ms=1000, header=None) is None


def test_lakelog_sql_loads_neither_pyspark_nor_httpx_nor_the_jobs():
    code = ("import sys\n"
            "from lakelog.cli.main import build_parser\n"
            "from lakelog.spark_log.sql_server import address\n"
            "from lakelog.spark_log.sql_cli import http_client\n"
            "args = build_parser(only_sql=True).parse_args(['sql', 'SELECT 1', '--format', 'csv'])\n"
            "assert args.func.__name__ == 'cmd_sql'\n"
            "heavy = ('pyspark', 'py4j', 'httpx', 'rich', 'grpc', 'pyarrow', 'pandas')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith(('lakelog.spark_log.jobs',"
            " 'lakelog.tiering', 'lakelog.client.node_client'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_cli_names_the_remote_environment_variable_as_the_jobs_do():
    from lakelog.spark_log import cli_common, datasource, jobs

    assert cli_common.REMOTE_ENV == jobs.REMOTE_ENV == datasource.REMOTE_ENV


def test_up_passes_its_thrift_port_to_the_sql_server_and_refuses_it_with_authentication_on(tmp_path):
    from lakelog.cli.cluster_spec import LauncherConfigError, build_spec

    spec = build_spec(nodes=1, data_dir=tmp_path, http_port=18000, sql_port=15002, sql_thrift_port=10000)
    args = spec.sql_server_args()
    assert args[args.index("--thrift-port") + 1] == "10000"
    assert "--thrift-port" not in build_spec(nodes=1, data_dir=tmp_path, http_port=18000, sql_port=15002).sql_server_args()
    with pytest.raises(LauncherConfigError, match="only with --sql"):
        build_spec(nodes=1, data_dir=tmp_path, http_port=18000, sql_thrift_port=10000)
    with pytest.raises(LauncherConfigError, match="authentication is on"):
        build_spec(nodes=1, data_dir=tmp_path, http_port=18000, sql_port=15002, sql_thrift_port=10000,
                   node_overrides={"authentication.enabled": "true"})
    with pytest.raises(LauncherConfigError, match="--sql-thrift-port 15003"):
        build_spec(nodes=1, data_dir=tmp_path, http_port=18000, sql_port=15002, sql_thrift_port=15003)


def test_the_thrift_server_is_refused_before_anything_starts():
    import socket

    from lakelog.spark_log.sql_server.thrift import ThriftNotSupported, check_startable

    with pytest.raises(ThriftNotSupported, match="authentication is on"):
        check_startable("127.0.0.1", 10000, cluster_auth=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        with pytest.raises(ThriftNotSupported, match="cannot listen"):
            check_startable("127.0.0.1", s.getsockname()[1], cluster_auth=False)
    with pytest.raises(ThriftNotSupported, match="a TCP port"):
        check_startable("127.0.0.1", 0, cluster_auth=False)


@pytest.mark.parametrize("argv, message", [
    (["--max-rows", "0"], "argument --max-rows: 0 is out of range: from 1 to 10000"),
    (["--max-rows", "10001"], "argument --max-rows: 10001 is out of range: from 1 to 10000"),
    (["--max-rows", "ten"], "argument --max-rows: expected an integer, got 'ten'"),
    (["--timeout-ms", "0"], "argument --timeout-ms: 0 is out of range: from 1 to 600000"),
])
def test_sql_refuses_row_and_time_limits_outside_their_range_before_starting_anything(argv, message, capsys):
    from lakelog.cli.main import build_parser

    with pytest.raises(SystemExit) as e:
        build_parser(only_sql=True).parse_args(["sql", *argv, "SELECT 1"])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    args = build_parser(only_sql=True).parse_args(["sql", "--max-rows", "10000", "--timeout-ms", "600000", "SELECT 1"])
    assert (args.max_rows, args.timeout_ms) == (10000, 600000)
