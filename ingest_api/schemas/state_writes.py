"""The Schema Registry's controller side: a request and the state in, the records to propose out.

Runs on the active controller (`controller_records`, called by controller_host.py's `OPS`), and
on the node that receives a request, to refuse bad input before forwarding it: `prepare` parses a
registration or lookup body against the state (the schema's text, type and references, resolved;
normalized when asked), `find_version` finds a schema already registered under a subject,
`check_compatibility` checks it against the subject's versions at a level. The records are those
of state.py's docstring; `SchemaRegistryState.apply` (state.py) applies them.

Pure: the state is an immutable value, nothing here changes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from lakelog.ingest_api.schemas import errors as E
from lakelog.ingest_api.schemas.compatibility import DEFAULT_LEVEL, compatibility_errors
from lakelog.ingest_api.schemas.languages import parse_schema
from lakelog.ingest_api.schemas.parsed import AVRO, ParsedSchema, SCHEMA_TYPES
from lakelog.ingest_api.schemas.state import (
    DEFAULT_MODE,
    MAX_ID,
    MAX_SCHEMA_CHARS,
    MAX_SUBJECTS,
    MAX_VERSIONS_PER_SUBJECT,
    RecordFieldError,
    SchemaRegistryState,
    StoredSchema,
    SubjectVersion,
    check_config_subject,
    check_level,
    check_mode,
    check_references,
    check_subject_name,
    parse_version,
)


# ------------------------------------------------------------------------- the controller side


def prepare(state: SchemaRegistryState, subject: str, body: Mapping[str, Any], *, normalize: bool | None
            ) -> tuple[StoredSchema, ParsedSchema, bool]:
    """Parse a registration or lookup body against the state: (what would be stored, parsed, normalized?).

    Raises InvalidSchemaError (bad text, unknown reference), SchemaTooLargeError, InvalidSubjectError.
    """
    check_subject_name(subject)
    text = body.get("schema")
    if not isinstance(text, str):
        raise E.InvalidSchemaError("Invalid schema: the request has no \"schema\" string")
    if len(text) > MAX_SCHEMA_CHARS:
        raise E.SchemaTooLargeError(f"Schema too large: {len(text)} characters, above {MAX_SCHEMA_CHARS}")
    schema_type = body.get("schemaType") or AVRO
    if schema_type not in SCHEMA_TYPES:
        raise E.InvalidSchemaError(f"Invalid schema type {schema_type!r}: one of {', '.join(SCHEMA_TYPES)}")
    try:
        refs = check_references(body.get("references") or [])
    except E.InvalidSubjectError:
        raise E.InvalidSchemaError("Invalid schema: a reference names an invalid subject") from None
    except RecordFieldError as e:
        raise E.InvalidSchemaError(f"Invalid schema: {e}") from None
    parsed = parse_schema(schema_type, text, state.resolved_references(refs))
    do_normalize = state.normalize_default(subject) if normalize is None else normalize
    stored_text = parsed.normalized() if do_normalize else parsed.canonical
    if len(stored_text) > MAX_SCHEMA_CHARS:
        raise E.SchemaTooLargeError(f"Schema too large: {len(stored_text)} characters, above {MAX_SCHEMA_CHARS}")
    return StoredSchema(schema_type, stored_text, refs), parsed, do_normalize


def find_version(state: SchemaRegistryState, subject: str, stored: StoredSchema, parsed: ParsedSchema,
                 *, deleted: bool = False) -> SubjectVersion | None:
    """The subject's version holding this schema (same text, or same normalized text), or None."""
    versions = state.versions(subject, deleted=deleted)
    for v in reversed(versions):
        if state.schemas[v.schema_id].key == stored.key:
            return v
    normalized = parsed.normalized()
    for v in reversed(versions):
        s = state.schemas[v.schema_id]
        if s.schema_type == stored.schema_type and s.references == stored.references:
            try:
                if state.parsed(s).normalized() == normalized:
                    return v
            except E.SchemaRegistryError:
                continue
    return None


def check_compatibility(state: SchemaRegistryState, subject: str, parsed: ParsedSchema,
                        against: Sequence[SubjectVersion] | None = None, level: str | None = None) -> list[str]:
    """The reasons `parsed` breaks the subject's level against its live versions ([] = compatible)."""
    level = level or state.compatibility_level(subject)
    versions = state.versions(subject) if against is None else list(against)
    previous = [(v.version, state.parsed(state.schemas[v.schema_id])) for v in versions]
    return compatibility_errors(level, parsed, previous)


def controller_records(op: str, args: Mapping[str, Any], state: SchemaRegistryState) -> tuple[list[dict], dict]:
    """(records to propose, result) for a registry write; raises a SchemaRegistryError when refused."""
    if op == "schema_register":
        return _register(state, args)
    if op in ("schema_delete_version", "schema_delete_subject"):
        return _delete(state, op, args)
    if op == "schema_config":
        subject = check_config_subject(args.get("subject", ""))
        if args.get("delete"):
            old = state.configs.get(subject)
            if old is None:
                if subject:
                    raise E.SubjectCompatibilityNotConfiguredError(
                        f"Subject '{subject}' does not have subject-level compatibility configured")
                return [], {"compatibilityLevel": DEFAULT_LEVEL}
            return ([{"type": "schema_config", "subject": subject, "compatibility": None, "normalize": None}],
                    {"compatibilityLevel": old.get("compatibilityLevel", state.compatibility_level(""))})
        level = None if args.get("compatibility") is None else check_level(args.get("compatibility"))
        normalize = args.get("normalize")
        if normalize is not None and not isinstance(normalize, bool):
            raise E.InvalidSchemaError("normalize must be a boolean")
        if level is None and normalize is None:
            raise E.InvalidCompatibilityLevelError("Invalid compatibility level: the request sets nothing")
        old = dict(state.configs.get(subject, {}))
        new = {**old, **({"compatibilityLevel": level} if level else {}),
               **({"normalize": normalize} if normalize is not None else {})}
        result = {"compatibility": new.get("compatibilityLevel", state.compatibility_level(subject))}
        if normalize is not None:
            result["normalize"] = normalize
        if new == old:
            return [], result
        return ([{"type": "schema_config", "subject": subject, "compatibility": new.get("compatibilityLevel"),
                  "normalize": new.get("normalize")}], result)
    if op == "schema_mode":
        subject = check_config_subject(args.get("subject", ""))
        if args.get("delete"):
            old = state.modes.get(subject)
            if old is None:
                if subject:
                    raise E.SubjectModeNotConfiguredError(f"Subject '{subject}' does not have subject-level mode "
                                                          f"configured")
                return [], {"mode": DEFAULT_MODE}
            return [{"type": "schema_mode", "subject": subject, "mode": None}], {"mode": old}
        mode = check_mode(args.get("mode"))
        if mode == "IMPORT" and not args.get("force"):
            has = state.versions(subject, deleted=True) if subject else state.schemas
            if has:
                raise E.OperationNotPermittedError(
                    "Cannot import since found existing subjects" if not subject else
                    f"Cannot import since subject '{subject}' has versions")
        if state.modes.get(subject) == mode:
            return [], {"mode": mode}
        return [{"type": "schema_mode", "subject": subject, "mode": mode}], {"mode": mode}
    raise E.SchemaRegistryError(f"unknown schema registry request {op!r}")


def _register(state: SchemaRegistryState, args: Mapping[str, Any]) -> tuple[list[dict], dict]:
    subject = check_subject_name(args.get("subject"))
    mode = state.mode(subject)
    if mode in ("READONLY", "READONLY_OVERRIDE"):
        raise E.OperationNotPermittedError(f"Subject {subject} is in read-only mode")
    explicit_id, explicit_version = args.get("id"), args.get("version")
    if explicit_id is not None and mode != "IMPORT":
        raise E.OperationNotPermittedError(f"Subject {subject} is not in import mode: an id cannot be given")
    stored, parsed, _ = prepare(state, subject, args, normalize=args.get("normalize"))
    found = find_version(state, subject, stored, parsed)
    if found is not None:
        return [], _registered(state, subject, found)
    if len(json.dumps(stored.schema)) > MAX_SCHEMA_CHARS * 2:  # escaping can grow it: keep a record below 1 MiB
        raise E.SchemaTooLargeError("Schema too large once escaped for the metadata log")
    if mode != "IMPORT":
        errors = check_compatibility(state, subject, parsed)
        if errors:
            level = state.compatibility_level(subject)
            raise E.IncompatibleSchemaError(
                f"Schema being registered is incompatible with an earlier schema for subject \"{subject}\", "
                f"details: [{'; '.join(errors[:20])}] (compatibility level {level})")
    sid = state.by_key.get(stored.key)
    if explicit_id is not None:
        if type(explicit_id) is not int or not 1 <= explicit_id <= MAX_ID:
            raise E.InvalidSchemaError(f"Invalid id {explicit_id!r}")
        if sid is not None and sid != explicit_id or (explicit_id in state.schemas and sid != explicit_id):
            raise E.IdDoesNotMatchError(f"Schema already registered with id {sid} instead of input id {explicit_id}"
                                        if sid is not None else f"Id {explicit_id} is taken by another schema")
        sid = explicit_id
    if sid is None:
        sid = state.next_id
        if sid > MAX_ID:
            raise E.SchemaRegistryError("schema ids are exhausted")
    versions = state.versions(subject, deleted=True)
    latest = versions[-1].version if versions else 0
    version = latest + 1
    if explicit_version is not None:
        version = parse_version(explicit_version)
        if version <= latest:
            raise E.InvalidVersionError(f"Version {version} is not above the subject's latest version {latest}")
    if len(versions) >= MAX_VERSIONS_PER_SUBJECT:
        raise E.OperationNotPermittedError(f"Subject {subject} has {MAX_VERSIONS_PER_SUBJECT} versions, the limit")
    if not versions and len(state.subjects) >= MAX_SUBJECTS:
        raise E.OperationNotPermittedError(f"The registry holds {MAX_SUBJECTS} subjects, the limit")
    record = {"type": "schema_register", "subject": subject, "version": version, "id": sid,
              "schema_type": stored.schema_type, "schema": stored.schema,
              "references": [r.to_dict() for r in stored.references]}
    return [record], {"id": sid, "version": version, "subject": subject}


def _registered(state: SchemaRegistryState, subject: str, v: SubjectVersion) -> dict:
    return {"id": v.schema_id, "version": v.version, "subject": subject}


def _delete(state: SchemaRegistryState, op: str, args: Mapping[str, Any]) -> tuple[list[dict], dict]:
    subject = check_subject_name(args.get("subject"))
    permanent = bool(args.get("permanent"))
    if state.mode(subject) in ("READONLY", "READONLY_OVERRIDE"):
        raise E.OperationNotPermittedError(f"Subject {subject} is in read-only mode")
    all_versions = state.versions(subject, deleted=True)
    if not all_versions:
        raise E.SubjectNotFoundError(f"Subject '{subject}' not found.")
    live = [v for v in all_versions if not v.deleted]
    if op == "schema_delete_subject":
        if permanent:
            if live:
                raise E.SubjectNotSoftDeletedError(f"Subject '{subject}' was not deleted first before being "
                                                   f"permanently deleted")
            targets = all_versions
        else:
            if not live:
                raise E.SubjectSoftDeletedError(f"Subject '{subject}' was soft deleted.Set permanent=true to "
                                                f"delete permanently")
            targets = live
        for v in targets:
            _check_unreferenced(state, subject, v.version)
        return ([{"type": "schema_delete", "subject": subject, "version": None, "permanent": permanent}],
                {"versions": [v.version for v in targets]})
    n = parse_version(args.get("version"))
    if n == -1:
        if not live and not permanent:
            raise E.SubjectNotFoundError(f"Subject '{subject}' not found.")
        target = (live or all_versions)[-1] if not permanent else all_versions[-1]
    else:
        target = next((v for v in all_versions if v.version == n), None)
        if target is None:
            raise E.VersionNotFoundError(f"Version {n} not found.")
    if permanent and not target.deleted:
        raise E.VersionNotSoftDeletedError(f"Subject '{subject}' Version {target.version} was not deleted first "
                                           f"before being permanently deleted")
    if not permanent and target.deleted:
        raise E.VersionSoftDeletedError(f"Subject '{subject}' Version {target.version} was soft deleted.Set "
                                        f"permanent=true to delete permanently")
    _check_unreferenced(state, subject, target.version)
    return ([{"type": "schema_delete", "subject": subject, "version": target.version, "permanent": permanent}],
            {"version": target.version})


def _check_unreferenced(state: SchemaRegistryState, subject: str, version: int) -> None:
    ids = state.referenced_by(subject, version)
    if ids:
        raise E.ReferenceExistsError(f"One or more references exist to the schema {{subject={subject}, "
                                     f"version={version}}}: ids {ids}")
