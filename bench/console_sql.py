"""What the console's SQL page costs over a Spark Connect client: the same queries through a node's
`POST /console/sql` (the node asks the SQL server which views the query reads, checks them, then has
it run; `ingest_api/http/console_sql.py`), straight to the SQL server's JSON endpoint (`/v1/query`,
`spark_log/sql_server/endpoint.py`), and through a Spark Connect client session kept open (what `lakelog sql`
does, without its process start), alternated in the same run.

    python bench/console_sql.py            # a few minutes on 2 cores
    python bench/console_sql.py --quick    # fewer rounds

A real node (filesystem remote tier) and a real `lakelog sql-server --http-listen`; the topic
`orders` with 2 partitions and 20,000 records (as bench/sql.py). Figures go to docs/benchmarks.md
(section "console-sql"): medians, and the relay's median over Spark Connect's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.harness import OtherCpu, conditions, git_revision, machine_info, markdown_table, rewrite_section  # noqa: E402
from bench.sql_setup import GROUP_BY, RECORDS, orders_node, sql_server  # noqa: E402
from tests.support.nodes import free_port  # noqa: E402

QUERIES = {"SELECT 1": "SELECT 1", "group-by": GROUP_BY}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--note", default="", help="what else ran on the machine, for the report")
    args = ap.parse_args()
    rounds = 3 if args.quick else 7
    others = OtherCpu()
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="lakelog-bench-console-sql-") as tmp:
        token_file = Path(tmp, "sql.token")
        connect_port, http_port = free_port(), free_port()
        node, env = orders_node(Path(tmp), **{"console.sql.url": f"http://127.0.0.1:{http_port}",
                                              "console.sql.token.file": str(token_file)})
        server = None
        spark = None
        try:
            server = sql_server(Path(tmp), env, connect_port=connect_port, http_port=http_port, token_file=token_file)
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.remote(f"sc://localhost:{connect_port}/;token={server.token}").getOrCreate()
            client = httpx.Client(timeout=600)
            auth = {"Authorization": f"Bearer {server.token}"}

            def relay(q: str) -> list:
                r = client.post(node.url + "/console/sql", json={"query": q})
                r.raise_for_status()
                return r.json()["rows"]

            def direct(q: str) -> list:
                r = client.post(f"http://127.0.0.1:{http_port}/v1/query", json={"query": q}, headers=auth)
                r.raise_for_status()
                return r.json()["rows"]

            def connect(q: str) -> list:
                return [list(r) for r in spark.sql(q).collect()]

            paths = {"node `POST /console/sql`": relay, "SQL server `/v1/query`": direct,
                     "Spark Connect client": connect}
            for fn in paths.values():  # warm-up: each path's first query compiles its code
                rows = fn(QUERIES["group-by"])
                assert sum(int(r[1]) for r in rows) == RECORDS, rows
            for _ in range(rounds):  # alternated: a change of load falls on every path alike
                for qname, q in QUERIES.items():
                    for pname, fn in paths.items():
                        start = time.perf_counter()
                        fn(q)
                        times.setdefault((pname, qname), []).append(time.perf_counter() - start)
            client.close()
        finally:
            if spark is not None:
                spark.stop()
            if server is not None:
                server.stop()
            node.stop()
    busy = others.cpus()
    info = machine_info(tempfile.gettempdir())
    rows = []
    for pname in ("node `POST /console/sql`", "SQL server `/v1/query`", "Spark Connect client"):
        cells = [pname]
        for qname in QUERIES:
            t = times[(pname, qname)]
            cells.append(f"{statistics.median(t) * 1000:.0f} ms ({min(t) * 1000:.0f}-{max(t) * 1000:.0f})")
        rows.append(cells)
    ratio = {q: statistics.median(times[("node `POST /console/sql`", q)])
             / statistics.median(times[("Spark Connect client", q)]) for q in QUERIES}
    rows.append(["relay / Spark Connect"] + [f"{ratio[q]:.2f}x" for q in QUERIES])
    body = "\n".join([
        "## Console SQL (`bench/console_sql.py`)", "",
        f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at {git_revision(ROOT)}, {rounds} rounds "
        f"alternating the three paths; one node, 20,000 records in 2 partitions (most on the node: the hot-tail "
        f"path). Median (range) per query, as the caller waits for it.", "",
        markdown_table(["path", "`SELECT 1`", "README group-by"], rows), "",
        f"Machine: {info['nproc']} CPUs ({info['cpu']}), {info['memory']}, {info['python']}. "
        + conditions(info["nproc"], busy, args.note), ""])
    print(body)
    rewrite_section(ROOT / "docs" / "benchmarks.md", "console-sql", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
