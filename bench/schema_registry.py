"""What the Schema Registry and schema-aware REST cost: one real `lakelog node` process, same run.

    python bench/schema_registry.py            # about a minute on 2 cores
    python bench/schema_registry.py --quick    # a smoke run

* produce   — REST produce of 10 small records per request to one partition, acks=1, alternated round
              by round (`bench.harness.alternate`): `application/vnd.kafka.json.v2+json` (the baseline)
              against `application/vnd.kafka.avro.v2+json` with `value_schema_id` (each value read
              from Avro's JSON encoding, checked, written as Avro binary in Confluent's wire format)
              and `application/vnd.kafka.protobuf.v2+json` with `value_schema_id` (each value parsed
              by Protobuf's JSON mapping into a message of the schema's descriptor, protoc-compiled
              once, written as Protobuf binary after the message indexes);
* read      — `GET /schemas/ids/{id}` (answered from the node's metadata image) against `GET /healthz`
              (the HTTP round trip alone);
* register  — `POST /subjects/{s}/versions` of a new schema each time (a metadata-log write through
              the controller: parse, compatibility check against the latest version, Raft commit,
              apply), against creating a one-partition topic (also one controller write).

Figures are printed (nothing is written: docs/schema-registry.md quotes a run).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.harness import alternate, paired_ratio  # noqa: E402
from tests.support.nodes import start_node  # noqa: E402

SCHEMA = {"type": "record", "name": "Click", "namespace": "bench",
          "fields": [{"name": "user", "type": "string"}, {"name": "n", "type": "long"},
                     {"name": "tag", "type": ["null", "string"], "default": None}]}
PROTO = 'syntax = "proto3"; package bench; message Click { string user = 1; int64 n = 2; string tag = 3; }'


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    requests = 200 if args.quick else 1000
    writes = 20 if args.quick else 100
    rounds = 3 if args.quick else 5
    with tempfile.TemporaryDirectory() as tmp:
        node = start_node(Path(tmp) / "node", **{"log.cleaner.enable": "false"})
        try:
            c = httpx.Client(base_url=node.url, timeout=30)
            cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
            assert c.post(f"/v3/clusters/{cid}/topics", json={"topic_name": "bench", "partitions_count": 1}).status_code == 201
            r = c.post("/subjects/bench-value/versions", json={"schema": json.dumps(SCHEMA)})
            schema_id = r.json()["id"]
            values = [{"user": f"user-{i}", "n": i, "tag": {"string": "x"} if i % 2 else None} for i in range(10)]
            r = c.post("/subjects/benchpb-value/versions", json={"schemaType": "PROTOBUF", "schema": PROTO})
            proto_id = r.json()["id"]
            proto_values = [{"user": f"user-{i}", "n": i, "tag": "x" if i % 2 else ""} for i in range(10)]
            bodies = {
                "json": (json.dumps({"records": [{"value": v} for v in values]}), "application/vnd.kafka.json.v2+json"),
                "avro": (json.dumps({"value_schema_id": schema_id, "records": [{"value": v} for v in values]}),
                         "application/vnd.kafka.avro.v2+json"),
                "protobuf": (json.dumps({"value_schema_id": proto_id, "records": [{"value": v} for v in proto_values]}),
                             "application/vnd.kafka.protobuf.v2+json"),
            }

            def produce(name: str):
                body, ctype = bodies[name]

                def run() -> None:
                    for _ in range(requests):
                        r = c.post("/topics/bench/partitions/0?acks=1", content=body, headers={"Content-Type": ctype})
                        assert r.status_code == 200, r.text
                return run

            def get(path: str):
                def run() -> None:
                    for _ in range(requests):
                        assert c.get(path).status_code == 200
                return run

            counter = {"subject": 0, "topic": 0}

            def register() -> None:
                for _ in range(writes):
                    counter["subject"] += 1
                    schema = {**SCHEMA, "name": f"Click{counter['subject']}"}
                    r = c.post(f"/subjects/s{counter['subject']}/versions", json={"schema": json.dumps(schema)})
                    assert r.status_code == 200, r.text

            def create_topic() -> None:
                for _ in range(writes):
                    counter["topic"] += 1
                    r = c.post(f"/v3/clusters/{cid}/topics", json={"topic_name": f"t{counter['topic']}",
                                                                   "partitions_count": 1})
                    assert r.status_code == 201, r.text

            t = alternate({"json": produce("json"), "avro": produce("avro"), "protobuf": produce("protobuf")},
                          rounds=rounds)
            print(f"REST produce of 10 records: json {requests / t['json'].median:,.0f} req/s, avro "
                  f"{requests / t['avro'].median:,.0f} req/s, avro/json {1 / paired_ratio(t['avro'], t['json']):.2f}x, "
                  f"protobuf {requests / t['protobuf'].median:,.0f} req/s, protobuf/json "
                  f"{1 / paired_ratio(t['protobuf'], t['json']):.2f}x")
            t = alternate({"healthz": get("/healthz"), "by id": get(f"/schemas/ids/{schema_id}")}, rounds=rounds)
            print(f"GET /schemas/ids/{{id}}: {requests / t['by id'].median:,.0f} req/s, /healthz "
                  f"{requests / t['healthz'].median:,.0f} req/s, ratio {1 / paired_ratio(t['by id'], t['healthz']):.2f}x")
            t = alternate({"topic": create_topic, "register": register}, rounds=rounds)
            print(f"controller writes: register {writes / t['register'].median:,.1f}/s, create topic "
                  f"{writes / t['topic'].median:,.1f}/s, register/create {1 / paired_ratio(t['register'], t['topic']):.2f}x "
                  f"(median of {rounds} paired rounds)")
            c.close()
        finally:
            try:
                node.stop()
            except Exception as e:  # a slow stop on a busy machine: the kill below ends it
                print(f"(node stop: {e})")
            finally:
                node.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
