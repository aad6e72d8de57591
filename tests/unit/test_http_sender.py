"""client/http_sender.py against a scripted HTTP/1.1 server on loopback: keep-alive, closes, chunked
answers, broken answers, bounds, and the auth flows the producer passes."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

from lakelog.client.http_sender import MAX_HEAD_BYTES, HttpSender, TransportError
from lakelog.ingest_api.security.cluster_auth import ClusterAuth, now_ms, verify

SECRET = b"sender-test-secret-0123456789"


class ScriptedServer:
    """Accepts connections; answers each request with `answer(request)` -> raw bytes (None: close)."""

    def __init__(self, answer, close_after: bool = False) -> None:
        self.answer = answer
        self.close_after = close_after  # hang up after each answer
        self.requests: list[dict] = []
        self.connections = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._accept = threading.Thread(target=self._run, daemon=True)
        self._accept.start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        with conn:
            while True:
                line = reader.readline()
                if not line:
                    return
                method, target, _ = line.decode().split(" ", 2)
                headers = {}
                while (h := reader.readline()) not in (b"\r\n", b""):
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = reader.read(int(headers.get("content-length", 0)))
                request = {"method": method, "target": target, "headers": headers, "body": body}
                self.requests.append(request)
                out = self.answer(request)
                if out is None:
                    return
                conn.sendall(out)
                if self.close_after:
                    return

    def close(self) -> None:
        self.sock.close()


def _ok(body: bytes = b'{"offsets":[]}', extra: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n{extra}\r\n"
            ).encode() + body


@pytest.fixture
def server_factory():
    servers: list[ScriptedServer] = []

    def make(answer, close_after: bool = False) -> ScriptedServer:
        servers.append(ScriptedServer(answer, close_after))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def test_keep_alive_reuses_one_connection_and_sends_the_body_unchanged(server_factory):
    server = server_factory(lambda r: _ok())
    sender = HttpSender(timeout_s=10)
    written = []
    try:
        for i in range(3):
            body = bytes([i]) * 300_000
            a = sender.post(f"{server.url}/topics/t/partitions/0?acks=all", body, {"Content-Type": "x/y"},
                            on_written=lambda: written.append(1))
            assert a.status_code == 200 and a.json() == {"offsets": []}
    finally:
        sender.close()
    assert server.connections == 1 and len(written) == 3
    assert [r["body"] for r in server.requests] == [bytes([i]) * 300_000 for i in range(3)]
    assert server.requests[0]["target"] == "/topics/t/partitions/0?acks=all"
    assert server.requests[0]["headers"]["content-type"] == "x/y"


def test_a_closed_connection_is_not_reused(server_factory):
    answers = iter([_ok(extra="connection: close\r\n"), _ok(), None, _ok()])
    server = server_factory(lambda r: next(answers))
    sender = HttpSender(timeout_s=10)
    try:
        assert sender.post(server.url + "/a", b"1", {}).status_code == 200  # answered with Connection: close
        assert sender.post(server.url + "/a", b"2", {}).status_code == 200  # a new connection
        with pytest.raises(TransportError, match="closed the connection without an answer"):
            sender.post(server.url + "/a", b"3", {})  # the server hung up instead of answering
        assert sender.post(server.url + "/a", b"4", {}).status_code == 200
    finally:
        sender.close()
    assert server.connections == 3


def test_an_idle_connection_the_server_closed_is_replaced_before_sending(server_factory):
    server = server_factory(lambda r: _ok())
    sender = HttpSender(timeout_s=10)
    try:
        assert sender.post(server.url + "/a", b"1", {}).status_code == 200
        idle = sender._idle[("http", "127.0.0.1", int(server.url.rsplit(":", 1)[1]))]
        idle[0].sock.shutdown(socket.SHUT_RD)  # stands for the node closing it after its keep-alive timeout
        assert sender.post(server.url + "/a", b"2", {}).status_code == 200
    finally:
        sender.close()
    assert server.connections == 2 and [r["body"] for r in server.requests] == [b"1", b"2"]


def test_chunked_and_error_answers(server_factory):
    pieces = [b'{"err', b'or_code":40908}']
    chunked = b"HTTP/1.1 409 Conflict\r\ntransfer-encoding: chunked\r\n\r\n" + \
        b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    server = server_factory(lambda r: chunked)
    sender = HttpSender(timeout_s=10)
    try:
        a = sender.post(server.url + "/a", b"x", {})
        assert a.status_code == 409 and a.json() == {"error_code": 40908}
    finally:
        sender.close()


@pytest.mark.parametrize("answer,match", [
    (b"SSH-2.0-OpenSSH\r\n", "not HTTP/1.1"),
    (b"HTTP/1.1 200 OK\r\n" + b"x-big: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n", "head longer than"),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 99999999999\r\n\r\n", "Content-Length"),
    (b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", "inside an answer"),
])
def test_broken_answers_are_transport_errors(server_factory, answer, match):
    server = server_factory(lambda r: answer, close_after=True)
    sender = HttpSender(timeout_s=5)
    try:
        with pytest.raises(TransportError, match=match):
            sender.post(server.url + "/a", b"x", {})
    finally:
        sender.close()


def test_an_unreachable_node_is_a_transport_error():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # bound then released: nothing listens there
    sender = HttpSender(timeout_s=5, connect_timeout_s=2)
    with pytest.raises(TransportError, match="cannot connect"):
        sender.post(f"http://127.0.0.1:{port}/a", b"x", {})


def test_api_key_basic_and_cluster_signature_are_sent(server_factory):
    server = server_factory(lambda r: _ok())
    for opts in ({"headers": {"Authorization": "Bearer k-123"}}, {"auth": ("alice", "pw")},
                 {"auth": ClusterAuth(SECRET, 0, principal="User:__cluster")}):
        assert HttpSender.supports(opts)
        sender = HttpSender(timeout_s=10, headers=opts.get("headers"), auth=opts.get("auth"))
        try:
            sender.post(server.url + "/topics/t/partitions/0?acks=all", b"body-bytes", {"Content-Type": "x/y"})
        finally:
            sender.close()
    bearer, basic, signed = server.requests
    assert bearer["headers"]["authorization"] == "Bearer k-123"
    assert basic["headers"]["authorization"] == httpx.BasicAuth("alice", "pw")._auth_header
    assert verify(SECRET, "POST", signed["target"], signed["headers"], signed["body"], now_ms()) == 0
    assert not HttpSender.supports({"transport": httpx.MockTransport(lambda r: None)})


def test_idle_connections_are_reused_when_descriptors_are_numbered_above_1024(server_factory):
    """A long-lived process (a test run, an application with many files open) holds descriptors
    above FD_SETSIZE; the idle check must still see a healthy connection as healthy."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # the next sockets get numbers above 1024
    server = server_factory(lambda r: _ok())
    sender = HttpSender(timeout_s=10)
    try:
        for i in range(3):
            assert sender.post(f"{server.url}/a", bytes([i]) * 10, {}).status_code == 200
    finally:
        sender.close()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert server.connections == 1
