"""A minimal Kafka wire client for tests: send one kio request entity, read its response entity."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader

from lakelog.ingest_api.kafka import codec


class WireClient:
    """One blocking TCP connection to a Kafka listener."""

    def __init__(self, host: str, port: int, timeout_s: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "WireClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        head = self._exactly(4)
        return self._exactly(struct.unpack(">i", head)[0])

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return buf

    def request(self, body: Any, *, response_version: int | None = None) -> tuple[int, Any]:
        """Send `body`; returns (correlation id, response entity) read as `response_version`."""
        self.correlation_id += 1
        self.send_raw(codec.encode_request(body, self.correlation_id))
        frame = self.read_frame()
        api_key = int(body.__api_key__)
        version = int(body.__version__) if response_version is None else response_version
        cls = load_response_schema(api_key, version)
        header, n = entity_reader(cls.__header_schema__)(frame, 0)
        entity, _ = entity_reader(cls)(frame, n)
        return header.correlation_id, entity
