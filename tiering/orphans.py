"""Orphan segment objects of a partition: objects under `<topic>-<partition>/` named like a
segment's (`<base offset>-<segment id>.{log,index,timeindex,epochs}`) that no live manifest entry
owns, i.e. whose segment id the manifest does not know or knows as DELETE_FINISHED. Kafka's
remote log manager deletes what no remote log metadata references; so does this.

Who leaves them: a fenced zombie leader's late PUTs (tiering/uploader.py), and a write that lands
after its segment's objects were deleted — an index rebuild (tiering/index_rebuild.py) of a segment
the leader's retention expired and deleted while the rebuild ran, or a task of a run that lost its
job lease. Who removes them: the partition leader's sweep (`SegmentUploader.sweep_orphans`: on
taking leadership and every `remote.log.orphan.sweep.interval.ms`) and the `rebuild-index` job at
the start of each partition it holds the job lease of (spark_log/rebuild_job.py), so a tier whose
nodes are gone is cleaned too.

Why the sweep never deletes an object in use: it LISTs first, then reads the manifest. Every
writer commits an entry that owns its objects before writing them (the uploader's COPY_STARTED,
compaction's staged entries) or writes only under an entry that is COPY_FINISHED (the index
rebuild), so an object the listing saw has its entry in the manifest read afterwards, unless that
entry already went to DELETE_FINISHED (or was pruned), when its objects are garbage. Objects of
DELETE_STARTED entries stay: readers mid-segment finish, and the delayed delete removes them.
Nothing a manifest references is deleted.
"""

from __future__ import annotations

from typing import Iterable

from lakelog.tiering.layout import parse_segment_file, partition_dir
from lakelog.tiering.manifest_model import PartitionManifest, SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.store import ObjectStore


def orphan_keys(keys: Iterable[str], manifest: PartitionManifest) -> list[str]:
    """The segment object keys among `keys` (listed BEFORE `manifest` was read) that no live entry
    of `manifest` owns. Keys that are not segment objects (the manifest, anything else) are kept."""
    states = {s.segment_id: s.state for s in manifest.segments}
    doomed = []
    for key in keys:
        parsed = parse_segment_file(key.rsplit("/", 1)[-1])
        if parsed is None:
            continue
        state = states.get(parsed[1])
        if state is None or state == SegmentState.DELETE_FINISHED:
            doomed.append(key)
    return doomed


def sweep_orphans(store: ObjectStore, topic: str, partition: int) -> tuple[list[str], PartitionManifest]:
    """LIST the partition's objects, then read its manifest, delete the orphans among them.

    Returns (the keys deleted, the manifest read), so a caller can go on with that manifest. One
    LIST, one manifest GET, one batched delete when there are orphans. Safe while the leader
    uploads and expires (see the module docstring); the caller holds the partition's job lease
    when it is a job, so no other job writes there meanwhile."""
    listed = [o.key for o in store.list(partition_dir(topic, partition) + "/")]
    manifest = ManifestStore(store, topic, partition).load()
    doomed = orphan_keys(listed, manifest)
    if doomed:
        store.delete_many(doomed)
    return doomed, manifest
