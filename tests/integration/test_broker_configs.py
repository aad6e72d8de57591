"""Dynamic broker configs over Confluent v3 on a real 3-node cluster: written through the active
controller into the metadata log, in force on every node without a restart, kept across a restart,
with Kafka's precedence (broker > cluster-wide > node.toml > default); read-only keys and bad values
refused with Confluent's 400 / 40002."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.support.faults import cluster_id, create_topic, wait_for, wait_live_leader
from tests.support.nodes import Cluster

JSON_V2 = "application/vnd.kafka.json.v2+json"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("bconf"), 3, {"log.flush.interval.ms": "60000"})
    try:
        yield c.start()
    finally:
        c.stop()


def _base(url: str) -> str:
    return f"{url}/v3/clusters/{cluster_id(url)}"


def _config(url: str, broker: int, name: str) -> dict:
    r = httpx.get(f"{_base(url)}/brokers/{broker}/configs/{name}", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _produce(url: str, topic: str, size: int) -> httpx.Response:
    return httpx.post(f"{url}/topics/{topic}/partitions/0", json={"records": [{"value": "x" * size}]},
                      headers={"Content-Type": JSON_V2}, timeout=30)


def test_dynamic_configs_apply_live_everywhere_with_kafkas_precedence(cluster):
    n1, n2, n3 = cluster.nodes
    b1 = _base(n1.url)
    before = _config(n2.url, 2, "message.max.bytes")
    assert before["is_read_only"] is False and before["source"] == "DEFAULT_CONFIG"
    assert _config(n2.url, 2, "log.flush.interval.ms")["source"] == "STATIC_BROKER_CONFIG"  # from the node's --set
    assert _config(n1.url, 1, "num.partitions")["is_read_only"] is True

    create_topic(n1.url, "capped", 1, 3)
    wait_live_leader(cluster.nodes, "capped", 0, {1, 2, 3})
    assert _produce(n1.url, "capped", 3000).status_code == 200

    # Cluster-wide default, written on node 1: every broker takes it, live.
    r = httpx.put(f"{b1}/broker-configs/message.max.bytes", json={"value": "1500"}, timeout=30)
    assert r.status_code == 204, r.text
    for n in cluster.nodes:
        wait_for(lambda n=n: _config(n.url, n.node_id, "message.max.bytes")["value"] == "1500", 20,
                 f"node {n.node_id} applies the cluster-wide value")
    doc = httpx.get(f"{_base(n3.url)}/broker-configs/message.max.bytes", timeout=30).json()
    assert doc["kind"] == "KafkaClusterConfig" and doc["value"] == "1500" and doc["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    assert [c["name"] for c in httpx.get(f"{b1}/broker-configs", timeout=30).json()["data"]] == ["message.max.bytes"]
    refused = _produce(n1.url, "capped", 3000)
    assert refused.status_code == 413 and refused.json()["error_code"] == 41302, refused.text  # no restart
    assert _produce(n1.url, "capped", 100).status_code == 200

    # A broker's own value wins over the cluster-wide one (written on node 3 for broker 2).
    r = httpx.put(f"{_base(n3.url)}/brokers/2/configs/message.max.bytes", json={"value": "900000"}, timeout=30)
    assert r.status_code == 204, r.text
    wait_for(lambda: _config(n2.url, 2, "message.max.bytes")["value"] == "900000", 20, "broker 2's own value")
    c2 = _config(n2.url, 2, "message.max.bytes")
    assert c2["source"] == "DYNAMIC_BROKER_CONFIG"
    assert [s["source"] for s in c2["synonyms"]] == ["DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG",
                                                     "DEFAULT_CONFIG"]
    assert _config(n1.url, 1, "message.max.bytes")["value"] == "1500"  # broker 1 keeps the cluster-wide one

    # Kept in the metadata log: a restarted node comes back with them.
    n2.restart()
    wait_for(lambda: _config(n2.url, 2, "message.max.bytes")["value"] == "900000", 30, "broker 2 after a restart")

    # Reset: DELETE the broker's value, then the cluster-wide one (through :alter) -> the default again.
    assert httpx.delete(f"{b1}/brokers/2/configs/message.max.bytes", timeout=30).status_code == 204
    wait_for(lambda: _config(n2.url, 2, "message.max.bytes")["value"] == "1500", 20, "broker 2 back to the cluster value")
    r = httpx.post(f"{b1}/broker-configs:alter", timeout=30, json={"data": [
        {"name": "message.max.bytes", "operation": "DELETE"}, {"name": "log.retention.ms", "value": "86400000"}]})
    assert r.status_code == 204, r.text
    for n in cluster.nodes:
        wait_for(lambda n=n: _config(n.url, n.node_id, "message.max.bytes")["source"] == "DEFAULT_CONFIG", 20,
                 "the default again")
    assert httpx.get(f"{b1}/broker-configs/message.max.bytes", timeout=30).status_code == 404
    assert _config(n1.url, 1, "log.retention.ms")["value"] == "86400000"
    # A topic without its own retention.ms follows the broker default.
    topic_cfg = httpx.get(f"{b1}/topics/capped/configs/retention.ms", timeout=30).json()
    assert topic_cfg["value"] == "86400000"
    assert _produce(n1.url, "capped", 3000).status_code == 200


def test_read_only_and_bad_values_are_refused_and_validate_only_changes_nothing(cluster):
    n1 = cluster.nodes[0]
    b1 = _base(n1.url)

    def error(r: httpx.Response, status: int, code: int) -> str:
        assert r.status_code == status, r.text
        doc = r.json()
        assert doc["error_code"] == code, doc
        return doc["message"]

    assert "dynamically" in error(httpx.put(f"{b1}/brokers/1/configs/num.partitions", json={"value": "3"}, timeout=30),
                                  400, 40002)
    assert "dynamically" in error(httpx.delete(f"{b1}/broker-configs/listeners", timeout=30), 400, 40002)
    msg = error(httpx.post(f"{b1}/brokers/1/configs:alter", timeout=30, json={"data": [
        {"name": "log.retention.ms", "value": "1000"}, {"name": "node.id", "value": "7"}]}), 400, 40002)
    assert "node.id" in msg
    assert _config(n1.url, 1, "log.retention.ms")["value"] != "1000"  # nothing of a refused batch is applied
    error(httpx.put(f"{b1}/brokers/1/configs/log.retention.ms", json={"value": "soon"}, timeout=30), 400, 40002)
    error(httpx.put(f"{b1}/brokers/1/configs/min.insync.replicas", json={"value": "0"}, timeout=30), 400, 40002)
    error(httpx.put(f"{b1}/brokers/1/configs/no.such.key", json={"value": "1"}, timeout=30), 404, 404)
    error(httpx.put(f"{b1}/brokers/9/configs/log.retention.ms", json={"value": "1"}, timeout=30), 404, 404)
    r = httpx.post(f"{b1}/brokers/1/configs:alter", timeout=30, json={"validate_only": True, "data": [
        {"name": "log.segment.bytes", "value": "2000000"}]})
    assert r.status_code == 204, r.text
    assert _config(n1.url, 1, "log.segment.bytes")["source"] == "DEFAULT_CONFIG"


def _write(method, url: str, **kw) -> httpx.Response:
    """A write, sent again while the cluster answers 503 (a controller election on a loaded machine:
    retriable, as clients treat it)."""
    r = method(url, **kw)
    deadline = time.monotonic() + 30
    while r.status_code == 503 and time.monotonic() < deadline:
        time.sleep(0.5)
        r = method(url, **kw)
    return r


def test_throttle_rates_are_dynamic_broker_configs_like_the_others(cluster):
    """One mechanism: a throttle rate set with the other dynamic broker configs in one `configs:alter`
    reads back on its own route and in the cluster-wide listing, on every node."""
    n1, n2 = cluster.nodes[0], cluster.nodes[1]
    b1, b2 = _base(n1.url), _base(n2.url)
    rate = "follower.replication.throttled.rate"
    r = _write(httpx.post, f"{b1}/brokers/2/configs:alter", timeout=30, json={"data": [
        {"name": rate, "value": "4096"}, {"name": "log.roll.ms", "value": "600000"}]})
    assert r.status_code == 204, r.text
    wait_for(lambda: httpx.get(f"{b2}/brokers/2/configs/{rate}", timeout=30).status_code == 200, 30,
             "the rate reaches node 2")
    got = httpx.get(f"{b2}/brokers/2/configs/{rate}", timeout=30).json()
    assert got["value"] == "4096" and got["source"] == "DYNAMIC_BROKER_CONFIG"
    wait_for(lambda: _config(n2.url, 2, "log.roll.ms")["value"] == "600000", 30, "log.roll.ms on node 2")
    r = _write(httpx.post, f"{b1}/broker-configs:alter", timeout=30, json={"data": [
        {"name": "leader.replication.throttled.rate", "value": "1048576"}]})
    assert r.status_code == 204, r.text
    wait_for(lambda: any(c["name"] == "leader.replication.throttled.rate" and c["value"] == "1048576"
                         for c in httpx.get(f"{b2}/broker-configs", timeout=30).json()["data"]), 30,
             "the cluster-wide rate listed on node 2")
    bad = _write(httpx.post, f"{b1}/broker-configs:alter", timeout=30, json={"data": [
        {"name": "leader.replication.throttled.rate", "value": "0"}]})
    assert bad.status_code == 400 and bad.json()["error_code"] == 40002, bad.text
    # Deleting with the others' endpoint removes the rate only; the entity keeps log.roll.ms.
    r = _write(httpx.post, f"{b1}/brokers/2/configs:alter", timeout=30, json={"data": [{"name": rate, "operation": "DELETE"}]})
    assert r.status_code == 204, r.text
    r = _write(httpx.delete, f"{b1}/broker-configs/leader.replication.throttled.rate", timeout=30)
    assert r.status_code == 204, r.text
    wait_for(lambda: httpx.get(f"{b2}/brokers/2/configs/{rate}", timeout=30).status_code == 404, 30, "rate removed")
    assert _config(n2.url, 2, "log.roll.ms")["value"] == "600000"
    httpx.delete(f"{b1}/brokers/2/configs/log.roll.ms", timeout=30)
