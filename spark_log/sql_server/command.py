"""`lakelog sql-server`: a long-lived Spark Connect server with `lakelog.<name>` registered and
refreshed (every `--refresh-ms`, and before a query of its HTTP endpoint that names a view not
registered yet: spark_log/sql_server/topic_views.py); with `--http-listen` also the JSON endpoint
(`spark_log/sql_server/endpoint.py`) the nodes' console and `lakelog sql` ask, with `--thrift-port` also the
Thrift JDBC/ODBC server."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from lakelog.spark_log.cli_common import QUIET_CONF, quiet_jvm
from lakelog.spark_log.sql_server.access import DEFAULT_SQL_SERVER, SQL_TOKEN_ENV, read_token, server_address


def cmd_sql_server(args: argparse.Namespace) -> int:
    """A long-lived Spark Connect server with `lakelog.<name>` registered and refreshed, until
    SIGINT/SIGTERM. Analysts connect with `SparkSession.builder.remote("sc://HOST:PORT")`."""
    import tempfile

    from lakelog.spark_log.hot_tail import HotTailError
    from lakelog.spark_log.session import remote_session
    from lakelog.spark_log.tables import register_topics
    from lakelog.spark_log.sql_server.topic_views import TopicViews

    host, port = server_address(args.listen)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    from lakelog.spark_log.sql_server import security as sql_security

    cluster_auth = args.cluster_auth == "on" or (args.cluster_auth == "auto"
                                                 and sql_security.cluster_authentication(args.nodes))
    if args.thrift_port is not None:  # refused before a JVM starts (spark_log/sql_server/thrift.py)
        from lakelog.spark_log.sql_server import thrift as sql_thrift

        sql_thrift.check_startable(host, args.thrift_port, cluster_auth)
    with tempfile.TemporaryDirectory(prefix="lakelog-sql-server-") as warehouse:
        with quiet_jvm(warehouse, args.verbose):
            if cluster_auth:  # the cluster's credentials and READ ACLs instead of the shared token
                from lakelog.spark_log.session import DELTA_CONF

                auth = sql_security.server_conf(DELTA_CONF["spark.sql.extensions"])
            else:
                auth = {"spark.connect.authenticate.token": read_token(args.token_file)} if args.token_file else {}
            spark = remote_session(args.remote, app_name="lakelog-sql-server", master=args.master, conf={
                "spark.sql.warehouse.dir": warehouse, **QUIET_CONF, **auth,
                "spark.connect.grpc.binding.address": host, "spark.connect.grpc.binding.port": str(port)})
        service = http = thrift = None
        try:
            spark.sparkContext.setLogLevel("ERROR")
            if cluster_auth:
                sql_security.configure_server(spark, args.nodes, args.remote, args.access_cache_ms)
                print("lakelog sql-server: the cluster's authentication is on: clients present a cluster user's "
                      "credentials and read only the topics they may READ", file=sys.stderr, flush=True)
            service = _start_connect_service(spark)
            port = int(service.localPort())  # the port bound (port 0 in --listen: one the system chose)
            print(f"lakelog sql-server: Spark SQL on sc://{host}:{port} over {args.remote} (topics from "
                  f"{args.nodes}); connect with `lakelog sql` or SparkSession.builder.remote(\"sc://{host}:{port}\")",
                  file=sys.stderr, flush=True)
            views = TopicViews(lambda: register_topics(spark, args.remote, nodes=args.nodes))
            http = _start_http_endpoint(spark, args, cluster_auth, f"sc://{host}:{port}", views)  # spark_log/sql_server/endpoint.py
            if args.thrift_port is not None:  # BI tools over JDBC/ODBC (HiveServer2's protocol)
                thrift = sql_thrift.start(spark, host, args.thrift_port,
                                          read_token(args.token_file) if args.token_file else None, warehouse)
                print(f"lakelog sql-server: Thrift JDBC/ODBC server on jdbc:hive2://{host}:{args.thrift_port}/default"
                      f"{' (the token is the password)' if args.token_file else ''}", file=sys.stderr, flush=True)
            known: list[str] | None = None
            warned = False
            while not stop.is_set():
                try:
                    names = views.refresh()
                    warned = False
                except HotTailError as e:
                    if not warned:
                        print(f"lakelog sql-server: the nodes cannot be reached ({e}); retrying", file=sys.stderr,
                              flush=True)
                        warned = True
                    names = known or []
                if names != known:
                    print(f"lakelog sql-server: tables {', '.join('lakelog.' + n for n in names) or '(none yet)'}",
                          file=sys.stderr, flush=True)
                    known = names
                stop.wait(args.refresh_ms / 1000)
        finally:
            if thrift is not None:
                sql_thrift.stop(thrift)
            if http is not None:
                http.stop()
                from lakelog.spark_log.sql_server import address as sql_address

                sql_address.remove(http.address_file)
            if service is not None:
                _stop_connect_service(service)
            spark.stop()
    return 0


def _start_http_endpoint(spark, args: argparse.Namespace, cluster_auth: bool, connect_url: str, views):
    """`--http-listen`: the JSON endpoint the nodes relay their console's SQL page to, and that
    `lakelog sql` asks first (`/v1/sql`, found through the address file beside the token); or None."""
    if not getattr(args, "http_listen", None):
        return None
    from lakelog.spark_log.sql_server import address as sql_address
    from lakelog.spark_log.sql_server import endpoint as sql_http
    from lakelog.spark_log.sql_server.users import UserSql

    http = sql_http.start(spark, args.http_listen, read_token(args.token_file), views)
    http.endpoint.users = UserSql(http.endpoint, cluster_auth=cluster_auth)
    host, _ = sql_http.parse_listen(args.http_listen)
    url = f"http://{host}:{http.port}"
    http.address_file = sql_address.write(sql_address.path_beside(args.token_file), connect_url, url)
    print(f"lakelog sql-server: the web console's SQL calls and `lakelog sql` on {url}", file=sys.stderr, flush=True)
    return http


def _start_connect_service(spark):
    """Start the Spark Connect service in this session's application; returns it.

    Not through `spark.plugins`: the plugin starts the service while the SparkContext starts, and
    the service then makes its base session (every client session is cloned from it) at the same
    time as pyspark makes its own, each with its own shared state when they race. Measured: clients
    then saw none of the global temporary views the server registered. Started here, after the
    session exists, the service's base session is this session's."""
    service = spark._jvm.java.lang.Class.forName(
        "org.apache.spark.sql.connect.service.SparkConnectService$").getField("MODULE$").get(None)
    service.start(spark.sparkContext._jsc.sc())
    return service


def _stop_connect_service(service) -> None:
    service.stop(getattr(service, "stop$default$1")(), getattr(service, "stop$default$2")())


def add_commands(sub, add, remote: argparse.ArgumentParser) -> None:
    """Add `sql-server` (`remote`: the options every Spark command takes, spark_log/cli.py)."""
    server = add(sub, "sql-server", "sql-server", cmd_sql_server, parents=[remote],
                 help="serve Spark SQL over the topics (Spark Connect) until Ctrl-C; lakelog sql uses it")
    server.add_argument("--listen", default=DEFAULT_SQL_SERVER, metavar="URL",
                        help=f"where to listen (default {DEFAULT_SQL_SERVER}; loopback unless you name a host; "
                             f"port 0: any free port, printed)")
    server.add_argument("--nodes", metavar="URL", default=None,
                        help="a node (or several, comma-separated: the first ready one is used), to list topics "
                             "and read what the remote tier does not hold yet (default $LAKELOG_URL, else "
                             "http://127.0.0.1:8082)")
    server.add_argument("--refresh-ms", type=int, default=5000, metavar="MS",
                        help="how often new topics and tables are looked for (default 5000)")
    server.add_argument("--verbose", action="store_true", help="show Spark's own warnings")
    server.add_argument("--token-file", metavar="PATH", default=None,
                        help="require clients to present the token this file holds (a bearer token on the Spark "
                             "Connect channel; `lakelog sql` reads it with --token-file or $" + SQL_TOKEN_ENV + ")")
    server.add_argument("--cluster-auth", choices=("auto", "on", "off"), default="auto",
                        help="clients authenticate with the cluster's users and API keys and topic READ ACLs apply "
                             "(auto: when a node says authentication is on; then --token-file is not used)")
    server.add_argument("--access-cache-ms", type=int, default=5000, metavar="MS",
                        help="with cluster authentication: how long a node's answer for one credential is reused "
                             "(0-3600000; an ACL change applies within it)")
    server.add_argument("--thrift-port", type=int, default=None, metavar="PORT",
                        help="also run Spark's Thrift JDBC/ODBC server (HiveServer2 protocol) on the --listen host: "
                             "jdbc:hive2://HOST:PORT/default, the token of --token-file as the password; not with "
                             "the cluster's authentication on")
    server.add_argument("--http-listen", metavar="URL", default=None,
                        help="also answer the web console's SQL calls (JSON) on http://HOST:PORT; needs "
                             "--token-file (the nodes present the same token)")
