"""Connection-level protection: a deadline on the request line and headers, and a cap on their size.

uvicorn closes a keep-alive connection that stays idle between requests, but any byte received
cancels that timer, and a fresh connection that sends nothing has none: a client trickling a
header a byte at a time, or opening connections and sending nothing, would hold them — and a
node's `max.connections` — forever. `guarded_http_protocol(timeout_s)` is uvicorn's httptools
protocol with one more timer: armed when a connection opens and when a request's first byte
arrives, cancelled once its headers are complete; when it fires the connection is closed.
(Bodies have their own deadline, `request.body.timeout.ms`, in the middleware.)

`max.header.bytes` is counted as the bytes arrive, before they reach the parser: once a request's
line and headers pass it without their closing blank line, the connection is answered 431
(`error_code` 43101) and closed — a client streaming an endless header costs the node at most
that many bytes, not whatever it sends. (httptools has no such limit of its own, and the
middleware's check sees only headers that are complete.) The count starts when a request begins
on the connection; bytes of a pipelined request that arrive in the same read as the previous
request's end are not counted there (the middleware still checks that request's headers).

`max.connections` is counted where connections are accepted: a connection made while that many
are open is answered 503 (`error_code` 50350, `TooManyConnectionsError`) once its first bytes
arrive — the client has sent its request and reads the answer — and closed; it never reaches the
application, and the open connections keep being served. A refused connection that sends nothing
is closed when the header deadline passes, and at most `max.connections` refused ones wait at a
time (more are closed at once without an answer). (uvicorn's own `limit_concurrency` would instead
answer 503 to every request on every connection once that many were open, idle ones included.)

It relies on uvicorn's `HttpToolsProtocol` callbacks (`connection_made`, `on_message_begin`,
`on_headers_complete`, `connection_lost`); when httptools is not installed, None is returned and
uvicorn's own protocol is used without this protection.
"""

from __future__ import annotations

import json
from typing import Any

_TERMINATOR = b"\r\n\r\n"


def header_overflow_response(max_header_bytes: int) -> bytes:
    """The whole answer (status and `error_code` from the error table) written before the connection is closed."""
    from lakelog.ingest_api.security.errors import HeadersTooLargeError

    return closing_error_response(HeadersTooLargeError(f"request headers exceed max.header.bytes={max_header_bytes}"))


def too_many_connections_response(max_connections: int) -> bytes:
    """The answer to a connection over `max.connections`, written before it is closed."""
    from lakelog.ingest_api.security.errors import TooManyConnectionsError

    return closing_error_response(TooManyConnectionsError(
        f"this node has max.connections={max_connections} connections open; retry later"))


def closing_error_response(error: Exception) -> bytes:
    """A whole HTTP/1.1 answer for `error` (status and body from the error table), with `connection: close`."""
    from http import HTTPStatus

    from lakelog.ingest_api.error_table import error_body

    status, doc = error_body(error)
    body = json.dumps(doc).encode()
    return (f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\ncontent-type: application/json\r\n"
            f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n").encode() + body


def guarded_http_protocol(timeout_s: float, max_header_bytes: int | None = None,
                          max_connections: int | None = None) -> type | None:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is a dependency (uvicorn[standard])
        return None
    #: Refused connections waiting for their first bytes (to answer 503), shared by every connection.
    refusals_waiting = [0]

    class HeaderDeadlineProtocol(HttpToolsProtocol):
        _header_timer: Any = None
        #: Whether the bytes arriving belong to a request line and headers, and how many have so far.
        _in_head = True
        _head_bytes = 0
        _tail = b""  # the last bytes of the previous read, to find a terminator split across reads
        _refused = False
        _over_limit = False  # made while max.connections were open: answered 503 at its first bytes

        def data_received(self, data: bytes) -> None:  # type: ignore[override]
            if self._over_limit and not self._refused:
                self._refuse(too_many_connections_response(max_connections or 0))
            if self._refused:
                return
            if max_header_bytes is not None and self._in_head:
                joined = self._tail + data
                end = joined.find(_TERMINATOR)
                head = len(data) if end < 0 else max(0, end + len(_TERMINATOR) - len(self._tail))
                self._head_bytes += head
                self._tail = joined[-(len(_TERMINATOR) - 1):]
                if self._head_bytes > max_header_bytes:
                    self._refuse_headers()
                    return
            super().data_received(data)

        def _refuse_headers(self) -> None:
            self._refuse(header_overflow_response(max_header_bytes or 0))

        def _refuse(self, answer: bytes) -> None:
            self._refused = True
            self._disarm()
            if not self.transport.is_closing():
                self.transport.write(answer)
                self.transport.close()

        def _start_head(self) -> None:
            self._in_head, self._head_bytes, self._tail = True, 0, b""

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(timeout_s, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport) -> None:  # type: ignore[override]
            over = max_connections is not None and len(self.connections) >= max_connections
            super().connection_made(transport)
            if over:
                self.connections.discard(self)  # never counted: the open connections keep their places
                if refusals_waiting[0] >= (max_connections or 0):
                    self._refused = True
                    transport.close()
                    return
                self._over_limit = True
                refusals_waiting[0] += 1
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            self._in_head = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._start_head()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._over_limit:
                self._over_limit = False
                refusals_waiting[0] -= 1
            super().connection_lost(exc)

    return HeaderDeadlineProtocol
