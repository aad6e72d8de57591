"""A bound on request bodies the routers do not read themselves (the v3 admin endpoints whose body
FastAPI parses into a model): more than `max.request.bytes` is 413 before the body is read (by its
Content-Length) or as soon as a chunked body passes it.

The v3 produce (`.../records`, which streams and bounds each record itself) is left alone.
"""

from __future__ import annotations

from lakelog.ingest_api.errors import RequestTooLargeError


class BodyLimitMiddleware:
    def __init__(self, app, limit_bytes: int, error_response) -> None:
        self.app = app
        self.limit = limit_bytes
        self.error_response = error_response

    def _applies(self, scope) -> bool:
        path = scope.get("path", "")
        if scope.get("method") not in ("POST", "PUT", "PATCH", "DELETE"):
            return False
        if not (path == "/" or path.startswith("/v3/")):
            return False
        return not path.endswith("/records")

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not self._applies(scope):
            await self.app(scope, receive, send)
            return
        length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        if length is not None and length.isdigit() and int(length) > self.limit:
            await self.error_response(RequestTooLargeError(f"request body of {int(length)} bytes exceeds "
                                                           f"max.request.bytes={self.limit}"),
                                      scope["path"])(scope, receive, send)
            return
        seen = 0

        async def bounded():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise RequestTooLargeError(f"request body exceeds max.request.bytes={self.limit}")
            return message

        await self.app(scope, bounded, send)
