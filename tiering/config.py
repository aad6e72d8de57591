"""The remote tier's settings, declared once (broker-level keys; Kafka's `remote.*` names where
Kafka has one, ours otherwise).

Topic keys stay in `infra.config.LogConfig` (`remote.storage.enable`, `retention.ms`,
`local.retention.ms`, ...): the tiering code reads them from the partition's log config.
"""

from __future__ import annotations

from lakelog.infra.config import INT_MAX, ConfigDef, TypedConfig

MIB = 1024 * 1024

TIERING_CONFIG = (
    ConfigDef()
    # -- the object store client
    .define("remote.storage.connect.timeout.ms", int, 5_000, "Connect timeout of one object-store request.",
            min=1, max=600_000, unit="ms")
    .define("remote.storage.request.timeout.ms", int, 30_000,
            "Read timeout of one object-store request (per attempt).", min=1, max=3_600_000, unit="ms")
    .define("remote.storage.max.attempts", int, 4,
            "Attempts per object-store request, the first included (botocore 'standard' retries).",
            min=1, max=20)
    .define("remote.storage.max.connections", int, 32, "Connection pool size of the S3 client.", min=1, max=1024)
    .define("remote.storage.s3.addressing.style", str, "auto",
            "S3 addressing: auto (path style when an endpoint URL is set), path, or virtual.",
            choices=("auto", "path", "virtual"))
    # -- the store's health (tiering/store_health.py)
    .define("remote.storage.health.failure.threshold", int, 3,
            "Consecutive failed object-store calls (errors or missed deadlines) that mark the store "
            "degraded; calls to a degraded store fail at once with a retriable error.", min=1, max=1000)
    .define("remote.storage.health.probe.interval.ms", int, 2_000,
            "While the store is degraded, one call every this often goes to the store as a probe; "
            "its success marks the store healthy again.", min=1, max=600_000, unit="ms")
    # -- deadlines of the tiering manager and the Spark jobs (tiering/deadline_store.py)
    .define("remote.log.upload.timeout.ms", int, 300_000,
            "Longest one PUT of a segment's object (its .log streaming included) may take before the "
            "upload fails with a retriable error and the copy round stops; the next round starts the "
            "segment again under a new id.", min=1, max=86_400_000, unit="ms")
    .define("remote.log.metadata.timeout.ms", int, 30_000,
            "Longest one read or write of a partition manifest (and any other call of the tiering "
            "manager but a segment PUT) may take before it fails with a retriable error.",
            min=1, max=3_600_000, unit="ms")
    .define("remote.log.upload.retry.backoff.ms", int, 500,
            "After a failed copy round, a partition's uploads wait this long before the next round; "
            "the wait doubles with each failure in a row.", min=0, max=600_000, unit="ms")
    .define("remote.log.upload.retry.backoff.max.ms", int, 30_000,
            "Longest wait between copy rounds after failures in a row.", min=0, max=3_600_000, unit="ms")
    .define("remote.job.store.timeout.ms", int, 120_000,
            "Longest one object-store call of a Spark job (driver or task) may take; a job facing a "
            "dead or hung store fails within it, naming the store and this key.",
            min=1, max=86_400_000, unit="ms")
    # -- reads
    .define("remote.fetch.max.wait.ms", int, 1_000,
            "Longest a fetch (or an offset lookup) waits on the remote tier before it answers a "
            "retriable error; the read goes on in the background and fills the caches. (Kafka's "
            "500 ms answers an empty fetch; an error here leaves a busy store more room.)",
            min=1, max=600_000, unit="ms")
    .define("remote.log.reader.max.pending.tasks", int, 100,
            "Remote reads queued for the reader threads at most; more are refused at once with a "
            "retriable error.", min=1, max=100_000)
    .define("remote.log.reader.threads", int, 4,
            "Threads fetching remote chunks in parallel and prefetching for sequential readers.", min=1, max=64)
    .define("remote.fetch.chunk.bytes", int, 4 * MIB,
            "Size of one ranged GET of a remote .log (and of one cached chunk).", min=4096, max=INT_MAX,
            unit="bytes")
    .define("remote.fetch.chunk.cache.bytes", int, 256 * MIB, "Bound of the LRU cache of remote .log chunks.",
            min=0, unit="bytes")
    .define("remote.fetch.prefetch.chunks", int, 2,
            "Chunks read ahead of a sequential reader (0 disables prefetch).", min=0, max=16)
    .define("remote.log.index.file.cache.total.size.bytes", int, 64 * MIB,
            "Bound of the LRU cache of remote offset and time indexes.", min=0, unit="bytes")
    .define("remote.log.metadata.max.age.ms", int, 1_000,
            "How stale a cached manifest a reader may use before it re-reads it.", min=0, unit="ms")
    # -- manifest commits and deletion
    .define("remote.log.metadata.commit.max.attempts", int, 10,
            "Compare-and-swap attempts of one manifest change before ManifestConflictError.", min=1, max=1000)
    .define("remote.segment.delete.delay.ms", int, 60_000,
            "Delay between a segment leaving the readable range (retention, replacement) and the "
            "deletion of its objects, so that a reader never sees an object deleted under it.",
            min=0, unit="ms")
    .define("remote.log.metadata.deleted.segments.kept", int, 100,
            "DELETE_FINISHED entries kept in a manifest (the newest), for audit and orphan sweeps.",
            min=0, max=100_000)
    .define("remote.log.orphan.sweep.interval.ms", int, 600_000,
            "How often a leader lists its partition's objects and deletes those no manifest entry owns "
            "(also done once when it takes over a partition).", min=0, unit="ms")
    .define("remote.log.upload.threads", int, 4,
            "Threads PUTting segments' index and epoch objects while each .log streams (shared by the "
            "partitions of a node).", min=1, max=64)
    .define("remote.log.deleted.topics.sweep.interval.ms", int, 3_600_000,
            "How often the active controller's node deletes remote data that topic deletions left "
            "behind (the store was down through every attempt); 0 disables the sweep.", min=0, unit="ms")
    .define("remote.log.deleted.topics.grace.ms", int, 3_600_000,
            "How long a deleted topic's remote partition must have been unchanged before the sweep "
            "deletes it.", min=0, unit="ms")
    .define("remote.log.copy.max.segments.per.round", int, 16,
            "Most segments one copy round uploads (a round can always be run again).", min=1, max=100_000)
)


class TieringConfig(TypedConfig):
    """Validated remote-tier settings (`remote.fetch.chunk.bytes` -> `cfg.remote_fetch_chunk_bytes`)."""

    DEFINITION = TIERING_CONFIG
