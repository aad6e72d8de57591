"""The operator's path, literally: `lakelog up`, `lakelog up --add-node`, `lakelog partitions reassign
--generate/--execute --throttle/--verify`, `lakelog nodes list/drain/decommission`, as real processes."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.integration.test_launcher import READY_TIMEOUT_S, STOP_BOUND_S
from tests.support.faults import drain as drain_records, partition_state, replicas_of, wait_for
from tests.support.nodes import LAKELOG, NodeProcess, free_port_block

pytestmark = pytest.mark.timeout(300)


class Up:
    """One `lakelog up` process (its output in a file); always stopped by `close()`."""

    def __init__(self, tmp_path: Path, name: str, *args: str) -> None:
        self.out_path = tmp_path / f"{name}.out"
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen([LAKELOG, "up", *args], stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        wait_for(lambda: self.proc.poll() is None and "lakelog up: ready." in self.output()
                 or (self.proc.poll() is not None and _fail(self.output())), READY_TIMEOUT_S + 30, "lakelog up ready")

    def close(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_BOUND_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode


def _fail(output: str) -> bool:
    raise AssertionError(f"lakelog up exited:\n{output}")


def cli(*args: str, url: str, check: bool = True, timeout_s: float = 120) -> subprocess.CompletedProcess:
    r = subprocess.run([LAKELOG, *args, "--bootstrap-server", url], capture_output=True, text=True, timeout=timeout_s)
    if check:
        assert r.returncode == 0, f"lakelog {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}"
    return r


def test_add_a_node_reassign_onto_it_drain_and_decommission(tmp_path):
    base = free_port_block(4)
    data = tmp_path / "data"
    common = ["--data-dir", str(data), "--nodes", "3", "--http-port", str(base),
              "--kafka-port", str(free_port_block(4))]
    url = f"http://127.0.0.1:{base}"
    node4 = f"http://127.0.0.1:{base + 3}"
    up = Up(tmp_path, "up", *common, "--set", "broker.session.timeout.ms=3000",
            "--set", "broker.heartbeat.interval.ms=300")
    added: Up | None = None
    try:
        up.wait_ready()
        cli("topics", "create", "orders", "--partitions", "4", "--replication-factor", "2", url=url)
        values = [f"order-{i}" for i in range(400)]
        r = subprocess.run([LAKELOG, "produce", "orders", "--bootstrap-server", url], input="\n".join(values) + "\n",
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr

        # A fourth node joins the running cluster.
        added = Up(tmp_path, "up-add", *common, "--add-node")
        added.wait_ready()
        assert "node 4 joins the cluster" in added.output(), added.output()
        listed = cli("nodes", "list", url=url).stdout
        assert [line.split()[0] for line in listed.splitlines()[1:]] == ["1", "2", "3", "4"], listed
        assert "serving" in listed.splitlines()[4], listed

        # kafka-reassign-partitions' round: generate over 1..4, execute with a throttle, verify.
        topics_file = tmp_path / "topics.json"
        topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": "orders"}]}))
        out = cli("partitions", "reassign", "--generate", "--topics-to-move-json-file", str(topics_file),
                  "--broker-list", "1,2,3,4", url=url).stdout
        assert out.startswith("Current partition replica assignment\n"), out
        proposed = json.loads(out.split("Proposed partition reassignment configuration\n", 1)[1])
        plan = {(e["topic"], e["partition"]): e["replicas"] for e in proposed["partitions"]}
        assert len(plan) == 4 and any(4 in r for r in plan.values()), plan
        plan_file = tmp_path / "plan.json"
        plan_file.write_text(json.dumps(proposed))
        out = cli("partitions", "reassign", "--execute", "--reassignment-json-file", str(plan_file),
                  "--throttle", "50000000", url=url).stdout
        assert "Save this to use as the --reassignment-json-file option during rollback" in out, out
        assert "Successfully started partition reassignments for orders-0,orders-1,orders-2,orders-3" in out, out

        def verified():
            text = cli("partitions", "reassign", "--verify", "--reassignment-json-file", str(plan_file), url=url).stdout
            return text if "still in progress" not in text else None
        out = wait_for(verified, 60, "the reassignment to complete")
        assert out.count("is completed.") == 4 and "Clearing broker-level throttles" in out, out
        assert "Clearing topic-level throttles on topic orders" in out, out
        for (t, p), target in plan.items():
            assert replicas_of(partition_state(url, t, p)) == target
        cid = httpx.get(f"{url}/v3/clusters", timeout=5).json()["data"][0]["cluster_id"]
        assert httpx.get(f"{url}/v3/clusters/{cid}/broker-configs/leader.replication.throttled.rate",
                         timeout=5).status_code == 404

        # Decommission node 4: everything moves off it; it is unregistered once its process stops.
        proc = subprocess.Popen([LAKELOG, "nodes", "decommission", "4", "--timeout-s", "120",
                                 "--bootstrap-server", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            first = proc.stdout.readline()
            if first.startswith("moved the leadership of"):  # node 4 led partitions: leadership first
                first = proc.stdout.readline()
            assert first.startswith("moving ") and "off node 4" in first, first
            assert "holds no replica now" in proc.stdout.readline()
            assert "stop its process" in proc.stdout.readline()
            assert added.close() == 0
            added = None
            rest, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert proc.returncode == 0, err
        assert "node 4 is decommissioned" in rest
        listed = cli("nodes", "list", url=url).stdout
        assert [line.split()[0] for line in listed.splitlines()[1:]] == ["1", "2", "3"], listed
        for p in range(4):
            assert 4 not in replicas_of(partition_state(url, "orders", p))
        # Every record produced is still there, in order per partition.
        nodes = [NodeProcess(data / f"node-{i}", base + i - 1, node_id=i) for i in (1, 2, 3)]
        drained = drain_records(nodes, "orders", range(4))
        assert sorted(v for _, _, v in drained) == sorted(values)
        # Drain a voter too: node 1 keeps voting but holds no replica.
        led = [p for p in range(4) if partition_state(url, "orders", p)["leader"] == 1]
        out = cli("nodes", "drain", "1", url=url).stdout
        assert "holds no replica now" in out, out
        if led:  # leadership first: handed to an in-sync replica before any copy started
            assert f"moved the leadership of {len(led)} partition(s) off node 1" in out.splitlines()[0], out
        row = cli("nodes", "list", url=url).stdout.splitlines()[1].split()
        assert (row[0], row[4], row[5]) == ("1", "0", "0"), row  # NODE ... REPLICAS LEADERS
        bad = cli("nodes", "drain", "9", url=url, check=False)
        assert bad.returncode == 1 and "not a registered broker" in bad.stderr, bad.stderr
    finally:
        if added is not None:
            added.close()
        assert up.close() == 0, up.output()
