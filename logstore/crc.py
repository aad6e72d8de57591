"""CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) without the `crc32c` package.

The log uses the `crc32c` package (hardware-accelerated); this module is what a Spark executor
with only pyspark and pyarrow falls back to: the native decoder's CRC (`_arrowscan.crc32c`,
hardware-accelerated too) when the extension is importable, else a table-driven pure-Python loop
(correct, slow: a few MB/s).
"""

from __future__ import annotations


def _table() -> list[int]:
    out = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        out.append(c)
    return out


_TABLE = _table()
assert _TABLE[1] == 0xF26B8303


def crc32c_python(data: bytes | bytearray | memoryview) -> int:
    c = 0xFFFFFFFF
    t = _TABLE
    for b in bytes(data):
        c = (c >> 8) ^ t[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


try:
    from lakelog.logstore._arrowscan import crc32c
except ImportError:  # pragma: no cover - depends on the build
    crc32c = crc32c_python
