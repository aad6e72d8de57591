"""Slow-client protection at the connection level: a deadline on the request line and headers.

uvicorn closes a keep-alive connection that stays idle between requests, but any byte received
cancels that timer, and a fresh connection that sends nothing has none: a client trickling a
header a byte at a time, or opening connections and sending nothing, would hold them — and a
node's `max.connections` — forever. `guarded_http_protocol(timeout_s)` is uvicorn's httptools
protocol with one more timer: armed when a connection opens and when a request's first byte
arrives, cancelled once its headers are complete; when it fires the connection is closed.
(Bodies have their own deadline, `request.body.timeout.ms`, in the middleware.)

It relies on uvicorn's `HttpToolsProtocol` callbacks (`connection_made`, `on_message_begin`,
`on_headers_complete`, `connection_lost`); when httptools is not installed, None is returned and
uvicorn's own protocol is used without this protection.
"""

from __future__ import annotations

from typing import Any


def guarded_http_protocol(timeout_s: float) -> type | None:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is a dependency (uvicorn[standard])
        return None

    class HeaderDeadlineProtocol(HttpToolsProtocol):
        _header_timer: Any = None

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
            super().connection_made(transport)
            self._arm()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm()

        def on_headers_complete(self) -> None:
            self._disarm()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadlineProtocol
