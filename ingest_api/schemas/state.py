"""The Schema Registry's replicated state: subjects, versions, schemas by id, configs and modes.

`SchemaRegistryState` is part of the cluster metadata image (`image.schemas`), so it is stored
once, in the controller quorum's Raft log, applied identically on every node, and included in
metadata snapshots: every node answers reads from its own image; writes go to the active
controller (`controller_records`), which validates them — parses the schema, resolves its
references, checks compatibility — and proposes records. Schema ids come from the state itself
(`next_id`, advanced by each applied registration), so they are global, never reused, and stable
across restarts and controller failover.

It is an immutable value: each applied record makes a new one (readers on other threads hold a
consistent state without locks).

Records (JSON, like every metadata record; `apply` checks only their structure and the state —
never parses a schema, so every voter applies them the same whatever its libraries):

    schema_register   subject, version, id, schema_type, schema, references [{name, subject, version}]
                      a new version of the subject; the id is the schema's: an id already held by
                      another text is refused; a new id must be unused (next_id moves past it)
    schema_delete     subject, version (int, or null: every version), permanent (bool)
                      soft: marks live versions deleted; permanent: drops soft-deleted versions
                      (and a schema no version uses any more)
    schema_config     subject ("" = global), compatibility (a level, or null: remove), normalize (bool|null)
    schema_mode       subject ("" = global), mode (READWRITE|READONLY|READONLY_OVERRIDE|IMPORT, or null: remove)

Invariants: ids are unique per (type, text, references); `next_id` only grows and exceeds every
id; versions of a subject are unique and increasing in registration order; a version's schema id
is in `schemas`; a reference names a version that exists.

Where the code is: this module holds the state, its reads, `apply` and the record checks; the
controller side (`controller_records`, and `prepare`, `find_version`, `check_compatibility`, which
the routers also call to refuse bad input early) is state_writes.py.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lakelog.ingest_api.schemas import errors as E
from lakelog.ingest_api.schemas.compatibility import DEFAULT_LEVEL, LEVELS
from lakelog.ingest_api.schemas.languages import parse_schema
from lakelog.ingest_api.schemas.parsed import ParsedSchema, Reference, SCHEMA_TYPES

# Limits (part of the state machine's definition for `apply`; the controller refuses beyond them).
MAX_SUBJECT_LENGTH = 255
MAX_SCHEMA_CHARS = 256 * 1024  # a schema travels in one metadata record (Raft entries are at most 1 MiB)
MAX_REFERENCES = 100
MAX_REFERENCE_DEPTH = 16
MAX_VERSIONS_PER_SUBJECT = 10_000
MAX_SUBJECTS = 100_000
MAX_ID = (1 << 31) - 1  # ids are the 4-byte signed int of the wire format
MAX_VERSION = (1 << 31) - 1
MODES = ("READWRITE", "READONLY", "READONLY_OVERRIDE", "IMPORT")
DEFAULT_MODE = "READWRITE"
RECORD_TYPES = ("schema_register", "schema_delete", "schema_config", "schema_mode")
CONTROLLER_OPS = ("schema_register", "schema_delete_version", "schema_delete_subject", "schema_config",
                  "schema_mode")
_SUBJECT = re.compile(r"[^\x00-\x1f\x7f]+")


@dataclass(frozen=True)
class SchemaRef:
    """A reference of a schema: the name it is known by inside the schema, and the version it is."""

    name: str
    subject: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class StoredSchema:
    schema_type: str
    schema: str
    references: tuple[SchemaRef, ...] = ()

    @property
    def key(self) -> tuple:
        return (self.schema_type, self.schema, self.references)


@dataclass(frozen=True)
class SubjectVersion:
    version: int
    schema_id: int
    deleted: bool = False


@dataclass(frozen=True)
class SchemaRegistryState:
    schemas: Mapping[int, StoredSchema] = field(default_factory=dict)
    subjects: Mapping[str, tuple[SubjectVersion, ...]] = field(default_factory=dict)
    next_id: int = 1
    configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # "" = global
    modes: Mapping[str, str] = field(default_factory=dict)  # "" = global
    by_key: Mapping[tuple, int] = field(default_factory=dict, compare=False)  # derived: content -> id

    @property
    def empty(self) -> bool:
        return not (self.schemas or self.subjects or self.configs or self.modes) and self.next_id == 1

    # --- reads ---------------------------------------------------------------------------------

    def versions(self, subject: str, *, deleted: bool = False) -> list[SubjectVersion]:
        return [v for v in self.subjects.get(subject, ()) if deleted or not v.deleted]

    def version(self, subject: str, version: int | str, *, deleted: bool = False) -> SubjectVersion:
        """One version (an int, or -1 / "latest": the newest live one); 40401 / 40402 when absent."""
        all_versions = self.subjects.get(subject, ())
        live = [v for v in all_versions if deleted or not v.deleted]
        if not live:
            raise E.SubjectNotFoundError(f"Subject '{subject}' not found.")
        n = parse_version(version)
        if n == -1:
            return live[-1]
        for v in live:
            if v.version == n:
                return v
        raise E.VersionNotFoundError(f"Version {n} not found.")

    def schema(self, schema_id: int) -> StoredSchema:
        s = self.schemas.get(schema_id)
        if s is None:
            raise E.SchemaNotFoundError(f"Schema {schema_id} not found")
        return s

    def compatibility_level(self, subject: str) -> str:
        for key in (subject, ""):
            level = self.configs.get(key, {}).get("compatibilityLevel")
            if level:
                return level
        return DEFAULT_LEVEL

    def normalize_default(self, subject: str) -> bool:
        for key in (subject, ""):
            n = self.configs.get(key, {}).get("normalize")
            if n is not None:
                return bool(n)
        return False

    def mode(self, subject: str) -> str:
        return self.modes.get(subject) or self.modes.get("") or DEFAULT_MODE

    def referenced_by(self, subject: str, version: int) -> list[int]:
        """Ids of the live schemas that reference (subject, version)."""
        ids = set()
        for s, versions in self.subjects.items():
            for v in versions:
                if v.deleted:
                    continue
                if any(r.subject == subject and r.version == version for r in self.schemas[v.schema_id].references):
                    ids.add(v.schema_id)
        return sorted(ids)

    def resolved_references(self, refs: Sequence[SchemaRef], depth: int = 0) -> list[Reference]:
        """Every schema `refs` reach, transitively, dependencies first, as (name, type, text)."""
        out: list[Reference] = []
        seen: set[str] = set()

        def visit(rs: Sequence[SchemaRef], d: int) -> None:
            if d > MAX_REFERENCE_DEPTH:
                raise E.InvalidSchemaError(f"Invalid schema: references nest deeper than {MAX_REFERENCE_DEPTH}")
            for r in rs:
                try:
                    v = self.version(r.subject, r.version, deleted=True)
                except (E.SubjectNotFoundError, E.VersionNotFoundError):
                    raise E.InvalidSchemaError(f"Invalid schema: reference {r.name!r} names subject "
                                               f"'{r.subject}' version {r.version}, which does not exist") from None
                stored = self.schemas[v.schema_id]
                visit(stored.references, d + 1)
                if r.name not in seen:
                    seen.add(r.name)
                    out.append((r.name, stored.schema_type, stored.schema))

        visit(refs, depth)
        return out

    def parsed(self, stored: StoredSchema) -> ParsedSchema:
        return _parse_cached(stored.schema_type, stored.schema,
                             tuple(self.resolved_references(stored.references)))

    # --- serialization -------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "next_id": self.next_id,
            "schemas": [{"id": i, "schema_type": s.schema_type, "schema": s.schema,
                         "references": [r.to_dict() for r in s.references]}
                        for i, s in sorted(self.schemas.items())],
            "subjects": [{"subject": name, "versions": [[v.version, v.schema_id, v.deleted] for v in versions]}
                         for name, versions in sorted(self.subjects.items())],
            "configs": [{"subject": k, **dict(sorted(v.items()))} for k, v in sorted(self.configs.items())],
            "modes": [{"subject": k, "mode": v} for k, v in sorted(self.modes.items())],
        }

    @classmethod
    def from_dict(cls, d: Any) -> "SchemaRegistryState":
        if not isinstance(d, dict):
            raise ValueError("the schema registry state must be an object")
        schemas = {}
        for s in _list(d, "schemas"):
            sid = _int(s, "id", 1, MAX_ID)
            schemas[sid] = StoredSchema(_schema_type(s.get("schema_type")), _text(s.get("schema")),
                                        check_references(s.get("references", [])))
        subjects = {}
        for s in _list(d, "subjects"):
            name = check_subject_name(s.get("subject"))
            versions = []
            for item in _list(s, "versions"):
                if not (isinstance(item, list) and len(item) == 3 and isinstance(item[2], bool)):
                    raise ValueError("a subject version is [version, id, deleted]")
                versions.append(SubjectVersion(_int({"v": item[0]}, "v", 1, MAX_VERSION),
                                               _int({"i": item[1]}, "i", 1, MAX_ID), item[2]))
                if versions[-1].schema_id not in schemas:
                    raise ValueError(f"subject {name!r} names unknown schema id {versions[-1].schema_id}")
            subjects[name] = tuple(versions)
        configs = {}
        for c in _list(d, "configs"):
            key = c.get("subject")
            if not isinstance(key, str):
                raise ValueError("a config names its subject")
            configs[key] = _config_value(c.get("compatibilityLevel"), c.get("normalize"))
        modes = {}
        for m in _list(d, "modes"):
            key = m.get("subject")
            if not isinstance(key, str) or m.get("mode") not in MODES:
                raise ValueError("a mode names its subject and one of " + ", ".join(MODES))
            modes[key] = m["mode"]
        next_id = _int(d, "next_id", 1, MAX_ID + 1)
        if schemas and max(schemas) >= next_id:
            raise ValueError("next_id is not above every schema id")
        return cls(schemas, subjects, next_id, configs, modes, {s.key: i for i, s in schemas.items()})

    # --- apply ---------------------------------------------------------------------------------

    def apply(self, rec: Mapping[str, Any]) -> "SchemaRegistryState":
        """The state after one record; raises ValueError when the record does not fit (it is skipped)."""
        t = rec.get("type")
        if t == "schema_register":
            return self._apply_register(rec)
        if t == "schema_delete":
            return self._apply_delete(rec)
        if t == "schema_config":
            subject = check_config_subject(rec.get("subject"))
            configs = dict(self.configs)
            if rec.get("compatibility") is None and rec.get("normalize") is None:
                if subject not in configs:
                    raise ValueError(f"subject {subject!r} has no config")
                del configs[subject]
            else:
                configs[subject] = _config_value(rec.get("compatibility"), rec.get("normalize"))
            return replace(self, configs=configs)
        if t == "schema_mode":
            subject = check_config_subject(rec.get("subject"))
            modes = dict(self.modes)
            mode = rec.get("mode")
            if mode is None:
                if subject not in modes:
                    raise ValueError(f"subject {subject!r} has no mode")
                del modes[subject]
            elif mode not in MODES:
                raise ValueError(f"mode {mode!r} is not one of {', '.join(MODES)}")
            else:
                modes[subject] = mode
            return replace(self, modes=modes)
        raise ValueError(f"not a schema registry record: {t!r}")

    def _apply_register(self, rec: Mapping[str, Any]) -> "SchemaRegistryState":
        subject = check_subject_name(rec.get("subject"))
        version = _int(rec, "version", 1, MAX_VERSION)
        sid = _int(rec, "id", 1, MAX_ID)
        stored = StoredSchema(_schema_type(rec.get("schema_type")), _text(rec.get("schema")),
                              check_references(rec.get("references", [])))
        for r in stored.references:
            if not any(v.version == r.version for v in self.subjects.get(r.subject, ())):
                raise ValueError(f"reference {r.name!r}: subject {r.subject!r} has no version {r.version}")
        existing = self.schemas.get(sid)
        if existing is not None and existing.key != stored.key:
            raise ValueError(f"schema id {sid} is another schema's")
        if existing is None and self.by_key.get(stored.key) is not None:
            raise ValueError(f"that schema has id {self.by_key[stored.key]}, not {sid}")
        versions = self.subjects.get(subject, ())
        if versions and version <= versions[-1].version:
            raise ValueError(f"version {version} of {subject!r} is not above {versions[-1].version}")
        if any(v.schema_id == sid and not v.deleted for v in versions):
            raise ValueError(f"schema {sid} is already a live version of {subject!r}")
        if len(versions) >= MAX_VERSIONS_PER_SUBJECT or (not versions and len(self.subjects) >= MAX_SUBJECTS):
            raise ValueError("too many subjects or versions")
        schemas, subjects, by_key = dict(self.schemas), dict(self.subjects), dict(self.by_key)
        schemas[sid] = stored
        by_key[stored.key] = sid
        subjects[subject] = versions + (SubjectVersion(version, sid),)
        return replace(self, schemas=schemas, subjects=subjects, next_id=max(self.next_id, sid + 1), by_key=by_key)

    def _apply_delete(self, rec: Mapping[str, Any]) -> "SchemaRegistryState":
        subject = check_subject_name(rec.get("subject"))
        permanent = rec.get("permanent")
        if not isinstance(permanent, bool):
            raise ValueError("permanent must be a boolean")
        version = None if rec.get("version") is None else _int(rec, "version", 1, MAX_VERSION)
        versions = self.subjects.get(subject)
        if not versions:
            raise ValueError(f"no subject {subject!r}")
        targets = [v for v in versions if version is None or v.version == version]
        targets = [v for v in targets if v.deleted == permanent]
        if not targets:
            raise ValueError(f"nothing to delete in {subject!r} version {version}")
        doomed = {v.version for v in targets}
        if permanent:
            kept = tuple(v for v in versions if v.version not in doomed)
        else:
            kept = tuple(replace(v, deleted=True) if v.version in doomed else v for v in versions)
        subjects = dict(self.subjects)
        configs, modes = self.configs, self.modes
        if kept:
            subjects[subject] = kept
        else:
            del subjects[subject]
            if subject in configs or subject in modes:  # Confluent drops a subject's settings with it
                configs = {k: v for k, v in configs.items() if k != subject}
                modes = {k: v for k, v in modes.items() if k != subject}
        schemas, by_key = self.schemas, self.by_key
        if permanent:
            used = {v.schema_id for vs in subjects.values() for v in vs}
            gone = [v.schema_id for v in targets if v.schema_id not in used]
            if gone:
                schemas, by_key = dict(schemas), dict(by_key)
                for sid in gone:
                    by_key.pop(schemas.pop(sid).key, None)
        return replace(self, schemas=schemas, subjects=subjects, configs=configs, modes=modes, by_key=by_key)


# ------------------------------------------------------------------------- validation helpers

def check_subject_name(name: object) -> str:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_SUBJECT_LENGTH or not _SUBJECT.fullmatch(name):
        raise E.InvalidSubjectError(f"Invalid subject: a subject name is 1 to {MAX_SUBJECT_LENGTH} characters "
                                    f"without control characters")
    return name


def parse_version(version: object) -> int:
    """A version path value: 'latest' or -1 (the newest), or 1..2^31-1; 42202 otherwise."""
    if version in ("latest", -1, "-1"):
        return -1
    try:
        n = int(version) if isinstance(version, (int, str)) and not isinstance(version, bool) else 0
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_VERSION:
        raise E.InvalidVersionError(f"The specified version '{version}' is not a valid version id. Allowed values "
                                    f"are between [1, 2^31-1] and the string \"latest\"")
    return n


def check_level(level: object) -> str:
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise E.InvalidCompatibilityLevelError(f"Invalid compatibility level. Valid values are none, backward, "
                                               f"forward, full, backward_transitive, forward_transitive, and "
                                               f"full_transitive")
    return level.upper()


def check_mode(mode: object) -> str:
    if not isinstance(mode, str) or mode.upper() not in MODES:
        raise E.InvalidModeError(f"Invalid mode. Valid values are {', '.join(MODES)}.")
    return mode.upper()


class RecordFieldError(ValueError):
    """A field of a schema record or request is missing, mistyped or out of bounds."""


def _int(d: Mapping[str, Any], key: str, lo: int, hi: int) -> int:
    v = d.get(key) if isinstance(d, Mapping) else None
    if type(v) is not int or not lo <= v <= hi:
        raise RecordFieldError(f"field {key!r} must be an integer in [{lo}, {hi}], not {v!r}")
    return v


def _list(d: Mapping[str, Any], key: str) -> list:
    v = d.get(key, []) if isinstance(d, Mapping) else None
    if not isinstance(v, list) or not all(isinstance(x, (dict, list)) for x in v):
        raise RecordFieldError(f"{key} must be a list")
    return v


def _text(v: object) -> str:
    if not isinstance(v, str) or not 0 < len(v) <= MAX_SCHEMA_CHARS:
        raise RecordFieldError(f"a schema is a string of 1..{MAX_SCHEMA_CHARS} characters")
    return v


def _schema_type(v: object) -> str:
    if v not in SCHEMA_TYPES:
        raise RecordFieldError(f"schema type {v!r} is not one of {', '.join(SCHEMA_TYPES)}")
    return v  # type: ignore[return-value]


def check_references(v: object) -> tuple[SchemaRef, ...]:
    if not isinstance(v, list) or len(v) > MAX_REFERENCES:
        raise RecordFieldError(f"references must be a list of at most {MAX_REFERENCES}")
    out = []
    for r in v:
        if not isinstance(r, dict) or not isinstance(r.get("name"), str) or not r["name"]:
            raise RecordFieldError("a reference is {name, subject, version}")
        out.append(SchemaRef(r["name"][:MAX_SCHEMA_CHARS], check_subject_name(r.get("subject")),
                             _int(r, "version", 1, MAX_VERSION)))
    if len({r.name for r in out}) != len(out):
        raise RecordFieldError("two references have the same name")
    return tuple(out)


def check_config_subject(v: object) -> str:
    return "" if v == "" else check_subject_name(v)


def _config_value(level: object, normalize: object) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if level is not None:
        if level not in LEVELS:
            raise RecordFieldError(f"compatibility level {level!r} is not one of {', '.join(LEVELS)}")
        out["compatibilityLevel"] = level
    if normalize is not None:
        if not isinstance(normalize, bool):
            raise RecordFieldError("normalize must be a boolean")
        out["normalize"] = normalize
    if not out:
        raise RecordFieldError("a config sets a compatibility level or normalize")
    return out


@functools.lru_cache(maxsize=1024)
def _parse_cached(schema_type: str, text: str, references: tuple[Reference, ...]) -> ParsedSchema:
    return parse_schema(schema_type, text, references)
