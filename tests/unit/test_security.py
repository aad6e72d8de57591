"""Client security, pure parts: credentials, API keys, ACLs and the authorizer, quotas, access rules,
the metadata records of users, keys and ACLs (applied, snapshotted, restored)."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.http import access
from lakelog.ingest_api.security.acl import CLUSTER_NAME, AclBinding, AclFilter, Authorizer, Operation, ResourceType
from lakelog.ingest_api.security.credentials import (MIN_ITERATIONS, CredentialCache, make_credential, new_api_key,
                                             parse_api_key, verify_password)
from lakelog.ingest_api.security.errors import InvalidSecurityRequestError, SecurityNotFoundError
from lakelog.ingest_api.security.quotas import FETCH, PRODUCE, REQUEST, QuotaLimits, QuotaManager, TokenBucket, parse_overrides
from lakelog.ingest_api.security.records import SecurityState, controller_records

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
R, W, D, A = Operation.READ, Operation.WRITE, Operation.DESCRIBE, Operation.ALTER


def acl(principal, rtype, name, op, perm="ALLOW", pattern="LITERAL") -> AclBinding:
    return AclBinding.from_dict({"principal": principal, "resource_type": rtype, "resource_name": name,
                                 "pattern_type": pattern, "operation": op, "permission": perm})


# ---------------------------------------------------------------------------------- credentials

def test_scram_credential_matches_rfc_7677_derivation():
    salt = b"0123456789abcdef"
    cred = make_credential("pencil", MIN_ITERATIONS, salt)
    salted = hashlib.pbkdf2_hmac("sha256", b"pencil", salt, MIN_ITERATIONS)
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    assert cred.stored_key == hashlib.sha256(client_key).digest()
    assert cred.server_key == hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    assert cred.mechanism == "SCRAM-SHA-256" and cred.iterations == MIN_ITERATIONS


def test_password_verification_and_fresh_salts():
    a, b = make_credential("s3cret"), make_credential("s3cret")
    assert a.salt != b.salt and a.stored_key != b.stored_key
    assert verify_password(a, "s3cret") and verify_password(b, "s3cret")
    assert not verify_password(a, "s3cret ") and not verify_password(a, "") and not verify_password(a, "x" * 5000)
    assert "s3cret" not in repr(a.to_dict())
    with pytest.raises(ValueError):
        make_credential("")
    with pytest.raises(ValueError):
        make_credential("x", iterations=10)


def test_api_keys_parse_and_hash():
    key_id, key, digest = new_api_key()
    assert parse_api_key(key) == (key_id, digest)
    for bad in ("", "llk_", "llk_short_x", "Bearer " + key, "xxx" + key, key[:20]):
        parsed = parse_api_key(bad)
        assert parsed is None or parsed != (key_id, digest)


def test_credential_cache_is_dropped_when_users_change():
    cache = CredentialCache(max_entries=2)
    cache.put("Basic abc", 1, "User:a")
    assert cache.get("Basic abc", 1) == "User:a"
    assert cache.get("Basic abc", 2) is None  # users changed: forget everything
    for i in range(3):
        cache.put(f"h{i}", 2, f"User:{i}")
    assert cache.get("h0", 2) is None and cache.get("h2", 2) == "User:2"  # bounded, LRU


# ------------------------------------------------------------------------------------- the ACLs

def test_acl_validation():
    for bad in ({"principal": "alice"}, {"resource_type": "BROKER"}, {"operation": "EXPLODE"},
                {"permission": "MAYBE"}, {"resource_name": ""}, {"host": "10.0.0.1"},
                {"resource_type": "CLUSTER", "resource_name": "other"},
                {"pattern_type": "PREFIXED", "resource_name": "*"}):
        doc = {"principal": "User:a", "resource_type": "TOPIC", "resource_name": "t", "operation": "READ",
               "permission": "ALLOW", **bad}
        with pytest.raises(ValueError):
            AclBinding.from_dict(doc)
    b = acl("User:a", "topic", "t", "read", "allow")  # case-insensitive enums
    assert b.to_dict()["operation"] == "READ" and b == AclBinding.from_dict(b.to_dict())


def test_no_matching_allow_means_deny_and_deny_wins():
    auth = Authorizer([acl("User:a", "TOPIC", "orders", "READ"),
                       acl("User:a", "TOPIC", "ord", "ALL", pattern="PREFIXED"),
                       acl("User:a", "TOPIC", "orders-secret", "READ", "DENY"),
                       acl("User:*", "GROUP", "*", "READ"),
                       acl("User:b", "TOPIC", "*", "ALL"),
                       acl("User:b", "TOPIC", "pay", "ALL", "DENY", "PREFIXED")])
    assert auth.authorize("User:a", R, T, "orders")
    assert auth.authorize("User:a", W, T, "orders-2")  # prefixed ALL
    assert not auth.authorize("User:a", R, T, "orders-secret")  # deny wins over the prefixed ALL
    assert auth.authorize("User:a", W, T, "orders-secret")  # deny was READ only
    assert not auth.authorize("User:a", R, T, "other")
    assert auth.authorize("User:zed", R, G, "any-group")  # wildcard principal and resource
    assert not auth.authorize("User:zed", R, T, "orders")
    assert auth.authorize("User:b", W, T, "anything") and not auth.authorize("User:b", R, T, "payments")
    assert not auth.authorize("User:a", D, C, CLUSTER_NAME)


def test_describe_is_implied_by_read_write_delete_alter_allows_only():
    for op in ("READ", "WRITE", "DELETE", "ALTER"):
        assert Authorizer([acl("User:a", "TOPIC", "t", op)]).authorize("User:a", D, T, "t")
    assert not Authorizer([acl("User:a", "TOPIC", "t", "CREATE")]).authorize("User:a", D, T, "t")
    # A DENY of READ does not deny DESCRIBE, a DENY of DESCRIBE does.
    assert Authorizer([acl("User:a", "TOPIC", "t", "ALL"), acl("User:a", "TOPIC", "t", "READ", "DENY")]
                      ).authorize("User:a", D, T, "t")
    assert not Authorizer([acl("User:a", "TOPIC", "t", "ALL"), acl("User:a", "TOPIC", "t", "DESCRIBE", "DENY")]
                          ).authorize("User:a", D, T, "t")


def test_transactional_id_bindings_prefixes_implied_describe_and_http_rules():
    X = ResourceType.TRANSACTIONAL_ID
    auth = Authorizer([acl("User:a", "TRANSACTIONAL_ID", "etl-", "WRITE", pattern="PREFIXED"),
                       acl("User:a", "TOPIC", "etl-", "ALL", pattern="PREFIXED")])
    assert auth.authorize("User:a", W, X, "etl-7") and auth.authorize("User:a", D, X, "etl-7")
    assert not auth.authorize("User:a", W, X, "other") and not auth.authorize("User:a", W, T, "other")
    assert not auth.authorize("User:a", W, T, "etl") and not auth.authorize("User:a", R, X, "etl-7")
    # A topic ACL never stands for a transactional id of the same name, nor the reverse.
    assert not Authorizer([acl("User:a", "TOPIC", "t", "ALL")]).authorize("User:a", W, X, "t")
    req = access.requirement("GET", "/v3/clusters/c1/transactions/etl-7")
    assert (req.resource_type, req.resource_name, req.operation) == (X, "etl-7", D)
    req = access.requirement("POST", "/v3/clusters/c1/transactions/etl-7/partitions")
    assert (req.resource_type, req.resource_name, req.operation, req.kind) == (X, "etl-7", W, "body")
    # The id of a begin or of `{id}:commit` is checked by the router (from the body / the name).
    assert access.requirement("POST", "/v3/clusters/c1/transactions").kind == "body"
    assert access.requirement("POST", "/v3/clusters/c1/transactions/etl-7:commit").kind == "body"


def test_super_users_and_allow_everyone_if_no_acl_found():
    acls = [acl("User:a", "TOPIC", "guarded", "READ")]
    assert Authorizer(acls, super_users={"User:root"}).authorize("User:root", A, C, CLUSTER_NAME)
    lax = Authorizer(acls, allow_everyone_if_no_acl_found=True)
    assert lax.authorize("User:x", R, T, "unguarded")  # no ACL names it
    assert not lax.authorize("User:x", R, T, "guarded")  # an ACL names it: the usual rules
    assert not Authorizer(acls).authorize("User:x", R, T, "unguarded")


def test_acl_filter():
    b = acl("User:a", "TOPIC", "t", "READ")
    assert AclFilter.from_params({}).matches(b)
    assert AclFilter.from_params({"principal": "User:a", "operation": "ANY", "resource_type": "topic"}).matches(b)
    assert not AclFilter.from_params({"permission": "DENY"}).matches(b)
    with pytest.raises(ValueError):
        AclFilter.from_params({"operation": "NOPE"})


# --------------------------------------------------------------------------------------- quotas

def test_token_bucket_debt_and_refill():
    b = TokenBucket(rate=100, window_s=1.0, now=0.0)
    assert b.delay_s(0.0) == 0
    b.take(0.0, 300)  # 200 over: two seconds of debt
    assert b.delay_s(0.0) == pytest.approx(2.0)
    assert b.delay_s(1.0) == pytest.approx(1.0)
    assert b.delay_s(2.5) == 0
    assert b.tokens <= b.capacity


def test_quota_manager_throttles_a_greedy_principal_only():
    q = QuotaManager(QuotaLimits(producer_byte_rate=1000, request_rate=0),
                     parse_overrides('{"User:vip": {"producer.byte.rate": 0, "request.rate": 5}}'))
    assert q.admit("User:greedy", (REQUEST, PRODUCE), 0.0) == 0
    q.record("User:greedy", PRODUCE, 5000, 0.0)
    assert q.admit("User:greedy", (REQUEST, PRODUCE), 0.0) == pytest.approx(4.0)
    assert q.admit("User:polite", (REQUEST, PRODUCE), 0.0) == 0  # buckets are per principal
    assert q.admit("User:greedy", (REQUEST, FETCH), 0.0) == 0  # fetch is another quota
    assert q.admit("User:greedy", (REQUEST, PRODUCE), 4.01) == 0
    admitted = sum(q.admit("User:vip", (REQUEST,), 0.0) == 0 for _ in range(20))
    assert admitted == 5  # request.rate=5 with a 1 s window: a burst of 5


def test_a_request_rate_of_one_admits_one_request_a_second():
    q = QuotaManager(QuotaLimits(request_rate=1))
    assert q.admit("User:a", (REQUEST,), 0.0) == 0
    assert q.admit("User:a", (REQUEST,), 0.1) == pytest.approx(0.9)
    assert q.admit("User:a", (REQUEST,), 1.0) == 0


def test_dynamic_overrides_win_key_by_key():
    q = QuotaManager(QuotaLimits(producer_byte_rate=100, request_rate=50),
                     parse_overrides('{"User:a": {"producer.byte.rate": 10}}'))
    assert not QuotaManager(QuotaLimits()).enabled
    q.set_dynamic({"User:a": {"request.rate": 5}, "User:b": {"producer.byte.rate": 0}})
    assert q.rate("User:a", PRODUCE) == 10 and q.rate("User:a", REQUEST) == 5
    assert q.rate("User:b", PRODUCE) == 0 and q.rate("User:b", REQUEST) == 50  # 0 = unlimited for b
    off = QuotaManager(QuotaLimits())
    off.set_dynamic({"User:a": {"request.rate": 1}})
    assert off.enabled


def test_quota_overrides_are_validated():
    for bad in ("[]", '{"alice": {}}', '{"User:a": {"bytes": 1}}', '{"User:a": {"request.rate": -1}}'):
        with pytest.raises(ValueError):
            parse_overrides(bad)
    assert parse_overrides("") == {}


# ------------------------------------------------------------------------------- access rules

def test_access_rules_cover_paths_and_fail_closed():
    r = access.requirement("POST", "/topics/orders/partitions/3")
    assert (r.resource_type, r.resource_name, r.operation, r.kind) == (T, "orders", W, "produce")
    r = access.requirement("GET", "/consumers/g1/instances/i/records")
    assert (r.resource_type, r.resource_name, r.operation, r.kind) == (G, "g1", R, "fetch")
    r = access.requirement("POST", "/v3/clusters/x/topics/t/configs:alter")
    assert (r.resource_type, r.resource_name, r.operation) == (T, "t", A)
    assert access.requirement("GET", "/v3/clusters/x/acls").resource_name == CLUSTER_NAME
    assert access.requirement("GET", "/nowhere") is None
    assert access.requirement("GET", "/topics/a/b/c/d/e") is None
    assert ("GET", "/healthz") in access.PUBLIC and ("GET", "/metrics") not in access.PUBLIC


def test_every_documented_operation_has_an_access_rule():
    from lakelog.ingest_api.http.app import create_app
    from lakelog.ingest_api.config.node import NodeConfig
    from lakelog.ingest_api.node import Node

    doc = create_app(Node(NodeConfig({}))).openapi()
    missing = [(m.upper(), p) for p, ops in doc["paths"].items() for m in ops
               if access.requirement(m.upper(), p) is None and (m.upper(), p) not in access.PUBLIC]
    assert missing == []
    public = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops if (m.upper(), p) in access.PUBLIC}
    assert public == {("GET", "/healthz"), ("GET", "/readyz")}


# ------------------------------------------------------------------------ the metadata records

def _apply(image: ClusterImage, op: str, args: dict) -> dict:
    records, result = controller_records(op, args, image.security)
    for rec in records:
        image.apply_record(rec)
    return result


def test_users_keys_and_acls_replicate_through_the_image_and_its_snapshot():
    img = ClusterImage()
    before = img.snapshot()
    assert b"security" not in before  # unused: the snapshot is unchanged
    cred = make_credential("hunter2-zebra")
    _apply(img, "upsert_user", {"name": "alice", "credential": cred.to_dict()})
    key_id, key, digest = new_api_key()
    _apply(img, "create_api_key", {"key_id": key_id, "principal": "User:svc", "secret_sha256": digest.hex()})
    _apply(img, "create_acls", {"acls": [acl("User:alice", "TOPIC", "t", "READ").to_dict(),
                                         acl("User:alice", "GROUP", "g", "READ").to_dict()]})
    gen = img.security.generation
    restored = ClusterImage()
    restored.restore(img.snapshot())
    assert restored.security == img.security and restored.snapshot() == img.snapshot()
    assert verify_password(restored.security.users["alice"]["SCRAM-SHA-256"], "hunter2-zebra")
    assert b"hunter2-zebra" not in img.snapshot()  # no password in the metadata
    result = _apply(img, "delete_acls", {"filter": {"resource_type": "TOPIC"}})
    assert [d["resource_name"] for d in result["deleted"]] == ["t"]
    assert img.security.generation != gen and len(img.security.acls) == 1
    _apply(img, "alter_quota", {"principal": "User:svc", "quotas": {"request.rate": 5}})
    assert img.security.quotas == {"User:svc": {"request.rate": 5}}
    again = ClusterImage()
    again.restore(img.snapshot())
    assert again.security.quotas == img.security.quotas
    with pytest.raises(InvalidSecurityRequestError):
        controller_records("alter_quota", {"principal": "User:svc", "quotas": {"bytes": 1}}, img.security)
    _apply(img, "alter_quota", {"principal": "User:svc", "quotas": None})
    assert not img.security.quotas
    _apply(img, "delete_user", {"name": "alice"})
    _apply(img, "delete_api_key", {"key_id": key_id})
    assert not img.security.users and not img.security.api_keys


def test_bad_security_requests_and_records():
    img = ClusterImage()
    with pytest.raises(SecurityNotFoundError):
        controller_records("delete_user", {"name": "ghost"}, img.security)
    with pytest.raises(InvalidSecurityRequestError):
        controller_records("upsert_user", {"name": "../etc", "credential": make_credential("x").to_dict()},
                           img.security)
    with pytest.raises(InvalidSecurityRequestError):
        controller_records("create_acls", {"acls": []}, img.security)
    # The principal of cluster-signed requests cannot be taken by a user or an API key.
    with pytest.raises(InvalidSecurityRequestError):
        controller_records("upsert_user", {"name": "__cluster", "credential": make_credential("x").to_dict()},
                           img.security)
    with pytest.raises(InvalidSecurityRequestError):
        controller_records("create_api_key", {"key_id": "0" * 16, "principal": "User:__cluster",
                                              "secret_sha256": "0" * 64}, img.security)
    # A malformed record in the log is skipped identically everywhere, never applied.
    img.apply_record({"type": "user_credential", "name": "bob", "credential": {"mechanism": "MD5"}})
    img.apply_record({"type": "create_acls", "acls": [{"principal": "nobody"}]})
    assert img.skipped_records == 2 and img.security.empty
    assert SecurityState.from_dict(img.security.to_dict()) == img.security


# ------------------------------------------------------------------------------------------ TLS

def test_tls_settings_are_checked_before_a_node_starts(tmp_path):
    from lakelog.infra.config import ConfigError
    from lakelog.ingest_api.config.node import NodeConfig
    from lakelog.ingest_api.security import tls

    assert tls.uvicorn_kwargs(NodeConfig({})) == {} and tls.client_context(NodeConfig({})) is None
    for bad in ({"listeners": "https://127.0.0.1:1"},
                {"ssl.certfile": "c.pem", "ssl.keyfile": "k.pem"},  # an http:// listener
                {"listeners": "https://127.0.0.1:1", "ssl.certfile": "c.pem"},  # no key
                {"listeners": "https://127.0.0.1:1", "ssl.certfile": "c.pem", "ssl.keyfile": "k.pem",
                 "ssl.client.auth": "required"}):  # no CA to verify clients with
        with pytest.raises(ConfigError):
            tls.uvicorn_kwargs(NodeConfig(bad))
    kw = tls.uvicorn_kwargs(NodeConfig({"listeners": "https://127.0.0.1:1", "ssl.certfile": "c.pem",
                                        "ssl.keyfile": "k.pem", "ssl.cafile": "ca.pem",
                                        "ssl.client.auth": "requested"}))
    import ssl

    assert kw["ssl_cert_reqs"] == ssl.CERT_OPTIONAL and kw["ssl_ca_certs"] == "ca.pem"


def test_a_wrong_password_costs_the_same_work_for_unknown_and_known_users(monkeypatch):
    """No user-name oracle: a Basic check derives one PBKDF2 key whether or not the user exists."""
    from types import SimpleNamespace

    from lakelog.ingest_api.config.node import NodeConfig
    from lakelog.ingest_api.security import credentials
    from lakelog.ingest_api.security.context import SecurityContext
    from lakelog.ingest_api.security.records import SecurityState

    state = SecurityState()
    state.users["alice"] = {"SCRAM-SHA-256": make_credential("alice-right-pw")}
    node = SimpleNamespace(config=NodeConfig({"authentication.enabled": "true"}),
                           image=SimpleNamespace(security=state))
    ctx = SecurityContext(node)
    derived: list[int] = []
    real_keys = credentials._keys
    monkeypatch.setattr(credentials, "_keys",
                        lambda pw, salt, it, m: derived.append(it) or real_keys(pw, salt, it, m))

    def basic(user: str, password: str) -> str:
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    for user in ("alice", "nobody", "bob"):
        derived.clear()
        assert ctx.authenticate(basic(user, "a-wrong-password")) is None
        assert derived == [credentials.MIN_ITERATIONS], (user, derived)
    derived.clear()
    assert ctx.authenticate(basic("alice", "alice-right-pw")) == "User:alice" and len(derived) == 1
