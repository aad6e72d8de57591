"""What client security costs on the hot path: two real `lakelog node` processes, same run, same client.

    python bench/security.py            # about a minute on 2 cores
    python bench/security.py --quick    # a smoke run

* plain   — a node with security off (the default);
* secured — the same node with authentication (HTTP Basic, SCRAM-SHA-256 credentials), the
            authorizer (one prefixed ACL) and quotas on (a request-rate quota far above what the
            run sends, so the buckets are consulted but never throttle).

Both take small binary produce requests (one RecordBatch of 10 x 100 B records per request, one
keep-alive connection, acks=1) and small fetches, alternated round by round
(`bench.harness.alternate`). The ratio secured/plain in requests/s says what a request pays for its
credential check (a cache hit after the first), its ACL decision (memoised) and its quota bucket.
Figures are printed (nothing is written: docs/security.md quotes a run).
"""

from __future__ import annotations

import argparse
import base64
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import alternate, paired_ratio  # noqa: E402
from lakelog.ingest_api.security.cluster_auth import ClusterAuth  # noqa: E402
from lakelog.logstore.record_batch import Record, build_batch  # noqa: E402
from tests.support.nodes import start_node  # noqa: E402

SECRET = "bench-security-cluster-secret-000"
PASSWORD = "bench-password-1"


def _setup(node, secured: bool) -> dict[str, str]:
    auth = ClusterAuth(SECRET.encode(), 0, principal="User:__cluster") if secured else None
    with httpx.Client(base_url=node.url, auth=auth, timeout=30) as c:
        cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
        if secured:
            assert c.post(f"/v3/clusters/{cid}/users", json={"name": "bench", "password": PASSWORD}).status_code == 201
            assert c.post(f"/v3/clusters/{cid}/acls", json={
                "principal": "User:bench", "resource_type": "TOPIC", "resource_name": "bench",
                "pattern_type": "PREFIXED", "operation": "ALL", "permission": "ALLOW"}).status_code == 201
        r = c.post(f"/v3/clusters/{cid}/topics", json={"topic_name": "bench", "partitions_count": 1})
        assert r.status_code == 201, r.text
    if not secured:
        return {}
    return {"Authorization": "Basic " + base64.b64encode(f"bench:{PASSWORD}".encode()).decode()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    requests = 300 if args.quick else 2000
    rounds = 3 if args.quick else 5
    batch = bytes(build_batch([Record(i, 1_700_000_000_000, b"k%d" % i, b"v" * 100) for i in range(10)]))
    with tempfile.TemporaryDirectory() as tmp:
        plain = start_node(Path(tmp) / "plain", **{"log.cleaner.enable": "false"})
        secured = start_node(Path(tmp) / "secured", **{
            "log.cleaner.enable": "false", "cluster.secret": SECRET, "authentication.enabled": "true",
            "authorizer.enabled": "true", "quota.request.rate": "1000000"})
        try:
            headers = {"plain": _setup(plain, False), "secured": _setup(secured, True)}
            clients = {name: httpx.Client(base_url=n.url, timeout=30, headers=headers[name])
                       for name, n in (("plain", plain), ("secured", secured))}

            def produce(name: str):
                def run() -> None:
                    c = clients[name]
                    for _ in range(requests):
                        r = c.post("/topics/bench/partitions/0?acks=1", content=batch,
                                   headers={"Content-Type": "application/vnd.kafka.recordbatch"})
                        assert r.status_code == 200, r.text
                return run

            def fetch(name: str):
                def run() -> None:
                    c = clients[name]
                    for _ in range(requests):
                        r = c.get("/topics/bench/partitions/0/records?offset=0&max_bytes=4096&timeout=0",
                                  headers={"Accept": "application/vnd.kafka.recordbatch"})
                        assert r.status_code == 200, r.text
                return run

            for what, case in (("binary produce", produce), ("binary fetch", fetch)):
                t = alternate({"plain": case("plain"), "secured": case("secured")}, rounds=rounds)
                print(f"{what}: plain {requests / t['plain'].median:,.0f} req/s, secured "
                      f"{requests / t['secured'].median:,.0f} req/s, secured/plain "
                      f"{1 / paired_ratio(t['secured'], t['plain']):.2f}x (median of {rounds} paired rounds)")
            for c in clients.values():
                c.close()
        finally:
            for n in (plain, secured):
                try:
                    n.stop()
                finally:
                    n.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
