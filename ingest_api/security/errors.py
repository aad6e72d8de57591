"""Errors of client security; `ingest_api.error_table` says how each is answered over HTTP."""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind
from lakelog.ingest_api.errors import NodeError


class SecurityError(NodeError):
    """Root of the client security errors."""


class AuthenticationFailedError(SecurityError):
    """No credentials, unknown user, wrong password, unknown or revoked API key (401 with WWW-Authenticate)."""

    kind = ErrorKind.INVALID_REQUEST


class AuthorizationFailedError(SecurityError):
    """The authenticated principal is not allowed the operation on the resource (an ACL refuses)."""

    kind = ErrorKind.INVALID_REQUEST


class TransactionalIdAuthorizationFailedError(AuthorizationFailedError):
    """An ACL refuses the principal the operation on a transactional id (Kafka's TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""

    kind = ErrorKind.INVALID_REQUEST


class ThrottledError(SecurityError):
    """The principal is over one of its quotas; retry after `retry_after_s`."""

    kind = ErrorKind.TRANSIENT

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class InvalidSecurityRequestError(SecurityError):
    """A malformed user, API key or ACL request."""

    kind = ErrorKind.INVALID_REQUEST


class SecurityNotFoundError(SecurityError):
    """No such user or API key."""

    kind = ErrorKind.NOT_FOUND


class TooManyConnectionsError(SecurityError):
    """A new HTTP connection while max.connections are open: answered 503 and closed at once."""

    kind = ErrorKind.TRANSIENT


class RequestBodyTimeout(SecurityError):
    """The client sent its request body too slowly (request.body.timeout.ms)."""

    kind = ErrorKind.INVALID_REQUEST


class HeadersTooLargeError(SecurityError):
    """The request's headers are over max.header.bytes (HTTP 431)."""

    kind = ErrorKind.INVALID_REQUEST
