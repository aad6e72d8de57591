"""`lakelog jobs run|schedule|list` and `lakelog sql`: the Spark side of the CLI.

pyspark is imported only when one of these commands runs, so the rest of the CLI starts fast.
The remote root defaults to `LAKELOG_REMOTE`, then the embedded default of `lakelog up`
(`file://$PWD/data/remote`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path

from lakelog.infra.errors import ErrorKind, LakelogError

#: = spark_log.jobs.REMOTE_ENV, not imported from there: `lakelog sql` does not load the jobs (a unit test checks).
REMOTE_ENV = "LAKELOG_REMOTE"

#: Default intervals of `lakelog jobs schedule` (seconds); `--every JOB=SECONDS` overrides, 0 disables.
DEFAULT_INTERVALS_S = {"retention": 300, "compaction": 600, "rebuild-index": 0, "sync-tables": 300}
MAX_SQL_ROWS = 10_000


def default_remote() -> str:
    return os.environ.get(REMOTE_ENV) or f"file://{Path('data/remote').resolve()}"


def _key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    return k.strip(), v


#: The CLI draws its own progress bar and prints its own summary: Spark's console bar stays off.
QUIET_CONF = {"spark.ui.showConsoleProgress": "false"}


def _session(remote: str, master: str | None, app: str):
    from lakelog.spark_log.session import remote_session

    spark = remote_session(remote, app_name=app, master=master, conf=QUIET_CONF)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _progress_runner(total_hint: str):
    """A rich progress bar fed by `run_job`'s plan and per-task callbacks (stderr, so stdout stays clean)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=False)
    state = {}

    def on_plan(n: int) -> None:
        state["task"] = progress.add_task(total_hint, total=n)

    def on_row(done: int) -> None:
        if "task" in state:
            progress.update(state["task"], completed=done)

    return progress, on_plan, on_row


def _print_summary(summary, out=sys.stdout) -> None:
    print(f"lakelog jobs run {summary.job}: {len(summary.topics)} topic(s), {summary.seconds:.1f}s", file=out)
    for row in summary.rows:
        if summary.job in ("compaction", "retention"):
            what = row["action"] + (f" ({row['reason']})" if row.get("reason") else "")
            extra = ""
            if row["action"] == "compacted":
                extra = (f" records {row['records_read']} -> {row['records_kept']}, segments "
                         f"{row['segments_replaced']} -> {row['segments_written']}")
            elif row["action"] == "expired":
                extra = f" {row['segments_expired']} segment(s), log start offset {row['log_start_offset']}"
            print(f"  {row['topic']}-{row['partition']}: {what}{extra}", file=out)
        elif summary.job == "rebuild-index":
            if row.get("index_action") != "ok":
                print(f"  {row['topic']}-{row['partition']} segment {row.get('base_offset', '?')} "
                      f"{row['segment_id']}: {row['index_action']} {row.get('detail', '')}".rstrip(), file=out)
        else:
            print(f"  {row['topic']}: +{row['rows_added']} rows -> {row['table']}", file=out)
    print(f"  totals: {json.dumps(summary.totals, sort_keys=True)}", file=out)


class CommandError(LakelogError):
    """A `jobs` or `sql` command cannot run as asked."""

    kind = ErrorKind.INVALID_REQUEST


def cmd_jobs_run(args: argparse.Namespace) -> int:
    from lakelog.spark_log.jobs import plan
    from lakelog.spark_log.runs import recorded_run, runner_name
    from lakelog.tiering.remote_scan import open_remote

    store = open_remote(args.remote)  # check the topics and configs before a JVM starts
    try:
        plan(store, args.job, args.topic, dict(args.config or []))
    except ValueError as e:
        raise CommandError(str(e)) from None
    finally:
        store.close()
    spark = _session(args.remote, args.master, f"lakelog-{args.job}")
    try:
        progress, on_plan, on_row = _progress_runner(args.job)
        with progress:
            summary = recorded_run(spark, args.job, args.remote, runner=runner_name("lakelog jobs run"),
                                   topics=args.topic, overrides=dict(args.config or []), force=args.force,
                                   rebuild_all=args.all, progress=on_row, on_plan=on_plan,
                                   delete_delay_ms=args.delete_delay_ms)
        _print_summary(summary)
        corrupt = [r for r in summary.rows if r.get("index_action") == "corrupt-log"]
        return 2 if corrupt else 0
    finally:
        spark.stop()


def cmd_jobs_list(args: argparse.Namespace) -> int:
    from lakelog.spark_log.jobs import __doc__ as doc

    for line in doc.splitlines()[3:9]:
        print(line)
    return 0


def cmd_jobs_schedule(args: argparse.Namespace) -> int:
    """Run the jobs at their intervals, and the runs asked for through a node (QUEUED records in the
    remote tier, looked for every --poll-ms), until SIGINT/SIGTERM (one Spark session, one run at a
    time). Every run is recorded in the remote tier (spark_log/runs.py)."""
    from lakelog.spark_log.jobs import JOB_NAMES
    from lakelog.spark_log.runs import recorded_run, runner_name, serve_queued
    from lakelog.tiering import job_runs
    from lakelog.tiering.remote_scan import open_remote

    intervals = dict(DEFAULT_INTERVALS_S)
    for job, seconds in args.every or []:
        if job not in JOB_NAMES:
            raise SystemExit(f"lakelog jobs schedule: unknown job {job!r}")
        intervals[job] = float(seconds)
    active = {j: s for j, s in intervals.items() if s > 0}
    if not 100 <= args.poll_ms <= 600_000:
        raise CommandError("--poll-ms must be between 100 and 600000")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    runner = runner_name("lakelog jobs schedule")
    store = open_remote(args.remote)
    spark = _session(args.remote, args.master, "lakelog-scheduler")
    next_run = {j: time.monotonic() for j in active}
    timed = ", ".join(f"{j} every {s:g}s" for j, s in active.items()) or "no timed jobs"
    print(f"lakelog jobs schedule: {timed}; runs asked for through the nodes every {args.poll_ms} ms; over "
          f"{args.remote}", file=sys.stderr, flush=True)
    runs = 0

    def beat() -> None:
        try:
            job_runs.write_scheduler_heartbeat(store, runner, active)
        except Exception as e:  # the heartbeat only informs the console
            print(f"lakelog jobs schedule: could not write the heartbeat: {e}", file=sys.stderr, flush=True)

    def beat_loop() -> None:  # also while a long run holds the main loop
        while not stop.wait(job_runs.HEARTBEAT_MS / 1000):
            beat()

    beat()
    threading.Thread(target=beat_loop, name="scheduler-heartbeat", daemon=True).start()
    try:
        while not stop.is_set():
            try:
                runs += serve_queued(spark, args.remote, runner, dict(args.config or []), stop.is_set)
            except Exception as e:  # the store is unreachable: try again at the next poll
                print(f"lakelog jobs schedule: could not read the queued runs: {e}", file=sys.stderr, flush=True)
            if args.max_runs and runs >= args.max_runs:
                return 0
            due = sorted((t, j) for j, t in next_run.items() if t <= time.monotonic())
            for _, job in due:
                if stop.is_set():
                    break
                try:
                    summary = recorded_run(spark, job, args.remote, runner=runner, overrides=dict(args.config or []))
                    print(f"lakelog jobs schedule: {job} {json.dumps(summary.totals, sort_keys=True)} "
                          f"in {summary.seconds:.1f}s", file=sys.stderr, flush=True)
                except Exception as e:  # a failed run is reported and retried at the next interval
                    print(f"lakelog jobs schedule: {job} failed: {e}", file=sys.stderr, flush=True)
                next_run[job] = time.monotonic() + active[job]
                runs += 1
                if args.max_runs and runs >= args.max_runs:
                    return 0
            wait = min([t - time.monotonic() for t in next_run.values()] + [args.poll_ms / 1000])
            stop.wait(max(0.1, wait))
    finally:
        stop.set()
        try:
            spark.stop()
        except Exception:  # Ctrl-C reaches the JVM too (same process group): it may be gone already
            pass
        store.close()
    return 0


def cmd_jobs_package(args: argparse.Namespace) -> int:
    """Write Lakelog's packages as a zip for `spark-submit --py-files` and print a command line."""
    import shlex

    from lakelog.spark_log.session import DELTA_CONF, jar_settings, s3a_conf, write_packages_zip

    out_dir = Path(args.output).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    zip_path = write_packages_zip(out_dir / "lakelog_packages.zip")
    # What executors (and this driver) import beyond pyspark and pyarrow, and the native decoder:
    # `--files`, loaded by the tasks (spark_log/executor_deps.py, native.py).
    import shutil

    from lakelog.spark_log.executor_deps import DEPS_ZIP, write_deps_zip
    from lakelog.spark_log.native import native_extension_path

    files = [write_deps_zip(out_dir / DEPS_ZIP)]
    native = native_extension_path()
    if native is not None:
        files.append(Path(shutil.copy(native, out_dir / native.name)))
    script = out_dir / "lakelog_job.py"
    script.write_text("import sys\nfrom lakelog.spark_log.jobs import main\nsys.exit(main())\n")
    master = args.master or "local[*]"
    # The driver's class path (and, on a cluster, LAKELOG_EXECUTOR_JARS_DIR or spark.jars): see session.py.
    conf = jar_settings(master)
    conf.update(DELTA_CONF)
    if args.remote.startswith(("s3://", "s3a://")):
        conf.update(s3a_conf())
    cmd = ["spark-submit", "--master", master, "--py-files", str(zip_path),
           "--files", ",".join(str(f) for f in files)]
    for k, v in conf.items():
        if "secret" in k or "access.key" in k or "credentials.provider" in k:
            continue  # credentials come from the environment on the cluster (S3A's default chain), never a command line
        cmd += ["--conf", f"{k}={v}"]
    cmd += [str(script), "JOB", "--remote", args.remote]
    print(f"wrote {zip_path} and {script}", file=sys.stderr)
    print(" ".join(shlex.quote(c) for c in cmd))
    return 0


#: Where `lakelog sql-server` listens by default, and where `lakelog sql` looks for it.
SQL_SERVER_ENV = "LAKELOG_SQL_URL"
DEFAULT_SQL_SERVER = "sc://127.0.0.1:15002"


#: The SQL server's HTTP endpoint `lakelog sql` asks first (else the address file beside the token).
SQL_HTTP_ENV = "LAKELOG_SQL_HTTP_URL"
#: How long `lakelog sql` lets a query run through the HTTP endpoint (ms; the server cancels it then).
DEFAULT_SQL_TIMEOUT_MS = 600_000


#: A shared secret clients of `lakelog sql-server --token-file` present (bearer token on the Connect channel).
SQL_TOKEN_ENV = "LAKELOG_SQL_TOKEN"
#: Where `lakelog up --sql` keeps its server's token (0600), and where `lakelog sql` looks for one.
DEFAULT_SQL_TOKEN_FILE = "data/sql.token"
MAX_TOKEN_BYTES = 1024


def _read_token(path: str) -> str:
    try:
        token = Path(path).read_text()[:MAX_TOKEN_BYTES + 1].strip()
    except OSError as e:
        raise CommandError(f"cannot read the token file {path}: {e.strerror}") from None
    if not token or len(token) > MAX_TOKEN_BYTES or not token.isprintable() or ";" in token:
        raise CommandError(f"the token file {path} must hold one line of at most {MAX_TOKEN_BYTES} printable "
                           f"characters, without ';'")
    return token


def _with_token(url: str, token: str | None) -> str:
    """The Connect URL with the bearer token. pyspark sends a token over a plain channel only to
    the host `localhost` (elsewhere it asks for TLS), so a loopback address is named so."""
    if token is None:
        return url
    host, port = _server_address(url)
    if host in ("127.0.0.1", "::1", "localhost"):
        host = "localhost"
    return f"sc://{host}:{port}/;token={token}"


def _cluster_credentials(args: argparse.Namespace) -> dict[str, str | None]:
    """A cluster user's credentials for the SQL server (flags, else $LAKELOG_API_KEY, $LAKELOG_USER /
    $LAKELOG_PASSWORD as the other commands read them); empty when none are given."""
    api_key = getattr(args, "api_key", None) or os.environ.get("LAKELOG_API_KEY")
    if api_key:
        return {"api_key": api_key}
    user = getattr(args, "user", None) or os.environ.get("LAKELOG_USER")
    if user:
        return {"user": user, "password": getattr(args, "password", None) or os.environ.get("LAKELOG_PASSWORD")}
    return {}


def _server_address(url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme != "sc" or not parts.hostname:
        raise CommandError(f"{url!r} is not a Spark Connect URL (sc://HOST:PORT)")
    return parts.hostname, parts.port or 15002


def _server_reachable(url: str) -> bool:
    import socket

    host, port = _server_address(url)
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def cmd_sql(args: argparse.Namespace) -> int:
    """One query, or an interactive prompt when no query is given: through `lakelog sql-server`
    when one is reachable, else in a Spark session of this process."""
    import tempfile

    server = args.server or os.environ.get(SQL_SERVER_ENV) or DEFAULT_SQL_SERVER
    if not args.local and args.query is not None:
        done = _sql_over_http(args, server)  # no pyspark import on this path
        if done is not None:
            return done
    if not args.local and _server_reachable(server):
        token = _client_token(args)
        creds = _cluster_credentials(args)
        with _quiet_jvm(tempfile.gettempdir(), args.verbose):
            from pyspark.sql import SparkSession

            from lakelog.spark_log.sql_security import client_url

            url = client_url(server, **creds) if creds else _with_token(server, token)
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
                return _repl(spark, args, _server_names)
            _run_query(spark, args.query, names, args)
        finally:
            spark.stop()
        return 0
    with tempfile.TemporaryDirectory(prefix="lakelog-sql-") as warehouse:
        with _quiet_jvm(warehouse, args.verbose):
            from lakelog.spark_log.session import remote_session

            spark = remote_session(args.remote, app_name="lakelog-sql", master=args.master,
                                   conf={"spark.sql.warehouse.dir": warehouse, **QUIET_CONF},
                                   register_source=False)
        try:
            spark.sparkContext.setLogLevel("ERROR")
            if args.query is None:
                return _repl(spark, args, _register)
            names = _register(spark, args)
            _run_query(spark, args.query, names, args)
        finally:
            spark.stop()
    return 0


def _client_token(args: argparse.Namespace) -> str | None:
    token = _read_token(args.token_file) if args.token_file else os.environ.get(SQL_TOKEN_ENV)
    if token is None and Path(DEFAULT_SQL_TOKEN_FILE).is_file():  # what `lakelog up --sql` wrote here
        token = _read_token(DEFAULT_SQL_TOKEN_FILE)
    return token


def _sql_over_http(args: argparse.Namespace, server: str) -> int | None:
    """The query through the SQL server's `POST /v1/sql` (spark_log/sql_client.py); None when that
    path cannot answer it and Spark Connect is next."""
    from lakelog.spark_log import sql_address, sql_client

    url = args.http_server or os.environ.get(SQL_HTTP_ENV)
    if not url:
        url = sql_address.http_for(sql_address.path_beside(args.token_file or DEFAULT_SQL_TOKEN_FILE), server)
    if not url:
        return None
    token = _client_token(args)
    creds = _cluster_credentials(args)
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
            raise _query_error(args.query, answer.message, answer.tables)
        raise CommandError(answer.message)
    _print_rows(answer.columns, answer.rows, args.format)
    if answer.truncated:
        if len(answer.rows) >= args.max_rows:
            print(f"lakelog sql: output truncated at {args.max_rows} rows (--max-rows)", file=sys.stderr)
        else:
            print(f"lakelog sql: output truncated at {len(answer.rows)} rows (the SQL server's answer size limit; "
                  f"--local for more)", file=sys.stderr)
    return 0


def _query_error(query: str, first: str, names: list[str]) -> CommandError:
    """A failed query as one line with its hint: the tables there are."""
    known = ", ".join(f"lakelog.{n}" for n in names) or "none yet: create a topic"
    missing = sorted({m.lower() for m in _LAKELOG_NAME.findall(query)} - {n.lower() for n in names})
    if missing:  # Spark words it as a table not found, or a "direct query on files" of format lakelog
        return CommandError(f"no table lakelog.{missing[0]} (tables: {known})")
    return CommandError(f"{first} (tables: {known})")


_LAKELOG_NAME = re.compile(r"\blakelog\s*\.\s*`?([A-Za-z0-9_]+)`?", re.IGNORECASE)


class _quiet_jvm:
    """While Spark's JVM starts, send file descriptor 2 to a log file: the JVM keeps that file as
    its stderr for its whole life, so its warnings and Java stack traces stay out of the terminal
    (`--verbose` keeps them). Python's own stderr is back on the terminal on exit."""

    def __init__(self, folder: str, verbose: bool) -> None:
        self.path = os.path.join(folder, "spark-jvm.log")
        self.verbose = verbose
        self.saved = -1

    def __enter__(self):
        if not self.verbose:
            # pyspark also logs every failed query to stderr (JSON, with the Java stack trace).
            import logging

            logging.getLogger("SQLQueryContextLogger").disabled = True
            sys.stderr.flush()
            self.saved = os.dup(2)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(fd, 2)
            os.close(fd)
        return self

    def __exit__(self, *exc) -> None:
        if self.saved >= 0:
            sys.stderr.flush()
            os.dup2(self.saved, 2)
            os.close(self.saved)


def _register(spark, args: argparse.Namespace) -> list[str]:
    from lakelog.spark_log.hot_tail import HotTailError
    from lakelog.spark_log.tables import register_topics

    try:
        return register_topics(spark, args.remote, nodes=args.nodes)
    except HotTailError as e:
        print(f"lakelog sql: the nodes at {args.nodes} cannot be reached ({e}); lakelog.<topic> shows the "
              f"remote tier only", file=sys.stderr)
        return register_topics(spark, args.remote)


def _run_query(spark, query: str, names: list[str], args: argparse.Namespace) -> None:
    from pyspark.errors import PySparkException

    try:
        df = spark.sql(query)
        rows = df.limit(args.max_rows + 1).collect()
    except PySparkException as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise _query_error(query, first, names) from None
    truncated = len(rows) > args.max_rows
    rows = rows[:args.max_rows]
    _print_rows(df.columns, rows, args.format)
    if truncated:
        print(f"lakelog sql: output truncated at {args.max_rows} rows (--max-rows)", file=sys.stderr)


def _server_names(spark, args: argparse.Namespace) -> list[str]:
    """The views a SQL server has registered (it refreshes them itself)."""
    from lakelog.spark_log.tables import SQL_DATABASE

    return sorted(r["tableName"] for r in spark.sql(f"SHOW TABLES IN {SQL_DATABASE}").collect())


def _repl(spark, args: argparse.Namespace, names_of) -> int:
    """An interactive prompt: statements end with `;`; `\\d` lists the tables, `\\d NAME` a table's
    columns, `\\q` quits. History is kept in ~/.lakelog_sql_history."""
    try:
        import readline
    except ImportError:  # not on every platform
        readline = None
    history = os.path.expanduser("~/.lakelog_sql_history")
    if readline is not None:
        try:
            readline.read_history_file(history)
        except OSError:
            pass
        readline.set_history_length(1000)
    print("lakelog sql: statements end with ';'. \\d lists tables, \\d NAME its columns, \\q quits.", file=sys.stderr)
    buffer: list[str] = []
    try:
        while True:
            try:
                line = input("lakelog> " if not buffer else "      -> ")
            except EOFError:
                print(file=sys.stderr)
                return 0
            stripped = line.strip()
            if not buffer and stripped.startswith("\\"):
                if stripped in ("\\q", "\\quit"):
                    return 0
                _describe(spark, names_of(spark, args), stripped[2:].strip())
                continue
            buffer.append(line)
            if not stripped.endswith(";"):
                continue
            query = "\n".join(buffer).strip().rstrip(";").strip()
            buffer.clear()
            if not query:
                continue
            try:
                _run_query(spark, query, names_of(spark, args), args)
            except LakelogError as e:
                print(f"lakelog sql: {e}", file=sys.stderr)
    finally:
        if readline is not None:
            try:
                readline.write_history_file(history)
            except OSError:
                pass


def _describe(spark, names: list[str], name: str) -> None:
    """`\\d`: the tables; `\\d NAME`: its columns."""
    from lakelog.spark_log.tables import SQL_DATABASE

    if not name:
        _print_rows(["name"], [[f"{SQL_DATABASE}.{n}"] for n in names], "table")
        return
    table = name if "." in name else f"{SQL_DATABASE}.{name}"
    try:
        fields = spark.table(table).schema.fields
    except Exception:
        print(f"lakelog sql: no table {table} (tables: {', '.join(f'{SQL_DATABASE}.{n}' for n in names)})",
              file=sys.stderr)
        return
    _print_rows(["column", "type"], [[f.name, f.dataType.simpleString()] for f in fields], "table")


def cmd_sql_server(args: argparse.Namespace) -> int:
    """A long-lived Spark Connect server with `lakelog.<name>` registered and refreshed, until
    SIGINT/SIGTERM. Analysts connect with `SparkSession.builder.remote("sc://HOST:PORT")`."""
    import tempfile

    from lakelog.spark_log.hot_tail import HotTailError
    from lakelog.spark_log.session import remote_session
    from lakelog.spark_log.tables import register_topics

    host, port = _server_address(args.listen)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    from lakelog.spark_log import sql_security

    cluster_auth = args.cluster_auth == "on" or (args.cluster_auth == "auto"
                                                 and sql_security.cluster_authentication(args.nodes))
    if args.thrift_port is not None:  # refused before a JVM starts (spark_log/sql_thrift.py)
        from lakelog.spark_log import sql_thrift

        sql_thrift.check_startable(host, args.thrift_port, cluster_auth)
    with tempfile.TemporaryDirectory(prefix="lakelog-sql-server-") as warehouse:
        with _quiet_jvm(warehouse, args.verbose):
            if cluster_auth:  # the cluster's credentials and READ ACLs instead of the shared token
                from lakelog.spark_log.session import DELTA_CONF

                auth = sql_security.server_conf(DELTA_CONF["spark.sql.extensions"])
            else:
                auth = {"spark.connect.authenticate.token": _read_token(args.token_file)} if args.token_file else {}
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
            http = _start_http_endpoint(spark, args, cluster_auth, f"sc://{host}:{port}")  # spark_log/sql_http.py
            if args.thrift_port is not None:  # BI tools over JDBC/ODBC (HiveServer2's protocol)
                thrift = sql_thrift.start(spark, host, args.thrift_port,
                                          _read_token(args.token_file) if args.token_file else None, warehouse)
                print(f"lakelog sql-server: Thrift JDBC/ODBC server on jdbc:hive2://{host}:{args.thrift_port}/default"
                      f"{' (the token is the password)' if args.token_file else ''}", file=sys.stderr, flush=True)
            known: list[str] | None = None
            warned = False
            while not stop.is_set():
                try:
                    names = register_topics(spark, args.remote, nodes=args.nodes)
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
                from lakelog.spark_log import sql_address

                sql_address.remove(http.address_file)
            if service is not None:
                _stop_connect_service(service)
            spark.stop()
    return 0


def _start_http_endpoint(spark, args: argparse.Namespace, cluster_auth: bool, connect_url: str):
    """`--http-listen`: the JSON endpoint the nodes relay their console's SQL page to, and that
    `lakelog sql` asks first (`/v1/sql`, found through the address file beside the token); or None."""
    if not getattr(args, "http_listen", None):
        return None
    from lakelog.spark_log import sql_address, sql_http
    from lakelog.spark_log.sql_users import UserSql

    http = sql_http.start(spark, args.http_listen, _read_token(args.token_file))
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


def _cell(v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "backslashreplace")
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if hasattr(v, "asDict"):
        return {k: _cell(x) for k, x in v.asDict().items()}
    if isinstance(v, list):
        return [_cell(x) for x in v]
    return v


def _print_rows(columns: list[str], rows, fmt: str) -> None:
    values = [[_cell(r[i]) for i in range(len(columns))] for r in rows]
    if fmt == "json":
        for vs in values:
            print(json.dumps(dict(zip(columns, vs)), default=str))
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(columns)
        for vs in values:
            w.writerow(["" if v is None else (json.dumps(v) if isinstance(v, (dict, list)) else v) for v in vs])
    else:
        text = [[("NULL" if v is None else str(v)) for v in vs] for vs in values]
        widths = [max([len(c)] + [len(t[i]) for t in text]) for i, c in enumerate(columns)]
        line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
        print(line)
        print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |")
        print(line)
        for t in text:
            print("| " + " | ".join(v.ljust(w) for v, w in zip(t, widths)) + " |")
        print(line)
        print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")


def add_commands(sub, add, *, only_sql: bool = False) -> None:
    """Add `jobs`, `sql` and `sql-server` to the top-level parser (`add` is cli/main.py's `_add`);
    `only_sql`: `sql` alone (what `lakelog sql` builds, so it loads nothing else)."""
    remote = argparse.ArgumentParser(add_help=False)
    remote.add_argument("--remote", default=None, metavar="URL",
                        help=f"remote root: s3://bucket/prefix or file:///path (default ${REMOTE_ENV}, "
                             f"else file://$PWD/data/remote, what `lakelog up` uses)")
    remote.add_argument("--master", metavar="URL", help="Spark master (default $LAKELOG_SPARK_MASTER, else local[*])")
    remote.add_argument("--config", action="append", type=_key_value, metavar="KEY=VALUE",
                        help="override a topic config for this run (e.g. min.cleanable.dirty.ratio=0.1)")

    if not only_sql:
        _add_jobs_commands(sub, add, remote)
    _add_sql_commands(sub, add, remote)


def _add_jobs_commands(sub, add, remote: argparse.ArgumentParser) -> None:
    from lakelog.spark_log.jobs import JOB_NAMES

    jobs = sub.add_parser("jobs", help="Spark jobs over the remote tier: compaction, retention, rebuild-index, sync-tables")
    jsub = jobs.add_subparsers(dest="jobs_command", required=True)
    run = add(jsub, "run", "jobs run", cmd_jobs_run, parents=[remote], help="run one job now")
    run.add_argument("job", choices=JOB_NAMES, metavar="NAME", help=" | ".join(JOB_NAMES))
    run.add_argument("--topic", action="append", metavar="T", help="only this topic (repeatable; default all)")
    run.add_argument("--force", action="store_true", help="compaction: clean even below min.cleanable.dirty.ratio")
    run.add_argument("--all", action="store_true", help="rebuild-index: rebuild every index, not only missing or damaged ones")
    run.add_argument("--delete-delay-ms", type=int, metavar="MS",
                     help="override remote.segment.delete.delay.ms for replaced or expired segments")
    schedule = add(jsub, "schedule", "jobs schedule", cmd_jobs_schedule, parents=[remote],
                   help="run the jobs at intervals until Ctrl-C (the same entry points work from cron or Airflow)")
    schedule.add_argument("--every", action="append", type=_key_value, metavar="JOB=SECONDS",
                          help="interval of a job (0 disables); defaults: " +
                               ", ".join(f"{j}={s}" for j, s in DEFAULT_INTERVALS_S.items()))
    schedule.add_argument("--max-runs", type=int, default=0, metavar="N", help="stop after N job runs (0: never)")
    schedule.add_argument("--poll-ms", type=int, default=2000, metavar="MS",
                          help="how often to look for runs asked for through a node's /jobs/runs (100-600000)")
    add(jsub, "list", "jobs list", cmd_jobs_list, help="list the jobs")
    package = add(jsub, "package", "jobs package", cmd_jobs_package, parents=[remote],
                  help="write Lakelog's packages for spark-submit --py-files and print the spark-submit command")
    package.add_argument("--output", default="dist", metavar="DIR", help="where to write the zip (default ./dist)")


def _add_sql_commands(sub, add, remote: argparse.ArgumentParser) -> None:

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
    sql.add_argument("--timeout-ms", type=int, default=DEFAULT_SQL_TIMEOUT_MS, metavar="MS",
                     help="longest a query runs through the SQL server's HTTP endpoint (1-600000, default 600000; "
                          "the server then cancels it)")
    sql.add_argument("--token-file", metavar="PATH", default=None,
                     help=f"the SQL server's token (default ${SQL_TOKEN_ENV}, else ./{DEFAULT_SQL_TOKEN_FILE} when "
                          f"it exists: `lakelog up --sql` writes it)")

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
    for flag, what in (("--user", "a cluster user (or $LAKELOG_USER)"),
                       ("--password", "its password (prefer $LAKELOG_PASSWORD)"),
                       ("--api-key", "a cluster API key (or $LAKELOG_API_KEY)")):
        sql.add_argument(flag, metavar=flag[2:].upper().replace("-", "_"), default=None,
                         help=f"{what}: presented to a SQL server of a cluster with authentication on")
    server.add_argument("--thrift-port", type=int, default=None, metavar="PORT",
                        help="also run Spark's Thrift JDBC/ODBC server (HiveServer2 protocol) on the --listen host: "
                             "jdbc:hive2://HOST:PORT/default, the token of --token-file as the password; not with "
                             "the cluster's authentication on")
    server.add_argument("--http-listen", metavar="URL", default=None,
                        help="also answer the web console's SQL calls (JSON) on http://HOST:PORT; needs "
                             "--token-file (the nodes present the same token)")
    sql.add_argument("--format", choices=("table", "json", "csv"), default="table")
    sql.add_argument("--max-rows", type=int, default=1000, metavar="N", help=f"most rows printed (at most {MAX_SQL_ROWS})")


def resolve_remote(args: argparse.Namespace) -> None:
    if getattr(args, "remote", "unset") is None:
        args.remote = default_remote()
    if not 0 <= getattr(args, "access_cache_ms", 0) <= 3_600_000:
        raise SystemExit("lakelog sql-server: --access-cache-ms must lie between 0 and 3600000")
    if not 100 <= getattr(args, "refresh_ms", 100) <= 3_600_000:
        raise SystemExit("lakelog sql-server: --refresh-ms must lie between 100 and 3600000")
    if getattr(args, "nodes", "unset") is None:
        args.nodes = os.environ.get("LAKELOG_URL") or "http://127.0.0.1:8082"
    if getattr(args, "http_listen", None) and not getattr(args, "token_file", None):
        raise SystemExit("lakelog sql-server: --http-listen needs --token-file")
    if args.command == "sql" and not 1 <= args.timeout_ms <= DEFAULT_SQL_TIMEOUT_MS:
        raise SystemExit(f"lakelog sql: --timeout-ms must lie between 1 and {DEFAULT_SQL_TIMEOUT_MS}")
    if getattr(args, "max_rows", 0) and not 1 <= args.max_rows <= MAX_SQL_ROWS:
        raise SystemExit(f"lakelog sql: --max-rows must lie between 1 and {MAX_SQL_ROWS}")
