"""Security on real node processes: every documented endpoint refuses a request without credentials,
with a wrong password, and from a principal no ACL allows (the list comes from the node's own
OpenAPI document, so no endpoint is missed); ACLs, API keys and users through the v3 API and the CLI;
quotas throttle a greedy principal while a polite one is served; secrets never reach the log,
errors or metrics; TLS end to end with the CLI; a node without the cluster secret cannot join.
"""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import time

import httpx
import pytest

from lakelog.ingest_api.security.cluster_auth import ClusterAuth, sign
from lakelog.logstore.record_batch import Record, build_batch
from tests.support.nodes import LAKELOG, Cluster, NodeProcess, free_port, start_node
from tests.support.security import seed_secured_node
from tests.support.tls import make_pki

SECRET = "security-test-cluster-secret-4f1c"
PASSWORDS = {"admin": "admin-pw-7Hq2", "alice": "alice-pw-Zx81", "mallory": "mallory-pw-Qp05",
             "greedy": "greedy-pw-Lm33", "polite": "polite-pw-Vb62"}
JSON_V2 = "application/vnd.kafka.json.v2+json"
RECORDBATCH = "application/vnd.kafka.recordbatch"
GREEDY_RATE = 20_000  # produce bytes/s of User:greedy


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A node with authentication, the authorizer and a quota for User:greedy; users, topics and ACLs."""
    node = start_node(tmp_path_factory.mktemp("secure"), **{
        "authentication.enabled": "true", "authorizer.enabled": "true", "super.users": "User:admin",
        "cluster.secret": SECRET, "fetch.max.wait.ms": "200", "offsets.topic.num.partitions": "2",
        "group.initial.rebalance.delay.ms": "0", "request.body.timeout.ms": "1000",
        "request.header.timeout.ms": "1000",
        "quota.overrides": json.dumps({"User:greedy": {"producer.byte.rate": GREEDY_RATE}})})
    try:
        cid = seed_secured_node(node.url, SECRET, PASSWORDS, ("orders", "payroll", "bulk"), (
            {"principal": "User:alice", "resource_type": "TOPIC", "resource_name": "orders",
             "pattern_type": "PREFIXED", "operation": "ALL", "permission": "ALLOW"},
            {"principal": "User:alice", "resource_type": "GROUP", "resource_name": "g-alice",
             "pattern_type": "LITERAL", "operation": "READ", "permission": "ALLOW"},
            {"principal": "User:alice", "resource_type": "TOPIC", "resource_name": "orders-secret",
             "pattern_type": "LITERAL", "operation": "READ", "permission": "DENY"},
            {"principal": "User:*", "resource_type": "TOPIC", "resource_name": "bulk",
             "pattern_type": "LITERAL", "operation": "WRITE", "permission": "ALLOW"}))
        node.cluster_id = cid
        yield node
    finally:
        try:
            node.stop()
        finally:
            node.kill()


def _auth(user: str, password: str | None = None) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{PASSWORDS[user] if password is None else password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def _operations(node: NodeProcess) -> list[tuple[str, str]]:
    r = httpx.get(f"{node.url}/openapi.json", headers=_auth("admin"), timeout=30)
    assert r.status_code == 200, r.text
    return [(m.upper(), p) for p, ops in r.json()["paths"].items() for m in ops]


def _fill(path: str, cid: str) -> str:
    values = {"cluster_id": cid, "topic": "orders", "partition": "0", "group": "g-alice", "instance": "i1",
              "name": "retention.ms", "broker_id": "1", "user": "alice", "key_id": "0123456789abcdef",
              "principal": "User:alice", "topic_name": "orders", "partition_id": "0", "consumer_group_id": "g-alice",
              "consumer_id": "m1", "transactional_id": "tx-1",
              "subject": "orders-value", "version": "1", "schema_id": "1", "run_id": "r1"}
    return re.sub(r"\{([a-z_]+)\}", lambda m: values[m.group(1)], path)


def _call(node: NodeProcess, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    body = json.dumps({"topic_name": "made-by-whoever", "transactional_id": "made-by-whoever",
                       "records": [{"value": 1}]}).encode() \
        if method in ("POST", "PUT", "PATCH") else None
    return httpx.request(method, node.url + path, content=body, timeout=30,
                         headers={**headers, "Content-Type": "application/json"})


PUBLIC = {("GET", "/healthz"), ("GET", "/readyz")}


def test_every_documented_endpoint_refuses_bad_credentials_and_unauthorized_principals(secure):
    operations = _operations(secure)
    assert len(operations) > 50  # the node's whole API, security endpoints included
    assert ("POST", "/v3/clusters/{cluster_id}/acls") in operations
    for method, template in operations:
        path = _fill(template, secure.cluster_id)
        if (method, template) in PUBLIC:
            assert _call(secure, method, path, {}).status_code == 200
            continue
        for why, headers in (("no credentials", {}), ("wrong password", _auth("alice", "not-the-password")),
                             ("unknown user", _auth("alice", "x") | {"Authorization": "Basic " + base64.b64encode(
                                 b"nobody:pw").decode()}),
                             ("unknown API key", {"Authorization": "Bearer llk_0123456789abcdef_forged"}),
                             ("garbage", {"Authorization": "Basic !!!"})):
            r = _call(secure, method, path, headers)
            assert r.status_code == 401, (why, method, template, r.status_code, r.text)
            assert r.json()["error_code"] == 40101 and "Basic" in r.headers["WWW-Authenticate"]
        r = _call(secure, method, path, _auth("mallory"))  # authenticated, but no ACL allows anything
        assert r.status_code == 403, (method, template, r.status_code, r.text)
        # a transactional id's refusal is its own code (Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        assert r.json()["error_code"] == (40302 if "/transactions" in template else 40301), (method, template)
    for path in ("/openapi.json", "/docs"):
        assert httpx.get(secure.url + path, timeout=30).status_code == 401


def test_acls_decide_what_an_authenticated_principal_may_do(secure):
    alice = _auth("alice")
    r = httpx.post(f"{secure.url}/topics/orders", json={"records": [{"key": "k", "value": {"n": 1}}]},
                   headers={**alice, "Content-Type": JSON_V2}, timeout=30)
    assert r.status_code == 200, r.text
    batch = build_batch([Record(0, 1_700_000_000_000, b"k", b"v")])
    r = httpx.post(f"{secure.url}/topics/orders/partitions/0", content=batch,
                   headers={**alice, "Content-Type": RECORDBATCH}, timeout=30)
    assert r.status_code == 200, r.text
    r = httpx.get(f"{secure.url}/topics/orders/partitions/0/records?offset=0&timeout=0", timeout=30,
                  headers={**alice, "Accept": "application/vnd.kafka.binary.v2+json"})
    assert r.status_code == 200 and len(r.json()) == 2, r.text
    # DESCRIBE is implied by the ALLOW ALL; another topic is refused; WRITE on bulk is everyone's.
    assert httpx.get(f"{secure.url}/topics/orders", headers=alice, timeout=30).status_code == 200
    r = httpx.get(f"{secure.url}/topics/payroll/partitions/0/records?offset=0", headers=alice, timeout=30)
    assert r.status_code == 403 and r.json()["error_code"] == 40301
    # Naming another principal only counts on a request signed with the cluster secret.
    r = httpx.get(f"{secure.url}/topics/payroll/partitions/0/records?offset=0", timeout=30,
                  headers={**alice, "X-Lakelog-Principal": "User:admin"})
    assert r.status_code == 403
    forged = sign(b"a-guessed-cluster-secret-000", "GET", "/topics/payroll", b"", 1, int(time.time() * 1000))
    r = httpx.get(f"{secure.url}/topics/payroll", headers={**forged, "X-Lakelog-Principal": "User:admin"}, timeout=30)
    assert r.status_code == 401 and r.json()["error_code"] == 40101
    r = httpx.post(f"{secure.url}/topics/bulk", json={"records": [{"value": 1}]},
                   headers={**_auth("mallory"), "Content-Type": JSON_V2}, timeout=30)
    assert r.status_code == 200, r.text
    # Creating a topic needs CREATE on the cluster or on the topic: alice's prefixed ALL covers orders-*.
    cid = secure.cluster_id
    r = httpx.post(f"{secure.url}/v3/clusters/{cid}/topics", json={"topic_name": "orders-eu"}, headers=alice, timeout=30)
    assert r.status_code == 201, r.text
    r = httpx.post(f"{secure.url}/v3/clusters/{cid}/topics", json={"topic_name": "payroll-2"}, headers=alice, timeout=30)
    assert r.status_code == 403, r.text
    # Consumer groups: READ on the group, and READ on each topic subscribed (deny wins on orders-secret).
    r = httpx.post(f"{secure.url}/consumers/g-alice", json={"name": "c1", "format": "binary"}, headers=alice, timeout=30)
    assert r.status_code == 200, r.text
    base = f"{secure.url}/consumers/g-alice/instances/c1"
    r = httpx.post(f"{base}/subscription", json={"topics": ["orders", "payroll"]}, headers=alice, timeout=30)
    assert r.status_code == 403, r.text
    r = httpx.post(f"{base}/subscription", json={"topics": ["orders"]}, headers=alice, timeout=30)
    assert r.status_code == 204, r.text
    r = httpx.post(f"{secure.url}/consumers/g-other", json={}, headers=alice, timeout=30)
    assert r.status_code == 403
    # Deny wins: alice's prefixed ALLOW ALL on orders* covers orders-secret, her DENY READ on it wins.
    r = httpx.post(f"{secure.url}/v3/clusters/{cid}/topics", json={"topic_name": "orders-secret"}, headers=alice,
                   timeout=30)
    assert r.status_code == 201, r.text  # CREATE is still allowed: the DENY names READ only
    r = httpx.post(f"{secure.url}/topics/orders-secret", json={"records": [{"value": "s"}]},
                   headers={**alice, "Content-Type": JSON_V2}, timeout=30)
    assert r.status_code == 200, r.text  # and WRITE
    r = httpx.get(f"{secure.url}/topics/orders-secret/partitions/0/records?offset=0&timeout=0", headers=alice,
                  timeout=30)
    assert r.status_code == 403 and r.json()["error_code"] == 40301, r.text
    r = httpx.post(f"{base}/subscription", json={"topics": ["orders-secret"]}, headers=alice, timeout=30)
    assert r.status_code == 403, r.text
    r = httpx.post(f"{base}/assignments", json={"partitions": [{"topic": "orders-secret", "partition": 0}]},
                   headers=alice, timeout=30)
    assert r.status_code == 403, r.text
    assert httpx.delete(base, headers=alice, timeout=30).status_code == 204
    # ACL changes and refusals are audited.
    log = secure.read_log()
    assert '\\"event\\": \\"acl_created\\"' in log and '\\"event\\": \\"authorization_failed\\"' in log
    assert '\\"principal\\": \\"User:alice\\"' in log


def test_subject_acls_guard_the_schema_registry(secure):
    """SUBJECT ACLs: alice may write and read subjects prefixed orders-, nothing else; an id is
    readable by whoever may READ a subject that uses it."""
    with httpx.Client(base_url=secure.url, auth=ClusterAuth(SECRET.encode(), 0, principal="User:__cluster"), timeout=30) as root:
        r = root.post(f"/v3/clusters/{secure.cluster_id}/acls", json={
            "principal": "User:alice", "resource_type": "SUBJECT", "resource_name": "orders-",
            "pattern_type": "PREFIXED", "operation": "ALL", "permission": "ALLOW"})
        assert r.status_code == 201, r.text
    alice, mallory = _auth("alice"), _auth("mallory")
    schema = {"schema": json.dumps({"type": "record", "name": "O", "fields": [{"name": "n", "type": "int"}]})}
    r = httpx.post(f"{secure.url}/subjects/orders-value/versions", json=schema, headers=alice, timeout=30)
    assert r.status_code == 200, r.text
    schema_id = r.json()["id"]
    r = httpx.post(f"{secure.url}/subjects/payroll-value/versions", json=schema, headers=alice, timeout=30)
    assert (r.status_code, r.json()["error_code"]) == (403, 40301)
    assert httpx.get(f"{secure.url}/subjects/orders-value/versions", headers=alice, timeout=30).json() == [1]
    assert httpx.get(f"{secure.url}/schemas/ids/{schema_id}", headers=alice, timeout=30).status_code == 200
    for path in (f"/schemas/ids/{schema_id}", "/subjects/orders-value/versions/1", "/subjects"):
        r = httpx.get(f"{secure.url}{path}", headers=mallory, timeout=30)
        assert (r.status_code, r.json()["error_code"]) == (403, 40301), path
    r = httpx.delete(f"{secure.url}/subjects/orders-value", headers=mallory, timeout=30)
    assert r.status_code == 403
    assert httpx.get(f"{secure.url}/subjects/orders-value/versions", headers=alice, timeout=30).json() == [1]


def test_api_keys_authenticate_until_revoked(secure):
    cid = secure.cluster_id
    admin = _auth("admin")
    r = httpx.post(f"{secure.url}/v3/clusters/{cid}/api-keys", json={"principal": "User:alice"}, headers=admin, timeout=30)
    assert r.status_code == 201, r.text
    key, key_id = r.json()["api_key"], r.json()["key_id"]
    bearer = {"Authorization": f"Bearer {key}"}
    assert httpx.get(f"{secure.url}/topics/orders", headers=bearer, timeout=30).status_code == 200
    assert httpx.get(f"{secure.url}/topics/payroll", headers=bearer, timeout=30).status_code == 403
    listed = httpx.get(f"{secure.url}/v3/clusters/{cid}/api-keys", headers=admin, timeout=30).json()["data"]
    assert {"key_id": key_id, "principal": "User:alice"} in listed and key not in json.dumps(listed)
    assert httpx.delete(f"{secure.url}/v3/clusters/{cid}/api-keys/{key_id}", headers=admin, timeout=30).status_code == 204
    assert httpx.get(f"{secure.url}/topics/orders", headers=bearer, timeout=30).status_code == 401
    # A changed password takes effect at once (the credential cache is dropped).
    r = httpx.post(f"{secure.url}/v3/clusters/{cid}/users", json={"name": "polite", "password": "new-polite-pw"},
                   headers=admin, timeout=30)
    assert r.status_code == 201
    assert httpx.get(f"{secure.url}/topics/bulk", headers=_auth("polite"), timeout=30).status_code == 401
    PASSWORDS["polite"] = "new-polite-pw"
    assert httpx.post(f"{secure.url}/topics/bulk", json={"records": [{"value": 1}]},
                      headers={**_auth("polite"), "Content-Type": JSON_V2}, timeout=30).status_code == 200


def test_quota_throttles_a_greedy_principal_while_a_polite_one_is_served(secure):
    big = {"records": [{"value": "x" * 10_000} for _ in range(4)]}  # ~40 KB: twice greedy's second
    small = {"records": [{"value": 1}]}
    greedy, polite = _auth("greedy"), _auth("polite")
    statuses = []
    with httpx.Client(base_url=secure.url, timeout=30) as c:
        for _ in range(5):
            r = c.post("/topics/bulk", json=big, headers={**greedy, "Content-Type": JSON_V2})
            statuses.append(r.status_code)
            if r.status_code == 429:
                break
            assert r.status_code == 200, r.text
        assert statuses[-1] == 429, statuses  # the debt of an over-rate produce is refused, not queued
        assert r.json()["error_code"] == 42901
        retry_after = int(r.headers["Retry-After"])
        assert retry_after >= 1
        for _ in range(10):  # the polite principal is not throttled meanwhile
            r = c.post("/topics/bulk", json=small, headers={**polite, "Content-Type": JSON_V2})
            assert r.status_code == 200, r.text
        r = c.post("/topics/bulk", json=small, headers={**greedy, "Content-Type": JSON_V2})
        assert r.status_code == 429  # still in debt
        time.sleep(retry_after + 0.5)  # honour Retry-After (not an assertion on time)
        r = c.post("/topics/bulk", json=small, headers={**greedy, "Content-Type": JSON_V2})
        assert r.status_code == 200, r.text
        # A chunked body (no Content-Length) is charged as it arrives.
        body = json.dumps(big).encode()
        r = c.post("/topics/bulk", content=iter([body[:1000], body[1000:]]),
                   headers={**greedy, "Content-Type": JSON_V2})
        assert r.status_code == 200 and "content-length" not in r.request.headers, r.text
        r = c.post("/topics/bulk", json=small, headers={**greedy, "Content-Type": JSON_V2})
        assert r.status_code == 429, r.text
    assert '\\"event\\": \\"throttled\\"' in secure.read_log()


def test_cli_manages_users_and_acls(secure, tmp_path):
    secret_file = tmp_path / "cluster.properties"  # as `lakelog up` keeps it
    secret_file.write_text(f"cluster.id=x\ncluster.secret={SECRET}\n")
    env = {**os.environ, "LAKELOG_URL": secure.url}
    env.pop("LAKELOG_PASSWORD", None)

    def cli(*args: str, **extra_env: str) -> subprocess.CompletedProcess:
        return subprocess.run([LAKELOG, *args], capture_output=True, text=True, timeout=60, env={**env, **extra_env})

    r = cli("users", "add", "carol", "--cluster-secret-file", str(secret_file), LAKELOG_NEW_PASSWORD="carol-pw-1")
    assert r.returncode == 0, r.stderr
    r = cli("users", "list", "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0 and "carol\tSCRAM-SHA-256" in r.stdout, r.stderr
    r = cli("topics", "list", "--user", "carol", LAKELOG_PASSWORD="carol-pw-1")
    assert r.returncode == 1 and "not authorized" in r.stderr  # no ACL yet
    r = cli("acls", "add", "--allow-principal", "User:carol", "--operation", "describe", "--cluster",
            "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0, r.stderr
    r = cli("acls", "add", "--allow-principal", "User:carol", "--operation", "write", "--transactional-id", "etl-",
            "--resource-pattern-type", "prefixed", "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0, r.stderr
    r = cli("acls", "list", "--principal", "User:carol", "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0 and "User:carol ALLOW DESCRIBE on CLUSTER LITERAL 'kafka-cluster'" in r.stdout
    assert "User:carol ALLOW WRITE on TRANSACTIONAL_ID PREFIXED 'etl-'" in r.stdout
    r = cli("acls", "list", "--transactional-id", "etl-", "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0 and r.stdout.count("\n") == 1 and "TRANSACTIONAL_ID" in r.stdout, r.stdout
    r = cli("topics", "list", "--user", "carol", LAKELOG_PASSWORD="carol-pw-1")
    assert r.returncode == 0 and "orders" in r.stdout, r.stderr
    r = cli("topics", "list", "--user", "carol", "--password", "wrong")
    assert r.returncode == 1 and "authentication failed" in r.stderr
    r = cli("acls", "remove", "--principal", "User:carol", "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0 and r.stdout.count("removed") == 2, r.stdout
    r = cli("users", "remove", "carol", "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0
    r = cli("topics", "list", "--user", "carol", LAKELOG_PASSWORD="carol-pw-1")
    assert r.returncode == 1 and "authentication failed" in r.stderr
    # A quota override set through the admin API throttles at once; removing it lifts it.
    r = cli("quotas", "set", "User:mallory", "--request-rate", "1", "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0 and '"request.rate": 1' in r.stdout, r.stderr
    r = cli("quotas", "list", "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0 and r.stdout.startswith("User:mallory\t")
    statuses = [httpx.post(f"{secure.url}/topics/bulk", json={"records": [{"value": 1}]}, timeout=30,
                           headers={**_auth("mallory"), "Content-Type": JSON_V2}).status_code for _ in range(10)]
    assert 429 in statuses and statuses[0] == 200, statuses  # 1 request/s: ten in a row cannot all pass
    r = cli("quotas", "remove", "User:mallory", "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0, r.stderr
    statuses = [httpx.post(f"{secure.url}/topics/bulk", json={"records": [{"value": 1}]}, timeout=30,
                           headers={**_auth("mallory"), "Content-Type": JSON_V2}).status_code for _ in range(3)]
    assert statuses == [200, 200, 200]
    key = cli("api-keys", "create", "--principal", "User:admin", "--cluster-secret-file", str(secret_file))
    assert key.returncode == 0 and key.stdout.startswith("llk_")
    r = cli("topics", "list", "--api-key", key.stdout.strip())
    assert r.returncode == 0 and "payroll" in r.stdout


def test_oversized_headers_and_slow_bodies_are_refused(secure):
    r = httpx.get(f"{secure.url}/topics", headers={**_auth("admin"), "X-Padding": "p" * 20_000}, timeout=30)
    assert r.status_code == 431 and r.json()["error_code"] == 43101
    # A client that announces a body and trickles it: 408 once request.body.timeout.ms has passed.
    with socket.create_connection(("127.0.0.1", secure.port), timeout=30) as s:
        auth = _auth("alice")["Authorization"]
        s.sendall(f"POST /topics/orders HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n"
                  f"Content-Type: {JSON_V2}\r\nContent-Length: 1000\r\n\r\n{{\"records\": [".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    # Headers trickled (or nothing sent at all): the connection is closed after request.header.timeout.ms.
    for partial in (b"GET /topics HTTP/1.1\r\nHost: x\r\nX-Slow: a", b""):
        with socket.create_connection(("127.0.0.1", secure.port), timeout=30) as s:
            s.sendall(partial)
            assert s.recv(4096) == b""  # closed by the node, no answer
    # The node still serves, on a keep-alive connection too.
    with httpx.Client(base_url=secure.url, headers=_auth("alice"), timeout=30) as c:
        for _ in range(3):
            assert c.get("/topics/orders").status_code == 200


def test_secrets_never_reach_the_log_errors_or_metrics(secure):
    r = httpx.get(f"{secure.url}/topics", headers=_auth("alice", "guess-" + PASSWORDS["admin"]), timeout=30)
    assert r.status_code == 401 and PASSWORDS["admin"] not in r.text
    metrics = httpx.get(f"{secure.url}/metrics", headers=_auth("admin"), timeout=30)
    assert metrics.status_code == 200 and "lakelog_" in metrics.text
    log = secure.read_log()
    assert "authentication_failed" in log  # the refusals were logged ...
    for secret in (SECRET, *PASSWORDS.values(), "guess-"):
        assert secret not in log, secret  # ... without any secret or password, even a wrong one
        assert secret not in metrics.text


def test_tls_end_to_end_with_the_cli_and_a_node_without_the_secret_cannot_join(tmp_path):
    pki = make_pki(tmp_path / "pki")
    tls = {"ssl.certfile": pki.server_cert, "ssl.keyfile": pki.server_key, "ssl.cafile": pki.ca_cert,
           "ssl.client.auth": "required", "min.insync.replicas": "2",
           "authentication.enabled": "true", "authorizer.enabled": "true", "super.users": "User:admin"}
    c = Cluster(tmp_path / "c", 3, tls)
    intruder = c.node(3)
    intruder.overrides["cluster.secret"] = "not-the-cluster-secret-at-all"
    for n in c.nodes:
        n.tls_ca, n.tls_client = pki.ca_cert, (pki.client_cert, pki.client_key)
    try:
        for n in c.nodes:
            n.start(wait=False)
        c.node(1).wait_ready(60)
        c.node(2).wait_ready(60)
        url = c.node(1).url
        assert url.startswith("https://")
        secret_file = tmp_path / "secret"
        secret_file.write_text("test-cluster-secret-0123456789")  # Cluster's
        cli_tls = ["--bootstrap-server", url, "--ca-cert", pki.ca_cert, "--client-cert", pki.client_cert,
                   "--client-key", pki.client_key]
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAKELOG_")}

        def cli(*args: str, stdin: str | None = None, user: str = "admin") -> subprocess.CompletedProcess:
            return subprocess.run([LAKELOG, *args], capture_output=True, text=True, timeout=60, input=stdin,
                                  env={**env, "LAKELOG_USER": user, "LAKELOG_PASSWORD": f"{user}-pw-tls"})

        for user in ("admin", "alice"):
            r = subprocess.run([LAKELOG, "users", "add", user, "--cluster-secret-file", str(secret_file), *cli_tls],
                               capture_output=True, text=True, timeout=60,
                               env={**env, "LAKELOG_NEW_PASSWORD": f"{user}-pw-tls"})
            assert r.returncode == 0, r.stderr
        r = cli("acls", "add", "--allow-principal", "User:alice", "--operation", "read", "--operation", "write",
                "--topic", "secured", *cli_tls)
        assert r.returncode == 0, r.stderr

        # Replicas on nodes 1 and 2 (node 3 never joined): replication and acks=all over TLS.
        r = cli("topics", "create", "secured", "--partitions", "2", "--replication-factor", "2", *cli_tls)
        assert r.returncode == 0, r.stderr
        r = cli("produce", "secured", "--key-separator", ":", *cli_tls, stdin="k1:v1\nk2:v2\nk3:v3\n", user="alice")
        assert r.returncode == 0, r.stderr
        got = []
        for p in (0, 1):  # through node 2: fetches for partitions node 1 leads are forwarded over TLS,
            # acting for alice (the principal travels with the forwarded request)
            r = cli("consume", "secured", "--partition", str(p), "--from-beginning", "--timeout-ms", "500",
                    "--bootstrap-server", c.node(2).url, *cli_tls[2:], user="alice")
            assert r.returncode == 0, r.stderr
            got += r.stdout.split()
        assert sorted(got) == ["v1", "v2", "v3"]
        r = cli("produce", "other", *cli_tls, stdin="x\n", user="alice")
        assert r.returncode == 1 and "not authorized" in r.stderr
        r = cli("topics", "describe", "secured", *cli_tls)
        assert r.returncode == 0 and "Isr: 1,2" in r.stdout.replace("Isr: 2,1", "Isr: 1,2"), r.stdout
        # Without the CA, with another CA, or without a client certificate: refused.
        for bad, reason in ((["--bootstrap-server", url], "CERTIFICATE_VERIFY_FAILED"),  # the node is not trusted
                            (["--bootstrap-server", url, "--ca-cert", pki.other_ca_cert], "CERTIFICATE_VERIFY_FAILED"),
                            # trusted, but no client certificate: TLS 1.3 lets the node refuse it
                            # after the handshake, by closing the connection unanswered
                            (["--bootstrap-server", url, "--ca-cert", pki.ca_cert], "Server disconnected")):
            r = cli("topics", "list", *bad)
            assert r.returncode == 1 and reason in r.stderr, (bad, r.stdout, r.stderr)
        with pytest.raises(httpx.HTTPError):
            httpx.get(url.replace("https://", "http://") + "/readyz", timeout=5)
        # The node without the cluster secret: not registered, not serving, its calls refused.
        brokers = httpx.get(f"{url}/v3/clusters/testcluster0000000000/brokers", timeout=30, auth=("admin", "admin-pw-tls"),
                            verify=intruder._verify()).json()["data"]
        assert sorted(b["broker_id"] for b in brokers) == [1, 2]
        assert httpx.get(f"{intruder.url}/readyz", timeout=5, verify=intruder._verify()).status_code == 503
        assert "signature does not match" in c.node(1).read_log()  # its Raft messages were refused
        body = json.dumps({"replica_id": 3, "partitions": []}).encode()
        forged = sign(b"not-the-cluster-secret-at-all", "POST", "/internal/replication/fetch", body, 3,
                      int(time.time() * 1000))
        r = httpx.post(f"{url}/internal/replication/fetch", content=body, headers=forged, timeout=10,
                       verify=intruder._verify())
        assert r.status_code == 401 and r.json()["error_code"] == 40101
    finally:
        c.stop()


# ------------------------------------------------------------------ the findings of the outside sweep


def test_a_signed_request_acts_only_as_the_principal_inside_its_signature(secure):
    now = int(time.time() * 1000)
    named = sign(SECRET.encode(), "GET", "/topics", b"", 1, now, principal="User:mallory")
    r = httpx.get(f"{secure.url}/topics", headers=named, timeout=30)
    assert r.status_code == 403 and r.json()["error_code"] == 40301, r.text
    # The same request stripped of its principal is not the cluster itself: it is refused.
    stripped = {k: v for k, v in named.items() if k != "X-Lakelog-Principal"}
    r = httpx.get(f"{secure.url}/topics", headers=stripped, timeout=30)
    assert r.status_code == 401 and r.json()["error_code"] == 40101, r.text
    r = httpx.get(f"{secure.url}/topics", headers=sign(SECRET.encode(), "GET", "/topics", b"", 1, now), timeout=30)
    assert r.status_code == 401 and "principal" in r.json()["message"], r.text
    r = httpx.get(f"{secure.url}/topics", headers={**named, "X-Lakelog-Principal": "User:__cluster"}, timeout=30)
    assert r.status_code == 401, r.text
    r = httpx.get(f"{secure.url}/topics", headers=sign(SECRET.encode(), "GET", "/topics", b"", 1, now,
                                                       principal="User:__cluster"), timeout=30)
    assert r.status_code == 200, r.text  # an operator holding the secret names the cluster's super user


def test_authorization_is_answered_before_existence(secure):
    mallory = {**_auth("mallory"), "Content-Type": "application/json"}
    for cid in (secure.cluster_id, "made-up-cluster-id"):
        r = httpx.post(f"{secure.url}/v3/clusters/{cid}/topics", json={"topic_name": "payroll-9"}, headers=mallory,
                       timeout=30)
        assert r.status_code == 403 and r.json()["error_code"] == 40301, (cid, r.text)
    for path in ("/healthz", "/readyz"):  # public, for load balancers that probe with HEAD
        assert httpx.head(secure.url + path, timeout=30).status_code == 200, path
    r = subprocess.run([LAKELOG, "users", "add", "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--new-password" in r.stdout
    import lakelog.cli.security as cli_security

    assert "users add NAME [--new-password P]" in cli_security.__doc__


def test_max_header_bytes_is_enforced_while_the_headers_arrive(secure):
    """A header that never ends is answered 431 once max.header.bytes have arrived, not buffered on."""
    limit = 16384  # max.header.bytes (the default)
    with socket.create_connection(("127.0.0.1", secure.port), timeout=30) as s:
        s.sendall(b"GET /topics HTTP/1.1\r\nHost: x\r\nX-Padding: ")
        sent = 0
        try:
            while sent < 64 * limit:  # never the blank line that ends the headers
                s.sendall(b"p" * 4096)
                sent += 4096
        except (BrokenPipeError, ConnectionResetError):
            pass  # the node answered and closed while we were still sending: what we want
        answer = b""
        try:
            while b"\r\n\r\n" not in answer:
                chunk = s.recv(4096)
                if not chunk:
                    break
                answer += chunk
        except ConnectionResetError:
            pass
    assert answer.startswith(b"HTTP/1.1 431"), (sent, answer[:200])
    assert b"43101" in answer
    with httpx.Client(base_url=secure.url, headers=_auth("alice"), timeout=30) as c:
        assert c.get("/topics/orders").status_code == 200  # and the node still serves


def test_without_its_own_cluster_secret_a_secured_node_does_not_start(tmp_path):
    secured = {"authentication.enabled": "true", "authorizer.enabled": "true", "super.users": "User:admin"}
    for name, overrides in (("unset", secured), ("authorizer-only", {"authorizer.enabled": "true"}),
                            ("public-default", {**secured, "cluster.secret": "lakelog-local-cluster-secret"})):
        node = NodeProcess(tmp_path / name, free_port(), overrides=overrides)
        with pytest.raises(RuntimeError, match="node exited"):
            node.start(30)
        assert "cluster.secret" in node.read_log(), node.read_log()
        node.kill()
    # The secret from a file (as `lakelog up` passes it) or from the environment; never on the command line.
    secret_file = tmp_path / "cluster.properties"
    secret_file.write_text(f"cluster.id=x\ncluster.secret={SECRET}\n")
    node = NodeProcess(tmp_path / "from-file", free_port(), overrides={**secured, "cluster.secret.file": str(secret_file)})
    try:
        node.start(30)
        assert SECRET not in " ".join(node.proc.args)
        r = httpx.get(f"{node.url}/topics", auth=ClusterAuth(SECRET.encode(), 0, principal="User:__cluster"),
                      timeout=30)
        assert r.status_code == 200, r.text
        # A request signed with the old built-in default is refused, on the client API and internally.
        cid = httpx.get(f"{node.url}/readyz", timeout=30).json()["cluster_id"]
        body = json.dumps({"name": "eve", "password": "eve-password"}).encode()
        for principal in ("User:__cluster", None):
            signed = sign(b"lakelog-local-cluster-secret", "POST", f"/v3/clusters/{cid}/users", body, 7,
                          int(time.time() * 1000), principal=principal)
            r = httpx.post(f"{node.url}/v3/clusters/{cid}/users", content=body, timeout=30,
                           headers={**signed, "Content-Type": "application/json"})
            assert r.status_code == 401, r.text
    finally:
        node.stop()
        node.kill()


def test_a_lone_node_without_security_makes_its_own_secret_and_keeps_it(tmp_path):
    node = NodeProcess(tmp_path / "data", free_port())
    try:
        node.start(30)
        path = tmp_path / "data" / "cluster.secret"
        secret = path.read_text().strip()
        assert len(secret) >= 32 and (path.stat().st_mode & 0o777) == 0o600
        body = json.dumps({"replica_id": 2, "partitions": []}).encode()
        for key, status in ((b"lakelog-local-cluster-secret", 401), (secret.encode(), None)):
            signed = sign(key, "POST", "/internal/replication/fetch", body, 2, int(time.time() * 1000))
            r = httpx.post(f"{node.url}/internal/replication/fetch", content=body, headers=signed, timeout=30)
            if status is not None:
                assert r.status_code == status, r.text
            else:
                assert r.status_code != 401, r.text
        node.restart(30)
        assert path.read_text().strip() == secret
    finally:
        node.stop()
        node.kill()


@pytest.fixture(scope="module")
def secure_pair(tmp_path_factory):
    """Two secured nodes: alice may read orders-*, bob only group grp-shared; consumer instances on node 1."""
    c = Cluster(tmp_path_factory.mktemp("pair"), 2, {
        "authentication.enabled": "true", "authorizer.enabled": "true", "super.users": "User:admin",
        "cluster.secret": SECRET, "fetch.max.wait.ms": "200", "offsets.topic.num.partitions": "2",
        "group.initial.rebalance.delay.ms": "0"})
    try:
        c.start()
        with httpx.Client(base_url=c.node(1).url, timeout=30,
                          auth=ClusterAuth(SECRET.encode(), 0, principal="User:__cluster")) as root:
            cid = root.get("/v3/clusters").json()["data"][0]["cluster_id"]
            for name in ("admin", "alice", "bob"):
                r = root.post(f"/v3/clusters/{cid}/users", json={"name": name, "password": PASSWORDS.get(name, "bob-pw-Kd40")})
                assert r.status_code == 201, r.text
            r = root.post(f"/v3/clusters/{cid}/topics", json={"topic_name": "orders-t1", "partitions_count": 2})
            assert r.status_code == 201, r.text
            for acl in ({"principal": "User:alice", "resource_type": "TOPIC", "resource_name": "orders",
                         "pattern_type": "PREFIXED", "operation": "ALL", "permission": "ALLOW"},
                        {"principal": "User:alice", "resource_type": "GROUP", "resource_name": "grp-shared",
                         "pattern_type": "LITERAL", "operation": "READ", "permission": "ALLOW"},
                        {"principal": "User:bob", "resource_type": "GROUP", "resource_name": "grp-shared",
                         "pattern_type": "LITERAL", "operation": "READ", "permission": "ALLOW"}):
                r = root.post(f"/v3/clusters/{cid}/acls", json=acl)
                assert r.status_code == 201, r.text
        c.cluster_id = cid
        yield c
    finally:
        c.stop()


def test_a_consumer_instance_belongs_to_its_creator_and_reads_only_what_the_caller_may(secure_pair):
    n1, n2 = secure_pair.nodes
    alice = {**_auth("alice"), "Content-Type": "application/vnd.kafka.v2+json"}
    bob = {"Authorization": "Basic " + base64.b64encode(b"bob:bob-pw-Kd40").decode(),
           "Content-Type": "application/vnd.kafka.v2+json"}
    leaders = {p["partition"]: p["leader"] for p in httpx.get(f"{n1.url}/topics/orders-t1/partitions",
                                                               headers=alice, timeout=30).json()}
    assert sorted(leaders.values()) == [1, 2], leaders  # one partition led by each node
    for p in (0, 1):  # through node 1: one of the two is forwarded to node 2, acting for alice
        r = httpx.post(f"{n1.url}/topics/orders-t1/partitions/{p}", timeout=30,
                       json={"records": [{"value": f"p{p}-v{i}"} for i in range(3)]},
                       headers={**alice, "Content-Type": JSON_V2})
        assert r.status_code == 200, r.text
    r = httpx.post(f"{n1.url}/consumers/grp-shared", json={"name": "inst-alice", "format": "json",
                                                          "auto.offset.reset": "earliest"}, headers=alice, timeout=30)
    assert r.status_code == 200, r.text
    path = "/consumers/grp-shared/instances/inst-alice"
    r = httpx.post(f"{n1.url}{path}/assignments", json={"partitions": [{"topic": "orders-t1", "partition": 0},
                                                                        {"topic": "orders-t1", "partition": 1}]},
                   headers=alice, timeout=30)
    assert r.status_code == 204, r.text
    # Bob, with READ on the group only: his own fetch of the topic is refused, and so is every use of
    # alice's instance, on the node that holds it and through the other node's forwarding.
    r = httpx.get(f"{n1.url}/topics/orders-t1/partitions/0/records?offset=0", headers=bob, timeout=30)
    assert r.status_code == 403
    for url in (n1.url, n2.url):
        for method, suffix, body in (("GET", "/records?timeout=0", None), ("GET", "/assignments", None),
                                     ("GET", "/subscription", None), ("POST", "/offsets", {}),
                                     ("POST", "/positions/beginning", {"partitions": [{"topic": "orders-t1",
                                                                                       "partition": 0}]}),
                                     ("DELETE", "/subscription", None), ("DELETE", "", None)):
            r = httpx.request(method, f"{url}{path}{suffix}", json=body, timeout=30,
                              headers={**bob, "Accept": JSON_V2})
            assert r.status_code == 403 and r.json()["error_code"] == 40301, (url, method, suffix, r.text)
    # Bob's own instance in the group cannot be given alice's topic either.
    r = httpx.post(f"{n2.url}/consumers/grp-shared", json={"name": "inst-bob"}, headers=bob, timeout=30)
    assert r.status_code == 200, r.text
    r = httpx.post(f"{n2.url}/consumers/grp-shared/instances/inst-bob/assignments", headers=bob, timeout=30,
                   json={"partitions": [{"topic": "orders-t1", "partition": 0}]})
    assert r.status_code == 403, r.text
    assert httpx.delete(f"{n1.url}/consumers/grp-shared/instances/inst-bob", headers=bob, timeout=30).status_code == 204
    # Alice reads her records through either node (the forwarded request acts for her).
    got = []
    for _ in range(20):
        r = httpx.get(f"{n2.url}{path}/records?timeout=200", headers={**alice, "Accept": JSON_V2}, timeout=30)
        assert r.status_code == 200, r.text
        got += [rec["value"] for rec in r.json()]
        if len(got) >= 6:
            break
    # Both partitions, the one led by the other node too (the instance fetches there as alice).
    assert sorted(got) == [f"p{p}-v{i}" for p in (0, 1) for i in range(3)]
    # The topic ACLs are checked on every use, not only when the instance was assigned: a DENY added
    # afterwards stops alice's reads and commits of that topic.
    deny = {"principal": "User:alice", "resource_type": "TOPIC", "resource_name": "orders-t1",
            "pattern_type": "LITERAL", "operation": "READ", "permission": "DENY"}
    admin = _auth("admin")
    r = httpx.post(f"{n1.url}/v3/clusters/{secure_pair.cluster_id}/acls", json=deny, headers=admin, timeout=30)
    assert r.status_code == 201, r.text
    for url in (n1.url, n2.url):
        r = httpx.get(f"{url}{path}/records?timeout=0", headers={**alice, "Accept": JSON_V2}, timeout=30)
        assert r.status_code == 403, (url, r.text)
        r = httpx.post(f"{url}{path}/offsets", json={}, headers=alice, timeout=30)
        assert r.status_code == 403, (url, r.text)
    r = httpx.request("DELETE", f"{n1.url}/v3/clusters/{secure_pair.cluster_id}/acls", params=deny, headers=admin,
                      timeout=30)
    assert r.status_code == 200, r.text
    r = httpx.post(f"{n2.url}{path}/offsets", json={}, headers=alice, timeout=30)
    assert r.status_code == 200, r.text
    assert httpx.delete(f"{n2.url}{path}", headers=alice, timeout=30).status_code == 204
