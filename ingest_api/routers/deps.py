"""Helpers shared by the routers: the node, bounded body reading."""

from __future__ import annotations

from fastapi import Request

from ingest_api.errors import RequestTooLargeError
from ingest_api.node import Node


def get_node(request: Request) -> Node:
    node: Node = request.app.state.node
    node.check_ready()
    return node


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it passes `limit` bytes."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise RequestTooLargeError(f"request body of {length} bytes exceeds max.request.bytes={limit}")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLargeError(f"request body exceeds max.request.bytes={limit}")
        chunks.append(chunk)
    return b"".join(chunks)
