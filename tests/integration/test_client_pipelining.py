"""The producer keeps several batches of one partition in flight (max.in.flight.requests.per.connection
with idempotence) and still writes every record once, in order: against a real node whose sequence
check refuses a batch that overtook its predecessor, and against a 3-node cluster whose partition
leader is killed mid-stream."""

from __future__ import annotations

import struct
import threading
import time

import httpx
import pytest

from lakelog.client import Producer
from lakelog.logstore.record_batch import iter_batches
from tests.support.faults import create_topic, partition_state, wait_for, wait_live_leader
from tests.support.nodes import Cluster, start_node

RECORDBATCH = "application/vnd.kafka.recordbatch"
BASE_SEQUENCE = struct.Struct(">i")  # at byte 53 of a RecordBatch v2


def _stored(url: str, topic: str, partition: int = 0) -> list[tuple[int, bytes | None]]:
    out, offset = [], 0
    with httpx.Client(timeout=30) as h:
        while True:
            r = h.get(f"{url}/topics/{topic}/partitions/{partition}/records", params={"offset": offset, "timeout": 0},
                      headers={"Accept": RECORDBATCH})
            assert r.status_code == 200, r.text
            batches = [b for _, b in iter_batches(r.content)]
            if not batches:
                return out
            for b in batches:
                out.extend((rec.offset, rec.value) for rec in b.records() if rec.offset >= offset)
                offset = b.next_offset


def test_a_batch_that_overtakes_its_predecessor_is_refused_then_resent_in_order(tmp_path):
    node = start_node(tmp_path)
    try:
        cid = httpx.get(f"{node.url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
        assert httpx.post(f"{node.url}/v3/clusters/{cid}/topics", timeout=30,
                          json={"topic_name": "piped", "partitions_count": 1}).status_code == 201
        real = httpx.Client(timeout=30)
        held: list[int] = []

        def forward(request: httpx.Request) -> httpx.Response:
            # Hold back the first pipelined batch (the second of the partition) so the third
            # reaches the node first: the node's sequence check must refuse it.
            if request.method == "POST" and request.url.path.startswith("/topics/piped/partitions/"):
                seq = BASE_SEQUENCE.unpack_from(request.content, 53)[0]
                if seq > 0 and not held:
                    held.append(seq)
                    time.sleep(0.5)
            r = real.send(httpx.Request(request.method, request.url, headers=request.headers, content=request.content))
            return httpx.Response(r.status_code, headers={"content-type": r.headers.get("content-type", "")},
                                  content=r.content)

        with Producer({"bootstrap.servers": node.url, "linger.ms": 0, "batch.size": 1000,
                       "max.in.flight.requests.per.connection": 5}, http_options={"transport": httpx.MockTransport(forward)}) as p:
            p.partitions_for("piped")
            futures = [p.produce("piped", value=b"%05d" % i + b"." * 100, partition=0) for i in range(200)]
            assert p.flush(60) == 0
            offsets = [f.result(5).offset for f in futures]
            assert p.in_flight_peak > 1 and p.out_of_order_retries >= 1
        real.close()
        assert offsets == list(range(200))  # in produce order, each once
        assert [v[:5] for _, v in _stored(node.url, "piped")] == [b"%05d" % i for i in range(200)]
    finally:
        try:
            node.stop()
        finally:
            node.kill()


def test_pipelined_batches_survive_a_leader_kill_in_order_and_once(tmp_path):
    c = Cluster(tmp_path, 3).start()
    try:
        urls = [n.url for n in c.nodes]
        create_topic(urls[0], "kept", 1, 3, min_insync_replicas="2")
        leader = wait_live_leader(c.nodes, "kept", 0, {1, 2, 3})
        total = 3000
        done_cb = threading.Event()
        acked: list[int] = []
        with Producer({"bootstrap.servers": ",".join(urls), "linger.ms": 2, "batch.size": 4096,
                       "max.in.flight.requests.per.connection": 5, "retry.backoff.ms": 50,
                       "request.timeout.ms": 5000, "delivery.timeout.ms": 90000}) as p:
            p.partitions_for("kept")
            futures = []
            for i in range(total):
                futures.append(p.produce("kept", value=b"%06d" % i, partition=0,
                                         on_delivery=lambda e, md: acked.append(1) if e is None else None))
                if i == total // 3:
                    wait_for(lambda: len(acked) >= total // 4, 30, "the first acknowledgements")
                    c.node(leader).kill()  # mid-stream: batches in flight to (or through) it fail over
                    done_cb.set()
            assert p.flush(120) == 0
            offsets = [f.result(5).offset for f in futures]
            peak = p.in_flight_peak
        assert done_cb.is_set() and peak > 1
        assert offsets == list(range(total))  # every record acknowledged, in order, no gap
        live = [n for n in c.nodes if n.running]
        new_leader = wait_live_leader(live, "kept", 0, {n.node_id for n in live})
        stored = _stored(c.node(new_leader).url, "kept")
        assert [v for _, v in stored] == [b"%06d" % i for i in range(total)]  # once each, in order
        assert [o for o, _ in stored] == list(range(total))
    finally:
        c.stop()


def test_max_in_flight_is_bounded_with_idempotence():
    with pytest.raises(ValueError, match="at most 5"):
        Producer({"bootstrap.servers": "http://127.0.0.1:1", "max.in.flight.requests.per.connection": 6})


def test_a_partitions_batches_are_written_whole_in_sequence_order(tmp_path):
    """With the producer's own sender, a batch's request starts only once its predecessor's request
    was written whole: the node reads them in order and has no reason to refuse one as out of order."""
    node = start_node(tmp_path)
    try:
        cid = httpx.get(f"{node.url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
        assert httpx.post(f"{node.url}/v3/clusters/{cid}/topics", timeout=30,
                          json={"topic_name": "ordered", "partitions_count": 1}).status_code == 201
        events: list[tuple[str, int]] = []
        lock = threading.Lock()
        with Producer({"bootstrap.servers": node.url, "linger.ms": 0, "batch.size": 20_000,
                       "max.in.flight.requests.per.connection": 5}) as p:
            assert p._fast is not None  # no httpx options: the plain-socket sender
            real = p._fast.post

            def post(url, body, headers, on_written=None):
                seq = BASE_SEQUENCE.unpack_from(body, 53)[0]
                with lock:
                    events.append(("start", seq))

                def written():
                    with lock:
                        events.append(("end", seq))
                    on_written()

                return real(url, body, headers, written)

            p._fast.post = post
            p.partitions_for("ordered")
            futures = [p.produce("ordered", value=b"%06d" % i + b"." * 500, partition=0) for i in range(4000)]
            assert p.flush(60) == 0
            offsets = [f.result(5).offset for f in futures]
            peak = p.in_flight_peak
        assert peak > 1 and offsets == list(range(4000))
        firsts = sorted({seq for kind, seq in events if kind == "start"})
        assert len(firsts) > 10
        position = {}
        for i, (kind, seq) in enumerate(events):
            position.setdefault((kind, seq), i)
        for before, after in zip(firsts, firsts[1:]):
            assert position[("end", before)] < position[("start", after)], (before, after)
        assert [v[:6] for _, v in _stored(node.url, "ordered")] == [b"%06d" % i for i in range(4000)]
    finally:
        try:
            node.stop()
        finally:
            node.kill()
