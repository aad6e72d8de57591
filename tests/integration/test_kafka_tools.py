"""Apache Kafka's own Java tools against a 3-node cluster of real nodes: kafka-topics, the console
producer and consumer, kafka-consumer-groups (--describe with lag, --reset-offsets), kafka-configs
(topic configs, SCRAM users) and kafka-acls, over SASL/SCRAM (SHA-256 and SHA-512) on SASL_PLAINTEXT
and over TLS (SASL_SSL); an ACL refusal is seen by a Java consumer as TopicAuthorizationException.

The cluster is secured (authentication and the authorizer on, HTTPS between nodes); every node has
a SASL_PLAINTEXT and a SASL_SSL Kafka listener. JVM launches are few: each run checks what its
output shows, and HTTP checks the rest.
"""

from __future__ import annotations

import base64
import re
import ssl
import time
from pathlib import Path

import httpx
import pytest

from lakelog.ingest_api.security.cluster_auth import ClusterAuth
from tests.support.kafka_tools import (ACLS, CONFIGS, CONSOLE_CONSUMER, CONSOLE_PRODUCER, CONSUMER_GROUPS, TOPICS,
                                       KafkaTools, client_properties)
from tests.support.faults import wait_for
from tests.support.nodes import Cluster, free_port
from tests.support.tls import make_pki

SECRET = "test-cluster-secret-0123456789"  # Cluster's
ADMIN_PW, BOB_PW = "admin-pw-Kt19", "bob-pw-Rq73"
WAIT_S = 60


class ToolsCluster:
    """The running cluster, the root HTTP client, the tools and the client properties per identity."""

    def __init__(self, cluster: Cluster, pki, root: httpx.Client, cid: str, props: dict[str, Path],
                 ssl_ports: list[int]) -> None:
        self.cluster, self.pki, self.root, self.cid, self.props = cluster, pki, root, cid, props
        self.tools = KafkaTools()
        self.sasl = ",".join(n.bootstrap for n in cluster.nodes)
        self.sasl_ssl = ",".join(f"127.0.0.1:{p}" for p in ssl_ports)

    def end_offsets(self, topic: str, partitions: int) -> int:
        total = 0
        for p in range(partitions):
            r = self.root.get(f"/topics/{topic}/partitions/{p}/offsets")
            assert r.status_code == 200, r.text
            total += r.json()["end_offset"]
        return total


@pytest.fixture(scope="module")
def tc(tmp_path_factory):
    root_dir = tmp_path_factory.mktemp("kafkatools")
    pki = make_pki(root_dir / "pki")
    cluster = Cluster(root_dir / "c", 3, {
        "ssl.certfile": pki.server_cert, "ssl.keyfile": pki.server_key, "ssl.cafile": pki.ca_cert,
        "authentication.enabled": "true", "authorizer.enabled": "true", "super.users": "User:admin",
        "offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": "0", "fetch.max.wait.ms": "200",
        # No failover is tested here: sessions and elections that outlast a JVM starting on a busy machine.
        "broker.session.timeout.ms": "20000", "replica.lag.time.max.ms": "20000",
        "controller.quorum.election.timeout.ms": "5000"},
        kafka=True)
    ssl_ports = []
    for n in cluster.nodes:
        n.tls_ca = pki.ca_cert
        ssl_ports.append(free_port())
        n.overrides["listeners"] = (f"https://127.0.0.1:{n.port},SASL_PLAINTEXT://127.0.0.1:{n.kafka_port},"
                                    f"SASL_SSL://127.0.0.1:{ssl_ports[-1]}")
    try:
        cluster.start()
        with httpx.Client(base_url=cluster.node(1).url, timeout=30,
                          auth=ClusterAuth(SECRET.encode(), 0, principal="User:__cluster"),
                          verify=ssl.create_default_context(cafile=pki.ca_cert)) as root:
            cid = root.get("/v3/clusters").json()["data"][0]["cluster_id"]
            r = root.post(f"/v3/clusters/{cid}/users", json={"name": "admin", "password": ADMIN_PW})
            assert r.status_code == 201, r.text
            props = {
                "admin-256": client_properties(root_dir / "admin-256.properties", "admin", ADMIN_PW, "SCRAM-SHA-256"),
                "admin-512-tls": client_properties(root_dir / "admin-512-tls.properties", "admin", ADMIN_PW,
                                                   "SCRAM-SHA-512", ca_pem=pki.ca_cert),
                "bob-512": client_properties(root_dir / "bob-512.properties", "bob", BOB_PW, "SCRAM-SHA-512"),
                "bob-256-tls": client_properties(root_dir / "bob-256-tls.properties", "bob", BOB_PW,
                                                 "SCRAM-SHA-256", ca_pem=pki.ca_cert),
            }
            yield ToolsCluster(cluster, pki, root, cid, props, ssl_ports)
    finally:
        cluster.stop()


def test_kafka_topics_creates_lists_describes_alters_and_deletes(tc):
    admin = ("--bootstrap-server", tc.sasl, "--command-config", str(tc.props["admin-256"]))
    tc.tools.run(TOPICS, *admin, "--create", "--topic", "tools-topic", "--partitions", "2",
                 "--replication-factor", "3", "--config", "retention.ms=7200000")
    tc.tools.run(TOPICS, *admin, "--alter", "--topic", "tools-topic", "--partitions", "3")
    listed = tc.tools.run(TOPICS, *admin, "--list").stdout.split()
    assert "tools-topic" in listed and "__consumer_offsets" not in listed  # internal topics are left out
    out = tc.tools.run(TOPICS, *admin, "--describe", "--topic", "tools-topic").stdout
    assert re.search(r"PartitionCount: 3\s+ReplicationFactor: 3", out), out
    assert "retention.ms=7200000" in out
    rows = re.findall(r"Partition: (\d+)\s+Leader: (\d+)\s+Replicas: ([\d,]+)\s+Isr: ([\d,]+)", out)
    assert sorted(int(p) for p, *_ in rows) == [0, 1, 2]
    assert all(len(replicas.split(",")) == 3 and leader in replicas.split(",") for _, leader, replicas, _ in rows)
    assert tc.root.get(f"/v3/clusters/{tc.cid}/topics/tools-topic").json()["partitions_count"] == 3  # HTTP agrees
    tc.tools.run(TOPICS, *admin, "--delete", "--topic", "tools-topic")
    deadline = time.monotonic() + WAIT_S
    while tc.root.get(f"/v3/clusters/{tc.cid}/topics/tools-topic").status_code != 404 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert tc.root.get(f"/v3/clusters/{tc.cid}/topics/tools-topic").status_code == 404


def _lag(describe_out: str, topic: str) -> tuple[int, int]:
    """(sum of CURRENT-OFFSET, sum of LAG) of a topic's rows in kafka-consumer-groups --describe."""
    current = lag = 0
    for line in describe_out.splitlines():
        cols = line.split()
        if len(cols) >= 6 and cols[1] == topic and cols[2].isdigit():
            current += int(cols[3])
            lag += int(cols[5])
    return current, lag


def test_console_producer_and_consumer_and_consumer_groups_over_sasl_ssl(tc):
    r = tc.root.post(f"/v3/clusters/{tc.cid}/topics", json={"topic_name": "tools-events", "partitions_count": 3,
                                                             "replication_factor": 3})
    assert r.status_code == 201, r.text
    tls = str(tc.props["admin-512-tls"])  # SCRAM-SHA-512 over TLS
    lines = [f"event-{i}" for i in range(30)]
    tc.tools.run(CONSOLE_PRODUCER, "--bootstrap-server", tc.sasl_ssl, "--topic", "tools-events",
                 "--producer.config", tls, "--producer-property", "acks=all", stdin="\n".join(lines) + "\n")
    assert tc.end_offsets("tools-events", 3) == 30
    consumer = (CONSOLE_CONSUMER, "--bootstrap-server", tc.sasl_ssl, "--topic", "tools-events", "--group", "g-tools",
                "--consumer.config", tls, "--timeout-ms", str(WAIT_S * 1000))
    res = tc.tools.run(*consumer, "--from-beginning", "--max-messages", "30")
    assert sorted(res.stdout.split()) == sorted(lines), res.stderr[-4000:]
    # Ten more records over HTTP, into the partition the producer's sticky partitioner filled (the
    # group's committed offsets may name that partition alone): the group lags by ten.
    ends = {p: tc.root.get(f"/topics/tools-events/partitions/{p}/offsets").json()["end_offset"] for p in range(3)}
    filled = max(ends, key=ends.get)
    r = tc.root.post("/topics/tools-events", headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
                     json={"records": [{"value": base64.b64encode(f"late-{i}".encode()).decode(), "partition": filled}
                                       for i in range(10)]})
    assert r.status_code == 200, r.text
    groups = (CONSUMER_GROUPS, "--bootstrap-server", tc.sasl_ssl, "--command-config", tls, "--group", "g-tools")
    described = tc.tools.run(*groups, "--describe").stdout
    assert _lag(described, "tools-events") == (30, 10), described
    reset = tc.tools.run(*groups, "--reset-offsets", "--to-earliest", "--execute", "--topic", "tools-events").stdout
    assert len(re.findall(r"tools-events\s+\d+\s+0\s*$", reset, re.M)) == 3, reset
    # The group resumes from the earliest offsets: all forty records again.
    again = tc.tools.run(*consumer, "--max-messages", "40")
    assert sorted(again.stdout.split()) == sorted(lines + [f"late-{i}" for i in range(10)]), again.stderr[-4000:]


def test_kafka_configs_and_kafka_acls_and_a_refusal_seen_by_a_java_consumer(tc):
    for topic in ("tools-shared", "tools-secret"):
        r = tc.root.post(f"/v3/clusters/{tc.cid}/topics", json={"topic_name": topic, "partitions_count": 1})
        assert r.status_code == 201, r.text
    admin = ("--bootstrap-server", tc.sasl, "--command-config", str(tc.props["admin-256"]))
    # A topic config, altered and described by kafka-configs, and seen over HTTP.
    tc.tools.run(CONFIGS, *admin, "--alter", "--entity-type", "topics", "--entity-name", "tools-shared",
                 "--add-config", "retention.ms=3600000,cleanup.policy=compact")
    out = tc.tools.run(CONFIGS, *admin, "--describe", "--entity-type", "topics", "--entity-name", "tools-shared").stdout
    assert "retention.ms=3600000" in out and "cleanup.policy=compact" in out, out
    configs = {c["name"]: c["value"] for c in tc.root.get(f"/v3/clusters/{tc.cid}/topics/tools-shared/configs")
               .json()["data"]}
    assert configs["retention.ms"] == "3600000" and configs["cleanup.policy"] == "compact"
    # A user made by kafka-configs (AlterUserScramCredentials: the tool sends salted passwords), and a
    # quota of it (AlterClientQuotas; the tool alters the two in separate runs).
    user = ("--alter", "--entity-type", "users", "--entity-name", "bob", "--add-config")
    tc.tools.run(CONFIGS, *admin, *user, f"SCRAM-SHA-512=[iterations=8192,password={BOB_PW}],"
                                         f"SCRAM-SHA-256=[password={BOB_PW}]")
    tc.tools.run(CONFIGS, *admin, *user, "consumer_byte_rate=1048576")
    out = tc.tools.run(CONFIGS, *admin, "--describe", "--entity-type", "users", "--entity-name", "bob").stdout
    assert "SCRAM-SHA-256=iterations=4096" in out and "SCRAM-SHA-512=iterations=8192" in out, out
    assert "consumer_byte_rate=1048576" in out, out
    quotas = tc.root.get(f"/v3/clusters/{tc.cid}/quotas").json()["data"]
    assert quotas == [{"principal": "User:bob", "quotas": {"consumer.byte.rate": 1048576}}]
    users = {u["name"]: u for u in tc.root.get(f"/v3/clusters/{tc.cid}/users").json()["data"]}
    assert [c["mechanism"] for c in users["bob"]["credentials"]] == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    # ACLs: bob may read tools-shared* with groups g-bob* (the tool gives both the PREFIXED pattern); nothing else.
    tc.tools.run(ACLS, *admin, "--add", "--allow-principal", "User:bob", "--operation", "Read", "--topic",
                 "tools-shared", "--resource-pattern-type", "prefixed", "--group", "g-bob")
    listed = tc.tools.run(ACLS, *admin, "--list").stdout
    assert "name=tools-shared, patternType=PREFIXED" in listed and "name=g-bob, patternType=PREFIXED" in listed
    assert listed.count("principal=User:bob, host=*, operation=READ, permissionType=ALLOW") == 2, listed
    # The node answering HTTP applies the controller's ACL records a moment after the one the tool asked.
    def bobs_acls() -> set[tuple[str, str, str]]:
        return {(a["resource_type"], a["resource_name"], a["pattern_type"])
                for a in tc.root.get(f"/v3/clusters/{tc.cid}/acls?principal=User:bob").json()["data"]}
    wait_for(lambda: bobs_acls() == {("TOPIC", "tools-shared", "PREFIXED"), ("GROUP", "g-bob", "PREFIXED")}, 10,
             "bob's two ACLs over HTTP")
    r = tc.root.post("/topics/tools-shared", headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
                     json={"records": [{"key": base64.b64encode(b"k").decode(),
                                        "value": base64.b64encode(b"for-bob").decode()}]})  # compacted: keyed
    assert r.status_code == 200, r.text
    # bob authenticates with SCRAM-SHA-512 on SASL_PLAINTEXT and reads what the ACL allows ...
    as_bob = (CONSOLE_CONSUMER, "--group", "g-bob", "--from-beginning", "--timeout-ms", str(WAIT_S * 1000))
    got = tc.tools.run(*as_bob, "--bootstrap-server", tc.sasl, "--topic", "tools-shared", "--max-messages", "1",
                       "--consumer.config", str(tc.props["bob-512"]))
    assert got.stdout.split() == ["for-bob"], got.stderr[-4000:]
    # ... and, with SCRAM-SHA-256 over TLS, is refused the topic no ACL gives him.
    refused = tc.tools.run(*as_bob, "--bootstrap-server", tc.sasl_ssl, "--topic", "tools-secret", "--max-messages",
                           "1", "--consumer.config", str(tc.props["bob-256-tls"]), check=False)
    # The console consumer logs the error and stops (its exit status stays 0).
    assert re.search(r"TopicAuthorizationException: Not authorized to access topics: \[tools-secret\]",
                     refused.stderr), refused.stderr
    assert refused.stdout.split() == ["Processed", "a", "total", "of", "0", "messages"] or not refused.stdout.strip()
    # kafka-acls --remove takes them away again.
    tc.tools.run(ACLS, *admin, "--remove", "--force", "--allow-principal", "User:bob", "--operation", "Read",
                 "--topic", "tools-shared", "--resource-pattern-type", "prefixed", "--group", "g-bob")
    wait_for(lambda: not bobs_acls(), 10, "bob's ACLs gone over HTTP")
