"""How `lakelog sql` and `lakelog sql-server` name the SQL server and what a client presents to it:
the Spark Connect URL and its default, the shared token (file, environment, the bearer token in the
URL), and a cluster user's credentials. No pyspark import here."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from lakelog.spark_log.cli_common import CommandError


#: Where `lakelog sql-server` listens by default, and where `lakelog sql` looks for it.
SQL_SERVER_ENV = "LAKELOG_SQL_URL"
DEFAULT_SQL_SERVER = "sc://127.0.0.1:15002"


#: A shared secret clients of `lakelog sql-server --token-file` present (bearer token on the Connect channel).
SQL_TOKEN_ENV = "LAKELOG_SQL_TOKEN"
#: Where `lakelog up --sql` keeps its server's token (0600), and where `lakelog sql` looks for one.
DEFAULT_SQL_TOKEN_FILE = "data/sql.token"
MAX_TOKEN_BYTES = 1024


def read_token(path: str) -> str:
    try:
        token = Path(path).read_text()[:MAX_TOKEN_BYTES + 1].strip()
    except OSError as e:
        raise CommandError(f"cannot read the token file {path}: {e.strerror}") from None
    if not token or len(token) > MAX_TOKEN_BYTES or not token.isprintable() or ";" in token:
        raise CommandError(f"the token file {path} must hold one line of at most {MAX_TOKEN_BYTES} printable "
                           f"characters, without ';'")
    return token


def with_token(url: str, token: str | None) -> str:
    """The Connect URL with the bearer token. pyspark sends a token over a plain channel only to
    the host `localhost` (elsewhere it asks for TLS), so a loopback address is named so."""
    if token is None:
        return url
    host, port = server_address(url)
    if host in ("127.0.0.1", "::1", "localhost"):
        host = "localhost"
    return f"sc://{host}:{port}/;token={token}"


def cluster_credentials(args: argparse.Namespace) -> dict[str, str | None]:
    """A cluster user's credentials for the SQL server (flags, else $LAKELOG_API_KEY, $LAKELOG_USER /
    $LAKELOG_PASSWORD as the other commands read them); empty when none are given."""
    api_key = getattr(args, "api_key", None) or os.environ.get("LAKELOG_API_KEY")
    if api_key:
        return {"api_key": api_key}
    user = getattr(args, "user", None) or os.environ.get("LAKELOG_USER")
    if user:
        return {"user": user, "password": getattr(args, "password", None) or os.environ.get("LAKELOG_PASSWORD")}
    return {}


def server_address(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme != "sc" or not parts.hostname:
        raise CommandError(f"{url!r} is not a Spark Connect URL (sc://HOST:PORT)")
    return parts.hostname, parts.port or 15002


def server_reachable(url: str) -> bool:
    import socket

    host, port = server_address(url)
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def client_token(args: argparse.Namespace) -> str | None:
    token = read_token(args.token_file) if args.token_file else os.environ.get(SQL_TOKEN_ENV)
    if token is None and Path(DEFAULT_SQL_TOKEN_FILE).is_file():  # what `lakelog up --sql` wrote here
        token = read_token(DEFAULT_SQL_TOKEN_FILE)
    return token
