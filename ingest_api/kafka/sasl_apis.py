"""SaslHandshake and SaslAuthenticate on the Kafka door: PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 against
the users the cluster metadata stores (the same users HTTP Basic authenticates).

The exchange, as Kafka's clients run it on a SASL_PLAINTEXT or SASL_SSL listener:
  1. ApiVersions (answered before authentication);
  2. SaslHandshake v1 names the mechanism: one of MECHANISMS, else UNSUPPORTED_SASL_MECHANISM
     with the list; a second handshake is ILLEGAL_SASL_STATE;
  3. SaslAuthenticate carries the mechanism's tokens: PLAIN one message (`authzid NUL user NUL
     password`, checked by PBKDF2 off the event loop), SCRAM-SHA-256/512 two (scram.py) against the
     user's credential of that mechanism.
A success sets the connection's principal `User:<name>`; a failure answers SASL_AUTHENTICATION_FAILED
(the error table's row of `AuthenticationFailedError`), is audited, and closes the connection after
the answer. Sessions do not expire (session_lifetime_ms 0: no re-authentication, KIP-368).
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from kio.schema.errors import ErrorCode

from lakelog.ingest_api.config.kafka import SASL_PROTOCOLS
from lakelog.ingest_api.error_table import kafka_code
from lakelog.ingest_api.kafka.codec import Request
from lakelog.ingest_api.kafka.context import KafkaContext
from lakelog.ingest_api.kafka.scram import MAX_MESSAGE_BYTES, ScramExchange
from lakelog.ingest_api.kafka.server import Connection
from lakelog.ingest_api.security.credentials import SCRAM_SHA_256, SCRAM_SHA_512
from lakelog.ingest_api.security.errors import AuthenticationFailedError

NONE = ErrorCode.none.value
PLAIN = "PLAIN"
#: Mechanisms served, in the order SaslHandshake lists them.
MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512, PLAIN)


async def sasl_handshake(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    mechanism = req.body.mechanism
    if conn.sasl_mechanism is not None or conn.listener.security_protocol not in SASL_PROTOCOLS:
        conn.close_after_answer = True
        return {"error_code": ErrorCode.illegal_sasl_state.value, "mechanisms": list(MECHANISMS)}
    if mechanism not in MECHANISMS:
        return {"error_code": ErrorCode.unsupported_sasl_mechanism.value, "mechanisms": list(MECHANISMS)}
    conn.sasl_mechanism = mechanism
    if mechanism != PLAIN:
        security = ctx.node.security
        conn.sasl_exchange = ScramExchange(mechanism, lambda user: security.user_credential(user, mechanism),
                                           security.decoy_credential(mechanism), secrets.token_urlsafe(24))
    return {"error_code": NONE, "mechanisms": list(MECHANISMS)}


async def sasl_authenticate(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    out: dict[str, Any] = {"error_message": None, "auth_bytes": b"", "session_lifetime": 0}
    if conn.sasl_mechanism is None or conn.principal is not None:
        conn.close_after_answer = True
        return {**out, "error_code": ErrorCode.illegal_sasl_state.value,
                "error_message": "SaslAuthenticate before SaslHandshake, or after authentication"}
    token = bytes(req.body.auth_bytes or b"")
    try:
        if conn.sasl_mechanism == PLAIN:
            user, password = parse_plain(token)
            principal = await asyncio.to_thread(ctx.node.security.verify_user_password, user, password)
            if principal is None:
                raise AuthenticationFailedError("Authentication failed: Invalid username or password")
            conn.principal = principal
            return {**out, "error_code": NONE}
        exchange: ScramExchange = conn.sasl_exchange
        if not exchange.started:
            return {**out, "error_code": NONE, "auth_bytes": exchange.first(token)}
        answer = exchange.final(token)
        conn.principal = f"User:{exchange.user}"
        conn.sasl_exchange = None
        return {**out, "error_code": NONE, "auth_bytes": answer}
    except AuthenticationFailedError as e:
        conn.close_after_answer = True
        ctx.node.security.audit.refusal("authentication_failed", mechanism=conn.sasl_mechanism,
                                        client=conn.client_host, door="kafka")
        return {**out, "error_code": int(kafka_code(e)), "error_message": str(e)}


def parse_plain(message: bytes) -> tuple[str, str]:
    """(user, password) of a SASL/PLAIN message `authzid NUL authcid NUL passwd` (RFC 4616).

    An authorization id other than the user is refused (no acting as another principal)."""
    if len(message) > MAX_MESSAGE_BYTES:
        raise AuthenticationFailedError("a PLAIN message over its size limit")
    parts = message.split(b"\0")
    if len(parts) != 3:
        raise AuthenticationFailedError("a malformed PLAIN message")
    try:
        authzid, user, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise AuthenticationFailedError("a PLAIN message that is not UTF-8") from None
    if not user or not password or (authzid and authzid != user):
        raise AuthenticationFailedError("Authentication failed: Invalid username or password")
    return user, password
