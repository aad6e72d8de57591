"""Settings of the Kafka listener (Kafka's broker key names), declared once; ingest_api/config.py adds
them to the node's keys.

`listeners` and `advertised.listeners` themselves are the node's keys (ingest_api/config.py): one
comma-separated list holds the HTTP door (`http://` or `https://`) and any Kafka listeners
(`NAME://host:port`, NAME a key of `listener.security.protocol.map`). `parse_listeners` reads it.
`max.connections` (ingest_api/config/security.py) bounds the open connections of each door.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from lakelog.infra.config import INT_MAX, ConfigDef, ConfigError

MIB = 1024 * 1024

#: Security protocols the Kafka listener speaks (SSL and SASL_SSL with the node's `ssl.*` certificate).
SUPPORTED_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Protocols whose clients authenticate with SASL (the others act as User:ANONYMOUS).
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
#: Every protocol name Kafka defines (a map may name them; a listener may not use one we lack).
KNOWN_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Schemes of the HTTP door in `listeners`.
HTTP_SCHEMES = ("http", "https")

KAFKA_CONFIG = (
    ConfigDef()
    .define("listener.security.protocol.map", str,
            "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
            "Kafka listener name -> security protocol, as NAME:PROTOCOL,... (SSL and SASL_SSL need "
            "ssl.certfile; while authentication.enabled is on only SASL_PLAINTEXT and SASL_SSL).")
    .define("socket.request.max.bytes", int, 100 * MIB,
            "Largest Kafka request frame; a larger one closes its connection.", min=1024, max=INT_MAX,
            unit="bytes")
    .define("connections.max.idle.ms", int, 600_000,
            "A Kafka connection with no request for this long is closed.", min=100, max=INT_MAX, unit="ms")
    .define("queued.max.requests.per.connection", int, 16,
            "Most requests of one Kafka connection read and not yet answered; the connection is not "
            "read further until one is answered.", min=1, max=1000)
    .define("fetch.zero.copy.enable", bool, True,
            "Send Kafka Fetch answers' record bytes with sendfile straight from the segment files on "
            "plain-TCP listeners (TLS listeners and the remote tier always read them into memory).")
    .define("max.incremental.fetch.session.cache.slots", int, 1000,
            "Most Kafka consumer fetch sessions (KIP-227) the node keeps; 0 answers every fetch sessionless.",
            min=0, max=1_000_000)
    .define("min.incremental.fetch.session.eviction.ms", int, 120_000,
            "A fetch session idle this long may be evicted from a full cache for a new one.", min=0,
            max=INT_MAX, unit="ms")
)


@dataclass(frozen=True)
class KafkaListener:
    """One Kafka listener: its name, where it binds (or is advertised), its security protocol."""

    name: str
    host: str
    port: int
    security_protocol: str


def check_listener_security(listeners: list[KafkaListener], authentication_enabled: bool, tls_enabled: bool) -> None:
    """Refuse a Kafka listener without SASL on a node that authenticates: its clients would act
    unauthenticated (as User:ANONYMOUS) where the HTTP door demands credentials. SASL listeners
    authenticate against the stored users; with the authorizer on, every door checks the same ACLs.
    SSL and SASL_SSL need the node's certificate (`ssl.certfile`, `ssl.keyfile`)."""
    for lst in listeners:
        if authentication_enabled and lst.security_protocol not in SASL_PROTOCOLS:
            raise ConfigError(f"listeners: Kafka listener {lst.name} is {lst.security_protocol} but "
                              "authentication.enabled is on; map it to SASL_PLAINTEXT or SASL_SSL in "
                              "listener.security.protocol.map")
        if lst.security_protocol in TLS_PROTOCOLS and not tls_enabled:
            raise ConfigError(f"listeners: Kafka listener {lst.name} is {lst.security_protocol}, which needs "
                              "ssl.certfile and ssl.keyfile")


def parse_protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, sep, proto = item.partition(":")
        if not sep or not name or proto not in KNOWN_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: {item!r} must be NAME:PROTOCOL with PROTOCOL "
                              f"one of {', '.join(KNOWN_PROTOCOLS)}")
        out[name.upper()] = proto
    return out


def split_listeners(text: str) -> tuple[str, list[str]]:
    """(the one HTTP listener URL, the other entries) of a `listeners` value."""
    entries = [s.strip() for s in text.split(",") if s.strip()]
    http = [e for e in entries if e.split("://", 1)[0].lower() in HTTP_SCHEMES]
    if len(http) != 1:
        raise ConfigError(f"listeners: {text!r} must hold exactly one http://host:port (or https://) entry")
    return http[0], [e for e in entries if e is not http[0]]


def parse_listeners(text: str, protocol_map: str) -> list[KafkaListener]:
    """The Kafka listeners of a `listeners` (or `advertised.listeners`) value, checked."""
    protocols = parse_protocol_map(protocol_map)
    out: list[KafkaListener] = []
    for entry in split_listeners(text)[1]:
        name, sep, address = entry.partition("://")
        parts = urlsplit("//" + address)  # a name with "_" (SASL_PLAINTEXT) is no URL scheme
        try:
            port = parts.port
        except ValueError:
            port = None
        if not sep or port is None or parts.hostname is None:
            raise ConfigError(f"listeners: {entry!r} must look like NAME://host:port")
        name = name.upper()
        proto = protocols.get(name)
        if proto is None:
            raise ConfigError(f"listeners: listener {name} is not named in listener.security.protocol.map")
        if any(o.name == name for o in out):
            raise ConfigError(f"listeners: listener {name} is named twice")
        out.append(KafkaListener(name, parts.hostname, port, proto))
    return out
