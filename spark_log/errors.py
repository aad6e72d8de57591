"""Errors of the Spark integration (`spark_log/`).

`SparkSetupError` is the root of this package's tree; it sits under Lakelog's `LakelogError`
(itself an `Exception`) so callers can catch one package or all of Lakelog.
"""

from __future__ import annotations

from pathlib import Path

from lakelog.infra.errors import ErrorKind, LakelogError


class SparkSetupError(LakelogError):
    """A Spark session cannot be built as configured; fix the setup and try again."""

    kind = ErrorKind.CONFIGURATION


class SparkJarsMissing(SparkSetupError):
    """The local jars folder that `make jars` fills, or the Delta jar in it, is missing."""

    def __init__(self, jars_dir: Path, reason: str) -> None:
        super().__init__(
            f"Spark jars not found in {jars_dir}: {reason}. Run `make jars` to resolve them "
            f"with Maven (infra/pom.xml), or point LAKELOG_JARS_DIR at a folder that holds them."
        )
        self.jars_dir = jars_dir
        self.reason = reason


class JobError(LakelogError):
    """A Spark job over the remote tier cannot do its work now."""

    kind = ErrorKind.TRANSIENT
