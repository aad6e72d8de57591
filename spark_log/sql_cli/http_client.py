"""`lakelog sql`'s first way in: the SQL server's `POST /v1/sql` (spark_log/sql_server/users.py), over
plain HTTP with the standard library, so a warm query imports neither pyspark nor an HTTP package.

`ask()` answers one of:
- `Rows(columns, rows, truncated)`: the query ran;
- `Refusal(status, error_code, message, tables)`: the server refused the credentials or the query
  (a SQL error, a topic the principal may not READ, the time limit);
- None: this path cannot answer — nothing listens there, an older server without `/v1/sql`, all
  of its slots busy, or a statement or source it leaves to Spark Connect — and `lakelog sql` goes
  on to the Spark Connect endpoint of the same server.
"""

from __future__ import annotations

import base64
import http.client
import json
from dataclasses import dataclass
from urllib.parse import urlsplit

#: Most bytes of an answer read (the server bounds its answers to 4 MiB by default).
MAX_ANSWER_BYTES = 64 << 20
CONNECT_TIMEOUT_S = 2.0
#: What the client waits beyond the query's own time limit (the server cancels the query at it).
MARGIN_S = 30.0


@dataclass(frozen=True)
class Rows:
    columns: list[str]
    rows: list[list]
    truncated: bool


@dataclass(frozen=True)
class Refusal:
    status: int
    error_code: int
    message: str
    tables: list[str] | None


def authorization(creds: dict, token: str | None) -> str | None:
    """The `Authorization` header: a cluster user's credentials when given, else the server's token."""
    if creds.get("api_key"):
        return f"Bearer {creds['api_key']}"
    if creds.get("user") is not None:
        return "Basic " + base64.b64encode(f"{creds['user']}:{creds.get('password') or ''}".encode()).decode()
    return f"Bearer {token}" if token else None


def ask(url: str, query: str, *, max_rows: int, timeout_ms: int, header: str | None) -> Rows | Refusal | None:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return None
    body = json.dumps({"query": query, "max_rows": max_rows, "timeout_ms": timeout_ms}).encode()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    if header:
        headers["Authorization"] = header
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=CONNECT_TIMEOUT_S)
    try:
        try:
            conn.connect()
        except OSError:
            return None  # nobody listens: a stopped server's address file, or none started
        conn.sock.settimeout(timeout_ms / 1000 + MARGIN_S)
        conn.request("POST", "/v1/sql", body=body, headers=headers)
        resp = conn.getresponse()
        raw = resp.read(MAX_ANSWER_BYTES + 1)
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()
    try:
        doc = json.loads(raw) if len(raw) <= MAX_ANSWER_BYTES else None
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        return None
    if resp.status == 200:
        columns = [c.get("name", "") for c in doc.get("columns") or []]
        return Rows(columns, doc.get("rows") or [], bool(doc.get("truncated")))
    if doc.get("try_spark_connect") or resp.status in (404, 429) or resp.status >= 500:
        return None
    tables = doc.get("tables")
    return Refusal(resp.status, int(doc.get("error_code") or resp.status), str(doc.get("message", "")),
                   [str(t) for t in tables] if isinstance(tables, list) else None)
