"""Protobuf values: descriptors from `.proto` text (protoc) or a FileDescriptorProto, JSON <-> wire format."""

from __future__ import annotations

import base64

import pytest
from google.protobuf import descriptor_pb2

from lakelog.ingest_api.schemas import codec, protobuf_values, wire
from lakelog.ingest_api.schemas.errors import InvalidSchemaError
from lakelog.ingest_api.schemas.languages import parse_schema

COMMON = 'syntax = "proto3"; package lakelog.common; message Money { int64 cents = 1; string cur = 2; }'
ORDER = """syntax = "proto3";
package lakelog.shop;
import "common.proto";
import "google/protobuf/timestamp.proto";
message Order { string id = 1; lakelog.common.Money total = 2; google.protobuf.Timestamp at = 3;
                repeated Line lines = 4; message Line { string sku = 1; int32 qty = 2; } }
message Refund { string order_id = 1; }
"""


def test_text_schema_with_references_round_trips_values():
    parsed = parse_schema("PROTOBUF", ORDER, [("common.proto", "PROTOBUF", COMMON)])
    fds = protobuf_values.descriptor_set(parsed)
    names = [f.name for f in fds.file]
    assert names[-1] == protobuf_values.MAIN_FILE and "common.proto" in names
    assert names.index("common.proto") < len(names) - 1  # dependencies first
    value = {"id": "o1", "total": {"cents": "250", "cur": "EUR"}, "at": "2024-01-02T03:04:05Z",
             "lines": [{"sku": "tea", "qty": 2}]}
    data = codec.encode_value(parsed, 7, value)
    framed = wire.decode(data, protobuf=True)
    assert (framed.schema_id, framed.message_indexes, data[5]) == (7, (0,), 0)
    assert codec.decode_value(parsed, framed.payload, "value", framed.message_indexes) == value
    # message indexes [1] name the file's second message
    refund = protobuf_values.message_class(parsed, (1,))(order_id="o1").SerializeToString()
    assert codec.decode_value(parsed, refund, "value", (1,)) == {"orderId": "o1"}
    # the serialized form is the schema's own FileDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(protobuf_values.serialized(parsed)))
    assert fd.package == "lakelog.shop" and [m.name for m in fd.message_type] == ["Order", "Refund"]


def test_descriptor_schema_is_used_as_it_is():
    fd = descriptor_pb2.FileDescriptorProto(name="k.proto", package="p", syntax="proto3")
    m = fd.message_type.add(name="K")
    m.field.add(name="id", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    parsed = parse_schema("PROTOBUF", base64.b64encode(fd.SerializeToString()).decode())
    data = codec.encode_value(parsed, 3, {"id": "x"})
    assert codec.decode_value(parsed, wire.decode(data, protobuf=True).payload) == {"id": "x"}


@pytest.mark.parametrize("value, why", [({"nope": 1}, "no field named"), ({"id": 5}, "id"), ([1], "Protobuf")])
def test_values_that_do_not_fit_are_refused(value, why):
    parsed = parse_schema("PROTOBUF", 'syntax = "proto3"; message K { string id = 1; }')
    with pytest.raises(codec.SchemaValueError, match=why):
        codec.encode_value(parsed, 1, value)


def test_bad_payloads_and_indexes_are_typed_errors():
    parsed = parse_schema("PROTOBUF", 'syntax = "proto3"; message K { string id = 1; }')
    with pytest.raises(codec.SchemaValueError):
        codec.decode_value(parsed, b"\x0a\x05ab", "value")  # truncated length-delimited field
    with pytest.raises(codec.SchemaValueError, match="names no message"):
        codec.decode_value(parsed, b"", "value", (3,))


def test_protoc_refusal_is_an_invalid_schema():
    parsed = parse_schema("PROTOBUF", 'syntax = "proto3"; message K { Missing m = 1; }')
    with pytest.raises(InvalidSchemaError, match="Missing"):
        protobuf_values.descriptor_set(parsed)
