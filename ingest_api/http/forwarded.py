"""A request forwarded by another node waits until this node knows what the sender knew.

The sender stamps the metadata log index it had applied (`METADATA_INDEX_HEADER`, set by
`replication.peers.PeerClient`). A node that has applied less (it learns the metadata log a moment
after the node that took a topic creation) waits, at most `request.timeout.ms`, before the request
runs, so a client that created a topic through one node and produces through it does not get
"topic not found" from the leader it was forwarded to. After the bound the request runs anyway and
answers from what this node knows.
"""

from __future__ import annotations

from lakelog.ingest_api.broker.admin import MetadataWaiters
from lakelog.ingest_api.replication.peers import FORWARDED_HEADER, METADATA_INDEX_HEADER

_FORWARDED = FORWARDED_HEADER.lower().encode()
_INDEX = METADATA_INDEX_HEADER.lower().encode()


class ForwardedCatchUpMiddleware:
    def __init__(self, app, waiters: MetadataWaiters, timeout_ms: int) -> None:
        self.app = app
        self.waiters = waiters
        self.timeout_s = timeout_ms / 1000

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            index = headers.get(_INDEX, b"")
            if _FORWARDED in headers and index.isdigit():
                await self.waiters.wait(int(index), self.timeout_s)
        await self.app(scope, receive, send)
