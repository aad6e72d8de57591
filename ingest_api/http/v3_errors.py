"""How errors look under `/v3`: Confluent REST Proxy v3 answers them as `application/json` with the
plain HTTP status as `error_code` where the API has no finer code.

The error table (`ingest_api/error_table.py`) gives every error its v2 answer; this module only
translates it for the v3 paths, as Confluent v3 (api/v3/openapi.yaml, `Error`) answers:

1. An unknown cluster, topic, partition, broker, group, consumer, config (any 404) is `404` /
   `error_code: 404`; a path or query parameter that does not convert is 404 too (JAX-RS: no such
   resource).
2. A body that is not JSON or has a field of the wrong type is `400` / `400` (Jackson); one that
   parses but breaks a constraint `422` / `422`; a too-large body `413` / `413`; a wrong
   Content-Type `415` / `415`; an unacceptable Accept `406` / `406`.
3. `V3_ANSWERS_AS`: what Confluent answers differently from our v2 row — a topic that exists, a
   replication factor above the live brokers, a partition count that does not grow and a refused
   broker config change are `400` / `40002`.
4. Every other code is kept (40101, 40301, 42901, 5xxxx, ...).
5. An error of the v3 API only answers with its row in `V3_ONLY_TABLE`: the schema-based produce's
   42205 / 42207 (`ingest_api/schemas/rest_v3.py`).

The v2 paths keep the v2 convention (5-digit codes, `application/vnd.kafka.v2+json`).
"""

from __future__ import annotations

from typing import Any, Iterable

from lakelog.ingest_api.cluster.errors import InvalidPartitionsError, InvalidReplicationFactorError
from lakelog.ingest_api.error_table import V3_ONLY_TABLE, row_of
from lakelog.ingest_api.errors import (
    InvalidRequestError,
    InvalidTopicError,
    NotAcceptableError,
    NotFoundError,
    RequestTooLargeError,
    TopicExistsError,
    UnsupportedMediaTypeError,
)
from lakelog.ingest_api.records.formats import JSON, V2


class V3BadRequestError(InvalidRequestError):
    """A v3 body that is not JSON, or a field of the wrong type (Confluent: 400 / 400)."""


class V3StaticConfigError(InvalidRequestError):
    """A change to a static broker config (Confluent / Kafka: 400 / 40002)."""


#: Rule 3: class -> the class whose error-table row it answers with under /v3 (by MRO). Confluent's
#: 40002 is our InvalidTopicError's row.
V3_ANSWERS_AS: dict[type[BaseException], type[BaseException]] = {
    TopicExistsError: InvalidTopicError,
    InvalidReplicationFactorError: InvalidTopicError,
    InvalidPartitionsError: InvalidTopicError,  # Confluent: "Topic already has N partitions." 40002
    V3StaticConfigError: InvalidTopicError,
}
#: Rule 2: classes answered with the plain status.
_PLAIN = (InvalidRequestError, RequestTooLargeError, UnsupportedMediaTypeError, NotAcceptableError, NotFoundError)

#: pydantic error types that mean "the value has the wrong JSON type" (Jackson's 400 in Confluent).
_TYPE_ERROR_SUFFIXES = ("_type", "_parsing")


def is_v3(path: str) -> bool:
    return path == "/v3" or path.startswith("/v3/")


def shape(path: str, exc: BaseException, status: int, error_code: int) -> tuple[int, int, str]:
    """(status, error_code, media type) of the answer to `exc` for a request to `path`, given its
    error-table answer (status, error_code)."""
    if not is_v3(path):
        return status, error_code, V2
    for cls in type(exc).__mro__:  # rule 5
        own = V3_ONLY_TABLE.get(cls)
        if own is not None:
            return own.status, own.error_code, JSON
    for cls in type(exc).__mro__:
        if cls in V3_ANSWERS_AS:
            row = row_of(V3_ANSWERS_AS[cls])
            assert row is not None
            return row.status, row.error_code, JSON
    if isinstance(exc, V3BadRequestError):
        return 400, 400, JSON
    if status == 404 or isinstance(exc, _PLAIN):
        return status, status, JSON
    return status, error_code, JSON


def validation_error(errors: Iterable[dict[str, Any]], message: str) -> Exception:
    """The exception a FastAPI validation failure on a v3 path answers as (rules 1 and 2)."""
    errors = list(errors)
    if any(tuple(e.get("loc", ()))[:1] in (("path",), ("query",)) for e in errors):
        return NotFoundError(message)
    for e in errors:
        kind = str(e.get("type", ""))
        if kind == "json_invalid" or kind.endswith(_TYPE_ERROR_SUFFIXES):
            return V3BadRequestError(message)
    return InvalidRequestError(message)
