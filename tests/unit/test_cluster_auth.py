"""Cluster-secret signatures of internal requests: accepted when intact, refused in every other case."""

from __future__ import annotations

import asyncio
import hashlib
import hmac

import httpx
import pytest

from lakelog.infra.config import ConfigError
from lakelog.ingest_api.security.cluster_auth import (
    HEADER_NODE,
    HEADER_PRINCIPAL,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    SCHEME,
    AuthenticationError,
    ClusterAuth,
    InternalAuthenticator,
    request_target,
    sign,
    signed_principal,
    verify,
)
from lakelog.ingest_api.error_table import http_error

SECRET = b"0123456789abcdef-cluster-secret"
OTHER = b"fedcba9876543210-other-secret!!"
NOW = 1_700_000_000_000
PATH = "/internal/raft/messages"
BODY = b'{"type":"RequestVote","term":3}'


def _signed(**kw):
    args = dict(secret=SECRET, method="POST", path=PATH, body=BODY, node_id=2, now_ms=NOW)
    args.update(kw)
    return sign(**args)


def _verify(headers, **kw):
    args = dict(secret=SECRET, method="POST", path=PATH, headers=headers, body=BODY, now_ms=NOW + 1500,
                max_skew_ms=30_000)
    args.update(kw)
    return verify(**args)


def test_good_signature_is_accepted_and_names_the_sender():
    headers = _signed()
    assert set(headers) == {HEADER_NODE, HEADER_TIMESTAMP, HEADER_SIGNATURE}
    assert headers[HEADER_NODE] == "2" and headers[HEADER_TIMESTAMP] == str(NOW)
    assert _verify(headers) == 2
    assert _verify(headers, known_nodes={1, 2, 3}) == 2
    # Header names are case-insensitive, as HTTP's are.
    assert _verify({k.lower(): v for k, v in headers.items()}) == 2


def test_signature_is_the_documented_hmac():
    text = "\n".join([SCHEME, "POST", PATH, str(NOW), "2", "", hashlib.sha256(BODY).hexdigest()]).encode()
    assert _signed()[HEADER_SIGNATURE] == hmac.new(SECRET, text, hashlib.sha256).hexdigest()
    text = "\n".join([SCHEME, "POST", PATH, str(NOW), "2", "User:alice", hashlib.sha256(BODY).hexdigest()]).encode()
    assert _signed(principal="User:alice")[HEADER_SIGNATURE] == hmac.new(SECRET, text, hashlib.sha256).hexdigest()


def test_the_principal_is_inside_the_signature():
    """Removing, changing or adding the principal of a signed request breaks its signature."""
    headers = _signed(principal="User:alice")
    assert headers[HEADER_PRINCIPAL] == "User:alice" and _verify(headers) == 2
    assert signed_principal(headers) == "User:alice" and signed_principal(_signed()) is None
    stripped = {k: v for k, v in headers.items() if k != HEADER_PRINCIPAL}
    with pytest.raises(AuthenticationError, match="does not match"):
        _verify(stripped)
    with pytest.raises(AuthenticationError, match="does not match"):
        _verify({**headers, HEADER_PRINCIPAL: "User:__cluster"})
    with pytest.raises(AuthenticationError, match="does not match"):
        _verify({**_signed(), HEADER_PRINCIPAL: "User:alice"})
    for bad in ("", "User:a\nb", "x" * 513):
        with pytest.raises(ValueError):
            _signed(principal=bad)


def test_wrong_secret_is_refused():
    with pytest.raises(AuthenticationError, match="does not match"):
        _verify(_signed(secret=OTHER))


@pytest.mark.parametrize("tamper", [
    {"body": BODY + b" "},
    {"body": b""},
    {"path": "/internal/metadata"},
    {"path": PATH + "?x=1"},
    {"method": "PUT"},
])
def test_tampered_request_is_refused(tamper):
    with pytest.raises(AuthenticationError, match="does not match"):
        _verify(_signed(), **tamper)


def test_tampered_headers_are_refused():
    headers = _signed()
    for name, value in ((HEADER_NODE, "3"), (HEADER_TIMESTAMP, str(NOW + 1))):
        with pytest.raises(AuthenticationError, match="does not match"):
            _verify({**headers, name: value})
    sig = headers[HEADER_SIGNATURE]
    flipped = sig[:-1] + ("0" if sig[-1] != "0" else "1")
    with pytest.raises(AuthenticationError, match="does not match"):
        _verify({**headers, HEADER_SIGNATURE: flipped})


@pytest.mark.parametrize("offset_ms", [-30_001, 30_001, -10**9])
def test_stale_or_future_timestamp_is_refused(offset_ms):
    headers = _signed(now_ms=NOW + offset_ms)
    with pytest.raises(AuthenticationError, match="away from this node's clock"):
        _verify(headers, now_ms=NOW)


def test_timestamp_at_the_edge_of_the_window_is_accepted():
    assert _verify(_signed(now_ms=NOW - 30_000), now_ms=NOW) == 2
    assert _verify(_signed(now_ms=NOW + 30_000), now_ms=NOW) == 2


def test_unknown_node_is_refused():
    with pytest.raises(AuthenticationError, match="not a known node"):
        _verify(_signed(node_id=9), known_nodes={1, 2, 3})


@pytest.mark.parametrize("broken", [
    {},
    {HEADER_NODE: "2", HEADER_TIMESTAMP: str(NOW)},
    {HEADER_NODE: "-2", HEADER_TIMESTAMP: str(NOW), HEADER_SIGNATURE: "0" * 64},
    {HEADER_NODE: "2", HEADER_TIMESTAMP: "1e3", HEADER_SIGNATURE: "0" * 64},
    {HEADER_NODE: "2", HEADER_TIMESTAMP: str(NOW), HEADER_SIGNATURE: "abc"},
    {HEADER_NODE: "2", HEADER_TIMESTAMP: str(NOW), HEADER_SIGNATURE: "é" * 64},
    {HEADER_NODE: "2" * 100, HEADER_TIMESTAMP: str(NOW), HEADER_SIGNATURE: "0" * 64},
])
def test_missing_or_malformed_headers_are_refused(broken):
    with pytest.raises(AuthenticationError):
        _verify(broken)


def test_authentication_error_maps_to_401_40101():
    status, code, _ = http_error(AuthenticationError("x"))
    assert (status, code) == (401, 40101)


def test_short_or_missing_secret_is_a_configuration_error():
    with pytest.raises(ConfigError):
        InternalAuthenticator(b"short")
    with pytest.raises(ConfigError):
        ClusterAuth("not-bytes-but-long-enough", 1)  # type: ignore[arg-type]


def test_authenticator_checks_raw_path_and_query_of_an_asgi_scope():
    auth = InternalAuthenticator(SECRET, known_nodes=frozenset({1, 2}), clock_ms=lambda: NOW)
    target = "/internal/metadata?from_index=5&max_wait_ms=0"
    headers = sign(SECRET, "GET", target, b"", 1, NOW)
    scope = {"method": "GET", "path": "/internal/metadata", "raw_path": b"/internal/metadata",
             "query_string": b"from_index=5&max_wait_ms=0"}
    assert auth.verify_scope(scope, headers, b"") == 1
    with pytest.raises(AuthenticationError):
        auth.verify_scope({**scope, "query_string": b"from_index=0&max_wait_ms=0"}, headers, b"")
    assert request_target(b"/a", b"") == "/a" and request_target("/a", "b=1") == "/a?b=1"


def test_httpx_client_auth_signs_what_it_sends():
    """ClusterAuth on an AsyncClient: the receiver verifies the exact bytes and target that arrive."""
    auth = InternalAuthenticator(SECRET, known_nodes=frozenset({7}), clock_ms=lambda: NOW)
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(auth.verify(request.method, request.url.raw_path.decode(), request.headers, request.content))
        return httpx.Response(202)

    async def run():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler),
                                     auth=ClusterAuth(SECRET, 7, clock_ms=lambda: NOW)) as client:
            await client.post("http://voter/internal/raft/messages", content=BODY)
            await client.get("http://voter/internal/metadata", params={"from_index": 3, "k": "a b/é"})

    asyncio.run(run())
    assert seen == [7, 7]
