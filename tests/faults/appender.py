"""Crash-test helper: append batches to a partition log until killed, acknowledging each one.

Usage: python appender.py <log directory> <seed>

After each `append_as_leader` returns, one line goes to stdout (flushed):

    <base offset> <last offset> <leader epoch> <sha256 of the sent batch from byte 8 on, hex>

The sent batch's bytes 12..16 (leader epoch) and 0..8 (base offset) are rewritten by the leader;
the digest skips the first 8 bytes and the test re-stamps the epoch before hashing what it reads.
The default `flush.messages` is used: acknowledged means written to the page cache, which a
SIGKILL of this process does not lose.
"""

from __future__ import annotations

import hashlib
import random
import sys

from lakelog.infra.config import LogConfig
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch

#: Small segments and a dense index so that a kill often lands in a roll or an index append.
CONFIG = {"segment.bytes": 48 * 1024, "index.interval.bytes": 700, "max.message.bytes": 200_000}


def digest(batch_from_byte_8: bytes) -> str:
    return hashlib.sha256(batch_from_byte_8).hexdigest()


def main() -> None:
    directory, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    log = PartitionLog(directory, LogConfig(CONFIG))
    epoch = 0
    out = sys.stdout
    n = 0
    while True:
        n += 1
        if rng.random() < 0.1:
            epoch += 1
        count = rng.randint(1, 20)
        records = [Record(i, 1_700_000_000_000 + n, f"k{n}.{i}".encode(), rng.randbytes(rng.randint(0, 1500)))
                   for i in range(count)]
        sent = bytearray(build_batch(records))
        sent[12:16] = epoch.to_bytes(4, "big", signed=True)  # what the stored batch will carry
        info = log.append_as_leader(bytes(sent), epoch)
        out.write(f"{info.first_offset} {info.last_offset} {epoch} {digest(bytes(sent[8:]))}\n")
        out.flush()


if __name__ == "__main__":
    main()
