"""`lakelog sql`: one query, or an interactive prompt, over the topics.

A one-shot query goes first to the SQL server's HTTP endpoint (`spark_log/sql_cli/http_client.py`: no pyspark
import on that path), then through Spark Connect when a `lakelog sql-server` is reachable, else to a
Spark session of this process. The output (`spark_log/sql_cli/output.py`) and the one-line errors are
the same on every path.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from lakelog.spark_log.cli_common import QUIET_CONF, CommandError, bounded_int, quiet_jvm
from lakelog.spark_log.sql_cli.output import missing_names, print_rows, query_error, run_query
from lakelog.spark_log.sql_cli.repl import repl
from lakelog.spark_log.sql_server.access import (DEFAULT_SQL_SERVER, DEFAULT_SQL_TOKEN_FILE, SQL_SERVER_ENV,
                                                 SQL_TOKEN_ENV, client_token, cluster_credentials,
                                                 server_reachable, with_token)


#: The most rows `lakelog sql --max-rows` prints.
MAX_SQL_ROWS = 10_000
#: The SQL server's HTTP endpoint `lakelog sql` asks first (else the address file beside the token).
SQL_HTTP_ENV = "LAKELOG_SQL_HTTP_URL"
#: How long `lakelog sql` lets a query run through the HTTP endpoint (ms; the server cancels it then).
DEFAULT_SQL_TIMEOUT_MS = 600_000
#: The longest `--timeout-ms` (the SQL server's own limit).
MAX_SQL_TIMEOUT_MS = 600_000
#: How long a query over Spark Connect waits for the SQL server to register a topic the nodes know
#: (a topic created since the server's last refresh, `lakelog sql-server --refresh-ms`, 5 s).
NEW_VIEW_WAIT_S = 15.0
NEW_VIEW_POLL_S = 0.25


def cmd_sql(args: argparse.Namespace) -> int:
    """One query, or an interactive prompt when no query is given: through `lakelog sql-server`
    when one is reachable, else in a Spark session of this process."""
    import tempfile

    server = args.server or os.environ.get(SQL_SERVER_ENV) or DEFAULT_SQL_SERVER
    if not args.local and args.query is not None:
        done = _sql_over_http(args, server)  # no pyspark import on this path
        if done is not None:
            return done
    if not args.local and server_reachable(server):
        token = client_token(args)
        creds = cluster_credentials(args)
        with quiet_jvm(tempfile.gettempdir(), args.verbose):
            from pyspark.sql import SparkSession

            from lakelog.spark_log.sql_server.security import client_url

            url = client_url(server, **creds) if creds else with_token(server, token)
            spark = SparkSession.builder.remote(url).getOrCreate()
        try:
            try:
                names = _server_names(spark, args)
            except Exception as e:  # pyspark wraps the gRPC status in its own error classes, or not
                why = "a token is needed" if token is None else "its token differs"
                text = str(e)
                if "lakelog: " in text and ("UNAUTHENTICATED" in text or "PERMISSION_DENIED" in text):
                    reason = text.split("lakelog: ", 1)[1].splitlines()[0].strip().rstrip('"').strip()
                    raise CommandError(f"the SQL server at {server} refused the connection: {reason} (--user and "
                                       f"$LAKELOG_PASSWORD, or --api-key)") from None
                if "UNAUTHENTICATED" in str(e) or "unauthenticated" in str(e).lower():
                    raise CommandError(f"the SQL server at {server} refused the connection: {why} (--token-file, "
                                       f"${SQL_TOKEN_ENV})") from None
                raise
            if args.query is None:
                return repl(spark, args, _server_names)
            run_query(spark, args.query, _await_new_views(spark, args, names), args)
        finally:
            spark.stop()
        return 0
    with tempfile.TemporaryDirectory(prefix="lakelog-sql-") as warehouse:
        with quiet_jvm(warehouse, args.verbose):
            from lakelog.spark_log.session import remote_session

            spark = remote_session(args.remote, app_name="lakelog-sql", master=args.master,
                                   conf={"spark.sql.warehouse.dir": warehouse, **QUIET_CONF},
                                   register_source=False)
        try:
            spark.sparkContext.setLogLevel("ERROR")
            if args.query is None:
                return repl(spark, args, _register)
            names = _register(spark, args)
            run_query(spark, args.query, names, args)
        finally:
            spark.stop()
    return 0


def _sql_over_http(args: argparse.Namespace, server: str) -> int | None:
    """The query through the SQL server's `POST /v1/sql` (spark_log/sql_cli/http_client.py); None when that
    path cannot answer it and Spark Connect is next."""
    from lakelog.spark_log.sql_server import address as sql_address
    from lakelog.spark_log.sql_cli import http_client as sql_client

    url = args.http_server or os.environ.get(SQL_HTTP_ENV)
    if not url:
        url = sql_address.http_for(sql_address.path_beside(args.token_file or DEFAULT_SQL_TOKEN_FILE), server)
    if not url:
        return None
    token = client_token(args)
    creds = cluster_credentials(args)
    answer = sql_client.ask(url, args.query, max_rows=args.max_rows, timeout_ms=args.timeout_ms,
                            header=sql_client.authorization(creds, token))
    if answer is None:
        return None
    if isinstance(answer, sql_client.Refusal):
        if answer.status in (401, 403):
            reason = answer.message.removeprefix("lakelog: ")
            if creds:
                raise CommandError(f"the SQL server at {url} refused the connection: {reason} (--user and "
                                   f"$LAKELOG_PASSWORD, or --api-key)")
            why = "a token is needed" if token is None else "its token differs"
            raise CommandError(f"the SQL server at {url} refused the connection: {why} (--token-file, "
                               f"${SQL_TOKEN_ENV})")
        if answer.tables is not None:
            raise query_error(args.query, answer.message, answer.tables)
        raise CommandError(answer.message)
    print_rows(answer.columns, answer.rows, args.format)
    if answer.truncated:
        if len(answer.rows) >= args.max_rows:
            print(f"lakelog sql: output truncated at {args.max_rows} rows (--max-rows)", file=sys.stderr)
        else:
            print(f"lakelog sql: output truncated at {len(answer.rows)} rows (the SQL server's answer size limit; "
                  f"--local for more)", file=sys.stderr)
    return 0


def _register(spark, args: argparse.Namespace) -> list[str]:
    from lakelog.spark_log.hot_tail import HotTailError
    from lakelog.spark_log.tables import register_topics

    try:
        return register_topics(spark, args.remote, nodes=args.nodes)
    except HotTailError as e:
        print(f"lakelog sql: the nodes at {args.nodes} cannot be reached ({e}); lakelog.<topic> shows the "
              f"remote tier only", file=sys.stderr)
        return register_topics(spark, args.remote)


def _await_new_views(spark, args: argparse.Namespace, names: list[str]) -> list[str]:
    """A query naming `lakelog.<topic>` the SQL server has not registered yet (a topic created since
    its last refresh): if the nodes know the topic, wait up to `NEW_VIEW_WAIT_S` for the server's
    refresh to register it, so that the first query of a new topic answers. The names then."""
    from lakelog.spark_log.hot_tail import NodeAccess, list_topics

    missing = set(missing_names(args.query, names))
    if not missing:
        return names
    try:
        topics = {t.lower() for t in list_topics(NodeAccess.from_options(args.nodes, {}))}
    except Exception:  # the nodes cannot be reached: the query fails naming the missing table
        return names
    awaited = missing & topics
    deadline = time.monotonic() + NEW_VIEW_WAIT_S
    while awaited and time.monotonic() < deadline:
        time.sleep(NEW_VIEW_POLL_S)
        names = _server_names(spark, args)
        awaited -= {n.lower() for n in names}
    return names


def _server_names(spark, args: argparse.Namespace) -> list[str]:
    """The views a SQL server has registered (it refreshes them itself)."""
    from lakelog.spark_log.tables import SQL_DATABASE

    return sorted(r["tableName"] for r in spark.sql(f"SHOW TABLES IN {SQL_DATABASE}").collect())


def add_commands(sub, add, remote: argparse.ArgumentParser) -> None:
    """Add `sql` (`remote`: the options every Spark command takes, spark_log/cli.py)."""
    sql = add(sub, "sql", "sql", cmd_sql, parents=[remote],
              help="run Spark SQL over the topics (lakelog.<topic>: every record up to the high watermark; "
                   "lakelog.<topic>_table: the synced Delta table); no QUERY: an interactive prompt")
    sql.add_argument("query", metavar="QUERY", nargs="?", default=None)
    sql.add_argument("--nodes", metavar="URL", default=None,
                     help="a node, for the records the remote tier does not hold yet (default $LAKELOG_URL, "
                          "else http://127.0.0.1:8082)")
    sql.add_argument("--verbose", action="store_true", help="show Spark's own warnings and Java stack traces")
    sql.add_argument("--server", metavar="URL", default=None,
                     help=f"a lakelog sql-server to use when reachable (default ${SQL_SERVER_ENV}, else "
                          f"{DEFAULT_SQL_SERVER})")
    sql.add_argument("--local", action="store_true", help="always start a Spark session in this process")
    sql.add_argument("--http-server", metavar="URL", default=None,
                     help=f"the SQL server's HTTP endpoint to ask first (default ${SQL_HTTP_ENV}, else the address "
                          f"file beside the token file, data/sql.http, when it names the --server)")
    sql.add_argument("--timeout-ms", type=bounded_int(1, MAX_SQL_TIMEOUT_MS), default=DEFAULT_SQL_TIMEOUT_MS,
                     metavar="MS",
                     help="longest a query runs through the SQL server's HTTP endpoint (1-600000, default 600000; "
                          "the server then cancels it)")
    sql.add_argument("--token-file", metavar="PATH", default=None,
                     help=f"the SQL server's token (default ${SQL_TOKEN_ENV}, else ./{DEFAULT_SQL_TOKEN_FILE} when "
                          f"it exists: `lakelog up --sql` writes it)")
    for flag, what in (("--user", "a cluster user (or $LAKELOG_USER)"),
                       ("--password", "its password (prefer $LAKELOG_PASSWORD)"),
                       ("--api-key", "a cluster API key (or $LAKELOG_API_KEY)")):
        sql.add_argument(flag, metavar=flag[2:].upper().replace("-", "_"), default=None,
                         help=f"{what}: presented to a SQL server of a cluster with authentication on")
    sql.add_argument("--format", choices=("table", "json", "csv"), default="table")
    sql.add_argument("--max-rows", type=bounded_int(1, MAX_SQL_ROWS), default=1000, metavar="N",
                     help=f"most rows printed (1-{MAX_SQL_ROWS:,})")
