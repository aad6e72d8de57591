"""The SQL server's address file: how `lakelog sql` finds the server's HTTP endpoint.

`lakelog sql-server --token-file T --http-listen URL` writes, beside its token, the file `T` with
the suffix `.http` (`data/sql.token` -> `data/sql.http`; mode 0600, written to a temporary file
and renamed), one JSON object:

    {"version": 1, "connect": "sc://HOST:PORT", "http": "http://HOST:PORT", "pid": N}

and removes it when it stops. `lakelog sql` reads the file beside the token file it uses
(`--token-file`, else `./data/sql.token`) and asks `http` first when `connect` names the Spark
Connect server it would otherwise use (`--server`, `$LAKELOG_SQL_URL`, the default), so the two
paths always reach the same server. A file left by a killed server names a port nobody answers
on: `lakelog sql` then goes on to Spark Connect. Readers refuse an unknown version.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlsplit

VERSION = 1
SUFFIX = ".http"
MAX_BYTES = 4096
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def path_beside(token_file: str | os.PathLike) -> Path:
    return Path(token_file).with_suffix(SUFFIX)


def write(path: Path, connect_url: str, http_url: str) -> Path:
    doc = {"version": VERSION, "connect": connect_url, "http": http_url, "pid": os.getpid()}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(doc).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def remove(path: Path | None) -> None:
    """Remove the file if it is still this process's (a newer server may have replaced it)."""
    if path is None:
        return
    doc = read(path)
    if doc is not None and doc.get("pid") == os.getpid():
        try:
            path.unlink()
        except OSError:
            pass


def read(path: Path) -> dict | None:
    """The file's object, or None when it is missing, unreadable, of another version or malformed."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_BYTES + 1)
        doc = json.loads(raw) if len(raw) <= MAX_BYTES else None
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != VERSION:
        return None
    if not isinstance(doc.get("connect"), str) or not isinstance(doc.get("http"), str):
        return None
    return doc


def _endpoint(url: str) -> tuple[str, int | None]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        port = None
    return ("loopback" if host in _LOOPBACK else host.lower()), port


def http_for(path: Path, connect_url: str) -> str | None:
    """The HTTP endpoint of the server the file describes, when it is the Connect server `connect_url`."""
    doc = read(path)
    if doc is None or not doc["http"].startswith("http://"):
        return None
    if _endpoint(doc["connect"]) != _endpoint(connect_url):
        return None
    return doc["http"]
