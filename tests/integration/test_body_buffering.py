"""ingest_api/http/body_buffering.py on a real uvicorn server over loopback: a declared body within the
bound reaches the application as one receive event; anything else keeps uvicorn's own steps."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading

import pytest
import uvicorn

from lakelog.ingest_api.http.body_buffering import whole_body_protocol
from lakelog.ingest_api.http.connections import guarded_http_protocol
from tests.support.faults import wait_for

MiB = 1 << 20


class _Recorder:
    """An ASGI app that answers how its request body arrived: events, bytes, SHA-256."""

    def __init__(self) -> None:
        self.disconnects = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        events, digest, size = 0, hashlib.sha256(), 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                self.disconnects += 1
                return
            events += 1
            digest.update(message.get("body", b""))
            size += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = json.dumps({"events": events, "bytes": size, "sha256": digest.hexdigest()}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
def serve():
    started: list[tuple[uvicorn.Server, threading.Thread]] = []

    def start(app, limit: int) -> int:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        protocol = whole_body_protocol(guarded_http_protocol(10.0, 65536), limit)
        server = uvicorn.Server(uvicorn.Config(app, http=protocol, log_config=None, access_log=False, lifespan="off"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        started.append((server, thread))
        wait_for(lambda: server.started, what="the server to start", interval_s=0.01)
        return sock.getsockname()[1]

    yield start
    for server, thread in started:
        server.should_exit = True
        thread.join(10)


def _answers(sock: socket.socket, count: int) -> list[dict]:
    reader = sock.makefile("rb")
    out = []
    for _ in range(count):
        assert reader.readline().startswith(b"HTTP/1.1 200")
        length = 0
        while (line := reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        out.append(json.loads(reader.read(length)))
    return out


def _post(port: int, body: bytes, *, chunked: bool = False) -> dict:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        if chunked:
            s.sendall(b"POST /x HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
            for i in range(0, len(body), 100_000):
                piece = body[i:i + 100_000]
                s.sendall(b"%x\r\n" % len(piece) + piece + b"\r\n")
            s.sendall(b"0\r\n\r\n")
        else:
            s.sendall(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body))
            s.sendall(body)
        return _answers(s, 1)[0]


def test_a_declared_body_within_the_bound_arrives_as_one_event(serve):
    port = serve(_Recorder(), 8 * MiB)
    body = os.urandom(4 * MiB)
    got = _post(port, body)
    assert got == {"events": 1, "bytes": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def test_a_body_over_the_bound_or_chunked_keeps_uvicorns_steps(serve):
    port = serve(_Recorder(), 1 * MiB)
    body = os.urandom(4 * MiB)
    got = _post(port, body)  # declared over the bound: 64 KiB flow control, several events
    assert got["events"] > 1 and got["bytes"] == len(body) and got["sha256"] == hashlib.sha256(body).hexdigest()
    got = _post(port, body[:MiB // 2], chunked=True)
    assert got["bytes"] == MiB // 2 and got["sha256"] == hashlib.sha256(body[:MiB // 2]).hexdigest()


def test_pipelined_requests_each_get_their_own_whole_body(serve):
    port = serve(_Recorder(), 8 * MiB)
    bodies = [os.urandom(300_000), os.urandom(5), os.urandom(700_000)]
    wire = b"".join(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(b) + b for b in bodies)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(wire)
        got = _answers(s, len(bodies))
    assert got == [{"events": 1, "bytes": len(b), "sha256": hashlib.sha256(b).hexdigest()} for b in bodies]


def test_a_client_gone_mid_body_is_a_disconnect_for_the_application(serve):
    app = _Recorder()
    port = serve(app, 8 * MiB)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % MiB + os.urandom(MiB // 2))
    wait_for(lambda: app.disconnects > 0, what="the application to see the disconnect", interval_s=0.01)
    assert app.disconnects == 1
