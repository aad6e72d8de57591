"""The Kafka door's ACL, SCRAM-credential and client-quota admin APIs without a node: each handler over a
cluster image whose controller requests are applied in place (the records HTTP's routes make), and
the users' SCRAM-SHA-256 / SCRAM-SHA-512 credentials in the metadata state and its snapshot."""

from __future__ import annotations

import asyncio
import hashlib
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.alter_user_scram_credentials.v0.request import (AlterUserScramCredentialsRequest,
                                                                 ScramCredentialDeletion, ScramCredentialUpsertion)
from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.alter_client_quotas.v1.request import AlterClientQuotasRequest, EntityData, EntryData, OpData
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.describe_user_scram_credentials.v0.request import DescribeUserScramCredentialsRequest, UserName
from kio.schema.errors import ErrorCode

from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.kafka import acl_apis, codec, quota_apis, scram_admin_apis
from lakelog.ingest_api.kafka.context import KafkaContext
from lakelog.ingest_api.kafka.fetch_sessions import FetchSessionCache
from lakelog.ingest_api.security.acl import AclBinding, Authorizer
from lakelog.ingest_api.security.errors import InvalidSecurityRequestError
from lakelog.ingest_api.security.credentials import SCRAM_SHA_256, SCRAM_SHA_512, make_credential, verify_password
from lakelog.ingest_api.security.records import SecurityState, controller_records

TOPIC, GROUP, CLUSTER = 2, 3, 4
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
READ, WRITE, IDEMPOTENT_WRITE = 3, 4, 12
DENY, ALLOW = 2, 3
SALT = b"0123456789abcdef"


class Admin:
    """node.admin: a controller request is applied to the image at once."""

    def __init__(self, image: ClusterImage) -> None:
        self.image = image
        self.ops: list[str] = []

    async def submit(self, op: str, args: dict) -> dict:
        self.ops.append(op)
        records, result = controller_records(op, args, self.image.security)
        for rec in records:
            self.image.apply_record(rec)
        return result


def _context(principal_allowed: bool = True) -> tuple[KafkaContext, SimpleNamespace]:
    image = ClusterImage()
    security = SimpleNamespace(authorizer_enabled=not principal_allowed,
                               authorizer=lambda: Authorizer([], ()),
                               audit=SimpleNamespace(refusal=lambda *a, **k: None))
    node = SimpleNamespace(image=image, admin=Admin(image), security=security)
    conn = SimpleNamespace(principal="User:admin", client_host="/127.0.0.1")
    return KafkaContext(node, None, FetchSessionCache(0, 0, lambda: 0)), conn


def _call(handler, ctx, conn, body) -> dict:
    req = codec.Request(int(body.__api_key__), int(body.__version__), 1, "t", body)
    doc = asyncio.run(handler(ctx, req, conn))
    codec.to_entity(codec.response_class(req.api_key, req.api_version), doc)  # the answer encodes
    return doc


def _creation(name: str, rtype: int = TOPIC, pattern: int = LITERAL, op: int = READ, perm: int = ALLOW,
              principal: str = "User:bob") -> AclCreation:
    return AclCreation(resource_type=rtype, resource_name=name, resource_pattern_type=pattern, principal=principal,
                       host="*", operation=op, permission_type=perm)


def _describe(rtype=ANY, name=None, pattern=ANY, principal=None, op=ANY, perm=ANY) -> DescribeAclsRequest:
    return DescribeAclsRequest(resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=pattern,
                               principal_filter=principal, host_filter=None, operation=op, permission_type=perm)


def test_acls_created_described_by_filters_and_deleted():
    ctx, conn = _context()
    res = _call(acl_apis.create_acls, ctx, conn, CreateAclsRequest(creations=(
        _creation("orders", pattern=PREFIXED, op=WRITE), _creation("orders-eu"), _creation("*"),
        _creation("g1", rtype=GROUP), _creation("kafka-cluster", rtype=CLUSTER, op=IDEMPOTENT_WRITE),
        _creation("x", principal="nobody"))))
    codes = [r["error_code"] for r in res["results"]]
    assert codes == [0, 0, 0, 0, ErrorCode.invalid_request.value, ErrorCode.invalid_request.value]
    assert "IDEMPOTENT_WRITE" in res["results"][4]["error_message"]
    assert "User:NAME" in res["results"][5]["error_message"]
    assert ctx.node.admin.ops == ["create_acls"]  # the valid ones in one metadata change
    assert len(ctx.node.image.security.acls) == 4

    def names(req) -> list[tuple[int, str, int]]:
        doc = _call(acl_apis.describe_acls, ctx, conn, req)
        assert doc["error_code"] == 0
        return sorted((r["resource_type"], r["resource_name"], r["pattern_type"]) for r in doc["resources"])

    assert len(names(_describe())) == 4
    assert names(_describe(TOPIC, "orders-eu", MATCH)) == [(TOPIC, "*", LITERAL), (TOPIC, "orders", PREFIXED),
                                                          (TOPIC, "orders-eu", LITERAL)]
    assert names(_describe(TOPIC, "orders", LITERAL)) == []  # "orders" is only a prefix
    assert names(_describe(TOPIC, "orders", ANY)) == [(TOPIC, "orders", PREFIXED)]
    assert names(_describe(GROUP)) == [(GROUP, "g1", LITERAL)]
    assert names(_describe(op=WRITE)) == [(TOPIC, "orders", PREFIXED)]
    assert names(_describe(principal="User:alice")) == [] and names(_describe(perm=DENY)) == []
    bad = _call(acl_apis.describe_acls, ctx, conn, _describe(rtype=0))
    assert bad["error_code"] == ErrorCode.invalid_request.value
    flt = DeleteAclsFilter(resource_type_filter=TOPIC, resource_name_filter="orders-eu", pattern_type_filter=MATCH,
                           principal_filter="User:bob", host_filter=None, operation=ANY, permission_type=ANY)
    res = _call(acl_apis.delete_acls, ctx, conn, DeleteAclsRequest(filters=(flt, flt)))
    for fr in res["filter_results"]:  # both filters report what they matched; it is deleted once
        assert sorted(m["resource_name"] for m in fr["matching_acls"]) == ["*", "orders", "orders-eu"]
    assert [b.resource_name for b in ctx.node.image.security.sorted_acls()] == ["g1"]


def test_subject_acls_have_no_kafka_type_and_are_left_out():
    ctx, conn = _context()
    asyncio.run(ctx.node.admin.submit("create_acls", {"acls": [
        {"principal": "User:bob", "resource_type": "SUBJECT", "resource_name": "s", "pattern_type": "LITERAL",
         "operation": "READ", "permission": "ALLOW"}]}))
    assert _call(acl_apis.describe_acls, ctx, conn, _describe())["resources"] == []
    res = _call(acl_apis.delete_acls, ctx, conn, DeleteAclsRequest(filters=(DeleteAclsFilter(
        resource_type_filter=ANY, resource_name_filter=None, pattern_type_filter=ANY, principal_filter=None,
        host_filter=None, operation=ANY, permission_type=ANY),)))
    assert res["filter_results"][0]["matching_acls"] == [] and len(ctx.node.image.security.acls) == 1


def test_a_principal_without_alter_on_the_cluster_is_refused():
    ctx, conn = _context(principal_allowed=False)
    res = _call(acl_apis.create_acls, ctx, conn, CreateAclsRequest(creations=(_creation("t"),)))
    assert res["results"][0]["error_code"] == ErrorCode.cluster_authorization_failed.value
    doc = _call(acl_apis.describe_acls, ctx, conn, _describe())
    assert doc["error_code"] == ErrorCode.cluster_authorization_failed.value
    res = _call(scram_admin_apis.alter_user_scram_credentials, ctx, conn, AlterUserScramCredentialsRequest(
        deletions=(), upsertions=(_upsertion("bob", 1),)))
    assert res["results"][0]["error_code"] == ErrorCode.cluster_authorization_failed.value
    assert not ctx.node.admin.ops


def _upsertion(name: str, mechanism: int, iterations: int = 4096, password: bytes = b"pw") -> ScramCredentialUpsertion:
    h = {1: "sha256", 2: "sha512"}.get(mechanism, "sha256")
    return ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations, salt=SALT,
                                    salted_password=hashlib.pbkdf2_hmac(h, password, SALT, max(iterations, 1)))


def test_scram_credentials_altered_and_described_per_user():
    ctx, conn = _context()
    res = _call(scram_admin_apis.alter_user_scram_credentials, ctx, conn, AlterUserScramCredentialsRequest(
        deletions=(ScramCredentialDeletion(name="carol", mechanism=1),),
        upsertions=(_upsertion("bob", 2, 8192, b"bob-pw"), _upsertion("bob", 1, 4096, b"bob-pw"),
                    _upsertion("dave", 1, 100), _upsertion("erin", 0), _upsertion("frank", 1), _upsertion("frank", 1),
                    _upsertion("__cluster", 1))))
    assert {r["user"]: r["error_code"] for r in res["results"]} == {
        "carol": ErrorCode.resource_not_found.value, "bob": 0, "dave": ErrorCode.unacceptable_credential.value,
        "erin": ErrorCode.unsupported_sasl_mechanism.value, "frank": ErrorCode.duplicate_resource.value,
        "__cluster": ErrorCode.unacceptable_credential.value}
    bob = ctx.node.image.security.users["bob"]
    assert set(bob) == {SCRAM_SHA_256, SCRAM_SHA_512} and bob[SCRAM_SHA_512].iterations == 8192
    assert verify_password(bob[SCRAM_SHA_512], "bob-pw") and verify_password(bob[SCRAM_SHA_256], "bob-pw")
    doc = _call(scram_admin_apis.describe_user_scram_credentials, ctx, conn,
                DescribeUserScramCredentialsRequest(users=(UserName(name="bob"), UserName(name="zed"))))
    assert [(r["user"], r["error_code"], r["credential_infos"]) for r in doc["results"]] == [
        ("bob", 0, [{"mechanism": 1, "iterations": 4096}, {"mechanism": 2, "iterations": 8192}]),
        ("zed", ErrorCode.resource_not_found.value, [])]
    # Deleting one mechanism keeps the user; deleting the last removes it.
    for mechanism, left in ((1, [{"mechanism": 2, "iterations": 8192}]), (2, None)):
        res = _call(scram_admin_apis.alter_user_scram_credentials, ctx, conn, AlterUserScramCredentialsRequest(
            deletions=(ScramCredentialDeletion(name="bob", mechanism=mechanism),), upsertions=()))
        assert res["results"][0]["error_code"] == 0
        every = _call(scram_admin_apis.describe_user_scram_credentials, ctx, conn,
                      DescribeUserScramCredentialsRequest(users=None))["results"]
        assert [r["credential_infos"] for r in every if r["user"] == "bob"] == ([left] if left else [])


def test_client_quotas_are_described_as_user_entities():
    ctx, conn = _context()
    asyncio.run(ctx.node.admin.submit("alter_quota", {"principal": "User:bob", "quotas": {
        "producer.byte.rate": 1024, "request.rate": 5}}))

    def entries(*components, strict=False):
        return _call(quota_apis.describe_client_quotas, ctx, conn, DescribeClientQuotasRequest(
            components=tuple(ComponentData(entity_type=t, match_type=m, match=n) for t, m, n in components),
            strict=strict))["entries"]

    everything = entries()
    assert everything == [{"entity": [{"entity_type": "user", "entity_name": "bob"}],
                           "values": [{"key": "producer_byte_rate", "value": 1024.0},
                                      {"key": "request.rate", "value": 5.0}]}]
    assert entries(("user", 0, "bob")) == everything and entries(("user", 2, None), strict=True) == everything
    assert entries(("user", 0, "alice")) == [] and entries(("client-id", 2, None)) == []
    assert entries(("user", 1, None)) == []

    def alter(user, *ops, entity_type="user", validate_only=False):
        return _call(quota_apis.alter_client_quotas, ctx, conn, AlterClientQuotasRequest(entries=(EntryData(
            entity=(EntityData(entity_type=entity_type, entity_name=user),),
            ops=tuple(OpData(key=k, value=v, remove=r) for k, v, r in ops)),), validate_only=validate_only))[
            "entries"][0]["error_code"]

    assert alter("bob", ("consumer_byte_rate", 2048.0, False), ("request.rate", 0.0, True)) == 0
    assert dict(ctx.node.image.security.quotas["User:bob"]) == {"producer.byte.rate": 1024, "consumer.byte.rate": 2048}
    assert alter("carol", ("producer_byte_rate", 10.0, False), validate_only=True) == 0
    assert "User:carol" not in ctx.node.image.security.quotas  # validated, not stored
    invalid = ErrorCode.invalid_request.value
    assert alter("bob", ("request_percentage", 50.0, False)) == invalid  # not a key Lakelog has
    assert alter(None, ("producer_byte_rate", 1.0, False)) == invalid  # the default user: the node config's
    assert alter("app-1", ("producer_byte_rate", 1.0, False), entity_type="client-id") == invalid
    assert alter("bob", ("producer_byte_rate", 0, True), ("consumer_byte_rate", 0, True)) == 0
    assert "User:bob" not in ctx.node.image.security.quotas  # the last key removed: the override goes


def test_users_with_either_mechanism_survive_the_snapshot_and_old_snapshots_still_load():
    img = ClusterImage()
    only_256 = make_credential("pw-1", mechanism=SCRAM_SHA_256)
    both = [make_credential("pw-2", mechanism=m) for m in (SCRAM_SHA_256, SCRAM_SHA_512)]
    for name, creds in (("old", [only_256]), ("new", both)):
        records, _ = controller_records("upsert_user", {"name": name, "credentials": [c.to_dict() for c in creds]},
                                        img.security)
        for rec in records:
            img.apply_record(rec)
    d = img.security.to_dict()
    assert [sorted(u) for u in d["users"]] == [["credentials", "name"], ["credential", "name"]]  # new, old
    restored = ClusterImage()
    restored.restore(img.snapshot())
    assert restored.security == img.security
    assert SecurityState.from_dict(d).users["new"][SCRAM_SHA_512] == both[1]
    img.apply_record({"type": "delete_user_credential", "name": "old", "mechanism": SCRAM_SHA_512})
    assert img.skipped_records == 1 and set(img.security.users["old"]) == {SCRAM_SHA_256}  # none to delete


@settings(max_examples=200, deadline=None)
@given(rtype=st.integers(-2, 9), pattern=st.integers(-2, 6), op=st.integers(-2, 16), perm=st.integers(-2, 4),
       name=st.one_of(st.none(), st.text(max_size=20)), principal=st.one_of(st.none(), st.text(max_size=20)))
def test_any_acl_filter_answers_or_refuses_and_never_fails(rtype, pattern, op, perm, name, principal):
    ctx, conn = _context()
    ctx.node.image.security = SecurityState(acls=frozenset({
        AclBinding.from_dict({"principal": "User:bob", "resource_type": "TOPIC", "resource_name": "orders",
                              "pattern_type": "PREFIXED", "operation": "READ", "permission": "ALLOW"})}))
    doc = _call(acl_apis.describe_acls, ctx, conn, _describe(rtype, name, pattern, principal, op, perm))
    assert doc["error_code"] in (0, ErrorCode.invalid_request.value)
    res = _call(acl_apis.create_acls, ctx, conn, CreateAclsRequest(creations=(AclCreation(
        resource_type=rtype, resource_name=name or "", resource_pattern_type=pattern, principal=principal or "",
        host="*", operation=op, permission_type=perm),)))
    assert res["results"][0]["error_code"] in (0, ErrorCode.invalid_request.value)


def test_filters_match_what_the_authorizer_would_apply():
    bindings = [AclBinding.from_dict({"principal": "User:bob", "resource_type": "TOPIC", "resource_name": n,
                                      "pattern_type": p, "operation": "READ", "permission": "ALLOW"})
                for n, p in (("*", "LITERAL"), ("ord", "PREFIXED"), ("orders", "LITERAL"), ("other", "LITERAL"))]
    match = _describe(TOPIC, "orders", MATCH)
    applies = [b for b in bindings if b.covers("orders")]  # what Authorizer consults for the name
    assert [b for b in bindings if acl_apis.filter_matches(match, b)] == applies
    with pytest.raises(InvalidSecurityRequestError):
        acl_apis.check_filter(_describe(rtype=9))
