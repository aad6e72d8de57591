"""The pure parts of typed columns: Spark types of JSON Schemas and Protobuf messages, Protobuf rows over Arrow."""

from __future__ import annotations

import datetime

import pyarrow as pa
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from lakelog.spark_log.schema_columns import _ProtobufBatches, message_indexes
from lakelog.spark_log.schema_types import json_schema_type, protobuf_type

F = descriptor_pb2.FieldDescriptorProto


def _click_set() -> tuple[bytes, type]:
    from google.protobuf import timestamp_pb2
    ts = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(ts)
    fd = descriptor_pb2.FileDescriptorProto(name="c.proto", package="t", syntax="proto3",
                                            dependency=["google/protobuf/timestamp.proto"])
    m = fd.message_type.add(name="Click")
    m.field.add(name="user", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m.field.add(name="count", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    m.field.add(name="at", number=3, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp",
                label=F.LABEL_OPTIONAL)
    e = m.nested_type.add(name="TagsEntry")
    e.options.map_entry = True
    e.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    e.field.add(name="value", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    m.field.add(name="tags", number=4, type=F.TYPE_MESSAGE, type_name=".t.Click.TagsEntry", label=F.LABEL_REPEATED)
    en = fd.enum_type.add(name="Kind")
    en.value.add(name="A", number=0)
    en.value.add(name="B", number=1)
    m.field.add(name="kind", number=5, type=F.TYPE_ENUM, type_name=".t.Kind", label=F.LABEL_OPTIONAL)
    fds = descriptor_pb2.FileDescriptorSet(file=[ts, fd])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(ts)
    pool.Add(fd)
    return fds.SerializeToString(), message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Click"))


def test_json_schema_types():
    doc = {"type": "object", "properties": {
        "id": {"type": "integer"}, "dims": {"type": "object", "properties": {"w": {"type": "number"}}},
        "at": {"type": "string", "format": "date-time"}, "tags": {"type": "array", "items": {"type": "string"}},
        "m": {"type": "object", "additionalProperties": {"type": "integer"}}, "u": {"type": ["null", "boolean"]},
        "o": {"anyOf": [{"type": "null"}, {"type": "number"}]}, "x": {"type": ["string", "integer"]},
        "r": {"$ref": "#/definitions/d"}}, "definitions": {"d": {"type": "string", "format": "date"}}}
    assert json_schema_type(doc).simpleString() == (
        "struct<id:bigint,dims:struct<w:double>,at:timestamp,tags:array<string>,m:map<string,bigint>,u:boolean,"
        "o:double,x:string,r:date>")
    assert json_schema_type({"type": "integer"}).simpleString() == "bigint"
    loop = {"type": "object", "properties": {"next": {"$ref": "#"}}}
    assert "string" in json_schema_type(loop).simpleString()  # recursion is cut


def test_protobuf_rows_over_arrow():
    fds, click = _click_set()
    from google.protobuf import descriptor_pb2 as d2
    pool = descriptor_pool.DescriptorPool()
    for f in d2.FileDescriptorSet.FromString(fds).file:
        pool.Add(f)
    target = protobuf_type(pool.FindMessageTypeByName("t.Click"))
    assert target.simpleString() == "struct<user:string,count:int,at:timestamp,tags:map<string,bigint>,kind:string>"
    msg = click(user="ada", count=3, tags={"a": 1}, kind=1)
    msg.at.seconds = 1_700_000_000
    good = b"\x00\x00\x00\x00\x07\x00" + msg.SerializeToString()
    nested = b"\x00\x00\x00\x00\x07\x02\x04" + b""  # indexes [2]: no third message
    batch = pa.RecordBatch.from_arrays([pa.array([good, None, b"\x00\x00\x00\x00\x07\x00\x0a\x09ab", nested])],
                                       names=["value"])
    out = list(_ProtobufBatches("value", {7: fds}, 7, target.json(), "t.Click")([batch]))[0]
    values = out.column("_pb_value").to_pylist()
    assert values[0]["user"] == "ada" and values[0]["kind"] == "B" and values[0]["tags"] == [("a", 1)]
    assert values[0]["at"] == datetime.datetime.fromtimestamp(1_700_000_000, tz=datetime.timezone.utc)
    assert values[1:] == [None, None, None]
    bad = out.column("_pb_value_bad").to_pylist()
    assert bad[0] is None and bad[1] is None and bad[2] and "no message" in bad[3]
    # a message other than the table's (its first) is a dead letter, not a failed batch
    other = list(_ProtobufBatches("value", {7: fds}, 7, target.json(), "t.Other")([batch]))[0]
    assert other.column("_pb_value").to_pylist()[0] is None
    assert "not the table's t.Other" in other.column("_pb_value_bad").to_pylist()[0]


def test_message_indexes():
    assert message_indexes(b"\x00\x00\x00\x00\x01\x00rest") == ((0,), 6)
    assert message_indexes(b"\x00\x00\x00\x00\x01\x04\x02\x00rest") == ((1, 0), 8)


def test_protobuf_rows_decode_on_an_executor_whose_python_lacks_protobuf(tmp_path):
    """The executor deps zip carries protobuf: a Python that cannot import the installed one (only
    pyspark and pyarrow, as a cluster's executors) decodes Protobuf rows from the shipped copy."""
    import subprocess
    import sys
    import textwrap

    from lakelog.spark_log.executor_deps import DEPS_ZIP, write_deps_zip

    fds, click = _click_set()
    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString(fds).file:
        pool.Add(f)
    target = protobuf_type(pool.FindMessageTypeByName("t.Click")).json()
    (tmp_path / "fds").write_bytes(fds)
    (tmp_path / "row").write_bytes(b"\x00\x00\x00\x00\x07\x00" + click(user="ada", count=3).SerializeToString())
    files = tmp_path / "sparkfiles"
    files.mkdir()
    write_deps_zip(files / DEPS_ZIP)
    script = textwrap.dedent(f"""
        import importlib.machinery, sys
        from pathlib import Path
        INSTALLED = [p for p in sys.path if "site-packages" in p]

        class OnlyShipped:  # google.* from anywhere but the installed site-packages
            def find_spec(self, name, path=None, target=None):
                if name != "google" and not name.startswith("google."):
                    return None
                path = [p for p in (path if path is not None else sys.path)
                        if not any(str(p).startswith(s) for s in INSTALLED)]
                spec = importlib.machinery.PathFinder.find_spec(name, path)
                if spec is None:
                    raise ImportError("not shipped: " + name)
                return spec

        sys.meta_path.insert(0, OnlyShipped())
        try:
            import google.protobuf
        except ImportError:
            pass
        else:
            raise AssertionError("the installed protobuf was importable")
        from lakelog.spark_log.executor_deps import load_shipped_deps
        shipped = load_shipped_deps({str(files)!r})
        import pyarrow as pa
        from lakelog.spark_log.schema_columns import _ProtobufBatches
        d = Path({str(tmp_path)!r})
        batch = pa.RecordBatch.from_arrays([pa.array([(d / "row").read_bytes()])], names=["value"])
        out = list(_ProtobufBatches("value", {{7: (d / "fds").read_bytes()}}, 7, {target!r}, "t.Click")([batch]))[0]
        import google.protobuf
        assert google.protobuf.__file__.startswith(shipped), google.protobuf.__file__
        print(out.column("_pb_value").to_pylist()[0]["user"], out.column("_pb_value").to_pylist()[0]["count"])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["ada", "3"]
