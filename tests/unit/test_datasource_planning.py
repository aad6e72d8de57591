"""The data source's planning without a JVM: consecutive segments grouped into Spark tasks."""

from __future__ import annotations

import pickle

from lakelog.spark_log.datasource import SegmentGroup, SegmentPartition, group_segments
from lakelog.tiering.manifest_model import RemoteSegment, SegmentState


def part(base: int, size: int) -> SegmentPartition:
    seg = RemoteSegment(f"s{base}", base, base + 9, 0, size, (), SegmentState.COPY_FINISHED, 0)
    return SegmentPartition("file:///r", "t", 0, seg, base, base + 9, None, None, None, 1 << 20)


def test_segments_are_grouped_in_order_up_to_the_byte_limit():
    parts = [part(i * 10, size) for i, size in enumerate([40, 40, 40, 100, 10, 10])]
    groups = group_segments(parts, 100)
    assert [[p.segment.base_offset for p in g.parts] for g in groups] == [[0, 10], [20], [30], [40, 50]]
    assert [p for g in groups for p in g.parts] == parts  # every segment once, in order
    assert len(group_segments(parts, 1)) == len(parts)  # a segment larger than the limit is alone
    assert len(group_segments(parts, 1 << 30)) == 1
    assert pickle.loads(pickle.dumps(groups[0])) == groups[0]  # shipped to executors
    assert isinstance(groups[0], SegmentGroup)


def test_the_readers_store_timeout_reaches_every_planned_task_and_its_store(tmp_path):
    """`storeTimeoutMs` (sync-tables passes its run's `remote.job.store.timeout.ms`) is carried by
    each planned Spark partition, and the store a task opens from it has that deadline."""
    import pytest

    from lakelog.infra.config import ConfigError
    from lakelog.spark_log.datasource import LakelogReader, _open_store
    from tests.integration.test_remote_compaction import TOPIC, build_remote

    build_remote(tmp_path)
    remote = (tmp_path / "remote").as_uri()
    reader = LakelogReader({"remote": remote, "topic": TOPIC, "storeTimeoutMs": "2500", "maxPartitionBytes": "1"})
    planned = [p for g in reader.partitions() for p in g.parts]
    assert len(planned) > 1 and {p.store_timeout_ms for p in planned} == {2500}
    store = _open_store(planned[0].remote, planned[0].store_timeout_ms)
    try:
        assert store.deadlines.default_ms == 2500
    finally:
        store.close()
    default = LakelogReader({"remote": remote, "topic": TOPIC})
    assert {p.store_timeout_ms for g in default.partitions() for p in g.parts} == {None}
    with pytest.raises(ConfigError):
        LakelogReader({"remote": remote, "topic": TOPIC, "storeTimeoutMs": "0"})
