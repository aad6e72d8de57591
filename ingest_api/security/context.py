"""The node's client security as a service: authentication (Basic against the SCRAM credentials of the
cluster metadata, API keys), the authorizer over the ACLs, quotas and the audit lines.

The core and the front doors call it; the HTTP door applies it per request in
`ingest_api/http/security_middleware.py`. `CLUSTER_PRINCIPAL` is the super user a signed node-to-node
call acts as; `ANONYMOUS` the principal of a request when authentication is off.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
from typing import Any

from lakelog.ingest_api.security.acl import Authorizer, Operation, ResourceType
from lakelog.ingest_api.security.audit import AuditLog
from lakelog.ingest_api.security.credentials import (HASHES, SCRAM_SHA_256, CredentialCache, ScramCredential,
                                                       make_credential, parse_api_key, verify_password)
from lakelog.ingest_api.security.errors import AuthorizationFailedError, TransactionalIdAuthorizationFailedError
from lakelog.ingest_api.security.quotas import QuotaLimits, QuotaManager, parse_overrides

CLUSTER_PRINCIPAL = "User:__cluster"
ANONYMOUS = "User:ANONYMOUS"
MAX_AUTHORIZATION_CHARS = 4096


class SecurityContext:
    """The node's security settings and caches (`node.security`)."""

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
        #: Checked against when a Basic user does not exist, so that a wrong password costs the same
        #: PBKDF2 work for an unknown user as for a known one (no user-name oracle by timing).
        decoy_password = secrets.token_urlsafe(24)
        self._decoys = {m: make_credential(decoy_password, self.scram_iterations, mechanism=m) for m in HASHES}
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
            if sep:
                principal = self.verify_user_password(user, password)
        elif scheme == "bearer" and self.apikey:
            parsed = parse_api_key(value)
            key = state.api_keys.get(parsed[0]) if parsed else None
            if key is not None and hmac.compare_digest(key.secret_sha256, parsed[1]):
                principal = key.principal
        if principal is not None:
            self.cache.put(header, state.generation, principal)
        return principal

    def verify_user_password(self, user: str, password: str) -> str | None:
        """The principal of a stored user whose password this is, else None (PBKDF2: call off the loop
        when it matters). An unknown user costs the same work as a wrong password."""
        creds = self.state.users.get(user, {})
        # The SCRAM-SHA-256 credential when the user has one (every password set over HTTP makes one).
        cred = creds.get(SCRAM_SHA_256) or next(iter(creds.values()), None)
        if verify_password(self._decoys[SCRAM_SHA_256] if cred is None else cred, password) and cred is not None:
            return f"User:{user}"
        return None

    def user_credential(self, user: str, mechanism: str = SCRAM_SHA_256) -> ScramCredential | None:
        """A stored user's credential of a SCRAM mechanism (for a SCRAM exchange), None for none."""
        return self.state.users.get(user, {}).get(mechanism)

    def decoy_credential(self, mechanism: str = SCRAM_SHA_256) -> ScramCredential:
        """The credential an exchange for an unknown user proceeds with, so it fails as a wrong password does."""
        return self._decoys[mechanism]

    def check(self, principal: str, operation: Operation, rtype: ResourceType, name: str, method: str,
              path: str, client: str = "?") -> None:
        if self.authorizer_enabled and not self.authorizer().authorize(principal, operation, rtype, name):
            self.audit.refusal("authorization_failed", principal=principal, operation=operation.value,
                               resource_type=rtype.value, resource_name=name, method=method, path=path, client=client)
            refused = (TransactionalIdAuthorizationFailedError if rtype is ResourceType.TRANSACTIONAL_ID
                       else AuthorizationFailedError)
            raise refused(f"{principal} is not authorized to {operation.value} {rtype.value} {name!r}")
