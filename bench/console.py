"""The web console's JSON with many topics: one node process, N one-partition topics.

    python bench/console.py                  # 2,000 topics
    python bench/console.py --topics 500 --no-write

What is measured, each against a baseline in the same run (the existing v3 topic list, which every
Kafka console would call to list topics):

* page     — `GET /stats/topics?limit=50` (one page of the console's topic list: configs, sizes
             gathered from the node) against `GET /v3/clusters/{id}/topics` (every topic's name and
             counts, no sizes) [a page should cost less than the whole list].
* search   — `GET /stats/topics?limit=50&search=...` that matches a few topics (information).
* overview — `GET /stats/cluster` (nodes, counters, the health of every partition) (information).

Figures are printed and written to the "Web console" section of docs/benchmarks.md (`--no-write`
to skip). Timings are medians of interleaved rounds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.harness import (  # noqa: E402
    alternate,
    command_line,
    git_revision,
    load_average,
    markdown_table,
    paired_ratio,
    rewrite_section,
)
from tests.support.nodes import start_node  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="lakelog-bench-console-") as tmp:
        node = start_node(Path(tmp), **{"num.partitions": "1", "default.replication.factor": "1"})
        try:
            with httpx.Client(base_url=node.url, timeout=120) as c:
                cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
                started = time.perf_counter()
                for i in range(args.topics):
                    r = c.post(f"/v3/clusters/{cid}/topics", json={"topic_name": f"t-{i:05d}"})
                    assert r.status_code == 201, r.text
                created_s = time.perf_counter() - started

                def get(path: str):
                    def call() -> None:
                        r = c.get(path)
                        assert r.status_code == 200, r.text
                    return call

                timings = alternate({"v3 list": get(f"/v3/clusters/{cid}/topics"),
                                     "page": get("/stats/topics?limit=50&offset=1000"),
                                     "search": get("/stats/topics?limit=50&search=t-0199"),
                                     "overview": get("/stats/cluster")}, rounds=args.rounds)
        finally:
            try:
                node.stop(timeout_s=120)  # a clean shutdown of thousands of partitions takes a while
            except Exception:
                pass
            node.kill()
    base = timings["v3 list"]
    rows = [[name, f"{t.median * 1000:.1f}", f"{paired_ratio(t, base):.2f}x"] for name, t in timings.items()]
    table = markdown_table(["request", "median ms", "time vs the v3 list"], rows)
    print(f"{args.topics} topics created in {created_s:.1f} s")
    print(table)
    if not args.no_write:
        body = "\n".join([
            "## Web console (`bench/console.py`)", "",
            f"One node process, {args.topics:,} one-partition topics ({created_s:.1f} s to create them through "
            "the v3 API); medians of interleaved rounds, each request's time against `GET /v3/clusters/{id}/topics` "
            "(every topic, no sizes) in the same round.", "",
            table, "",
            f"`{command_line()}` at {git_revision(ROOT)}; load average {load_average()}.",
        ])
        rewrite_section(ROOT / "docs" / "benchmarks.md", "console", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
