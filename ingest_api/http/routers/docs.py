"""`/docs`: Swagger UI over `/openapi.json`, served from the node itself (no CDN, works offline).

The Swagger UI files come from the `swagger-ui-bundle` package (its vendored dist folder); only the
three files the page loads are served, from `/docs/assets/{name}`.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse
from starlette.exceptions import HTTPException

router = APIRouter(include_in_schema=False)

ASSETS = {"swagger-ui-bundle.js": "text/javascript", "swagger-ui.css": "text/css",
          "favicon-32x32.png": "image/png"}


def _dist() -> Path:
    import swagger_ui_bundle

    return Path(swagger_ui_bundle.swagger_ui_path)


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(openapi_url=f"{root}/openapi.json", title=f"{request.app.title} - Swagger UI",
                               swagger_js_url=f"{root}/docs/assets/swagger-ui-bundle.js",
                               swagger_css_url=f"{root}/docs/assets/swagger-ui.css",
                               swagger_favicon_url=f"{root}/docs/assets/favicon-32x32.png")


@router.get("/docs/assets/{name}")
async def swagger_asset(name: str) -> FileResponse:
    media_type = ASSETS.get(name)
    if media_type is None:
        raise HTTPException(404, f"no such documentation asset: {name}")  # answered as an unknown path is
    return FileResponse(_dist() / name, media_type=media_type,
                        headers={"Cache-Control": "public, max-age=86400"})
