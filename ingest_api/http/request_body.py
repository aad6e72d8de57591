"""Reading a request body: one buffer of the declared length, filled from the ASGI receive events.

uvicorn hands a body to the application in steps (the `http.request` events of `receive`, each
at most what arrived since the last one). Starlette's `Request.stream()` yields them and the
routers used to join them afterwards, one more copy of every byte. Here:

  * a body with a declared `Content-Length` over the limit is refused (413) before a byte is read;
  * a body that comes in one event (the usual case: `body_buffering.py` lets the connection
    buffer a declared body whole) is returned as that event's `bytes`, not copied;
  * a body in several events is copied, event by event, into one `bytearray` of the declared
    length allocated up front (no list of chunks, no join); the caller gets the bytearray;
  * a chunked body (no `Content-Length`) is joined, refused as soon as it passes the limit.

A body shorter than declared means the client went away (uvicorn answers `http.disconnect`):
`ClientDisconnect`, as Starlette raises. A body longer than declared cannot reach the
application (the HTTP parser ends the request at its `Content-Length`); it is refused all the
same if an event ever carried more.

The request's receive channel is consumed; the body is left where Starlette keeps it
(`request._body`), so a later `await request.body()` returns it instead of waiting for events
that will not come.

Concurrency: one call per request, on the event loop.
"""

from __future__ import annotations

from starlette.requests import ClientDisconnect, Request

from lakelog.ingest_api.errors import RequestTooLargeError


async def read_body_buffer(request: Request, limit: int) -> bytes | bytearray:
    """The whole request body (bytes, or a bytearray when it came in several events); 413 over `limit`."""
    length_text = request.headers.get("content-length")
    if length_text is None or not length_text.isdigit():
        body: bytes | bytearray = await _read_unsized(request, limit)
    else:
        length = int(length_text)
        if length > limit:
            raise RequestTooLargeError(f"request body of {length} bytes exceeds max.request.bytes={limit}")
        body = await _read_sized(request, length)
    request._body = body  # Starlette's cache: `request.body()` answers it from now on
    return body


async def _read_sized(request: Request, length: int) -> bytes | bytearray:
    receive = request.receive
    message = await receive()
    if message["type"] != "http.request":
        raise ClientDisconnect()
    first = message.get("body", b"")
    more = message.get("more_body", False)
    if not more:
        if len(first) != length:
            raise _wrong_length(len(first), length)
        return first
    buf = bytearray(length)
    view = memoryview(buf)
    pos = 0
    chunk = first
    while True:
        end = pos + len(chunk)
        if end > length:
            raise _wrong_length(end, length)
        view[pos:end] = chunk
        pos = end
        if not more:
            break
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
    if pos != length:
        raise _wrong_length(pos, length)
    return buf


async def _read_unsized(request: Request, limit: int) -> bytes:
    receive = request.receive
    chunks = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestTooLargeError(f"request body exceeds max.request.bytes={limit}")
        if chunk:
            chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _wrong_length(got: int, declared: int) -> Exception:
    if got < declared:  # the request ended early: the client went away mid-body
        return ClientDisconnect()
    from lakelog.ingest_api.errors import InvalidRequestError

    return InvalidRequestError(f"request body of {got} bytes is longer than its Content-Length {declared}")
