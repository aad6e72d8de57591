"""The console's SQL page on the node side: relay a query to the SQL server, checking ACLs in between.

The SQL server (`lakelog sql-server --http-listen`, `spark_log/sql_server/endpoint.py`) runs Spark; a node
never imports Spark (layers). A node configured with `console.sql.url` (set by `lakelog up --sql`)
answers `POST /console/sql` in three steps:

1. Ask the SQL server which `lakelog.<name>` views the query reads (`/v1/views`: from its analyzed
   plan; nothing runs, and a statement that is not a query is refused there).
2. Check them against the principal's ACLs (`required_reads`): every topic a view may show needs
   READ on that topic; a view of no topic (`lakelog._remote_index`) needs DESCRIBE on the cluster.
   With the authorizer off every view is allowed, as every endpoint is.
3. Run it (`/v1/query`) naming the views checked: the SQL server refuses a query that reads any
   other, so nothing changes between the check and the run.

Which topics a view may show follows `spark_log/tables.register_topics`: `lakelog.<topic>` is the
topic, `<t>_table` the Delta table `sync-tables` keeps of topic `t`, `<t>_errors_table` its dead
letters, `<t>_latest` its latest values. A name is ambiguous when topics exist under more than one
reading (a topic named `orders_table` beside the table of `orders`): all readings are required.

The SQL server's answer (rows or its Confluent-style error, one line) is passed on as it is. The
node bounds the query text, the rows (`console.sql.max.rows`) and the wait (`console.sql.timeout.ms`,
which the SQL server enforces by cancelling the query's Spark jobs).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from lakelog.ingest_api.errors import NotFoundError, PeerUnavailableError, RemoteError
from lakelog.tiering.remote_scan import REMOTE_INDEX_TABLE

MAX_QUERY_CHARS = 32 * 1024
MAX_TOKEN_BYTES = 1024
#: What the node adds to the query's own time limit before it gives up on the SQL server's answer.
RELAY_MARGIN_S = 15.0
MAX_ANSWER_BYTES = 32 << 20

class SqlNotConfiguredError(NotFoundError):
    """This node has no SQL server to run the console's queries (`console.sql.url` is empty)."""


def _strip(name: str, suffix: str) -> str | None:
    return name[:-len(suffix)] if name.endswith(suffix) and len(name) > len(suffix) else None


def required_reads(view: str, topics: set[str] | frozenset[str]) -> tuple[list[str], bool]:
    """(the topics a principal must READ, whether DESCRIBE on the cluster is needed) to query
    `lakelog.<view>`, given the cluster's topics. Pure."""
    readings = {view}
    for suffix in ("_errors_table", "_table", "_latest"):
        base = _strip(view, suffix)
        if base is not None:
            readings.add(base)
    existing = sorted(t for t in readings if t in topics)
    if existing:
        return existing, False
    if view == REMOTE_INDEX_TABLE:  # a table of no topic: the partition-level remote index of every topic
        return [], True
    return sorted(readings), False  # a table of a deleted topic: every reading of its name


class ConsoleSql:
    """The relay; `check(views)` raises when the principal may not read one of them."""

    def __init__(self, config) -> None:
        self.url = str(config.get("console.sql.url")).rstrip("/")
        self.token_file = str(config.get("console.sql.token.file"))
        self.timeout_ms = int(config.get("console.sql.timeout.ms"))
        self.max_rows = int(config.get("console.sql.max.rows"))

    def _headers(self) -> dict[str, str]:
        if not self.token_file:
            return {}
        try:
            token = Path(self.token_file).read_bytes()[:MAX_TOKEN_BYTES + 1].decode("utf-8", "replace").strip()
        except OSError as e:
            raise PeerUnavailableError(f"cannot read the SQL server's token ({self.token_file}): {e.strerror}") from None
        return {"Authorization": f"Bearer {token}"}

    async def _call(self, client: httpx.AsyncClient, path: str, body: dict) -> dict:
        try:
            resp = await client.post(self.url + path, json=body, headers=self._headers())
        except httpx.TimeoutException:
            raise PeerUnavailableError(f"the SQL server at {self.url} did not answer within "
                                       f"{self.timeout_ms} ms") from None
        except httpx.HTTPError as e:
            raise PeerUnavailableError(f"the SQL server at {self.url} does not answer ({type(e).__name__}); "
                                       "is `lakelog sql-server` running?") from None
        if len(resp.content) > MAX_ANSWER_BYTES:
            raise PeerUnavailableError("the SQL server's answer is too large")
        try:
            doc = json.loads(resp.content)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise PeerUnavailableError(f"the SQL server at {self.url} answered {resp.status_code} without JSON")
        if resp.status_code != 200:
            code = doc.get("error_code") if isinstance(doc.get("error_code"), int) else resp.status_code
            raise RemoteError(resp.status_code, code, str(doc.get("message", "the SQL server refused the query")))
        return doc

    async def run(self, query: str, max_rows: int | None, check) -> dict:
        """Views, `check(views)` (raises to refuse), then the query; the SQL server's answer."""
        if not self.url:
            raise SqlNotConfiguredError("no SQL server is configured on this node (console.sql.url); "
                                        "`lakelog up --sql` runs one")
        rows = min(max_rows or self.max_rows, self.max_rows)
        timeout = httpx.Timeout(self.timeout_ms / 1000 + RELAY_MARGIN_S, connect=5.0)
        async with httpx.AsyncClient(timeout=timeout) as client:
            views = (await self._call(client, "/v1/views", {"query": query})).get("views") or []
            if not isinstance(views, list) or not all(isinstance(v, str) for v in views):
                raise PeerUnavailableError("the SQL server's list of views is malformed")
            check(views)
            return await self._call(client, "/v1/query", {"query": query, "max_rows": rows,
                                                          "timeout_ms": self.timeout_ms, "views": views})
