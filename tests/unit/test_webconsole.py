"""The console's file server (ASGI, no process): content negotiation at `/`, the files, the CSP."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from types import SimpleNamespace

import pytest

from lakelog.ingest_api.error_table import code_of
from lakelog.ingest_api.errors import NotFoundError
from lakelog.ingest_api.http.webconsole import MAX_FILES, ConsoleMiddleware, load_files

INDEX = b'<html><script type="importmap">{"imports": {}}</script><script type="module" src="/console/app.js"></script></html>'


def _tree(tmp_path, *, built: bool = True):
    (tmp_path / "index.html").write_bytes(INDEX)
    (tmp_path / "app.js").write_text("export const x = 1;\n")
    (tmp_path / "style.css").write_text("body{}")
    if built:
        (tmp_path / "vendor").mkdir()
        (tmp_path / "vendor" / "preact.mjs").write_text("export {};")
        (tmp_path / "vendor" / ".installed").write_text("")
    return tmp_path


def _call(mw, method: str, path: str, accept: str | None = None):
    """(status, headers, body, whether the inner app was called)."""
    sent, inner = [], []

    async def app(scope, receive, send):
        inner.append(scope["path"])
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b"inner"})

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    mw.app = app
    headers = [(b"accept", accept.encode())] if accept is not None else []
    asyncio.run(mw(dict(type="http", method=method, path=path, headers=headers), receive, send))
    start = sent[0]
    return start["status"], dict(start["headers"]), sent[1]["body"], bool(inner)


def test_root_answers_browsers_and_leaves_api_clients_to_the_application(tmp_path):
    mw = ConsoleMiddleware(None, directory=_tree(tmp_path))
    status, headers, body, inner = _call(mw, "GET", "/", "text/html,application/xhtml+xml,*/*;q=0.8")
    assert (status, body, inner) == (200, INDEX, False)
    assert headers[b"content-type"] == b"text/html; charset=utf-8"
    digest = base64.b64encode(hashlib.sha256(b'{"imports": {}}').digest()).decode()
    assert f"script-src 'self' 'sha256-{digest}'".encode() in headers[b"content-security-policy"]
    for accept in ("application/json", "application/vnd.kafka.v2+json", None, "*/*",
                   "text/html;q=0.5, application/json"):
        assert _call(mw, "GET", "/", accept)[3] is True, accept
    assert _call(mw, "POST", "/", "text/html")[3] is True
    assert _call(mw, "GET", "/topics", "text/html")[3] is True  # only / and /console/ are the console's


def test_files_under_console_and_nothing_else(tmp_path):
    mw = ConsoleMiddleware(None, directory=_tree(tmp_path))
    status, headers, body, _ = _call(mw, "GET", "/console/app.js")
    assert status == 200 and body == b"export const x = 1;\n"
    assert headers[b"content-type"] == b"text/javascript; charset=utf-8"
    assert _call(mw, "GET", "/console/style.css")[1][b"content-type"] == b"text/css; charset=utf-8"
    assert _call(mw, "HEAD", "/console/app.js")[2] == b""
    assert _call(mw, "GET", "/console/")[2] == INDEX
    for path in ("/console/nope.js", "/console/../index.html", "/console/vendor/.installed", "/console/vendor"):
        status, _, body, inner = _call(mw, "GET", path)
        assert status == 404 and not inner and json.loads(body)["error_code"] == code_of(NotFoundError), path


def test_session_says_whether_to_ask_for_credentials(tmp_path):
    security = SimpleNamespace(authentication=True, basic=True, apikey=False, node=SimpleNamespace(cluster_id="c1"))
    mw = ConsoleMiddleware(None, security=security, directory=_tree(tmp_path),
                           downloads={"max_records": 7, "max_bytes": 1 << 20})
    doc = json.loads(_call(mw, "GET", "/console/session.json")[2])
    assert doc == {"authentication": True, "basic": True, "apikey": False, "cluster_id": "c1",
                   "download_max_records": 7, "download_max_bytes": 1 << 20}


def test_an_unbuilt_console_says_how_to_build_it(tmp_path):
    mw = ConsoleMiddleware(None, directory=_tree(tmp_path, built=False))
    status, _, body, _ = _call(mw, "GET", "/", "text/html")
    assert status == 503 and b"make console" in body


def test_load_files_is_bounded(tmp_path):
    for i in range(MAX_FILES + 1):
        (tmp_path / f"f{i}.js").write_text("x")
    with pytest.raises(ValueError, match="exceed"):
        load_files(tmp_path)
