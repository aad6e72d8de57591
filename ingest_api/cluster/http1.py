"""A small HTTP/1.1 client for node-to-node traffic, with responses parsed in C (httptools).

Replica fetch responses are megabytes of record batches; a general-purpose client that parses in
Python spends most of a follower's CPU receiving them, and the controller quorum's Raft messages
(tens a second, each a small POST) cost it more than their handling. This one speaks just what the
nodes need:
one request at a time per connection, `Content-Length` bodies out, `Content-Length` or chunked
bodies in (httptools handles both), keep-alive with a bounded pool of idle connections per peer.

Limits: every exchange has a deadline (the whole request and response), a response body above
`max_response_bytes` is refused, at most `max_idle_per_peer` idle connections are kept. A request
that fails on a reused idle connection before any response byte arrived is retried once on a fresh
connection (the peer may have closed it while idle); nothing else is retried here.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import httptools

#: Bytes read from the socket at a time.
READ_CHUNK = 256 * 1024


class Http1Error(Exception):
    """The peer could not be reached, closed the connection, answered garbage, or was too slow."""


@dataclass
class Http1Response:
    status_code: int
    headers: dict[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return json.loads(self.content)


@dataclass
class _Parsed:
    headers: dict[str, str] = field(default_factory=dict)
    body: list[bytes] = field(default_factory=list)
    size: int = 0
    complete: bool = False
    keep_alive: bool = True
    limit: int = 0
    too_large: bool = False
    parser: Any = None

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > self.limit:
            self.too_large = True
            return
        self.body.append(body)

    def on_headers_complete(self) -> None:
        self.keep_alive = self.parser.should_keep_alive()

    def on_message_complete(self) -> None:
        self.complete = True


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        try:
            self.writer.close()
        except Exception:
            pass

    async def exchange(self, head: bytes, body: bytes, max_response_bytes: int) -> tuple[Http1Response, bool, bool]:
        """(response, keep-alive, whether any response byte arrived)."""
        self.writer.write(head)
        if body:
            self.writer.write(body)
        await self.writer.drain()
        parsed = _Parsed(limit=max_response_bytes)
        parser = parsed.parser = httptools.HttpResponseParser(parsed)
        got_any = False
        while not parsed.complete:
            chunk = await self.reader.read(READ_CHUNK)
            if not chunk:
                raise _Closed(got_any)
            got_any = True
            try:
                parser.feed_data(chunk)
            except httptools.HttpParserError as e:
                raise Http1Error(f"malformed HTTP response: {e}") from None
            if parsed.too_large:
                raise Http1Error(f"response body larger than {max_response_bytes} bytes")
        keep_alive = parsed.keep_alive
        return Http1Response(parser.get_status_code(), parsed.headers, b"".join(parsed.body)), keep_alive, True


class _Closed(Exception):
    def __init__(self, got_any: bool) -> None:
        super().__init__("connection closed by the peer")
        self.got_any = got_any


class Http1Pool:
    """Keep-alive connections to peers, keyed by (host, port)."""

    def __init__(self, *, max_idle_per_peer: int = 8, connect_timeout_s: float = 2.0,
                 max_response_bytes: int = 256 * 1024 * 1024, ssl: Any = None) -> None:
        self.ssl = ssl  # an ssl.SSLContext: connect over TLS
        self.max_idle_per_peer = max_idle_per_peer
        self.connect_timeout_s = connect_timeout_s
        self.max_response_bytes = max_response_bytes
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        for conns in self._idle.values():
            for c in conns:
                c.close()
        self._idle.clear()

    async def _connect(self, host: str, port: int) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                host, port, limit=READ_CHUNK * 4, ssl=self.ssl, server_hostname=host if self.ssl else None),
                                                    self.connect_timeout_s)
        except (OSError, asyncio.TimeoutError) as e:
            raise Http1Error(f"cannot connect to {host}:{port}: {type(e).__name__}: {e}") from None
        return _Connection(reader, writer)

    async def request(self, host: str, port: int, method: str, target: str, body: bytes = b"",
                      headers: dict[str, str] | None = None, *, timeout_s: float = 30.0) -> Http1Response:
        if self._closed:
            raise Http1Error("client is closed")
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            return await asyncio.wait_for(self._request(host, port, head, body), timeout_s)
        except asyncio.TimeoutError:
            raise Http1Error(f"{method} {target} to {host}:{port} took longer than {timeout_s:.1f} s") from None

    async def _request(self, host: str, port: int, head: bytes, body: bytes) -> Http1Response:
        key = (host, port)
        idle = self._idle.setdefault(key, [])
        reused = bool(idle)
        conn = idle.pop() if idle else await self._connect(host, port)
        for attempt in (0, 1):
            try:
                resp, keep_alive, _ = await conn.exchange(head, body, self.max_response_bytes)
            except _Closed as e:
                conn.close()
                if reused and attempt == 0 and not e.got_any:
                    conn = await self._connect(host, port)  # a stale idle connection: once more, fresh
                    reused = False
                    continue
                raise Http1Error(f"{host}:{port} closed the connection") from None
            except (OSError, ConnectionError) as e:
                conn.close()
                if reused and attempt == 0:
                    conn = await self._connect(host, port)
                    reused = False
                    continue
                raise Http1Error(f"{host}:{port}: {type(e).__name__}: {e}") from None
            except BaseException:
                conn.close()  # a timeout or cancellation mid-exchange leaves the stream in an unknown state
                raise
            if keep_alive and not self._closed and len(self._idle[key]) < self.max_idle_per_peer:
                self._idle[key].append(conn)
            else:
                conn.close()
            return resp
        raise Http1Error(f"{host}:{port}: no answer")  # pragma: no cover - the loop returns or raises
