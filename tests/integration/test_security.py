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

from lakelog.ingest_api.cluster.auth import ClusterAuth, sign
from lakelog.logstore.record_batch import Record, build_batch
from tests.support.nodes import LAKELOG, Cluster, NodeProcess, start_node
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
        with httpx.Client(base_url=node.url, auth=ClusterAuth(SECRET.encode(), 0), timeout=30) as root:
            cid = root.get("/v3/clusters").json()["data"][0]["cluster_id"]
            for name, pw in PASSWORDS.items():
                r = root.post(f"/v3/clusters/{cid}/users", json={"name": name, "password": pw})
                assert r.status_code == 201, r.text
            for topic in ("orders", "payroll", "bulk"):
                r = root.post(f"/v3/clusters/{cid}/topics", json={"topic_name": topic, "partitions_count": 1})
                assert r.status_code == 201, r.text
            for acl in ({"principal": "User:alice", "resource_type": "TOPIC", "resource_name": "orders",
                         "pattern_type": "PREFIXED", "operation": "ALL", "permission": "ALLOW"},
                        {"principal": "User:alice", "resource_type": "GROUP", "resource_name": "g-alice",
                         "pattern_type": "LITERAL", "operation": "READ", "permission": "ALLOW"},
                        {"principal": "User:alice", "resource_type": "TOPIC", "resource_name": "orders-secret",
                         "pattern_type": "LITERAL", "operation": "READ", "permission": "DENY"},
                        {"principal": "User:*", "resource_type": "TOPIC", "resource_name": "bulk",
                         "pattern_type": "LITERAL", "operation": "WRITE", "permission": "ALLOW"}):
                r = root.post(f"/v3/clusters/{cid}/acls", json=acl)
                assert r.status_code == 201, r.text
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
              "consumer_id": "m1"}
    return re.sub(r"\{([a-z_]+)\}", lambda m: values[m.group(1)], path)


def _call(node: NodeProcess, method: str, path: str, headers: dict[str, str]) -> httpx.Response:
    body = json.dumps({"topic_name": "made-by-whoever", "records": [{"value": 1}]}).encode() \
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
        assert r.json()["error_code"] == 40301
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
    assert httpx.delete(base, headers=alice, timeout=30).status_code == 204
    # ACL changes and refusals are audited.
    log = secure.read_log()
    assert '\\"event\\": \\"acl_created\\"' in log and '\\"event\\": \\"authorization_failed\\"' in log
    assert '\\"principal\\": \\"User:alice\\"' in log


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
    r = cli("acls", "list", "--principal", "User:carol", "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0 and "User:carol ALLOW DESCRIBE on CLUSTER LITERAL 'kafka-cluster'" in r.stdout
    r = cli("topics", "list", "--user", "carol", LAKELOG_PASSWORD="carol-pw-1")
    assert r.returncode == 0 and "orders" in r.stdout, r.stderr
    r = cli("topics", "list", "--user", "carol", "--password", "wrong")
    assert r.returncode == 1 and "authentication failed" in r.stderr
    r = cli("acls", "remove", "--principal", "User:carol", "--user", "admin", LAKELOG_PASSWORD=PASSWORDS["admin"])
    assert r.returncode == 0 and r.stdout.count("removed") == 1, r.stdout
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
        for bad in (["--bootstrap-server", url],
                    ["--bootstrap-server", url, "--ca-cert", pki.other_ca_cert],
                    ["--bootstrap-server", url, "--ca-cert", pki.ca_cert]):
            r = cli("topics", "list", *bad)
            assert r.returncode == 1, (bad, r.stdout)
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
