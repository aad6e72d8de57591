"""How errors look under `/v3`: Confluent REST Proxy v3 answers them as `application/json` with the
plain HTTP status as `error_code` where the API has no finer code.

Confluent v3 (api/v3/openapi.yaml, `Error`): an unknown cluster, topic, partition, broker, group,
consumer or config is `404` / `error_code: 404`; a body that is not JSON or has a field of the wrong
type is `400` / `400`; a body that parses but breaks a constraint is `422` / `422`; a too-large body
`413` / `413`; a wrong Content-Type `415` / `415`. Kafka-specific codes stay as they are (40002 topic
exists or invalid, 40101, 40301, 42901, 5xxxx). The v2 paths keep the v2 convention (5-digit codes,
`application/vnd.kafka.v2+json`).
"""

from __future__ import annotations

from typing import Any, Iterable

from lakelog.ingest_api.formats import JSON, V2

#: pydantic error types that mean "the value has the wrong JSON type" (Jackson's 400 in Confluent).
_TYPE_ERRORS = ("json_invalid", "_type", "_parsing", "model_attributes_type", "dict_type", "list_type")
#: v2-style codes replaced by the plain status under /v3.
_GENERIC = {40401, 40402, 40403, 40404, 40405, 42201, 41301, 41501, 40601}


def is_v3(path: str) -> bool:
    return path == "/v3" or path.startswith("/v3/")


def shape(path: str, status: int, error_code: int) -> tuple[int, int, str]:
    """(status, error_code, media type) of an error answer for a request to `path`."""
    if not is_v3(path):
        return status, error_code, V2
    if error_code in _GENERIC or status == 404:
        return status, status, JSON
    return status, error_code, JSON


def validation_status(errors: Iterable[dict[str, Any]]) -> int:
    """404 when a path or query parameter does not convert (JAX-RS answers no such resource); 400
    when the body is not JSON or a field has the wrong type; else 422 (a broken constraint)."""
    errors = list(errors)
    if any(tuple(e.get("loc", ()))[:1] in (("path",), ("query",)) for e in errors):
        return 404
    for e in errors:
        kind = str(e.get("type", ""))
        if kind == "json_invalid" or any(kind.endswith(t) for t in _TYPE_ERRORS if t.startswith("_")) \
                or kind in _TYPE_ERRORS:
            return 400
    return 422
