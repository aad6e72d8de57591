"""What every Spark command of the CLI shares (`spark_log/cli.py` lists them): the remote root's
default, `KEY=VALUE` arguments, the command error, and keeping Spark's JVM quiet on the terminal.
No pyspark import here."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lakelog.infra.errors import ErrorKind, LakelogError


#: = spark_log.jobs.REMOTE_ENV, not imported from there: `lakelog sql` does not load the jobs (a unit test checks).
REMOTE_ENV = "LAKELOG_REMOTE"


def default_remote() -> str:
    return os.environ.get(REMOTE_ENV) or f"file://{Path('data/remote').resolve()}"


def key_value(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    return k.strip(), v


def bounded_int(low: int, high: int):
    """An argparse type: an integer in [low, high], else argparse's usage error naming the range."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range: from {low} to {high}")
        return value
    parse.__name__ = "integer"  # argparse names the type in its message
    return parse


#: The CLI draws its own progress bar and prints its own summary: Spark's console bar stays off.
QUIET_CONF = {"spark.ui.showConsoleProgress": "false"}


class CommandError(LakelogError):
    """A `jobs` or `sql` command cannot run as asked."""

    kind = ErrorKind.INVALID_REQUEST


class quiet_jvm:
    """While Spark's JVM starts, send file descriptor 2 to a log file: the JVM keeps that file as
    its stderr for its whole life, so its warnings and Java stack traces stay out of the terminal
    (`--verbose` keeps them). Python's own stderr is back on the terminal on exit."""

    def __init__(self, folder: str, verbose: bool) -> None:
        self.path = os.path.join(folder, "spark-jvm.log")
        self.verbose = verbose
        self.saved = -1

    def __enter__(self):
        if not self.verbose:
            # pyspark also logs every failed query to stderr (JSON, with the Java stack trace).
            import logging

            logging.getLogger("SQLQueryContextLogger").disabled = True
            sys.stderr.flush()
            self.saved = os.dup(2)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            os.dup2(fd, 2)
            os.close(fd)
        return self

    def __exit__(self, *exc) -> None:
        if self.saved >= 0:
            sys.stderr.flush()
            os.dup2(self.saved, 2)
            os.close(self.saved)
