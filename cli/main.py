"""The `lakelog` command line.

    lakelog up [--nodes N] [--data-dir DIR] [--http-port BASE] [--kafka-port BASE] [--remote URL]   a local cluster
    lakelog node [--config node.toml] [--set KEY=VALUE ...]                      one ingest node
    lakelog topics create|list|describe|alter|delete ...                         like kafka-topics.sh
    lakelog produce TOPIC ...                                                    like kafka-console-producer.sh
    lakelog consume TOPIC --partition P ...                                      like kafka-console-consumer.sh
    lakelog consume TOPIC --group G ...                                          ... as a member of group G
    lakelog groups list|describe|reset-offsets ...                               like kafka-consumer-groups.sh
    lakelog dump-log PATH ...                                                    like DumpLogSegments
    lakelog jobs run NAME [--topic T] [--remote URL] | jobs schedule             Spark jobs over the remote tier
    lakelog sql "SELECT ..." [--remote URL] [--format table|json|csv]            Spark SQL over the topics' tables

The console tools talk HTTP to a node (`--bootstrap-server`, default `$LAKELOG_URL` or
http://127.0.0.1:8082) through `lakelog.client.node_client`. Errors print `lakelog <command>: <message>` on
stderr and exit 1; usage errors exit 2.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time
from typing import Any, Iterator

from lakelog.infra.errors import ErrorKind, LakelogError

#: Most records the producer puts in one request (the node's max.records.per.request default).
MAX_BATCH_RECORDS = 10000
DEFAULT_BATCH_RECORDS = 500
#: Raw key+value bytes per produce request; base64 grows them by 4/3, under max.request.bytes (16 MiB).
MAX_BATCH_BYTES = 8 * 1024 * 1024
#: A pause in stdin this long sends what has been read (an interactive producer sees each line go).
PRODUCE_LINGER_S = 0.1
#: Long-poll wait of one fetch when the consumer runs until Ctrl-C.
CONSUME_POLL_MS = 5000
READ_CHUNK_BYTES = 64 * 1024


def client_from_args(args: argparse.Namespace):
    """`lakelog.cli.client_args.client_from_args`, imported when a command talks to a node (httpx is not
    loaded by commands that do not)."""
    from lakelog.cli.client_args import client_from_args as make

    return make(args)


# ---------------------------------------------------------------------------------------- node, up


def _cmd_dump_log(args: argparse.Namespace) -> int:
    from lakelog.logstore.dump import dump_files

    return dump_files(args.paths, print_data_log=args.print_data_log, out=sys.stdout,
                      verify_index_only=False)


def _cmd_up(args: argparse.Namespace) -> int:
    from lakelog.cli.cluster_spec import LauncherConfigError, build_spec
    from lakelog.cli.launcher import LocalCluster

    try:
        jobs = {}
        if args.jobs or args.jobs_every:
            from lakelog.spark_log.cli_jobs import DEFAULT_INTERVALS_S

            jobs = dict(DEFAULT_INTERVALS_S)
            for job, seconds in args.jobs_every or []:
                try:
                    jobs[job] = float(seconds)
                except ValueError:
                    args.parser.error(f"--jobs-every {job}={seconds}: seconds must be a number")
        spec = build_spec(args.nodes, args.data_dir, args.http_port, args.remote, dict(args.set or []), jobs,
                          args.sql_port if args.sql else None, add_node=args.add_node,
                          sql_thrift_port=args.sql_thrift_port,
                          kafka_port=args.kafka_port or None)
    except LauncherConfigError as e:
        args.parser.error(str(e))  # exits 2, as argparse's own usage errors do
    return LocalCluster(spec, exit_on_death=args.exit_on_node_death,
                        verbose_out=sys.stderr.buffer if args.verbose else None).run()


def _cmd_node(args: argparse.Namespace) -> int:
    from lakelog.ingest_api.config.node import NodeConfig
    from lakelog.ingest_api.server import run_node

    overrides = dict(args.set or [])
    config = NodeConfig.from_toml(args.config, overrides) if args.config else NodeConfig(overrides)
    return run_node(config)


# ---------------------------------------------------------------------------------------- topics


def _cmd_topics_create(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        client.create_topic(args.topic, args.partitions, args.replication_factor, dict(args.config or []))
    print(f"Created topic {args.topic}.")
    return 0


def _cmd_topics_list(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        names = sorted(t["topic_name"] for t in client.list_topics())
    for name in names:
        print(name)
    return 0


def _cmd_topics_describe(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        names = [args.topic] if args.topic else sorted(t["topic_name"] for t in client.list_topics())
        for name in names:
            topic = client.get_topic(name)
            changed = [f"{c['name']}={c['value']}" for c in client.topic_configs(name) if not c.get("is_default")]
            print(f"Topic: {name}\tTopicId: {topic.get('topic_id', '')}\t"
                  f"PartitionCount: {topic.get('partitions_count')}\t"
                  f"ReplicationFactor: {topic.get('replication_factor')}\tConfigs: {','.join(changed)}")
            for p in client.partition_replicas(name):
                leader = "none" if p.leader is None else p.leader
                print(f"\tTopic: {name}\tPartition: {p.partition}\tLeader: {leader}\t"
                      f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
    return 0


def _cmd_topics_delete(args: argparse.Namespace) -> int:
    with client_from_args(args) as client:
        client.delete_topic(args.topic)
    print(f"Deleted topic {args.topic}.")
    return 0


def _cmd_topics_alter(args: argparse.Namespace) -> int:
    if not args.config and not args.delete_config:
        args.parser.error("give at least one --config KEY=VALUE or --delete-config KEY")
    with client_from_args(args) as client:
        client.alter_topic_configs(args.topic, dict(args.config or []), args.delete_config or [])
    print(f"Completed updating config for topic {args.topic}.")
    return 0


# ---------------------------------------------------------------------------------------- produce


def _stdin_lines(fd: int, linger_s: float) -> Iterator[bytes | None]:
    """Lines of `fd` without their line ending (\\n or \\r\\n); None whenever input pauses for `linger_s`.

    Reads the descriptor directly so that a pause can be seen (a buffered reader hides it).
    """
    pending = b""
    while True:
        if not select.select([fd], [], [], linger_s)[0]:
            yield None
        chunk = os.read(fd, READ_CHUNK_BYTES)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            yield line[:-1] if line.endswith(b"\r") else line
    if pending:
        yield pending[:-1] if pending.endswith(b"\r") else pending


class InputError(LakelogError):
    """A line of stdin cannot become a record."""

    kind = ErrorKind.INVALID_REQUEST


def _cmd_produce(args: argparse.Namespace) -> int:
    """Lines of stdin -> records, through the Python client (`lakelog.client.Producer`): batched per
    partition on the binary path, Kafka's partitioner, idempotent. A pause in stdin of
    PRODUCE_LINGER_S sends what was read; `--batch-size N` seals a batch every N records."""
    from lakelog.client.node_client import normalize_url, default_url
    from lakelog.cli.client_args import security_from_args
    from lakelog.client.producer import Producer

    separator = args.key_separator.encode("utf-8") if args.key_separator is not None else None
    started = time.monotonic()
    sent = 0
    errors: list[Exception] = []

    def delivered(err: Exception | None, _md: Any) -> None:
        nonlocal sent
        if err is None:
            sent += 1
        else:
            errors.append(err)

    producer = Producer({"bootstrap.servers": normalize_url(args.bootstrap_server or default_url()),
                         "acks": args.acks, "linger.ms": int(PRODUCE_LINGER_S * 1000),
                         "batch.size": MAX_BATCH_BYTES, "max.request.size": MAX_BATCH_BYTES,
                         "client.id": "lakelog-console-producer"},
                        http_options=security_from_args(args).httpx_kwargs())
    try:
        # Fail fast on an unknown topic or partition, before waiting for input.
        n = producer.partitions_for(args.topic)
        if args.partition is not None and args.partition >= n:
            raise InputError(f"Partition {args.partition} of topic {args.topic} not found.")
        number = in_batch = 0
        for line in _stdin_lines(sys.stdin.fileno(), PRODUCE_LINGER_S):
            if errors:
                break
            if line is None:
                producer.flush(0)  # seal and send what was read; do not wait
                in_batch = 0
                continue
            number += 1
            key: bytes | None = None
            value = line
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    producer.flush()
                    raise InputError(f"line {number} has no key separator {args.key_separator!r}")
            producer.produce(args.topic, value=value, key=key, partition=args.partition, on_delivery=delivered)
            in_batch += 1
            if in_batch >= args.batch_size:
                producer.flush(0)
                in_batch = 0
        producer.flush()
        if errors:
            raise errors[0]
    except BaseException:
        producer.flush(5)
        if sent:
            print(f"lakelog produce: {sent} record(s) were sent before the error", file=sys.stderr)
        raise
    finally:
        producer.close(5)
    elapsed = time.monotonic() - started
    print(f"lakelog produce: {sent} record(s) sent to {args.topic} in {producer.requests} request(s), "
          f"{elapsed:.2f} s", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------- consume


def _start_offset(client, args: argparse.Namespace) -> int:
    if args.from_beginning or args.offset == "earliest":
        return client.offsets(args.topic, args.partition)[0]
    if args.offset == "latest":
        return client.offsets(args.topic, args.partition)[1]
    return int(args.offset)


def _cmd_consume(args: argparse.Namespace) -> int:
    from lakelog.client.node_client import RequestFailedError

    if args.group is not None:
        if args.partition is not None or args.offset is not None:
            args.parser.error("--group takes the partitions and offsets from the group: no --partition or --offset")
        from lakelog.cli.groups import consume_group

        with client_from_args(args) as client:
            return consume_group(args, client, _render)
    if args.partition is None:
        args.parser.error("the following arguments are required: --partition (or --group)")
    if args.offset is None and not args.from_beginning:
        args.parser.error("one of the arguments --offset --from-beginning is required")
    out = sys.stdout.buffer
    separator = args.key_separator.encode("utf-8")
    count = 0
    try:
        with client_from_args(args) as client:
            offset = _start_offset(client, args)
            idle_since = time.monotonic()
            while args.max_messages is None or count < args.max_messages:
                if args.timeout_ms is None:
                    wait_ms = CONSUME_POLL_MS
                else:
                    wait_ms = max(0, int(args.timeout_ms - (time.monotonic() - idle_since) * 1000))
                try:
                    response = client.fetch(args.topic, args.partition, offset, timeout_ms=wait_ms)
                except RequestFailedError as e:
                    if e.status != 416:
                        raise
                    beginning = client.offsets(args.topic, args.partition)[0]
                    if offset >= beginning:
                        raise
                    # Retention deleted what we were about to read: go on from the log start offset.
                    print(f"lakelog consume: offset {offset} was deleted; continuing at {beginning}",
                          file=sys.stderr)
                    offset = beginning
                    continue
                records = [r for r in response.records if r.offset >= offset]
                for r in records:
                    line = _render(r.value)
                    if args.print_key:
                        line = _render(r.key) + separator + line
                    out.write(line + b"\n")
                    count += 1
                    offset = r.offset + 1
                    if count == args.max_messages:
                        break
                if records:
                    out.flush()
                    idle_since = time.monotonic()
                    continue
                if response.log_start_offset is not None and response.log_start_offset > offset:
                    offset = response.log_start_offset
                    continue
                if args.timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms:
                    break
    except KeyboardInterrupt:
        pass  # Ctrl-C is how an unbounded consumer ends
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, and keep Python from complaining at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except BaseException:
        if count:
            print(f"Processed a total of {count} messages", file=sys.stderr)
        raise
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _render(data: bytes | None) -> bytes:
    if data is None:
        return b"null"
    return data.decode("utf-8", "backslashreplace").encode("utf-8")


# ---------------------------------------------------------------------------------------- parser


def _key_value(text: str) -> tuple[str, str]:
    key, found, value = text.partition("=")
    if not found or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must not be negative")
    return value


def _node_count(text: str) -> int:
    from lakelog.cli.cluster_spec import LauncherConfigError, validate_node_count

    try:
        return validate_node_count(_positive_int(text))
    except LauncherConfigError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--nodes ")) from None


def _port(text: str) -> int:
    value = _positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port")
    return value


def _batch_size(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_BATCH_RECORDS:
        raise argparse.ArgumentTypeError(f"{value} is above the limit of {MAX_BATCH_RECORDS}")
    return value


def _start_offset_arg(text: str) -> str:
    if text in ("earliest", "latest"):
        return text
    return str(_non_negative_int(text))


def _client_options() -> argparse.ArgumentParser:
    from lakelog.client.node_client import DEFAULT_URL, URL_ENV, default_url

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--bootstrap-server", default=default_url(), metavar="URL",
                        help=f"a node's HTTP address (default ${URL_ENV}, else {DEFAULT_URL})")
    sec = common.add_argument_group("security (or $LAKELOG_USER, $LAKELOG_PASSWORD, $LAKELOG_API_KEY, "
                                    "$LAKELOG_CA_CERT, $LAKELOG_CLIENT_CERT, $LAKELOG_CLIENT_KEY)")
    sec.add_argument("--user", metavar="NAME", help="authenticate with HTTP Basic as this user")
    sec.add_argument("--password", metavar="PASSWORD", help="the user's password (prefer $LAKELOG_PASSWORD)")
    sec.add_argument("--api-key", metavar="KEY", help="authenticate with this API key (Bearer)")
    sec.add_argument("--ca-cert", metavar="PEM", help="CA certificate that signed the node's (https:// URLs)")
    sec.add_argument("--client-cert", metavar="PEM", help="client certificate (ssl.client.auth)")
    sec.add_argument("--client-key", metavar="PEM", help="the client certificate's key")
    sec.add_argument("--cluster-secret-file", metavar="FILE",
                     help="act as the cluster itself (super user): sign requests with the secret in FILE "
                          "(the secret alone, or a cluster.properties file as `lakelog up` keeps)")
    return common


def _add(sub, name: str, command: str, func, **kw) -> argparse.ArgumentParser:
    p = sub.add_parser(name, **kw)
    p.set_defaults(func=func, command_name=command, parser=p)
    return p


def build_parser(only_sql: bool = False) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakelog", description="Lakelog: a Spark-native distributed log on object storage")
    sub = parser.add_subparsers(dest="command", required=True)
    if only_sql:  # `lakelog sql ...`: its parser alone, so a quick query loads nothing it does not use
        from lakelog.spark_log.cli import add_commands as add_spark_commands

        add_spark_commands(sub, _add, only_sql=True)
        return parser
    client_opts = _client_options()

    up = _add(sub, "up", "up", _cmd_up, help="run a local cluster in the foreground (Ctrl-C stops it)",
              description="Run a local cluster in the foreground: node i serves HTTP on 127.0.0.1:BASE+i-1 "
                          "with its data under DIR/node-i. A node that dies is restarted with its data (after a backoff); "
                          "Ctrl-C or SIGTERM stops the nodes cleanly.")
    up.add_argument("--nodes", type=_node_count, default=3, metavar="N",
                    help="number of nodes, each a controller voter (default 3, at most 5)")
    up.add_argument("--data-dir", default="./data", metavar="DIR", help="where node-i/ data lives (default ./data)")
    up.add_argument("--http-port", type=_port, default=8082, metavar="BASE",
                    help="HTTP port of node 1; node i listens on BASE+i-1 (default 8082)")
    up.add_argument("--kafka-port", type=int, default=9092, metavar="BASE",
                    help="Kafka listener (PLAINTEXT) of node 1; node i listens on BASE+i-1 (default 9092; "
                         "0: no Kafka listener)")
    up.add_argument("--remote", metavar="URL",
                    help="remote tier: s3://bucket/prefix or file:///path (default file://DIR/remote), "
                         "shared by every node; topics opt in with remote.storage.enable=true")
    up.add_argument("--set", action="append", type=_key_value, metavar="KEY=VALUE",
                    help="a node config key for every node (not node.id, log.dirs, listeners)")
    up.add_argument("--add-node", type=int, nargs="?", const=0, metavar="ID",
                    help="run one more node (a broker, not a voter) that joins the cluster another `lakelog up` "
                         "runs with the same --data-dir / --nodes / --http-port (default ID: the next free one); "
                         "move replicas onto it with `lakelog partitions reassign` or `nodes drain`")
    up.add_argument("--exit-on-node-death", action="store_true",
                    help="for scripts: when a node dies, stop the others and exit 1 (default: restart it)")
    up.add_argument("--verbose", action="store_true",
                    help="forward every node log line (JSON) to stderr; by default the console shows notices "
                         "and warnings, and each node's full log is DIR/node-i/node.log")
    up.add_argument("--jobs", action="store_true",
                    help="also run the Spark job scheduler (`lakelog jobs schedule`) over the remote tier")
    up.add_argument("--jobs-every", action="append", type=_key_value, metavar="JOB=SECONDS",
                    help="a job's interval for --jobs (0 disables it); implies --jobs")
    up.add_argument("--sql", action="store_true",
                    help="also run the SQL server (`lakelog sql-server`, Spark Connect on loopback) so that "
                         "`lakelog sql` answers without starting a JVM")
    up.add_argument("--sql-port", type=_port, default=15002, metavar="PORT",
                    help="the SQL server's port with --sql (default 15002, where `lakelog sql` looks)")
    up.add_argument("--sql-thrift-port", type=_port, default=None, metavar="PORT",
                    help="with --sql: also the Thrift JDBC/ODBC server on this loopback port "
                         "(jdbc:hive2://127.0.0.1:PORT/default, password: DATA_DIR/sql.token's token)")

    node = _add(sub, "node", "node", _cmd_node, help="run one ingest node")
    node.add_argument("--config", help="node.toml with broker keys (Kafka names)")
    node.add_argument("--set", action="append", type=_key_value, metavar="KEY=VALUE", help="override a config key")

    topics = sub.add_parser("topics", help="create, list, describe, alter and delete topics (like kafka-topics.sh)")
    tsub = topics.add_subparsers(dest="topics_command", required=True)
    create = _add(tsub, "create", "topics create", _cmd_topics_create, parents=[client_opts], help="create a topic")
    create.add_argument("topic", metavar="NAME")
    create.add_argument("--partitions", type=_positive_int, metavar="N", help="partitions (default: the node's num.partitions)")
    create.add_argument("--replication-factor", type=_positive_int, metavar="R",
                        help="replicas per partition (default: the node's default.replication.factor)")
    create.add_argument("--config", action="append", type=_key_value, metavar="KEY=VALUE",
                        help="a topic config (Kafka names, e.g. retention.ms=3600000); repeatable")
    _add(tsub, "list", "topics list", _cmd_topics_list, parents=[client_opts], help="list topic names")
    describe = _add(tsub, "describe", "topics describe", _cmd_topics_describe, parents=[client_opts],
                    help="partitions, leader, replicas, ISR and non-default configs of a topic (all topics without NAME)")
    describe.add_argument("topic", metavar="NAME", nargs="?")
    delete = _add(tsub, "delete", "topics delete", _cmd_topics_delete, parents=[client_opts], help="delete a topic")
    delete.add_argument("topic", metavar="NAME")
    alter = _add(tsub, "alter", "topics alter", _cmd_topics_alter, parents=[client_opts],
                 help="set or reset a topic's configs")
    alter.add_argument("topic", metavar="NAME")
    alter.add_argument("--config", action="append", type=_key_value, metavar="KEY=VALUE",
                       help="set a topic config; repeatable")
    alter.add_argument("--delete-config", action="append", metavar="KEY",
                       help="reset a topic config to its default; repeatable")

    produce = _add(sub, "produce", "produce", _cmd_produce, parents=[client_opts],
                   help="send stdin lines as records (like kafka-console-producer.sh)",
                   description="Send each line of stdin as one record (binary: any bytes round-trip). Records "
                               "with keys go to the partition Kafka's murmur2 picks; without keys, each request "
                               "sticks to one partition. Prints a summary on stderr.")
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument("--partition", type=_non_negative_int, metavar="P", help="send every record to partition P")
    produce.add_argument("--key-separator", metavar="SEP",
                         help="split each line into key and value at the first SEP (a line without SEP is an error)")
    produce.add_argument("--acks", choices=("0", "1", "all", "-1"), default="all", help="default all")
    produce.add_argument("--batch-size", type=_batch_size, default=DEFAULT_BATCH_RECORDS, metavar="N",
                         help=f"most records per request (default {DEFAULT_BATCH_RECORDS})")

    consume = _add(sub, "consume", "consume", _cmd_consume, parents=[client_opts],
                   help="print a partition's record values (like kafka-console-consumer.sh)",
                   description="Print record values, one per line (UTF-8; other bytes as \\xNN). Runs until "
                               "Ctrl-C, --max-messages, or --timeout-ms without new records. With --group, "
                               "joins the group and commits the offsets of what it printed.")
    consume.add_argument("topic", metavar="TOPIC")
    consume.add_argument("--partition", type=_non_negative_int, metavar="P", help="the partition to read (or --group)")
    consume.add_argument("--group", metavar="G",
                         help="consume as a member of group G: partitions assigned by the group, offsets committed")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--offset", type=_start_offset_arg, metavar="O", help="first offset: a number, earliest or latest")
    start.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    consume.add_argument("--max-messages", type=_positive_int, metavar="N", help="stop after N records")
    consume.add_argument("--timeout-ms", type=_non_negative_int, metavar="T",
                         help="stop when no record arrived for T ms (default: run until Ctrl-C)")
    consume.add_argument("--print-key", action="store_true", help="print KEY<SEP>VALUE")
    consume.add_argument("--key-separator", default="\t", metavar="SEP", help="between key and value (default tab)")

    from lakelog.spark_log.cli import add_commands as add_spark_commands  # no pyspark import until a command runs

    add_spark_commands(sub, _add)

    from lakelog.cli.groups import add_commands as add_group_commands

    add_group_commands(sub, _add, client_opts)

    from lakelog.cli.reassign import add_commands as add_reassign_commands

    add_reassign_commands(sub, _add, client_opts)

    from lakelog.cli.security import add_commands as add_security_commands

    add_security_commands(sub, _add, client_opts)

    dump = _add(sub, "dump-log", "dump-log", _cmd_dump_log,
                help="print the batches and records of .log, .index and .timeindex files")
    dump.add_argument("paths", nargs="+", metavar="PATH", help="segment files to dump")
    dump.add_argument("--print-data-log", action="store_true", help="also print each record's key and payload")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(only_sql=argv[:1] == ["sql"]).parse_args(argv)
    if args.command in ("jobs", "sql", "sql-server"):
        from lakelog.spark_log.cli import resolve_remote

        resolve_remote(args)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`| head -1`): stop quietly, as Unix tools do. Point stdout at
        # /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except LakelogError as e:
        print(f"lakelog {args.command_name}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
