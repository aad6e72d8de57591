"""Kafka's batch compression codecs: none, gzip, snappy, lz4, zstd (attribute bits 0-2).

Wire forms, as Kafka producers write them:
  1 gzip    one RFC 1952 gzip member
  2 snappy  xerial framing: magic 82 'SNAPPY' 00, i32 version=1, i32 compatible=1, then blocks of
            (i32 big-endian length, raw snappy block). Raw unframed snappy is also accepted on read.
  3 lz4     one LZ4 frame (independent 64 KiB blocks)
  4 zstd    one zstd frame (content size may be absent: Kafka's Java producer streams)

Decompression is always bounded: a caller passes the most bytes it will accept, and a payload
that would inflate beyond that raises instead of allocating (a "zip bomb" cannot exhaust memory).
"""

from __future__ import annotations

import enum
import importlib
import io
import struct
import sys
import zlib
from types import SimpleNamespace

from lakelog.logstore.errors import RecordTooLargeError, UnsupportedCompressionError


class _Library:
    """A codec library imported on first use: a Spark executor that only meets uncompressed or
    gzip batches needs none of them (docs/spark.md, "What executors need")."""

    def __init__(self, module: str, package: str) -> None:
        self._module_name, self._package, self._module = module, package, None

    def __getattr__(self, name: str):
        if self._module is None:
            try:
                self._module = importlib.import_module(self._module_name)
            except ImportError:
                raise UnsupportedCompressionError(
                    f"this codec needs the Python package {self._package!r}, which is not installed") from None
        return getattr(self._module, name)


cramjam = _Library("cramjam", "cramjam")
lz4 = SimpleNamespace(frame=_Library("lz4.frame", "lz4"))
zstandard = _Library("zstandard", "zstandard")


def _codec_errors() -> tuple[type[BaseException], ...]:
    """What the codec libraries raise on junk (only those already imported can have raised)."""
    errors: list[type[BaseException]] = [zlib.error, RuntimeError, ValueError]
    for module, name in (("zstandard", "ZstdError"), ("cramjam", "DecompressionError")):
        if module in sys.modules:
            errors.append(getattr(sys.modules[module], name))
    return tuple(errors)


class Compression(enum.IntEnum):
    """Compression codec ids, as stored in bits 0-2 of a batch's attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def from_name(cls, name: str) -> "Compression":
        try:
            return cls[name.upper()]
        except KeyError:
            raise UnsupportedCompressionError(f"unknown compression codec {name!r}") from None


XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_I32 = struct.Struct(">i")
XERIAL_BLOCK_BYTES = 32 * 1024
assert _XERIAL_HEADER.size == 16

GZIP_LEVEL = 6
ZSTD_LEVEL = 3


def compress(codec: Compression, data: bytes) -> bytes:
    """Compress `data` the way a Kafka producer would for `codec`."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        c = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    if codec == Compression.SNAPPY:
        out = bytearray(_XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1))
        view = memoryview(data)
        for start in range(0, len(view), XERIAL_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK_BYTES]))
            out += _I32.pack(len(block))
            out += block
        return bytes(out)
    if codec == Compression.LZ4:
        return lz4.frame.compress(data, block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
                                  content_checksum=False)
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    raise UnsupportedCompressionError(f"unknown compression codec id {int(codec)}")


def decompress(codec: int, data: bytes | memoryview, max_bytes: int) -> bytes:
    """Inflate `data`; raise RecordTooLargeError past `max_bytes`, UnsupportedCompressionError on junk."""
    try:
        if codec == Compression.GZIP:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = d.decompress(data, max_bytes + 1)
            _check_size(len(out), max_bytes)
            if not d.eof:
                raise UnsupportedCompressionError("gzip payload is truncated")
            return out
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(data), max_bytes)
        if codec == Compression.LZ4:
            d = lz4.frame.LZ4FrameDecompressor()
            out = d.decompress(bytes(data), max_length=max_bytes + 1)
            _check_size(len(out), max_bytes)
            if not d.eof:
                raise UnsupportedCompressionError("lz4 frame is truncated")
            return out
        if codec == Compression.ZSTD:
            with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data), read_across_frames=True) as r:
                out = r.read(max_bytes + 1)
            _check_size(len(out), max_bytes)
            _check_zstd_frames_end(data)
            return out
    except _codec_errors() as e:
        raise UnsupportedCompressionError(f"cannot decompress {_name(codec)} payload: {e}") from e
    if codec == Compression.NONE:
        return bytes(data)
    raise UnsupportedCompressionError(f"unknown compression codec id {codec}")


def _check_zstd_frames_end(data: bytes | memoryview) -> None:
    """Raise unless `data` is whole zstd frames. The stream reader returns what it could inflate of
    a cut frame without complaint; run once its output is known to be bounded."""
    rest = bytes(data)
    while True:
        d = zstandard.ZstdDecompressor().decompressobj()
        d.decompress(rest)
        if not d.eof:
            raise UnsupportedCompressionError("zstd frame is truncated")
        rest = d.unused_data
        if not rest:
            return


def _snappy_decompress(data: bytes, max_bytes: int) -> bytes:
    if data[:8] != XERIAL_MAGIC:
        _check_size(_snappy_raw_length(data, 0), max_bytes)
        return bytes(cramjam.snappy.decompress_raw(data))
    if len(data) < _XERIAL_HEADER.size:
        raise UnsupportedCompressionError("xerial snappy header is truncated")
    pos = _XERIAL_HEADER.size
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise UnsupportedCompressionError("xerial snappy block length is truncated")
        (n,) = _I32.unpack_from(data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise UnsupportedCompressionError("xerial snappy block is truncated")
        _check_size(len(out) + _snappy_raw_length(data, pos), max_bytes)
        out += cramjam.snappy.decompress_raw(data[pos:pos + n])
        pos += n
    return bytes(out)


def _snappy_raw_length(data: bytes, pos: int) -> int:
    """The uncompressed length a raw snappy block declares in its leading varint."""
    result = shift = 0
    for i in range(5):
        if pos + i >= len(data):
            raise UnsupportedCompressionError("snappy block length is truncated")
        b = data[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result
        shift += 7
    raise UnsupportedCompressionError("snappy block length varint is too long")


def _check_size(n: int, max_bytes: int) -> None:
    if n > max_bytes:
        raise RecordTooLargeError(f"decompressed records exceed the limit of {max_bytes} bytes")


def _name(codec: int) -> str:
    try:
        return Compression(codec).name.lower()
    except ValueError:
        return f"codec {codec}"
