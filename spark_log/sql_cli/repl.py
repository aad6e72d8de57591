"""`lakelog sql` without a query: an interactive prompt over a Spark session (Spark Connect or local)."""

from __future__ import annotations

import argparse
import os
import sys

from lakelog.infra.errors import LakelogError
from lakelog.spark_log.sql_cli.output import print_rows, run_query


def repl(spark, args: argparse.Namespace, names_of) -> int:
    """An interactive prompt: statements end with `;`; `\\d` lists the tables, `\\d NAME` a table's
    columns, `\\q` quits. History is kept in ~/.lakelog_sql_history."""
    try:
        import readline
    except ImportError:  # not on every platform
        readline = None
    history = os.path.expanduser("~/.lakelog_sql_history")
    if readline is not None:
        try:
            readline.read_history_file(history)
        except OSError:
            pass
        readline.set_history_length(1000)
    print("lakelog sql: statements end with ';'. \\d lists tables, \\d NAME its columns, \\q quits.", file=sys.stderr)
    buffer: list[str] = []
    try:
        while True:
            try:
                line = input("lakelog> " if not buffer else "      -> ")
            except EOFError:
                print(file=sys.stderr)
                return 0
            stripped = line.strip()
            if not buffer and stripped.startswith("\\"):
                if stripped in ("\\q", "\\quit"):
                    return 0
                _describe(spark, names_of(spark, args), stripped[2:].strip())
                continue
            buffer.append(line)
            if not stripped.endswith(";"):
                continue
            query = "\n".join(buffer).strip().rstrip(";").strip()
            buffer.clear()
            if not query:
                continue
            try:
                run_query(spark, query, names_of(spark, args), args)
            except LakelogError as e:
                print(f"lakelog sql: {e}", file=sys.stderr)
    finally:
        if readline is not None:
            try:
                readline.write_history_file(history)
            except OSError:
                pass


def _describe(spark, names: list[str], name: str) -> None:
    """`\\d`: the tables; `\\d NAME`: its columns."""
    from lakelog.spark_log.tables import SQL_DATABASE

    if not name:
        print_rows(["name"], [[f"{SQL_DATABASE}.{n}"] for n in names], "table")
        return
    table = name if "." in name else f"{SQL_DATABASE}.{name}"
    try:
        fields = spark.table(table).schema.fields
    except Exception:
        print(f"lakelog sql: no table {table} (tables: {', '.join(f'{SQL_DATABASE}.{n}' for n in names)})",
              file=sys.stderr)
        return
    print_rows(["column", "type"], [[f.name, f.dataType.simpleString()] for f in fields], "table")
