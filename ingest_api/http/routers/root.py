"""`GET /` and `POST /` as Confluent REST Proxy's RootResource: an empty JSON object, a liveness
probe for API clients (`Accept: application/json` or `application/vnd.kafka...`).

Room for the web console: a browser's request (`Accept: text/html` preferred over JSON) is handed
to `HTML_ROOT` when one is registered (`app.state.html_root`, an ASGI-callable or a function of the
request returning a Response); until then it gets the same JSON.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.records.formats import V2
from lakelog.ingest_api.http.routers.deps import read_body

router = APIRouter(tags=["root"])

#: Largest body `POST /` reads.
MAX_BODY_BYTES = 64 * 1024


def wants_html(accept: str | None) -> bool:
    """True when the client prefers HTML to JSON (a browser), by order and q-values of Accept."""
    if not accept:
        return False
    best: dict[str, float] = {}
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        q = 1.0
        for f in fields[1:]:
            if f.startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        best[fields[0].lower()] = max(q, best.get(fields[0].lower(), 0.0))
    html = best.get("text/html", 0.0)
    jsonq = max((q for t, q in best.items() if "json" in t), default=0.0)
    return html > 0 and html > jsonq


@router.get("/", summary="Root: an empty JSON object (liveness for REST Proxy clients)")
async def get_root(request: Request):
    html_root = getattr(request.app.state, "html_root", None)
    if html_root is not None and wants_html(request.headers.get("accept")):
        return await html_root(request)
    return JSONResponse({}, media_type=V2)


@router.post("/", summary="Root: accepts a JSON object of strings and answers an empty one")
async def post_root(request: Request):
    body = await read_body(request, MAX_BODY_BYTES)
    if body.strip():
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise InvalidRequestError("request body is not valid JSON") from None
        if not isinstance(doc, dict) or not all(isinstance(v, str) for v in doc.values()):
            raise InvalidRequestError("request body must be a JSON object of strings")
    return JSONResponse({}, media_type=V2)
