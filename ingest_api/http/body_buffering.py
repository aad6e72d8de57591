"""A declared request body reaches the application in one piece instead of 64 KiB steps.

uvicorn's httptools protocol appends each piece of a body to the request's buffer, stops reading
the socket once 64 KiB wait there, and wakes the application for every piece. A 1 MiB produce was
about sixteen rounds of pause, resume, wake-up and `receive` through every middleware's wrapper:
a large share of the node's CPU on the binary produce path (docs/benchmarks.md, "Produce CPU per
record").

`whole_body_protocol(base, max_body_bytes)` is `base` (uvicorn's `HttpToolsProtocol` or a subclass
of it) changed for a request that declares its `Content-Length` of at most `max_body_bytes`
(`max.request.bytes`): the parser's pieces of its body are kept as they arrive (uvicorn appended
each to a growing bytearray, which realloc may move as it grows, then copied the whole for the
event), the socket is not paused, and the application is woken once, when the parser reports the
request complete (uvicorn's `on_message_complete`): the pieces are joined into one `bytes` there
(one copy; none for a body that came in one piece), which `receive()` answers as one event. Any other request
(chunked, no body, over the bound, an upgrade) goes through uvicorn's own code unchanged.

Bounds: what one connection holds is at most the declared length, itself at most
`max.request.bytes` (the parser ends the request there; a longer declaration is refused 413 by
the router, and keeps uvicorn's 64 KiB flow control meanwhile). Bytes that arrive after the
answer has been sent are dropped, as uvicorn does. The body deadline (`request.body.timeout.ms`)
is unchanged: it bounds the application's wait in `receive()`.

It relies on uvicorn's `HttpToolsProtocol` attributes `cycle` (with `body`, `response_complete`),
`headers`, `parser`, its callbacks `on_headers_complete` / `on_body` / `on_message_complete`, and on
`RequestResponseCycle.receive` answering `bytes(self.body)` and resetting it (uvicorn 0.2x-0.5x).
"""

from __future__ import annotations

from typing import Any


def whole_body_protocol(base: type, max_body_bytes: int) -> type:
    class WholeBodyProtocol(base):  # type: ignore[misc, valid-type]
        _gather = False  # the current request's body is gathered whole (declared, within the bound)
        _pieces: list | None = None

        def on_headers_complete(self) -> None:
            self._gather = not self.parser.should_upgrade() and _declared_length(self.headers, max_body_bytes) > 0
            self._pieces = [] if self._gather else None
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            cycle: Any = self.cycle
            if not self._gather or cycle is None or cycle.response_complete:
                super().on_body(body)
                return
            # No event, no pause, no copy: the parser's pieces are kept as they came.
            self._pieces.append(body)  # type: ignore[union-attr]

        def on_message_complete(self) -> None:
            if self._gather:
                pieces, self._pieces = self._pieces, None
                cycle: Any = self.cycle
                if pieces and cycle is not None and not cycle.response_complete:
                    # uvicorn's receive() answers `bytes(cycle.body)`, which is the object itself
                    # when it is bytes: the body is copied once here (not at all in one piece).
                    cycle.body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
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
