"""Kafka request and response frames: the framing, the headers, and plain values <-> kio entities.

Frame layout (every integer big-endian, as Kafka's protocol guide defines it):

    offset  size  type    field
    0       4     int32   size: the bytes that follow (at most `socket.request.max.bytes`)
    request:
    4       2     int16   request_api_key
    6       2     int16   request_api_version
    8       4     int32   correlation_id
    12      2+n   string  client_id (nullable; length -1 = null)
    ..      var   tagged  header tagged fields (request header v2 only: flexible versions)
    ..      ..            the request body of that key and version
    response:
    4       4     int32   correlation_id
    8       var   tagged  header tagged fields (response header v1: flexible versions, except
                          ApiVersions, whose response header is always v0)
    ..      ..            the response body

There is no checksum at this level (record batches carry their own CRC, checked on append). The
codec is kio (docs/kafka-protocol.md says why): one generated type per message and version, with
flexible versions and tagged fields. This module adds the frame, a typed `FrameError` naming the
API, version and byte position, and `to_entity`, which builds a response of any version from one
plain dict (fields a version lacks are dropped, fields it adds take their defaults), so a handler
is written once per API rather than once per version.

Zero-copy answers: a Fetch answer's `records` may be a logstore FileSlices (byte ranges of segment
files, not read). `encode_response_pieces` then writes the frame as pieces — the encoded bytes
before, between and after the records, and the FileSlices themselves, whose lengths are in the
frame's size and the records' length prefixes — which the listener sends with sendfile
(`ResponseFrame`); `encode_response` reads them in (for TLS).
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, get_args, get_origin, get_type_hints

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.logstore.file_records import FileSlices
from lakelog.ingest_api.kafka.versions import API_VERSIONS, supports

SIZE = struct.Struct(">i")
KEY_VERSION_CORRELATION = struct.Struct(">hhi")
if SIZE.size != 4 or KEY_VERSION_CORRELATION.size != 8:
    raise AssertionError("the frame's struct layouts changed size")


class FrameError(InvalidRequestError):
    """A request frame that cannot be decoded: the connection is closed."""

    def __init__(self, message: str, *, api_key: int = -1, api_version: int = -1, position: int = -1) -> None:
        super().__init__(f"{message} (api_key {api_key}, version {api_version}, byte {position})")
        self.api_key, self.api_version, self.position = api_key, api_version, position


class UnsupportedVersion(InvalidRequestError):
    """A well-framed request of an API key or version this node does not answer."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"api_key {api_key} version {api_version} is not supported")
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


@dataclass(frozen=True)
class Request:
    """One decoded request: its header fields and its kio body entity."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def peek(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame (without the size prefix)."""
    if len(frame) < KEY_VERSION_CORRELATION.size:
        raise FrameError(f"a request of {len(frame)} bytes is shorter than its header", position=0)
    return KEY_VERSION_CORRELATION.unpack_from(frame, 0)


@lru_cache(maxsize=None)
def _request_types(api_key: int, version: int) -> tuple[Any, Any, Any, Any]:
    cls = load_request_schema(api_key, version)
    header = cls.__header_schema__
    return cls, header, entity_reader(header), entity_reader(cls)


@lru_cache(maxsize=None)
def _response_types(api_key: int, version: int) -> tuple[Any, Any, Any]:
    cls = load_response_schema(api_key, version)
    header = cls.__header_schema__
    return cls, entity_writer(header), entity_writer(cls)


def decode_request(frame: bytes | memoryview) -> Request:
    """A request frame (without its size prefix) -> `Request`.

    Raises UnsupportedVersion for a key or version outside versions.SUPPORTED (the header is
    intact: the caller answers it), FrameError for bytes that do not decode.
    """
    api_key, version, correlation_id = peek(frame)
    if not supports(api_key, version):
        raise UnsupportedVersion(api_key, version, correlation_id)
    _, _, read_header, read_body = _request_types(api_key, version)
    buf = bytes(frame)
    pos = 0
    try:
        header, n = read_header(buf, 0)
        pos = n
        body, m = read_body(buf, pos)
        pos += m
    except (SerialError, ValueError, TypeError, OverflowError, UnicodeDecodeError) as e:
        raise FrameError(f"malformed request: {type(e).__name__}: {e}", api_key=api_key, api_version=version,
                         position=pos) from None
    # Bytes after the body are ignored, as Kafka's own request parser does: some clients write
    # fields of neighbouring versions (librdkafka's Metadata v12 carries one more flag).
    return Request(api_key, version, correlation_id, header.client_id, body)


def encode_request(body: Any, correlation_id: int, client_id: str | None = "lakelog") -> bytes:
    """A request entity -> its frame with the size prefix (for tests and tools)."""
    api_key, version = int(body.__api_key__), int(body.__version__)
    cls, header_cls, _, _ = _request_types(api_key, version)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(header_cls)(out, header_cls(request_api_key=api_key, request_api_version=version,
                                              correlation_id=correlation_id, client_id=client_id))
    entity_writer(cls)(out, body)
    data = out.getbuffer()
    SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def has_slices(entity: Any) -> bool:
    """Whether a Fetch-shaped entity carries FileSlices records (responses -> partitions -> records)."""
    for t in getattr(entity, "responses", None) or ():
        for p in getattr(t, "partitions", None) or ():
            if isinstance(getattr(p, "records", None), FileSlices):
                return True
    return False


def response_class(api_key: int, version: int) -> Any:
    return _response_types(api_key, version)[0]


def encode_response(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
    """A response entity -> its frame with the size prefix (FileSlices records are read in)."""
    frame = encode_response_pieces(api_key, version, correlation_id, body) if has_slices(body) else None
    if frame is not None:
        if isinstance(frame, bytes):
            return frame
        try:
            return frame.to_bytes()
        finally:
            frame.close()
    cls, write_header, write_body = _response_types(api_key, version)
    header_cls = cls.__header_schema__
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    write_header(out, header_cls(correlation_id=correlation_id))
    write_body(out, body)
    data = out.getbuffer()
    SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


class ResponseFrame:
    """A response frame (size prefix included) as pieces: bytes, and FileSlices to send from their
    files. Owns the slices: `close()` once sent (or abandoned)."""

    def __init__(self, pieces: list[bytes | FileSlices]) -> None:
        self.pieces = pieces

    def __len__(self) -> int:
        return sum(len(p) for p in self.pieces)

    def to_bytes(self) -> bytes:
        """The whole frame in memory (reads the slices)."""
        return b"".join(p if isinstance(p, bytes) else p.read() for p in self.pieces)

    def close(self) -> None:
        for p in self.pieces:
            if isinstance(p, FileSlices):
                p.close()


class _PieceWriter:
    """The writable kio's writers write into: bytes accumulate; a FileSlices becomes a piece of its own."""

    def __init__(self) -> None:
        self.pieces: list[bytes | FileSlices] = []
        self._buf = bytearray()

    def write(self, data: Any) -> int:
        if isinstance(data, FileSlices):
            self.pieces.append(bytes(self._buf))
            self._buf = bytearray()
            self.pieces.append(data)
        else:
            self._buf += data
        return len(data)

    def finish(self) -> list[bytes | FileSlices]:
        self.pieces.append(bytes(self._buf))
        return [p for p in self.pieces if len(p)]


def encode_response_pieces(api_key: int, version: int, correlation_id: int, body: Any) -> ResponseFrame | bytes:
    """`encode_response`, except that FileSlices records stay pieces of a ResponseFrame (bytes when
    the body holds none)."""
    cls, write_header, write_body = _response_types(api_key, version)
    out = _PieceWriter()
    out.write(b"\0\0\0\0")
    write_header(out, cls.__header_schema__(correlation_id=correlation_id))
    write_body(out, body)
    pieces = out.finish()
    size = sum(len(p) for p in pieces) - SIZE.size
    head = bytearray(pieces[0])
    SIZE.pack_into(head, 0, size)
    pieces[0] = bytes(head)
    if len(pieces) == 1:
        return pieces[0]
    return ResponseFrame(pieces)


def unsupported_version_response(e: UnsupportedVersion, api_versions: list[dict[str, int]]) -> bytes:
    """The answer to an unsupported key or version: UNSUPPORTED_VERSION, never a dropped connection.

    ApiVersions, and any key or version the codec has no types for, is answered in ApiVersions v0's
    shape (error code, then our table) with response header v0, as Kafka does for ApiVersions, so
    the client retries at a version both know. A key and version the codec knows is answered in its
    own response type, with UNSUPPORTED_VERSION in its top-level error code (and empty lists).
    """
    code = ErrorCode.unsupported_version.value
    try:
        if e.api_key == API_VERSIONS:
            raise LookupError
        cls = response_class(e.api_key, e.api_version)
    except Exception:  # kio's UnknownAPIKey / UnknownEntity, or ApiVersions
        body = to_entity(response_class(API_VERSIONS, 0), {"error_code": code, "api_keys": api_versions})
        return encode_response(API_VERSIONS, 0, e.correlation_id, body)
    return encode_response(e.api_key, e.api_version, e.correlation_id, error_entity(cls, code))


_EMPTY = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "float64": 0.0, "bool": False,
          "string": "", "bytes": b"", "records": None, "uuid": uuid.UUID(int=0), "timedelta_i32": 0,
          "timedelta_i64": 0}


def error_entity(cls: Any, error_code: int) -> Any:
    """An entity of `cls` with `error_code` in every top-level error field and empty everything else."""
    values: dict[str, Any] = {}
    defaults = {f.name for f in dataclasses.fields(cls)
                if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}
    for name, kafka_type, nested, many, _ in _fields(cls):
        if kafka_type == "error_code":
            values[name] = error_code
        elif name in defaults:
            continue
        elif many:
            values[name] = ()
        elif nested is not None:
            values[name] = error_entity(nested, error_code)
        else:
            values[name] = _EMPTY.get(kafka_type or "", None)
    return to_entity(cls, values)


# ---------------------------------------------------------------------- plain values -> entities


@lru_cache(maxsize=None)
def _fields(cls: Any) -> tuple[tuple[str, str | None, Any, bool, bool], ...]:
    """(name, kafka_type, nested entity type or None, is a tuple, nullable) per field of an entity class."""
    hints = get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        kafka_type = f.metadata.get("kafka_type")
        hint = hints[f.name]
        nullable = type(None) in get_args(hint)
        if nullable:
            hint = next(a for a in get_args(hint) if a is not type(None))
        nested, many = None, False
        if get_origin(hint) is tuple:
            hint = get_args(hint)[0]
            many = True
        args = [a for a in get_args(hint) if a is not type(None)]
        if args and get_origin(hint) is not None:
            hint = args[0]
        if kafka_type is None and dataclasses.is_dataclass(hint):
            nested = hint
        out.append((f.name, kafka_type, nested, many, nullable))
    return tuple(out)


def _value(kafka_type: str | None, v: Any) -> Any:
    if v is None:
        return None
    if kafka_type == "error_code":
        return v if isinstance(v, ErrorCode) else ErrorCode(int(v))
    if kafka_type == "timedelta_i32" or kafka_type == "timedelta_i64":
        return v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=int(v))
    if kafka_type == "datetime_i64" and not isinstance(v, datetime.datetime):
        return None if int(v) < 0 else datetime.datetime.fromtimestamp(int(v) / 1000, tz=datetime.timezone.utc)
    if kafka_type == "uuid":
        return v if isinstance(v, uuid.UUID) else uuid.UUID(str(v))
    return v


def to_entity(cls: Any, values: dict[str, Any]) -> Any:
    """Build an entity of `cls` from a dict (nested entities from dicts or lists of dicts).

    Keys the class lacks are ignored (a field of a later version); fields missing from the dict
    take their declared default."""
    kwargs: dict[str, Any] = {}
    for name, kafka_type, nested, many, nullable in _fields(cls):
        if name not in values:
            continue
        v = values[name]
        if v is None and not nullable:  # null where this version has no null (a field nullable later)
            v = () if many else _EMPTY.get(kafka_type or "")
        if nested is not None:
            if many:
                v = tuple(x if dataclasses.is_dataclass(x) else to_entity(nested, x) for x in (v or ()))
            elif v is not None and not dataclasses.is_dataclass(v):
                v = to_entity(nested, v)
        elif many:
            v = tuple(_value(kafka_type, x) for x in (v or ()))
        else:
            v = _value(kafka_type, v)
        kwargs[name] = v
    return cls(**kwargs)


def field_of(entity: Any, name: str, default: Any = None) -> Any:
    """A request field that some versions lack (their value: `default`)."""
    return getattr(entity, name, default)


def ms(v: Any) -> int:
    """A kio duration (timedelta) or plain int as milliseconds."""
    if isinstance(v, datetime.timedelta):
        return int(v.total_seconds() * 1000)
    return int(v)
