"""`lakelog jobs`, `lakelog sql` and `lakelog sql-server`: the Spark side of the CLI.

pyspark is imported only when one of these commands runs, so the rest of the CLI starts fast.
The remote root defaults to `LAKELOG_REMOTE`, then the embedded default of `lakelog up`
(`file://$PWD/data/remote`).

| module | what |
|---|---|
| `cli.py` | the parsers' shared options (`add_commands`), the arguments' defaults and bounds (`resolve_remote`) |
| `cli_common.py` | the remote root's default, `KEY=VALUE`, `CommandError`, a quiet JVM |
| `cli_jobs.py` | `lakelog jobs run / schedule / list / package` |
| `sql_cli/command.py` | `lakelog sql`: the HTTP path, then Spark Connect, then a local session |
| `sql_cli/repl.py` | `lakelog sql`'s interactive prompt |
| `sql_cli/output.py` | rows as a table, JSON or CSV; a failed query as one line |
| `sql_cli/http_client.py` | `lakelog sql`'s `POST /v1/sql` (the standard library's `http.client`) |
| `sql_server/access.py` | the SQL server's URL, token and a cluster user's credentials, as clients present them |
| `sql_server/command.py` | `lakelog sql-server`: Spark Connect, the HTTP endpoint (`endpoint.py`, `users.py`), Thrift (`thrift.py`), credentials and ACLs (`security.py`), the address file (`address.py`) |
"""

from __future__ import annotations

import argparse
import os

from lakelog.spark_log.cli_common import REMOTE_ENV, default_remote, key_value
from lakelog.spark_log.sql_cli.command import DEFAULT_SQL_TIMEOUT_MS, MAX_SQL_ROWS


def add_commands(sub, add, *, only_sql: bool = False) -> None:
    """Add `jobs`, `sql` and `sql-server` to the top-level parser (`add` is cli/main.py's `_add`);
    `only_sql`: `sql` alone (what `lakelog sql` builds, so it loads nothing else)."""
    remote = argparse.ArgumentParser(add_help=False)
    remote.add_argument("--remote", default=None, metavar="URL",
                        help=f"remote root: s3://bucket/prefix or file:///path (default ${REMOTE_ENV}, "
                             f"else file://$PWD/data/remote, what `lakelog up` uses)")
    remote.add_argument("--master", metavar="URL", help="Spark master (default $LAKELOG_SPARK_MASTER, else local[*])")
    remote.add_argument("--config", action="append", type=key_value, metavar="KEY=VALUE",
                        help="override a topic config for this run (e.g. min.cleanable.dirty.ratio=0.1)")

    if not only_sql:
        from lakelog.spark_log.cli_jobs import add_commands as add_jobs_commands

        add_jobs_commands(sub, add, remote)
    from lakelog.spark_log.sql_cli.command import add_commands as add_sql_commands
    from lakelog.spark_log.sql_server.command import add_commands as add_sql_server_commands

    add_sql_commands(sub, add, remote)
    add_sql_server_commands(sub, add, remote)


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
