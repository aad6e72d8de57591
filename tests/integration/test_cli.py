"""The console tools (`lakelog topics|produce|consume`) as subprocesses against a real node process.

Independent invocations run concurrently (`lakelog_all`) to keep the suite fast.
"""

from __future__ import annotations

import os
import subprocess

from kafka.partitioner.default import murmur2

from tests.support.nodes import LAKELOG, NodeProcess

CLI_TIMEOUT_S = 30


def _start(url: str, args: tuple[str, ...], stdin: bytes | None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "LAKELOG_URL"}
    if "--bootstrap-server" not in args:
        args = (*args, "--bootstrap-server", url)
    return subprocess.Popen([LAKELOG, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def _finish(proc: subprocess.Popen, stdin: bytes | None) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(stdin, timeout=CLI_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def lakelog(url: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    """Run `lakelog ARGS --bootstrap-server URL` (stdin empty unless given); output as bytes.

    Arguments that name their own --bootstrap-server keep it."""
    return _finish(_start(url, args, stdin), stdin)


def lakelog_all(url: str, *calls: tuple[str, ...]) -> list[subprocess.CompletedProcess]:
    """Run several invocations at once; results in call order."""
    procs = [_start(url, call, None) for call in calls]
    return [_finish(p, None) for p in procs]


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, (result.args, result.returncode, result.stdout, result.stderr)
    return result.stdout.decode()


def failed(result: subprocess.CompletedProcess) -> str:
    """The one stderr line of a command that must fail with exit 1."""
    assert result.returncode == 1, (result.args, result.returncode, result.stdout, result.stderr)
    assert result.stdout == b""
    return result.stderr.decode().strip()


def kafka_partition(key: bytes, partitions: int) -> int:
    """What a Kafka producer picks: murmur2, made positive, modulo the partition count."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def test_topics_create_list_describe_alter_delete_and_errors(node: NodeProcess):
    url = node.url
    created = lakelog_all(url, ("topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=3600000",
                                "--config", "cleanup.policy=compact,delete"),
                          ("topics", "create", "audit"))
    assert [ok(r) for r in created] == ["Created topic orders.\n", "Created topic audit.\n"]

    listed, described = lakelog_all(url, ("topics", "list"), ("topics", "describe", "orders"))
    assert ok(listed).split() == ["audit", "orders"]
    lines = ok(described).splitlines()
    assert lines[0].startswith("Topic: orders\tTopicId: ")
    assert "\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: " in lines[0]
    configs = lines[0].split("Configs: ")[1]
    assert "retention.ms=3600000" in configs and "cleanup.policy=compact,delete" in configs
    assert "segment.bytes" not in configs  # configs at their default are not listed
    assert lines[1:] == [f"\tTopic: orders\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1" for p in range(3)]

    out = ok(lakelog(url, "topics", "alter", "orders", "--config", "segment.bytes=1048576",
                     "--delete-config", "retention.ms"))
    assert out == "Completed updating config for topic orders.\n"
    header = ok(lakelog(url, "topics", "describe", "orders")).splitlines()[0]
    configs = header.split("Configs: ")[1].split(",")
    assert "segment.bytes=1048576" in configs and not any(c.startswith("retention.ms") for c in configs)

    # Refusals come back as the node's message on stderr, exit 1.
    again, wide, bad, unknown_describe, unknown_consume, unknown_partition, unreachable, usage = lakelog_all(
        url,
        ("topics", "create", "orders"),
        ("topics", "create", "wide", "--replication-factor", "3"),
        ("topics", "alter", "orders", "--config", "segment.bytes=lots"),
        ("topics", "describe", "nope"),
        ("consume", "nope", "--partition", "0", "--from-beginning"),
        ("consume", "audit", "--partition", "5", "--offset", "0"),
        ("topics", "list", "--bootstrap-server", "http://127.0.0.1:9"),
        ("consume", "audit", "--partition", "0"),
    )
    assert failed(again) == "lakelog topics create: Topic 'orders' already exists."
    assert failed(wide).startswith("lakelog topics create: replication factor 3 is larger than the 1 available")
    assert failed(bad) == "lakelog topics alter: segment.bytes: 'lots' is not a valid int"
    assert failed(unknown_describe) == "lakelog topics describe: Topic nope not found."
    assert failed(unknown_consume) == "lakelog consume: Topic nope not found."
    assert failed(unknown_partition) == "lakelog consume: Partition 5 of topic audit not found."
    assert failed(unreachable).startswith("lakelog topics list: cannot reach http://127.0.0.1:9")
    assert usage.returncode == 2 and b"one of the arguments --offset --from-beginning is required" in usage.stderr

    unknown_produce = lakelog(url, "produce", "nope", stdin=b"a\n")
    assert failed(unknown_produce) == "lakelog produce: Topic nope not found."
    # A line without the key separator is refused (as kafka-console-producer does), naming the line.
    no_separator = lakelog(url, "produce", "audit", "--key-separator", ":", stdin=b"k:v\nno separator\n")
    assert failed(no_separator).endswith("lakelog produce: line 2 has no key separator ':'")

    assert ok(lakelog(url, "topics", "delete", "orders")) == "Deleted topic orders.\n"
    listed, gone = lakelog_all(url, ("topics", "list"), ("topics", "delete", "orders"))
    assert ok(listed).split() == ["audit"]
    assert failed(gone) == "lakelog topics delete: Topic orders not found."


def test_produce_then_consume_round_trip_keyed_partitions_and_offsets(node: NodeProcess):
    url = node.url
    lakelog_all(url, ("topics", "create", "lines", "--partitions", "1"), ("topics", "create", "keyed", "--partitions", "4"))
    # Text that must survive as is: non-ASCII, tabs, backslashes, an empty line, a Windows line ending.
    values = [f"line {i} \u00fcber\t\\ {'x' * (i % 7)}".encode() for i in range(97)] + [b"", b"crlf", b"last"]
    stdin = b"\n".join(values[:98]) + b"\ncrlf\r\nlast"  # and no newline after the last line
    produced = lakelog(url, "produce", "lines", "--batch-size", "30", stdin=stdin)
    assert ok(produced) == "" and b"100 record(s) sent to lines" in produced.stderr

    # Keyed lines go where Kafka's default partitioner would put them, in order within each partition.
    keyed = [(f"user-{i % 37}", f"event {i}") for i in range(100)]
    ok(lakelog(url, "produce", "keyed", "--key-separator", "|", "--batch-size", "25",
               stdin="".join(f"{k}|{v}\n" for k, v in keyed).encode()))

    runs = lakelog_all(url, ("consume", "lines", "--partition", "0", "--from-beginning", "--max-messages", "100"),
                       *[("consume", "keyed", "--partition", str(p), "--from-beginning", "--print-key",
                          "--key-separator", "=", "--timeout-ms", "300") for p in range(4)])
    assert ok(runs[0]).encode().split(b"\n") == values + [b""]
    assert runs[0].stderr.strip().endswith(b"Processed a total of 100 messages")
    for p, run in enumerate(runs[1:]):
        assert ok(run).splitlines() == [f"{k}={v}" for k, v in keyed if kafka_partition(k.encode(), 4) == p], p

    # Bytes that are not UTF-8 are stored unchanged and printed escaped.
    ok(lakelog(url, "produce", "lines", "--partition", "0", "--acks", "1", stdin=b"caf\xe9\n"))
    from_offset, latest, past = lakelog_all(
        url,
        ("consume", "lines", "--partition", "0", "--offset", "97", "--max-messages", "4"),
        ("consume", "lines", "--partition", "0", "--offset", "latest", "--timeout-ms", "200"),
        ("consume", "lines", "--partition", "0", "--offset", "102", "--max-messages", "1"),
    )
    assert ok(from_offset) == "\ncrlf\nlast\ncaf\\xe9\n"
    # From the end nothing arrives: --timeout-ms ends the consumer, exit 0.
    assert ok(latest) == "" and b"Processed a total of 0 messages" in latest.stderr
    assert failed(past) == "lakelog consume: offset 102 is out of range [0, 101]"


def test_readme_curl_fetch_of_cli_records_works_as_written(node: NodeProcess):
    """README: `curl -s localhost:8082/topics/clicks/partitions/0/records?offset=0` after `lakelog produce`
    with a key separator. The CLI writes raw text (not JSON), and curl sends `Accept: */*`: the answer is
    the binary embedded format (base64), which every record can take; JSON only when asked for."""
    import base64

    import httpx

    url = node.url
    ok(lakelog(url, "topics", "create", "clicks", "--partitions", "1"))
    ok(lakelog(url, "produce", "clicks", "--key-separator", ":", stdin=b"user-1:clicked\nuser-2:clicked\n"))
    for accept in ("*/*", None):
        r = httpx.get(f"{url}/topics/clicks/partitions/0/records?offset=0", timeout=10,
                      headers={"Accept": accept} if accept else {})
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/vnd.kafka.binary.v2+json")
        assert [(base64.b64decode(x["key"]), base64.b64decode(x["value"])) for x in r.json()] == [
            (b"user-1", b"clicked"), (b"user-2", b"clicked")]
    r = httpx.get(f"{url}/topics/clicks/partitions/0/records?offset=0", timeout=10,
                  headers={"Accept": "application/vnd.kafka.json.v2+json"})
    assert r.status_code == 406 and r.json()["error_code"] == 40602
