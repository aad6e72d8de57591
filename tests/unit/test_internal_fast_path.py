"""http/internal_fast_path.py: the hot node-to-node endpoints answer through the fast path exactly as
through the router (and the Raft messages, which stay on the router, as before) — the cluster signature checked the same way, the same statuses and bodies for
every refusal, the same route label for the metrics — and everything else still goes to the router.

Two applications with the same routers and error handler, one with the fast path in front, get the
same requests (ASGI, in process); the fast path's count of requests served tells which answered.
"""

from __future__ import annotations

import asyncio
import json
import re
from types import SimpleNamespace

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from lakelog.infra.errors import LakelogError
from lakelog.ingest_api.cluster.errors import NotAVoterError
from lakelog.ingest_api.error_table import http_error
from lakelog.ingest_api.http.internal_fast_path import InternalFastPath, build_table, hot_routes_table
from lakelog.ingest_api.http.routers import internal, replication
from lakelog.ingest_api.raft.messages import MessageFormatError
from lakelog.ingest_api.security.cluster_auth import now_ms, sign

SECRET = b"fast-path-test-secret-0123456789"
RAFT = "/internal/raft/messages"


class FakeQuorum:
    """What the Raft endpoint uses of a `QuorumHost`: its config and `receive`."""

    def __init__(self) -> None:
        self.config = SimpleNamespace(secret=SECRET, max_clock_skew_ms=30_000, max_message_bytes=1000)
        self.received: list[tuple[int, bytes, int]] = []

    def receive(self, sender: int, body: bytes, sent_at_ms: int | None = None) -> None:
        if body == b"not json":
            raise MessageFormatError("Raft message is not JSON")
        if sender == 7:
            raise NotAVoterError("node 7 is not a peer voter")
        self.received.append((sender, body, sent_at_ms))


class FakeReplicas:
    def __init__(self) -> None:
        self.fetches: list[dict] = []

    async def replica_fetch(self, doc: dict) -> list:
        if doc.get("boom"):
            raise RuntimeError("unexpected failure")
        self.fetches.append(doc)
        return []

    def epoch_end_offsets(self, doc: dict) -> list:
        return [{"topic": "t", "partition": 0, "end_offset": 5}]


class FakeControllerHost:
    async def run_op(self, op: str, doc: dict) -> dict:
        if op == "refuse":
            raise NotAVoterError("refused")
        return {"op": op, "args": doc}


def make_app(fast: bool, quorum: FakeQuorum | None) -> tuple[FastAPI, list[str]]:
    """An app with the internal routers and the node app's error mapping; `fast`: the fast path
    innermost. Also returns the route label each request ended with (what the metrics use)."""
    app = FastAPI()
    app.state.node = SimpleNamespace(quorum=quorum, config=SimpleNamespace(cluster_secret=SECRET.decode()),
                                     replicas=FakeReplicas(), controller_host=FakeControllerHost())

    @app.exception_handler(LakelogError)
    async def _error(request: Request, exc: LakelogError):
        status, code, message = http_error(exc)
        return JSONResponse({"error_code": code, "message": message}, status_code=status)

    app.include_router(internal.router)
    app.include_router(replication.router)
    labels: list[str] = []
    if fast:
        app.add_middleware(InternalFastPath, table=hot_routes_table(), exception_handlers=app.exception_handlers)

    class Label:
        def __init__(self, inner) -> None:
            self.app = inner

        async def __call__(self, scope, receive, send) -> None:
            try:
                await self.app(scope, receive, send)
            finally:
                labels.append(getattr(scope.get("route"), "path", "unmatched"))

    app.add_middleware(Label)
    return app, labels


def fast_path_of(app: FastAPI) -> InternalFastPath:
    layer = app.middleware_stack
    while not isinstance(layer, InternalFastPath):
        layer = layer.app
    return layer


def signed(method: str, target: str, body: bytes, node_id: int = 2, secret: bytes = SECRET,
           stamp: int | None = None) -> dict[str, str]:
    return sign(secret, method, target, body, node_id, now_ms() if stamp is None else stamp)


REQUESTS = [  # (method, target, body, headers)
    ("POST", RAFT, b'{"m":1}', lambda b: signed("POST", RAFT, b)),  # accepted: 202
    ("POST", RAFT, b'{"m":1}', lambda b: {}),  # unsigned: 401
    ("POST", RAFT, b'{"m":1}', lambda b: signed("POST", RAFT, b, secret=b"another-secret-0123456789abc")),
    ("POST", RAFT, b'{"m":1}', lambda b: signed("POST", RAFT, b, stamp=now_ms() - 120_000)),  # stale: 401
    ("POST", RAFT, b'{"m":1}', lambda b: signed("POST", RAFT, b + b" ")),  # body altered after signing
    ("POST", RAFT, b" " * 1001, lambda b: signed("POST", RAFT, b)),  # over max_message_bytes: 413
    ("POST", RAFT, b"not json", lambda b: signed("POST", RAFT, b)),  # the host refuses it: 422
    ("POST", RAFT, b'{"m":1}', lambda b: signed("POST", RAFT, b, node_id=7)),  # not a voter: 403
    ("GET", RAFT, b"", lambda b: signed("GET", RAFT, b)),  # not a fast route: the router's 405
    ("POST", "/internal/replication/fetch", b'{"replica_id":2}',
     lambda b: signed("POST", "/internal/replication/fetch", b)),
    ("POST", "/internal/replication/fetch", b'{"replica_id":3}',  # signed by 2 in 3's name: 422
     lambda b: signed("POST", "/internal/replication/fetch", b)),
    ("POST", "/internal/replication/fetch", b"[1]", lambda b: signed("POST", "/internal/replication/fetch", b)),
    ("POST", "/internal/replication/epoch_end_offsets", b"{}",
     lambda b: signed("POST", "/internal/replication/epoch_end_offsets", b)),
    ("POST", "/internal/controller/heartbeat", b'{"node_id":2}',
     lambda b: signed("POST", "/internal/controller/heartbeat", b)),
    ("POST", "/internal/controller/refuse", b"{}", lambda b: signed("POST", "/internal/controller/refuse", b)),
    ("POST", "/internal/controller/heartbeat", b"{}", lambda b: {}),  # unsigned: 401
    ("POST", "/internal/controller/a/b", b"{}", lambda b: signed("POST", "/internal/controller/a/b", b)),  # 404
    ("POST", "/internal/nothing", b"{}", lambda b: signed("POST", "/internal/nothing", b)),  # 404
]


async def answers(fast: bool, quorum: FakeQuorum | None) -> tuple[list[tuple[int, dict | str]], list[str], int]:
    app, labels = make_app(fast, quorum)
    out = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node") as client:
        for method, target, body, headers in REQUESTS:
            r = await client.request(method, target, content=body, headers=headers(body))
            try:  # the stale signature's message names the clock difference: the same to a millisecond
                doc = r.json()
                if isinstance(doc, dict) and "message" in doc:
                    doc["message"] = re.sub(r"\d+ ms away", "N ms away", doc["message"])
                out.append((r.status_code, doc))
            except ValueError:
                out.append((r.status_code, r.text))
    return out, labels, fast_path_of(app).served if fast else 0


def test_hot_endpoints_answer_through_the_fast_path_as_through_the_router():
    slow_quorum, fast_quorum = FakeQuorum(), FakeQuorum()
    slow, slow_labels, _ = asyncio.run(answers(False, slow_quorum))
    fast, fast_labels, served = asyncio.run(answers(True, fast_quorum))
    assert fast == slow
    assert fast_labels == slow_labels
    assert [status for status, _ in fast] == [202, 401, 401, 401, 401, 413, 422, 403, 405,
                                              200, 422, 422, 200, 200, 403, 401, 404, 404]
    assert fast[1][1]["error_code"] == 40101
    # The replication and controller requests went the fast way (not the Raft messages, nor the
    # two-segment op and the unknown path, which are no fast route).
    assert served == 7
    # The accepted Raft message reached the host once, with the signer and the signed send time.
    assert [(s, b) for s, b, _ in fast_quorum.received] == [(2, b'{"m":1}')]
    assert fast_quorum.received[0][2] is not None
    assert fast_labels[0] == RAFT and fast_labels[13] == "/internal/controller/{op}"


def test_a_node_still_starting_answers_503_on_both_paths():
    slow, _, _ = asyncio.run(answers(False, None))
    fast, _, served = asyncio.run(answers(True, None))
    assert fast == slow
    assert fast[0][0] == 503 and served == 7


def test_an_unexpected_error_propagates_as_from_the_router():
    async def run(fast: bool) -> None:
        app, _ = make_app(fast, FakeQuorum())
        body = b'{"replica_id":2,"boom":true}'
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://node") as client:
            await client.post("/internal/replication/fetch", content=body,
                              headers=signed("POST", "/internal/replication/fetch", body))

    for fast in (False, True):
        with pytest.raises(RuntimeError, match="unexpected failure"):
            asyncio.run(run(fast))


def test_an_endpoint_with_a_dependency_is_refused_from_the_fast_path():
    router = APIRouter(prefix="/internal")

    def dependency() -> int:
        return 1

    @router.post("/with/{name}")
    async def with_dependency(name: str, request: Request, value: int = Depends(dependency)):
        return JSONResponse({})

    @router.post("/plain/{name}")
    async def plain(name: str, request: Request):
        return JSONResponse({"name": name})

    with pytest.raises(ValueError, match="value"):
        build_table(router.routes, (with_dependency,))
    with pytest.raises(ValueError, match="not a route"):
        build_table(router.routes, (json.dumps,))
    (route,) = build_table(router.routes, (plain,))
    assert route.route.path == "/internal/plain/{name}" and route.methods == frozenset({"POST"})
