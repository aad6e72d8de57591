"""The Kafka listener: asyncio TCP servers on the node's event loop, length-prefixed frames, and the
answers of each connection written in the order its requests arrived.

Per connection: a reader reads one frame at a time (`connections.max.idle.ms` bounds the wait for
the next one; `socket.request.max.bytes` bounds its size), decodes it and starts its handler as a
task; a writer awaits those tasks in arrival order and writes each answer. Every request but a
Fetch starts only once the connection's previous such request is answered, as Kafka's broker
handles a connection's requests one at a time: an idempotent producer's pipelined Produce
requests (`max.in.flight.requests.per.connection`) must append in the order of their sequence
numbers, and a consumer's asynchronous OffsetCommits must land in the order it sent them; a
transactional Produce awaits the coordinator's verification, so two of them could otherwise pass
each other. Fetches (long-polls) run beside them. At most
`queued.max.requests.per.connection` requests are in flight: past that the reader stops reading
until the writer has answered one (TCP pushes back on the client). `max.connections` bounds the
open connections of all Kafka listeners; one more is closed as soon as it is accepted.

On a SASL listener a connection is answered ApiVersions, SaslHandshake and SaslAuthenticate until
it has authenticated (sasl_apis.py); any other request before that closes it, as Kafka does. The
reader waits for each SASL answer before it reads on, so the next frame meets the settled state; a
failed authentication is answered, then the connection is closed.

A frame that cannot be decoded (malformed, truncated, oversized) closes its connection with a log
line; every other connection keeps being served. A well-framed request of an API or version this
node does not answer gets UNSUPPORTED_VERSION (codec.unsupported_version_response). A handler that
fails unexpectedly answers UNKNOWN_SERVER_ERROR in the response type of its request.

SSL and SASL_SSL listeners speak TLS with the node's certificate (`security/tls.py`), handshaken by
asyncio before the first frame.

Zero-copy: an answer whose records are file ranges (codec.ResponseFrame: a Fetch on a plain-TCP
listener, `records_apis.py`) is written piece by piece: its encoded bytes through the stream, and
each range with os.sendfile straight from the segment snapshot to the socket (on a worker thread:
see `_send_frame`), after the stream's buffer has emptied. The ranges' descriptors are closed once sent, or when the
connection ends first.

Concurrency: everything runs on the node's event loop; handlers await the node's services. Only
the sendfile of zero-copy answers runs on worker threads, one range at a time per connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import select
import ssl
from typing import Any, Awaitable, Callable

from kio.schema.errors import ErrorCode

from lakelog.infra.logs import NOTICE
from lakelog.ingest_api.kafka import codec
from lakelog.infra.config import ConfigError
from lakelog.ingest_api.config.kafka import SASL_PROTOCOLS, TLS_PROTOCOLS, KafkaListener
from lakelog.ingest_api.kafka.versions import BEFORE_AUTHENTICATION, FETCH, SASL_AUTHENTICATE, SASL_HANDSHAKE
from lakelog.ingest_api.security.context import ANONYMOUS

log = logging.getLogger("lakelog.kafka")

#: A request -> its response entity, or None when the request gets no answer (Produce acks=0).
Handler = Callable[[codec.Request, "Connection"], Awaitable[Any]]


class Connection:
    """One client connection: who it is, on which listener; read by handlers (client host, listener,
    principal) and written by the SASL handlers (principal, the exchange under way, `close_after_answer`)."""

    def __init__(self, listener: KafkaListener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.listener = listener
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.client_host = f"/{peer[0]}" if peer else "/unknown"
        #: Who the requests act as: None on a SASL listener until SaslAuthenticate succeeds.
        self.principal: str | None = None if listener.security_protocol in SASL_PROTOCOLS else ANONYMOUS
        #: The mechanism SaslHandshake chose, and its exchange (sasl_apis.py) while it runs.
        self.sasl_mechanism: str | None = None
        self.sasl_exchange: Any = None
        #: Set by a handler whose answer is the connection's last (a failed authentication).
        self.close_after_answer = False


class KafkaServer:
    """The node's Kafka listeners. `start()` and `stop()` run on the node's event loop."""

    def __init__(self, listeners: list[KafkaListener], handler: Handler, api_versions: Callable[[], list[dict]], *,
                 max_frame_bytes: int, max_connections: int, idle_timeout_ms: int, max_in_flight: int,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.listeners = listeners
        self.handler = handler
        self.api_versions = api_versions
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_ms / 1000
        self.max_in_flight = max_in_flight
        self.ssl_context = ssl_context
        self._servers: list[asyncio.AbstractServer] = []
        self._connections: set[asyncio.Task] = set()
        #: Bytes sent with sendfile (zero-copy) since start (tests read it).
        self.sendfile_bytes = 0
        #: Each listener's bound port (0 in the config picks a free one: tests).
        self.bound_ports: dict[str, int] = {}

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    async def start(self) -> None:
        for lst in self.listeners:
            tls = self.ssl_context if lst.security_protocol in TLS_PROTOCOLS else None
            if lst.security_protocol in TLS_PROTOCOLS and tls is None:
                raise ConfigError(f"Kafka listener {lst.name} is {lst.security_protocol} but the node has no certificate")
            server = await asyncio.start_server(lambda r, w, lst=lst: self._accept(lst, r, w), lst.host, lst.port,
                                                limit=64 * 1024, ssl=tls)
            self._servers.append(server)
            self.bound_ports[lst.name] = server.sockets[0].getsockname()[1]
            log.info("Kafka listener %s on %s:%d", lst.name, lst.host, self.bound_ports[lst.name], extra=NOTICE)

    async def stop(self) -> None:
        for s in self._servers:
            s.close()
        for t in list(self._connections):
            t.cancel()
        for t in list(self._connections):
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        for s in self._servers:
            try:
                await asyncio.wait_for(s.wait_closed(), 5)
            except (asyncio.TimeoutError, Exception):
                pass
        self._servers.clear()

    async def _accept(self, listener: KafkaListener, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= self.max_connections:
            log.warning("Kafka listener %s: closing a new connection: max.connections=%d reached",
                        listener.name, self.max_connections)
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        conn = Connection(listener, reader, writer)
        try:
            await self._serve(conn)
        except asyncio.CancelledError:
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(self, conn: Connection) -> None:
        answers: asyncio.Queue = asyncio.Queue(maxsize=self.max_in_flight)
        writer_task = asyncio.get_running_loop().create_task(self._write_answers(conn, answers))
        ordered: asyncio.Task | None = None  # the last request that runs in order (all but Fetch)
        try:
            while not writer_task.done():
                frame = await self._read_frame(conn)
                if frame is None:
                    break
                try:
                    req = codec.decode_request(frame)
                except codec.UnsupportedVersion as e:
                    if conn.principal is None and e.api_key not in BEFORE_AUTHENTICATION:
                        log.warning("Kafka connection from %s closed: api_key %d before SASL authentication",
                                    conn.client_host, e.api_key)
                        break
                    try:
                        data = codec.unsupported_version_response(e, self.api_versions())
                    except codec.FrameError as fe:
                        log.warning("Kafka connection from %s closed: %s", conn.client_host, fe)
                        break
                    await answers.put(_done(data))
                    continue
                except codec.FrameError as e:
                    log.warning("Kafka connection from %s closed: %s; the frame began %s", conn.client_host, e,
                                bytes(frame[:64]).hex())
                    break
                if conn.principal is None and req.api_key not in BEFORE_AUTHENTICATION:
                    log.warning("Kafka connection from %s closed: api_key %d before SASL authentication",
                                conn.client_host, req.api_key)
                    break
                if req.api_key == FETCH:
                    task = asyncio.get_running_loop().create_task(self._answer(req, conn))
                else:
                    task = asyncio.get_running_loop().create_task(self._answer_after(ordered, req, conn))
                    ordered = task
                await answers.put(task)
                if req.api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
                    # The exchange's state settles before the next frame is read (and checked against it).
                    await asyncio.wait([task])
                    if conn.close_after_answer:
                        break
        except asyncio.CancelledError:  # the listener stops: nothing more is answered
            writer_task.cancel()
            while not answers.empty():
                item = answers.get_nowait()
                if item is not None:
                    item.cancel()
                    _close_frame(item)
            raise
        await answers.put(None)  # the client went away or sent a bad frame: answer what was read, then stop
        try:
            await writer_task
        except (asyncio.CancelledError, Exception):
            pass

    async def _read_frame(self, conn: Connection) -> bytes | None:
        try:
            head = await asyncio.wait_for(conn.reader.readexactly(4), self.idle_timeout_s)
        except asyncio.TimeoutError:
            log.info("Kafka connection from %s closed: idle for connections.max.idle.ms", conn.client_host)
            return None
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        size = codec.SIZE.unpack(head)[0]
        if not 8 <= size <= self.max_frame_bytes:
            log.warning("Kafka connection from %s closed: a frame of %d bytes (socket.request.max.bytes=%d)",
                        conn.client_host, size, self.max_frame_bytes)
            return None
        try:
            return await asyncio.wait_for(conn.reader.readexactly(size), self.idle_timeout_s)
        except asyncio.TimeoutError:
            log.warning("Kafka connection from %s closed: a frame of %d bytes did not arrive", conn.client_host, size)
        except asyncio.IncompleteReadError as e:
            log.warning("Kafka connection from %s closed: a truncated frame (%d of %d bytes)", conn.client_host,
                        len(e.partial), size)
        except ConnectionError:
            pass
        return None

    async def _answer_after(self, previous: asyncio.Task | None, req: codec.Request,
                            conn: Connection) -> bytes | codec.ResponseFrame | None:
        """`_answer`, once `previous` (the connection's last in-order request) is answered."""
        if previous is not None and not previous.done():  # done: no need to pass through the event loop
            await asyncio.wait([previous])
        return await self._answer(req, conn)

    async def _answer(self, req: codec.Request, conn: Connection) -> bytes | codec.ResponseFrame | None:
        try:
            body = await self.handler(req, conn)
            if body is None:
                return None
            if codec.has_slices(body):
                return codec.encode_response_pieces(req.api_key, req.api_version, req.correlation_id, body)
            return codec.encode_response(req.api_key, req.api_version, req.correlation_id, body)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Kafka api_key %d v%d from %s failed", req.api_key, req.api_version, conn.client_host)
        body = codec.error_entity(codec.response_class(req.api_key, req.api_version),
                                  ErrorCode.unknown_server_error.value)
        return codec.encode_response(req.api_key, req.api_version, req.correlation_id, body)

    async def _write_answers(self, conn: Connection, answers: asyncio.Queue) -> None:
        while True:
            item = await answers.get()
            if item is None:
                return
            data = await item
            if data is None:
                continue
            if isinstance(data, codec.ResponseFrame):
                await self._send_frame(conn, data)
                continue
            conn.writer.write(data)
            await conn.writer.drain()

    async def _send_frame(self, conn: Connection, frame: codec.ResponseFrame) -> None:
        """Bytes through the stream; file ranges with os.sendfile once the stream's buffer is empty.

        The event loop may be uvloop (uvicorn's), which has no `loop.sendfile`, so a worker thread
        sends each range on a duplicate of the socket's descriptor, waiting for it to be writable
        (at most `connections.max.idle.ms`). The stream is the only other writer and waits meanwhile;
        the duplicates keep the socket and the segment snapshot open until the thread is done, even if
        the connection is closed under it."""
        loop = asyncio.get_running_loop()
        transport = conn.writer.transport
        pending: asyncio.Future | None = None
        try:
            for piece in frame.pieces:
                if isinstance(piece, bytes):
                    conn.writer.write(piece)
                    continue
                transport.set_write_buffer_limits(high=0)  # drain() now waits until the buffer is empty
                await conn.writer.drain()
                transport.set_write_buffer_limits()
                sock = conn.writer.get_extra_info("socket")
                if sock is None:
                    raise ConnectionError("the connection has no socket")
                for s in piece.slices:
                    pending = loop.run_in_executor(None, _sendfile_all, sock.fileno(), s.reader.fileno(), s.position,
                                                   s.size, self.idle_timeout_s)
                    sent = await asyncio.shield(pending)
                    pending = None
                    self.sendfile_bytes += sent
            await conn.writer.drain()
        finally:
            if pending is not None and not pending.done():
                pending.add_done_callback(lambda _: frame.close())  # the thread still sends from the files
            else:
                frame.close()


def _sendfile_all(sock_fd: int, file_fd: int, offset: int, count: int, timeout_s: float) -> int:
    """Send `count` bytes of `file_fd` from `offset` to the (non-blocking) socket; on a worker thread.
    Works on duplicates of both descriptors, so closing the connection meanwhile is safe."""
    sock_fd, file_fd = os.dup(sock_fd), os.dup(file_fd)
    poller = select.poll()
    poller.register(sock_fd, select.POLLOUT)
    sent = 0
    try:
        while sent < count:
            try:
                n = os.sendfile(sock_fd, file_fd, offset + sent, count - sent)
            except BlockingIOError:
                if not poller.poll(timeout_s * 1000):
                    raise ConnectionError(f"the socket took no bytes for {timeout_s} s") from None
                continue
            if n == 0:
                raise ConnectionError(f"sendfile sent {sent} of {count} bytes: the segment snapshot ended")
            sent += n
        return sent
    finally:
        os.close(sock_fd)
        os.close(file_fd)


def _close_frame(item: asyncio.Future) -> None:
    """Close the file ranges of an answer that will not be written (its connection is closing)."""
    if item.done() and not item.cancelled() and item.exception() is None:
        data = item.result()
        if isinstance(data, codec.ResponseFrame):
            data.close()


def _done(data: bytes) -> asyncio.Future:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(data)
    return fut
