"""The console's SQL page without a JVM: which ACLs a view needs, the relay's errors, the SQL
server's JSON values and token, and what `lakelog up --sql` tells its nodes."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lakelog.cli.cluster_spec import LauncherConfigError, build_spec
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.http.console_sql import ConsoleSql, SqlNotConfiguredError, required_reads
from lakelog.ingest_api.errors import PeerUnavailableError, RemoteError
from lakelog.spark_log.sql_server.endpoint import MAX_CELL_CHARS, SqlEndpoint, json_cell


def test_a_view_needs_read_on_every_topic_it_may_show():
    topics = {"orders", "clicks", "orders_table"}
    assert required_reads("clicks", topics) == (["clicks"], False)
    assert required_reads("clicks_table", topics) == (["clicks"], False)  # the Delta table of clicks
    assert required_reads("clicks_latest", topics) == (["clicks"], False)
    assert required_reads("clicks_errors_table", topics) == (["clicks"], False)  # its dead letters
    # Ambiguous: a topic named orders_table beside the table of orders: both are required.
    assert required_reads("orders_table", topics) == (["orders", "orders_table"], False)
    # A table of no topic: the cluster; a table of a deleted topic: every reading of its name.
    assert required_reads("_remote_index", topics) == ([], True)
    assert required_reads("gone_table", topics) == (["gone", "gone_table"], False)
    assert required_reads("_other", topics) == (["_other"], False)


def _config(**kv) -> NodeConfig:
    return NodeConfig({"node.id": 1, "log.dirs": "/tmp/x", **kv})


def test_a_node_without_a_sql_server_says_so():
    relay = ConsoleSql(_config())
    with pytest.raises(SqlNotConfiguredError, match="lakelog up --sql"):
        asyncio.run(relay.run("SELECT 1", None, lambda views: None))


class _FakeSqlServer(BaseHTTPRequestHandler):
    calls: list = []

    def log_message(self, *a) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append((self.path, self.headers.get("Authorization"), body))
        if "broken" in body["query"]:
            status, doc = 422, {"error_code": 42201, "message": "[PARSE_SYNTAX_ERROR] Syntax error at 'broken'"}
        elif self.path == "/v1/views":
            status, doc = 200, {"views": ["orders", "secret"]}
        else:
            status, doc = 200, {"columns": [{"name": "n", "type": "bigint"}], "rows": [[1]], "truncated": False,
                                "views": body["views"], "elapsed_ms": 1}
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake_server():
    _FakeSqlServer.calls = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _FakeSqlServer)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_relay_checks_the_views_then_runs_naming_them(fake_server, tmp_path):
    token = tmp_path / "sql.token"
    token.write_text("tok-123\n")
    relay = ConsoleSql(_config(**{"console.sql.url": fake_server, "console.sql.token.file": str(token),
                                  "console.sql.max.rows": 50}))
    seen = []
    doc = asyncio.run(relay.run("SELECT 1", 500, seen.append))
    assert seen == [["orders", "secret"]] and doc["rows"] == [[1]]
    (p1, auth1, _), (p2, auth2, body) = _FakeSqlServer.calls
    assert (p1, p2) == ("/v1/views", "/v1/query") and auth1 == auth2 == "Bearer tok-123"
    assert body["views"] == ["orders", "secret"] and body["max_rows"] == 50  # capped by console.sql.max.rows

    def refuse(views):
        raise PermissionError("no")
    _FakeSqlServer.calls = []
    with pytest.raises(PermissionError):
        asyncio.run(relay.run("SELECT 1", None, refuse))
    assert [c[0] for c in _FakeSqlServer.calls] == ["/v1/views"]  # refused: nothing ran
    with pytest.raises(RemoteError) as e:  # the SQL server's error, as it was
        asyncio.run(relay.run("broken", None, seen.append))
    assert (e.value.status, e.value.error_code) == (422, 42201) and "PARSE_SYNTAX_ERROR" in str(e.value)


def test_an_unreachable_sql_server_is_a_503_naming_it(tmp_path):
    relay = ConsoleSql(_config(**{"console.sql.url": "http://127.0.0.1:9"}))
    with pytest.raises(PeerUnavailableError, match="does not answer"):
        asyncio.run(relay.run("SELECT 1", None, lambda views: None))


def test_result_cells_become_bounded_json():
    import datetime
    import decimal

    assert json_cell(b"k\xff") == "k\\xff"
    assert json_cell(decimal.Decimal("12.50")) == "12.50"
    assert json_cell(datetime.date(2026, 1, 2)) == "2026-01-02"
    assert json_cell(float("nan")) == "nan"
    assert json_cell([1, None, "x"]) == [1, None, "x"]
    long = json_cell("x" * (MAX_CELL_CHARS + 50))
    assert len(long) == MAX_CELL_CHARS + 1 and long.endswith("…")


def test_the_sql_servers_endpoint_wants_its_token():
    class NoSpark:
        class _jvm:
            class java:
                class lang:
                    class Class:
                        @staticmethod
                        def forName(name):
                            return name
    endpoint = SqlEndpoint(NoSpark(), "tok-123")
    assert endpoint.authorized("Bearer tok-123")
    for wrong in (None, "", "Bearer tok-1234", "Basic tok-123", "tok-123"):
        assert not endpoint.authorized(wrong)
    with pytest.raises(ValueError):
        SqlEndpoint(NoSpark(), "")


def test_up_with_sql_points_its_nodes_at_the_sql_servers_console_endpoint(tmp_path):
    spec = build_spec(nodes=3, data_dir=tmp_path, http_port=18000, sql_port=15002)
    args = spec.sql_server_args()
    assert args[args.index("--http-listen") + 1] == "http://127.0.0.1:15003"
    node = spec.node_args(1)
    assert "console.sql.url=http://127.0.0.1:15003" in node
    assert f"console.sql.token.file={tmp_path.resolve() / 'sql.token'}" in node
    assert not any("console.sql" in a for a in build_spec(nodes=3, data_dir=tmp_path, http_port=18000).node_args(1))
    with pytest.raises(LauncherConfigError, match="--sql-port 17999"):  # its next port is node 1's
        build_spec(nodes=3, data_dir=tmp_path, http_port=18000, sql_port=17999)
