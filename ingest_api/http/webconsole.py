"""Serves the web console: `GET /` for a browser (`Accept: text/html`) and its files under `/console/`.

A plain ASGI middleware in front of the security middleware: the console's files are public
(they hold no data; the page asks the HTTP API for everything, with the user's credentials, so
the same authentication and ACLs apply to every action). `GET /` from a client that does not
prefer HTML to JSON (`routers/root.wants_html`: an API client) passes through to the application,
whose root router answers it.

The files are read once at start-up from `ingest_api/console/` (the console's own code) and
`ingest_api/console/vendor/` (Preact, htm and uPlot, copied there from npm by `make console`),
at most `MAX_FILES` files and `MAX_TOTAL_BYTES` bytes. `/console/session.json` tells the page
whether the node asks for credentials (Basic, API keys), the cluster id and the bounds of a download. Nothing is fetched from a CDN. The page's
only inline script, the import map, is allowed by its hash in the Content-Security-Policy.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import mimetypes
import re
from pathlib import Path

from lakelog.ingest_api.error_table import http_error
from lakelog.ingest_api.errors import NotFoundError
from lakelog.ingest_api.http.routers.root import wants_html

log = logging.getLogger("lakelog.console")

STATIC_DIR = Path(__file__).parents[1] / "console"  # ingest_api/console/: the browser side
PREFIX = "/console/"
SESSION_PATH = "/console/session.json"
MAX_FILES = 200
MAX_TOTAL_BYTES = 8 << 20
_TYPES = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".html": "text/html",
          ".png": "image/png", ".svg": "image/svg+xml"}
_INLINE_SCRIPT = re.compile(rb"<script type=\"importmap\">(.*?)</script>", re.S)


def _content_type(name: str) -> str:
    ext = Path(name).suffix
    ctype = _TYPES.get(ext) or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return ctype + ("; charset=utf-8" if ctype.startswith("text/") else "")


def load_files(directory: Path = STATIC_DIR) -> dict[str, tuple[bytes, str]]:
    """{path under /console/: (bytes, content type)}; dot-files are left out."""
    files: dict[str, tuple[bytes, str]] = {}
    total = 0
    if not directory.is_dir():
        return files
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory).as_posix()
        if not path.is_file() or any(part.startswith(".") for part in rel.split("/")):
            continue
        data = path.read_bytes()
        total += len(data)
        if len(files) >= MAX_FILES or total > MAX_TOTAL_BYTES:
            raise ValueError(f"the console's files exceed {MAX_FILES} files or {MAX_TOTAL_BYTES} bytes")
        files[rel] = (data, _content_type(rel))
    return files


def _csp(index: bytes) -> str:
    hashes = " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(m).digest()).decode()}'"
                      for m in _INLINE_SCRIPT.findall(index))
    return (f"default-src 'self'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'")


class ConsoleMiddleware:
    def __init__(self, app, security=None, directory: Path = STATIC_DIR, downloads: dict | None = None) -> None:
        self.app = app
        self.security = security  # the SecurityContext: whether the page must ask for credentials
        #: Bounds of one download of a range of records (console.download.max.records / .max.bytes).
        self.downloads = downloads or {"max_records": 100_000, "max_bytes": 64 << 20}
        self.files = load_files(directory)
        index = self.files.get("index.html", (b"", ""))[0]
        self.csp = _csp(index)
        self.built = "index.html" in self.files and "vendor/preact.mjs" in self.files
        if not self.built:
            log.warning("the web console's files are not built (run `make console`); / answers 503 to browsers")

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path == "/":
            accept = next((v for k, v in scope["headers"] if k == b"accept"), b"")
            if not wants_html(accept.decode("latin-1")):  # an API client: routers/root.py answers
                await self.app(scope, receive, send)
                return
            await self._index(scope, send)
        elif path == SESSION_PATH:
            await self._send(scope, send, 200, json.dumps(self.session()).encode(), "application/json")
        elif path in ("/console", PREFIX):
            await self._index(scope, send)
        elif path.startswith(PREFIX):
            found = self.files.get(path[len(PREFIX):])
            if found is None:
                status, code, message = http_error(NotFoundError(f"{path} not found"))
                await self._send(scope, send, status, json.dumps({"error_code": code, "message": message}).encode(),
                                 "application/json")
            else:
                await self._send(scope, send, 200, *found)
        else:
            await self.app(scope, receive, send)

    def session(self) -> dict:
        """What the page needs before its first API call (no secret: the same for everyone)."""
        sec = self.security
        return {"authentication": bool(sec and sec.authentication), "basic": bool(sec is None or sec.basic),
                "apikey": bool(sec is None or sec.apikey),
                "cluster_id": sec.node.cluster_id if sec is not None else "",
                "download_max_records": self.downloads["max_records"],
                "download_max_bytes": self.downloads["max_bytes"]}

    async def _index(self, scope, send) -> None:
        if not self.built:
            await self._send(scope, send, 503, b"The web console is not built on this node: run `make console`.\n",
                             "text/plain; charset=utf-8")
            return
        await self._send(scope, send, 200, self.files["index.html"][0], "text/html; charset=utf-8",
                         [(b"content-security-policy", self.csp.encode())])

    @staticmethod
    async def _send(scope, send, status: int, body: bytes, ctype: str, extra: list | None = None) -> None:
        headers = [(b"content-type", ctype.encode()), (b"content-length", str(len(body)).encode()),
                   (b"cache-control", b"no-cache"), (b"x-content-type-options", b"nosniff"), *(extra or [])]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})
