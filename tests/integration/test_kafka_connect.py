"""Kafka Connect against the Kafka door: one standalone worker (Apache Kafka 4.1's
`ConnectStandalone`, jars from infra/kafka/pom.xml in .jars/kafka) runs a FileStreamSource that reads
a file into a Lakelog topic and a FileStreamSink that writes the topic to another file. A real node
process on loopback; the worker's JVM is stopped by the test."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import httpx
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.nodes import free_port, start_node

ROOT = Path(__file__).resolve().parents[2]
KAFKA_JARS = ROOT / ".jars" / "kafka"
WAIT_S = 60
#: Bound on the wait for the worker to move the file (a JVM start on a loaded machine included).
MOVE_WAIT_S = 240


def _properties(path: Path, values: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _wait_lines(path: Path, expected: list[str], worker: subprocess.Popen, log: Path) -> list[str]:
    deadline = time.monotonic() + MOVE_WAIT_S
    while time.monotonic() < deadline and len(_lines(path)) < len(expected):
        assert worker.poll() is None, f"the Connect worker exited:\n{log.read_text(errors='replace')[-3000:]}"
        time.sleep(0.5)
    return _lines(path)


def test_a_standalone_worker_moves_a_file_through_a_lakelog_topic(tmp_path):
    assert (KAFKA_JARS / "connect-file-4.1.0.jar").exists(), "run `make kafka` (infra/kafka/pom.xml)"
    node = start_node(tmp_path / "node", kafka=True, **{"group.initial.rebalance.delay.ms": "0",
                                                        "offsets.topic.num.partitions": "2"})
    worker = None
    try:
        admin = AdminClient({"bootstrap.servers": node.bootstrap})
        for f in admin.create_topics([NewTopic("lines", 1, 1)]).values():
            f.result(WAIT_S)
        source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
        first = [f"line {i:04d}: {'x' * (i % 37)}" for i in range(400)]
        source_file.write_text("".join(f"{line}\n" for line in first))
        worker_props = _properties(tmp_path / "worker.properties", {
            "bootstrap.servers": node.bootstrap,
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.storage.file.filename": str(tmp_path / "connect.offsets"),
            "offset.flush.interval.ms": "1000",
            "listeners": f"http://127.0.0.1:{free_port()}",  # Connect's REST API, never the default 8083
            "consumer.metadata.max.age.ms": "2000",
        })
        source = _properties(tmp_path / "source.properties", {
            "name": "file-source", "connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
            "tasks.max": "1", "file": str(source_file), "topic": "lines"})
        sink = _properties(tmp_path / "sink.properties", {
            "name": "file-sink", "connector.class": "org.apache.kafka.connect.file.FileStreamSinkConnector",
            "tasks.max": "1", "file": str(sink_file), "topics": "lines"})
        log = tmp_path / "connect.log"
        with open(log, "wb") as out:
            worker = subprocess.Popen(["java", "-Xmx384m", "-cp", f"{KAFKA_JARS}/*",
                                       "org.apache.kafka.connect.cli.ConnectStandalone",
                                       str(worker_props), str(source), str(sink)],
                                      stdout=out, stderr=subprocess.STDOUT)
        assert _wait_lines(sink_file, first, worker, log) == first

        # Lines appended while the worker runs follow the same way.
        more = [f"later {i}" for i in range(25)]
        with open(source_file, "a") as f:
            f.write("".join(f"{line}\n" for line in more))
        assert _wait_lines(sink_file, first + more, worker, log) == first + more

        # The topic holds exactly the file's lines, once each, in order (the sink did not re-read).
        consumer = Consumer({"bootstrap.servers": node.bootstrap, "group.id": "check",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        try:
            consumer.subscribe(["lines"])
            got: list[str] = []
            deadline = time.monotonic() + WAIT_S
            while len(got) < len(first + more) and time.monotonic() < deadline:
                m = consumer.poll(1.0)
                if m is not None and not m.error():
                    got.append(m.value().decode())
            assert got == first + more
        finally:
            consumer.close()
        # The sink's group (connect-file-sink) is a Kafka group of the node, seen over HTTP too.
        groups = httpx.get(f"{node.url}/groups", timeout=10).json()["groups"]
        assert "connect-file-sink" in {g["group_id"] for g in groups}
    finally:
        if worker is not None:
            worker.terminate()
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        try:
            node.stop()
        finally:
            node.kill()

