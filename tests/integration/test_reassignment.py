"""Partition reassignment on a real 4-node cluster, through the v3 endpoints: move, throttle, cancel.

Real `lakelog node` processes on loopback (tests/support/nodes.py). Every wait is bounded; every
process is stopped at the end.
"""

from __future__ import annotations

import base64

import httpx
import pytest

from tests.faults.test_replication_faults import running
from tests.support.faults import (
    BINARY,
    cluster_id,
    create_topic,
    drain,
    partition_state,
    replicas_of,
    wait_for,
    wait_full_isr,
)
from tests.support.nodes import Cluster

pytestmark = pytest.mark.timeout(300)

#: A loaded machine (2 cores, other test runs) delays heartbeats: a little more room than FAST_CLUSTER.
SETTINGS = {"broker.session.timeout.ms": "3000", "replica.lag.time.max.ms": "3000",
            "controller.quorum.election.timeout.ms": "1500"}


def _produce(url: str, topic: str, p: int, values: list[str]) -> None:
    r = httpx.post(f"{url}/topics/{topic}/partitions/{p}?acks=all", timeout=30, headers={"Content-Type": BINARY},
                   json={"records": [{"value": base64.b64encode(v.encode()).decode()} for v in values]})
    assert r.status_code == 200, r.text
    assert all(o.get("error") is None for o in r.json()["offsets"]), r.text


def _v3(url: str) -> str:
    return f"{url}/v3/clusters/{cluster_id(url)}"


def _error(r: httpx.Response, status: int, code: int) -> str:
    assert r.status_code == status, (r.status_code, r.text)
    assert r.json()["error_code"] == code, r.text
    return r.json()["message"]


def _dirs(cluster: Cluster, topic: str, p: int) -> set[int]:
    """The nodes that hold a local log directory of topic-p."""
    return {n.node_id for n in cluster.nodes if (n.data_dir / f"{topic}-{p}").exists()}


def test_move_throttle_cancel_and_complete_through_v3(tmp_path):
    with running(Cluster(tmp_path, 4, overrides=SETTINGS)) as cluster:
        url = cluster.node(1).url
        v3 = _v3(url)
        topic = "moving"
        create_topic(url, topic, partitions=2, rf=2)
        wait_full_isr(cluster.nodes, topic, [0, 1])
        values = [f"v{i:05d}-" + "x" * 1000 for i in range(300)]  # about 300 KB per partition
        for p in (0, 1):
            for i in range(0, len(values), 50):
                _produce(url, topic, p, values[i:i + 50])
        original = replicas_of(partition_state(url, topic, 0))
        target = [n for n in (1, 2, 3, 4) if n not in original]

        # Nothing is moving: empty lists, 404 for one partition, nothing to cancel.
        assert httpx.get(f"{v3}/topics/-/partitions/-/reassignment", timeout=10).json()["data"] == []
        assert httpx.get(f"{v3}/topics/nope/partitions/-/reassignment", timeout=10).json()["data"] == []
        _error(httpx.get(f"{v3}/topics/{topic}/partitions/0/reassignment", timeout=10), 404, 404)
        _error(httpx.delete(f"{v3}/topics/{topic}/partitions/0/reassignment", timeout=10), 404, 404)
        # Bad targets: unregistered node, repeats, empty; unknown topic or partition.
        _error(httpx.patch(f"{v3}/topics/{topic}/partitions/0/reassignment", json={"replicas": [1, 9]}, timeout=10),
               422, 422)
        _error(httpx.patch(f"{v3}/topics/{topic}/partitions/0/reassignment", json={"replicas": [1, 1]}, timeout=10),
               422, 422)
        _error(httpx.patch(f"{v3}/topics/{topic}/partitions/0/reassignment", json={"replicas": []}, timeout=10),
               422, 422)
        _error(httpx.patch(f"{v3}/topics/nope/partitions/0/reassignment", json={"replicas": [1]}, timeout=10),
               404, 404)
        _error(httpx.patch(f"{v3}/topics/{topic}/partitions/7/reassignment", json={"replicas": [1]}, timeout=10),
               404, 404)

        # Throttle the catch-up hard (20 KB/s each side): the move of ~300 KB stays in progress.
        for key in ("leader.replication.throttled.rate", "follower.replication.throttled.rate"):
            r = httpx.put(f"{v3}/broker-configs/{key}", json={"value": "20000"}, timeout=10)
            assert r.status_code == 204, r.text
            got = httpx.get(f"{v3}/broker-configs/{key}", timeout=10).json()
            assert (got["value"], got["source"]) == ("20000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
        _error(httpx.put(f"{v3}/broker-configs/leader.replication.throttled.rate", json={"value": "-3"}, timeout=10),
               422, 422)
        r = httpx.post(f"{v3}/topics/{topic}/configs:alter", timeout=10, json={"data": [
            {"name": "leader.replication.throttled.replicas", "value": "*"},
            {"name": "follower.replication.throttled.replicas", "value": "*"}]})
        assert r.status_code == 204, r.text

        r = httpx.patch(f"{v3}/topics/{topic}/partitions/0/reassignment", json={"replicas": target}, timeout=30)
        assert r.status_code == 202, r.text
        doc = r.json()
        assert doc["kind"] == "KafkaReassignment" and doc["topic_name"] == topic and doc["partition_id"] == 0
        assert (doc["adding_replicas"], sorted(doc["removing_replicas"])) == (target, sorted(original))
        assert doc["replicas"]["related"].endswith(f"/topics/{topic}/partitions/0/replicas")
        listed = httpx.get(f"{v3}/topics/-/partitions/-/reassignment", timeout=10).json()
        assert listed["kind"] == "KafkaReassignmentList"
        assert [(d["topic_name"], d["partition_id"]) for d in listed["data"]] == [(topic, 0)]
        by_topic = httpx.get(f"{v3}/topics/{topic}/partitions/-/reassignment", timeout=10).json()["data"]
        assert [d["partition_id"] for d in by_topic] == [0]
        # Every node sees the move in its metadata: replicas = target followed by the leaving ones.
        for n in cluster.nodes:
            wait_for(lambda n=n: replicas_of(partition_state(n.url, topic, 0)) == target + original, 10,
                     f"node {n.node_id} to see the move")
        # The new replicas open their logs and fetch (slowly).
        wait_for(lambda: set(target) <= _dirs(cluster, topic, 0), 20, "the new replicas' directories")

        # Cancel: back to the original replicas; the new replicas delete what they had fetched.
        r = httpx.delete(f"{v3}/topics/{topic}/partitions/0/reassignment", timeout=30)
        assert r.status_code == 204, r.text
        _error(httpx.get(f"{v3}/topics/{topic}/partitions/0/reassignment", timeout=10), 404, 404)
        assert replicas_of(partition_state(url, topic, 0)) == original
        wait_for(lambda: _dirs(cluster, topic, 0) == set(original), 20, "the cancelled replicas to be deleted")

        # Lift the throttle and move both partitions at once (the batch endpoint); both complete.
        for key in ("leader.replication.throttled.rate", "follower.replication.throttled.rate"):
            assert httpx.delete(f"{v3}/broker-configs/{key}", timeout=10).status_code == 204
            _error(httpx.get(f"{v3}/broker-configs/{key}", timeout=10), 404, 404)
        targets = {p: [n for n in (1, 2, 3, 4) if n not in replicas_of(partition_state(url, topic, p))] for p in (0, 1)}
        r = httpx.post(f"{v3}/topics/-/partitions/-/reassignment:alter", timeout=30, json={"data": [
            {"topic_name": topic, "partition_id": p, "replicas": t} for p, t in targets.items()]})
        assert r.status_code == 202, r.text
        for p, t in targets.items():
            wait_for(lambda p=p, t=t: all(replicas_of(partition_state(n.url, topic, p)) == t for n in cluster.nodes),
                     60, f"{topic}-{p} to move to {t}")
            wait_for(lambda p=p, t=t: _dirs(cluster, topic, p) == set(t), 20, f"{topic}-{p}'s old replicas deleted")
            assert partition_state(url, topic, p)["leader"] == t[0]  # leadership moved to the first target
        assert httpx.get(f"{v3}/topics/-/partitions/-/reassignment", timeout=10).json()["data"] == []
        # Every acknowledged record is on the new replicas, in order.
        drained = drain(cluster.nodes, topic, [0, 1], min_end={0: len(values), 1: len(values)})
        for p in (0, 1):
            got = [v for q, _, v in drained if q == p]
            assert got == values, (p, len(got))


def test_a_node_added_to_a_running_cluster_takes_replicas_and_leads(tmp_path):
    """Node 4 is not a controller voter: it follows the metadata log, registers, and a reassignment
    moves a partition onto it (it leads, as the first target replica)."""
    from tests.support.nodes import NodeProcess, free_port

    with running(Cluster(tmp_path, 3, overrides=SETTINGS)) as cluster:
        url = cluster.node(1).url
        v3 = _v3(url)
        topic = "grow"
        create_topic(url, topic, partitions=1, rf=3)
        wait_full_isr(cluster.nodes, topic, [0])
        values = [f"r{i:04d}" for i in range(200)]
        for i in range(0, len(values), 40):
            _produce(url, topic, 0, values[i:i + 40])
        added = NodeProcess(tmp_path / "node-4", free_port(), node_id=4, overrides=dict(cluster.nodes[0].overrides))
        cluster.nodes.append(added)  # stopped with the others
        added.start(60)
        brokers = wait_for(lambda: {b["broker_id"]: b for b in httpx.get(f"{v3}/brokers", timeout=5).json()["data"]
                                    if b["broker_id"] == 4 and not b["fenced"]}, 30, "node 4 registered, unfenced")
        assert brokers[4]["port"] == added.port
        assert httpx.get(f"{_v3(added.url)}/brokers", timeout=5).status_code == 200  # it serves clients too
        old = replicas_of(partition_state(url, topic, 0))
        target = [4] + old[1:]
        r = httpx.patch(f"{v3}/topics/{topic}/partitions/0/reassignment", json={"replicas": target}, timeout=30)
        assert r.status_code == 202, r.text
        wait_for(lambda: all(replicas_of(partition_state(n.url, topic, 0)) == target for n in cluster.nodes), 60,
                 "the move onto node 4")
        wait_for(lambda: partition_state(url, topic, 0)["leader"] == 4, 20, "node 4 to lead")
        wait_for(lambda: _dirs(cluster, topic, 0) == set(target), 20, f"node {old[0]}'s replica deleted")
        _produce(added.url, topic, 0, ["after-move"])
        drained = drain(cluster.nodes, topic, [0], min_end={0: len(values) + 1})
        assert [v for _, _, v in drained] == values + ["after-move"]
