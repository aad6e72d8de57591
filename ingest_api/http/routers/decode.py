"""`POST /stats/decode`: keys and values in Confluent's wire format decoded by the node's Schema Registry,
for the console's message browser.

The browser sends the bytes it fetched (base64, at most MAX_ITEMS of them); each answer is `null`
(not in the wire format: no magic byte 0 and schema id), or `{"schema_id", "schema_type",
"subjects": [{"subject", "version"}], "value"}` (Avro in Avro's JSON encoding, JSON Schema values as
JSON, Protobuf in Protobuf's JSON mapping with the full name of the message the wire format's
message indexes name, as `message`), or `{"schema_id", "error"}` (an unknown id, a payload that
does not match its schema, or a schema the principal may not read). Reading a schema needs what `GET
/schemas/ids/{id}` needs: READ on a subject that uses it, or DESCRIBE on the cluster.
"""

from __future__ import annotations

import asyncio
import base64
import binascii

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.http.routers.deps import get_node
from lakelog.ingest_api.schemas import errors as E
from lakelog.ingest_api.schemas import protobuf_values, wire
from lakelog.ingest_api.schemas.codec import decode_value
from lakelog.ingest_api.schemas.parsed import PROTOBUF
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType
from lakelog.ingest_api.security.errors import AuthorizationFailedError
from lakelog.ingest_api.http.security_middleware import allowed

router = APIRouter(prefix="/stats", tags=["console"])
MAX_ITEMS = 400  # a page of 100 records: keys and values, with room to spare


class DecodeRequest(BaseModel):
    data: list[str | None] = Field(max_length=MAX_ITEMS, description="base64 keys or values; null for none")


def _decode_one(request: Request, st, text: str | None, may: dict[int, bool]) -> dict | None:
    if text is None:
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError("data holds a value that is not base64") from None
    if len(raw) < wire.HEADER.size or raw[0] != wire.MAGIC:
        return None
    try:
        framed = wire.decode(raw)
    except wire.WireFormatError:
        return None
    sid = framed.schema_id
    subjects = [{"subject": s, "version": v.version} for s in sorted(st.subjects) for v in st.versions(s)
                if v.schema_id == sid]
    if sid not in may:
        may[sid] = (any(allowed(request, Operation.READ, ResourceType.SUBJECT, s["subject"]) for s in subjects)
                    or allowed(request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME))
    if not may[sid]:
        return {"schema_id": sid, "error": f"not authorized to read schema {sid}"}
    try:
        stored = st.schema(sid)
    except E.SchemaRegistryError:
        return {"schema_id": sid, "error": f"schema {sid} is not in the registry"}
    extra: dict = {}
    try:
        if stored.schema_type == PROTOBUF:  # message indexes follow the schema id: which message it is
            try:
                framed = wire.decode(raw, protobuf=True)
            except wire.WireFormatError as e:
                return {"schema_id": sid, "schema_type": PROTOBUF, "subjects": subjects, "error": str(e)}
            parsed = st.parsed(stored)
            extra["message"] = protobuf_values.message_class(parsed, framed.message_indexes).DESCRIPTOR.full_name
            value = decode_value(parsed, framed.payload, message_indexes=framed.message_indexes)
        else:
            value = decode_value(st.parsed(stored), framed.payload)
    except (E.SchemaRegistryError, InvalidRequestError) as e:
        return {"schema_id": sid, "schema_type": stored.schema_type, "subjects": subjects, "error": str(e)}
    except IndexError as e:  # message indexes naming no message of the schema
        return {"schema_id": sid, "schema_type": stored.schema_type, "subjects": subjects,
                "error": f"the value names no message of schema {sid}: {e}"}
    return {"schema_id": sid, "schema_type": stored.schema_type, "subjects": subjects, **extra, "value": value}


def may_decode_something(request: Request) -> None:
    """A principal that may read nothing a decode could show (no subject, no topic, no cluster DESCRIBE)
    is refused before its body is read, as every other endpoint refuses it; the per-schema checks follow."""
    if allowed(request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return
    image = get_node(request).image
    if any(allowed(request, Operation.READ, ResourceType.SUBJECT, s) for s in image.schemas.subjects):
        return
    if any(allowed(request, Operation.READ, ResourceType.TOPIC, t) for t in image.topics):
        return
    raise AuthorizationFailedError("not authorized to read any topic or schema subject")


@router.post("/decode", summary="Decode keys or values in Confluent's wire format by the Schema Registry",
             dependencies=[Depends(may_decode_something)])
async def decode(body: DecodeRequest, request: Request):
    node = get_node(request)
    st = node.image.schemas
    may: dict[int, bool] = {}
    results = await asyncio.to_thread(lambda: [_decode_one(request, st, t, may) for t in body.data])
    return JSONResponse({"results": results})
