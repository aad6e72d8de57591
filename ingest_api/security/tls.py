"""TLS of the HTTP listener and of internal calls, from the node's `ssl.*` keys.

With `ssl.certfile` and `ssl.keyfile` set, the node serves HTTPS only (and its SSL / SASL_SSL Kafka
listeners with the same certificate) (its listener must be
`https://host:port`), and calls its peers — Raft, replica fetch, forwarding, controller requests —
over HTTPS too, verifying their certificates against `ssl.cafile` (or the system trust store) and
presenting its own certificate, so `ssl.client.auth=required` works between nodes as for clients.
Internal calls stay signed with `cluster.secret` either way: TLS adds confidentiality and peer
identity, the signature keeps deciding who is a member.
"""

from __future__ import annotations

import ssl
from typing import Any

from lakelog.infra.config import ConfigError

_CERT_REQS = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def enabled(config: Any) -> bool:
    return bool(config.ssl_certfile)


def check(config: Any) -> None:
    scheme = config.http_listener.split("://", 1)[0]
    if enabled(config):
        if not config.ssl_keyfile:
            raise ConfigError("ssl.certfile is set but ssl.keyfile is not")
        if scheme != "https":
            raise ConfigError("with ssl.certfile set, listeners must be https://host:port")
        if config.ssl_client_auth != "none" and not config.ssl_cafile:
            raise ConfigError("ssl.client.auth needs ssl.cafile to verify client certificates")
    elif scheme == "https":
        raise ConfigError("an https:// listener needs ssl.certfile and ssl.keyfile")


def uvicorn_kwargs(config: Any) -> dict[str, Any]:
    """uvicorn.Config keyword arguments for the listener (empty without TLS)."""
    check(config)
    if not enabled(config):
        return {}
    kw: dict[str, Any] = {"ssl_certfile": config.ssl_certfile, "ssl_keyfile": config.ssl_keyfile,
                          "ssl_cert_reqs": _CERT_REQS[config.ssl_client_auth]}
    if config.ssl_cafile:
        kw["ssl_ca_certs"] = config.ssl_cafile
    return kw


def server_context(config: Any) -> ssl.SSLContext | None:
    """The context of the node's SSL and SASL_SSL Kafka listeners: the HTTP listener's certificate and
    `ssl.client.auth` (None without TLS)."""
    if not enabled(config):
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=config.ssl_cafile or None)
    ctx.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
    ctx.verify_mode = _CERT_REQS[config.ssl_client_auth]
    return ctx


def client_context(config: Any) -> ssl.SSLContext | None:
    """The context of this node's calls to its peers (None without TLS)."""
    if not enabled(config):
        return None
    ctx = ssl.create_default_context(cafile=config.ssl_cafile or None)
    ctx.load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
    return ctx
