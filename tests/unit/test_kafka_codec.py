"""The Kafka door's codec: every request type and version we answer round-trips through the frame
(hypothesis), arbitrary bytes decode or fail with a typed error, and refusals have Kafka's shape."""

from __future__ import annotations

import datetime
import struct

import pytest
from kio.static.primitive import i64Timedelta
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.primitive import Records

from lakelog.infra.config import ConfigError
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.kafka import codec
from lakelog.ingest_api.config.kafka import parse_listeners
from lakelog.ingest_api.error_table import kafka_code
from lakelog.ingest_api.kafka.metadata_apis import api_versions_table
from lakelog.ingest_api.kafka.versions import SUPPORTED

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))
# Durations a client can send: int64 milliseconds near 2**63 do not come back as a `timedelta` (the
# codec refuses such a frame, a typed FrameError; see test_arbitrary_bytes_decode_or_fail_typed).
st.register_type_strategy(i64Timedelta, st.integers(-(10**15), 10**15).map(
    lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms))))

REQUEST_TYPES = [(key, v) for key, (_, low, high) in sorted(SUPPORTED.items()) for v in range(low, high + 1)]


@pytest.mark.parametrize("api_key,version", REQUEST_TYPES)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_request_round_trips_through_a_frame(api_key, version, data):
    body = data.draw(st.from_type(load_request_schema(api_key, version)))
    cid = data.draw(st.integers(-(2**31), 2**31 - 1))
    frame = codec.encode_request(body, cid, client_id="test")
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    req = codec.decode_request(frame[4:])
    assert (req.api_key, req.api_version, req.correlation_id, req.client_id) == (api_key, version, cid, "test")
    assert req.body == body


@settings(max_examples=400, deadline=None)
@given(key=st.sampled_from(sorted(SUPPORTED)), version=st.integers(-1, 20), tail=st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_fail_typed(key, version, tail):
    frame = struct.pack(">hhi", key, version, 1) + tail
    try:
        codec.decode_request(frame)
    except (codec.FrameError, codec.UnsupportedVersion):
        pass


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=64))
def test_any_short_frame_is_a_typed_error(data):
    try:
        codec.decode_request(data)
    except (codec.FrameError, codec.UnsupportedVersion):
        pass


def test_api_versions_of_a_future_version_answers_v0_with_our_table():
    out = codec.unsupported_version_response(codec.UnsupportedVersion(18, 9, 42), api_versions_table())
    frame = out[4:]
    assert struct.unpack_from(">i", frame)[0] == 42
    cls = load_response_schema(18, 0)
    body, _ = entity_reader(cls)(frame, 4)
    assert body.error_code == ErrorCode.unsupported_version
    assert {(a.api_key, a.min_version, a.max_version) for a in body.api_keys} == {
        (k, low, high) for k, (_, low, high) in SUPPORTED.items()}


def test_an_unsupported_version_of_a_known_api_answers_its_own_type():
    out = codec.unsupported_version_response(codec.UnsupportedVersion(3, 13, 7), api_versions_table())
    cls = load_response_schema(3, 13)
    header, n = entity_reader(cls.__header_schema__)(out[4:], 0)
    body, _ = entity_reader(cls)(out[4:], n)
    assert header.correlation_id == 7 and body.topics == () and body.brokers == ()


def test_to_entity_fills_versions_from_one_dict():
    doc = {"throttle_time": 0, "error_code": 79, "generation_id": -1, "protocol_type": "consumer",
           "protocol_name": None, "leader": "", "skip_assignment": False, "member_id": "m", "members": []}
    for version in range(0, 10):
        body = codec.to_entity(codec.response_class(11, version), doc)
        codec.encode_response(11, version, 1, body)  # a null where the version has none is written empty
        assert body.error_code == ErrorCode.member_id_required


def test_listeners_hold_one_http_door_and_named_kafka_listeners():
    cfg = NodeConfig({"listeners": "http://127.0.0.1:8082,PLAINTEXT://0.0.0.0:9092",
                      "advertised.listeners": "http://h:8082,PLAINTEXT://kafka.example:19092"})
    assert (cfg.host, cfg.port) == ("127.0.0.1", 8082)
    assert [(x.name, x.host, x.port) for x in cfg.kafka_listeners] == [("PLAINTEXT", "0.0.0.0", 9092)]
    assert [(x.host, x.port) for x in cfg.advertised_kafka_listeners] == [("kafka.example", 19092)]
    assert NodeConfig({}).kafka_listeners == []
    assert [x.security_protocol for x in parse_listeners("http://a:1,SSL://a:2", "SSL:SSL")] == ["SSL"]
    with pytest.raises(ConfigError, match="PROTOCOL one of"):
        parse_listeners("http://a:1,TLS://a:2", "TLS:TLS")
    with pytest.raises(ConfigError, match="not named"):
        parse_listeners("http://a:1,OTHER://a:2", "PLAINTEXT:PLAINTEXT")
    with pytest.raises(ConfigError, match="exactly one"):
        parse_listeners("PLAINTEXT://a:2", "PLAINTEXT:PLAINTEXT")


def test_error_kinds_map_to_kafka_codes():
    from lakelog.ingest_api.errors import NotLeaderOrFollowerError, RemoteError, TopicNotFoundError
    from lakelog.ingest_api.groups.errors import NotCoordinatorError

    assert kafka_code(NotLeaderOrFollowerError("x")) == ErrorCode.not_leader_or_follower
    assert kafka_code(TopicNotFoundError("x")) == ErrorCode.unknown_topic_or_partition
    assert kafka_code(NotCoordinatorError("x")) == ErrorCode.not_coordinator
    assert kafka_code(RemoteError(503, 50302, "relayed")) == ErrorCode.not_leader_or_follower
    assert kafka_code(ValueError("x")) == ErrorCode.unknown_server_error
