"""The tiering manager over an object store that hangs (moto's S3 server SIGSTOPped), in process:
the store stack a node builds (GuardedStore over DeadlineStore over the S3 store), the store's own
timeouts set far beyond the test's patience so that only the deadlines can end a call.

Checked: with the store hung, a copy round fails within `remote.log.upload.timeout.ms` /
`remote.log.metadata.timeout.ms` with a retriable error naming the store and the key (instead of
blocking on the store client's 10-minute timeouts), the store's health degrades and later rounds
are refused at once; local retention answers and deletes no segment the remote tier does not
hold (COPY_FINISHED); after SIGCONT the rounds resume in order: the remote tier holds every
record once, in order, its COPY_FINISHED entries contiguous, and no object without an owner
(the late PUTs of the abandoned uploads are deleted).
"""

from __future__ import annotations

import random
import threading
import uuid

import pytest

from lakelog.infra.config import LogConfig
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.deadline_store import DeadlineStore, Deadlines
from lakelog.tiering.errors import RemoteStorageTimeoutError, TransientStoreError
from lakelog.tiering.guarded_store import GuardedStore
from lakelog.tiering.layout import partition_dir
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.orphans import orphan_keys
from lakelog.tiering.remote_scan import iter_segment_records, load_manifest
from lakelog.tiering.store_health import StoreHealth, StoreState
from lakelog.tiering.stores import open_store
from tests.faults.test_replication_faults import _seed
from tests.support.s3server import S3Server

pytestmark = pytest.mark.timeout(300)
TOPIC = "deadlines"
#: How long the test waits for a call that must end by its deadline (1 s): far below the store
#: client's own timeouts (600 s a request), so only the deadline can end it in time.
PATIENCE_S = 60.0
CONFIG = {"remote.storage.request.timeout.ms": 600_000, "remote.storage.connect.timeout.ms": 600_000,
          "remote.storage.max.attempts": 1, "remote.log.upload.timeout.ms": 1_000,
          "remote.log.metadata.timeout.ms": 1_000, "remote.storage.health.failure.threshold": 2,
          "remote.storage.health.probe.interval.ms": 500, "remote.segment.delete.delay.ms": 0,
          "remote.log.metadata.max.age.ms": 0, "remote.log.copy.max.segments.per.round": 100}


def _append(log: PartitionLog, rng: random.Random, batches: int, written: list) -> None:
    for _ in range(batches):
        recs = [Record(r, 1_000 + len(written) + r, f"k{rng.randrange(50)}".encode(),
                       f"v{len(written) + r}".encode() * rng.randint(1, 20)) for r in range(rng.randint(1, 5))]
        first = log.append_as_leader(build_batch(recs), 1).first_offset
        written += [(first + r.offset, r.value) for r in recs]


def _in_time(fn, what: str):
    """Run `fn` on a thread; its result or error, failing the test if it does not end in PATIENCE_S."""
    out: list = []

    def run() -> None:
        try:
            out.append((True, fn()))
        except BaseException as e:  # noqa: BLE001 - handed back
            out.append((False, e))

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(PATIENCE_S)
    assert out, f"{what} still blocked on the hung store after {PATIENCE_S} s"
    return out[0]


def _remote_records(store, manifest) -> list:
    out = []
    for seg in manifest.copy_finished:
        out += [(r.offset, r.value) for r in iter_segment_records(store, TOPIC, 0, seg)]
    return out


def test_copy_rounds_and_local_retention_over_a_hung_store_end_by_their_deadlines(tmp_path):
    rng = random.Random(_seed("tiering manager over a hung object store"))
    cfg = TieringConfig(CONFIG)
    with S3Server() as s3:
        bucket = f"lakelog-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(bucket)
        raw = open_store(f"s3://{bucket}/tier", cfg, endpoint_url=s3.endpoint_url, access_key_id="testing",
                         secret_access_key="testing", region="us-east-1")
        health = StoreHealth(failure_threshold=cfg.remote_storage_health_failure_threshold,
                             probe_interval_ms=cfg.remote_storage_health_probe_interval_ms)
        deadline_store = DeadlineStore(raw, Deadlines.for_node(cfg))
        tier = RemoteTier(GuardedStore(deadline_store, health), cfg)
        log = PartitionLog(tmp_path / f"{TOPIC}-0", LogConfig({
            "segment.bytes": 3000, "retention.ms": -1, "local.retention.bytes": 1, "remote.storage.enable": True}))
        try:
            written: list = []
            rp = tier.partition(TOPIC, 0)
            _append(log, rng, 60, written)
            rp.copy_segments(log, 1, log.log_end_offset)
            before = load_manifest(raw, TOPIC, 0)
            assert before.end_offset is not None
            rp.apply_local_retention(log, log.log_end_offset)
            assert 0 < log.log_start_offset <= before.end_offset + 1
            _append(log, rng, 60, written)
            assert len(log.segments) > 3

            s3.freeze()
            try:
                ok, error = _in_time(lambda: rp.copy_segments(log, 1, log.log_end_offset), "a copy round")
                assert not ok and isinstance(error, RemoteStorageTimeoutError), error
                assert bucket in str(error) and "timeout.ms=1000 ms" in str(error), str(error)
                # A second miss degrades the store; from then on a round is refused at once.
                for _ in range(3):
                    ok, error = _in_time(lambda: rp.copy_segments(log, 1, log.log_end_offset), "a copy round")
                    assert not ok and isinstance(error, TransientStoreError), error
                assert health.snapshot().degradations >= 1
                assert health.state != StoreState.HEALTHY
                # Local retention answers, and keeps every segment the remote tier does not hold.
                start = log.log_start_offset
                ok, result = _in_time(lambda: rp.apply_local_retention(log, log.log_end_offset), "local retention")
                assert ok, result
                assert log.log_start_offset <= before.end_offset + 1
                assert log.log_start_offset >= start
            finally:
                s3.thaw()

            # The store answers again: rounds resume (after the health's probe interval) and finish.
            ok = False
            for _ in range(200):
                ok, report = _in_time(lambda: rp.copy_segments(log, 1, log.log_end_offset), "a copy round")
                if ok and report.lag_segments == 0:
                    break
                threading.Event().wait(0.1)
            assert ok and report.lag_segments == 0, report
            after = load_manifest(raw, TOPIC, 0)
            done = after.copy_finished
            assert all(a.end_offset + 1 == b.base_offset for a, b in zip(done, done[1:]))
            sealed_end = log.segments[-1].base_offset - 1
            assert after.end_offset == sealed_end
            assert _remote_records(raw, after) == [w for w in written if w[0] <= sealed_end]
            # The abandoned uploads' objects (the hung PUTs landed once the store woke) go with them.
            for _ in range(600):
                if deadline_store.outstanding == 0:
                    break
                threading.Event().wait(0.1)
            assert deadline_store.outstanding == 0
            for _ in range(3):
                rp.cleanup(1)
                rp.sweep_orphans()
            keys = [o.key for o in raw.list(partition_dir(TOPIC, 0) + "/")]
            assert not orphan_keys(keys, load_manifest(raw, TOPIC, 0))
            rp.apply_local_retention(log, log.log_end_offset)
            assert log.log_start_offset == log.segments[0].base_offset and len(log.segments) == 1
        finally:
            log.close()
            tier.close()
