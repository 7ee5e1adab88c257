"""The API reference, ``GET /docs``: Swagger UI over ``/openapi.json``, offline.

FastAPI writes OpenAPI 3.1, which Swagger UI renders from version 5 on (4.x refuses it:
"Unable to render this definition"). Its assets come from the installed
``fastapi-offline`` package (Swagger UI 5.32), served under :data:`ASSETS_URL`, so the
page works on a server without internet and loads nothing from a CDN.
"""

from __future__ import annotations

from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS_URL", "swagger_ui_assets", "swagger_ui_page"]

ASSETS_URL = "/docs-assets"
_PACKAGE, _DIRECTORY = "fastapi_offline", "static"


def swagger_ui_page(openapi_url: str = "/openapi.json") -> HTMLResponse:
    """The /docs page: Swagger UI's HTML, pointing at the assets under ASSETS_URL."""
    return get_swagger_ui_html(
        openapi_url=openapi_url,
        title="chattts-stream API",
        swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
    )


def swagger_ui_assets() -> StaticFiles:
    """The app to mount at ASSETS_URL: Swagger UI's files from the installed package."""
    return StaticFiles(packages=[(_PACKAGE, _DIRECTORY)])
