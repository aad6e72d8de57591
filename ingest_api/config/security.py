"""The node's security keys (Kafka-like names), merged into the node config (ingest_api/config/node.py).

Everything is off by default: a node without these keys serves plain HTTP to anyone, as before.
"""

from __future__ import annotations

from lakelog.infra.config import INT_MAX, ConfigDef, ConfigError
from lakelog.ingest_api.security.credentials import MAX_ITERATIONS, MIN_ITERATIONS
from lakelog.ingest_api.security.quotas import parse_overrides


def _check_overrides(text: str) -> None:
    try:
        parse_overrides(text)
    except ValueError as e:  # json.JSONDecodeError included
        raise ConfigError(f"quota.overrides: {e}") from None


def _check_super_users(text: str) -> None:
    for p in (p.strip() for p in text.split(";")):
        if p and (not p.startswith("User:") or len(p) <= 5):
            raise ConfigError(f"super.users: {p!r} is not a principal (User:NAME)")


def _check_mechanisms(text: str) -> None:
    for m in (m.strip().lower() for m in text.split(",")):
        if m and m not in ("basic", "apikey"):
            raise ConfigError(f"authentication.mechanisms: {m!r} is not basic or apikey")

SECURITY_CONFIG = (
    ConfigDef()
    .define("cluster.secret.file", str, "",
            "File holding cluster.secret (the secret alone, or a cluster.properties file with a "
            "cluster.secret= line); keeps the secret off the command line. Used when cluster.secret is "
            "empty; then $LAKELOG_CLUSTER_SECRET. See docs/security.md for the rules.")
    .define("authentication.enabled", bool, False,
            "Require every client request (all but /healthz and /readyz) to authenticate: HTTP Basic "
            "with a user's password, or a Bearer API key. Requests signed with cluster.secret act as the "
            "super user User:__cluster.")
    .define("authentication.mechanisms", str, "basic,apikey",
            "Accepted client mechanisms, comma-separated: basic (SCRAM-SHA-256 stored passwords), apikey.",
            validator=_check_mechanisms)
    .define("scram.iterations", int, MIN_ITERATIONS, "PBKDF2 iterations of newly stored passwords.",
            min=MIN_ITERATIONS, max=MAX_ITERATIONS)
    .define("authorizer.enabled", bool, False,
            "Check every request against the ACLs; with no matching ALLOW it is refused (403, 40301).")
    .define("super.users", str, "", "Principals allowed everything, ';'-separated (User:admin;User:ops).",
            validator=_check_super_users)
    .define("allow.everyone.if.no.acl.found", bool, False,
            "Allow an operation on a resource that no ACL names at all (Kafka's key).")
    .define("ssl.certfile", str, "", "PEM certificate chain of the HTTPS listener; set (with ssl.keyfile) "
            "to serve https:// (use an https:// listener).")
    .define("ssl.keyfile", str, "", "PEM private key of ssl.certfile.")
    .define("ssl.cafile", str, "", "PEM CA bundle: verifies client certificates, and peers' certificates "
            "on internal calls.")
    .define("ssl.client.auth", str, "none", "Client certificates: none, requested or required.",
            choices=("none", "requested", "required"))
    .define("quota.producer.byte.rate", int, 0, "Default produce bytes/s per principal per node; 0 = unlimited.",
            min=0, max=INT_MAX, unit="bytes/s")
    .define("quota.consumer.byte.rate", int, 0, "Default fetch bytes/s per principal per node; 0 = unlimited.",
            min=0, max=INT_MAX, unit="bytes/s")
    .define("quota.request.rate", int, 0, "Default requests/s per principal per node; 0 = unlimited.",
            min=0, max=INT_MAX, unit="1/s")
    .define("quota.overrides", str, "",
            'Per-principal quotas, JSON: {"User:alice": {"producer.byte.rate": 1048576, "request.rate": 100}}.',
            validator=_check_overrides)
    .define("quota.window.ms", int, 1000, "Burst a quota allows: its rate times this window.", min=10,
            max=60_000, unit="ms")
    .define("audit.log.max.per.second", int, 100, "Audit lines of refused requests per second; more are "
            "counted and summarised.", min=1, max=100_000, unit="1/s")
    .define("max.header.bytes", int, 16384, "Largest request line plus headers.", min=1024, max=1 << 20,
            unit="bytes")
    .define("max.connections", int, 4096, "Open connections of each door (HTTP and Kafka); a new HTTP "
            "connection over it is answered 503 (50350) and closed, a Kafka one is closed.", min=1, max=100_000)
    .define("request.header.timeout.ms", int, 10000, "Most time a client may take to send a request line and "
            "headers, from its first byte (or from connecting); then the connection is closed.", min=100,
            max=10 * 60 * 1000, unit="ms")
    .define("request.body.timeout.ms", int, 30000, "Most time a client may take to send a request body "
            "(slow-client protection); then 408.", min=100, max=10 * 60 * 1000, unit="ms")
)
