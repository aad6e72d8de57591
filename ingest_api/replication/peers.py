"""Signed HTTP calls from this node to its peers (replica fetch, controller requests, forwarding).

Every call is signed with the cluster secret (`ingest_api.security.cluster_auth`); peers are addressed by
node id through a resolver (the metadata image's broker registrations, or the quorum voters before
a node has registered). Requests go through `cluster.http1.Http1Pool` (responses parsed in C, keep-alive
connections bounded per peer).
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from urllib.parse import urlsplit

from lakelog.ingest_api.security.cluster_auth import sign
from lakelog.ingest_api.errors import LeaderNotAvailableError, NodeError, PeerUnavailableError
from lakelog.ingest_api.cluster.http1 import Http1Error, Http1Pool, Http1Response


#: Marks a request forwarded by another node (forwarded at most once).
FORWARDED_HEADER = "X-Lakelog-Forwarded-By"
#: The metadata log index the sending node had applied: a forwarded request waits (bounded) until the
#: receiving node has applied as much, so a topic the sender knows is known where the request lands.
METADATA_INDEX_HEADER = "X-Lakelog-Metadata-Index"


def json_or_empty(resp: Http1Response) -> dict:
    """A peer's JSON object answer, or {} when the body is not one."""
    try:
        doc = resp.json()
        return doc if isinstance(doc, dict) else {}
    except ValueError:
        return {}


class PeerClient:
    def __init__(self, node_id: int, secret: bytes, resolve: Callable[[int], str | None], *,
                 timeout_s: float = 30.0, max_connections: int = 100, ssl_context: Any = None,
                 metadata_index: Callable[[], int] | None = None) -> None:
        self.node_id = node_id
        self.metadata_index = metadata_index
        self.secret = secret
        self.resolve = resolve
        self.timeout_s = timeout_s
        self.pool = Http1Pool(max_idle_per_peer=max(1, min(max_connections, 16)), ssl=ssl_context)

    async def close(self) -> None:
        await self.pool.close()

    def base_url(self, peer: int) -> str:
        url = self.resolve(peer)
        if not url:
            raise LeaderNotAvailableError(f"the address of node {peer} is not known yet")
        return url.rstrip("/")

    def signed_headers(self, method: str, path_and_query: str, body: bytes,
                       principal: str | None = None) -> dict[str, str]:
        return sign(self.secret, method, path_and_query, body, self.node_id, int(time.time() * 1000), principal)

    async def request(self, peer: int, method: str, path_and_query: str, body: bytes = b"", *,
                      headers: dict[str, str] | None = None, timeout_s: float | None = None,
                      principal: str | None = None) -> Http1Response:
        """A signed request; `principal` names the client a forwarded request acts for (inside the signature)."""
        url = self.base_url(peer)
        parts = urlsplit(url)
        h = dict(headers or {})
        if self.metadata_index is not None and FORWARDED_HEADER in h:
            h[METADATA_INDEX_HEADER] = str(self.metadata_index())
        h.update(self.signed_headers(method, path_and_query, body, principal))
        try:
            return await self.pool.request(parts.hostname or "127.0.0.1", parts.port or 80, method, path_and_query,
                                           body, h, timeout_s=self.timeout_s if timeout_s is None else timeout_s)
        except Http1Error as e:
            raise PeerUnavailableError(f"node {peer} ({url}) did not answer: {e}") from None

    async def post_json(self, peer: int, path: str, doc: Any, *, timeout_s: float | None = None) -> Http1Response:
        body = json.dumps(doc, separators=(",", ":")).encode()
        return await self.request(peer, "POST", path, body, headers={"Content-Type": "application/json"},
                                  timeout_s=timeout_s)
