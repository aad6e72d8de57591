"""Errors of client security; `ingest_api.errors.http_error` maps them through `status`/`error_code`."""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind
from lakelog.ingest_api.errors import NodeError


class SecurityError(NodeError):
    """Root of the client security errors."""


class AuthenticationFailedError(SecurityError):
    """No credentials, unknown user, wrong password, unknown or revoked API key (401 with WWW-Authenticate)."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 401, 40101


class AuthorizationFailedError(SecurityError):
    """The authenticated principal is not allowed the operation on the resource (an ACL refuses)."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 403, 40301


class ThrottledError(SecurityError):
    """The principal is over one of its quotas; retry after `retry_after_s`."""

    kind = ErrorKind.TRANSIENT
    status, error_code = 429, 42901

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class InvalidSecurityRequestError(SecurityError):
    """A malformed user, API key or ACL request."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 400, 40003


class SecurityNotFoundError(SecurityError):
    """No such user or API key."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40405


class RequestBodyTimeout(SecurityError):
    """The client sent its request body too slowly (request.body.timeout.ms)."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 408, 40801
