"""`POST /v1/sql` on the SQL server's HTTP endpoint: `lakelog sql` without a Spark Connect client.

A Spark Connect client costs `lakelog sql` about a second before it sends anything (importing
pyspark's Connect client and its gRPC stack, opening a session). The SQL server's HTTP endpoint
(`spark_log/sql_server/endpoint.py`) answers one JSON call instead, in the server's JVM:

    POST /v1/sql  {"query", "max_rows", "timeout_ms"}
    -> 200 {"columns": [{"name", "type"}], "rows": [[...]], "truncated", "views", "elapsed_ms"}
    -> 4xx {"error_code", "message"[, "tables"][, "try_spark_connect"]}

Who may call, exactly as on the Spark Connect channel of the same server:
- cluster authentication off: the server's token (`Authorization: Bearer <token>`, the token of
  `--token-file`), and the query runs in the server's session;
- cluster authentication on: a cluster user's credentials (`Authorization: Basic user:password`,
  or `Bearer <API key>`), checked by a node's `GET /sql/access` through the same JVM code and cache
  as a Connect call (`lakelog.spark.SqlAccess.principalOfHeader`); the query then runs in a session
  of that principal's (one per principal, bound to it with `SqlAccess.bindSession`), so the check
  rule `SqlAccessExtension` applies the principal's topic READ ACLs to its plans as it does to the
  principal's Connect sessions. The server's token is not accepted here then.

Only queries over `lakelog.*` run here (the endpoint's own rules, `QueryPlanner`): a statement or
source it does not serve is refused with `try_spark_connect`, and `lakelog sql` then asks the Spark
Connect endpoint, whose own checks apply. A SQL error carries `tables`, the `lakelog.*` names, for
the CLI's hint. Cells are not cut (the answer's bytes are bounded, `truncated` says so). At most
`max_concurrent` calls at once (429 beyond; the CLI then uses Spark Connect).
"""

from __future__ import annotations

import collections
import threading

from lakelog.spark_log.sql_server.endpoint import (
    DATABASE,
    FORBIDDEN,
    INVALID,
    MAX_ROWS,
    UNAUTHENTICATED,
    UNAVAILABLE,
    QueryPlanner,
    SqlEndpoint,
    SqlRefused,
)

#: Sessions kept for principals (least recently used dropped beyond it; a new one is cheap).
MAX_SESSIONS = 64
DEFAULT_MAX_CONCURRENT = 8
#: A cell is not cut below this (the answer is bounded by the endpoint's `max_response_bytes`).
CELL_CHARS = 1 << 30
#: The JVM check's status (gRPC's names) -> the row answered; any other, the server is not ready.
_REFUSALS = {"UNAUTHENTICATED": UNAUTHENTICATED, "PERMISSION_DENIED": FORBIDDEN}


class UserSql:
    """The `/v1/sql` calls of one SQL server; `cluster_auth` as the server was started."""

    def __init__(self, endpoint: SqlEndpoint, *, cluster_auth: bool,
                 max_concurrent: int = DEFAULT_MAX_CONCURRENT) -> None:
        self.endpoint = endpoint
        self.cluster_auth = cluster_auth
        self.slots = threading.BoundedSemaphore(max_concurrent)
        self._sessions: collections.OrderedDict[str, QueryPlanner] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._access = endpoint.spark._jvm.lakelog.spark.SqlAccess if cluster_auth else None

    def planner_for(self, header: str | None) -> QueryPlanner:
        """The planner (session) the caller's query runs in, or a refusal of its credentials."""
        if not self.cluster_auth:
            if not self.endpoint.authorized(header):
                raise SqlRefused(UNAUTHENTICATED, "the SQL server's token is needed (Authorization: Bearer): a token is "
                                             "missing or differs")
            return self.endpoint.planner
        try:
            principal = str(self._access.principalOfHeader(header or ""))
        except Exception as e:  # py4j: the JVM's IllegalStateException "STATUS: message"
            java = getattr(e, "java_exception", None)
            text = str(java.getMessage() if java is not None else e).strip().splitlines()[0]
            status, _, message = text.partition(": ")
            raise SqlRefused(_REFUSALS.get(status, UNAVAILABLE), f"lakelog: {message or text}") from None
        with self._lock:
            planner = self._sessions.get(principal)
            if planner is not None:
                self._sessions.move_to_end(principal)
                return planner
            session = self.endpoint.spark.newSession()  # shares the global views of `lakelog`
            self._access.bindSession(session._jsparkSession, principal)
            planner = QueryPlanner(session, self.endpoint.planner.views)
            self._sessions[principal] = planner
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
            return planner

    def call(self, header: str | None, body: dict) -> dict:
        planner = self.planner_for(header)
        with self.endpoint._slot(self.slots, "`lakelog sql` queries"):
            try:
                return self.endpoint.run(planner, body, cell_chars=CELL_CHARS)
            except SqlRefused as e:
                if e.row is INVALID and not e.elsewhere:
                    e.tables = self.tables()
                raise

    def tables(self) -> list[str]:
        """The `lakelog.*` names (as `SHOW TABLES IN lakelog` lists them to any client)."""
        try:
            rows = self.endpoint.spark.sql(f"SHOW TABLES IN {DATABASE}").collect()
        except Exception:  # only a hint
            return []
        return sorted(r["tableName"] for r in rows)[:MAX_ROWS]
