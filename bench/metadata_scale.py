"""Controller and metadata at scale, unit level: one topic of many partitions created, and a metadata
snapshot of many partitions written and loaded, each step timed on its own.

    python bench/metadata_scale.py                         # 1,000-partition topic, 10,000-partition snapshot
    python bench/metadata_scale.py --create-partitions 50 --snapshot-partitions 200 --repeat 1 --no-write  # smoke

No server runs: the cluster's own objects are driven in this process, so each figure is one step
of the path a `POST /v3/clusters/{c}/topics` takes (the Raft round trip between nodes is
bench/quorum.py's `create` case):

* place      — the controller's `TopicManager.create_topic` over 3 registered, unfenced brokers
               (placement, the record of every partition, its size check);
* encode     — the record as the metadata-log entry's bytes (one record carries every partition);
* apply      — one node's `ClusterImage.apply` of that entry (every partition state checked);
* local logs — what each replica then does per partition: a `PartitionLog` opened in a fresh
               directory and its `partition.metadata` marker written (temp directory of the
               benchmark's file system; `--local-logs 0` skips it);
* snapshot write / load — `ClusterImage.snapshot()` plus the Raft snapshot file's encoding, and
               their decoding plus `ClusterImage.restore()`, for an image of `--snapshot-partitions`
               partitions in topics of `--create-partitions` partitions, RF 3.

The baseline, measured in the same run, is `json.dumps` / `json.loads` of the same image state: the
floor of any JSON snapshot; the ratio says how much the checks and the snapshot envelope add.
Figures are medians of `--repeat` runs, printed and written to the "Metadata at scale" section of
docs/benchmarks.md (`--no-write` to skip), with the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    command_line,
    git_revision,
    load_average,
    machine_info,
    markdown_table,
    measure,
    rewrite_section,
    stopwatch,
)
from lakelog.ingest_api.cluster.controller_config import ControllerConfig  # noqa: E402
from lakelog.ingest_api.cluster.controller_topics import TopicManager  # noqa: E402
from lakelog.ingest_api.cluster.image import ClusterImage  # noqa: E402
from lakelog.ingest_api.cluster.image_values import encode_record  # noqa: E402
from lakelog.ingest_api.raft.messages import Snapshot  # noqa: E402
from lakelog.ingest_api.raft.storage import decode_snapshot, encode_snapshot  # noqa: E402
from lakelog.logstore.fileutil import atomic_write  # noqa: E402
from lakelog.logstore.log import PartitionLog  # noqa: E402

BROKERS = (1, 2, 3)
REPLICATION_FACTOR = 3
#: The issue's goals: a 1,000-partition topic created in < 2 s, a 10,000-partition snapshot in < 1 s.
CREATE_GOAL_S, SNAPSHOT_GOAL_S = 2.0, 1.0


def registered_image() -> ClusterImage:
    img = ClusterImage()
    for n in BROKERS:
        img.apply_record({"type": "register_broker", "node_id": n, "broker_epoch": 10 + n, "incarnation_id": "bench",
                          "host": f"node{n}", "port": 8080 + n, "rack": None})
        img.apply_record({"type": "unfence_broker", "node_id": n, "broker_epoch": 10 + n})
    return img


def controller_config(partitions: int) -> ControllerConfig:
    return ControllerConfig(max_partitions_per_topic=max(partitions, ControllerConfig().max_partitions_per_topic))


def create_steps(partitions: int, local_logs: int, repeat: int) -> dict[str, float]:
    """Median seconds of each step of creating one topic of `partitions` partitions."""
    config = controller_config(partitions)
    counter = iter(range(1 << 30))
    out: dict[str, float] = {}

    def place() -> None:
        i = next(counter)
        TopicManager(registered_image(), config).create_topic(f"t{i}", partitions, REPLICATION_FACTOR, {}, f"id{i}", 0)

    out["place"] = measure(place, repeat=repeat).median
    record = TopicManager(registered_image(), config).create_topic("t", partitions, REPLICATION_FACTOR, {}, "id", 0)[0]
    out["encode"] = measure(lambda: [encode_record(record)] and None, repeat=repeat).median

    def apply() -> float:
        img = registered_image()
        sw = stopwatch()
        img.apply_record(record)
        elapsed = sw()
        if img.skipped_records:
            raise RuntimeError(f"the create record was skipped: {img.recent_skips}")
        return elapsed

    out["apply"] = measure(apply, repeat=repeat).median
    if local_logs:
        out["local logs"] = measure(lambda: open_local_logs(local_logs), repeat=repeat, warmup=0).median
    return out


def open_local_logs(count: int) -> float:
    """Seconds to open `count` fresh partition logs with their marker files (directory removal untimed)."""
    root = Path(tempfile.mkdtemp(prefix="lakelog-bench-logs-"))
    try:
        sw = stopwatch()
        logs = []
        for p in range(count):
            directory = root / f"t-{p}"
            logs.append(PartitionLog(directory))
            atomic_write(directory / "partition.metadata", b"version: 0\ntopic_id: bench\n")
        elapsed = sw()
        for plog in logs:
            plog.close()
        return elapsed
    finally:
        shutil.rmtree(root, ignore_errors=True)


def snapshot_image(partitions: int, per_topic: int) -> ClusterImage:
    img = registered_image()
    manager = TopicManager(img, controller_config(per_topic))
    made, i = 0, 0
    while made < partitions:
        n = min(per_topic, partitions - made)
        img.apply_record(manager.create_topic(f"topic-{i:05d}", n, REPLICATION_FACTOR, {}, f"id-{i}", 0)[0])
        made, i = made + n, i + 1
    return img


def snapshot_steps(partitions: int, per_topic: int, repeat: int) -> tuple[dict[str, float], int]:
    img = snapshot_image(partitions, per_topic)
    state = img.state_dict()
    data = encode_snapshot(Snapshot(img.last_applied_index, 1, img.snapshot()))

    def load() -> None:
        ClusterImage().restore(decode_snapshot(data).data)

    def write() -> None:
        encode_snapshot(Snapshot(img.last_applied_index, 1, img.snapshot()))

    dumped = json.dumps(state)
    # The timed callables return None: measure() takes a returned value for a self-timed figure.
    out = {"snapshot write": measure(write, repeat=repeat).median,
           "snapshot load": measure(load, repeat=repeat).median,
           "baseline json.dumps": measure(lambda: [json.dumps(state)] and None, repeat=repeat).median,
           "baseline json.loads": measure(lambda: [json.loads(dumped)] and None, repeat=repeat).median}
    return out, len(data)


def report(args: argparse.Namespace, create: dict[str, float], snap: dict[str, float], snap_bytes: int) -> str:
    ms = lambda s: f"{s * 1000:.1f}"  # noqa: E731
    create_total = sum(create.values())
    rows = [[f"create topic ({args.create_partitions:,} partitions, RF {REPLICATION_FACTOR}): {k}", ms(v), ""]
            for k, v in create.items()]
    rows.append([f"create topic: sum of the steps above (goal < {CREATE_GOAL_S:.0f} s)", ms(create_total),
                 "met" if create_total < CREATE_GOAL_S else "MISSED"])
    for k in ("snapshot write", "snapshot load"):
        base = snap["baseline json.dumps" if k.endswith("write") else "baseline json.loads"]
        rows.append([f"{k} ({args.snapshot_partitions:,} partitions, {snap_bytes / 1e6:.2f} MB; goal < "
                     f"{SNAPSHOT_GOAL_S:.0f} s)", ms(snap[k]),
                     f"{snap[k] / base:.1f}x json baseline; " + ("met" if snap[k] < SNAPSHOT_GOAL_S else "MISSED")])
    rows.append(["baseline: json.dumps / json.loads of the same image state",
                 f"{ms(snap['baseline json.dumps'])} / {ms(snap['baseline json.loads'])}", ""])
    info = machine_info(ROOT / "bench")
    return "\n\n".join([
        "## Metadata at scale",
        f"`{command_line()}` at {git_revision(ROOT)}; medians of {args.repeat} runs; load average "
        f"{args.load_before} before, {load_average()} after (the machine is shared). Machine: "
        + ", ".join(f"{k} {v}" for k, v in info.items()) + ".",
        "In-process steps of creating one topic (no Raft round trip: see the quorum section) and of a metadata "
        "snapshot (bench/metadata_scale.py's docstring).",
        markdown_table(["step", "ms", "note"], rows)])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--create-partitions", type=int, default=1000)
    parser.add_argument("--local-logs", type=int, default=None,
                        help="partition logs one replica opens (default: --create-partitions; 0 skips)")
    parser.add_argument("--snapshot-partitions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.load_before = load_average()
    local_logs = args.create_partitions if args.local_logs is None else args.local_logs
    create = create_steps(args.create_partitions, local_logs, args.repeat)
    snap, snap_bytes = snapshot_steps(args.snapshot_partitions, args.create_partitions, args.repeat)
    text = report(args, create, snap, snap_bytes)
    print(text)
    if not args.no_write:
        rewrite_section(ROOT / "docs" / "benchmarks.md", "metadata-scale", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
