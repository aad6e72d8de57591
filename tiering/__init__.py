"""The remote tier: sealed segments on object storage, remote log metadata, transparent reads.

Modules: `store` (the object-store seam), `stores` (`open_store`), `s3_store` / `fs_store` (the two stores),
`layout` (object keys), `manifest` (the manifest format and the segment state machine),
`metadata` (compare-and-swap commits with leader-epoch fencing), `epochs` (the `.epochs` format),
`uploader` (copy rounds, retention, cleanup), `reader` (remote fetches and timestamp lookups),
`cache` (byte-bounded LRU), `metrics`, `config`, `errors`, and `manager` (what the node calls).
See docs/tiering.md.
"""

from lakelog.tiering.config import TieringConfig
from lakelog.tiering.manager import RemotePartition, RemoteTier
from lakelog.tiering.manifest import PartitionManifest, RemoteSegment, SegmentState
from lakelog.tiering.reader import RemoteFetchResult
from lakelog.tiering.store import ObjectInfo, ObjectStore
from lakelog.tiering.stores import open_store
from lakelog.tiering.uploader import CopyReport, RemoteRetentionReport

__all__ = [
    "CopyReport", "ObjectInfo", "ObjectStore", "PartitionManifest", "RemoteFetchResult", "RemotePartition",
    "RemoteRetentionReport", "RemoteSegment", "RemoteTier", "SegmentState", "TieringConfig", "open_store",
]
