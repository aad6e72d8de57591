"""A declared request body reaches the application in one piece instead of 64 KiB steps.

uvicorn's httptools protocol appends each piece of a body to the request's buffer, stops reading
the socket once 64 KiB wait there, and wakes the application for every piece. A 1 MiB produce was
about sixteen rounds of pause, resume, wake-up and `receive` through every middleware's wrapper:
a large share of the node's CPU on the binary produce path (docs/benchmarks.md, "Produce CPU per
record").

`whole_body_protocol(base, max_body_bytes)` is `base` (uvicorn's `HttpToolsProtocol` or a subclass
of it) changed for a request that declares its `Content-Length` of at most `max_body_bytes`
(`max.request.bytes`): its body is gathered while it arrives, the socket is not paused, and the
application is woken once, when the parser reports the request complete (uvicorn's
`on_message_complete`), so `receive()` answers the whole body as one event. Any other request
(chunked, no body, over the bound, an upgrade) goes through uvicorn's own code unchanged.

Bounds: what one connection holds is at most the declared length, itself at most
`max.request.bytes` (the parser ends the request there; a longer declaration is refused 413 by
the router, and keeps uvicorn's 64 KiB flow control meanwhile). Bytes that arrive after the
answer has been sent are dropped, as uvicorn does. The body deadline (`request.body.timeout.ms`)
is unchanged: it bounds the application's wait in `receive()`.

It relies on uvicorn's `HttpToolsProtocol` attributes `cycle` (with `body`, `response_complete`),
`headers`, `parser` and `on_headers_complete` / `on_body`.
"""

from __future__ import annotations

from typing import Any


def whole_body_protocol(base: type, max_body_bytes: int) -> type:
    class WholeBodyProtocol(base):  # type: ignore[misc, valid-type]
        _gather = False  # the current request's body is gathered whole (declared, within the bound)

        def on_headers_complete(self) -> None:
            self._gather = not self.parser.should_upgrade() and _declared_length(self.headers, max_body_bytes) > 0
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            cycle: Any = self.cycle
            if not self._gather or cycle is None or cycle.response_complete:
                super().on_body(body)
                return
            # No event and no pause: on_message_complete wakes the application once, with all of it.
            cycle.body += body

        def on_message_complete(self) -> None:
            self._gather = False
            super().on_message_complete()

    WholeBodyProtocol.__name__ = WholeBodyProtocol.__qualname__ = f"WholeBody{base.__name__}"
    return WholeBodyProtocol


def _declared_length(headers: list, limit: int) -> int:
    """The request's Content-Length when it is one plain number in 1..limit and the body is not
    chunked; 0 otherwise (then uvicorn's own flow control applies)."""
    length = 0
    for name, value in headers:
        if name == b"content-length":
            if length or not value.isdigit():
                return 0
            length = int(value)
        elif name == b"transfer-encoding":
            return 0
    return length if 0 < length <= limit else 0
