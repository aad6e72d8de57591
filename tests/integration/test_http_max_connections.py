"""`max.connections` on the HTTP door, against one real node: the connection over the limit is
answered 503 (`error_code` 50350, from the error table) and closed, while the open connections —
idle keep-alive ones included — keep being served, and a place freed is taken by the next one."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.support.nodes import NodeProcess, start_node

MAX_CONNECTIONS = 4


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> NodeProcess:
    n = start_node(tmp_path_factory.mktemp("max-connections"), **{"max.connections": str(MAX_CONNECTIONS)})
    try:
        yield n
    finally:
        n.stop()


def _request(s: socket.socket, path: str = "/v3/clusters") -> tuple[int, dict, bytes]:
    """One keep-alive GET on `s`: (status, headers, body); (0, {}, b"") when the node closed without an answer."""
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: node\r\nAccept: application/json\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            return 0, {}, buf
        buf += chunk
    head, body = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


def _closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_the_connection_over_max_connections_is_refused_and_the_others_keep_being_served(node):
    held = [socket.create_connection(("127.0.0.1", node.port), timeout=30) for _ in range(MAX_CONNECTIONS)]
    try:
        for s in held:  # each one served: every place is taken, by a connection that stays open
            assert _request(s)[0] == 200
        with socket.create_connection(("127.0.0.1", node.port), timeout=30) as extra:
            status, headers, body = _request(extra)
            assert status == 503, (status, body)
            assert headers["content-type"].startswith("application/json") and headers["connection"] == "close"
            doc = json.loads(body)
            assert doc["error_code"] == 50350 and "max.connections" in doc["message"], doc
            assert _closed(extra)
        for s in held:  # the refusal took nothing from the open connections, idle ones included
            assert _request(s)[0] == 200
        held.pop().close()
        deadline = time.monotonic() + 30
        while True:  # the freed place is taken again, once the node has seen the close
            with socket.create_connection(("127.0.0.1", node.port), timeout=30) as again:
                status, _, body = _request(again)
            if status == 200 or time.monotonic() > deadline:
                break
            assert status == 503, (status, body)
            time.sleep(0.1)
        assert status == 200, body
    finally:
        for s in held:
            s.close()
