"""The node-to-node fast path: the internal endpoints an idle cluster calls many times a second are
dispatched by their path before the application's router looks at the request.

Why. An idle 3-node cluster still exchanges tens of requests a second per node: Raft messages (the
leader's heartbeats, every `controller.quorum.election.timeout.ms` / 10, and their answers), each
replica fetch session's long-poll (every `replica.fetch.wait.max.ms`) and the broker heartbeats
(`POST /internal/controller/heartbeat`). The application's router tries them against every public
route in turn (the Confluent v2 and v3 APIs, the Schema Registry, the console: hundreds of
patterns) and FastAPI solves each route's parameters; that matching cost more CPU than the work
of the request. Here a request whose method and path match one of `HOT_ROUTES` (a handful of
patterns, tried only for paths under `/internal/`) goes straight to its endpoint.

Not the Raft messages (`POST /internal/raft/messages`): served here, a paused node that wakes takes
in the Raft messages queued in its socket sooner than through the router, and
tests/faults/test_replication_faults.py::test_paused_leader_is_fenced_and_its_late_writes_never_show
then sees the deposed leader acknowledge an acks=all produce that arrived while it was paused (a
race of the wake-up path that this ordering exposes; until it is fixed they stay on the router).

What stays the same. The endpoint is the router's own function (routers/replication.py), called with the request and its path parameters, so the cluster signature
is verified exactly as before (by the endpoint, over the body it reads) and every answer is the
router's. `build_table` refuses an endpoint that takes anything else (a dependency or a query
parameter the fast path would skip). An exception the endpoint raises is answered by the
application's own exception handler for its class (looked up along the class's MRO, as Starlette's
exception middleware does); any other exception propagates to `app.ObserveMiddleware` (500), as
from the router. `scope["route"]` is the router's route, so the request metrics keep their labels.
The fast path is the innermost middleware: the outer ones (metrics, body limit, security — which
lets `/internal/` through to the endpoint's own signature check — and the forwarded catch-up) see
every request as before. Any other request, and a hot path with another method, goes on to the
application (its 404 / 405).

Concurrency: per request, on the event loop; the table is built once and only read.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from lakelog.infra.errors import invariant
from lakelog.ingest_api.http.routers import replication

PREFIX = "/internal/"

#: The endpoints served here: each one's parameters are the request and its path parameters.
HOT_ROUTES: tuple[Callable[..., Awaitable[Response]], ...] = (
    replication.replica_fetch,
    replication.epoch_end_offsets,
    replication.controller_request,
)


@dataclass(frozen=True)
class FastRoute:
    """One endpoint of the fast path: its route (pattern, methods, metrics label) and function."""

    route: APIRoute
    pattern: re.Pattern
    methods: frozenset[str]
    endpoint: Callable[..., Awaitable[Response]]


def build_table(routes: list[Any], endpoints: tuple[Callable[..., Awaitable[Response]], ...] = HOT_ROUTES
                ) -> tuple[FastRoute, ...]:
    """The fast routes of `endpoints`, found among `routes` (a router's `APIRoute`s); refuses an
    endpoint that is not there or takes a parameter other than `request` and its path parameters."""
    by_endpoint = {r.endpoint: r for r in routes if isinstance(r, APIRoute)}
    table = []
    for endpoint in endpoints:
        route = by_endpoint.get(endpoint)
        if route is None:
            raise ValueError(f"{endpoint.__qualname__} is not a route of the given routers")
        path_params = set(route.param_convertors)
        extra = set(inspect.signature(endpoint).parameters) - path_params - {"request"}
        if extra:
            raise ValueError(f"{route.path}: the fast path passes only the request and the path parameters, "
                             f"not {sorted(extra)}")
        table.append(FastRoute(route, route.path_regex, frozenset(route.methods or ()), endpoint))
    return tuple(table)


def hot_routes_table() -> tuple[FastRoute, ...]:
    """`HOT_ROUTES` in the routers that define them."""
    return build_table(list(replication.router.routes))


class InternalFastPath:
    """ASGI middleware (innermost): serves `table`'s routes directly (module doc)."""

    def __init__(self, app, table: tuple[FastRoute, ...], exception_handlers: Mapping[Any, Callable]) -> None:
        self.app = app
        self.table = table
        self.exception_handlers = exception_handlers  # the application's own (a live mapping)
        #: Requests this path served (an operation count: tests).
        self.served = 0

    def match(self, method: str, path: str) -> tuple[FastRoute, dict[str, str]] | None:
        if not path.startswith(PREFIX):
            return None
        for fast in self.table:
            if method in fast.methods:
                m = fast.pattern.match(path)
                if m is not None:
                    return fast, m.groupdict()
        return None

    async def __call__(self, scope, receive, send) -> None:
        found = self.match(scope.get("method", ""), scope.get("path", "")) if scope["type"] == "http" else None
        if found is None:
            await self.app(scope, receive, send)
            return
        fast, params = found
        self.served += 1
        scope["route"] = fast.route
        scope["endpoint"] = fast.endpoint
        scope["path_params"] = params
        request = Request(scope, receive)
        try:
            response = await fast.endpoint(request=request, **params)
        except Exception as exc:
            handler = self._handler(exc)
            if handler is None:
                raise
            response = handler(request, exc)
            if inspect.isawaitable(response):
                response = await response
        invariant(isinstance(response, Response), f"{fast.route.path} answered {type(response).__name__}, "
                                                  "not a Response")
        await response(scope, receive, send)

    def _handler(self, exc: Exception) -> Callable | None:
        for cls in type(exc).__mro__:
            handler = self.exception_handlers.get(cls)
            if handler is not None:
                return handler
        return None
