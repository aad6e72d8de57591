"""The security middleware: authenticate, authorize, throttle — before any router runs.

A plain ASGI middleware, like the metrics one, so the hot binary produce path pays only for what
is enabled: with authentication, the authorizer and quotas all off (the default) it calls straight
through, apart from bounding how long a request body may take to arrive (slow-client protection).

Per request, when on:
  1. `/internal/*` passes (those endpoints verify the cluster signature themselves); `/healthz` and
     `/readyz` pass (`access.PUBLIC`).
  2. Principal. A request carrying the cluster signature headers (a node forwarding a client's
     request, or an operator holding `cluster.secret`) is verified over its buffered body; it acts
     as the principal the forwarding node names in `X-Lakelog-Principal` — bound to that request's
     signature by `X-Lakelog-Principal-Signature` — or else as the super user `User:__cluster`.
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
import base64
import binascii
import hashlib
import hmac
import json
import logging
import math
import time
from typing import Any

from lakelog.ingest_api.security import access
from lakelog.ingest_api.security.acl import Authorizer, Operation, ResourceType
from lakelog.ingest_api.security.credentials import CredentialCache, parse_api_key, verify_password
from lakelog.ingest_api.security.errors import (
    AuthenticationFailedError,
    AuthorizationFailedError,
    HeadersTooLargeError,
    ThrottledError,
)
from lakelog.ingest_api.security.quotas import FETCH, PRODUCE, REQUEST, QuotaLimits, QuotaManager, parse_overrides

audit_log = logging.getLogger("lakelog.audit")

CLUSTER_PRINCIPAL = "User:__cluster"
ANONYMOUS = "User:ANONYMOUS"
PRINCIPAL_HEADER = "x-lakelog-principal"
PRINCIPAL_SIGNATURE_HEADER = "x-lakelog-principal-signature"
_SIGNATURE_HEADER = b"x-lakelog-signature"
CHALLENGE = 'Basic realm="lakelog", charset="UTF-8", Bearer realm="lakelog"'
MAX_AUTHORIZATION_CHARS = 4096


def principal_signature(secret: bytes, request_signature: str, principal: str) -> str:
    """Binds a forwarded request's principal to that request's cluster signature."""
    return hmac.new(secret, f"principal\n{request_signature}\n{principal}".encode("utf-8"),
                    hashlib.sha256).hexdigest()


class AuditLog:
    """Audit lines, at most `per_second` refusals a second (a flood is summarised, not written out)."""

    def __init__(self, per_second: int) -> None:
        self.per_second = per_second
        self._second = 0
        self._count = 0
        self.suppressed = 0

    def refusal(self, event: str, **fields: Any) -> None:
        now = int(time.monotonic())
        if now != self._second:
            if self.suppressed:
                audit_log.warning("audit %s", json.dumps({"event": "suppressed", "count": self.suppressed}))
                self.suppressed = 0
            self._second, self._count = now, 0
        self._count += 1
        if self._count > self.per_second:
            self.suppressed += 1
            return
        audit_log.warning("audit %s", json.dumps({"event": event, **fields}, sort_keys=True, default=str))

    @staticmethod
    def change(event: str, **fields: Any) -> None:
        audit_log.info("audit %s", json.dumps({"event": event, **fields}, sort_keys=True))


class SecurityContext:
    """The node's security settings and caches, on `app.state.security`."""

    def __init__(self, node: Any) -> None:
        cfg = node.config
        self.node = node
        self.authentication = cfg.authentication_enabled
        mechanisms = {m.strip().lower() for m in cfg.authentication_mechanisms.split(",") if m.strip()}
        self.basic, self.apikey = "basic" in mechanisms, "apikey" in mechanisms
        self.authorizer_enabled = cfg.authorizer_enabled
        self.super_users = frozenset(p.strip() for p in cfg.super_users.split(";") if p.strip()) | {CLUSTER_PRINCIPAL}
        self.allow_if_none = cfg.allow_everyone_if_no_acl_found
        self.scram_iterations = cfg.scram_iterations
        self.secret = cfg.cluster_secret.encode()
        self.quotas = QuotaManager(QuotaLimits(cfg.quota_producer_byte_rate, cfg.quota_consumer_byte_rate,
                                               cfg.quota_request_rate),
                                   parse_overrides(cfg.quota_overrides), window_s=cfg.quota_window_ms / 1000)
        self.body_timeout_s = cfg.request_body_timeout_ms / 1000
        self.max_body_bytes = cfg.max_request_bytes
        self.max_header_bytes = cfg.max_header_bytes
        self.audit = AuditLog(cfg.audit_log_max_per_second)
        self.cache = CredentialCache()
        self._authorizer: Authorizer | None = None
        self._authorizer_generation = -1
        self._quota_generation = -1
        self.enabled = self.authentication or self.authorizer_enabled or self.quotas.enabled

    def refresh(self) -> None:
        """Pick up quota overrides changed in the cluster metadata (a generation compare when unchanged)."""
        state = self.state
        if state.generation != self._quota_generation:
            self._quota_generation = state.generation
            self.quotas.set_dynamic(dict(state.quotas))
            self.enabled = self.authentication or self.authorizer_enabled or self.quotas.enabled

    @property
    def state(self):
        return self.node.image.security

    def authorizer(self) -> Authorizer:
        state = self.state
        if self._authorizer is None or state.generation != self._authorizer_generation:
            self._authorizer = Authorizer(state.acls, self.super_users, self.allow_if_none)
            self._authorizer_generation = state.generation
        return self._authorizer

    def authenticate(self, header: str | None) -> str | None:
        """The principal of an Authorization header, or None when it does not authenticate."""
        if not header or len(header) > MAX_AUTHORIZATION_CHARS:
            return None
        state = self.state
        hit = self.cache.get(header, state.generation)
        if hit is not None:
            return hit
        scheme, _, value = header.partition(" ")
        scheme, value = scheme.lower(), value.strip()
        principal = None
        if scheme == "basic" and self.basic:
            try:
                user, sep, password = base64.b64decode(value, validate=True).decode("utf-8").partition(":")
            except (binascii.Error, ValueError):
                return None
            cred = state.users.get(user) if sep else None
            if cred is not None and verify_password(cred, password):
                principal = f"User:{user}"
        elif scheme == "bearer" and self.apikey:
            parsed = parse_api_key(value)
            key = state.api_keys.get(parsed[0]) if parsed else None
            if key is not None and hmac.compare_digest(key.secret_sha256, parsed[1]):
                principal = key.principal
        if principal is not None:
            self.cache.put(header, state.generation, principal)
        return principal

    def check(self, principal: str, operation: Operation, rtype: ResourceType, name: str, method: str,
              path: str, client: str = "?") -> None:
        if self.authorizer_enabled and not self.authorizer().authorize(principal, operation, rtype, name):
            self.audit.refusal("authorization_failed", principal=principal, operation=operation.value,
                               resource_type=rtype.value, resource_name=name, method=method, path=path, client=client)
            raise AuthorizationFailedError(
                f"{principal} is not authorized to {operation.value} {rtype.value} {name!r}")


def authorize(request: Any, operation: Operation, rtype: ResourceType, name: str) -> None:
    """For routers: refuse (403) unless the request's principal may `operation` the resource."""
    ctx: SecurityContext | None = getattr(request.app.state, "security", None)
    if ctx is None or not ctx.authorizer_enabled:
        return
    principal = getattr(request.state, "principal", ANONYMOUS)
    ctx.check(principal, operation, rtype, name, request.method, request.url.path, _client(request.scope))


def allowed(request: Any, operation: Operation, rtype: ResourceType, name: str) -> bool:
    ctx: SecurityContext | None = getattr(request.app.state, "security", None)
    if ctx is None or not ctx.authorizer_enabled:
        return True
    return ctx.authorizer().authorize(getattr(request.state, "principal", ANONYMOUS), operation, rtype, name)


def request_principal(request: Any) -> str | None:
    """The principal to pass along when this request is forwarded (None when security is off)."""
    ctx: SecurityContext | None = getattr(request.app.state, "security", None)
    if ctx is None or not ctx.enabled:
        return None
    return getattr(request.state, "principal", None)


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
            principal, receive = await self._cluster_principal(scope, receive)
            if principal is None:
                ctx.audit.refusal("authentication_failed", reason="bad cluster signature", method=method,
                                  path=path, client=_client(scope))
                await self._refuse(scope, receive, send,
                                   AuthenticationFailedError("the request's cluster signature does not verify"))
                return
        elif ctx.authentication:
            authz = next((v for k, v in headers if k == b"authorization"), None)
            principal = ctx.authenticate(authz.decode("latin-1") if authz is not None else None)
            if principal is None:
                ctx.audit.refusal("authentication_failed", reason="missing" if authz is None else "invalid",
                                  method=method, path=path, client=_client(scope))
                await self._refuse(scope, receive, send, AuthenticationFailedError(
                    "authentication required" if authz is None else "authentication failed"),
                    {"WWW-Authenticate": CHALLENGE})
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
        """Verify a cluster-signed request over its whole body; (principal or None, a receive replaying it)."""
        from lakelog.ingest_api.cluster.auth import AuthenticationError, InternalAuthenticator

        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.ctx.max_body_bytes + 1024:
                return None, receive
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
            return None, replay
        named = headers.get(PRINCIPAL_HEADER)
        if named is None:
            return CLUSTER_PRINCIPAL, replay
        expected = principal_signature(self.ctx.secret, headers.get("x-lakelog-signature", ""), named)
        if not hmac.compare_digest(expected, headers.get(PRINCIPAL_SIGNATURE_HEADER, "")):
            return None, replay
        return named, replay


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
