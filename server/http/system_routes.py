"""The routes around the speech: liveness, readiness, metrics, the API reference and the
browser page."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles

from server.http.api_reference import ASSETS_URL, swagger_ui_assets, swagger_ui_page
from server.http.schemas import ErrorBody, Health, Readiness
from server.state import AppState

__all__ = ["WEB_DIR", "mount_static", "system_routes"]

WEB_DIR = Path(__file__).resolve().parent.parent.parent / "web"


def _readiness(state: AppState) -> tuple[bool, dict[str, object]]:
    status = state.worker.status
    # Without warm-up the normaliser loads on first use, so it cannot hold /ready back.
    text_ready = state.frontend.loaded or not state.settings.warm_up
    degraded_ok = not status.degraded or state.settings.ready_when_degraded
    ready = state.worker.ready and text_ready and not state.draining and degraded_ok
    body = {
        "ready": ready,
        "state": "draining" if state.draining else status.state,
        "text_frontend": {
            "loaded": state.frontend.loaded,
            "normalizer": state.frontend.has_normalizer,
            "load_seconds": state.frontend.load_seconds,
        },
        "engine": status.engine,
        "degraded": status.degraded,
        "random_weights": state.random_weights and status.engine == "chattts",
        "detail": status.detail,
        "load_seconds": status.load_seconds,
        "sample_rate": state.worker.engine.sample_rate_hz if state.worker.engine else None,
    }
    return ready, body


def _not_alive(state: AppState) -> str:
    """Why /health fails."""
    if state.worker.status.state == "stalled":
        return "engine thread stalled"
    if state.worker.engine_lost:  # --engine-process
        return "engine process ended"
    return "engine thread stopped"


def system_routes(state: AppState) -> APIRouter:
    router = APIRouter()

    @router.get(
        "/health",
        response_model=Health,
        responses={503: {"model": Health, "description": "the engine thread died or is stuck"}},
    )
    async def health() -> JSONResponse:
        """Liveness: the process serves HTTP and its engine thread has neither died nor
        stopped making progress on work in flight (``--engine-stall-timeout-s``), nor has
        the engine's own process ended (``--engine-process``)."""
        state.worker.watch()
        if not state.worker.alive:
            return JSONResponse({"status": _not_alive(state)}, status_code=503)
        return JSONResponse({"status": "ok"})

    @router.get(
        "/ready",
        response_model=Readiness,
        responses={503: {"model": Readiness, "description": "loading, failed or draining"}},
    )
    async def ready() -> JSONResponse:
        """Readiness: the engine is loaded and warmed up."""
        is_ready, body = _readiness(state)
        return JSONResponse(body, status_code=200 if is_ready else 503)

    @router.get(
        "/metrics",
        response_class=Response,
        responses={
            200: {
                "description": "Prometheus text exposition format",
                "content": {
                    state.metrics.content_type.split(";")[0]: {"schema": {"type": "string"}}
                },
            },
            401: {"model": ErrorBody, "description": "--protect-metrics and no valid token"},
        },
    )
    async def metrics(request: Request) -> Response:
        if state.settings.protect_metrics:
            state.require_token(request)
        return Response(state.metrics.render(), media_type=state.metrics.content_type)

    @router.get("/docs", include_in_schema=False)
    async def docs() -> Response:
        return swagger_ui_page()

    @router.get(
        "/",
        response_class=FileResponse,
        responses={200: {"description": "the live player page", "content": {"text/html": {}}}},
    )
    async def index() -> FileResponse:
        return FileResponse(WEB_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    return router


def mount_static(app: FastAPI) -> None:
    """The API reference's assets (from the installed package, not a CDN) and the page's."""
    app.mount(ASSETS_URL, swagger_ui_assets(), name="docs-assets")
    if WEB_DIR.is_dir():
        app.mount("/web", StaticFiles(directory=WEB_DIR), name="web")
