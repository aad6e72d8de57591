"""The replica manager's reconcile in slices: many new partitions never hold the event loop long."""

from __future__ import annotations

from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.replication.partition import PartitionKey
from lakelog.ingest_api.replication.replica_manager import ReplicaManager
from tests.unit.test_cluster_image import applied, create, part, register


class _Fetcher:
    def __init__(self) -> None:
        self.keys: set[PartitionKey] = set()

    def start(self) -> None:
        pass

    def add(self, key: PartitionKey) -> None:
        self.keys.add(key)

    def remove(self, key: PartitionKey) -> None:
        self.keys.discard(key)


def _manager(tmp_path, image: ClusterImage) -> ReplicaManager:
    async def call(*args, **kwargs):
        raise AssertionError("no controller call expected")

    config = NodeConfig({"node.id": 1, "log.dirs": str(tmp_path)})
    return ReplicaManager(config, image, cleaner=None, new_fetcher=lambda leader: _Fetcher(),
                          controller_call=call, broker_epoch=lambda: 1, on_drop=lambda key: None)


def test_a_budgeted_reconcile_opens_partitions_in_slices_then_runs_the_full_pass(tmp_path):
    image = ClusterImage()
    for n in (1, 2):
        applied(image, register(n, 10 + n))
    applied(image, create("many", "id-many", *[part([1, 2] if p % 2 else [2, 1]) for p in range(30)]))
    rm = _manager(tmp_path, image)
    slices = 0
    while not rm.reconcile_now(budget_s=0.0):  # a zero budget: one new partition per slice
        slices += 1
        assert len(rm._partitions) == slices  # exactly one more each time, none opened twice
    assert slices == 29 and len(rm._partitions) == 30
    led = [p for p in range(30) if rm.local_partition(PartitionKey("many", p)).core.role.name == "LEADER"]
    assert led == [p for p in range(30) if p % 2]
    # A topic deleted: dropped by the next full pass.
    applied(image, {"type": "delete_topic", "name": "many", "topic_id": "id-many"})
    assert rm.reconcile_now(budget_s=0.0) and rm.partitions() == []


def test_an_unbudgeted_reconcile_does_everything_at_once(tmp_path):
    image = ClusterImage()
    applied(image, register(1, 11))
    applied(image, create("t", "id-t", *[part([1]) for _ in range(5)]))
    rm = _manager(tmp_path, image)
    assert rm.reconcile_now() is True and len(rm.partitions()) == 5


def _delta_cost(tmp_path, topics: int) -> tuple[int, int]:
    image = ClusterImage()
    for n in (1, 2):
        applied(image, register(n, 10 + n))
    for t in range(topics):
        applied(image, create(f"t{t}", f"id-{t}", *[part([1, 2]) for _ in range(10)]))
    rm = _manager(tmp_path, image)
    assert rm.reconcile_now()
    assert rm.reconcile_now()  # nothing changed: nothing looked at
    before = (rm.partitions_examined_by_reconcile, rm.partitions_reconciled)
    applied(image, {"type": "partition_change", "topic": "t0", "topic_id": "id-0", "partition": 3, "isr": [1],
                    "leader_epoch": 0, "partition_epoch": 1})
    assert rm.reconcile_now()
    assert rm.local_partition(PartitionKey("t0", 3)).isr == [1]
    cost = (rm.partitions_examined_by_reconcile - before[0], rm.partitions_reconciled - before[1])
    for p in rm.partitions():
        p.log.close()
    return cost


def test_applying_a_metadata_delta_looks_at_the_changed_topic_only(tmp_path):
    # One partition's ISR changed: its topic's 10 partitions are looked at, 1 brought in line,
    # whether the node holds 30 partitions or 120.
    assert _delta_cost(tmp_path / "small", 3) == (10, 1)
    assert _delta_cost(tmp_path / "large", 12) == (10, 1)


def test_a_scheduled_reconcile_opens_many_logs_on_threads_then_brings_them_in_line(tmp_path):
    import asyncio

    image = ClusterImage()
    for n in (1, 2):
        applied(image, register(n, 10 + n))
    applied(image, create("many", "id-many", *[part([1, 2] if p % 2 else [2, 1]) for p in range(40)]))
    rm = _manager(tmp_path, image)

    async def run() -> None:
        rm.schedule_reconcile()
        for _ in range(3000):
            await asyncio.sleep(0.01)
            if rm.partitions_reconciled == 40:
                break
        assert rm.partitions_reconciled == 40 and rm.logs_opened == 40  # each opened once
        roles = {p: rm.local_partition(PartitionKey("many", p)).core.role.name for p in range(40)}
        assert [p for p, role in roles.items() if role == "LEADER"] == [p for p in range(40) if p % 2]

    try:
        asyncio.run(run())
    finally:
        assert rm.close_logs() == 0


def _creation_durability_calls(tmp_path, monkeypatch, partitions: int) -> tuple[int, list[int]]:
    """fsync + syncfs calls while a node opens a new topic of `partitions` (RF 2, half of them led
    here) on the threads and brings them in line; and how many partitions were registered at each."""
    import asyncio
    import os

    from lakelog.logstore import fileutil

    image = ClusterImage()
    for n in (1, 2):
        applied(image, register(n, 10 + n))
    applied(image, create("many", "id-many", *[part([1, 2] if p % 2 else [2, 1]) for p in range(partitions)]))
    rm = _manager(tmp_path, image)
    served_at_call: list[int] = []
    real_fsync, real_syncfs = os.fsync, fileutil.syncfs
    monkeypatch.setattr(os, "fsync", lambda fd: (served_at_call.append(len(rm._partitions)), real_fsync(fd))[1])
    monkeypatch.setattr(fileutil, "syncfs",
                        lambda path: (served_at_call.append(len(rm._partitions)), real_syncfs(path))[1])

    async def run() -> None:
        rm.schedule_reconcile()
        for _ in range(6000):
            await asyncio.sleep(0.01)
            if rm.partitions_reconciled == partitions:
                break
        assert rm.partitions_reconciled == partitions and rm.logs_opened == partitions

    try:
        asyncio.run(run())
    finally:
        monkeypatch.undo()  # closing the logs (clean-shutdown markers) is not the creation
        assert rm.close_logs() == 0
    stamps = [tmp_path / f"many-{p}" / "leader-epoch-checkpoint" for p in range(partitions)]
    assert [p for p, f in enumerate(stamps) if f.exists() and f.stat().st_size] == list(range(1, partitions, 2))  # every leader's first epoch stamp is on disk
    return len(served_at_call), served_at_call


def test_creating_a_topic_costs_a_few_syncs_per_batch_not_two_fsyncs_per_partition(tmp_path, monkeypatch):
    # Before batching: 2 fsyncs per partition (partition.metadata and its directory) and 2 more per
    # partition led here (its first leader-epoch-checkpoint): 240 at 80 partitions, 960 at 320.
    small, _ = _creation_durability_calls(tmp_path / "small", monkeypatch, 80)
    large, served = _creation_durability_calls(tmp_path / "large", monkeypatch, 320)
    # One sync after the logs open on the threads, one after the pass that makes the leaders.
    assert small <= 4 and large <= 4, (small, large)
    assert served[0] == 0  # the new logs are durable before any of them is registered


def test_a_creation_cut_by_a_crash_before_its_sync_is_created_afresh(tmp_path):
    image = ClusterImage()
    applied(image, register(1, 11))
    applied(image, create("t", "id-t", part([1])))
    leftover = tmp_path / "t-0"  # what a crash before the sync may leave: empty new files
    leftover.mkdir()
    (leftover / "partition.metadata").write_bytes(b"")
    (leftover / "leader-epoch-checkpoint").write_bytes(b"")
    rm = _manager(tmp_path, image)
    assert rm.reconcile_now()
    assert (leftover / "partition.metadata").read_text() == "version: 0\ntopic_id: id-t\n"
    assert rm.local_partition(PartitionKey("t", 0)).log.epochs.entries == [(0, 0)]
    assert rm.close_logs() == 0


def test_a_failed_sync_of_new_partitions_takes_the_log_directory_offline(tmp_path, monkeypatch):
    import errno

    import pytest

    from lakelog.logstore import fileutil
    from lakelog.logstore.errors import KafkaStorageError
    from lakelog.logstore.log_dir_health import LogDirState

    def failing(path):
        raise OSError(errno.EIO, "I/O error")

    image = ClusterImage()
    applied(image, register(1, 11))
    applied(image, create("t", "id-t", *[part([1]) for _ in range(20)]))
    rm = _manager(tmp_path, image)
    monkeypatch.setattr(fileutil, "syncfs", failing)
    with pytest.raises(KafkaStorageError, match="sync of new partition files failed"):
        rm.reconcile_now()
    assert rm.log_dir.state == LogDirState.OFFLINE
    rm.close_logs()


def test_leading_many_partitions_after_a_failover_costs_a_few_syncs_not_two_fsyncs_per_partition(
        tmp_path, monkeypatch):
    import os

    from lakelog.logstore import fileutil

    partitions = 200
    image = ClusterImage()
    for n in (1, 2):
        applied(image, register(n, 10 + n))
    applied(image, create("many", "id-many", *[part([2, 1]) for _ in range(partitions)]))
    rm = _manager(tmp_path, image)
    assert rm.reconcile_now()
    assert all(not rm.local_partition(PartitionKey("many", p)).is_leader for p in range(partitions))
    calls: list[str] = []
    real_fsync, real_syncfs = os.fsync, fileutil.syncfs
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(fileutil, "syncfs", lambda path: (calls.append("syncfs"), real_syncfs(path))[1])
    # Node 2 fenced: one record moves every leadership to node 1, in a new leader epoch.
    applied(image, {"type": "partition_changes", "changes": [
        {"topic": "many", "topic_id": "id-many", "partition": p, "leader": 1, "isr": [1], "leader_epoch": 1,
         "partition_epoch": 1}
        for p in range(partitions)]})
    assert rm.reconcile_now()
    monkeypatch.undo()
    assert all(rm.local_partition(PartitionKey("many", p)).is_leader for p in range(partitions))
    # Before batching: a temp-file fsync and a directory fsync per new leader (400 here).
    assert len(calls) <= 4, calls
    for p in range(partitions):  # every new leader's epoch stamp is on disk once the pass returned
        assert (tmp_path / f"many-{p}" / "leader-epoch-checkpoint").read_text() == "0\n1\n1 0\n"
    assert rm.close_logs() == 0


def test_logs_opened_on_the_threads_check_the_file_budget_once_per_batch(tmp_path):
    import asyncio

    image = ClusterImage()
    for n in (1, 2):
        applied(image, register(n, 10 + n))
    applied(image, create("many", "id-many", *[part([2, 1]) for _ in range(120)]))
    rm = _manager(tmp_path, image)
    checks: list[int] = []
    real = rm.check_file_budget
    rm.check_file_budget = lambda n: (checks.append(n), real(n))[1]  # type: ignore[method-assign]

    async def run() -> None:
        rm.schedule_reconcile()
        for _ in range(6000):
            await asyncio.sleep(0.01)
            if rm.partitions_reconciled == 120:
                break

    asyncio.run(run())
    # It lists /proc/self/fd (~10 ms at 12,000 open files): once for the batch, not once per log.
    assert rm.logs_opened == 120 and checks == [120]
    assert rm.close_logs() == 0


def test_a_delta_changing_many_topics_is_brought_in_line_in_slices_that_yield_the_loop(tmp_path):
    image = ClusterImage()
    for n in (1, 2):
        applied(image, register(n, 10 + n))
    for t in range(6):
        applied(image, create(f"t{t}", f"id-t{t}", *[part([2, 1]) for _ in range(10)]))
    rm = _manager(tmp_path, image)
    assert rm.reconcile_now()
    # Node 2 fenced: every partition of every topic changes leader in one delta.
    applied(image, {"type": "partition_changes", "changes": [
        {"topic": f"t{t}", "topic_id": f"id-t{t}", "partition": p, "leader": 1, "isr": [1], "leader_epoch": 1,
         "partition_epoch": 1} for t in range(6) for p in range(10)]})
    before = rm.partitions_reconciled
    slices = 0
    while not rm.reconcile_now(budget_s=0.0):  # a zero budget: one topic per slice
        slices += 1
        assert rm.partitions_reconciled - before == 10 * slices  # one more topic each time, none twice
    assert slices == 5 and rm.partitions_reconciled - before == 60
    assert all(p.is_leader for p in rm.partitions())
    assert rm.close_logs() == 0


def test_stray_directories_are_decided_by_the_metadata_not_by_the_logs_opened_so_far(tmp_path):
    image = ClusterImage()
    applied(image, register(1, 11))
    applied(image, create("t", "id-t", *[part([1]) for _ in range(20)]))
    rm = _manager(tmp_path, image)
    assert rm.reconcile_now() and rm.close_logs() == 0
    gone = tmp_path / "gone-0"  # a partition the metadata no longer assigns here
    gone.mkdir()
    (gone / "partition.metadata").write_text("version: 0\ntopic_id: id-gone\n")
    # Restarted: ready (caught up with the metadata) before any of its 20 logs is open again.
    restarted = _manager(tmp_path, image)
    restarted.remove_stray_logs_once()
    assert not gone.exists()
    assert all((tmp_path / f"t-{p}" / "partition.metadata").exists() for p in range(20))
    assert restarted.reconcile_now() and restarted.logs_recovered == 0  # the clean logs, not new ones
    assert restarted.close_logs() == 0
