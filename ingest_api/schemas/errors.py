"""Errors of the Schema Registry.

Each is answered with Confluent Schema Registry's status and `error_code`
(`io.confluent.kafka.schemaregistry.rest.exceptions.Errors`): a client written against Confluent's
registry tells them apart by code. The codes are in `ingest_api/error_table.py`'s
`SCHEMA_REGISTRY_TABLE` — the registry's API is its own namespace (40401 is a subject there, a
topic in the REST Proxy's).
"""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind, LakelogError


class SchemaRegistryError(LakelogError):
    """Root of the Schema Registry's errors."""

    kind = ErrorKind.INVALID_REQUEST


class SubjectNotFoundError(SchemaRegistryError):
    """No subject of that name (or only soft-deleted versions, unless deleted ones were asked for)."""

    kind = ErrorKind.NOT_FOUND


class VersionNotFoundError(SchemaRegistryError):
    """The subject has no such version."""

    kind = ErrorKind.NOT_FOUND


class SchemaNotFoundError(SchemaRegistryError):
    """No schema of that id, or the schema is not registered under the subject."""

    kind = ErrorKind.NOT_FOUND


class SubjectSoftDeletedError(SchemaRegistryError):
    """The subject was soft deleted (a soft delete of it again is refused)."""

    kind = ErrorKind.NOT_FOUND


class SubjectNotSoftDeletedError(SchemaRegistryError):
    """A permanent delete of a subject that was not soft deleted first."""

    kind = ErrorKind.NOT_FOUND


class VersionSoftDeletedError(SchemaRegistryError):
    """The version was soft deleted already."""

    kind = ErrorKind.NOT_FOUND


class VersionNotSoftDeletedError(SchemaRegistryError):
    """A permanent delete of a version that was not soft deleted first."""

    kind = ErrorKind.NOT_FOUND


class SubjectCompatibilityNotConfiguredError(SchemaRegistryError):
    """The subject has no compatibility level of its own (ask with defaultToGlobal=true)."""

    kind = ErrorKind.NOT_FOUND


class SubjectModeNotConfiguredError(SchemaRegistryError):
    """The subject has no mode of its own (ask with defaultToGlobal=true)."""

    kind = ErrorKind.NOT_FOUND


class IncompatibleSchemaError(SchemaRegistryError):
    """The schema breaks the subject's compatibility level; the message names the rule."""



class InvalidSchemaError(SchemaRegistryError):
    """The schema text does not parse, names an unknown reference, or is not valid for its language."""



class InvalidVersionError(SchemaRegistryError):
    """A version is not 'latest', -1 or an integer in 1..2^31-1."""



class InvalidCompatibilityLevelError(SchemaRegistryError):
    """Not one of the seven compatibility levels."""



class InvalidModeError(SchemaRegistryError):
    """Not one of READWRITE, READONLY, READONLY_OVERRIDE, IMPORT (or IMPORT over a non-empty registry)."""



class OperationNotPermittedError(SchemaRegistryError):
    """The subject's mode forbids the operation (READONLY), or an explicit id outside IMPORT mode."""



class ReferenceExistsError(SchemaRegistryError):
    """The version is referenced by another schema and cannot be deleted."""



class IdDoesNotMatchError(SchemaRegistryError):
    """IMPORT mode: the id given is taken by a different schema."""



class InvalidSubjectError(SchemaRegistryError):
    """The subject name is empty, too long or holds control characters."""



class SchemaTooLargeError(SchemaRegistryError):
    """The schema is above the registry's size limit."""

