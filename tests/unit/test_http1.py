"""The node-to-node HTTP/1.1 client against a small loopback server that misbehaves on demand."""

from __future__ import annotations

import asyncio

import pytest

from lakelog.ingest_api.cluster.http1 import Http1Error, Http1Pool


class Server:
    """Answers `mode`-dependent responses; counts connections."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.connections = 0
        #: Drop the connection of the next N requests without answering (then answer again).
        self.close_next = 0
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                if self.close_next > 0:
                    self.close_next -= 1
                    writer.close()
                    return
                if self.mode == "close-idle":
                    writer.close()
                    return
                if self.mode == "slow":
                    await asyncio.sleep(5)
                if self.mode == "chunked":
                    writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                 b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
                else:
                    payload = body * (1000 if self.mode == "big" else 1)
                    writer.write(b"HTTP/1.1 201 Created\r\nX-Echo: yes\r\nContent-Length: %d\r\n\r\n" % len(payload)
                                 + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def run(coro):
    return asyncio.run(coro)


def test_round_trip_keep_alive_and_chunked():
    async def go():
        srv = Server()
        port = await srv.start()
        pool = Http1Pool()
        try:
            for i in range(3):
                r = await pool.request("127.0.0.1", port, "POST", "/x?y=1", f"body{i}".encode(), {"A": "b"})
                assert (r.status_code, r.content, r.headers["x-echo"]) == (201, f"body{i}".encode(), "yes")
            assert srv.connections == 1  # one keep-alive connection for all three
            srv.mode = "chunked"
            r = await pool.request("127.0.0.1", port, "GET", "/", b"")
            assert r.content == b"hello world"
        finally:
            await pool.close()
            await srv.stop()
    run(go())


def test_a_stale_idle_connection_is_retried_once_on_a_fresh_one():
    async def go():
        srv = Server()
        port = await srv.start()
        pool = Http1Pool()
        try:
            assert (await pool.request("127.0.0.1", port, "POST", "/", b"a")).status_code == 201
            assert srv.connections == 1
            srv.close_next = 1  # the kept-alive connection is dropped under the next request
            r = await pool.request("127.0.0.1", port, "POST", "/", b"b")
            assert (r.status_code, r.content) == (201, b"b")  # answered, on a fresh connection
            assert srv.connections == 2
            srv.close_next = 2  # the retry fails too: only one retry, then the error
            with pytest.raises(Http1Error, match="closed the connection"):
                await pool.request("127.0.0.1", port, "POST", "/", b"c")
            assert srv.connections == 3
            srv.close_next = 1  # a fresh connection that fails is not retried (nothing was stale)
            with pytest.raises(Http1Error, match="closed the connection"):
                await pool.request("127.0.0.1", port, "POST", "/", b"d")
            assert srv.connections == 4
            srv.mode = "close-idle"  # a server that drops every connection: one retry, then the error
            with pytest.raises(Http1Error):
                await pool.request("127.0.0.1", port, "POST", "/", b"e")
            srv.mode = "ok"
            assert (await pool.request("127.0.0.1", port, "POST", "/", b"f")).content == b"f"
        finally:
            await pool.close()
            await srv.stop()
    run(go())


def test_limits_deadline_size_and_refused_connection():
    async def go():
        srv = Server()
        port = await srv.start()
        pool = Http1Pool(max_response_bytes=10_000)
        try:
            srv.mode = "big"
            with pytest.raises(Http1Error, match="larger than"):
                await pool.request("127.0.0.1", port, "POST", "/", b"0123456789abc")
            srv.mode = "slow"
            with pytest.raises(Http1Error, match="longer than"):
                await pool.request("127.0.0.1", port, "POST", "/", b"x", timeout_s=0.2)
        finally:
            await pool.close()
            await srv.stop()
        with pytest.raises(Http1Error, match="cannot connect"):
            await Http1Pool().request("127.0.0.1", port, "GET", "/", b"")
    run(go())
