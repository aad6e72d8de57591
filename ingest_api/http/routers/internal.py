"""Node-to-node endpoints under `/internal`: Raft messages and the metadata log for observers.

Not part of the client API (left out of the OpenAPI schema). Every request must carry the cluster
signature of ingest_api/security/cluster_auth.py; anything else is answered 401 (error_code 40101) before the
body is looked at. The router is thin: the logic lives in `QuorumHost`.

The application provides, on `app.state`:
  * `quorum`: the node's `QuorumHost` when the node is a controller voter; if absent, `node.quorum`
    of `app.state.node` is used;
  * `cluster_auth`: an `InternalAuthenticator` (secret, known node ids, clock skew, body limit); if
    absent, one is built from the quorum host's secret and skew, accepting any node id that holds the
    secret. Until either exists, internal requests are answered 503.

Endpoints:
  POST /internal/raft/messages   body: JSON of `message_to_dict` (one Raft message), at most the host's
                                 max_message_bytes; 202 once queued (Raft messages are one-way; the
                                 answer to a request is a separate message). 403 if the signer is not a
                                 peer voter or the message names another sender; 503 if the host is not
                                 running or busy.
  GET  /internal/metadata?from_index=N[&max_entries=&max_bytes=&max_wait_ms=]
                                 200 with a `MetadataBatch` (committed entries after N, or the snapshot
                                 and what follows when N is below this voter's log start), long-polling
                                 up to max_wait_ms (capped) when nothing is past N yet.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse

from lakelog.ingest_api.security.cluster_auth import HEADER_TIMESTAMP, AuthenticationError, InternalAuthenticator
from lakelog.ingest_api.cluster.errors import QuorumUnavailableError
from lakelog.ingest_api.cluster.quorum import QuorumHost
from lakelog.ingest_api.errors import RequestTooLargeError

log = logging.getLogger("lakelog.internal")

router = APIRouter(prefix="/internal", tags=["internal"], include_in_schema=False)


@dataclass(frozen=True)
class VerifiedRequest:
    """An internal request whose signature checked out: who sent it, and its body."""

    sender: int
    body: bytes


def _find_quorum(request: Request) -> QuorumHost | None:
    state = request.app.state
    host = getattr(state, "quorum", None)
    return host if host is not None else getattr(getattr(state, "node", None), "quorum", None)


def get_authenticator(request: Request) -> InternalAuthenticator:
    auth = getattr(request.app.state, "cluster_auth", None)
    if auth is None:
        # Not configured explicitly: the quorum host's secret and skew, any node id (the secret decides).
        host = _find_quorum(request)
        if host is None:
            raise QuorumUnavailableError("this node is starting: internal requests cannot be verified yet")
        auth = InternalAuthenticator(host.config.secret, max_skew_ms=host.config.max_clock_skew_ms)
        request.app.state.cluster_auth = auth
    return auth


def get_quorum(request: Request) -> QuorumHost:
    host = _find_quorum(request)
    if host is None:
        raise QuorumUnavailableError("this node hosts no controller quorum voter (or is starting)")
    return host


async def read_verified(request: Request, limit: int) -> VerifiedRequest:
    """Read the body (413 past `limit`) and verify the signature over it (401); concurrency: per request."""
    auth = get_authenticator(request)
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestTooLargeError(f"internal request body of {length} bytes exceeds {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLargeError(f"internal request body exceeds {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    try:
        sender = auth.verify_scope(request.scope, request.headers, body)
    except AuthenticationError as e:
        client = request.client.host if request.client else "?"
        log.info("refused internal %s %s from %s: %s", request.method, request.url.path, client, e)
        raise
    return VerifiedRequest(sender, body)


async def verified_request(request: Request) -> VerifiedRequest:
    """Dependency for internal endpoints: the authenticated sender and the body (authenticator's body limit)."""
    return await read_verified(request, get_authenticator(request).max_body_bytes)


async def verified_raft_request(request: Request, host: QuorumHost = Depends(get_quorum)) -> VerifiedRequest:
    """Like `verified_request`, with the quorum's max_message_bytes as the body limit."""
    return await read_verified(request, host.config.max_message_bytes)


@router.post("/raft/messages", status_code=202, summary="Deliver one Raft message to this voter")
async def raft_message(request: Request, verified: VerifiedRequest = Depends(verified_raft_request),
                       host: QuorumHost = Depends(get_quorum)) -> Response:
    # The signed send time: an answer that waited in a socket (a pause) vouches only for then.
    host.receive(verified.sender, verified.body, sent_at_ms=int(request.headers[HEADER_TIMESTAMP]))
    return Response(status_code=202)


@router.get("/metadata", summary="Committed metadata log entries after an index (for observers)")
async def metadata(from_index: int = Query(..., ge=0, le=2**63 - 1),
                   max_entries: int | None = Query(None, ge=1, le=1_000_000),
                   max_bytes: int | None = Query(None, ge=1, le=2**31 - 1),
                   max_wait_ms: int = Query(0, ge=0, le=60_000),
                   verified: VerifiedRequest = Depends(verified_request),
                   host: QuorumHost = Depends(get_quorum)) -> JSONResponse:
    batch = await host.fetch_metadata(from_index, max_entries, max_bytes, max_wait_ms)
    return JSONResponse(batch.to_dict())
