"""Authentication of node-to-node (internal) HTTP traffic with a shared cluster secret.

Every internal request — Raft messages, metadata fetches, replica fetches and forwarded client
requests — carries three headers, and a fourth when it acts for a client:

    X-Lakelog-Node       the sender's node id (decimal)
    X-Lakelog-Timestamp  the sender's wall clock when it signed, milliseconds since the epoch (decimal)
    X-Lakelog-Principal  the principal a forwarded client request acts for (`User:alice`); absent on
                         node-to-node calls of the node's own
    X-Lakelog-Signature  lower-case hex HMAC-SHA256, keyed with `cluster.secret`, of the string

        LAKELOG-HMAC-SHA256-V2 \\n METHOD \\n PATH \\n TIMESTAMP \\n NODE \\n PRINCIPAL \\n hex(SHA-256(body))

    (newline-separated, no spaces). METHOD is upper case; PATH is the request target exactly as
    sent on the wire: the percent-encoded path plus "?" and the raw query string when there is one;
    TIMESTAMP, NODE and PRINCIPAL are the header values as sent (PRINCIPAL empty when the header is
    absent). The first line names the scheme's version, so a later scheme cannot be confused with
    this one. The principal is inside the signature so that removing or changing it breaks the
    signature: a captured forwarded request cannot be turned into one acting as someone else (V1
    left it out, and a request stripped of its principal acted as the cluster itself).

Verification recomputes the HMAC and compares in constant time (`hmac.compare_digest`), then
checks that the timestamp is within `max_skew_ms` of the receiver's clock (either direction) and,
when a set of known node ids is given, that the sender is one of them. Any failure raises
`AuthenticationError` (answered as `AuthenticationFailedError`: HTTP 401) with a reason, never a hint of the expected
signature.

What this does not do:
  * replay protection beyond the time window: a captured request can be replayed for up to
    `max_skew_ms`. Raft tolerates duplicated messages and the metadata fetch is a read, so this is
    harmless for them; endpoints with side effects (forwarded produce) must be idempotent themselves
    (idempotent producer sequence numbers);
  * confidentiality: bodies travel in clear; run the cluster network over TLS (or a private network)
    when that matters;
  * per-node keys: every node holds the same secret, so a compromised node can sign as any other.

Concurrency: `sign`, `verify` and `InternalAuthenticator` are pure apart from reading the clock, and
safe from any thread; `ClusterAuth` holds only the secret and the node id.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from dataclasses import dataclass, field
from typing import Callable, Generator, Iterable, Mapping

import httpx

from lakelog.infra.config import ConfigError
from lakelog.ingest_api.security.errors import AuthenticationFailedError

SCHEME = "LAKELOG-HMAC-SHA256-V2"
HEADER_NODE = "X-Lakelog-Node"
HEADER_TIMESTAMP = "X-Lakelog-Timestamp"
HEADER_SIGNATURE = "X-Lakelog-Signature"
HEADER_PRINCIPAL = "X-Lakelog-Principal"
#: Longest principal a signed request may name.
MAX_PRINCIPAL_CHARS = 512
DEFAULT_MAX_SKEW_MS = 30_000
MIN_SECRET_BYTES = 16  # an HMAC key shorter than this is guessable; refuse it at startup
_MAX_HEADER_CHARS = 32  # node ids and timestamps are small integers; longer values are refused unparsed
_SIGNATURE_HEX_CHARS = 64


class AuthenticationError(AuthenticationFailedError):
    """An internal request is not signed with the cluster secret, is stale, or comes from an unknown node."""


def check_secret(secret: bytes) -> bytes:
    """The secret, if usable as the cluster's HMAC key; ConfigError otherwise."""
    if not isinstance(secret, (bytes, bytearray)):
        raise ConfigError("cluster.secret must be bytes")
    if len(secret) < MIN_SECRET_BYTES:
        raise ConfigError(f"cluster.secret must be at least {MIN_SECRET_BYTES} bytes, got {len(secret)}")
    return bytes(secret)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _string_to_sign(method: str, path: str, timestamp: str, node: str, principal: str, body: bytes) -> bytes:
    return "\n".join((SCHEME, method.upper(), path, timestamp, node, principal,
                      hashlib.sha256(body).hexdigest())).encode("utf-8")


def _signature(secret: bytes, method: str, path: str, timestamp: str, node: str, principal: str,
               body: bytes) -> str:
    return hmac.new(secret, _string_to_sign(method, path, timestamp, node, principal, body),
                    hashlib.sha256).hexdigest()


def _check_principal(principal: str) -> str:
    if not principal or len(principal) > MAX_PRINCIPAL_CHARS or "\n" in principal or not principal.isprintable():
        raise ValueError(f"a signed principal is 1 to {MAX_PRINCIPAL_CHARS} printable characters")
    return principal


def sign(secret: bytes, method: str, path: str, body: bytes, node_id: int, now_ms: int,
         principal: str | None = None) -> dict[str, str]:
    """The authentication headers for a request of `node_id` (path = path + "?" + query, as sent);
    with `principal`, the request acts for that principal (X-Lakelog-Principal, signed)."""
    node, timestamp = str(int(node_id)), str(int(now_ms))
    headers = {HEADER_NODE: node, HEADER_TIMESTAMP: timestamp}
    if principal is not None:
        headers[HEADER_PRINCIPAL] = _check_principal(principal)
    headers[HEADER_SIGNATURE] = _signature(secret, method, path, timestamp, node, principal or "", body)
    return headers


def signed_principal(headers: Mapping[str, str]) -> str | None:
    """The principal a (verified) signed request names, or None when it names none."""
    for k, v in headers.items():
        if k.lower() == HEADER_PRINCIPAL.lower():
            return v or None
    return None


def verify(secret: bytes, method: str, path: str, headers: Mapping[str, str], body: bytes, now_ms: int,
           max_skew_ms: int = DEFAULT_MAX_SKEW_MS, known_nodes: Iterable[int] | None = None) -> int:
    """The sender's node id if the request is signed with `secret`, fresh and from a known node.

    `headers` may be any mapping; names are matched case-insensitively. Raises AuthenticationError.
    """
    found = {k.lower(): v for k, v in headers.items()
             if k.lower() in (HEADER_NODE.lower(), HEADER_TIMESTAMP.lower(), HEADER_SIGNATURE.lower(),
                              HEADER_PRINCIPAL.lower())}
    node = found.get(HEADER_NODE.lower())
    principal = found.get(HEADER_PRINCIPAL.lower(), "")
    timestamp = found.get(HEADER_TIMESTAMP.lower())
    signature = found.get(HEADER_SIGNATURE.lower())
    if node is None or timestamp is None or signature is None:
        raise AuthenticationError(f"internal request lacks the {HEADER_NODE}, {HEADER_TIMESTAMP} and "
                                  f"{HEADER_SIGNATURE} headers")
    if not (_decimal(node) and _decimal(timestamp)):
        raise AuthenticationError(f"{HEADER_NODE} and {HEADER_TIMESTAMP} must be decimal integers")
    if len(signature) != _SIGNATURE_HEX_CHARS:
        raise AuthenticationError("signature is not 64 hex characters")
    if len(principal) > MAX_PRINCIPAL_CHARS:
        raise AuthenticationError(f"{HEADER_PRINCIPAL} is longer than {MAX_PRINCIPAL_CHARS} characters")
    expected = _signature(secret, method, path, timestamp, node, principal, body)
    # Constant time, over ASCII bytes (a non-ASCII header value simply fails to match).
    if not hmac.compare_digest(expected.encode("ascii"), signature.lower().encode("utf-8", "replace")):
        raise AuthenticationError("signature does not match (wrong cluster secret, or the request was altered)")
    skew = abs(now_ms - int(timestamp))
    if skew > max_skew_ms:
        raise AuthenticationError(f"timestamp is {skew} ms away from this node's clock (limit {max_skew_ms} ms); "
                                  f"check the clocks")
    sender = int(node)
    if known_nodes is not None and sender not in known_nodes:
        raise AuthenticationError(f"node {sender} is not a known node of this cluster")
    return sender


def _decimal(v: str) -> bool:
    return 0 < len(v) <= _MAX_HEADER_CHARS and v.isascii() and v.isdigit()


def request_target(raw_path: bytes | str, query_string: bytes | str = b"") -> str:
    """The signed PATH from a request's raw path and raw query string (either may be bytes)."""
    path = raw_path.decode("latin-1") if isinstance(raw_path, bytes) else raw_path
    query = query_string.decode("latin-1") if isinstance(query_string, bytes) else query_string
    return f"{path}?{query}" if query else path


# ---------------------------------------------------------------------------------------------
# Receiving side: one object the HTTP layer asks

@dataclass(frozen=True)
class InternalAuthenticator:
    """What a node needs to verify internal requests: the secret, the clock window, the known nodes.

    `known_nodes` None accepts any node id (the secret alone decides); otherwise only those ids.
    `max_body_bytes` bounds an internal request body read before verification.
    """

    secret: bytes
    known_nodes: frozenset[int] | None = None
    max_skew_ms: int = DEFAULT_MAX_SKEW_MS
    max_body_bytes: int = 64 << 20
    clock_ms: Callable[[], int] = field(default=now_ms, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "secret", check_secret(self.secret))
        if self.known_nodes is not None:
            object.__setattr__(self, "known_nodes", frozenset(self.known_nodes))
        if self.max_skew_ms < 0 or self.max_body_bytes < 0:
            raise ConfigError("max_skew_ms and max_body_bytes must be >= 0")

    def verify(self, method: str, path: str, headers: Mapping[str, str], body: bytes) -> int:
        return verify(self.secret, method, path, headers, body, self.clock_ms(), self.max_skew_ms,
                      self.known_nodes)

    def verify_scope(self, scope: Mapping, headers: Mapping[str, str], body: bytes) -> int:
        """Verify an ASGI request: the path signed is its raw path (as sent) plus its raw query string."""
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
        return self.verify(scope["method"], request_target(raw_path, scope.get("query_string", b"")),
                           headers, body)


# ---------------------------------------------------------------------------------------------
# Sending side: httpx

def signed_headers(request: httpx.Request, secret: bytes, node_id: int, now: int | None = None,
                   principal: str | None = None) -> dict[str, str]:
    """The authentication headers for an `httpx.Request` whose body is already built (content set)."""
    return sign(secret, request.method, request.url.raw_path.decode("ascii"), request.content, node_id,
                now_ms() if now is None else now, principal)


class ClusterAuth(httpx.Auth):
    """httpx auth flow that signs every request: `httpx.AsyncClient(auth=ClusterAuth(secret, node_id))`.

    `principal`: the principal the requests act for on the client API (an operator holding the
    secret names the cluster's own super user, `User:__cluster`); None for internal endpoints.
    """

    requires_request_body = True  # the signature covers the body's hash

    def __init__(self, secret: bytes, node_id: int, clock_ms: Callable[[], int] = now_ms,
                 principal: str | None = None) -> None:
        self._secret = check_secret(secret)
        self._node_id = node_id
        self._clock_ms = clock_ms
        self._principal = None if principal is None else _check_principal(principal)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers.update(signed_headers(request, self._secret, self._node_id, self._clock_ms(),
                                              self._principal))
        yield request
