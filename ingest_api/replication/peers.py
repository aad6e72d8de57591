"""Signed HTTP calls from this node to its peers (replica fetch, controller requests, forwarding).

Every call is signed with the cluster secret (`ingest_api.cluster.auth`); peers are addressed by
node id through a resolver (the metadata image's broker registrations, or the quorum voters before
a node has registered). One `httpx.AsyncClient` with bounded connections serves all peers.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import httpx

from ingest_api.cluster.auth import sign
from ingest_api.errors import NodeError, LeaderNotAvailableError


class PeerUnavailableError(NodeError):
    """A peer node could not be reached (or its address is unknown); retry."""

    status, error_code = 503, 50308


class PeerClient:
    def __init__(self, node_id: int, secret: bytes, resolve: Callable[[int], str | None], *,
                 timeout_s: float = 30.0, max_connections: int = 100) -> None:
        self.node_id = node_id
        self.secret = secret
        self.resolve = resolve
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=2.0),
                                        limits=httpx.Limits(max_connections=max_connections,
                                                            max_keepalive_connections=max_connections))

    async def close(self) -> None:
        await self.client.aclose()

    def base_url(self, peer: int) -> str:
        url = self.resolve(peer)
        if not url:
            raise LeaderNotAvailableError(f"the address of node {peer} is not known yet")
        return url.rstrip("/")

    def signed_headers(self, method: str, path_and_query: str, body: bytes) -> dict[str, str]:
        return sign(self.secret, method, path_and_query, body, self.node_id, int(time.time() * 1000))

    async def request(self, peer: int, method: str, path_and_query: str, body: bytes = b"", *,
                      headers: dict[str, str] | None = None, timeout_s: float | None = None) -> httpx.Response:
        url = self.base_url(peer) + path_and_query
        h = dict(headers or {})
        h.update(self.signed_headers(method, path_and_query, body))
        kwargs: dict[str, Any] = {}
        if timeout_s is not None:
            kwargs["timeout"] = httpx.Timeout(timeout_s, connect=min(2.0, timeout_s))
        try:
            return await self.client.request(method, url, content=body or None, headers=h, **kwargs)
        except httpx.HTTPError as e:
            raise PeerUnavailableError(f"node {peer} ({url}) did not answer: {type(e).__name__}: {e}") from None

    async def post_json(self, peer: int, path: str, doc: Any, *, timeout_s: float | None = None) -> httpx.Response:
        body = json.dumps(doc, separators=(",", ":")).encode()
        return await self.request(peer, "POST", path, body, headers={"Content-Type": "application/json"},
                                  timeout_s=timeout_s)
