"""Consumer groups on one real node: the REST Proxy v2 consumer API, commits, the stateless group API, errors."""

from __future__ import annotations

import os
import subprocess

import httpx
import pytest

from tests.support.faults import cluster_id, wait_for
from tests.support.nodes import LAKELOG, NodeProcess, start_node

V2 = {"Content-Type": "application/vnd.kafka.v2+json"}
JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"

#: Group settings that keep the tests quick (a real cluster uses the defaults).
FAST_GROUPS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "500",
    "group.coordinator.tick.ms": "50",
    "offsets.topic.num.partitions": "4",
}


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> NodeProcess:
    n = start_node(tmp_path_factory.mktemp("groups"), **FAST_GROUPS)
    try:
        yield n
    finally:
        try:
            n.stop()
        finally:
            n.kill()


def create_topic(url: str, name: str, partitions: int) -> None:
    r = httpx.post(f"{url}/v3/clusters/{cluster_id(url)}/topics", timeout=30,
                   json={"topic_name": name, "partitions_count": partitions, "replication_factor": 1})
    assert r.status_code == 201, r.text


def produce(url: str, topic: str, partition: int, values: list) -> None:
    r = httpx.post(f"{url}/topics/{topic}/partitions/{partition}", timeout=30, headers={"Content-Type": JSON_V2},
                   json={"records": [{"value": v} for v in values]})
    assert r.status_code == 200, r.text


def new_consumer(url: str, group: str, name: str, **cfg) -> str:
    body = {"name": name, "format": "json", "auto.offset.reset": "earliest", "auto.commit.enable": "false",
            "session.timeout.ms": 2000, "heartbeat.interval.ms": 200, **cfg}
    r = httpx.post(f"{url}/consumers/{group}", json=body, headers=V2, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["instance_id"] == name
    return r.json()["base_uri"]


def poll(base: str, want: int, timeout_s: float = 20) -> list[dict]:
    got: list[dict] = []

    def more():
        r = httpx.get(f"{base}/records", params={"timeout": 200}, headers={"Accept": JSON_V2}, timeout=30)
        assert r.status_code == 200, r.text
        got.extend(r.json())
        return len(got) >= want

    wait_for(more, timeout_s, f"{want} records from {base}", interval_s=0)
    return got


def assignment(base: str) -> list[tuple[str, int]]:
    r = httpx.get(f"{base}/assignments", timeout=10)
    assert r.status_code == 200, r.text
    return sorted((p["topic"], p["partition"]) for p in r.json()["partitions"])


def error(r: httpx.Response, status: int, code: int) -> str:
    assert r.status_code == status, r.text
    assert r.json()["error_code"] == code, r.text
    return r.json()["message"]


def test_subscribe_consume_commit_and_describe(node):
    url = node.url
    create_topic(url, "orders", 3)
    for p in range(3):
        produce(url, "orders", p, [f"o{p}-{i}" for i in range(5)])
    base = new_consumer(url, "billing", "c1")
    r = httpx.post(f"{base}/subscription", json={"topics": ["orders"]}, headers=V2, timeout=10)
    assert r.status_code == 204, r.text
    assert httpx.get(f"{base}/subscription", timeout=10).json() == {"topics": ["orders"]}
    recs = poll(base, 15)
    assert sorted(r["value"] for r in recs) == sorted(f"o{p}-{i}" for p in range(3) for i in range(5))
    assert assignment(base) == [("orders", 0), ("orders", 1), ("orders", 2)]
    # Nothing committed yet (auto-commit is off).
    committed = httpx.request("GET", f"{base}/offsets", timeout=10).json()["offsets"]
    assert {o["offset"] for o in committed} == {-1}
    # Commit without a body: the positions (everything returned).
    r = httpx.post(f"{base}/offsets", headers=V2, timeout=30)
    assert r.status_code == 200, r.text
    committed = httpx.request("GET", f"{base}/offsets", timeout=10,
                              json={"partitions": [{"topic": "orders", "partition": 1}]}).json()["offsets"]
    assert committed == [{"topic": "orders", "partition": 1, "offset": 5, "metadata": ""}]
    # Explicit commit with metadata (the entry names the last record consumed: offset 2 stores 3,
    # as Confluent's KafkaConsumerState.commitOffsets), then describe shows it with the lag.
    r = httpx.post(f"{base}/offsets", headers=V2, timeout=30,
                   json={"offsets": [{"topic": "orders", "partition": 0, "offset": 2, "metadata": "half"}]})
    assert r.status_code == 200, r.text
    d = httpx.get(f"{url}/groups/billing", timeout=30).json()
    assert d["state"] == "Stable" and d["partition_assignor"] == "range" and len(d["members"]) == 1
    rows = {p["partition"]: p for p in d["partitions"]}
    assert (rows[0]["current_offset"], rows[0]["log_end_offset"], rows[0]["lag"], rows[0]["metadata"]) == (3, 5, 2, "half")
    assert rows[1]["lag"] == 0 and rows[1]["consumer_id"] == d["members"][0]["member_id"]
    assert "billing" in {g["group_id"] for g in httpx.get(f"{url}/groups", timeout=30).json()["groups"]}
    # Seek back and read again; seek to the end and read nothing.
    r = httpx.post(f"{base}/positions", headers=V2, timeout=10,
                   json={"offsets": [{"topic": "orders", "partition": 2, "offset": 3}]})
    assert r.status_code == 204, r.text
    assert sorted(r["value"] for r in poll(base, 2)) == ["o2-3", "o2-4"]
    r = httpx.post(f"{base}/positions/beginning", headers=V2, timeout=10,
                   json={"partitions": [{"topic": "orders", "partition": 1}]})
    assert r.status_code == 204
    assert len(poll(base, 5)) == 5
    r = httpx.post(f"{base}/positions/end", headers=V2, timeout=10,
                   json={"partitions": [{"topic": "orders", "partition": p} for p in range(3)]})
    assert r.status_code == 204
    assert httpx.get(f"{base}/records", params={"timeout": 100}, headers={"Accept": JSON_V2}, timeout=10).json() == []
    # Delete: the group becomes empty, the committed offsets stay.
    assert httpx.delete(base, timeout=30).status_code == 204
    d = httpx.get(f"{url}/groups/billing", timeout=30).json()
    assert d["state"] == "Empty" and d["members"] == []
    assert {p["partition"]: p["current_offset"] for p in d["partitions"]} == {0: 3, 1: 5, 2: 5}
    error(httpx.get(f"{base}/assignments", timeout=10), 404, 40403)


def test_auto_commit_commits_returned_records(node):
    url = node.url
    create_topic(url, "clicks", 1)
    produce(url, "clicks", 0, list(range(10)))
    base = new_consumer(url, "auto", "a1", **{"auto.commit.enable": "true", "auto.commit.interval.ms": 50,
                                              "max.poll.records": 4})
    httpx.post(f"{base}/subscription", json={"topics": ["clicks"]}, headers=V2, timeout=10)
    # At most max.poll.records records, and at most max_bytes bytes of keys and values (but one record).
    first = wait_for(lambda: httpx.get(f"{base}/records", params={"timeout": 200}, timeout=10).json(), 20, "records")
    assert [r["value"] for r in first] == [0, 1, 2, 3]
    one = httpx.get(f"{base}/records", params={"timeout": 200, "max_bytes": 1}, timeout=10).json()
    assert [r["value"] for r in one] == [4]
    assert [r["value"] for r in poll(base, 5)] == [5, 6, 7, 8, 9]
    # The next records request (after the interval) commits what the previous ones returned.
    def committed_after_another_poll() -> bool:
        assert httpx.get(f"{base}/records", params={"timeout": 60}, timeout=10).json() == []
        return httpx.get(f"{url}/groups/auto/offsets", timeout=10).json()["offsets"] == [
            {"topic": "clicks", "partition": 0, "offset": 10, "metadata": ""}]

    wait_for(committed_after_another_poll, 20, "the auto-commit")
    produce(url, "clicks", 0, [10, 11])
    assert [r["value"] for r in poll(base, 2)] == [10, 11]
    assert httpx.delete(base, timeout=30).status_code == 204  # closing commits too
    assert httpx.get(f"{url}/groups/auto/offsets", timeout=10).json()["offsets"][0]["offset"] == 12
    # A new member of the group starts from the committed offset, not from the beginning.
    base2 = new_consumer(url, "auto", "a2")
    httpx.post(f"{base2}/subscription", json={"topics": ["clicks"]}, headers=V2, timeout=10)
    produce(url, "clicks", 0, [12])
    assert [r["value"] for r in poll(base2, 1)] == [12]
    httpx.delete(base2, timeout=30)


def test_stateless_commits_and_manual_assignment(node):
    url = node.url
    create_topic(url, "ledger", 2)
    produce(url, "ledger", 0, list(range(6)))
    r = httpx.post(f"{url}/groups/batch/offsets", headers=V2, timeout=30,
                   json={"offsets": [{"topic": "ledger", "partition": 0, "offset": 4, "metadata": "job-7"}]})
    assert r.status_code == 200, r.text
    assert httpx.get(f"{url}/groups/batch/offsets", timeout=10).json()["offsets"] == [
        {"topic": "ledger", "partition": 0, "offset": 4, "metadata": "job-7"}]
    # A manually assigned instance starts from the committed offset and commits as a simple consumer.
    base = new_consumer(url, "batch", "m1", **{"format": "binary"})
    r = httpx.post(f"{base}/assignments", headers=V2, timeout=10,
                   json={"partitions": [{"topic": "ledger", "partition": 0}]})
    assert r.status_code == 204, r.text
    assert assignment(base) == [("ledger", 0)]
    r = httpx.get(f"{base}/records", params={"timeout": 1000}, headers={"Accept": BINARY_V2}, timeout=10)
    assert [rec["offset"] for rec in r.json()] == [4, 5]
    # Its format is binary: asking for JSON records is refused.
    error(httpx.get(f"{base}/records", headers={"Accept": JSON_V2}, timeout=10), 406, 40601)
    assert httpx.post(f"{base}/offsets", headers=V2, timeout=30).status_code == 200
    assert httpx.get(f"{url}/groups/batch/offsets", timeout=10).json()["offsets"][0]["offset"] == 6
    # Subscribing an assigned instance is an illegal state; so is seeking an unassigned partition.
    error(httpx.post(f"{base}/subscription", json={"topics": ["ledger"]}, headers=V2, timeout=10), 409, 40903)
    error(httpx.post(f"{base}/positions", headers=V2, timeout=10,
                     json={"offsets": [{"topic": "ledger", "partition": 1, "offset": 0}]}), 409, 40903)
    httpx.delete(base, timeout=30)
    # While the group has active members, the stateless API may not commit for it.
    sub = new_consumer(url, "batch", "s1")
    httpx.post(f"{sub}/subscription", json={"topics": ["ledger"]}, headers=V2, timeout=10)
    wait_for(lambda: assignment(sub), 20, "an assignment")
    error(httpx.post(f"{url}/groups/batch/offsets", headers=V2, timeout=30,
                     json={"offsets": [{"topic": "ledger", "partition": 0, "offset": 0}]}), 409, 40914)
    httpx.delete(sub, timeout=30)


def test_new_member_resumes_after_the_last_committed_record(node):
    """Confluent v2: committing offset N (the last record consumed) stores N + 1, so whoever reads the
    partition next starts after it: no record is delivered twice."""
    url = node.url
    create_topic(url, "resume", 1)
    produce(url, "resume", 0, [f"r{i}" for i in range(10)])
    first = new_consumer(url, "resumers", "first")
    assert httpx.post(f"{first}/subscription", json={"topics": ["resume"]}, headers=V2, timeout=10).status_code == 204
    got = poll(first, 10)
    consumed = [r for r in got if r["offset"] <= 4]
    assert [r["value"] for r in consumed] == [f"r{i}" for i in range(5)]
    r = httpx.post(f"{first}/offsets", headers=V2, timeout=30,
                   json={"offsets": [{"topic": "resume", "partition": 0, "offset": consumed[-1]["offset"]}]})
    assert r.status_code == 200, r.text
    committed = httpx.request("GET", f"{first}/offsets", timeout=10,
                              json={"partitions": [{"topic": "resume", "partition": 0}]}).json()["offsets"]
    assert committed[0]["offset"] == 5
    assert httpx.delete(first, timeout=30).status_code == 204
    # A new member of the group (created with Confluent's `id` field, which names the instance).
    r = httpx.post(f"{url}/consumers/resumers", headers=V2, timeout=30,
                   json={"id": "second", "name": "ignored", "format": "json", "auto.offset.reset": "earliest",
                         "auto.commit.enable": "false", "session.timeout.ms": 2000, "heartbeat.interval.ms": 200})
    assert r.status_code == 200, r.text
    assert r.json()["instance_id"] == "second" and r.json()["base_uri"].endswith("/consumers/resumers/instances/second")
    second = r.json()["base_uri"]
    assert httpx.post(f"{second}/subscription", json={"topics": ["resume"]}, headers=V2, timeout=10).status_code == 204
    again = poll(second, 5)
    assert [r["offset"] for r in again] == [5, 6, 7, 8, 9]
    assert httpx.delete(second, timeout=30).status_code == 204


def test_records_accept_negotiation_follows_confluent(node):
    """The binary reader answers `binary.v2+json` and `application/vnd.kafka.v2+json`; the JSON reader
    `json.v2+json`; a wildcard leaves the instance's own format; a mismatch is 406 40601."""
    url = node.url
    create_topic(url, "negotiate", 1)
    produce(url, "negotiate", 0, ["a", "b"])
    binary = new_consumer(url, "negotiators", "bin", format="binary")
    jsonc = new_consumer(url, "negotiators", "js", format="json")
    for base in (binary, jsonc):
        r = httpx.post(f"{base}/assignments", headers=V2, timeout=10,
                       json={"partitions": [{"topic": "negotiate", "partition": 0}]})
        assert r.status_code == 204, r.text
    r = httpx.get(f"{binary}/records", params={"timeout": 1000}, headers={"Accept": "application/vnd.kafka.v2+json"},
                  timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith(BINARY_V2) and len(r.json()) == 2
    error(httpx.get(f"{jsonc}/records", params={"timeout": 0}, headers={"Accept": "application/vnd.kafka.v2+json"},
                    timeout=10), 406, 40601)
    error(httpx.get(f"{binary}/records", params={"timeout": 0}, headers={"Accept": JSON_V2}, timeout=10), 406, 40601)
    error(httpx.get(f"{binary}/records", params={"timeout": 0}, headers={"Accept": "text/html"}, timeout=10), 406, 40601)
    # q-values: JSON preferred over binary picks the JSON reader.
    r = httpx.get(f"{jsonc}/records", params={"timeout": 1000}, timeout=10,
                  headers={"Accept": f"{BINARY_V2};q=0.5, {JSON_V2}"})
    assert r.status_code == 200, r.text
    assert [x["value"] for x in r.json()] == ["a", "b"]
    for base in (binary, jsonc):
        assert httpx.delete(base, timeout=30).status_code == 204


def test_bad_requests_get_confluent_errors(node):
    url = node.url
    create_topic(url, "misc", 1)
    new_consumer(url, "errs", "dup")
    error(httpx.post(f"{url}/consumers/errs", json={"name": "dup"}, headers=V2, timeout=10), 409, 40902)
    error(httpx.post(f"{url}/consumers/errs", json={"name": "x", "format": "xml"}, headers=V2, timeout=10), 422, 42201)
    error(httpx.post(f"{url}/consumers/errs", json={"name": "x", "auto.offset.reset": "sometimes"}, headers=V2,
                     timeout=10), 422, 42201)
    error(httpx.post(f"{url}/consumers/errs", json={"name": "x", "session.timeout.ms": 10}, headers=V2, timeout=10),
          422, 42201)
    error(httpx.post(f"{url}/consumers/errs", json={"name": "bad/name"}, headers=V2, timeout=10), 422, 42201)
    error(httpx.post(f"{url}/consumers/errs", json={"name": "sp ace"}, headers=V2, timeout=10), 422, 42201)
    error(httpx.post(f"{url}/consumers/errs", content=b"{nope", headers=V2, timeout=10), 422, 42201)
    error(httpx.post(f"{url}/consumers/errs", content=b"<x/>", headers={"Content-Type": "application/xml"},
                     timeout=10), 415, 41501)
    base = f"{url}/consumers/errs/instances/dup"
    error(httpx.get(f"{url}/consumers/errs/instances/ghost/records", timeout=10), 404, 40403)
    error(httpx.post(f"{base}/subscription", json={"topics": []}, headers=V2, timeout=10), 422, 42201)
    error(httpx.post(f"{base}/subscription", json={"topics": ["misc"], "topic_pattern": "m.*"}, headers=V2,
                     timeout=10), 422, 42201)
    error(httpx.post(f"{base}/subscription", json={"topic_pattern": "("}, headers=V2, timeout=10), 422, 42201)
    error(httpx.post(f"{base}/assignments", json={"partitions": [{"topic": "nope", "partition": 0}]}, headers=V2,
                     timeout=10), 404, 40401)
    error(httpx.post(f"{base}/assignments", json={"partitions": [{"topic": "misc", "partition": -1}]}, headers=V2,
                     timeout=10), 422, 42201)
    error(httpx.post(f"{base}/offsets", json={"offsets": [{"topic": "misc", "partition": 0, "offset": "x"}]},
                     headers=V2, timeout=10), 422, 42201)
    error(httpx.post(f"{url}/groups/errs/offsets", json={"offsets": [{"topic": "misc", "partition": 0, "offset": 1,
                                                                      "metadata": "m" * 5000}]},
                     headers=V2, timeout=30), 413, 41310)
    error(httpx.post(f"{url}/groups/errs/offsets", json={"offsets": [{"topic": "misc", "partition": 9, "offset": 1}]},
                     headers=V2, timeout=30), 404, 40402)
    error(httpx.get(f"{url}/groups/never-used", timeout=30), 404, 40405)
    # The internal group calls, and instance requests claiming to be forwarded, need the cluster signature.
    error(httpx.post(f"{url}/internal/groups/list", json={}, timeout=10), 401, 40101)
    error(httpx.get(f"{base}/assignments", headers={"X-Lakelog-Forwarded-By": "2"}, timeout=10), 401, 40101)
    assert httpx.delete(base, timeout=30).status_code == 204


def lakelog(url: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "LAKELOG_URL"}
    return subprocess.run([LAKELOG, *args, "--bootstrap-server", url], capture_output=True, timeout=60, env=env)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (result.args, result.returncode, result.stdout, result.stderr)
    return result.stdout.decode()


def test_cli_consume_with_a_group_describe_and_reset(node):
    url = node.url
    create_topic(url, "audit", 2)
    produce(url, "audit", 0, [f"a{i}" for i in range(3)])
    produce(url, "audit", 1, [f"b{i}" for i in range(2)])
    out = ok(lakelog(url, "consume", "audit", "--group", "auditors", "--from-beginning", "--max-messages", "5"))
    assert sorted(out.split()) == ['"a0"', '"a1"', '"a2"', '"b0"', '"b1"']
    # It committed what it printed, and left the group: a second run finds nothing new.
    produce(url, "audit", 1, ["b2"])
    out = ok(lakelog(url, "consume", "audit", "--group", "auditors", "--timeout-ms", "1500"))
    assert out.split() == ['"b2"']
    assert ok(lakelog(url, "groups", "list")).split().count("auditors") == 1
    described = ok(lakelog(url, "groups", "describe", "auditors"))
    assert "has no active members" in described
    rows = [line.split() for line in described.splitlines() if line.startswith("auditors")]
    assert [(r[1], r[2], r[3], r[4], r[5]) for r in rows] == [("audit", "0", "3", "3", "0"), ("audit", "1", "3", "3", "0")]
    # reset-offsets: a dry run changes nothing; --execute does.
    plan = ok(lakelog(url, "groups", "reset-offsets", "auditors", "--topic", "audit:0", "--shift-by", "-2"))
    assert "dry run" in plan and [line.split()[-1] for line in plan.splitlines() if line.startswith("auditors")] == ["1"]
    assert httpx.get(f"{url}/groups/auditors/offsets", timeout=10).json()["offsets"][0]["offset"] == 3
    ok(lakelog(url, "groups", "reset-offsets", "auditors", "--topic", "audit", "--to-earliest", "--execute"))
    assert {o["offset"] for o in httpx.get(f"{url}/groups/auditors/offsets", timeout=10).json()["offsets"]} == {0}
    out = ok(lakelog(url, "consume", "audit", "--group", "auditors", "--max-messages", "6"))
    assert len(out.split()) == 6
    assert "does not exist" in lakelog(url, "groups", "describe", "nobody").stderr.decode()


def test_short_group_consume_waits_out_the_initial_rebalance_delay_and_leaves_the_group_empty(tmp_path):
    """With Kafka's default group.initial.rebalance.delay.ms (3 s), `--timeout-ms 3000` still gets the
    records: the wait for the first assignment does not count as idle. The tool leaves, so the group
    is Empty at once, and describe lists every partition of the topic, committed or not."""
    n = start_node(tmp_path, **{**FAST_GROUPS, "group.initial.rebalance.delay.ms": "3000"})
    try:
        url = n.url
        create_topic(url, "clicks", 3)
        produce(url, "clicks", 0, [f"c{i}" for i in range(60)])
        out = ok(lakelog(url, "consume", "clicks", "--group", "short", "--from-beginning", "--timeout-ms", "3000"))
        assert len(out.split()) == 60
        doc = httpx.get(f"{url}/groups/short", timeout=10).json()
        assert doc["state"] == "Empty" and doc["members"] == []
        rows = {(r["topic"], r["partition"]): (r["current_offset"], r["log_end_offset"], r["lag"])
                for r in doc["partitions"]}
        assert rows == {("clicks", 0): (60, 60, 0), ("clicks", 1): (None, 0, None), ("clicks", 2): (None, 0, None)}
        described = ok(lakelog(url, "groups", "describe", "short"))
        assert [line.split()[2] for line in described.splitlines() if line.startswith("short")] == ["0", "1", "2"]
        # A member stopped while its join is still waiting out the delay leaves too (it knew its member id).
        base = new_consumer(url, "stopped", "s1")
        httpx.post(f"{base}/subscription", json={"topics": ["clicks"]}, headers=V2, timeout=10)
        wait_for(lambda: httpx.get(f"{url}/groups/stopped", timeout=10).json()["state"] == "PreparingRebalance", 10,
                 "the join in progress")
        assert httpx.delete(base, timeout=30).status_code == 204
        assert httpx.get(f"{url}/groups/stopped", timeout=10).json()["members"] == []  # gone now, not at a timeout
        wait_for(lambda: httpx.get(f"{url}/groups/stopped", timeout=10).json()["state"] == "Empty", 20,
                 "Empty once the delay is over")
    finally:
        n.stop()


def test_more_partitions_rebalance_the_group(node):
    url = node.url
    create_topic(url, "growing", 2)
    a = new_consumer(url, "growers", "g1")
    b = new_consumer(url, "growers", "g2")
    for base in (a, b):
        httpx.post(f"{base}/subscription", json={"topics": ["growing"]}, headers=V2, timeout=10)
    wait_for(lambda: assignment(a) == [("growing", 0)] and assignment(b) == [("growing", 1)], 20, "a 1-1 split")
    r = httpx.patch(f"{url}/v3/clusters/{cluster_id(url)}/topics/growing", json={"partitions_count": 4}, timeout=30)
    assert r.status_code == 200 and r.json()["partitions_count"] == 4, r.text
    # The group leader sees the new partition count and rebalances: range gives each member two.
    wait_for(lambda: assignment(a) == [("growing", 0), ("growing", 1)]
             and assignment(b) == [("growing", 2), ("growing", 3)], 20, "a 2-2 split")
    produce(url, "growing", 3, ["new"])
    assert [r["value"] for r in poll(b, 1)] == ["new"]
    error(httpx.patch(f"{url}/v3/clusters/{cluster_id(url)}/topics/growing", json={"partitions_count": 3},
                      timeout=30), 400, 40002)  # Confluent v3: "Topic already has N partitions."
    for base in (a, b):
        httpx.delete(base, timeout=30)


def test_offsets_compacted_and_read_back_after_a_restart_and_idle_instances_expire(tmp_path):
    from lakelog.logstore.record_batch import iter_batches
    from lakelog.ingest_api.groups.offsets_codec import decode_key, decode_value

    n = start_node(tmp_path, **{**FAST_GROUPS, "offsets.topic.num.partitions": "1",
                                "offsets.topic.segment.bytes": "1024", "log.cleaner.backoff.ms": "100",
                                "consumer.instance.timeout.ms": "1000"})
    try:
        create_topic(n.url, "metrics", 2)
        # An instance nobody uses for consumer.instance.timeout.ms is deleted, and leaves its group.
        idle = new_consumer(n.url, "idlers", "sleepy")
        httpx.post(f"{idle}/subscription", json={"topics": ["metrics"]}, headers=V2, timeout=10)
        wait_for(lambda: httpx.get(f"{n.url}/groups/idlers", timeout=30).json()["state"] == "Stable", 20, "a member")
        wait_for(lambda: httpx.get(f"{n.url}/groups/idlers", timeout=30).json()["state"] == "Empty", 20,
                 "the idle instance to expire")
        error(httpx.get(f"{idle}/assignments", timeout=10), 404, 40403)
        for i in range(1, 61):
            r = httpx.post(f"{n.url}/groups/sums/offsets", headers=V2, timeout=30, json={"offsets": [
                {"topic": "metrics", "partition": i % 2, "offset": i}]})
            assert r.status_code == 200, r.text

        def offsets_records() -> list:
            r = httpx.get(f"{n.url}/topics/__consumer_offsets/partitions/0/offsets", timeout=10).json()
            start, end = r["beginning_offset"], r["end_offset"]
            out, offset = [], start
            while offset < end:
                r = httpx.get(f"{n.url}/topics/__consumer_offsets/partitions/0/records", timeout=10,
                              params={"offset": offset, "timeout": 0},
                              headers={"Accept": "application/vnd.kafka.recordbatch"})
                batches = [b for _, b in iter_batches(r.content)]
                out += [(rec.offset, decode_key(rec.key), decode_value(rec.value)) for b in batches
                        for rec in b.records() if rec.offset >= offset]
                offset = batches[-1].next_offset
            return out

        # The local cleaner compacts __consumer_offsets: older commits of a key go away.
        wait_for(lambda: len(offsets_records()) < 20, 30, "the compaction of __consumer_offsets")
        latest = {(k.topic, k.partition): v.offset for _, k, v in offsets_records()}
        assert latest == {("metrics", 0): 60, ("metrics", 1): 59}
        n.restart()
        # The restarted node leads the partition again and rebuilds the group's offsets from it.
        got = wait_for(lambda: (lambda r: r.status_code == 200 and r.json()["offsets"])(
            httpx.get(f"{n.url}/groups/sums/offsets", timeout=30)), 30, "the offsets after the restart")
        assert {(o["partition"], o["offset"]) for o in got} == {(0, 60), (1, 59)}
    finally:
        n.stop()
        n.kill()
