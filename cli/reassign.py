"""Console tools for partition reassignment and node removal, over the node's v3 HTTP API:

    lakelog partitions reassign --generate --topics-to-move-json-file F --broker-list 1,2,3
    lakelog partitions reassign --execute --reassignment-json-file F [--throttle BYTES_PER_S]
    lakelog partitions reassign --verify  --reassignment-json-file F
    lakelog partitions reassign --cancel  --reassignment-json-file F
    lakelog nodes list
    lakelog nodes drain N [--throttle B] [--timeout-s S]
    lakelog nodes decommission N [--throttle B] [--timeout-s S]

Files and output follow `kafka-reassign-partitions.sh`: a topics-to-move file is
`{"version": 1, "topics": [{"topic": "t"}]}`, a reassignment file
`{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2, 3]}]}` (`log_dirs`
accepted and ignored: one log directory per node). `--generate` prints the current assignment and a
proposed one (placement as for a new topic, over the listed brokers) and changes nothing.
`--execute` prints the current assignment (save it to roll back) and starts every move at once
(all or none). With `--throttle`, it sets `leader/follower.replication.throttled.rate` as the
cluster-wide default and lists the moving partitions' current replicas (leader side) and new
replicas (follower side) in the topics' `*.replication.throttled.replicas`; `--verify` removes
them once every listed reassignment has completed, as Kafka's does. `--cancel` reverts the listed
partitions that are still moving to their original replicas.

`nodes drain N` moves every replica off node N, leadership first: each partition N leads gets N last
in its replica list and a preferred-leader election hands the leadership to an in-sync replica
(one with none in sync keeps it until its new replica is); then each partition N holds gets, in
N's place, the live broker holding the fewest replicas (not already a replica), and the controller
drops N's replica once the new one is in sync. `nodes decommission N` drains N, waits for its
process to stop (an operator stops it: a running node registers again) and unregisters it.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

from lakelog.client.node_client import LakelogClient, RequestFailedError
from lakelog.cli.client_args import client_from_args
from lakelog.infra.errors import ErrorKind, LakelogError

RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"
#: How often drain / decommission look at the reassignments while they wait.
POLL_S = 0.5
#: Most seconds `nodes drain` waits for the leaderships to move before it starts the copies anyway.
LEADERSHIP_WAIT_S = 30.0
#: Most partitions one reassignment file may name.
MAX_FILE_PARTITIONS = 10_000


class ReassignInputError(LakelogError):
    """A reassignment or topics file, or a broker list, is malformed."""

    kind = ErrorKind.INVALID_REQUEST


# --------------------------------------------------------------------------------- files

def _load_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise ReassignInputError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise ReassignInputError(f"{path} is not JSON: {e}") from None


def parse_topics_to_move(doc: Any, path: str = "the topics file") -> list[str]:
    if not isinstance(doc, dict) or not isinstance(doc.get("topics"), list) or not doc["topics"]:
        raise ReassignInputError(f'{path}: expected {{"version": 1, "topics": [{{"topic": "NAME"}}, ...]}}')
    names = []
    for t in doc["topics"]:
        if not isinstance(t, dict) or not isinstance(t.get("topic"), str) or not t["topic"]:
            raise ReassignInputError(f"{path}: every entry needs a \"topic\" name")
        names.append(t["topic"])
    if len(set(names)) != len(names):
        raise ReassignInputError(f"{path}: a topic is listed twice")
    return names


def parse_reassignment(doc: Any, path: str = "the reassignment file") -> list[tuple[str, int, list[int]]]:
    if not isinstance(doc, dict) or not isinstance(doc.get("partitions"), list) or not doc["partitions"]:
        raise ReassignInputError(f'{path}: expected {{"version": 1, "partitions": [{{"topic": ..., "partition": ..., '
                                 f'"replicas": [...]}}, ...]}}')
    if doc.get("version", 1) != 1:
        raise ReassignInputError(f"{path}: version {doc.get('version')!r} is not 1")
    if len(doc["partitions"]) > MAX_FILE_PARTITIONS:
        raise ReassignInputError(f"{path}: at most {MAX_FILE_PARTITIONS} partitions")
    out, seen = [], set()
    for e in doc["partitions"]:
        ok = (isinstance(e, dict) and isinstance(e.get("topic"), str) and type(e.get("partition")) is int
              and e["partition"] >= 0 and isinstance(e.get("replicas"), list) and e["replicas"]
              and all(type(r) is int and r >= 0 for r in e["replicas"]))
        if not ok:
            raise ReassignInputError(f"{path}: {json.dumps(e)} needs a topic, a partition and a non-empty list of "
                                     f"replica node ids")
        if len(set(e["replicas"])) != len(e["replicas"]):
            raise ReassignInputError(f"{path}: {e['topic']}-{e['partition']} lists a replica twice")
        if (e["topic"], e["partition"]) in seen:
            raise ReassignInputError(f"{path}: {e['topic']}-{e['partition']} is listed twice")
        seen.add((e["topic"], e["partition"]))
        out.append((e["topic"], e["partition"], list(e["replicas"])))
    return out


def assignment_json(entries: list[tuple[str, int, list[int]]]) -> str:
    return json.dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)} for t, p, r in entries]})


def parse_broker_list(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ReassignInputError(f"--broker-list {text!r}: expected node ids like 1,2,3") from None
    if not ids or len(set(ids)) != len(ids) or min(ids) < 0:
        raise ReassignInputError(f"--broker-list {text!r}: expected distinct node ids like 1,2,3")
    return ids


# --------------------------------------------------------------------------------- HTTP

class Admin:
    """The v3 calls these tools make (one node; it forwards changes to the controller)."""

    def __init__(self, client: LakelogClient) -> None:
        self.c = client

    @property
    def base(self) -> str:
        return f"/v3/clusters/{quote(self.c.cluster_id, safe='')}"

    def brokers(self) -> list[dict[str, Any]]:
        return list(self.c._json("GET", f"{self.base}/brokers").get("data", []))

    def assignment(self, topics: list[str] | None = None) -> list[tuple[str, int, list[int]]]:
        """(topic, partition, replicas) of the named topics (all without a list), by topic and partition."""
        names = topics if topics is not None else sorted(t["topic_name"] for t in self.c.list_topics())
        out = []
        for name in names:
            for p in self.c.partition_replicas(name):
                out.append((name, p.partition, list(p.replicas)))
        return out

    def led_by(self, node_id: int) -> list[tuple[str, int, list[int]]]:
        """(topic, partition, replicas) of every partition `node_id` leads."""
        out = []
        for t in sorted(x["topic_name"] for x in self.c.list_topics()):
            out += [(t, p.partition, list(p.replicas)) for p in self.c.partition_replicas(t) if p.leader == node_id]
        return out

    def elect_preferred(self, partitions: list[tuple[str, int]]) -> None:
        self.c._request("POST", f"{self.base}/topics/-/partitions/-/preferred-leader:elect", json={
            "data": [{"topic_name": t, "partition_id": p} for t, p in partitions]})

    def partition(self, topic: str, p: int) -> Any:
        return next(x for x in self.c.partition_replicas(topic) if x.partition == p)

    def reassignments(self) -> dict[tuple[str, int], dict[str, Any]]:
        doc = self.c._json("GET", f"{self.base}/topics/-/partitions/-/reassignment")
        return {(d["topic_name"], int(d["partition_id"])): d for d in doc.get("data", [])}

    def alter(self, changes: list[tuple[str, int, list[int] | None]]) -> None:
        self.c._request("POST", f"{self.base}/topics/-/partitions/-/reassignment:alter", expect=(202,), json={
            "data": [{"topic_name": t, "partition_id": p, "replicas": r} for t, p, r in changes]})

    def set_rates(self, value: int | None) -> None:
        for key in RATE_KEYS:
            if value is None:
                self.c._request("DELETE", f"{self.base}/broker-configs/{key}", expect=(204, 404))
            else:
                self.c._request("PUT", f"{self.base}/broker-configs/{key}", expect=(204,), json={"value": str(value)})

    def rates_set(self) -> bool:
        try:
            self.c._json("GET", f"{self.base}/broker-configs/{RATE_KEYS[0]}")
            return True
        except RequestFailedError as e:
            if e.status == 404:
                return False
            raise

    def alter_topic(self, topic: str, set_configs: dict[str, str], delete: list[str] = ()) -> None:
        self.c.alter_topic_configs(topic, set_configs, delete)

    def topic_configs(self, topic: str) -> dict[str, str]:
        return {c["name"]: c.get("value") for c in self.c.topic_configs(topic) if not c.get("is_default")}

    def unregister(self, node_id: int) -> None:
        self.c._request("DELETE", f"{self.base}/brokers/{node_id}", expect=(204,))


# --------------------------------------------------------------------------------- reassign

def generate(admin: Admin, topics: list[str], brokers: list[int]) -> tuple[list, list]:
    """(current, proposed) assignments of `topics` over `brokers` (placement as for new topics)."""
    from lakelog.ingest_api.cluster.placement import assign_replicas

    registered = {int(b["broker_id"]): b.get("rack") for b in admin.brokers()}
    unknown = [b for b in brokers if b not in registered]
    if unknown:
        raise ReassignInputError(f"--broker-list names nodes {unknown} that are not registered brokers")
    current = admin.assignment(topics)
    proposed = []
    for name in topics:
        parts = [(p, r) for t, p, r in current if t == name]
        rf = len(parts[0][1])
        if rf > len(brokers):
            raise ReassignInputError(f"topic {name} has replication factor {rf}, above the {len(brokers)} brokers listed")
        h = zlib.crc32(name.encode())
        racks = [(b, registered[b]) for b in sorted(brokers)]
        for (p, _), replicas in zip(parts, assign_replicas(racks, len(parts), rf, start_index=h & 0xFFFF,
                                                           next_replica_shift=h >> 16)):
            proposed.append((name, p, replicas))
    return current, proposed


def execute(admin: Admin, moves: list[tuple[str, int, list[int]]], throttle: int | None, out) -> None:
    current = {(t, p): r for t, p, r in admin.assignment(sorted({t for t, _, _ in moves}))}
    missing = [f"{t}-{p}" for t, p, _ in moves if (t, p) not in current]
    if missing:
        raise ReassignInputError(f"no such partitions: {', '.join(missing)}")
    print("Current partition replica assignment\n", file=out)
    print(assignment_json([(t, p, current[(t, p)]) for t, p, _ in moves]), file=out)
    print("\nSave this to use as the --reassignment-json-file option during rollback", file=out)
    if throttle is not None:
        _set_throttles(admin, moves, current, throttle)
        print(f"Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
              f"throttle is removed.\nThe inter-broker throttle limit was set to {throttle} B/s", file=out)
    admin.alter([(t, p, r) for t, p, r in moves])
    print("Successfully started partition reassignment" + ("s" if len(moves) > 1 else "") + " for "
          + ",".join(f"{t}-{p}" for t, p, _ in moves), file=out)


def _set_throttles(admin: Admin, moves, current, throttle: int) -> None:
    """Kafka's: the moving partitions' current replicas throttle as leaders, the new ones as followers."""
    admin.set_rates(throttle)
    by_topic: dict[str, tuple[set[str], set[str]]] = {}
    for t, p, target in moves:
        leaders, followers = by_topic.setdefault(t, (set(), set()))
        leaders.update(f"{p}:{b}" for b in current[(t, p)])
        followers.update(f"{p}:{b}" for b in target if b not in current[(t, p)])
    for t, (leaders, followers) in by_topic.items():
        admin.alter_topic(t, {LEADER_REPLICAS: ",".join(sorted(leaders)) or "",
                              FOLLOWER_REPLICAS: ",".join(sorted(followers)) or ""})


def verify(admin: Admin, moves: list[tuple[str, int, list[int]]], out) -> bool:
    """Print each partition's status; once all completed, remove the throttles. True when all completed."""
    moving = admin.reassignments()
    done = True
    print("Status of partition reassignment:", file=out)
    for t, p, target in moves:
        if (t, p) in moving:
            done = False
            print(f"Reassignment of partition {t}-{p} is still in progress.", file=out)
        elif admin.partition(t, p).replicas == target:
            print(f"Reassignment of partition {t}-{p} is completed.", file=out)
        else:
            print(f"There is no active reassignment of partition {t}-{p}, but replica set is "
                  f"{admin.partition(t, p).replicas} rather than {target}.", file=out)
    if done and not moving:
        topics = sorted({t for t, _, _ in moves})
        if admin.rates_set():
            admin.set_rates(None)
            print("Clearing broker-level throttles", file=out)
        for t in topics:
            configs = admin.topic_configs(t)
            if LEADER_REPLICAS in configs or FOLLOWER_REPLICAS in configs:
                admin.alter_topic(t, {}, [LEADER_REPLICAS, FOLLOWER_REPLICAS])
                print(f"Clearing topic-level throttles on topic {t}", file=out)
    return done


def cancel(admin: Admin, moves: list[tuple[str, int, list[int]]], out) -> None:
    moving = admin.reassignments()
    targets = [(t, p) for t, p, _ in moves if (t, p) in moving]
    if targets:
        admin.alter([(t, p, None) for t, p in targets])
    print("Successfully cancelled partition reassignment" + ("s" if len(targets) != 1 else "") + " for: "
          + (",".join(f"{t}-{p}" for t, p in targets) or "(none in progress)"), file=out)


def _cmd_reassign(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        admin = Admin(client)
        out = sys.stdout
        if args.generate:
            if not args.topics_to_move_json_file or not args.broker_list:
                raise ReassignInputError("--generate needs --topics-to-move-json-file and --broker-list")
            topics = parse_topics_to_move(_load_json(args.topics_to_move_json_file), args.topics_to_move_json_file)
            current, proposed = generate(admin, topics, parse_broker_list(args.broker_list))
            print(f"Current partition replica assignment\n{assignment_json(current)}\n", file=out)
            print(f"Proposed partition reassignment configuration\n{assignment_json(proposed)}", file=out)
            return 0
        if not args.reassignment_json_file:
            raise ReassignInputError("--execute, --verify and --cancel need --reassignment-json-file")
        moves = parse_reassignment(_load_json(args.reassignment_json_file), args.reassignment_json_file)
        if args.execute:
            execute(admin, moves, args.throttle, out)
        elif args.verify:
            verify(admin, moves, out)
        else:
            cancel(admin, moves, out)
        return 0


# --------------------------------------------------------------------------------- nodes

def drain_plan(admin: Admin, node_id: int) -> list[tuple[str, int, list[int]]]:
    """For every partition node `node_id` holds: the same replicas with `node_id` replaced by the
    live broker holding the fewest replicas (ties: lowest id) that is not already one of them."""
    brokers = {int(b["broker_id"]): b for b in admin.brokers()}
    if node_id not in brokers:
        raise ReassignInputError(f"node {node_id} is not a registered broker")
    live = [b for b, doc in brokers.items() if b != node_id and not doc.get("fenced")]
    current = admin.assignment()
    load = Counter({b: 0 for b in live})
    for _, _, replicas in current:
        load.update(r for r in replicas if r in load)
    plan = []
    for t, p, replicas in current:
        if node_id not in replicas:
            continue
        candidates = sorted((b for b in live if b not in replicas), key=lambda b: (load[b], b))
        if not candidates:
            raise ReassignInputError(f"{t}-{p} has replicas {replicas}: no other live broker can take node "
                                     f"{node_id}'s replica (add a node first)")
        new = candidates[0]
        load[new] += 1
        target = [r for r in replicas if r != node_id] + [new]
        if replicas[0] != node_id:  # keep the preferred leader where it was
            target = [new if r == node_id else r for r in replicas]
        plan.append((t, p, target))
    return plan


def wait_moved(admin: Admin, plan: list[tuple[str, int, list[int]]], timeout_s: float, out) -> None:
    deadline = time.monotonic() + timeout_s
    pending = {(t, p) for t, p, _ in plan}
    while True:
        moving = admin.reassignments()
        pending = {k for k in pending if k in moving}
        if not pending:
            return
        if time.monotonic() > deadline:
            raise DrainTimeoutError(f"{len(pending)} partition(s) still moving after {timeout_s:g}s: "
                                    + ", ".join(f"{t}-{p}" for t, p in sorted(pending)[:10])
                                    + " (they keep moving; run the command again to wait, or cancel them)")
        time.sleep(POLL_S)


class DrainTimeoutError(LakelogError):
    """The moves did not finish within --timeout-s (they go on in the cluster)."""

    kind = ErrorKind.TRANSIENT


def move_leadership_off(admin: Admin, node_id: int, timeout_s: float, out) -> None:
    """Leadership first: each partition `node_id` leads gets it last in its replica list (a reorder
    completes at once) and a preferred-leader election moves the leadership to an in-sync replica."""
    led = admin.led_by(node_id)
    if not led:
        return
    admin.alter([(t, p, [r for r in replicas if r != node_id] + [node_id]) for t, p, replicas in led
                 if len(replicas) > 1])
    admin.elect_preferred([(t, p) for t, p, replicas in led if len(replicas) > 1])
    deadline = time.monotonic() + min(timeout_s, LEADERSHIP_WAIT_S)
    while (still := admin.led_by(node_id)) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    moved = len(led) - len(still)
    print(f"moved the leadership of {moved} partition(s) off node {node_id}"
          + (f"; {len(still)} keep it until their new replicas are in sync "
             f"({', '.join(f'{t}-{p}' for t, p, _ in still[:5])})" if still else ""), file=out)


def drain(admin: Admin, node_id: int, throttle: int | None, timeout_s: float, out) -> None:
    if node_id in {int(b["broker_id"]) for b in admin.brokers()}:
        move_leadership_off(admin, node_id, timeout_s, out)
    plan = drain_plan(admin, node_id)
    if not plan:
        print(f"node {node_id} holds no replica", file=out)
        return
    current = {(t, p): r for t, p, r in admin.assignment()}
    if throttle is not None:
        _set_throttles(admin, plan, current, throttle)
    admin.alter(plan)
    print(f"moving {len(plan)} replica(s) off node {node_id}: "
          + ", ".join(f"{t}-{p} -> {r}" for t, p, r in plan[:10]) + (" ..." if len(plan) > 10 else ""), file=out)
    wait_moved(admin, plan, timeout_s, out)
    if throttle is not None:
        verify(admin, plan, io.StringIO())  # clears the throttles it set
    print(f"node {node_id} holds no replica now", file=out)


def _cmd_nodes_list(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        admin = Admin(client)
        counts: Counter = Counter()
        leaders: Counter = Counter()
        for t in client.list_topics():
            for p in client.partition_replicas(t["topic_name"]):
                counts.update(p.replicas)
                if p.leader is not None:
                    leaders[p.leader] += 1
        print(f"{'NODE':<6}{'HOST':<24}{'RACK':<10}{'STATE':<10}{'REPLICAS':>9}{'LEADERS':>9}")
        for b in sorted(admin.brokers(), key=lambda b: int(b["broker_id"])):
            n = int(b["broker_id"])
            state = "fenced" if b.get("fenced") else "serving"
            print(f"{n:<6}{b['host'] + ':' + str(b['port']):<24}{b.get('rack') or '-':<10}{state:<10}"
                  f"{counts[n]:>9}{leaders[n]:>9}")
    return 0


def _cmd_nodes_drain(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        drain(Admin(client), args.node, args.throttle, args.timeout_s, sys.stdout)
    return 0


def _cmd_nodes_decommission(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        admin = Admin(client)
        drain(admin, args.node, args.throttle, args.timeout_s, sys.stdout)
        deadline = time.monotonic() + args.timeout_s
        said = False
        while True:
            b = next((b for b in admin.brokers() if int(b["broker_id"]) == args.node), None)
            if b is None:
                break
            if b.get("fenced"):
                admin.unregister(args.node)
                break
            if not said:
                print(f"node {args.node} still runs: stop its process (it holds nothing now); waiting up to "
                      f"{args.timeout_s:g}s", flush=True)
                said = True
            if time.monotonic() > deadline:
                raise DrainTimeoutError(f"node {args.node} still runs after {args.timeout_s:g}s; stop it and run "
                                        f"the command again")
            time.sleep(POLL_S)
        print(f"node {args.node} is decommissioned (unregistered)")
    return 0


def _positive(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return v


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < v <= 7 * 24 * 3600:
        raise argparse.ArgumentTypeError(f"{v} must be in (0, 604800] seconds")
    return v


def add_commands(sub: Any, add: Any, client_opts: argparse.ArgumentParser) -> None:
    partitions = sub.add_parser("partitions", help="reassign partitions (like kafka-reassign-partitions.sh)")
    psub = partitions.add_subparsers(dest="partitions_command", required=True)
    r = add(psub, "reassign", "partitions reassign", _cmd_reassign, parents=[client_opts],
            help="generate, execute, verify or cancel a partition reassignment",
            description="Move partitions to other nodes, as kafka-reassign-partitions.sh does (same JSON files).")
    how = r.add_mutually_exclusive_group(required=True)
    how.add_argument("--generate", action="store_true", help="propose an assignment of --topics-to-move-json-file's "
                     "topics over --broker-list (changes nothing)")
    how.add_argument("--execute", action="store_true", help="start the moves of --reassignment-json-file")
    how.add_argument("--verify", action="store_true", help="report their progress; clear the throttles once done")
    how.add_argument("--cancel", action="store_true", help="revert the listed moves still in progress")
    r.add_argument("--topics-to-move-json-file", metavar="FILE", help='{"version": 1, "topics": [{"topic": "t"}]}')
    r.add_argument("--broker-list", metavar="IDS", help="node ids to place replicas on, e.g. 1,2,3")
    r.add_argument("--reassignment-json-file", metavar="FILE",
                   help='{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1, 2]}]}')
    r.add_argument("--throttle", type=_positive, metavar="BYTES_PER_S",
                   help="with --execute: throttle the catch-up of the moving replicas to this rate")

    nodes = sub.add_parser("nodes", help="list, drain and decommission nodes")
    nsub = nodes.add_subparsers(dest="nodes_command", required=True)
    add(nsub, "list", "nodes list", _cmd_nodes_list, parents=[client_opts],
        help="registered nodes with their state and replica / leader counts")
    for name, func, text in (("drain", _cmd_nodes_drain, "move every replica off node N (leadership before removal)"),
                             ("decommission", _cmd_nodes_decommission,
                              "drain node N, wait for its process to stop, unregister it")):
        p = add(nsub, name, f"nodes {name}", func, parents=[client_opts], help=text)
        p.add_argument("node", type=int, metavar="N")
        p.add_argument("--throttle", type=_positive, metavar="BYTES_PER_S", help="throttle the moves' catch-up")
        p.add_argument("--timeout-s", type=_seconds, default=600.0, metavar="S",
                       help="most seconds to wait for the moves (and, decommission, for the node to stop); "
                            "default 600")
