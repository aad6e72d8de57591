"""What bench/sql.py and bench/console_sql.py share: a real node on a filesystem remote tier with
the README's topic (`orders`, 2 partitions, 20,000 records produced by `lakelog produce`), and a
real `lakelog sql-server` over it (tests/support/sql_server.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.nodes import start_node
from tests.support.sql_server import start_sql_server

LAKELOG = str(Path(sys.executable).with_name("lakelog"))
RECORDS = 20_000
GROUP_BY = "SELECT partition, count(*) AS n, max(offset) FROM lakelog.orders GROUP BY partition"
SERVER_START_TIMEOUT_S = 600.0


def orders_node(tmp: Path, **node_config: str):
    """(node, env): a node with the README's topic and records; `env` points the CLI at it."""
    remote = Path(tmp, "remote").as_uri()
    node = start_node(Path(tmp), **{"remote.storage.url": remote, **node_config})
    try:
        env = dict(os.environ, LAKELOG_URL=node.url, LAKELOG_REMOTE=remote, PYSPARK_PYTHON=sys.executable)
        subprocess.run([LAKELOG, "topics", "create", "orders", "--partitions", "2", "--config",
                        "remote.storage.enable=true", "--config", "segment.bytes=65536"], env=env, check=True,
                       capture_output=True, timeout=60)
        lines = "".join(f"order-{i}\n" for i in range(1, RECORDS + 1))
        subprocess.run([LAKELOG, "produce", "orders", "--batch-size", "200"], input=lines, text=True, env=env,
                       check=True, capture_output=True, timeout=300)
    except BaseException:
        node.stop()
        raise
    return node, env


def sql_server(tmp: Path, env: dict[str, str], **kw):
    """A `lakelog sql-server` over the node, its views registered (refreshed every second)."""
    return start_sql_server(Path(tmp), env, "--refresh-ms", "1000", wait_for_table="orders",
                            timeout_s=SERVER_START_TIMEOUT_S, **kw)
