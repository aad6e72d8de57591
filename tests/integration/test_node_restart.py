"""Durability of acknowledged records across a crash (SIGKILL) and a clean restart of a real node.

Every acknowledged record must be served again at the offset the node acknowledged, and the
segment files on disk (decoded with kafka-python, an independent reader) must hold exactly them.
"""

from __future__ import annotations

import base64
import json
import random
import threading
import time
from pathlib import Path

import httpx
from kafka.record.memory_records import MemoryRecords

from lakelog.logstore.compression import Compression
from lakelog.logstore.record_batch import Record, build_batch
from tests.support.nodes import NodeProcess

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
RECORDBATCH = "application/vnd.kafka.recordbatch"
HTTP_TIMEOUT_S = 30.0

#: (partition, offset) -> (key, value, headers) as bytes, the way a Kafka consumer sees them.
Acked = dict[tuple[int, int], tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]]


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def compact_json(value) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def create_topic(c: httpx.Client, name: str, partitions: int, configs: dict[str, str] | None = None) -> None:
    cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
    body = {"topic_name": name, "partitions_count": partitions,
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}
    r = c.post(f"/v3/clusters/{cid}/topics", json=body)
    assert r.status_code == 201, r.text


def post(c: httpx.Client, path: str, body: bytes, ctype: str, acks: str) -> list[dict]:
    r = c.post(path, content=body, headers={"Content-Type": ctype}, params={"acks": acks})
    assert r.status_code == 200, r.text
    return r.json()["offsets"]


def produce_round(c: httpx.Client, topic: str, partitions: int, acked: Acked, rng: random.Random, tag: str) -> None:
    """JSON, binary and RecordBatch produces with acks=1 and acks=all, over every partition."""
    for acks in ("1", "all"):
        # JSON v2, partition chosen by key (and sticky for null keys).
        keys = [None if i % 5 == 0 else {"id": f"{tag}-{acks}-{i}"} for i in range(30)]
        values = [{"n": i, "tag": tag, "acks": acks, "pad": "x" * rng.randint(0, 80)} for i in range(30)]
        headers = [("origin", b"json"), ("nil", None)]
        body = {"records": [{"key": k, "value": v, "headers": [{"key": hk, "value": b64(hv)} for hk, hv in headers]}
                            for k, v in zip(keys, values)]}
        for o, k, v in zip(post(c, f"/topics/{topic}", json.dumps(body).encode(), JSON_V2, acks), keys, values):
            acked[(o["partition"], o["offset"])] = (None if k is None else compact_json(k), compact_json(v), headers)

        # Binary v2, by key, then to an explicit partition.
        bkeys = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 24))) for _ in range(30)]
        bvalues = [None if i % 7 == 3 else bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
                   for i in range(30)]
        body = {"records": [{"key": b64(k), "value": b64(v)} for k, v in zip(bkeys, bvalues)]}
        for o, k, v in zip(post(c, f"/topics/{topic}", json.dumps(body).encode(), BINARY_V2, acks), bkeys, bvalues):
            acked[(o["partition"], o["offset"])] = (k, v, [])
        target = rng.randrange(partitions)
        body = {"records": [{"value": b64(v)} for v in bvalues[:10]]}
        offs = post(c, f"/topics/{topic}/partitions/{target}", json.dumps(body).encode(), BINARY_V2, acks)
        for o, v in zip(offs, bvalues[:10]):
            assert o["partition"] == target
            acked[(target, o["offset"])] = (None, v, [])

        # RecordBatch fast path: several batches, one per codec, to every partition.
        now = int(time.time() * 1000)
        for p in range(partitions):
            batches, contents = [], []
            for codec in Compression:
                recs = [Record(i, now + i, f"{tag}-{p}-{i}".encode(),
                               bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 200))),
                               (("codec", codec.name.encode()),)) for i in range(rng.randint(1, 5))]
                batches.append(build_batch(recs, compression=codec))
                contents.append(recs)
            offs = post(c, f"/topics/{topic}/partitions/{p}", b"".join(batches), RECORDBATCH, acks)
            assert len(offs) == len(batches)
            for o, recs in zip(offs, contents):
                for i, rec in enumerate(recs):
                    acked[(p, o["offset"] + i)] = (rec.key, rec.value, list(rec.headers))


def served(c: httpx.Client, topic: str, partitions: int) -> Acked:
    """Every record the node serves, read through the binary fetch API."""
    out: Acked = {}
    for p in range(partitions):
        r = c.get(f"/topics/{topic}/partitions/{p}/offsets")
        assert r.status_code == 200, r.text
        offset, end = r.json()["beginning_offset"], r.json()["end_offset"]
        while offset < end:
            r = c.get(f"/topics/{topic}/partitions/{p}/records", params={"offset": offset, "timeout": 0},
                      headers={"Accept": BINARY_V2})
            assert r.status_code == 200, r.text
            got = r.json()
            assert got, f"partition {p}: no record at {offset} below the end offset {end}"
            for x in got:
                out[(p, x["offset"])] = (None if x["key"] is None else base64.b64decode(x["key"]),
                                         None if x["value"] is None else base64.b64decode(x["value"]),
                                         [(h["key"], None if h["value"] is None else base64.b64decode(h["value"]))
                                          for h in x["headers"]])
            offset = got[-1]["offset"] + 1
    return out


def on_disk(data_dir: Path, topic: str, partitions: int) -> Acked:
    """Decode the segment files with kafka-python: every batch's CRC must hold, offsets must grow."""
    out: Acked = {}
    for p in range(partitions):
        segments = sorted((data_dir / f"{topic}-{p}").glob("*.log"))
        assert segments, f"no segment file for partition {p}"
        last = -1
        for seg in segments:
            data = seg.read_bytes()
            mr = MemoryRecords(data)
            while mr.has_next():
                batch = mr.next_batch()
                assert batch.validate_crc(), f"{seg}: CRC of batch at {batch.base_offset} does not match"
                for rec in batch:
                    assert rec.offset > last, f"{seg}: offset {rec.offset} after {last}"
                    last = rec.offset
                    out[(p, rec.offset)] = (rec.key, rec.value, list(rec.headers))
            assert mr.valid_bytes() == len(data), f"{seg}: bytes after the last whole batch"
    return out


def end_offsets(c: httpx.Client, topic: str, partitions: int) -> list[int]:
    return [c.get(f"/topics/{topic}/partitions/{p}/offsets").json()["end_offset"] for p in range(partitions)]


def expected_ends(acked: Acked, partitions: int) -> list[int]:
    return [max((o for (p, o) in acked if p == q), default=-1) + 1 for q in range(partitions)]


def test_acknowledged_records_survive_sigkill_and_clean_restart(node: NodeProcess):
    topics = {"durable": (3, {}), "durable-small-segments": (2, {"segment.bytes": "4096"})}
    acked: dict[str, Acked] = {t: {} for t in topics}
    rng = random.Random(9001)

    with httpx.Client(base_url=node.url, timeout=HTTP_TIMEOUT_S) as c:
        for t, (n, configs) in topics.items():
            create_topic(c, t, n, configs)
            produce_round(c, t, n, acked[t], rng, "before-crash")
            # Offsets acknowledged are dense: 0..end-1 in every partition.
            for p in range(n):
                mine = sorted(o for (q, o) in acked[t] if q == p)
                assert mine == list(range(len(mine)))
    assert len(list((node.data_dir / "durable-small-segments-0").glob("*.log"))) > 1

    node.kill()
    for t, (n, _) in topics.items():
        assert on_disk(node.data_dir, t, n) == acked[t], f"{t}: segment files after SIGKILL"

    node.start()
    with httpx.Client(base_url=node.url, timeout=HTTP_TIMEOUT_S) as c:
        for t, (n, _) in topics.items():
            assert end_offsets(c, t, n) == expected_ends(acked[t], n)
            assert served(c, t, n) == acked[t], f"{t}: served after SIGKILL"
        # The recovered logs take new appends right after the old end offsets.
        for t, (n, _) in topics.items():
            before = expected_ends(acked[t], n)
            new: Acked = {}
            produce_round(c, t, n, new, rng, "after-crash")
            assert not set(new) & set(acked[t]), "an offset was handed out twice"
            for p in range(n):
                assert min(o for (q, o) in new if q == p) == before[p]
            acked[t].update(new)

    node.restart()
    with httpx.Client(base_url=node.url, timeout=HTTP_TIMEOUT_S) as c:
        for t, (n, _) in topics.items():
            assert end_offsets(c, t, n) == expected_ends(acked[t], n)
            assert served(c, t, n) == acked[t], f"{t}: served after a clean restart"
        cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
        cfg = c.get(f"/v3/clusters/{cid}/topics/durable-small-segments/configs/segment.bytes").json()
        assert cfg["value"] == "4096" and cfg["is_default"] is False

    assert node.stop() == 0
    for t, (n, _) in topics.items():
        assert on_disk(node.data_dir, t, n) == acked[t], f"{t}: segment files after a clean stop"


def test_topic_metadata_survives_sigkill(node: NodeProcess):
    with httpx.Client(base_url=node.url, timeout=HTTP_TIMEOUT_S) as c:
        cid = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
        create_topic(c, "kept", 4, {"retention.ms": "86400000", "cleanup.policy": "compact"})
        create_topic(c, "dropped", 2)
        topic_id = c.get(f"/v3/clusters/{cid}/topics/kept").json()["topic_id"]
        assert c.delete(f"/v3/clusters/{cid}/topics/dropped").status_code == 204
        r = c.put(f"/v3/clusters/{cid}/topics/kept/configs/retention.ms", json={"value": "172800000"})
        assert r.status_code == 204

    node.kill()
    node.start()
    with httpx.Client(base_url=node.url, timeout=HTTP_TIMEOUT_S) as c:
        assert c.get("/v3/clusters").json()["data"][0]["cluster_id"] == cid
        kept = c.get(f"/v3/clusters/{cid}/topics/kept").json()
        assert (kept["topic_id"], kept["partitions_count"]) == (topic_id, 4)
        configs = {x["name"]: x["value"] for x in c.get(f"/v3/clusters/{cid}/topics/kept/configs").json()["data"]}
        assert configs["retention.ms"] == "172800000" and configs["cleanup.policy"] == "compact"
        assert c.get(f"/v3/clusters/{cid}/topics/dropped").status_code == 404
        assert sorted(c.get("/topics").json()) == ["kept"]
    assert not list(node.data_dir.glob("dropped-*"))


def test_sigkill_under_load_keeps_every_acknowledged_record(node: NodeProcess):
    """Producers keep writing while the node is killed: what was acknowledged is all there, and
    whatever else survived is whole records the producers sent, at dense offsets."""
    with httpx.Client(base_url=node.url, timeout=HTTP_TIMEOUT_S) as c:
        create_topic(c, "load", 2, {"segment.bytes": "8192"})
    acked: Acked = {}
    sent_values: set[bytes] = set()
    failures: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def producer(w: int) -> None:
        rng = random.Random(w)
        with httpx.Client(base_url=node.url, timeout=HTTP_TIMEOUT_S) as c:
            i = 0
            while not stop.is_set():
                p = rng.randrange(2)
                values = [f"w{w}-{i}-{j}-".encode() + b"z" * rng.randint(0, 200) for j in range(rng.randint(1, 8))]
                with lock:
                    sent_values.update(values)
                i += 1
                try:
                    if i % 2:
                        body = json.dumps({"records": [{"value": b64(v)} for v in values]}).encode()
                        r = c.post(f"/topics/load/partitions/{p}", content=body,
                                   headers={"Content-Type": BINARY_V2}, params={"acks": "all"})
                        offs = [o["offset"] for o in r.json()["offsets"]] if r.status_code == 200 else None
                    else:
                        batch = build_batch([Record(j, int(time.time() * 1000), None, v) for j, v in enumerate(values)],
                                            compression=Compression.GZIP)
                        r = c.post(f"/topics/load/partitions/{p}", content=batch,
                                   headers={"Content-Type": RECORDBATCH}, params={"acks": "1"})
                        offs = [r.json()["offsets"][0]["offset"] + j for j in range(len(values))] \
                            if r.status_code == 200 else None
                except httpx.HTTPError:
                    return  # the node is gone
                if offs is None:
                    failures.append(f"{r.status_code} {r.text}")
                    return
                with lock:
                    for o, v in zip(offs, values):
                        acked[(p, o)] = (None, v, [])

    workers = [threading.Thread(target=producer, args=(w,), daemon=True) for w in range(3)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + 20
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    node.kill()
    stop.set()
    for w in workers:
        w.join(HTTP_TIMEOUT_S)
    assert not failures, failures
    assert len(acked) >= 300, "the producers made too little progress before the kill"

    node.start()
    with httpx.Client(base_url=node.url, timeout=HTTP_TIMEOUT_S) as c:
        stored = served(c, "load", 2)
    for key, record in acked.items():
        assert stored.get(key) == record, f"acknowledged record at {key} lost or changed"
    for p in range(2):
        mine = sorted(o for (q, o) in stored if q == p)
        assert mine == list(range(len(mine))), f"partition {p}: offsets are not dense"
    assert {v for (_, v, _) in stored.values()} <= sent_values, "a record nobody sent appeared"
