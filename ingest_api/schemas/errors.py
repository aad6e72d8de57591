"""Errors of the Schema Registry, with Confluent's HTTP status and `error_code` for each.

The codes are Confluent Schema Registry's (`io.confluent.kafka.schemaregistry.rest.exceptions.Errors`):
a client written against Confluent's registry tells them apart by code, so they must match.
"""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind
from lakelog.ingest_api.errors import NodeError


class SchemaRegistryError(NodeError):
    """Root of the Schema Registry's errors."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 422, 42201


class SubjectNotFoundError(SchemaRegistryError):
    """No subject of that name (or only soft-deleted versions, unless deleted ones were asked for)."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40401


class VersionNotFoundError(SchemaRegistryError):
    """The subject has no such version."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40402


class SchemaNotFoundError(SchemaRegistryError):
    """No schema of that id, or the schema is not registered under the subject."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40403


class SubjectSoftDeletedError(SchemaRegistryError):
    """The subject was soft deleted (a soft delete of it again is refused)."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40404


class SubjectNotSoftDeletedError(SchemaRegistryError):
    """A permanent delete of a subject that was not soft deleted first."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40405


class VersionSoftDeletedError(SchemaRegistryError):
    """The version was soft deleted already."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40406


class VersionNotSoftDeletedError(SchemaRegistryError):
    """A permanent delete of a version that was not soft deleted first."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40407


class SubjectCompatibilityNotConfiguredError(SchemaRegistryError):
    """The subject has no compatibility level of its own (ask with defaultToGlobal=true)."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40408


class SubjectModeNotConfiguredError(SchemaRegistryError):
    """The subject has no mode of its own (ask with defaultToGlobal=true)."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40409


class IncompatibleSchemaError(SchemaRegistryError):
    """The schema breaks the subject's compatibility level; the message names the rule."""

    status, error_code = 409, 409


class InvalidSchemaError(SchemaRegistryError):
    """The schema text does not parse, names an unknown reference, or is not valid for its language."""

    status, error_code = 422, 42201


class InvalidVersionError(SchemaRegistryError):
    """A version is not 'latest', -1 or an integer in 1..2^31-1."""

    status, error_code = 422, 42202


class InvalidCompatibilityLevelError(SchemaRegistryError):
    """Not one of the seven compatibility levels."""

    status, error_code = 422, 42203


class InvalidModeError(SchemaRegistryError):
    """Not one of READWRITE, READONLY, READONLY_OVERRIDE, IMPORT (or IMPORT over a non-empty registry)."""

    status, error_code = 422, 42204


class OperationNotPermittedError(SchemaRegistryError):
    """The subject's mode forbids the operation (READONLY), or an explicit id outside IMPORT mode."""

    status, error_code = 422, 42205


class ReferenceExistsError(SchemaRegistryError):
    """The version is referenced by another schema and cannot be deleted."""

    status, error_code = 422, 42206


class IdDoesNotMatchError(SchemaRegistryError):
    """IMPORT mode: the id given is taken by a different schema."""

    status, error_code = 422, 42207


class InvalidSubjectError(SchemaRegistryError):
    """The subject name is empty, too long or holds control characters."""

    status, error_code = 422, 42208


class SchemaTooLargeError(SchemaRegistryError):
    """The schema is above the registry's size limit."""

    status, error_code = 422, 42209
