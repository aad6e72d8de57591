"""cluster/quorum_sender.py against scripted voters on loopback: each Raft message is one signed POST of
its JSON to the voter's `/internal/raft/messages` over a kept-alive connection; a refusal or an
unreachable voter is counted, not raised; more than `max_inflight_sends_per_peer` in flight are dropped."""

from __future__ import annotations

import asyncio
import json
import socket

from lakelog.ingest_api.cluster.quorum_config import RAFT_MESSAGES_PATH, QuorumConfig
from lakelog.ingest_api.cluster.quorum_sender import PeerSender, QuorumCounters
from lakelog.ingest_api.raft.messages import RequestVote, message_from_dict
from lakelog.ingest_api.security.cluster_auth import now_ms, verify
from tests.unit.test_http_sender import ScriptedServer

SECRET = b"quorum-sender-test-secret-0123456789"


def _answer(status: int) -> bytes:
    return f"HTTP/1.1 {status} X\r\ncontent-length: 0\r\n\r\n".encode()


def _port_of(server: ScriptedServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return port


def _sender(tmp_path, voters: dict[int, tuple[str, int]], **overrides) -> tuple[PeerSender, QuorumCounters]:
    cfg = QuorumConfig(node_id=1, voters={1: ("127.0.0.1", 1), **voters}, secret=SECRET, data_dir=tmp_path,
                       request_timeout_ms=2000, **overrides)
    counters = QuorumCounters()
    return PeerSender(cfg, counters), counters


async def _answered(counters: QuorumCounters, n: int) -> None:
    """Until `n` sends (fire-and-forget tasks) have had their answer or failed, at most 10 s."""
    for _ in range(1000):
        if counters.messages_sent + counters.send_errors >= n:
            return
        await asyncio.sleep(0.01)


def test_messages_are_signed_posts_on_one_kept_alive_connection(tmp_path):
    good = ScriptedServer(lambda r: _answer(202))
    refusing = ScriptedServer(lambda r: _answer(401))
    dead = _closed_port()

    async def run() -> QuorumCounters:
        sender, counters = _sender(tmp_path, {2: ("127.0.0.1", _port_of(good)),
                                              3: ("127.0.0.1", _port_of(refusing)),
                                              4: ("127.0.0.1", dead)})
        try:
            for n, term in enumerate((5, 6, 7)):
                sender.send(2, RequestVote(term, 1, 10, 4))
                await _answered(counters, n + 1)
            sender.send(3, RequestVote(8, 1, 10, 4))
            sender.send(4, RequestVote(8, 1, 10, 4))
            await _answered(counters, 5)
        finally:
            await sender.close()
        return counters

    try:
        counters = asyncio.run(run())
    finally:
        good.close()
        refusing.close()
    assert counters.messages_sent == 3 and counters.send_errors == 2
    assert good.connections == 1  # kept alive
    for i, r in enumerate(good.requests):
        assert (r["method"], r["target"]) == ("POST", RAFT_MESSAGES_PATH)
        assert verify(SECRET, "POST", RAFT_MESSAGES_PATH, r["headers"], r["body"], now_ms(), 30_000) == 1
        assert message_from_dict(json.loads(r["body"])) == RequestVote(5 + i, 1, 10, 4)


def test_a_peer_with_its_sends_in_flight_drops_more(tmp_path):
    silent = socket.socket()  # accepts connections and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)

    async def run() -> QuorumCounters:
        sender, counters = _sender(tmp_path, {2: ("127.0.0.1", silent.getsockname()[1])},
                                   max_inflight_sends_per_peer=2)
        try:
            for term in range(5):
                sender.send(2, RequestVote(term + 1, 1, 10, 4))
            await asyncio.sleep(0.1)
        finally:
            await sender.close()
        return counters

    try:
        counters = asyncio.run(run())
    finally:
        silent.close()
    assert counters.sends_dropped == 3 and counters.messages_sent == 0
