"""Zero-copy Fetch answers: record bytes as file ranges (FileSlices) encoded into frame pieces and
sent with sendfile by the listener, byte for byte the frame the read-and-send path writes."""

from __future__ import annotations

import asyncio
import datetime
import struct

import pytest
import uvloop
from kio.index import load_response_schema
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.serial import entity_reader

from lakelog.infra.config import LogConfig
from lakelog.ingest_api.config.kafka import KafkaListener
from lakelog.ingest_api.kafka import codec
from lakelog.ingest_api.kafka.metadata_apis import api_versions_table
from lakelog.ingest_api.kafka.server import KafkaServer
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch

FETCH = 1


@pytest.fixture
def log(tmp_path):
    plog = PartitionLog(tmp_path / "t-0", LogConfig({"segment.bytes": 1500}))
    for i in range(40):
        plog.append_as_leader(build_batch([Record(j, 1_000 + i, None, b"v%d-%d" % (i, j) * 5) for j in range(3)]), 0)
    assert len(plog.segments) > 3
    yield plog
    plog.close()


def _body(version: int, records) -> object:
    part = {"partition_index": 0, "error_code": 0, "high_watermark": 120, "last_stable_offset": 120,
            "log_start_offset": 0, "aborted_transactions": None, "preferred_read_replica": -1, "records": records}
    return codec.to_entity(codec.response_class(FETCH, version), {
        "throttle_time": 0, "error_code": 0, "session_id": 0,
        "responses": [{"topic": "t", "topic_id": "00000000-0000-0000-0000-000000000001",
                       "partitions": [part, {**part, "partition_index": 1, "records": b""}]}]})


@pytest.mark.parametrize("version", [4, 11, 12, 17])
def test_pieces_are_the_frame_the_read_path_encodes(log, version):
    want = codec.encode_response(FETCH, version, 7, _body(version, bytes(log.read(5, 4000).records)))
    frame = codec.encode_response_pieces(FETCH, version, 7, _body(version, log.read_slices(5, 4000).records))
    try:
        assert isinstance(frame, codec.ResponseFrame) and len(frame) == len(want)
        assert frame.to_bytes() == want
    finally:
        frame.close()
    # The read-in path (TLS) writes the same bytes from slices.
    assert codec.encode_response(FETCH, version, 7, _body(version, log.read_slices(5, 4000).records)) == want


def test_the_listener_sends_the_ranges_with_sendfile(log):
    version = 12
    want_records = bytes(log.read(0, 10**6).records)

    async def handler(req: codec.Request, conn) -> object:
        return _body(version, log.read_slices(0, 10**6).records)

    async def run() -> None:
        server = KafkaServer([KafkaListener("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT")], handler, api_versions_table,
                             max_frame_bytes=1 << 20, max_connections=4, idle_timeout_ms=60_000, max_in_flight=4)
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.bound_ports["PLAINTEXT"])
            req = FetchRequest(max_wait=datetime.timedelta(0), min_bytes=1, topics=(FetchTopic(topic="t", partitions=(
                FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),)),), forgotten_topics_data=())
            for cid in (1, 2):  # two answers back to back on one connection
                writer.write(codec.encode_request(req, cid))
            for cid in (1, 2):
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                frame = await reader.readexactly(size)
                cls = load_response_schema(FETCH, version)
                header, n = entity_reader(cls.__header_schema__)(frame, 0)
                body, _ = entity_reader(cls)(frame, n)
                assert header.correlation_id == cid
                assert bytes(body.responses[0].partitions[0].records) == want_records
            assert server.sendfile_bytes == 2 * len(want_records)
            writer.close()
        finally:
            await server.stop()

    asyncio.run(run())


def test_the_listener_sends_with_sendfile_on_uvloop_too(log):
    """The node's loop is uvloop (uvicorn's), which has no loop.sendfile."""
    policy = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        test_the_listener_sends_the_ranges_with_sendfile(log)
    finally:
        asyncio.set_event_loop_policy(policy)
