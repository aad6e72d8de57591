"""DescribeUserScramCredentials and AlterUserScramCredentials on the Kafka door: the users the cluster
metadata stores (the ones HTTP's /v3/.../users changes), as Kafka's `kafka-configs --entity-type
users` reads and writes their SCRAM credentials.

SCRAM mechanisms are Kafka's codes: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512 (0 UNKNOWN). An upsertion
carries salt, iterations and SaltedPassword, which the client computed: the node derives StoredKey
and ServerKey from it (`credentials.credential_from_salted_password`) and never sees the password.
Per user, as Kafka answers:

    the same (user, mechanism) twice in one request       DUPLICATE_RESOURCE
    a mechanism other than 1 or 2                          UNSUPPORTED_SASL_MECHANISM
    iterations, salt or salted password out of bounds,
    or a user name the store refuses                      UNACCEPTABLE_CREDENTIAL
    the deletion of a credential that does not exist      RESOURCE_NOT_FOUND
    describing a user with no credential                  RESOURCE_NOT_FOUND

The valid changes of one request go to the controller as one metadata change (deletions, then
upsertions); each is audited. Authorization, as Kafka: describing needs DESCRIBE on the cluster
(Kafka's DESCRIBE_CONFIGS is not in the ACL model), altering ALTER on it; a refusal answers
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from lakelog.ingest_api.error_table import kafka_code
from lakelog.ingest_api.kafka.codec import Request
from lakelog.ingest_api.kafka.context import REFUSED, KafkaContext
from lakelog.ingest_api.kafka.server import Connection
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType
from lakelog.ingest_api.security.audit import AuditLog
from lakelog.ingest_api.security.credentials import (SCRAM_SHA_256, SCRAM_SHA_512, ScramCredential,
                                                       credential_from_salted_password)
from lakelog.ingest_api.security.records import check_user_name

NONE = ErrorCode.none.value
#: Kafka's ScramMechanism codes.
MECHANISMS = {1: SCRAM_SHA_256, 2: SCRAM_SHA_512}
MECHANISM_CODES = {name: code for code, name in MECHANISMS.items()}


def _cluster_refusal(ctx: KafkaContext, conn: Connection, operation: Operation, api: str) -> tuple[int, str] | None:
    if ctx.allowed(conn.principal, operation, ResourceType.CLUSTER, CLUSTER_NAME, api, conn.client_host):
        return None
    return REFUSED[ResourceType.CLUSTER], f"not authorized to {operation.value} the cluster's users"


def _infos(creds: dict[str, ScramCredential]) -> list[dict[str, int]]:
    return [{"mechanism": MECHANISM_CODES[m], "iterations": creds[m].iterations} for m in sorted(creds)]


async def describe_user_scram_credentials(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    out: dict[str, Any] = {"throttle_time": 0, "error_code": NONE, "error_message": None, "results": []}
    refused = _cluster_refusal(ctx, conn, Operation.DESCRIBE, "DescribeUserScramCredentials")
    if refused:
        return {**out, "error_code": refused[0], "error_message": refused[1]}
    users = ctx.node.image.security.users
    asked = [u.name for u in req.body.users] if req.body.users else sorted(users)
    results = []
    for name in dict.fromkeys(asked):
        doc = {"user": name, "error_code": NONE, "error_message": None, "credential_infos": []}
        if asked.count(name) > 1:
            doc.update(error_code=ErrorCode.duplicate_resource.value, error_message=f"user {name} asked twice")
        elif name not in users:
            doc.update(error_code=ErrorCode.resource_not_found.value,
                       error_message="Attempt to describe a user credential that does not exist")
        else:
            doc["credential_infos"] = _infos(users[name])
        results.append(doc)
    return {**out, "results": results}


class _Refused(Exception):
    """One user's change refused with a Kafka error code (answered for that user)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _change(kind: str, c: Any, stored: dict[str, dict[str, ScramCredential]]) -> dict[str, Any]:
    """One deletion or upsertion -> its change for the controller; raises _Refused."""
    mechanism = MECHANISMS.get(int(c.mechanism))
    if mechanism is None:
        raise _Refused(ErrorCode.unsupported_sasl_mechanism.value, f"unknown SCRAM mechanism {c.mechanism}")
    try:
        name = check_user_name(c.name)
    except ValueError as e:
        raise _Refused(ErrorCode.unacceptable_credential.value, str(e)) from None
    if kind == "deletion":
        if mechanism not in stored.get(name, {}):
            raise _Refused(ErrorCode.resource_not_found.value,
                           f"Attempt to delete a user credential that does not exist: {name} {mechanism}")
        return {"name": name, "mechanism": mechanism}
    try:
        cred = credential_from_salted_password(mechanism, bytes(c.salt), int(c.iterations), bytes(c.salted_password))
    except ValueError as e:
        raise _Refused(ErrorCode.unacceptable_credential.value, str(e)) from None
    return {"name": name, "credential": cred.to_dict()}


async def alter_user_scram_credentials(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    changes = [("deletion", c) for c in b.deletions] + [("upsertion", c) for c in b.upsertions]
    names = list(dict.fromkeys(c.name for _, c in changes))
    refused = _cluster_refusal(ctx, conn, Operation.ALTER, "AlterUserScramCredentials")
    if refused:
        return {"throttle_time": 0, "results": [{"user": n, "error_code": refused[0], "error_message": refused[1]}
                                                for n in names]}
    stored = ctx.node.image.security.users
    errors: dict[str, tuple[int, str]] = {}
    seen: set[tuple[str, int]] = set()
    per_user: dict[str, dict[str, list]] = {n: {"deletions": [], "upsertions": []} for n in names}
    for kind, c in changes:
        if c.name in errors:
            continue
        try:
            if (c.name, int(c.mechanism)) in seen:
                raise _Refused(ErrorCode.duplicate_resource.value,
                               f"a credential of user {c.name} changed twice in one request")
            seen.add((c.name, int(c.mechanism)))
            per_user[c.name][kind + "s"].append(_change(kind, c, stored))
        except _Refused as e:
            errors[c.name] = (e.code, str(e))
    valid = [n for n in names if n not in errors]
    if valid:
        args = {"deletions": [d for n in valid for d in per_user[n]["deletions"]],
                "upsertions": [u for n in valid for u in per_user[n]["upsertions"]]}
        try:
            await ctx.node.admin.submit("alter_user_credentials", args)
            for n in valid:
                AuditLog.change("user_credentials_altered", by=conn.principal, user=n, door="kafka",
                                deleted=[d["mechanism"] for d in per_user[n]["deletions"]],
                                upserted=[u["credential"]["mechanism"] for u in per_user[n]["upsertions"]])
        except Exception as e:
            failure = (int(kafka_code(e)), str(e)[:500])
            errors.update({n: failure for n in valid})
    return {"throttle_time": 0, "results": [
        {"user": n, "error_code": errors.get(n, (NONE, None))[0], "error_message": errors.get(n, (NONE, None))[1]}
        for n in names]}
