"""Console tools for consumer groups, over the node's HTTP API (like kafka-consumer-groups.sh and
kafka-console-consumer.sh --group):

    lakelog consume TOPIC --group G [--from-beginning] [--max-messages N] [--timeout-ms T]
    lakelog groups list
    lakelog groups describe G
    lakelog groups reset-offsets G --topic T[:P,P...] (--to-earliest | --to-latest | --to-offset N |
                                   --shift-by N) [--execute]

`consume --group` creates a consumer instance in G (REST Proxy v2 API), subscribes it to TOPIC, prints
record values and commits the offsets of what it printed after each batch; the instance is deleted
when the tool stops. Without `--from-beginning` a group without committed offsets starts at the end.
With `--timeout-ms`, the time before the group first assigns partitions to the tool (at most
ASSIGNMENT_WAIT_S; the first join of an empty group waits `group.initial.rebalance.delay.ms`) does
not count as idle. `reset-offsets` prints the plan and changes nothing unless `--execute` is given; the group must have
no active members.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

#: Long-poll wait of one records request when the consumer runs until Ctrl-C.
POLL_MS = 5000
#: With --timeout-ms: how long the consumer waits for its first assignment before the timeout counts.
ASSIGNMENT_WAIT_S = 30.0


def consume_group(args: argparse.Namespace, client: Any, render) -> int:
    """`lakelog consume TOPIC --group G` through the Python client (`lakelog.client.Consumer`); `render`
    turns a key / value into printable bytes."""
    from lakelog.cli.client_args import security_from_args
    from lakelog.client.consumer import Consumer

    out = sys.stdout.buffer
    separator = args.key_separator.encode("utf-8")
    count = 0
    consumer = Consumer({"bootstrap.servers": client.url, "group.id": args.group, "client.id": "console-consumer",
                         "enable.auto.commit": False,
                         "auto.offset.reset": "earliest" if args.from_beginning else "latest"},
                        http_options=security_from_args(args).httpx_kwargs())
    try:
        consumer.subscribe([args.topic])
        idle_since = started = time.monotonic()
        assigned = False
        while args.max_messages is None or count < args.max_messages:
            if args.timeout_ms is None:
                wait_ms = POLL_MS
            else:
                wait_ms = max(0, min(POLL_MS, int(args.timeout_ms - (time.monotonic() - idle_since) * 1000)))
            printed = []
            for m in consumer.poll(wait_ms / 1000):
                line = render(m.value)
                if args.print_key:
                    line = render(m.key) + separator + line
                out.write(line + b"\n")
                count += 1
                printed.append(m)
                if count == args.max_messages:
                    break
            if printed:
                out.flush()
                # Commit exactly what was printed (the instance may hold more it fetched).
                consumer.commit(messages=printed)
                idle_since = time.monotonic()
                continue
            if args.timeout_ms is not None and not assigned:
                # --timeout-ms counts from the assignment, as a Kafka consumer's poll loop does after
                # its first rebalance (the first join of an empty group waits out
                # group.initial.rebalance.delay.ms): until then it is not idle, up to ASSIGNMENT_WAIT_S.
                assigned = bool(consumer.assignment())
                if not assigned and time.monotonic() - started < ASSIGNMENT_WAIT_S:
                    idle_since = time.monotonic()
                    continue
                assigned = True
            if args.timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                break
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        consumer.close()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    with client_from_args(args) as client:
        for group in client.list_groups():
            print(group)
    return 0


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _s(v: Any) -> str:
    return "-" if v is None else str(v)


def _cmd_describe(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    with client_from_args(args) as client:
        d = client.describe_group(args.group)
    if not d["members"]:
        print(f"\nConsumer group '{args.group}' has no active members.")
    print(f"\nGROUP {args.group}  STATE {d['state']}  ASSIGNOR {_s(d['partition_assignor'])}  "
          f"GENERATION {d['generation']}  COORDINATOR {d['coordinator']}\n")
    rows = [["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
             "CLIENT-ID"]]
    for p in d["partitions"]:
        rows.append([args.group, p["topic"], str(p["partition"]), _s(p["current_offset"]), _s(p["log_end_offset"]),
                     _s(p["lag"]), _s(p["consumer_id"]), _s(p["host"]), _s(p["client_id"])])
    _table(rows)
    return 0


def _parse_topic(spec: str) -> tuple[str, list[int] | None]:
    topic, _, parts = spec.partition(":")
    if not parts:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--topic {spec!r}: partitions must be integers, like orders:0,2") from None


def _cmd_reset(args: argparse.Namespace) -> int:
    from lakelog.cli.client_args import client_from_args

    topic, partitions = args.topic
    with client_from_args(args) as client:
        if partitions is None:
            partitions = list(range(int(client.get_topic(topic)["partitions_count"])))
        committed = {(o["topic"], o["partition"]): o["offset"] for o in client.group_offsets(args.group)}
        plan = []
        for p in partitions:
            beginning, end = client.offsets(topic, p)
            if args.to_earliest:
                target = beginning
            elif args.to_latest:
                target = end
            elif args.to_offset is not None:
                target = args.to_offset
            else:
                current = committed.get((topic, p), -1)
                target = (current if current >= 0 else end) + args.shift_by
            plan.append((p, max(beginning, min(end, target))))  # clamped to the partition's range, as Kafka does
        if args.execute:
            client.commit_group_offsets(args.group, [(topic, p, o) for p, o in plan])
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]] + [[args.group, topic, str(p), str(o)] for p, o in plan]
    print()
    _table(rows)
    if not args.execute:
        print("\n(dry run: nothing changed; add --execute to commit these offsets)")
    return 0


def add_commands(sub: Any, add: Any, client_opts: argparse.ArgumentParser) -> None:
    groups = sub.add_parser("groups", help="list, describe and reset consumer groups (like kafka-consumer-groups.sh)")
    gsub = groups.add_subparsers(dest="groups_command", required=True)
    add(gsub, "list", "groups list", _cmd_list, parents=[client_opts], help="list the groups of the cluster")
    describe = add(gsub, "describe", "groups describe", _cmd_describe, parents=[client_opts],
                   help="members, assignment, committed offset, log end offset and lag per partition")
    describe.add_argument("group", metavar="GROUP")
    reset = add(gsub, "reset-offsets", "groups reset-offsets", _cmd_reset, parents=[client_opts],
                help="set a group's committed offsets (the group must have no active members)")
    reset.add_argument("group", metavar="GROUP")
    reset.add_argument("--topic", required=True, type=_parse_topic, metavar="TOPIC[:P,...]",
                       help="the topic, optionally with partitions (default: all)")
    how = reset.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="the log start offset")
    how.add_argument("--to-latest", action="store_true", help="the end offset (high watermark)")
    how.add_argument("--to-offset", type=int, metavar="N", help="offset N (clamped to the partition's range)")
    how.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N (may be negative)")
    reset.add_argument("--execute", action="store_true", help="commit the new offsets (default: print the plan)")
