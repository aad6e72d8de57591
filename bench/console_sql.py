"""What the console's SQL page costs over a Spark Connect client: the same queries through a node's
`POST /console/sql` (the node asks the SQL server which views the query reads, checks them, then has
it run; `ingest_api/console_sql.py`), straight to the SQL server's JSON endpoint (`/v1/query`,
`spark_log/sql_http.py`), and through a Spark Connect client session kept open (what `lakelog sql`
does, without its process start), alternated in the same run.

    python bench/console_sql.py            # a few minutes on 2 cores
    python bench/console_sql.py --quick    # fewer rounds

A real node (filesystem remote tier) and a real `lakelog sql-server --http-listen`; the topic
`orders` with 2 partitions and 20,000 records (as bench/sql.py). Figures go to docs/benchmarks.md
(section "console-sql"): medians, and the relay's median over Spark Connect's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.harness import OtherCpu, conditions, git_revision, machine_info, markdown_table, rewrite_section  # noqa: E402
from tests.support.nodes import free_port, start_node  # noqa: E402

LAKELOG = str(Path(sys.executable).with_name("lakelog"))
QUERIES = {"SELECT 1": "SELECT 1",
           "group-by": "SELECT partition, count(*) AS n, max(offset) FROM lakelog.orders GROUP BY partition"}
TOKEN = "bench-console-sql-token-0123456789"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--note", default="", help="what else ran on the machine, for the report")
    args = ap.parse_args()
    rounds = 3 if args.quick else 7
    others = OtherCpu()
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="lakelog-bench-console-sql-") as tmp:
        remote = Path(tmp, "remote").as_uri()
        token_file = Path(tmp, "sql.token")
        token_file.write_text(TOKEN + "\n")
        connect_port, http_port = free_port(), free_port()
        node = start_node(Path(tmp), **{"remote.storage.url": remote, "console.sql.url": f"http://127.0.0.1:{http_port}",
                                        "console.sql.token.file": str(token_file)})
        server = None
        spark = None
        try:
            env = dict(os.environ, LAKELOG_URL=node.url, LAKELOG_REMOTE=remote, PYSPARK_PYTHON=sys.executable)
            subprocess.run([LAKELOG, "topics", "create", "orders", "--partitions", "2", "--config",
                            "remote.storage.enable=true", "--config", "segment.bytes=65536"], env=env, check=True,
                           capture_output=True, timeout=60)
            lines = "".join(f"order-{i}\n" for i in range(1, 20_001))
            subprocess.run([LAKELOG, "produce", "orders", "--batch-size", "200"], input=lines, text=True, env=env,
                           check=True, capture_output=True, timeout=300)
            server = subprocess.Popen([LAKELOG, "sql-server", "--listen", f"sc://127.0.0.1:{connect_port}",
                                       "--refresh-ms", "1000", "--token-file", str(token_file),
                                       "--http-listen", f"http://127.0.0.1:{http_port}"],
                                      env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True)
            said: list[str] = []
            threading.Thread(target=lambda: said.extend(iter(server.stderr.readline, "")), daemon=True).start()
            deadline = time.monotonic() + 600
            while not any("lakelog.orders" in s for s in said):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the SQL server did not start: " + "".join(said[-20:]))
                time.sleep(0.2)
            from pyspark.sql import SparkSession

            spark = SparkSession.builder.remote(f"sc://localhost:{connect_port}/;token={TOKEN}").getOrCreate()
            client = httpx.Client(timeout=600)
            auth = {"Authorization": f"Bearer {TOKEN}"}

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
                assert sum(int(r[1]) for r in rows) == 20_000, rows
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
                server.terminate()
                server.wait(120)
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
