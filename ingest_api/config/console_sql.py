"""The keys of the web console's SQL page (`ingest_api/http/console_sql.py` relays its queries), declared
once; `config/node.py` adds them to the node's keys."""

from __future__ import annotations

from lakelog.infra.config import ConfigDef

CONSOLE_SQL_CONFIG = (
    ConfigDef()
    .define("console.sql.url", str, "",
            "The SQL server's HTTP endpoint (`lakelog sql-server --http-listen`, http://HOST:PORT) the web "
            "console's SQL page runs queries through; empty: the SQL page says there is none. `lakelog up "
            "--sql` sets it.")
    .define("console.sql.token.file", str, "",
            "The file holding the SQL server's token (`lakelog sql-server --token-file`), presented on every "
            "call; read at each query, so a new token needs no restart.")
    .define("console.sql.timeout.ms", int, 60_000,
            "Longest a query of the console's SQL page runs; the SQL server then cancels it.",
            min=1000, max=10 * 60 * 1000, unit="ms")
    .define("console.sql.max.rows", int, 1000, "Most rows a query of the console's SQL page shows.",
            min=1, max=10_000)
)
