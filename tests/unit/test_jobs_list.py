"""`lakelog jobs list`: every job the runner knows, each with its description, and nothing else."""

from __future__ import annotations

import argparse

from lakelog.spark_log.cli_jobs import cmd_jobs_list
from lakelog.tiering.job_runs import JOB_NAMES


def test_jobs_list_names_every_job_once_with_its_description(capsys):
    assert cmd_jobs_list(argparse.Namespace()) == 0
    lines = capsys.readouterr().out.splitlines()
    named = [line.split()[0] for line in lines if line.startswith("    ") and not line.startswith("     ")]
    assert named == list(JOB_NAMES)  # in the runner's order, sync-tables included
    assert all(len(line.split()) > 1 for line in lines if line.split()[0] in JOB_NAMES)  # each described
    assert lines[-1].strip() and not any(line.startswith("Topics") for line in lines)  # the list alone
