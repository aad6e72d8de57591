"""The Kafka listener in-process: answers in request order on one connection, a bad frame closes only
its own connection, the idle timeout and the connection limit close connections."""

from __future__ import annotations

import asyncio
import struct

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest

from lakelog.ingest_api.kafka import codec
from lakelog.ingest_api.config.kafka import KafkaListener
from lakelog.ingest_api.kafka.metadata_apis import api_versions_table
from lakelog.ingest_api.kafka.server import KafkaServer


async def _handler(req: codec.Request, conn) -> object:
    if req.api_key == 12:  # Heartbeat: answer late when the member id says so, to test the order
        await asyncio.sleep(float(req.body.member_id))
        return codec.to_entity(codec.response_class(12, req.api_version), {"throttle_time": 0, "error_code": 0})
    return codec.to_entity(codec.response_class(18, req.api_version),
                           {"error_code": 0, "api_keys": api_versions_table(), "throttle_time": 0})


def _server(**kw) -> KafkaServer:
    args = {"max_frame_bytes": 1024 * 1024, "max_connections": 10, "idle_timeout_ms": 60_000, "max_in_flight": 4}
    args.update(kw)
    return KafkaServer([KafkaListener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT")], _handler, api_versions_table,
                       **args)


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


def _heartbeat(cid: int, delay_s: float) -> bytes:
    return codec.encode_request(HeartbeatRequest(group_id="g", generation_id=1, member_id=str(delay_s),
                                                 group_instance_id=None), cid)


def test_answers_come_in_request_order_and_a_bad_frame_closes_only_its_connection():
    async def run() -> None:
        server = _server()
        await server.start()
        port = server.bound_ports["PLAINTEXT"]
        try:
            r1, w1 = await asyncio.open_connection("127.0.0.1", port)
            # The first request is answered last by its handler, yet its answer is written first.
            w1.write(_heartbeat(1, 0.3) + _heartbeat(2, 0.0) + _heartbeat(3, 0.1))
            cids = [struct.unpack_from(">i", await _read_frame(r1))[0] for _ in range(3)]
            assert cids == [1, 2, 3]
            r2, w2 = await asyncio.open_connection("127.0.0.1", port)
            w2.write(struct.pack(">ihhih", 13, 3, 12, 9, 3) + b"xyz")  # a request that ends too soon
            assert await asyncio.wait_for(r2.read(100), 10) == b""
            r3, w3 = await asyncio.open_connection("127.0.0.1", port)
            w3.write(struct.pack(">i", 2 * 1024 * 1024))  # over max_frame_bytes
            assert await asyncio.wait_for(r3.read(100), 10) == b""
            w1.write(codec.encode_request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 4))
            assert struct.unpack_from(">i", await _read_frame(r1))[0] == 4  # the first connection still served
            for w in (w1, w2, w3):
                w.close()
        finally:
            await server.stop()

    asyncio.run(run())


def test_idle_connections_and_connections_past_the_limit_are_closed():
    async def run() -> None:
        server = _server(idle_timeout_ms=200, max_connections=1)
        await server.start()
        port = server.bound_ports["PLAINTEXT"]
        try:
            r1, w1 = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.sleep(0.05)
            r2, w2 = await asyncio.open_connection("127.0.0.1", port)
            assert await asyncio.wait_for(r2.read(100), 10) == b""  # past max.connections
            assert await asyncio.wait_for(r1.read(100), 10) == b""  # idle past connections.max.idle.ms
            for w in (w1, w2):
                w.close()
        finally:
            await server.stop()

    asyncio.run(run())


def test_a_handler_that_fails_answers_unknown_server_error():
    async def failing(req, conn):
        raise RuntimeError("boom")

    async def run() -> None:
        server = _server()
        server.handler = failing
        await server.start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", server.bound_ports["PLAINTEXT"])
            w.write(_heartbeat(5, 0))
            frame = await _read_frame(r)
            cid, error = struct.unpack_from(">i", frame)[0], struct.unpack_from(">h", frame, 9)[0]
            assert (cid, error) == (5, -1)
            w.close()
        finally:
            await server.stop()

    asyncio.run(run())


def test_a_connections_requests_run_one_after_another_except_fetches():
    """A request's handler starts only once the previous one (but a Fetch) is answered: pipelined
    Produce requests must append in the order they were sent."""
    started: list[tuple[int, float]] = []

    async def handler(req: codec.Request, conn) -> object:
        started.append((req.correlation_id, asyncio.get_running_loop().time()))
        return await _handler(req, conn)

    async def run() -> None:
        server = KafkaServer([KafkaListener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT")], handler, api_versions_table,
                             max_frame_bytes=1024 * 1024, max_connections=10, idle_timeout_ms=60_000, max_in_flight=4)
        await server.start()
        try:
            r, w = await asyncio.open_connection("127.0.0.1", server.bound_ports["PLAINTEXT"])
            # The first handler takes 0.3 s: the second and third start only after it.
            w.write(_heartbeat(1, 0.3) + _heartbeat(2, 0.0) + _heartbeat(3, 0.0))
            assert [struct.unpack_from(">i", await _read_frame(r))[0] for _ in range(3)] == [1, 2, 3]
            assert [cid for cid, _ in started] == [1, 2, 3]
            assert started[1][1] - started[0][1] >= 0.29  # not begun while the first one ran
            w.close()
        finally:
            await server.stop()

    asyncio.run(run())
