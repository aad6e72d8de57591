"""The SQL server of a cluster with authentication on: Spark Connect clients present a cluster
user's credentials (checked by a node), the session belongs to that principal, and a query reads
only topics the principal may READ — a real secured node tiering to a filesystem remote, a real
`lakelog sql-server` (Spark Connect, the project's jar), real Spark Connect clients and `lakelog sql`."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from lakelog.ingest_api.security.cluster_auth import ClusterAuth
from tests.integration.test_sql_views import FAST_TIER, TIERED
from tests.support.faults import wait_for
from tests.support.nodes import LAKELOG, start_node
from tests.support.sql_server import start_sql_server

pytestmark = pytest.mark.spark
SECRET = "sql-security-test-secret-8d2e"
PASSWORDS = {"admin": "admin-pw-Kw41", "alice": "alice-pw-Ty73", "bob": "bob-pw-Hn29", "mallory": "mallory-pw-Re11"}
BINARY = "application/vnd.kafka.binary.v2+json"


def _basic(user: str, password: str | None = None) -> str:
    return "Basic " + base64.b64encode(f"{user}:{PASSWORDS[user] if password is None else password}".encode()).decode()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A secured node; alice may READ orders, bob may READ payroll, mallory nothing; admin is a super user."""
    tmp = tmp_path_factory.mktemp("sqlsec")
    remote = (tmp / "remote").as_uri()
    node = start_node(tmp, **FAST_TIER, **{
        "remote.storage.url": remote, "authentication.enabled": "true", "authorizer.enabled": "true",
        "super.users": "User:admin", "cluster.secret": SECRET})
    node.remote = remote
    try:
        with httpx.Client(base_url=node.url, auth=ClusterAuth(SECRET.encode(), 0, principal="User:__cluster"),
                          timeout=30) as root:
            cid = root.get("/v3/clusters").json()["data"][0]["cluster_id"]
            for name, pw in PASSWORDS.items():
                assert root.post(f"/v3/clusters/{cid}/users", json={"name": name, "password": pw}).status_code == 201
            for topic in ("orders", "payroll"):
                r = root.post(f"/v3/clusters/{cid}/topics", json={
                    "topic_name": topic, "partitions_count": 1, "replication_factor": 1,
                    "configs": [{"name": k, "value": v} for k, v in TIERED.items()]})
                assert r.status_code == 201, r.text
            for who, topic in (("alice", "orders"), ("bob", "payroll")):
                r = root.post(f"/v3/clusters/{cid}/acls", json={
                    "principal": f"User:{who}", "resource_type": "TOPIC", "resource_name": topic,
                    "pattern_type": "LITERAL", "operation": "READ", "permission": "ALLOW"})
                assert r.status_code == 201, r.text
            r = root.post(f"/v3/clusters/{cid}/acls", json={  # so that bob still may connect once payroll is revoked
                "principal": "User:bob", "resource_type": "CLUSTER", "resource_name": "kafka-cluster",
                "pattern_type": "LITERAL", "operation": "DESCRIBE", "permission": "ALLOW"})
            assert r.status_code == 201, r.text
            node.cluster_id = cid
            r = root.post(f"/v3/clusters/{cid}/api-keys", json={"principal": "User:alice"})
            assert r.status_code == 201, r.text
            node.alice_key = r.json()["api_key"]
            for topic, n in (("orders", 300), ("payroll", 40)):
                for i in range(n // 20):
                    r = root.post(f"/topics/{topic}/partitions/0?acks=all", headers={"Content-Type": BINARY}, json={
                        "records": [{"value": base64.b64encode(f"{topic}-{i}-{j}-".encode() + b"p" * 80).decode()}
                                    for j in range(20)]})
                    assert r.status_code == 200, r.text
        yield node
    finally:
        try:
            node.stop()
        finally:
            node.kill()


def test_sql_access_answers_who_the_caller_is_and_what_it_may_read(cluster):
    r = httpx.get(f"{cluster.url}/sql/access", headers={"Authorization": _basic("alice")}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json() == {"principal": "User:alice", "authentication": True, "authorizer": True, "super_user": False,
                        "read_topics": ["orders"], "describe_cluster": False}
    r = httpx.get(f"{cluster.url}/sql/access", headers={"Authorization": f"Bearer {cluster.alice_key}"}, timeout=30)
    assert r.status_code == 200 and r.json()["principal"] == "User:alice"
    admin = httpx.get(f"{cluster.url}/sql/access", headers={"Authorization": _basic("admin")}, timeout=30).json()
    assert admin["super_user"] and admin["read_topics"] == ["orders", "payroll"]
    r = httpx.get(f"{cluster.url}/sql/access", headers={"Authorization": _basic("alice", "wrong")}, timeout=30)
    assert r.status_code == 401 and r.json()["error_code"] == 40101
    r = httpx.get(f"{cluster.url}/sql/access", headers={"Authorization": _basic("mallory")}, timeout=30)
    assert r.status_code == 403 and r.json()["error_code"] == 40301


CLIENT = r'''
import json, sys
from pyspark.sql import SparkSession
port, key = sys.argv[1], sys.argv[2]
out = {}

def attempt(name, url, query=None, read=None):
    spark = None
    try:
        spark = SparkSession.builder.remote(url).create()
        df = spark.sql(query) if query is not None else read(spark)
        out[name] = {"rows": [list(r) for r in df.collect()]}
    except Exception as e:
        out[name] = {"error": str(e)[:2000]}
    finally:
        if spark is not None:
            try:
                spark.stop()
            except Exception:
                pass

for name, url, query in json.loads(sys.argv[3]):
    attempt(name, url.replace("PORT", port).replace("KEY", key), query)
alice = json.loads(sys.argv[3])[0][1].replace("PORT", port)
attempt("alice_reads_a_file", alice, read=lambda s: s.read.text("file:///etc/hostname"))

def python_udf(s):
    from pyspark.sql.functions import udf
    return s.range(3).select(udf(lambda x: x + 1, "long")("id"))

attempt("alice_python_udf", alice, read=python_udf)
print(json.dumps(out))
'''


def _url(user: str, password: str | None = None, extra: str = "") -> str:
    return f"sc://localhost:PORT/;authorization={quote(_basic(user, password), safe='')}{extra}"


@pytest.mark.timeout(2700)  # a sync-tables run, the SQL server's JVM and a dozen Connect sessions, on a shared machine
def test_cluster_credentials_and_topic_read_acls_on_the_sql_server(cluster, tmp_path):
    # The Delta tables (sync-tables, run as the cluster's super user) are reachable through the views too.
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    remote_dir = Path(cluster.remote.replace("file://", ""))
    wait_for(lambda: all(list(remote_dir.glob(f"{t}-0/*.log")) for t in ("orders", "payroll")),
             what="segments of both topics tiered")
    sync = subprocess.run([LAKELOG, "jobs", "run", "sync-tables", "--remote", cluster.remote, "--master", "local[1]"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert sync.returncode == 0, sync.stderr[-3000:]

    server_env = dict(env, LAKELOG_USER="admin", LAKELOG_PASSWORD=PASSWORDS["admin"])  # its own reads of the nodes
    # Also its HTTP endpoint (`lakelog sql` asks it first, through tmp_path/data/sql.http).
    server = start_sql_server(tmp_path, server_env, "--remote", cluster.remote, "--nodes", cluster.url,
                              "--refresh-ms", "500", "--master", "local[2]", "--access-cache-ms", "1000")
    lines = server.lines
    try:
        assert any("authentication is on" in ln for ln in lines), lines
        port = server.address.rsplit(":", 1)[1]
        wait_for(lambda: any("lakelog.orders_table" in ln and "lakelog.payroll" in ln for ln in lines), timeout_s=60,
                 what="the views")
        cases = [
            ("alice_basic", _url("alice"), "SELECT count(*) FROM lakelog.orders"),
            ("alice_api_key", "sc://localhost:PORT/;token=KEY", "SELECT count(*) FROM lakelog.orders"),
            ("alice_table", _url("alice"), "SELECT count(*) > 0 FROM lakelog.orders_table"),
            ("alice_payroll", _url("alice"), "SELECT count(*) FROM lakelog.payroll"),
            ("alice_payroll_table", _url("alice"), "SELECT count(*) FROM lakelog.payroll_table"),
            ("alice_payroll_in_a_subquery", _url("alice"),
             "SELECT count(*) FROM lakelog.orders WHERE EXISTS (SELECT 1 FROM lakelog.payroll)"),
            # The user id a client names is replaced by the authenticated principal: no way to be admin.
            ("alice_as_admin", _url("alice", extra=";user_id=User:admin"), "SELECT count(*) FROM lakelog.payroll"),
            ("bob_payroll", _url("bob"), "SELECT count(*) FROM lakelog.payroll"),
            ("bob_orders", _url("bob"), "SELECT count(*) FROM lakelog.orders"),
            ("wrong_password", _url("alice", "not-her-password"), "SELECT 1"),
            ("no_credentials", "sc://localhost:PORT", "SELECT 1"),
            ("mallory", _url("mallory"), "SELECT 1"),
            ("alice_reflect", _url("alice"), "SELECT reflect('java.lang.System', 'getenv', 'LAKELOG_PASSWORD')"),
            ("alice_transform", _url("alice"), "SELECT TRANSFORM(id) USING 'cat' AS (x) FROM range(1)"),
        ]
        done = subprocess.run([sys.executable, "-c", CLIENT, port, cluster.alice_key, json.dumps(cases)],
                              capture_output=True, text=True, timeout=600, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        got = json.loads(done.stdout.strip().splitlines()[-1])
        assert got["alice_basic"] == {"rows": [[300]]}, got["alice_basic"]
        assert got["alice_api_key"] == {"rows": [[300]]}, got["alice_api_key"]
        assert got["alice_table"] == {"rows": [[True]]}, got["alice_table"]
        assert got["bob_payroll"] == {"rows": [[40]]}, got["bob_payroll"]
        for case, topic in (("alice_payroll", "payroll"), ("alice_payroll_table", "payroll"),
                            ("alice_payroll_in_a_subquery", "payroll"), ("alice_as_admin", "payroll"),
                            ("bob_orders", "orders")):
            error = got[case].get("error", "")
            assert "ACCESS_DENIED" in error and f"is not authorized to READ topic '{topic}'" in error, (case, got[case])
        assert "User:alice is not authorized" in got["alice_as_admin"]["error"]
        assert "User:bob is not authorized" in got["bob_orders"]["error"]
        for case in ("wrong_password", "no_credentials"):
            assert "UNAUTHENTICATED" in got[case].get("error", ""), (case, got[case])
        assert "credentials required" in got["no_credentials"]["error"]
        assert "PERMISSION_DENIED" in got["mallory"].get("error", "") and "may read no topic" in got["mallory"]["error"]
        assert "may read only the lakelog.* tables" in got["alice_reads_a_file"].get("error", ""), got["alice_reads_a_file"]
        for case, what in (("alice_python_udf", "PythonUDF"), ("alice_reflect", "CallMethodViaReflection"),
                           ("alice_transform", "ScriptTransformation")):
            assert f"may not run {what}" in got[case].get("error", ""), (case, got[case])

        # `lakelog sql` presents the user's credentials ($LAKELOG_USER / $LAKELOG_PASSWORD, or --api-key): through
        # the SQL server's HTTP endpoint (pyspark cannot even be imported), and through Spark Connect (nothing
        # listens at the HTTP address it is given), with the same answers.
        address = f"sc://127.0.0.1:{port}"
        no_pyspark = tmp_path / "no-pyspark"
        (no_pyspark / "pyspark").mkdir(parents=True)
        (no_pyspark / "pyspark" / "__init__.py").write_text("raise ImportError('pyspark was imported')\n")
        http_only = {"PYTHONPATH": str(no_pyspark)}
        connect_only = {"LAKELOG_SQL_HTTP_URL": "http://127.0.0.1:9"}

        def sql(*args, way=http_only, **extra):
            return subprocess.run([LAKELOG, "sql", *args, "--server", address, "--format", "csv"], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=300, env=dict(env, **way, **extra))

        for way in (http_only, connect_only):
            alice = dict(way=way, LAKELOG_USER="alice", LAKELOG_PASSWORD=PASSWORDS["alice"])
            out = sql("SELECT count(*) AS n FROM lakelog.orders", **alice)
            assert out.returncode == 0 and out.stdout.splitlines() == ["n", "300"], (way, out.stderr)
            out = sql("SELECT count(*) AS n FROM lakelog.orders", "--api-key", cluster.alice_key, way=way)
            assert out.returncode == 0 and out.stdout.splitlines() == ["n", "300"], (way, out.stderr)
            for query, topic in (("SELECT count(*) AS n FROM lakelog.payroll", "payroll"),
                                 ("SELECT count(*) AS n FROM lakelog.payroll_table", "payroll"),
                                 ("SELECT count(*) FROM lakelog.orders WHERE EXISTS (SELECT 1 FROM lakelog.payroll)",
                                  "payroll")):
                out = sql(query, **alice)
                assert out.returncode == 1 and f"User:alice is not authorized to READ topic '{topic}'" in out.stderr, \
                    (way, query, out.stderr)
            out = sql("SELECT count(*) AS n FROM lakelog.orders", way=way, LAKELOG_USER="bob",
                      LAKELOG_PASSWORD=PASSWORDS["bob"])
            assert out.returncode == 1 and "not authorized to READ topic 'orders'" in out.stderr, (way, out.stderr)
            assert len(out.stderr.strip().splitlines()) == 1 and "Traceback" not in out.stderr
            out = sql("SELECT 1", way=way, LAKELOG_USER="alice", LAKELOG_PASSWORD="wrong")
            assert out.returncode == 1 and "refused the connection" in out.stderr and "credentials" in out.stderr, \
                (way, out.stderr)
            out = sql("SELECT 1", way=way, LAKELOG_USER="mallory", LAKELOG_PASSWORD=PASSWORDS["mallory"])
            assert out.returncode == 1 and "refused the connection" in out.stderr and "may read no topic" in out.stderr, \
                (way, out.stderr)
        # The HTTP endpoint leaves reflect() to Spark Connect, whose checks refuse it.
        out = sql("SELECT reflect('java.lang.System', 'getenv', 'LAKELOG_PASSWORD')", way={},
                  LAKELOG_USER="alice", LAKELOG_PASSWORD=PASSWORDS["alice"])
        assert out.returncode == 1 and "may not run CallMethodViaReflection" in out.stderr, out.stderr
        # With the cluster's authentication on, the server's own token is no way in for a user.
        r = httpx.post(f"{server.http_url}/v1/sql", json={"query": "SELECT count(*) FROM lakelog.payroll"},
                       headers={"Authorization": f"Bearer {server.token}"}, timeout=60)
        assert r.status_code == 401 and r.json()["error_code"] == 40101, r.text
        r = httpx.post(f"{server.http_url}/v1/sql", json={"query": "SELECT 1"}, timeout=60)
        assert r.status_code == 401 and "credentials required" in r.json()["message"], r.text

        # An ACL removed applies to the next query once the server's answer for bob is older than --access-cache-ms.
        bob = dict(LAKELOG_USER="bob", LAKELOG_PASSWORD=PASSWORDS["bob"])
        assert sql("SELECT count(*) AS n FROM lakelog.payroll", **bob).stdout.splitlines() == ["n", "40"]
        with httpx.Client(base_url=cluster.url, auth=ClusterAuth(SECRET.encode(), 0, principal="User:__cluster"),
                          timeout=30) as root:
            r = root.request("DELETE", f"/v3/clusters/{cluster.cluster_id}/acls", params={
                "principal": "User:bob", "resource_type": "TOPIC", "resource_name": "payroll",
                "pattern_type": "LITERAL", "operation": "READ", "permission": "ALLOW"})
            assert r.status_code == 200, r.text
        refused = wait_for(lambda: (lambda o: o if o.returncode == 1 else None)(
            sql("SELECT count(*) AS n FROM lakelog.payroll", **bob)), timeout_s=120, what="the revoked ACL applied")
        assert "User:bob is not authorized to READ topic 'payroll'" in refused.stderr, refused.stderr
    finally:
        code = server.stop()
    assert code == 0, "".join(lines[-20:])
    assert not (tmp_path / "data" / "sql.http").exists()  # the address file goes with the server
    assert not any(pw in "".join(lines) for pw in PASSWORDS.values())  # no credential in the server's output
