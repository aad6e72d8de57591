"""A query's answer on the terminal, the same on every path of `lakelog sql` (HTTP, Spark Connect,
a local session): rows as a table, JSON lines or CSV, at most `--max-rows`; a failed query as one
line naming the tables there are."""

from __future__ import annotations

import argparse
import json
import re
import sys

from lakelog.spark_log.cli_common import CommandError


def missing_names(query: str, names: list[str]) -> list[str]:
    """The `lakelog.<name>`s `query` names that are not among `names` (lower case, sorted)."""
    return sorted({m.lower() for m in _LAKELOG_NAME.findall(query)} - {n.lower() for n in names})


def query_error(query: str, first: str, names: list[str]) -> CommandError:
    """A failed query as one line with its hint: the tables there are."""
    known = ", ".join(f"lakelog.{n}" for n in names) or "none yet: create a topic"
    missing = missing_names(query, names)
    if missing:  # Spark words it as a table not found, or a "direct query on files" of format lakelog
        return CommandError(f"no table lakelog.{missing[0]} (tables: {known})")
    return CommandError(f"{first} (tables: {known})")


_LAKELOG_NAME = re.compile(r"\blakelog\s*\.\s*`?([A-Za-z0-9_]+)`?", re.IGNORECASE)


def run_query(spark, query: str, names: list[str], args: argparse.Namespace) -> None:
    from pyspark.errors import PySparkException

    try:
        df = spark.sql(query)
        rows = df.limit(args.max_rows + 1).collect()
    except PySparkException as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise query_error(query, first, names) from None
    truncated = len(rows) > args.max_rows
    rows = rows[:args.max_rows]
    print_rows(df.columns, rows, args.format)
    if truncated:
        print(f"lakelog sql: output truncated at {args.max_rows} rows (--max-rows)", file=sys.stderr)


def _cell(v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "backslashreplace")
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if hasattr(v, "asDict"):
        return {k: _cell(x) for k, x in v.asDict().items()}
    if isinstance(v, list):
        return [_cell(x) for x in v]
    return v


def print_rows(columns: list[str], rows, fmt: str) -> None:
    values = [[_cell(r[i]) for i in range(len(columns))] for r in rows]
    if fmt == "json":
        for vs in values:
            print(json.dumps(dict(zip(columns, vs)), default=str))
    elif fmt == "csv":
        import csv

        w = csv.writer(sys.stdout)
        w.writerow(columns)
        for vs in values:
            w.writerow(["" if v is None else (json.dumps(v) if isinstance(v, (dict, list)) else v) for v in vs])
    else:
        text = [[("NULL" if v is None else str(v)) for v in vs] for vs in values]
        widths = [max([len(c)] + [len(t[i]) for t in text]) for i, c in enumerate(columns)]
        line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
        print(line)
        print("| " + " | ".join(c.ljust(w) for c, w in zip(columns, widths)) + " |")
        print(line)
        for t in text:
            print("| " + " | ".join(v.ljust(w) for v, w in zip(t, widths)) + " |")
        print(line)
        print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")
