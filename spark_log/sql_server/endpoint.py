"""The SQL server's HTTP JSON endpoint, for the web console (`lakelog sql-server --http-listen`).

A browser cannot speak gRPC (Spark Connect), and the nodes may not import Spark (layers), so the SQL
server also answers two small JSON calls on loopback, and a node relays its console's `POST
/console/sql` to them (`ingest_api/http/console_sql.py`, which checks the principal's ACLs in between):

- `POST /v1/views` `{"query"}` -> `{"views": [...]}`: the `lakelog.<name>` views the query reads,
  from its analyzed plan, before anything runs.
- `POST /v1/query` `{"query", "max_rows", "timeout_ms", "views"}` -> `{"columns": [{"name", "type"}],
  "rows": [[...]], "truncated", "views", "elapsed_ms"}`. With `views` (a list), a query that reads
  any other view is refused (403): the node names what it checked, so a view cannot change between
  the check and the run.

Only queries: a statement Spark parses as a command (DDL, DML, SET, CACHE, SQL scripts, EXPLAIN,
SHOW, DESCRIBE, ...) is refused before it is analyzed. A query may read the `lakelog.<name>` views
and nothing else that holds data (no `json.`/path``, no catalog table): relations named outside
`lakelog` are refused before analysis (so no file is even listed), and any leaf of the analyzed plan
outside a `lakelog` view other than `VALUES`, `range()` and a one-row select is refused after it, as
is a call of `reflect()` / `java_method()` (any static Java method of the server's JVM).

Every call presents the server's token (`Authorization: Bearer`, the same token as its Spark Connect
channel); the endpoint does not start without one. Bounded: the body (`MAX_BODY_BYTES`), the query
text, the rows (`max_rows` <= `MAX_ROWS`), each cell (`MAX_CELL_CHARS`, longer text is cut and
marked), the answer's bytes (`max_response_bytes`: the rows that fit, `truncated`), the time (the
query's Spark jobs are cancelled after `timeout_ms` <= `MAX_TIMEOUT_MS`: 408), and the queries at
once (`max_concurrent`: 429 beyond). Errors are Confluent-style bodies (`error_code`, `message`);
a SQL error is one line.
"""

from __future__ import annotations

import datetime
import decimal
import hmac
import itertools
import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lakelog.spark_log.sql_server.topic_views import TopicViews

from lakelog.infra.error_codes import ErrorCode, code, framework

log = logging.getLogger("lakelog.sql_http")

MAX_BODY_BYTES = 64 * 1024
MAX_QUERY_CHARS = 32 * 1024
MAX_ROWS = 10_000
DEFAULT_MAX_ROWS = 1000
MAX_CELL_CHARS = 2000
DEFAULT_TIMEOUT_MS = 60_000
MAX_TIMEOUT_MS = 10 * 60 * 1000
DEFAULT_MAX_RESPONSE_BYTES = 4 << 20
DEFAULT_MAX_CONCURRENT = 2
MAX_VIEWS = 10_000
MAX_EXPRESSION_NODES = 20_000
DATABASE = "lakelog"

#: The rows of the code table (`infra/error_codes.py`) the endpoint answers with: as the node answers
#: the same errors.
INVALID = code("InvalidRequestError")
FORBIDDEN = code("AuthorizationFailedError")
UNAUTHENTICATED = code("AuthenticationFailedError")
TOO_LARGE = code("RequestTooLargeError")
TIMED_OUT = code("RequestBodyTimeout")
BUSY = code("ThrottledError")
INTERNAL = code("InternalServerError")
UNAVAILABLE = code("NotReadyError")
NO_ROUTE = framework("RouteNotFound")
LENGTH_REQUIRED = framework("LengthRequired")

_LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."
#: Leaves of an analyzed plan that hold no stored data: VALUES, range(), SELECT without FROM, and a
#: reference to a CTE (whose definition, a child of the `WithCTE` above it, is walked and checked).
SAFE_LEAVES = frozenset(_LOGICAL + n for n in ("OneRowRelation", "LocalRelation", "Range", "CTERelationRef"))
#: Parsed plans that are not queries (DDL, DML, SET, scripts, SHOW, DESCRIBE, EXPLAIN, CACHE, ...).
NOT_QUERIES = (_LOGICAL + "Command", _LOGICAL + "ParsedStatement")


class SqlRefused(Exception):
    """A call the endpoint answers with an error: its row of the code table (status, error_code), message.
    `elsewhere`: what is refused is a statement or a source this endpoint does not serve, which the
    Spark Connect endpoint may (`lakelog sql` then asks it; `try_spark_connect` in the answer)."""

    def __init__(self, row: ErrorCode, message: str, *, elsewhere: bool = False) -> None:
        super().__init__(message)
        self.row, self.elsewhere = row, elsewhere
        self.status, self.error_code = row.status, row.error_code


def _bad(message: str) -> SqlRefused:
    return SqlRefused(INVALID, message)


def first_line(e: BaseException) -> str:
    """A Spark error as one line (its first: the error class and what it says, no stack trace); a
    Java exception py4j did not convert, by its own message."""
    java = getattr(e, "java_exception", None)
    text = str(java.getMessage() if java is not None else e).strip()
    line = text.splitlines()[0].strip() if text else type(e).__name__
    return line[:1000]


def _seq(seq) -> list:
    return [seq.apply(i) for i in range(seq.size())]


class QueryPlanner:
    """Checks and analyzes one statement with the server's session (py4j calls into its JVM)."""

    def __init__(self, spark, views: TopicViews | None = None) -> None:
        self.spark = spark
        #: The server's views, refreshed before a query that names one not registered yet.
        self.views = views
        forname = spark._jvm.java.lang.Class.forName
        self._not_queries = [forname(n) for n in NOT_QUERIES]

    def parse_query(self, query: str):
        """The parsed plan of a query; refuses a command (nothing has run: parsing runs nothing)."""
        try:
            parsed = self.spark._jsparkSession.sessionState().sqlParser().parsePlan(query)
        except Exception as e:
            raise _bad(first_line(e)) from None
        if any(c.isInstance(parsed) for c in self._not_queries):
            raise SqlRefused(INVALID, f"only queries run here ({parsed.nodeName()} is a statement); use `lakelog "
                                         f"sql` for others", elsewhere=True)
        self._check_names(parsed)
        return parsed

    def _check_names(self, plan) -> None:
        """Relations named with a qualifier must be `lakelog.<name>`: no file or catalog table is even
        looked up (a one-part name is a CTE's, or fails to resolve, or is caught after analysis)."""
        for node in self._walk(plan, stop_at_views=False):
            if node.getClass().getName().endswith(".UnresolvedRelation"):
                parts = [str(p) for p in _seq(node.multipartIdentifier())]
                if len(parts) > 1 and (len(parts) != 2 or parts[0].lower() != DATABASE):
                    raise SqlRefused(FORBIDDEN, f"{'.'.join(parts)} is not a lakelog table: queries here read "
                                                 f"{DATABASE}.<topic> and the other {DATABASE}.* tables only",
                                     elsewhere=True)

    def lakelog_names(self, parsed) -> list[str]:
        """The `lakelog.<name>` relations a parsed plan names."""
        out = set()
        for node in self._walk(parsed, stop_at_views=False):
            if node.getClass().getName().endswith(".UnresolvedRelation"):
                parts = [str(p) for p in _seq(node.multipartIdentifier())]
                if len(parts) == 2 and parts[0].lower() == DATABASE:
                    out.add(parts[1])
        return sorted(out)

    def _ensure_views(self, parsed) -> None:
        """A topic created since the last refresh: its view is registered before the query is
        analyzed (spark_log/sql_server/topic_views.py); if that fails, the query fails as it would have."""
        if self.views is None:
            return
        try:
            self.views.ensure(self.lakelog_names(parsed))
        except Exception as e:  # the nodes cannot be reached: the analysis names the missing table
            log.warning("looking up the views of a query failed: %s", first_line(e))

    def analyze(self, query: str):
        """(DataFrame, the lakelog views it reads, sorted); refuses any other source of data."""
        self._ensure_views(self.parse_query(query))
        try:
            df = self.spark.sql(query)  # a query: analyzed here, run only when collected
        except Exception as e:
            raise _bad(first_line(e)) from None
        return df, self.views_of(df._jdf.queryExecution().analyzed())

    def views_of(self, analyzed) -> list[str]:
        views: set[str] = set()
        for node in self._walk(analyzed, stop_at_views=True):
            name = node.getClass().getName()
            if name == _LOGICAL + "View":
                ident = node.desc().identifier()
                db = ident.database()
                if not db.isDefined() or str(db.get()).lower() != DATABASE:
                    raise SqlRefused(FORBIDDEN, f"{ident.unquotedString()} is not a lakelog table")
                views.add(str(ident.table()))
            else:
                if node.children().size() == 0 and name not in SAFE_LEAVES:
                    raise SqlRefused(FORBIDDEN, f"the query reads {node.nodeName()}, which is not a lakelog table: "
                                                 f"queries here read {DATABASE}.<topic> and the other {DATABASE}.* "
                                                 "tables only", elsewhere=True)
                self._check_expressions(node)
        return sorted(views)

    def _check_expressions(self, node) -> None:
        """No `reflect` / `java_method` (a call of any static Java method of the server's JVM)."""
        stack = _seq(node.expressions())
        seen = 0
        while stack:
            e = stack.pop()
            seen += 1
            if seen > MAX_EXPRESSION_NODES:
                raise _bad(f"the query is too large to check (more than {MAX_EXPRESSION_NODES} expression nodes)")
            if e.getClass().getName().endswith(".CallMethodViaReflection"):
                raise SqlRefused(FORBIDDEN, "reflect() and java_method() do not run here", elsewhere=True)
            stack.extend(_seq(e.children()))

    @staticmethod
    def _walk(plan, *, stop_at_views: bool):
        """Every node of a plan, subqueries in expressions included; a `View` node's inside is not
        entered when `stop_at_views` (it is the view's own definition)."""
        stack = [plan]
        while stack:
            node = stack.pop()
            yield node
            if stop_at_views and node.getClass().getName() == _LOGICAL + "View":
                continue
            stack.extend(_seq(node.children()))
            stack.extend(_seq(node.subqueries()))
            stack.extend(p for p in _seq(node.innerChildren()) if hasattr(p, "children"))  # a parsed WITH's CTEs


def json_cell(v: Any, limit: int = MAX_CELL_CHARS) -> Any:
    """A value of a result row as JSON: text cut at `limit` characters (MAX_CELL_CHARS), bytes as
    UTF-8 (escaped where they are not), decimals as text (exact), dates and times in ISO 8601,
    structs as objects."""
    if v is None or isinstance(v, (bool, int)):
        return v
    if isinstance(v, float):
        return v if v == v and v not in (float("inf"), float("-inf")) else str(v)
    if isinstance(v, (bytes, bytearray)):
        v = bytes(v).decode("utf-8", "backslashreplace")
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (datetime.date, datetime.datetime, datetime.time)):
        return v.isoformat()
    if isinstance(v, datetime.timedelta):
        return str(v)
    if hasattr(v, "asDict"):
        return {k: json_cell(x, limit) for k, x in v.asDict().items()}
    if isinstance(v, dict):
        return {str(k): json_cell(x, limit) for k, x in itertools.islice(v.items(), 1000)}
    if isinstance(v, (list, tuple)):
        return [json_cell(x, limit) for x in v[:1000]]
    text = str(v)
    return text if len(text) <= limit else text[:limit] + "…"


class SqlEndpoint:
    """The calls, without HTTP: what tests drive and the handler serves."""

    def __init__(self, spark, token: str, *, max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
                 max_concurrent: int = DEFAULT_MAX_CONCURRENT, views: TopicViews | None = None) -> None:
        if not token:
            raise ValueError("the SQL server's HTTP endpoint needs a token (--token-file)")
        self.spark = spark
        self.token = token.encode()
        self.planner = QueryPlanner(spark, views)
        self.max_response_bytes = max_response_bytes
        self.slots = threading.BoundedSemaphore(max_concurrent)
        self._ids = itertools.count(1)
        #: `POST /v1/sql` for `lakelog sql` (spark_log/sql_server/users.py), when the server serves it.
        self.users = None

    def authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[len("Bearer "):].strip().encode(), self.token)

    @staticmethod
    def _query_of(body: dict) -> str:
        query = body.get("query")
        if not isinstance(query, str) or not query.strip():
            raise _bad("query: a SQL query is needed")
        if len(query) > MAX_QUERY_CHARS:
            raise SqlRefused(TOO_LARGE, f"query: at most {MAX_QUERY_CHARS} characters")
        return query.strip().rstrip(";")

    @staticmethod
    def _int(body: dict, key: str, default: int, lo: int, hi: int) -> int:
        v = body.get(key, default)
        if v is None:
            return default
        if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
            raise _bad(f"{key}: a whole number from {lo} to {hi}")
        return v

    def views(self, body: dict) -> dict:
        query = self._query_of(body)
        with self._slot():
            _, views = self.planner.analyze(query)
        return {"views": views}

    def query(self, body: dict) -> dict:
        allowed = body.get("views")
        if allowed is not None and (not isinstance(allowed, list) or len(allowed) > MAX_VIEWS
                                    or not all(isinstance(v, str) for v in allowed)):
            raise _bad(f"views: a list of at most {MAX_VIEWS} view names")
        with self._slot():
            return self.run(self.planner, body, allowed)

    def run(self, planner: QueryPlanner, body: dict, allowed: list | None = None,
            cell_chars: int = MAX_CELL_CHARS) -> dict:
        """Analyze and run the body's query with `planner`'s session (the caller holds a slot)."""
        query = self._query_of(body)
        max_rows = self._int(body, "max_rows", DEFAULT_MAX_ROWS, 1, MAX_ROWS)
        timeout_ms = self._int(body, "timeout_ms", DEFAULT_TIMEOUT_MS, 1, MAX_TIMEOUT_MS)
        started = time.monotonic()
        df, views = planner.analyze(query)
        if allowed is not None:
            outside = sorted(set(views) - set(allowed))
            if outside:
                raise SqlRefused(FORBIDDEN, f"the query reads {DATABASE}.{outside[0]}, which was not checked")
        columns = [{"name": f.name, "type": f.dataType.simpleString()} for f in df.schema.fields]
        rows = self._collect(df, max_rows, timeout_ms, planner.spark)
        truncated = len(rows) > max_rows
        rows = rows[:max_rows]
        out_rows, size = [], 0
        for r in rows:
            cells = [json_cell(r[i], cell_chars) for i in range(len(columns))]
            size += len(json.dumps(cells, ensure_ascii=False).encode()) + 1
            if size > self.max_response_bytes:
                truncated = True
                break
            out_rows.append(cells)
        return {"columns": columns, "rows": out_rows, "truncated": truncated, "views": views,
                "elapsed_ms": int((time.monotonic() - started) * 1000)}

    def _collect(self, df, max_rows: int, timeout_ms: int, spark=None) -> list:
        """The first max_rows + 1 rows; the query's Spark jobs are cancelled after timeout_ms."""
        sc = (spark or self.spark).sparkContext
        group = f"lakelog-console-sql-{next(self._ids)}"
        timed_out = threading.Event()

        def cancel() -> None:
            timed_out.set()
            sc.cancelJobGroup(group)

        sc.setJobGroup(group, "web console SQL", interruptOnCancel=True)
        timer = threading.Timer(timeout_ms / 1000, cancel)
        timer.daemon = True
        timer.start()
        try:
            return df.limit(max_rows + 1).collect()
        except Exception as e:
            if timed_out.is_set():
                raise SqlRefused(TIMED_OUT, f"the query ran longer than {timeout_ms} ms and was cancelled") from None
            raise _bad(first_line(e)) from None
        finally:
            timer.cancel()
            sc.setLocalProperty("spark.jobGroup.id", None)

    def _slot(self, slots: threading.BoundedSemaphore | None = None, what: str = "console queries"):
        """One of the `max_concurrent` query slots (or of `slots`), or 429."""
        sem = slots or self.slots

        class Slot:
            def __enter__(self):
                if not sem.acquire(blocking=False):
                    raise SqlRefused(BUSY, f"the SQL server is running as many {what} as it may; retry")
                return self

            def __exit__(self, *exc) -> None:
                sem.release()
        return Slot()


class _Handler(BaseHTTPRequestHandler):
    server_version = "lakelog-sql"
    protocol_version = "HTTP/1.1"
    endpoint: SqlEndpoint  # set on the subclass `serve` makes

    def log_message(self, fmt, *args) -> None:  # not to stderr line by line
        log.debug("%s " + fmt, self.client_address[0], *args)

    def _answer(self, status: int, doc: dict) -> None:
        body = json.dumps(doc, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self._answer(NO_ROUTE.status, {"error_code": NO_ROUTE.error_code, "message": f"{self.path} not found"})

    def do_POST(self) -> None:  # noqa: N802
        try:
            users = self.endpoint.users
            if self.path == "/v1/sql" and users is not None:  # `lakelog sql`: checks its own credentials
                header = self.headers.get("Authorization")
                self._answer(200, users.call(header, self._body()))
                return
            if not self.endpoint.authorized(self.headers.get("Authorization")):
                raise SqlRefused(UNAUTHENTICATED, "the SQL server's token is needed (Authorization: Bearer)")
            call = {"/v1/views": self.endpoint.views, "/v1/query": self.endpoint.query}.get(self.path)
            if call is None:
                raise SqlRefused(NO_ROUTE, f"{self.path} not found")
            self._answer(200, call(self._body()))
        except SqlRefused as e:
            doc = {"error_code": e.error_code, "message": str(e)}
            if e.elsewhere:
                doc["try_spark_connect"] = True
            if getattr(e, "tables", None) is not None:
                doc["tables"] = e.tables
            self._answer(e.status, doc)
        except Exception as e:  # a bug: logged here, one line to the caller
            log.exception("SQL call failed")
            self._answer(INTERNAL.status, {"error_code": INTERNAL.error_code, "message": f"internal error: {first_line(e)}"})

    def _body(self) -> dict:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise SqlRefused(LENGTH_REQUIRED, "a Content-Length is needed") from None
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True
            raise SqlRefused(TOO_LARGE, f"the body exceeds {MAX_BODY_BYTES} bytes")
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except ValueError:
            raise _bad("the body is not JSON") from None
        if not isinstance(body, dict):
            raise _bad("the body must be a JSON object")
        return body


class SqlHttpServer:
    """The endpoint on a thread of its own; `port` is the port bound (0 asks the system for one)."""

    def __init__(self, endpoint: SqlEndpoint, host: str, port: int) -> None:
        self.endpoint = endpoint
        self.address_file = None  # where `lakelog sql-server` wrote this endpoint's address (address.py)
        handler = type("Handler", (_Handler,), {"endpoint": endpoint})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="sql-http", daemon=True)

    def start(self) -> "SqlHttpServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def parse_listen(url: str) -> tuple[str, int]:
    """`http://HOST:PORT` -> (host, port)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise ValueError(f"{url!r} is not http://HOST:PORT")
    return parts.hostname, parts.port


def start(spark, listen: str, token: str, views: TopicViews | None = None) -> SqlHttpServer:
    host, port = parse_listen(listen)
    return SqlHttpServer(SqlEndpoint(spark, token, views=views), host, port).start()


__all__ = ["SqlEndpoint", "SqlHttpServer", "SqlRefused", "QueryPlanner", "json_cell", "start"]
