"""The security middleware: authenticate, authorize, throttle — before any router runs.

A plain ASGI middleware, like the metrics one, so the hot binary produce path pays only for what
is enabled: with authentication, the authorizer and quotas all off (the default) it calls straight
through, apart from bounding how long a request body may take to arrive (slow-client protection).

Per request, when on:
  1. `/internal/*` passes (those endpoints verify the cluster signature themselves); `/healthz` and
     `/readyz` pass (`access.PUBLIC`).
  2. Principal. A request carrying the cluster signature headers (a node forwarding a client's
     request, or an operator holding `cluster.secret`) is verified over its buffered body; it acts
     as the principal named in `X-Lakelog-Principal`, which the signature covers (an operator names
     the super user `User:__cluster`). A signed request that names no principal is refused (401):
     stripping the principal from a captured forwarded request gains nothing.
     Otherwise, with authentication on: `Authorization: Basic` (user and password, checked against
     the SCRAM-SHA-256 credential in the cluster metadata) or `Authorization: Bearer <API key>`;
     none or a bad one → 401 with `WWW-Authenticate`. Successful checks are cached per header value
     until users or keys change. With authentication off: `User:ANONYMOUS`.
  3. Authorization (authorizer on): the route's requirement (`access.requirement`) against the ACLs
     → 403 (`AuthorizationFailedError`) when refused. Decisions are memoised per (principal, operation, resource).
  4. Quotas: the request rate, and the byte rates of produce (the body's length, before it is read)
     and fetch (the response's length, charged once sent) → 429 with `Retry-After` while in debt.
  5. `scope["state"]["principal"]` carries the principal to the routers (`authorize` below).
Every refusal writes one audit line (logger `lakelog.audit`, rate-bounded); so does every user,
API key and ACL change (the routers). Audit lines never carry a password, key or secret.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from lakelog.ingest_api.http import access
from lakelog.ingest_api.security.acl import Operation, ResourceType
from lakelog.ingest_api.security.context import ANONYMOUS, CLUSTER_PRINCIPAL, SecurityContext
from lakelog.ingest_api.security.errors import (
    AuthenticationFailedError,
    AuthorizationFailedError,
    HeadersTooLargeError,
    ThrottledError,
)
from lakelog.ingest_api.security.quotas import FETCH, PRODUCE, REQUEST, QuotaManager

PRINCIPAL_HEADER = "x-lakelog-principal"
_SIGNATURE_HEADER = b"x-lakelog-signature"
CHALLENGE = 'Basic realm="lakelog", charset="UTF-8", Bearer realm="lakelog"'


def authorize(request: Any, operation: Operation, rtype: ResourceType, name: str) -> None:
    """For routers: refuse (403) unless the request's principal may `operation` the resource."""
    ctx: SecurityContext | None = getattr(request.app.state.node, "security", None)
    if ctx is None or not ctx.authorizer_enabled:
        return
    principal = getattr(request.state, "principal", ANONYMOUS)
    ctx.check(principal, operation, rtype, name, request.method, request.url.path, _client(request.scope))


def allowed(request: Any, operation: Operation, rtype: ResourceType, name: str) -> bool:
    ctx: SecurityContext | None = getattr(request.app.state.node, "security", None)
    if ctx is None or not ctx.authorizer_enabled:
        return True
    return ctx.authorizer().authorize(getattr(request.state, "principal", ANONYMOUS), operation, rtype, name)


def request_principal(request: Any) -> str:
    """The request's principal, passed along (inside the signature) when it is forwarded.

    `User:ANONYMOUS` when security is off: a forwarded request always names one, so a node whose
    security is switched on later (a dynamic quota) never meets a signed client request without it.
    """
    return getattr(request.state, "principal", ANONYMOUS)


class SecurityMiddleware:
    def __init__(self, app, context: SecurityContext, error_response) -> None:
        self.app = app
        self.ctx = context
        self.error_response = error_response

    async def _refuse(self, scope, receive, send, exc: Exception, headers: dict[str, str] | None = None) -> None:
        resp = self.error_response(exc)  # status and error_code from ingest_api.error_table
        for k, v in (headers or {}).items():
            resp.headers[k] = v
        await resp(scope, receive, send)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        ctx = self.ctx
        method, path = scope["method"], scope["path"]
        if sum(len(k) + len(v) for k, v in scope["headers"]) > ctx.max_header_bytes:
            await self._refuse(scope, receive, send, HeadersTooLargeError(
                f"request headers exceed max.header.bytes={ctx.max_header_bytes}"))
            return
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            receive = _deadline_receive(receive, ctx.body_timeout_s)
        ctx.refresh()
        if not ctx.enabled or path.startswith("/internal/") or (method, path) in access.PUBLIC:
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        principal: str | None = None
        if any(k == _SIGNATURE_HEADER for k, _ in headers):
            principal, receive, why = await self._cluster_principal(scope, receive)
            if principal is None:
                ctx.audit.refusal("authentication_failed", reason=why, method=method,
                                  path=path, client=_client(scope))
                await self._refuse(scope, receive, send, AuthenticationFailedError(
                    "the request's cluster signature does not verify" if why == "bad cluster signature"
                    else "a cluster-signed request must name its principal (X-Lakelog-Principal)"))
                return
        elif ctx.authentication:
            authz = next((v for k, v in headers if k == b"authorization"), None)
            principal = ctx.authenticate(authz.decode("latin-1") if authz is not None else None)
            if principal is None:
                ctx.audit.refusal("authentication_failed", reason="missing" if authz is None else "invalid",
                                  method=method, path=path, client=_client(scope))
                # A script (the web console) says so with X-Requested-With; the challenge would make the
                # browser open its own login dialog over the page's, so it is left out for it.
                scripted = any(k == b"x-requested-with" for k, _ in headers)
                await self._refuse(scope, receive, send, AuthenticationFailedError(
                    "authentication required" if authz is None else "authentication failed"),
                    None if scripted else {"WWW-Authenticate": CHALLENGE})
                return
        else:
            principal = ANONYMOUS
        req = access.requirement(method, path)
        if ctx.authorizer_enabled:
            if req is None:
                if principal not in ctx.super_users:
                    ctx.audit.refusal("authorization_failed", principal=principal, method=method, path=path,
                                      client=_client(scope), reason="no access rule for this path")
                    await self._refuse(scope, receive, send, AuthorizationFailedError(f"{principal} is not authorized"))
                    return
            elif req.operation is not None and req.resource_type is not None:
                try:
                    ctx.check(principal, req.operation, req.resource_type, req.resource_name, method, path,
                              _client(scope))
                except AuthorizationFailedError as e:
                    await self._refuse(scope, receive, send, e)
                    return
        scope.setdefault("state", {})["principal"] = principal
        quotas = ctx.quotas
        if not quotas.enabled or principal == CLUSTER_PRINCIPAL:
            await self.app(scope, receive, send)
            return
        kind = req.kind if req is not None else ""
        keys = (REQUEST, PRODUCE) if kind == "produce" else (REQUEST, FETCH) if kind == "fetch" else (REQUEST,)
        now = time.monotonic()
        delay = quotas.admit(principal, keys, now)
        if delay > 0:
            ctx.audit.refusal("throttled", principal=principal, method=method, path=path,
                              client=_client(scope), retry_after_s=round(delay, 3))
            await self._refuse(scope, receive, send,
                               ThrottledError(f"{principal} is over its quota; retry in {delay:.3f}s", delay),
                               {"Retry-After": str(max(1, math.ceil(delay)))})
            return
        if kind == "produce":
            length = next((v for k, v in headers if k == b"content-length"), b"")
            if length.isdigit():
                quotas.record(principal, PRODUCE, int(length), now)
            else:  # chunked: charge the bytes as they arrive
                receive = _charging_receive(receive, quotas, principal)
        if kind != "fetch":
            await self.app(scope, receive, send)
            return
        sent = 0

        async def counting_send(message) -> None:
            nonlocal sent
            if message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        finally:
            quotas.record(principal, FETCH, sent, time.monotonic())

    async def _cluster_principal(self, scope, receive):
        """Verify a cluster-signed request over its whole body: (principal or None, a receive replaying it,
        why it was refused)."""
        from lakelog.ingest_api.security.cluster_auth import AuthenticationError, InternalAuthenticator, signed_principal

        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.ctx.max_body_bytes + 1024:
                return None, receive, "bad cluster signature"
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            InternalAuthenticator(self.ctx.secret).verify_scope(scope, headers, body)
        except AuthenticationError:
            return None, replay, "bad cluster signature"
        # The signature covers the principal header: it is what the signer named, or there was none.
        named = signed_principal(headers)
        if named is None:
            return None, replay, "no principal"
        return named, replay, ""


def _charging_receive(receive, quotas: QuotaManager, principal: str):
    async def charged():
        message = await receive()
        if message["type"] == "http.request":
            quotas.record(principal, PRODUCE, len(message.get("body", b"")), time.monotonic())
        return message

    return charged


def _client(scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


def _deadline_receive(receive, timeout_s: float):
    """`receive` that gives the whole body at most `timeout_s` to arrive (then raises)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    done = False

    async def bounded():
        nonlocal done
        if done:
            return await receive()
        try:
            async with asyncio.timeout_at(deadline):  # no task per receive, unlike wait_for
                message = await receive()
        except TimeoutError:
            from lakelog.ingest_api.security.errors import RequestBodyTimeout
            raise RequestBodyTimeout(f"the request body did not arrive within {timeout_s:g}s") from None
        if message["type"] != "http.request" or not message.get("more_body"):
            done = True
        return message

    return bounded
