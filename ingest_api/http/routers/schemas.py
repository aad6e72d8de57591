"""The Schema Registry's HTTP API, Confluent's paths and shapes, at the node's root.

Thin: parses paths, query parameters and bodies, calls `SchemaRegistry` (reads from the image,
writes through the controller) and the pure helpers of `state`, and renders Confluent's JSON.
Every answer, errors included, is `application/vnd.schemaregistry.v1+json`; errors are
`{"error_code": ..., "message": ...}` with Confluent's codes (`errors.py`). Request bodies may be
`application/vnd.schemaregistry.v1+json`, `application/vnd.schemaregistry+json`,
`application/json` or `application/octet-stream` (Confluent's accepted types), at most
`MAX_BODY_BYTES`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.routing import APIRoute

from lakelog.infra.errors import LakelogError
from lakelog.ingest_api.error_table import http_error
from lakelog.ingest_api.errors import UnsupportedMediaTypeError
from lakelog.ingest_api.http.routers.deps import read_body
from lakelog.ingest_api.schemas import errors as E
from lakelog.ingest_api.schemas import protobuf_values
from lakelog.ingest_api.schemas import state as S
from lakelog.ingest_api.schemas import state_writes as W
from lakelog.ingest_api.schemas.parsed import AVRO, PROTOBUF, SCHEMA_TYPES
from lakelog.ingest_api.schemas.service import SchemaRegistry
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType
from lakelog.ingest_api.http.security_middleware import allowed, authorize

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ACCEPTED_BODY_TYPES = ("application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json",
                       "application/json", "application/octet-stream")
MAX_BODY_BYTES = 2 * S.MAX_SCHEMA_CHARS + 64 * 1024  # a schema (JSON-escaped) and its references
MAX_LIST_ITEMS = 100_000  # answers listing subjects, versions or schemas stop there


def _answer(doc: Any, status: int = 200) -> Response:
    return Response(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode(), status,
                    media_type=CONTENT_TYPE)


class _RegistryRoute(APIRoute):
    """Renders every error of a registry route in the registry's content type."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except LakelogError as e:
                status, code, message = http_error(e)
                return _answer({"error_code": code, "message": message}, status)

        return handle


router = APIRouter(route_class=_RegistryRoute, tags=["schema registry"])


def registry_of(request: Request) -> SchemaRegistry:
    """The app's SchemaRegistry (made on first use)."""
    reg = getattr(request.app.state, "schema_registry", None)
    if reg is None:
        reg = request.app.state.schema_registry = SchemaRegistry(request.app.state.node)
    return reg


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").strip().lower() == "true"


def _opt_flag(request: Request, name: str) -> bool | None:
    v = request.query_params.get(name)
    return None if v is None else v.strip().lower() == "true"


async def _body(request: Request) -> dict[str, Any]:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype and ctype not in ACCEPTED_BODY_TYPES:
        raise UnsupportedMediaTypeError(f"Content-Type {ctype!r} is not one of {', '.join(ACCEPTED_BODY_TYPES)}")
    raw = await read_body(request, MAX_BODY_BYTES)
    try:
        doc = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):
        raise E.SchemaRegistryError("Unrecognized field or malformed JSON in the request body") from None
    if not isinstance(doc, dict):
        raise E.SchemaRegistryError("The request body must be a JSON object")
    return doc


def _schema_text(request: Request, st: S.SchemaRegistryState, stored: S.StoredSchema) -> str:
    """The stored text, or with `?format=serialized` a Protobuf schema's FileDescriptorProto (base64),
    which confluent-kafka's ProtobufDeserializer asks for."""
    if stored.schema_type == PROTOBUF and request.query_params.get("format") == "serialized":
        return protobuf_values.serialized(st.parsed(stored))
    return stored.schema


def _schema_doc(stored: S.StoredSchema, text: str | None = None, **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = dict(extra)
    if stored.schema_type != AVRO:  # Confluent leaves schemaType out for Avro
        doc["schemaType"] = stored.schema_type
    if stored.references:
        doc["references"] = [r.to_dict() for r in stored.references]
    doc["schema"] = stored.schema if text is None else text
    return doc


def _id(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = 0
    return n


def _authorize_id(request: Request, st: S.SchemaRegistryState, schema_id: int) -> None:
    """READ on some subject that uses the id, or DESCRIBE on the cluster (403 otherwise; when security is on)."""
    users = {s for s, versions in st.subjects.items() for v in versions if v.schema_id == schema_id}
    if any(allowed(request, Operation.READ, ResourceType.SUBJECT, s) for s in sorted(users)):
        return
    authorize(request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)


# ------------------------------------------------------------------------------- schemas

@router.get("/schemas/types")
async def schema_types(request: Request):
    return _answer(list(SCHEMA_TYPES))


@router.get("/schemas")
async def list_schemas(request: Request):
    st = registry_of(request).state
    prefix = request.query_params.get("subjectPrefix", "")
    deleted, latest_only = _flag(request, "deleted"), _flag(request, "latestOnly")
    out = []
    for subject in sorted(st.subjects):
        if not subject.startswith(prefix):
            continue
        versions = st.versions(subject, deleted=deleted)
        for v in versions[-1:] if latest_only else versions:
            out.append(_schema_doc(st.schemas[v.schema_id], subject=subject, version=v.version, id=v.schema_id))
            if len(out) >= MAX_LIST_ITEMS:
                return _answer(out)
    return _answer(out)


@router.get("/schemas/ids/{schema_id}")
async def schema_by_id(schema_id: str, request: Request):
    st = registry_of(request).state
    _authorize_id(request, st, _id(schema_id))
    stored = st.schema(_id(schema_id))
    subject = request.query_params.get("subject")
    if subject and not any(v.schema_id == int(schema_id) for v in st.versions(subject, deleted=True)):
        raise E.SchemaNotFoundError(f"Schema {schema_id} not found")
    return _answer(_schema_doc(stored, _schema_text(request, st, stored)))


@router.get("/schemas/ids/{schema_id}/schema")
async def schema_text_by_id(schema_id: str, request: Request):
    st = registry_of(request).state
    _authorize_id(request, st, _id(schema_id))
    return Response(_schema_text(request, st, st.schema(_id(schema_id))).encode(), media_type=CONTENT_TYPE)


def _usages(request: Request, st: S.SchemaRegistryState, schema_id: int, deleted: bool) -> list[tuple[str, int]]:
    _authorize_id(request, st, schema_id)
    st.schema(schema_id)
    return [(s, v.version) for s in sorted(st.subjects) for v in st.versions(s, deleted=deleted)
            if v.schema_id == schema_id]


@router.get("/schemas/ids/{schema_id}/subjects")
async def schema_subjects(schema_id: str, request: Request):
    usages = _usages(request, registry_of(request).state, _id(schema_id), _flag(request, "deleted"))
    return _answer(sorted({s for s, _ in usages}))


@router.get("/schemas/ids/{schema_id}/versions")
async def schema_versions(schema_id: str, request: Request):
    usages = _usages(request, registry_of(request).state, _id(schema_id), _flag(request, "deleted"))
    return _answer([{"subject": s, "version": v} for s, v in usages])


# ------------------------------------------------------------------------------- subjects

@router.get("/subjects")
async def list_subjects(request: Request):
    st = registry_of(request).state
    prefix = request.query_params.get("subjectPrefix", "")
    deleted = _flag(request, "deleted") or _flag(request, "deletedOnly")
    only_deleted = _flag(request, "deletedOnly")
    out = [s for s in sorted(st.subjects) if s.startswith(prefix) and st.versions(s, deleted=deleted)
           and (not only_deleted or not st.versions(s))]
    return _answer(out[:MAX_LIST_ITEMS])


@router.get("/subjects/{subject:path}/versions")
async def list_versions(subject: str, request: Request):
    st = registry_of(request).state
    versions = st.versions(subject, deleted=_flag(request, "deleted"))
    if not versions:
        raise E.SubjectNotFoundError(f"Subject '{subject}' not found.")
    return _answer([v.version for v in versions])


@router.get("/subjects/{subject:path}/versions/{version}")
async def get_version(subject: str, version: str, request: Request):
    st = registry_of(request).state
    S.parse_version(version)
    v = st.version(subject, version, deleted=_flag(request, "deleted"))
    stored = st.schemas[v.schema_id]
    return _answer(_schema_doc(stored, _schema_text(request, st, stored), subject=subject, version=v.version,
                               id=v.schema_id))


@router.get("/subjects/{subject:path}/versions/{version}/schema")
async def get_version_schema(subject: str, version: str, request: Request):
    st = registry_of(request).state
    S.parse_version(version)
    v = st.version(subject, version, deleted=_flag(request, "deleted"))
    return Response(_schema_text(request, st, st.schemas[v.schema_id]).encode(), media_type=CONTENT_TYPE)


@router.get("/subjects/{subject:path}/versions/{version}/referencedby")
async def referenced_by(subject: str, version: str, request: Request):
    st = registry_of(request).state
    S.parse_version(version)
    v = st.version(subject, version, deleted=True)
    return _answer(st.referenced_by(subject, v.version))


@router.post("/subjects/{subject:path}/versions")
async def register(subject: str, request: Request):
    body = await _body(request)
    S.check_subject_name(subject)
    args = {"subject": subject, "schema": body.get("schema"), "schemaType": body.get("schemaType") or AVRO,
            "references": body.get("references") or [], "normalize": _opt_flag(request, "normalize")}
    if body.get("id") is not None:
        args["id"] = body["id"]
    if body.get("version") is not None:
        args["version"] = body["version"]
    reg = registry_of(request)
    _, parsed, _ = W.prepare(reg.state, subject, args, normalize=args["normalize"])  # refuse bad input here
    if parsed.schema_type == PROTOBUF and "confluent/" not in parsed.canonical:
        # what protoc refuses (an undefined type, ...) too, as Confluent's registry does; `confluent/` imports
        # (Confluent's own option files) are not files protoc has here
        await asyncio.to_thread(protobuf_values.descriptor_set, parsed)
    result = await reg.write("schema_register", args)
    st = reg.state
    stored = st.schemas.get(result["id"])
    doc = {"id": result["id"]}
    if stored is not None:
        doc = _schema_doc(stored, id=result["id"], version=result["version"], subject=subject)
    return _answer(doc)


@router.post("/subjects/{subject:path}")
async def lookup(subject: str, request: Request):
    body = await _body(request)
    st = registry_of(request).state
    deleted = _flag(request, "deleted")
    if not st.versions(subject, deleted=deleted):
        raise E.SubjectNotFoundError(f"Subject '{subject}' not found.")
    stored, parsed, _ = W.prepare(st, subject, body, normalize=_opt_flag(request, "normalize"))
    found = W.find_version(st, subject, stored, parsed, deleted=deleted)
    if found is None:
        raise E.SchemaNotFoundError("Schema not found")
    return _answer(_schema_doc(st.schemas[found.schema_id], subject=subject, version=found.version,
                               id=found.schema_id))


@router.delete("/subjects/{subject:path}/versions/{version}")
async def delete_version(subject: str, version: str, request: Request):
    S.check_subject_name(subject)
    S.parse_version(version)
    result = await registry_of(request).write("schema_delete_version", {
        "subject": subject, "version": version, "permanent": _flag(request, "permanent")})
    return _answer(result["version"])


# after delete_version: a subject may hold "/" (Protobuf imports are subjects named by their file path), so
# "/subjects/{subject:path}" would also match ".../versions/{version}"
@router.delete("/subjects/{subject:path}")
async def delete_subject(subject: str, request: Request):
    S.check_subject_name(subject)
    result = await registry_of(request).write("schema_delete_subject",
                                            {"subject": subject, "permanent": _flag(request, "permanent")})
    return _answer(result["versions"])


# ------------------------------------------------------------------------------- compatibility

async def _compatibility(subject: str, version: str | None, request: Request) -> Response:
    body = await _body(request)
    st = registry_of(request).state
    _, parsed, _ = W.prepare(st, subject, body, normalize=_opt_flag(request, "normalize"))
    level = st.compatibility_level(subject)
    if version is None:
        against = st.versions(subject)
    else:
        S.parse_version(version)
        against = [st.version(subject, version)]
        level = level.removesuffix("_TRANSITIVE")  # one version: the level's direction only
    errors = W.check_compatibility(st, subject, parsed, against, level)
    doc: dict[str, Any] = {"is_compatible": not errors}
    if _flag(request, "verbose"):
        doc["messages"] = errors
    return _answer(doc)


@router.post("/compatibility/subjects/{subject:path}/versions/{version}")
async def compatibility_version(subject: str, version: str, request: Request):
    return await _compatibility(subject, version, request)


@router.post("/compatibility/subjects/{subject:path}/versions")
async def compatibility_all(subject: str, request: Request):
    return await _compatibility(subject, None, request)


# ------------------------------------------------------------------------------- config and mode

@router.get("/config")
async def get_global_config(request: Request):
    st = registry_of(request).state
    doc = {"compatibilityLevel": st.compatibility_level("")}
    if st.configs.get("", {}).get("normalize") is not None:
        doc["normalize"] = st.configs[""]["normalize"]
    return _answer(doc)


@router.put("/config")
async def put_global_config(request: Request):
    body = await _body(request)
    result = await registry_of(request).write("schema_config", {"subject": "", "compatibility": body.get("compatibility"),
                                                              "normalize": body.get("normalize")})
    return _answer(result)


@router.delete("/config")
async def delete_global_config(request: Request):
    return _answer(await registry_of(request).write("schema_config", {"subject": "", "delete": True}))


@router.get("/config/{subject:path}")
async def get_subject_config(subject: str, request: Request):
    st = registry_of(request).state
    S.check_subject_name(subject)
    own = st.configs.get(subject)
    if own is None or "compatibilityLevel" not in own:
        if not _flag(request, "defaultToGlobal"):
            raise E.SubjectCompatibilityNotConfiguredError(
                f"Subject '{subject}' does not have subject-level compatibility configured")
    doc = {"compatibilityLevel": st.compatibility_level(subject)}
    if own and own.get("normalize") is not None:
        doc["normalize"] = own["normalize"]
    return _answer(doc)


@router.put("/config/{subject:path}")
async def put_subject_config(subject: str, request: Request):
    body = await _body(request)
    S.check_subject_name(subject)
    return _answer(await registry_of(request).write("schema_config", {
        "subject": subject, "compatibility": body.get("compatibility"), "normalize": body.get("normalize")}))


@router.delete("/config/{subject:path}")
async def delete_subject_config(subject: str, request: Request):
    S.check_subject_name(subject)
    return _answer(await registry_of(request).write("schema_config", {"subject": subject, "delete": True}))


@router.get("/mode")
async def get_global_mode(request: Request):
    return _answer({"mode": registry_of(request).state.mode("")})


@router.put("/mode")
async def put_global_mode(request: Request):
    body = await _body(request)
    return _answer(await registry_of(request).write("schema_mode", {"subject": "", "mode": body.get("mode"),
                                                                  "force": _flag(request, "force")}))


@router.delete("/mode")
async def delete_global_mode(request: Request):
    return _answer(await registry_of(request).write("schema_mode", {"subject": "", "delete": True}))


@router.get("/mode/{subject:path}")
async def get_subject_mode(subject: str, request: Request):
    st = registry_of(request).state
    S.check_subject_name(subject)
    if subject not in st.modes and not _flag(request, "defaultToGlobal"):
        raise E.SubjectModeNotConfiguredError(f"Subject '{subject}' does not have subject-level mode configured")
    return _answer({"mode": st.mode(subject)})


@router.put("/mode/{subject:path}")
async def put_subject_mode(subject: str, request: Request):
    body = await _body(request)
    S.check_subject_name(subject)
    return _answer(await registry_of(request).write("schema_mode", {"subject": subject, "mode": body.get("mode"),
                                                                  "force": _flag(request, "force")}))


@router.delete("/mode/{subject:path}")
async def delete_subject_mode(subject: str, request: Request):
    S.check_subject_name(subject)
    return _answer(await registry_of(request).write("schema_mode", {"subject": subject, "delete": True}))
