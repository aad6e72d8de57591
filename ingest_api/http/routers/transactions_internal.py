"""The transaction coordinator's node-to-node calls (`/internal/transactions/...`).

Thin: the logic is in ingest_api/transactions/service.py (`TransactionService` as
`node.transactions`). Every request must carry the cluster signature (`verified_request`).

  POST /internal/transactions/markers  {"markers": [...]}: append COMMIT / ABORT markers to the
                                       partitions this node leads; one result per marker.
  POST /internal/transactions/{op}     run a coordinator operation (verify, init, add_partitions, ...)
                                       here; coordinator errors come back in the `error` field.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.http.routers.internal import VerifiedRequest, verified_request

router = APIRouter(prefix="/internal", tags=["internal"], include_in_schema=False)


@router.post("/transactions/{op}", summary="Run a transaction coordinator operation on this node")
async def transaction_op(op: str, request: Request, verified: VerifiedRequest = Depends(verified_request)):
    node = request.app.state.node
    node.check_ready()
    try:
        args = json.loads(verified.body or b"{}")
    except ValueError:
        raise InvalidRequestError("body is not JSON") from None
    if not isinstance(args, dict):
        raise InvalidRequestError("body must be a JSON object")
    return JSONResponse(await node.transactions.handle(op, args))
