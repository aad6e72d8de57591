"""`lakelog up` as a real process tree: the launcher and its node, stopped by signals."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from lakelog.cli.launcher import STOP_TIMEOUT_S, command_hint
from lakelog.cli.main import main
from lakelog.logstore.log_loader import CLEAN_SHUTDOWN_FILE
from lakelog.logstore.log import PartitionLog
from tests.support.faults import wait_for
from tests.support.nodes import LAKELOG, free_port_block

READY_TIMEOUT_S = 30
STOP_BOUND_S = STOP_TIMEOUT_S + 10  # the launcher's own bound on its children's stop (it kills them then), plus slack


class Launcher:
    """`lakelog up` in the background, its output in files; always stopped by `close()`.

    Its ports are BASE..BASE+N-1, all free when picked; should another process take one before
    the launcher binds it (the launcher then refuses to start), it starts again on another block.
    """

    def __init__(self, tmp_path: Path, *args: str, nodes: int = 3, data_dir: Path | None = None,
                 out_name: str = "up") -> None:
        self.data_dir = data_dir or tmp_path / "data"
        self.out_path, self.err_path = tmp_path / f"{out_name}.out", tmp_path / f"{out_name}.err"
        for _ in range(5):
            self.port = free_port_block(nodes)
            self.kafka_port = free_port_block(nodes)
            with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
                self.proc = subprocess.Popen([LAKELOG, "up", "--data-dir", str(self.data_dir), "--nodes", str(nodes),
                                              "--http-port", str(self.port), "--kafka-port", str(self.kafka_port),
                                              *args],
                                             stdout=out, stderr=err, start_new_session=True)
            try:
                code = self.proc.wait(1.0)
            except subprocess.TimeoutExpired:
                return
            if code != 2 or "is already in use" not in self.output():
                return

    def node_url(self, node_id: int) -> str:
        return f"http://127.0.0.1:{self.port + node_id - 1}"

    def pid_of(self, node_id: int) -> int:
        return int(re.findall(rf"node {node_id}: \S+  \(pid (\d+)", self.output())[-1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.out_path.read_text(errors="replace") + self.err_path.read_text(errors="replace")

    def wait_ready(self) -> None:
        """Until the launcher says every node is ready (node 1 alone may be ready before the others
        have registered, and a replication-factor-3 topic needs all three)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"lakelog up exited with {self.proc.returncode}:\n{self.output()}"
            if "lakelog up: ready." in self.output():
                assert httpx.get(f"{self.url}/readyz", timeout=5.0).status_code == 200
                return
            time.sleep(0.05)
        raise TimeoutError(f"lakelog up not ready after {READY_TIMEOUT_S}s:\n{self.output()}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_BOUND_S)
            except subprocess.TimeoutExpired:
                # SIGKILL the launcher; its nodes die with it (PR_SET_PDEATHSIG).
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def cli(url: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run([LAKELOG, *args, "--bootstrap-server", url], input=stdin, capture_output=True, timeout=30)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r


def test_up_serves_then_stops_cleanly_on_sigterm(tmp_path):
    up = Launcher(tmp_path)
    try:
        up.wait_ready()
        cli(up.url, "topics", "create", "events", "--partitions", "2")
        lines = [f"event {i}" for i in range(20)]
        cli(up.url, "produce", "events", "--partition", "1", stdin="\n".join(lines).encode())
        got = cli(up.url, "consume", "events", "--partition", "1", "--from-beginning", "--max-messages", "20")
        assert got.stdout.decode().splitlines() == lines
        # The ready line names every node's Kafka listener; a Kafka client reads the same records there.
        bootstrap = ",".join(f"127.0.0.1:{up.kafka_port + i}" for i in range(3))
        assert f"bootstrap.servers={bootstrap}" in up.output()
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "launcher-test", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition("events", 1, 0)])
            seen: list[str] = []
            deadline = time.monotonic() + 60
            while len(seen) < 20 and time.monotonic() < deadline:
                m = consumer.poll(1.0)
                if m is not None and not m.error():
                    seen.append(m.value().decode())
            assert seen == lines
        finally:
            consumer.close()
        # The nodes get the cluster secret by file: no command line (readable by anyone with ps) holds it.
        props = dict(line.split("=", 1) for line in (up.data_dir / "cluster.properties").read_text().splitlines())
        children = Path(f"/proc/{up.proc.pid}/task/{up.proc.pid}/children").read_text().split()
        cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in children]
        assert cmdlines and all(b"cluster.secret.file=" in c for c in cmdlines), cmdlines
        assert not any(props["cluster.secret"].encode() in c for c in cmdlines)
        assert (up.data_dir / "cluster.properties").stat().st_mode & 0o777 == 0o600

        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(STOP_BOUND_S) == 0, up.output()  # a graceful stop: exit 0 within the launcher's bound
    finally:
        up.close()

    out = up.output()
    assert f"node 1: {up.url}" in out
    assert f"Web console: {up.url}/" in out
    assert f"remote tier {(up.data_dir.resolve() / 'remote').as_uri()}" in out
    assert "SIGTERM received" in out and "stopped cleanly" in out
    for p in range(2):
        directory = up.data_dir / "node-1" / f"events-{p}"
        assert (directory / CLEAN_SHUTDOWN_FILE).exists(), sorted(x.name for x in directory.iterdir())
    # The node's log reopens without recovery and holds what was produced.
    log = PartitionLog(up.data_dir / "node-1" / "events-1")
    try:
        assert log.recovery.clean_shutdown
        assert log.log_end_offset == 20
    finally:
        log.close()


def test_up_exits_1_when_its_node_dies_with_exit_on_node_death(tmp_path):
    up = Launcher(tmp_path, "--exit-on-node-death")
    try:
        up.wait_ready()
        pid = up.pid_of(1)
        os.kill(pid, signal.SIGKILL)
        assert up.proc.wait(STOP_BOUND_S) == 1
    finally:
        up.close()
    assert "node-1 (pid %d) was killed by SIGKILL unexpectedly; stopping the others" % pid in up.output()


def test_up_restarts_a_node_that_dies_and_the_others_keep_serving(tmp_path):
    up = Launcher(tmp_path)
    try:
        up.wait_ready()
        cli(up.url, "topics", "create", "events", "--partitions", "3")
        lines = [f"event {i}" for i in range(30)]
        cli(up.url, "produce", "events", "--partition", "0", stdin="\n".join(lines[:15]).encode())
        pid = up.pid_of(2)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: f"node-2 (pid {pid}) was killed by SIGKILL; restarting it in" in up.output(), 10,
                 "the death report")
        # Node 1 answers while node 2 is down or coming back (records go to whichever node leads).
        assert httpx.get(f"{up.url}/readyz", timeout=5.0).status_code == 200
        cli(up.url, "produce", "events", "--partition", "0", stdin="\n".join(lines[15:]).encode())
        wait_for(lambda: "node-2 is back" in up.output(), 60, "node 2's restart")
        assert up.proc.poll() is None
        assert int(re.search(r"node-2 is back \(pid (\d+)", up.output()).group(1)) != pid
        got = cli(up.node_url(2), "consume", "events", "--partition", "0", "--from-beginning", "--max-messages", "30")
        assert got.stdout.decode().splitlines() == lines
        # Node 2 kept its data and catches up with what came meanwhile: back in the ISR of events-0.
        wait_for(lambda: _isr(up.url, "events", 0) == [1, 2, 3], 60, "node 2 back in the ISR")
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(STOP_BOUND_S) == 0, up.output()
    finally:
        up.close()
    out = up.output()
    assert out.count("was killed by SIGKILL") == 1 and "stopped cleanly" in out
    log = PartitionLog(up.data_dir / "node-2" / "events-0")
    try:
        assert log.log_end_offset == 30
    finally:
        log.close()
    assert (up.data_dir / "node-2" / "node.log").stat().st_size > 0


def _isr(url: str, topic: str, partition: int) -> list[int]:
    out = cli(url, "topics", "describe", topic).stdout.decode()
    row = re.search(rf"Partition: {partition}\t.*Isr: ([\d,]+)", out)
    return sorted(int(x) for x in row.group(1).split(",")) if row else []


def test_up_console_is_short_and_a_clean_restart_and_stop_log_no_error(tmp_path):
    """A restart of a cluster with data prints under 50 lines before "ready"; a clean stop logs no ERROR."""
    data_dir = tmp_path / "data"
    first = Launcher(tmp_path, data_dir=data_dir, out_name="first")
    try:
        first.wait_ready()
        for topic in ("a", "b", "c", "d"):
            cli(first.url, "topics", "create", topic, "--partitions", "6")
        cli(first.url, "produce", "a", stdin="\n".join(f"r{i}" for i in range(100)).encode())
        first.proc.send_signal(signal.SIGTERM)
        assert first.proc.wait(STOP_BOUND_S) == 0, first.output()
    finally:
        first.close()
    second = Launcher(tmp_path, data_dir=data_dir, out_name="second")
    try:
        second.wait_ready()
        before_ready = second.output().split("lakelog up: ready.")[0]
        second.proc.send_signal(signal.SIGINT)
        assert second.proc.wait(STOP_BOUND_S) == 0, second.output()
    finally:
        second.close()
    assert len(before_ready.splitlines()) < 50, before_ready
    for up in (first, second):
        out = up.output()
        assert "Traceback" not in out and "ERROR" not in out, out
        assert re.search(r"lakelog up: stopped cleanly in [\d.]+ s", out), out
        # The ready line names the command as this shell can run it.
        assert "Try: " in out
    assert f"Try: {command_hint()} topics create demo" in second.output()
    for node in (1, 2, 3):
        node_log = (data_dir / f"node-{node}" / "node.log").read_text()
        assert '"level": "ERROR"' not in node_log and "Traceback" not in node_log, node_log[-3000:]
        assert node_log.count(f"node {node} stopped cleanly") == 2


def test_up_refuses_too_many_nodes_and_bad_remote_urls(tmp_path, capsys):
    several = subprocess.run([LAKELOG, "up", "--nodes", "6", "--data-dir", str(tmp_path)], capture_output=True,
                             text=True, timeout=30)
    assert several.returncode == 2
    assert "a local cluster has at most 5 nodes" in several.stderr
    # The same argument checks, without a process per URL.
    for url in ("http://bucket/x", "s3://Not_A_Bucket/x", "file://host/path", "file:relative"):
        with pytest.raises(SystemExit) as exit_info:
            main(["up", "--remote", url, "--data-dir", str(tmp_path)])
        assert exit_info.value.code == 2
        assert f"lakelog up: error: --remote {url!r}" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing was started or created


@pytest.mark.spark
def test_up_with_jobs_runs_the_scheduler_beside_the_nodes(tmp_path):
    from tests.support.faults import wait_for

    up = Launcher(tmp_path, "--jobs-every", "sync-tables=1", "--jobs-every", "compaction=0",
                  "--jobs-every", "retention=0", "--set", "remote.log.manager.task.interval.ms=200", nodes=1)
    try:
        up.wait_ready()
        cli(up.url, "topics", "create", "clicks", "--partitions", "1", "--config", "remote.storage.enable=true",
            "--config", "segment.bytes=2048")
        cli(up.url, "produce", "clicks", "--partition", "0", "--batch-size", "10",
            stdin="\n".join(f"click {i} " + "x" * 60 for i in range(200)).encode())
        delta_log = up.data_dir / "remote" / "tables" / "clicks" / "_delta_log"
        wait_for(lambda: delta_log.is_dir() and any(delta_log.glob("*.json")), 180, "the scheduler's first sync")
        jobs_log = up.data_dir / "jobs.log"  # the scheduler's own lines go to its log, not the console
        wait_for(lambda: jobs_log.exists() and re.search(r"sync-tables \{.*\"rows_added\": [1-9]", jobs_log.read_text()),
                 60, "a sync that added rows")
        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(STOP_BOUND_S + 10) == 0, up.output()
    finally:
        up.close()
    out = up.output()
    assert "jobs: sync-tables every 1s" in out and "stopped cleanly" in out
