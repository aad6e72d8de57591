"""Kafka's batch codecs: round-trips, the wire forms Kafka producers write, and bounded, typed failures."""

from __future__ import annotations

import gzip
import random
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.logstore.compression import XERIAL_BLOCK_BYTES, Compression, compress, decompress
from lakelog.logstore.errors import InvalidRecordError, RecordTooLargeError, UnsupportedCompressionError
from lakelog.logstore.record_batch import Record, RecordBatch, build_batch, crc32c, validate_batch

CODECS = [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
BIG = 1 << 30
XERIAL_HEADER = bytes.fromhex("82534e41505059000000000100000001")


def sample(n: int, seed: int = 7) -> bytes:
    """`n` bytes that compress, but not to nothing: words drawn at random."""
    rng = random.Random(seed)
    words = [b"lakelog", b"kafka", b"record", b"batch", b"segment", b"offset", b"\x00\x01", b"\xff"]
    out = bytearray()
    while len(out) < n:
        out += rng.choice(words)
    return bytes(out[:n])


def raises_exactly(exc: type[Exception], fn, *args, **kwargs):
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert type(info.value) is exc, f"{type(info.value).__name__} is not exactly {exc.__name__}"
    return info.value


# ---------------------------------------------------------------------------------------------
# round-trips


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(list(Compression)), st.binary(max_size=2_000), st.integers(0, 200))
def test_every_codec_round_trips(codec, chunk, repeat):
    data = chunk * repeat + chunk
    assert decompress(codec, compress(codec, data), len(data)) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_large_and_incompressible_payloads_round_trip(codec):
    for data in (sample(300_000), random.Random(3).randbytes(100_000), b""):
        packed = compress(codec, data)
        assert decompress(codec, packed, len(data)) == data
        assert decompress(codec, memoryview(packed), len(data)) == data


def test_none_is_the_identity():
    assert compress(Compression.NONE, b"abc") == b"abc"
    assert decompress(Compression.NONE, memoryview(b"abc"), 3) == b"abc"


def test_codec_ids_are_kafkas():
    assert [(c.name, int(c)) for c in Compression] == \
        [("NONE", 0), ("GZIP", 1), ("SNAPPY", 2), ("LZ4", 3), ("ZSTD", 4)]
    assert Compression.from_name("zstd") is Compression.ZSTD
    assert Compression.from_name("Snappy") is Compression.SNAPPY
    raises_exactly(UnsupportedCompressionError, Compression.from_name, "brotli")
    raises_exactly(UnsupportedCompressionError, decompress, 5, b"whatever", 100)
    raises_exactly(UnsupportedCompressionError, compress, 7, b"whatever")


# ---------------------------------------------------------------------------------------------
# wire forms


def test_xerial_snappy_framing_is_exact():
    data = sample(100_000)
    packed = compress(Compression.SNAPPY, data)
    # magic 0x82 'SNAPPY' 0x00, then big-endian int32 version 1 and int32 compatible version 1
    assert packed[:16] == bytes.fromhex("82 53 4e 41 50 50 59 00 00 00 00 01 00 00 00 01")
    # Then (int32 length, raw snappy block) per 32 KiB of input.
    pos, blocks = 16, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4:pos + 4 + n])))
        pos += 4 + n
    assert pos == len(packed)
    assert XERIAL_BLOCK_BYTES == 32 * 1024
    assert [len(b) for b in blocks] == [32768, 32768, 32768, 100_000 - 3 * 32768]
    assert b"".join(blocks) == data


def test_empty_snappy_payload_is_the_bare_xerial_header():
    assert compress(Compression.SNAPPY, b"") == XERIAL_HEADER
    assert decompress(Compression.SNAPPY, compress(Compression.SNAPPY, b""), 0) == b""


@pytest.mark.parametrize("size", [0, 1, 1000, 70_000])
def test_raw_unframed_snappy_is_accepted_on_read(size):
    data = sample(size)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert raw[:1] != b"\x82"
    assert decompress(Compression.SNAPPY, raw, size) == data


def test_xerial_with_odd_block_sizes_is_accepted():
    # Other producers choose other block sizes; the reader must follow the length prefixes.
    data = sample(10_000)
    framed = bytearray(XERIAL_HEADER)
    for start, end in ((0, 1), (1, 5000), (5000, 10_000)):
        block = bytes(cramjam.snappy.compress_raw(data[start:end]))
        framed += struct.pack(">i", len(block)) + block
    assert decompress(Compression.SNAPPY, bytes(framed), len(data)) == data


def test_gzip_is_one_rfc1952_member():
    data = sample(5_000)
    packed = compress(Compression.GZIP, data)
    assert packed[:3] == b"\x1f\x8b\x08"
    assert gzip.decompress(packed) == data
    # What a JVM producer's GZIPOutputStream writes (another level, another header) is read too.
    assert decompress(Compression.GZIP, gzip.compress(data, compresslevel=1, mtime=12345), len(data)) == data


def test_lz4_is_one_frame_of_independent_64k_blocks():
    data = sample(200_000)
    packed = compress(Compression.LZ4, data)
    info = lz4.frame.get_frame_info(packed)
    assert packed[:4] == bytes.fromhex("04224d18")
    assert info["block_size"] == 64 * 1024
    assert info["block_linked"] is False
    assert lz4.frame.decompress(packed) == data
    # A frame with linked blocks, a content checksum and no stored size is still read.
    other = lz4.frame.compress(data, block_linked=True, content_checksum=True, store_size=False)
    assert decompress(Compression.LZ4, other, len(data)) == data


def test_zstd_frames_with_and_without_content_size_are_read():
    data = sample(50_000)
    packed = compress(Compression.ZSTD, data)
    assert packed[:4] == bytes.fromhex("28b52ffd")
    # Kafka's Java producer streams, so its frames do not say how large they inflate.
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert zstandard.get_frame_parameters(streamed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(Compression.ZSTD, streamed, len(data)) == data
    # Several frames back to back are read as one stream.
    assert decompress(Compression.ZSTD, packed + streamed, 2 * len(data)) == data + data


# ---------------------------------------------------------------------------------------------
# truncated and junk payloads


def _xerial_block_ends(packed: bytes) -> set[int]:
    """Offsets where a xerial stream may end: after the header and after each whole block."""
    ends, pos = {16}, 16
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        pos += 4 + n
        ends.add(pos)
    return ends


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_truncated_payloads_raise_unsupported_compression(codec):
    data = sample(80_000)
    packed = compress(codec, data)
    # xerial framing has no end marker: a cut between whole blocks is a shorter valid stream
    # (see the next test). Every other cut must be refused.
    allowed = _xerial_block_ends(packed) if codec == Compression.SNAPPY else set()
    cuts = sorted(set(range(0, 40)) | set(range(len(packed) - 40, len(packed)))
                  | set(random.Random(1).sample(range(len(packed)), 200)))
    for cut in cuts:
        if cut in allowed:
            continue
        raises_exactly(UnsupportedCompressionError, decompress, codec, packed[:cut], BIG)


def test_xerial_cut_between_blocks_is_caught_by_the_record_walk():
    records = [Record(i, 1_000, b"k%d" % i, sample(1_000, seed=i)) for i in range(70)]
    batch = bytearray(build_batch(records, compression=Compression.SNAPPY))
    payload = bytes(batch[61:])
    first_block_end = sorted(_xerial_block_ends(payload))[1]
    assert first_block_end < len(payload)
    cut = batch[:61 + first_block_end]
    struct.pack_into(">i", cut, 8, len(cut) - 12)
    struct.pack_into(">I", cut, 17, crc32c(cut[21:]))
    assert len(decompress(Compression.SNAPPY, bytes(cut[61:]), BIG)) == XERIAL_BLOCK_BYTES
    raises_exactly(InvalidRecordError, validate_batch, RecordBatch(bytes(cut)), max_message_bytes=BIG)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("junk", [
    b"", b"\x07", b"this is not a compressed payload at all", bytes(range(256)),
    XERIAL_HEADER + b"\x00\x00\x00\x09abc",  # a xerial block shorter than its length says
], ids=["empty", "one-byte", "text", "all-bytes", "short-xerial-block"])
def test_junk_payloads_raise_unsupported_compression(codec, junk):
    raises_exactly(UnsupportedCompressionError, decompress, codec, junk, BIG)


def test_snappy_with_a_negative_block_length_is_refused():
    bad = XERIAL_HEADER + struct.pack(">i", -5) + b"abcde"
    raises_exactly(UnsupportedCompressionError, decompress, Compression.SNAPPY, bad, BIG)


def test_zstd_followed_by_trailing_junk_is_refused():
    packed = compress(Compression.ZSTD, sample(1_000))
    raises_exactly(UnsupportedCompressionError, decompress, Compression.ZSTD, packed + b"junk", BIG)


# ---------------------------------------------------------------------------------------------
# bounded decompression


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_decompression_is_bounded_exactly_at_the_limit(codec):
    data = bytes(1_000_000)  # zeros: a small "bomb"
    packed = compress(codec, data)
    assert len(packed) < 60_000
    assert decompress(codec, packed, len(data)) == data
    raises_exactly(RecordTooLargeError, decompress, codec, packed, len(data) - 1)
    raises_exactly(RecordTooLargeError, decompress, codec, packed, 1_000)


def bomb(codec: Compression, mib: int) -> bytes:
    """`mib` MiB of zeros compressed a chunk at a time, so the test never holds them whole."""
    chunk = bytes(1 << 20)
    if codec == Compression.GZIP:
        c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        return b"".join(c.compress(chunk) for _ in range(mib)) + c.flush()
    if codec == Compression.SNAPPY:
        block = bytes(cramjam.snappy.compress_raw(chunk))
        return XERIAL_HEADER + (struct.pack(">i", len(block)) + block) * mib
    if codec == Compression.LZ4:
        c = lz4.frame.LZ4FrameCompressor(block_linked=False)
        return c.begin() + b"".join(c.compress(chunk) for _ in range(mib)) + c.flush()
    c = zstandard.ZstdCompressor(level=1).compressobj()
    return b"".join(c.compress(chunk) for _ in range(mib)) + c.flush()


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_a_bomb_far_past_the_limit_is_refused(codec):
    packed = bomb(codec, 32)
    assert len(packed) < (32 << 20) // 20
    raises_exactly(RecordTooLargeError, decompress, codec, packed, 64 * 1024)


def test_raw_snappy_is_bounded_by_its_declared_length():
    data = bytes(100_000)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert decompress(Compression.SNAPPY, raw, 100_000) == data
    raises_exactly(RecordTooLargeError, decompress, Compression.SNAPPY, raw, 99_999)


def test_zstd_completeness_check_runs_only_after_the_bounded_read(monkeypatch):
    # The check that every frame ends inflates without a limit of its own, so it may only run
    # once the bounded read has shown the output fits.
    import lakelog.logstore.compression as compression

    seen = []
    real = compression._check_zstd_frames_end
    monkeypatch.setattr(compression, "_check_zstd_frames_end", lambda data: seen.append(len(data)) or real(data))
    raises_exactly(RecordTooLargeError, decompress, Compression.ZSTD, bomb(Compression.ZSTD, 8), 64 * 1024)
    assert seen == []
    assert decompress(Compression.ZSTD, compress(Compression.ZSTD, b"fits"), 4) == b"fits"
    assert len(seen) == 1
