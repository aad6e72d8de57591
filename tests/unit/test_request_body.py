"""ingest_api/http/request_body.py: a body read into one buffer of its declared length, from the receive events."""

from __future__ import annotations

import asyncio

import pytest
from starlette.requests import ClientDisconnect, Request

from lakelog.ingest_api.errors import InvalidRequestError, RequestTooLargeError
from lakelog.ingest_api.http.request_body import read_body_buffer


def _request(events: list[dict], length: int | None) -> tuple[Request, list[dict]]:
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    pending = list(events)
    taken: list[dict] = []

    async def receive() -> dict:
        message = pending.pop(0) if pending else {"type": "http.disconnect"}
        taken.append(message)
        return message

    return Request({"type": "http", "method": "POST", "path": "/", "headers": headers}, receive), taken


def _read(request: Request, limit: int = 1 << 20):
    return asyncio.run(read_body_buffer(request, limit))


def test_a_body_in_one_event_is_returned_as_that_events_bytes():
    body = b"x" * 5000
    request, _ = _request([{"type": "http.request", "body": body, "more_body": False}], len(body))
    got = _read(request)
    assert got is body  # not copied
    assert asyncio.run(request.body()) is body  # Starlette's cache answers a later request.body()


def test_a_body_in_several_events_fills_one_buffer_of_the_declared_length():
    pieces = [bytes([i]) * (1000 + i) for i in range(7)]
    events = [{"type": "http.request", "body": p, "more_body": i < len(pieces) - 1} for i, p in enumerate(pieces)]
    request, _ = _request(events, sum(map(len, pieces)))
    got = _read(request)
    assert isinstance(got, bytearray) and got == b"".join(pieces)


def test_a_declared_length_over_the_limit_is_refused_before_anything_is_read():
    request, taken = _request([{"type": "http.request", "body": b"x" * 10, "more_body": False}], 2048)
    with pytest.raises(RequestTooLargeError, match="2048 bytes exceeds max.request.bytes=1024"):
        _read(request, 1024)
    assert taken == []


def test_a_client_that_goes_away_mid_body_is_a_disconnect():
    request, _ = _request([{"type": "http.request", "body": b"x" * 100, "more_body": True}], 300)
    with pytest.raises(ClientDisconnect):
        _read(request)  # the next event is http.disconnect


def test_a_body_shorter_or_longer_than_declared_is_refused():
    request, _ = _request([{"type": "http.request", "body": b"x" * 100, "more_body": False}], 300)
    with pytest.raises(ClientDisconnect):
        _read(request)
    events = [{"type": "http.request", "body": b"x" * 200, "more_body": True},
              {"type": "http.request", "body": b"y" * 200, "more_body": False}]
    request, _ = _request(events, 300)
    with pytest.raises(InvalidRequestError, match="longer than its Content-Length 300"):
        _read(request)


def test_a_chunked_body_is_joined_and_refused_as_soon_as_it_passes_the_limit():
    events = [{"type": "http.request", "body": b"a" * 600, "more_body": True},
              {"type": "http.request", "body": b"b" * 600, "more_body": True},
              {"type": "http.request", "body": b"c" * 600, "more_body": False}]
    request, _ = _request(list(events), None)
    assert _read(request, 4096) == b"a" * 600 + b"b" * 600 + b"c" * 600
    request, taken = _request(list(events), None)
    with pytest.raises(RequestTooLargeError, match="exceeds max.request.bytes=1024"):
        _read(request, 1024)
    assert len(taken) == 2  # refused at the event that passed the limit, the rest left unread
