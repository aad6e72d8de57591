"""Settings of the remote compaction job, declared once (job-level keys, not topic keys).

`lakelog jobs run compaction --config KEY=VALUE` takes these beside topic keys: a key declared
here configures the job, any other is a topic key (`infra.config.LogConfig`).
"""

from __future__ import annotations

from lakelog.infra.config import INT_MAX, ConfigDef, TypedConfig

MIB = 1024 * 1024

COMPACTION_JOB_CONFIG = (
    ConfigDef()
    .define("compaction.offset.map.max.bytes", int, 128 * MIB,
            "Bound of a partition's key -> latest offset map in one compaction round (what Kafka's "
            "log.cleaner.dedupe.buffer.size bounds for its cleaner): the map's Arrow buffers (key bytes, "
            "a 4-byte key position and an 8-byte offset per key), in each map task, in the merge on the "
            "driver and in each rewrite task. When the dirty section's keys do not fit, the round maps "
            "a prefix and the rest stays dirty for the next round.",
            min=64 * 1024, max=INT_MAX, unit="bytes")
    .define("compaction.task.max.bytes", int, 128 * MIB,
            "Most bytes of remote .log one compaction task reads: a partition's offset map is built by "
            "tasks over runs of whole segments of at most this size, a larger segment cut into pieces "
            "at its offset index's entries (merged on the driver, latest offset wins), and its rewrite "
            "by tasks over runs of segment groups of at most this size (a larger group is one task).",
            min=1024, max=1 << 40, unit="bytes")
    .define("compaction.map.tasks.per.wave", int, 16,
            "Most map tasks of one Spark job: the map stage runs in waves of at most this many tasks, "
            "and the driver merges each wave's maps into the partitions' maps before the next, so it "
            "holds at most this many task maps (each within compaction.offset.map.max.bytes) besides "
            "each partition's merged map. A partition whose map has ended (the bound was reached) "
            "gets no more map tasks. Set it to at least the cluster's task slots.",
            min=1, max=100_000, unit="tasks")
    .define("compaction.partitions.per.group", int, 8,
            "Most partitions one compaction run works on at once: the run takes its partitions (in "
            "topic, partition order) in groups of at most this many, and each group goes through "
            "every step (leases, map waves, merged maps, rewrites, the swap) before the next starts. "
            "The driver holds one merged map (within compaction.offset.map.max.bytes) per partition "
            "of the group, so its worst case is (this + compaction.map.tasks.per.wave + 1) x "
            "compaction.offset.map.max.bytes. A larger group gives the rewrite stage more tasks per "
            "Spark job; a smaller one less driver memory.",
            min=1, max=100_000, unit="partitions")
)


class CompactionJobConfig(TypedConfig):
    """Validated compaction job settings (`compaction.task.max.bytes` -> `cfg.compaction_task_max_bytes`)."""

    DEFINITION = COMPACTION_JOB_CONFIG


def split_overrides(overrides: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(job keys, topic keys) of a job run's `--config` overrides."""
    job = {k: v for k, v in overrides.items() if k in COMPACTION_JOB_CONFIG.keys}
    return job, {k: v for k, v in overrides.items() if k not in job}
