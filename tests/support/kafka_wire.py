"""A minimal Kafka wire client for tests: send one kio request entity, read its response entity."""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.serial import entity_reader

from lakelog.ingest_api.kafka import codec
from tests.support.faults import wait_for
from tests.support.nodes import Cluster


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


def transaction_coordinator(cluster: Cluster, transactional_id: str, timeout_s: float) -> int:
    """The node that coordinates `transactional_id`, as the first live node that knows it answers
    FindCoordinator (key type 1), asked again until `timeout_s`."""
    def ask() -> int | None:
        for n in cluster.live():
            with WireClient("127.0.0.1", n.kafka_port) as w:
                _, res = w.request(FindCoordinatorRequest(key_type=1, coordinator_keys=(transactional_id,)))
            (c,) = res.coordinators
            if c.error_code == ErrorCode.none:
                return int(c.node_id)
        return None

    return int(wait_for(ask, timeout_s, f"the coordinator of {transactional_id}"))
