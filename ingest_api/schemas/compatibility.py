"""Compatibility levels: which earlier versions a new schema is checked against, and in which direction.

    BACKWARD             the new schema reads data written with the latest version
    BACKWARD_TRANSITIVE  the new schema reads data written with every earlier version
    FORWARD              the latest version reads data written with the new schema
    FORWARD_TRANSITIVE   every earlier version reads data written with the new schema
    FULL                 BACKWARD and FORWARD
    FULL_TRANSITIVE      BACKWARD_TRANSITIVE and FORWARD_TRANSITIVE
    NONE                 no check

"Reads" is the schema language's own rule (`ParsedSchema.read_errors`): Avro's schema resolution,
Confluent's JSON Schema and Protobuf diffs. Soft-deleted versions are not checked against
(Confluent). A schema of another type than the earlier version is incompatible unless NONE.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from lakelog.ingest_api.schemas.parsed import ParsedSchema

NONE = "NONE"
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", NONE)
DEFAULT_LEVEL = "BACKWARD"


def compatibility_errors(level: str, new: ParsedSchema, previous: Sequence[tuple[int, ParsedSchema]]) -> list[str]:
    """The reasons `new` breaks `level` against `previous` ((version, schema), oldest first); [] if it does not."""
    if level == NONE or not previous:
        return []
    transitive = level.endswith("_TRANSITIVE")
    base = level.removesuffix("_TRANSITIVE")
    against = list(previous) if transitive else [previous[-1]]
    errors: list[str] = []
    for version, old in reversed(against):  # newest first, as Confluent reports
        if old.schema_type != new.schema_type:
            errors.append(f"version {version}: the schema type changed from {old.schema_type} to {new.schema_type}")
            continue
        if base in ("BACKWARD", "FULL"):
            errors += [f"version {version}, BACKWARD: {e}" for e in new.read_errors(old)]
        if base in ("FORWARD", "FULL"):
            errors += [f"version {version}, FORWARD: {e}" for e in old.read_errors(new)]
    return errors
