"""What typed columns cost on a read: the `lakelog` data source with `valueFormat=schema-registry`
against the same read of raw bytes, per schema language; local Spark, a real node as the registry,
topics in a filesystem remote tier, same run.

    python bench/schema_decode.py            # 200,000 records per topic
    python bench/schema_decode.py --quick    # 20,000

For each of Avro (`from_avro`, in the JVM), JSON Schema (`from_json`, in the JVM) and Protobuf
(Python over Arrow batches, `mapInArrow`), alternated round by round (`bench.harness.alternate`):

* raw      — `sum(length(value))` over the raw scan (every value read);
* decoded  — `sum(n)` plus `count(decode_error)` over the decoded read (every value decoded);
* make     — building the decoded DataFrame (the registry reads: subject versions, schemas), no scan.

Records: {user: string of 8, n: long, tag: string of 12}, about 30 bytes of payload each, in one
partition. The reader serving `lakelog` is the JVM one when its jar is built (`make jvm`), printed.
Figures are printed (docs/benchmarks.md quotes a run).
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import alternate, paired_ratio  # noqa: E402
from tests.support.nodes import start_node  # noqa: E402

AVRO = {"type": "record", "name": "Click", "namespace": "bench",
        "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "long"},
                   {"name": "tag", "type": "string"}]}
JSON_SCHEMA = {"type": "object", "properties": {"user": {"type": "string"}, "n": {"type": "integer"},
                                                "tag": {"type": "string"}}}
PROTO = 'syntax = "proto3"; package bench; message Click { string user = 1; int64 n = 2; string tag = 3; }'
BATCH = 1000


def _register(url: str, subject: str, schema: str, kind: str) -> int:
    import httpx

    body = {"schema": schema} if kind == "AVRO" else {"schema": schema, "schemaType": kind}
    r = httpx.post(f"{url}/subjects/{subject}/versions", json=body, timeout=60)
    r.raise_for_status()
    return int(r.json()["id"])


def _payloads(kind: str, n: int):
    """The Confluent payloads (after magic and id) of n records."""
    if kind == "AVRO":
        import fastavro

        parsed = fastavro.parse_schema(AVRO)
        for i in range(n):
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, parsed, {"user": f"u{i % 10_000:07d}", "n": i, "tag": f"t{i % 97:011d}"})
            yield buf.getvalue()
    elif kind == "JSON":
        for i in range(n):
            yield json.dumps({"user": f"u{i % 10_000:07d}", "n": i, "tag": f"t{i % 97:011d}"}).encode()
    else:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        F = descriptor_pb2.FieldDescriptorProto
        fd = descriptor_pb2.FileDescriptorProto(name="bench.proto", package="bench", syntax="proto3")
        m = fd.message_type.add(name="Click")
        m.field.add(name="user", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        m.field.add(name="n", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
        m.field.add(name="tag", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
        pool = descriptor_pool.DescriptorPool()
        pool.Add(fd)
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Click"))
        for i in range(n):
            yield b"\x00" + cls(user=f"u{i % 10_000:07d}", n=i, tag=f"t{i % 97:011d}").SerializeToString()


def _write_topic(root: Path, remote_dir: Path, topic: str, framed) -> None:
    from lakelog.infra.config import LogConfig
    from lakelog.logstore.log import PartitionLog
    from lakelog.logstore.record_batch import Record, build_batch
    from lakelog.tiering.manager import RemoteTier
    from lakelog.tiering.config import TieringConfig
    from lakelog.tiering.fs_store import FileSystemStore
    from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor

    store = FileSystemStore(remote_dir)
    log = PartitionLog(root / f"{topic}-0", LogConfig({"segment.bytes": 64 * 1024 * 1024, "retention.ms": -1}))
    batch = []
    for i, value in enumerate(framed):
        batch.append(Record(i, 1_700_000_000_000 + i, None, value))
        if len(batch) == BATCH:
            log.append_as_leader(build_batch(batch), 1)
            batch = []
    if batch:
        log.append_as_leader(build_batch(batch), 1)
    log.roll()
    write_topic_descriptor(store, TopicDescriptor(topic, None, 1, {}))
    RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 10_000})) \
        .partition(topic, 0).copy_segments(log, 1, log.log_end_offset)
    log.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", type=int)
    ap.add_argument("--rounds", type=int)
    args = ap.parse_args()
    n = args.records or (20_000 if args.quick else 200_000)
    rounds = args.rounds or (3 if args.quick else 5)
    from pyspark.sql import functions as F

    from lakelog.spark_log.jvm_source import jvm_source_loaded
    from lakelog.spark_log.session import remote_session

    with tempfile.TemporaryDirectory(prefix="lakelog-bench-decode-") as tmp:
        tmp_path = Path(tmp)
        node = start_node(tmp_path / "node")
        try:
            remote_dir = tmp_path / "remote"
            remote = remote_dir.as_uri()
            for kind, text in (("AVRO", json.dumps(AVRO)), ("JSON", json.dumps(JSON_SCHEMA)), ("PROTOBUF", PROTO)):
                sid = _register(node.url, f"b_{kind.lower()}-value", text, kind)
                frame = b"\x00" + sid.to_bytes(4, "big")
                _write_topic(tmp_path / "log", remote_dir, f"b_{kind.lower()}", (frame + p for p in _payloads(kind, n)))
            spark = remote_session(None, app_name="lakelog-bench-decode")
            print(f"records per topic: {n}; reader serving lakelog: "
                  f"{'JVM' if jvm_source_loaded(spark) else 'Python'}; rounds: {rounds}")
            try:
                for kind in ("AVRO", "JSON", "PROTOBUF"):
                    topic = f"b_{kind.lower()}"

                    def reader():
                        return spark.read.format("lakelog").option("remote", remote).option("topic", topic)

                    def raw() -> None:
                        assert reader().load().select(F.sum(F.length("value"))).collect()[0][0] > 0

                    def decoded() -> None:
                        row = reader().option("valueFormat", "schema-registry").option(
                            "schema.registry.url", node.url).load().agg(F.sum("n"), F.count("decode_error")).collect()[0]
                        assert row[0] == n * (n - 1) // 2 and row[1] == 0, row

                    def make() -> None:
                        reader().option("valueFormat", "schema-registry").option("schema.registry.url", node.url).load()

                    t = alternate({"raw": raw, "decoded": decoded, "make": make}, rounds=rounds)
                    print(f"{kind:9s} raw {t['raw'].median:6.2f} s  decoded {t['decoded'].median:6.2f} s  "
                          f"decoded/raw {paired_ratio(t['decoded'], t['raw']):5.2f}x  "
                          f"({n / t['decoded'].median:,.0f} records/s decoded)  make {t['make'].median * 1000:5.0f} ms",
                          flush=True)
            finally:
                spark.stop()
        finally:
            node.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
