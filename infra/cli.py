"""The `lakelog` command line."""

from __future__ import annotations

import argparse
import sys


def _cmd_dump_log(args: argparse.Namespace) -> int:
    from logstore.dump import dump_files

    return dump_files(args.paths, print_data_log=args.print_data_log, out=sys.stdout,
                      verify_index_only=False)


def _cmd_up(args: argparse.Namespace) -> int:
    from infra.demo import run_storage_demo

    return run_storage_demo(args.data_dir)


def _cmd_node(args: argparse.Namespace) -> int:
    from ingest_api.config import NodeConfig
    from ingest_api.server import run_node

    overrides = dict(kv.split("=", 1) for kv in args.set or [])
    config = NodeConfig.from_toml(args.config, overrides) if args.config else NodeConfig(overrides)
    return run_node(config)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakelog", description="Lakelog: a Spark-native distributed log on object storage")
    sub = parser.add_subparsers(dest="command", required=True)

    up = sub.add_parser("up", help="run a local cluster on the embedded defaults")
    up.add_argument("--data-dir", default="./data", help="where partition logs live (default ./data)")
    up.set_defaults(func=_cmd_up)

    node = sub.add_parser("node", help="run one ingest node")
    node.add_argument("--config", help="node.toml with broker keys (Kafka names)")
    node.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key")
    node.set_defaults(func=_cmd_node)

    dump = sub.add_parser("dump-log", help="print the batches and records of .log, .index and .timeindex files")
    dump.add_argument("paths", nargs="+", metavar="PATH", help="segment files to dump")
    dump.add_argument("--print-data-log", action="store_true", help="also print each record's key and payload")
    dump.set_defaults(func=_cmd_dump_log)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from infra.errors import LakelogError

    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except LakelogError as e:
        print(f"lakelog {args.command}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
