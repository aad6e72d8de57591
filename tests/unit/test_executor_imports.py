"""What a Spark executor with only pyspark and pyarrow can do: the reader and the decoder import
without crc32c, cramjam, lz4, zstandard and boto3; uncompressed and gzip batches decode; a codec
whose library is missing fails with UnsupportedCompressionError naming the package."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from lakelog.logstore import crc


def test_crc_fallbacks_match_the_known_vector():
    assert crc.crc32c_python(b"123456789") == 0xE3069283
    assert crc.crc32c(b"123456789") == 0xE3069283


def test_reader_runs_without_the_codec_and_crc_packages(tmp_path):
    from lakelog.logstore import record_batch as rb
    from lakelog.logstore.compression import Compression

    blobs = {c.name: rb.build_batch([rb.Record(i, 1000 + i, b"k", b"v" * i) for i in range(5)], compression=c)
             for c in (Compression.NONE, Compression.GZIP, Compression.LZ4)}
    for name, blob in blobs.items():
        (tmp_path / name).write_bytes(blob)
    script = textwrap.dedent(f"""
        import sys
        BLOCKED = {{"crc32c", "cramjam", "lz4", "zstandard", "boto3"}}

        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError("blocked: " + name)

        sys.meta_path.insert(0, Block())
        from pathlib import Path
        from lakelog.logstore import record_batch as rb
        from lakelog.logstore.errors import UnsupportedCompressionError
        from lakelog.tiering import remote_scan  # noqa: F401  (the data source's reader)
        from lakelog.compaction import vectorized  # noqa: F401
        d = Path({str(tmp_path)!r})
        for name in ("NONE", "GZIP"):
            batch = rb.RecordBatch((d / name).read_bytes())
            batch.ensure_valid()
            assert [r.value for r in batch.records()] == [b"v" * i for i in range(5)], name
        try:
            rb.RecordBatch((d / "LZ4").read_bytes()).records()
        except UnsupportedCompressionError as e:
            assert "'lz4'" in str(e), e
        else:
            raise AssertionError("lz4 decoded without lz4")
        assert not BLOCKED & set(m.split(".")[0] for m in sys.modules)
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
