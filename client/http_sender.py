"""The client's HTTP/1.1 sender: keep-alive connections over plain sockets, for the producer's large
POST bodies and the consumer's binary fetches.

Measured against httpx on the producer's request (a 1 MiB RecordBatch POSTed, a small JSON
answer): httpx spent ~0.8-1.1 ms of CPU per request in the client, this sender ~0.2-0.4 ms
(docs/benchmarks.md, "Produce CPU per record"). The body is written with one `sendall` after
the head, never copied or re-encoded; the answer is read with a buffered reader.

What it supports, the way the producer used httpx for its produce requests:
  * `http://` and `https://` (an `ssl.SSLContext`, or `verify=False`, or a CA file path);
  * extra headers (an API key's `Authorization: Bearer`), and any `httpx.Auth` (Basic, or the
    cluster secret's request signature, which covers method, path and body): the auth flow runs
    on an `httpx.Request` built with the same method, URL, headers and body, and the headers it
    sets are sent;
  * keep-alive: a connection goes back to its pool after a complete answer unless the node said
    `Connection: close`; a request that fails on a pooled connection before any answer byte was
    read is NOT sent again here (the producer's retry logic decides: its batches are idempotent).

Bounds: `connect_timeout_s`, `timeout_s` (each socket operation), at most `max_connections`
idle connections kept per node, an answer's head at most `MAX_HEAD_BYTES` and its body at most
`MAX_ANSWER_BYTES` (a produce answer is an offset list; more is refused as a broken answer).

Errors: every failure to connect, send or read, and every answer that is not HTTP/1.1 within
the bounds, raises `TransportError` (an `OSError`), and the connection is closed.

Concurrency: `HttpSender` is safe from any thread; each request holds one connection for itself.
"""

from __future__ import annotations

import socket
import ssl
import threading
from typing import Any, Callable
from urllib.parse import urlsplit

#: Longest status line plus headers of an answer.
MAX_HEAD_BYTES = 64 * 1024
#: Largest answer body read (a produce answer is a few hundred bytes per batch).
MAX_ANSWER_BYTES = 16 * 1024 * 1024


class TransportError(OSError):
    """A connection failed, timed out, or answered something that is not HTTP/1.1 within the bounds."""


class Answer:
    """An HTTP answer: status, headers (names lower case), body; duck-types the parts of
    `httpx.Response` the producer reads (`status_code`, `headers`, `content`, `text`, `json()`)."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code, self.headers, self.content = status_code, headers, content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        import json

        return json.loads(self.content)


def _as_httpx_auth(auth: Any) -> Any:
    """`auth` as httpx.Client takes it (an httpx.Auth, a (user, password) tuple, or a function of
    the request) -> an httpx.Auth, or None."""
    if auth is None:
        return None
    import httpx

    if isinstance(auth, httpx.Auth):
        return auth
    if isinstance(auth, tuple):
        return httpx.BasicAuth(*auth)
    if callable(auth):
        return httpx.FunctionAuth(auth)
    raise TypeError(f"auth must be an httpx.Auth, a (user, password) tuple or a function, not {type(auth).__name__}")


def _readable(sock: socket.socket) -> bool:
    """True when an idle connection has something to read: its end of file, or bytes nobody asked for.

    poll, not select: select refuses descriptors numbered 1024 and above (FD_SETSIZE), which a
    process holding many files reaches, and every idle connection would then look broken."""
    import select

    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return True
    try:
        poller = select.poll()
        poller.register(sock, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


class _Connection:
    __slots__ = ("sock", "reader", "key")

    def __init__(self, sock: socket.socket, key: tuple) -> None:
        self.sock, self.key = sock, key
        self.reader = sock.makefile("rb", buffering=65536)

    def close(self) -> None:
        try:
            self.reader.close()
        finally:
            self.sock.close()


class HttpSender:
    def __init__(self, *, timeout_s: float, connect_timeout_s: float = 5.0, max_connections: int = 6,
                 headers: dict[str, str] | None = None, auth: Any = None, verify: Any = True,
                 user_agent: str = "lakelog-producer") -> None:
        self.timeout_s, self.connect_timeout_s = timeout_s, connect_timeout_s
        self.max_connections = max(1, max_connections)
        self.auth = _as_httpx_auth(auth)
        self.headers = {"User-Agent": user_agent, **(headers or {})}
        self._verify = verify
        self._ssl: ssl.SSLContext | None = None
        self._idle: dict[tuple, list[_Connection]] = {}
        self._lock = threading.Lock()
        self._closed = False

    @classmethod
    def supports(cls, http_options: dict[str, Any] | None) -> bool:
        """Whether these httpx.Client options can be honoured here (else the producer keeps httpx)."""
        return set(http_options or {}) <= {"auth", "headers", "verify"}

    # ------------------------------------------------------------------ requests

    def post(self, url: str, body: bytes, headers: dict[str, str],
             on_written: Callable[[], None] | None = None) -> Answer:
        """POST `body` to `url` (query included); `on_written()` runs once the request's last byte
        was handed to the kernel, before the answer is read."""
        return self.request("POST", url, body, headers, on_written)

    def get(self, url: str, headers: dict[str, str]) -> Answer:
        """GET `url` (query included), no body."""
        return self.request("GET", url, None, headers)

    def request(self, method: str, url: str, body: bytes | None, headers: dict[str, str],
                on_written: Callable[[], None] | None = None) -> Answer:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(f"not an http(s) URL: {url!r}")
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        all_headers = {**self.headers, **headers}
        if self.auth is not None:
            all_headers = self._authorized(method, url, all_headers, body or b"")
        host = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host_header = host if ":" not in host else f"[{host}]"
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host_header}:{port}"]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        else:
            body = b""
        lines += [f"{k}: {v}" for k, v in all_headers.items() if k.lower() not in ("host", "content-length")]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        key = (parts.scheme, host, port)
        conn = self._checkout(key)
        try:
            try:
                if len(body) <= 16384:
                    conn.sock.sendall(head + body)
                else:
                    conn.sock.sendall(head)
                    conn.sock.sendall(body)
            except OSError as e:
                raise TransportError(f"cannot send to {host}:{port}: {e}") from None
            if on_written is not None:
                on_written()
            answer, keep = self._read_answer(conn, f"{host}:{port}")
        except BaseException:
            conn.close()
            raise
        if keep:
            self._checkin(conn)
        else:
            conn.close()
        return answer

    def _authorized(self, method: str, url: str, headers: dict[str, str], body: bytes) -> dict[str, str]:
        import httpx

        request = httpx.Request(method, url, headers=headers, content=body or None)
        flow = self.auth.sync_auth_flow(request)
        signed = next(flow)
        flow.close()
        return {k: v for k, v in signed.headers.items() if k.lower() not in ("host", "content-length")}

    # ------------------------------------------------------------------ connections

    def _checkout(self, key: tuple) -> _Connection:
        with self._lock:
            if self._closed:
                raise TransportError("the sender is closed")
            idle = self._idle.get(key)
            while idle:
                conn = idle.pop()
                if not _readable(conn.sock):
                    return conn
                conn.close()  # readable while idle: the node closed it (keep-alive timeout) or broke it
        scheme, host, port = key
        try:
            sock = socket.create_connection((host, port), timeout=self.connect_timeout_s)
        except OSError as e:
            raise TransportError(f"cannot connect to {host}:{port}: {e}") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if scheme == "https":
                sock = self._ssl_context().wrap_socket(sock, server_hostname=host)
            sock.settimeout(self.timeout_s)
        except (OSError, ValueError) as e:
            sock.close()
            raise TransportError(f"cannot open TLS to {host}:{port}: {e}") from None
        return _Connection(sock, key)

    def _checkin(self, conn: _Connection) -> None:
        with self._lock:
            idle = self._idle.setdefault(conn.key, [])
            if not self._closed and len(idle) < self.max_connections:
                idle.append(conn)
                return
        conn.close()

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            v = self._verify
            if isinstance(v, ssl.SSLContext):
                ctx = v
            elif v is False:
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            elif isinstance(v, str):
                ctx = ssl.create_default_context(cafile=v)
            else:
                ctx = ssl.create_default_context()
            self._ssl = ctx
        return self._ssl

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for c in conns:
            c.close()

    # ------------------------------------------------------------------ answers

    def _read_answer(self, conn: _Connection, where: str) -> tuple[Answer, bool]:
        reader = conn.reader
        try:
            while True:  # 1xx answers (100 Continue) precede the real one
                status, headers = self._read_head(reader, where)
                if status >= 200:
                    break
            if headers.get("transfer-encoding", "").lower() == "chunked":
                body = self._read_chunked(reader, where)
                keep = True
            elif "content-length" in headers:
                text = headers["content-length"]
                if not text.isdigit() or int(text) > MAX_ANSWER_BYTES:
                    raise TransportError(f"{where} answered a Content-Length of {text[:40]!r}")
                n = int(text)
                body = reader.read(n)
                if len(body) != n:
                    raise TransportError(f"{where} closed the connection inside an answer")
                keep = True
            else:  # the body ends with the connection
                body = reader.read(MAX_ANSWER_BYTES + 1)
                if len(body) > MAX_ANSWER_BYTES:
                    raise TransportError(f"{where} answered more than {MAX_ANSWER_BYTES} bytes")
                keep = False
        except (socket.timeout, TimeoutError):
            raise TransportError(f"no answer from {where} within {self.timeout_s:g}s") from None
        except TransportError:
            raise
        except OSError as e:
            raise TransportError(f"reading the answer of {where} failed: {e}") from None
        if "close" in headers.get("connection", "").lower():
            keep = False
        return Answer(status, headers, body), keep

    @staticmethod
    def _read_head(reader, where: str) -> tuple[int, dict[str, str]]:
        line = reader.readline(MAX_HEAD_BYTES + 1)
        if not line:
            raise TransportError(f"{where} closed the connection without an answer")
        parts = line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            raise TransportError(f"{where} answered something that is not HTTP/1.1: {line[:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        used = len(line)
        while True:
            line = reader.readline(MAX_HEAD_BYTES + 1)
            used += len(line)
            if used > MAX_HEAD_BYTES:
                raise TransportError(f"{where} answered a head longer than {MAX_HEAD_BYTES} bytes")
            if line in (b"\r\n", b"\n"):
                return status, headers
            if not line:
                raise TransportError(f"{where} closed the connection inside an answer's head")
            name, sep, value = line.partition(b":")
            if not sep:
                raise TransportError(f"{where} answered a malformed header line {line[:80]!r}")
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")

    @staticmethod
    def _read_chunked(reader, where: str) -> bytes:
        out = bytearray()
        while True:
            line = reader.readline(1024)
            try:
                size = int(line.split(b";", 1)[0].strip(), 16)
            except ValueError:
                raise TransportError(f"{where} answered a malformed chunk size {line[:40]!r}") from None
            if size == 0:
                while reader.readline(MAX_HEAD_BYTES + 1) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(out)
            if len(out) + size > MAX_ANSWER_BYTES:
                raise TransportError(f"{where} answered more than {MAX_ANSWER_BYTES} bytes")
            chunk = reader.read(size)
            if len(chunk) != size:
                raise TransportError(f"{where} closed the connection inside an answer")
            out += chunk
            reader.readline(1024)
