"""`lakelog up` until the ingest node exists: a tour of the storage engine on local disk.

It creates a partition log `demo-0/` under the data directory, appends keyed records in several
batches (uncompressed and compressed), rolls segments, reads them back below the log end offset,
looks an offset up by timestamp, closes the log cleanly and reopens it. Running it again appends
to the same log, as a node restart would.
"""

from __future__ import annotations

import time
from pathlib import Path

from infra.config import LogConfig
from logstore.compression import Compression
from logstore.log import PartitionLog
from logstore.record_batch import Record, build_batch, iter_batches

DEMO_TOPIC = "demo"


def run_storage_demo(data_dir: str, *, batches: int = 20, records_per_batch: int = 50) -> int:
    directory = Path(data_dir) / f"{DEMO_TOPIC}-0"
    config = LogConfig({"segment.bytes": 16 * 1024, "index.interval.bytes": 4096})
    log = PartitionLog(directory, config)
    print(f"opened {directory}: {log.recovery}")
    print(f"  log start offset {log.log_start_offset}, log end offset {log.log_end_offset}, "
          f"{len(log.segments)} segment(s)")
    codecs = list(Compression)
    now = int(time.time() * 1000)
    first = log.log_end_offset
    for i in range(batches):
        recs = [Record(j, now + i, f"user-{j % 17}".encode(), f"event {first + i * records_per_batch + j}".encode(),
                       (("source", b"demo"),)) for j in range(records_per_batch)]
        info = log.append_as_leader(build_batch(recs, compression=codecs[i % len(codecs)]), leader_epoch=0)
    print(f"appended {batches} batches ({batches * records_per_batch} records, every codec): "
          f"offsets {first}..{info.last_offset}")
    print(f"  now {len(log.segments)} segment(s): " + ", ".join(s.log_path.name for s in log.segments[-4:]))
    fetched = log.read(first, 4096)
    got = [b for _, b in iter_batches(fetched.records)]
    recs = got[0].records()
    print(f"read from offset {first}: {len(got)} batch(es); first record offset {recs[0].offset} "
          f"key {recs[0].key!r} value {recs[0].value!r}")
    hit = log.offset_for_timestamp(now + batches // 2)
    print(f"first offset with timestamp >= {now + batches // 2}: {hit[0] if hit else None}")
    log.close()
    reopened = PartitionLog(directory, config)
    print(f"reopened: {reopened.recovery}; log end offset {reopened.log_end_offset}")
    reopened.close()
    print(f"inspect a segment with: lakelog dump-log --print-data-log {reopened.segments[0].log_path}")
    return 0
