"""Schemathesis over a live node's `/openapi.json`: no request, valid or not, gets a 5xx answer.

The node is a real process. A few topics exist and hold records, and the path parameters draw from
them (and from the real cluster id) part of the time, so generated requests reach real data instead
of only 404s. The run is bounded (examples per operation) to stay well under a minute.

Each documented operation is its own test: schemathesis generates valid and invalid cases
(`APIOperation.as_strategy`, positive and negative modes) and `case.call_and_validate` runs the
`not_a_server_error` check against the live node. (`schemathesis.pytest.from_fixture`, the lazy
loader a module-scoped node would need, reads `request.node._nodeid`, which pytest 9 removed.)
Set LAKELOG_FUZZ_SEED to replay a run; the seed in use is printed.

The node runs with authentication and the authorizer on, and every generated request carries a super
user's credentials: the run covers the security middleware and the ACL, user and API key endpoints
too (tests/integration/test_security.py checks the refusals).
"""

from __future__ import annotations

import json
import os

import httpx
import pytest
import schemathesis
from schemathesis import GenerationMode
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig

from lakelog.logstore.record_batch import Record, build_batch
from tests.support.nodes import NodeProcess, start_node

JSON_V2 = "application/vnd.kafka.json.v2+json"
RECORDBATCH = "application/vnd.kafka.recordbatch"
HTTP_TIMEOUT_S = 30.0
TOPICS = ["fuzzed", "fuzzed-b", "fuzzed-c"]
MAX_EXAMPLES = 20
THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
SEED = int(os.environ.get("LAKELOG_FUZZ_SEED") or 20261125)  # fixed: a run repeats; set it to explore
CLUSTER_SECRET = "fuzz-cluster-secret-0123456789"
FUZZ_USER, FUZZ_PASSWORD = "fuzzer", "fuzzer-password-1"
AUTH = (FUZZ_USER, FUZZ_PASSWORD)


@pytest.fixture(scope="module")
def fuzz_node(tmp_path_factory) -> NodeProcess:
    # Bounded waits and topic sizes keep every generated request short. (Thousands of partitions
    # per topic run the process out of file descriptors: test_node_api covers that on its own.)
    n = start_node(tmp_path_factory.mktemp("fuzz-node"),
                   **{"fetch.max.wait.ms": "200", "max.partitions.per.topic": "64",
                      "offsets.topic.num.partitions": "4", "group.initial.rebalance.delay.ms": "0",
                      "authentication.enabled": "true", "authorizer.enabled": "true",
                      "super.users": f"User:{FUZZ_USER}", "cluster.secret": CLUSTER_SECRET})
    try:
        from lakelog.ingest_api.security.cluster_auth import ClusterAuth

        with httpx.Client(base_url=n.url, timeout=HTTP_TIMEOUT_S, auth=ClusterAuth(CLUSTER_SECRET.encode(), 0, principal="User:__cluster")) as c:
            cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
            r = c.post(f"/v3/clusters/{cid}/users", json={"name": FUZZ_USER, "password": FUZZ_PASSWORD})
            assert r.status_code == 201, r.text
        yield n
    finally:
        try:
            n.stop()
        finally:
            n.kill()


@pytest.fixture(scope="module")
def fuzz_cluster_id(fuzz_node) -> str:
    """Topics with records in every format, so fetches and offsets hit real data."""
    with httpx.Client(base_url=fuzz_node.url, timeout=HTTP_TIMEOUT_S, auth=AUTH) as c:
        cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
        for name in TOPICS:
            r = c.post(f"/v3/clusters/{cid}/topics", json={"topic_name": name, "partitions_count": 3})
            assert r.status_code == 201, r.text
            for p in range(3):
                body = {"records": [{"key": f"k{i}", "value": {"i": i}} for i in range(5)]}
                r = c.post(f"/topics/{name}/partitions/{p}", content=json.dumps(body).encode(),
                           headers={"Content-Type": JSON_V2})
                assert r.status_code == 200, r.text
                batch = build_batch([Record(i, 1_700_000_000_000 + i, b"k", b"\x00\xffraw") for i in range(3)])
                r = c.post(f"/topics/{name}/partitions/{p}", content=batch, headers={"Content-Type": RECORDBATCH})
                assert r.status_code == 200, r.text
    return cid


@pytest.fixture(scope="module")
def node_schema(fuzz_node, fuzz_cluster_id):
    print(f"schemathesis seed: {SEED} (LAKELOG_FUZZ_SEED={SEED} replays it)")
    config = SchemathesisConfig.from_dict({
        "seed": SEED,
        "request-timeout": HTTP_TIMEOUT_S,
        "headers": {"Authorization": httpx.BasicAuth(*AUTH)._auth_header},
        "dictionaries": {
            "topics": {"values": TOPICS},
            "clusters": {"values": [fuzz_cluster_id]},
            "partitions": {"values": [0, 1, 2]},
            "config_names": {"values": ["retention.ms", "segment.bytes", "cleanup.policy", "max.message.bytes"]},
            "offsets": {"values": [0, 1, 4, 5, 7]},
        },
        "parameters": {
            "path.topic": {"dictionary": "topics", "probability": 0.6},
            "path.topic_name": {"dictionary": "topics", "probability": 0.6},
            "path.partition_id": {"dictionary": "partitions", "probability": 0.6},
            "path.cluster_id": {"dictionary": "clusters", "probability": 0.8},
            "path.partition": {"dictionary": "partitions", "probability": 0.6},
            "path.name": {"dictionary": "config_names", "probability": 0.5},
            "query.offset": {"dictionary": "offsets", "probability": 0.5},
        },
    })
    return schemathesis.openapi.from_url(f"{fuzz_node.url}/openapi.json", config=config,
                                         timeout=HTTP_TIMEOUT_S, auth=AUTH)


#: Every operation the node documents. `test_every_documented_operation_is_fuzzed` keeps this
#: list honest, so a new route cannot escape the fuzzer.
OPERATIONS = [
    ("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics"),
    ("GET", "/topics"), ("GET", "/topics/{topic}"), ("POST", "/topics/{topic}"),
    ("GET", "/topics/{topic}/partitions"), ("GET", "/topics/{topic}/partitions/{partition}"),
    ("POST", "/topics/{topic}/partitions/{partition}"),
    ("GET", "/topics/{topic}/partitions/{partition}/records"),
    ("GET", "/topics/{topic}/partitions/{partition}/offsets"),
    ("GET", "/brokers"), ("POST", "/producers"),
    ("GET", "/v3/clusters"), ("GET", "/v3/clusters/{cluster_id}"),
    ("GET", "/v3/clusters/{cluster_id}/topics"), ("POST", "/v3/clusters/{cluster_id}/topics"),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}"), ("PATCH", "/v3/clusters/{cluster_id}/topics/{topic}"),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/configs"),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}"),
    ("PUT", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}"),
    ("DELETE", "/v3/clusters/{cluster_id}/topics/{topic}/configs/{name}"),
    ("POST", "/v3/clusters/{cluster_id}/topics/{topic}/configs:alter"),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions"),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}"),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas"),
    ("GET", "/v3/clusters/{cluster_id}/brokers"), ("GET", "/v3/clusters/{cluster_id}/brokers/{broker_id}"),
    ("POST", "/consumers/{group}"), ("DELETE", "/consumers/{group}/instances/{instance}"),
    ("POST", "/consumers/{group}/instances/{instance}/subscription"),
    ("GET", "/consumers/{group}/instances/{instance}/subscription"),
    ("DELETE", "/consumers/{group}/instances/{instance}/subscription"),
    ("POST", "/consumers/{group}/instances/{instance}/assignments"),
    ("GET", "/consumers/{group}/instances/{instance}/assignments"),
    ("GET", "/consumers/{group}/instances/{instance}/records"),
    ("POST", "/consumers/{group}/instances/{instance}/offsets"),
    ("GET", "/consumers/{group}/instances/{instance}/offsets"),
    ("POST", "/consumers/{group}/instances/{instance}/positions"),
    ("POST", "/consumers/{group}/instances/{instance}/positions/beginning"),
    ("POST", "/consumers/{group}/instances/{instance}/positions/end"),
    ("GET", "/groups"), ("GET", "/groups/{group}"), ("GET", "/groups/{group}/offsets"),
    ("POST", "/groups/{group}/offsets"),
    ("GET", "/stats/node"), ("GET", "/stats/cluster"), ("GET", "/stats/topics"), ("GET", "/stats/topics/{topic}"),
    ("GET", "/stats/events"), ("POST", "/stats/decode"),
    # Spark job runs (ingest_api/http/routers/jobs.py)
    ("GET", "/jobs/runs"), ("GET", "/jobs/runs/{run_id}"), ("POST", "/jobs/runs"),
    ("POST", "/jobs/runs/{run_id}/cancel"),
    ("POST", "/console/sql"),  # the console's SQL page (no SQL server here: refused, never a 5xx)
    ("GET", "/sql/access"),  # the SQL server's check of a client's principal and its readable topics
    ("GET", "/v3/clusters/{cluster_id}/acls"), ("POST", "/v3/clusters/{cluster_id}/acls"),
    ("DELETE", "/v3/clusters/{cluster_id}/acls"),
    ("GET", "/v3/clusters/{cluster_id}/users"), ("POST", "/v3/clusters/{cluster_id}/users"),
    ("DELETE", "/v3/clusters/{cluster_id}/users/{user}"),
    ("GET", "/v3/clusters/{cluster_id}/api-keys"), ("POST", "/v3/clusters/{cluster_id}/api-keys"),
    ("DELETE", "/v3/clusters/{cluster_id}/api-keys/{key_id}"),
    ("GET", "/v3/clusters/{cluster_id}/quotas"), ("PUT", "/v3/clusters/{cluster_id}/quotas/{principal}"),
    ("DELETE", "/v3/clusters/{cluster_id}/quotas/{principal}"),
    ("GET", "/"), ("POST", "/"),
    ("POST", "/v3/clusters/{cluster_id}/topics/{topic_name}/records"),
    ("POST", "/v3/clusters/{cluster_id}/topics/{topic_name}/records:batch"),
    ("POST", "/v3/clusters/{cluster_id}/transactions"),
    ("GET", "/v3/clusters/{cluster_id}/transactions/{transactional_id}"),
    ("POST", "/v3/clusters/{cluster_id}/transactions/{name}"),
    ("POST", "/v3/clusters/{cluster_id}/transactions/{transactional_id}/partitions"),
    ("POST", "/v3/clusters/{cluster_id}/transactions/{transactional_id}/offsets"),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups"),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}"),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers"),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}"),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments"),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments"
            "/{topic_name}/partitions/{partition_id}"),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lags"),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lags/{topic_name}/partitions/{partition_id}"),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lag-summary"),
    ("GET", "/v3/clusters/{cluster_id}/brokers/-/configs"),
    ("GET", "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs"),
    ("POST", "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs:alter"),
    ("GET", "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}"),
    ("PUT", "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}"),
    ("DELETE", "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}"),
    ("GET", "/v3/clusters/{cluster_id}/broker-configs"), ("POST", "/v3/clusters/{cluster_id}/broker-configs:alter"),
    ("GET", "/v3/clusters/{cluster_id}/broker-configs/{name}"), ("PUT", "/v3/clusters/{cluster_id}/broker-configs/{name}"),
    ("DELETE", "/v3/clusters/{cluster_id}/broker-configs/{name}"),
    ("GET", "/v3/clusters/{cluster_id}/topics/-/configs"), ("POST", "/v3/clusters/{cluster_id}/topics/-/configs:alter"),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/replicas/{broker_id}"),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/offset"),
    ("GET", "/v3/clusters/{cluster_id}/brokers/{broker_id}/partition-replicas"),
    # partition reassignment (ingest_api/http/routers/reassignment_v3.py)
    ("GET", "/v3/clusters/{cluster_id}/topics/-/partitions/-/reassignment"),
    ("POST", "/v3/clusters/{cluster_id}/topics/-/partitions/-/reassignment:alter"),
    ("POST", "/v3/clusters/{cluster_id}/topics/-/partitions/-/preferred-leader:elect"),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/-/reassignment"),
    ("GET", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/reassignment"),
    ("PATCH", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/reassignment"),
    ("DELETE", "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/reassignment"),
    ("DELETE", "/v3/clusters/{cluster_id}/brokers/{broker_id}"),
    # the dynamic replication throttle rates (ingest_api/http/routers/throttles_v3.py)
    *[(m, f"/v3/clusters/{{cluster_id}}/broker-configs/{key}") for key in THROTTLE_RATES for m in ("GET", "PUT", "DELETE")],
    *[(m, f"/v3/clusters/{{cluster_id}}/brokers/{{broker_id}}/configs/{key}") for key in THROTTLE_RATES
      for m in ("GET", "PUT", "DELETE")],
    ("POST", "/v3/clusters/{cluster_id}/acls:batch"),
    # The Schema Registry (ingest_api/http/routers/schemas.py)
    ("GET", "/schemas/types"), ("GET", "/schemas"), ("GET", "/schemas/ids/{schema_id}"),
    ("GET", "/schemas/ids/{schema_id}/schema"), ("GET", "/schemas/ids/{schema_id}/subjects"),
    ("GET", "/schemas/ids/{schema_id}/versions"), ("GET", "/subjects"),
    ("GET", "/subjects/{subject}/versions"), ("POST", "/subjects/{subject}/versions"),
    ("GET", "/subjects/{subject}/versions/{version}"), ("GET", "/subjects/{subject}/versions/{version}/schema"),
    ("GET", "/subjects/{subject}/versions/{version}/referencedby"),
    ("DELETE", "/subjects/{subject}/versions/{version}"), ("POST", "/subjects/{subject}"),
    ("DELETE", "/subjects/{subject}"), ("POST", "/compatibility/subjects/{subject}/versions"),
    ("POST", "/compatibility/subjects/{subject}/versions/{version}"),
    ("GET", "/config"), ("PUT", "/config"), ("DELETE", "/config"), ("GET", "/config/{subject}"),
    ("PUT", "/config/{subject}"), ("DELETE", "/config/{subject}"), ("GET", "/mode"), ("PUT", "/mode"),
    ("DELETE", "/mode"), ("GET", "/mode/{subject}"), ("PUT", "/mode/{subject}"), ("DELETE", "/mode/{subject}"),
    # Last: it may delete the seeded topics the other operations read.
    ("DELETE", "/v3/clusters/{cluster_id}/topics/{topic}"),
]


def test_every_documented_operation_is_fuzzed(node_schema):
    documented = set()
    for result in node_schema.get_all_operations():
        operation = result.ok()  # raises on an operation schemathesis cannot read
        documented.add((operation.method.upper(), operation.path))
    assert documented == set(OPERATIONS)


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_no_server_errors(node_schema, fuzz_node, method, path):
    operation = node_schema[path][method]
    modes = [GenerationMode.POSITIVE]
    if operation.path_parameters or operation.query or operation.body:
        modes.append(GenerationMode.NEGATIVE)  # nothing to make invalid otherwise
    strategy = st.one_of([operation.as_strategy(generation_mode=mode) for mode in modes])

    @seed(SEED)
    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def check_case(case) -> None:
        response = case.call_and_validate(checks=[not_a_server_error], timeout=HTTP_TIMEOUT_S)
        assert response.status_code < 500, (response.status_code, response.text)
        assert response.status_code not in (401, 403), response.text  # the credentials were sent and accepted

    try:
        check_case()
    except BaseException as e:
        e.add_note(f"replay with LAKELOG_FUZZ_SEED={SEED}")
        raise
    assert fuzz_node.proc.poll() is None, fuzz_node.read_log()[-4000:]


def test_fuzzing_left_the_node_healthy(fuzz_node, fuzz_cluster_id):
    """After the fuzz run (same module, same node): ready, and every remaining seeded partition
    still serves its records from its log start. (The fuzzer may have deleted topics or changed
    their retention and cleanup policy; those are valid requests.)"""
    with httpx.Client(base_url=fuzz_node.url, timeout=HTTP_TIMEOUT_S, auth=AUTH) as c:
        assert c.get("/readyz").status_code == 200
        topics = c.get("/topics").json()
        for name in (t for t in TOPICS if t in topics):
            for p in range(3):
                r = c.get(f"/topics/{name}/partitions/{p}/offsets")
                assert r.status_code == 200, r.text
                start, end = r.json()["beginning_offset"], r.json()["end_offset"]
                assert 0 <= start <= end and end >= 8  # the 8 seeded records, plus any the fuzzer produced
                r = c.get(f"/topics/{name}/partitions/{p}/records", params={"offset": start, "timeout": 0},
                          headers={"Accept": "application/vnd.kafka.binary.v2+json"})
                assert r.status_code == 200, r.text
                got = [x["offset"] for x in r.json()]
                assert got == sorted(set(got)) and all(start <= o < end for o in got)
                assert bool(got) == (start < end)
