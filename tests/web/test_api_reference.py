"""/docs in headless Chromium, offline: Swagger UI renders every operation of the
server's own OpenAPI document (3.1), with every request outside the server refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from harness.live import TIMEOUT_S, LiveServer, run_live_server
from server.config import Settings
from tests.web.conftest import WAIT_MS

pytestmark = [pytest.mark.browser, pytest.mark.live]

HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    with run_live_server(Settings(engine="espeak")) as live:
        yield live


def test_docs_render_every_operation_offline(page: Any, server: LiveServer) -> None:
    """Every (path, method) of /openapi.json is one rendered operation block in /docs,
    with nothing fetched from anywhere but the server."""
    spec = httpx.get(server.base_url + "/openapi.json", timeout=TIMEOUT_S).json()
    operations = sorted(
        (method.upper(), path)
        for path, item in spec["paths"].items()
        for method in item
        if method in HTTP_METHODS
    )
    assert len(operations) > 5
    outside: list[str] = []

    def only_the_server(route: Any) -> None:
        if route.request.url.startswith(server.base_url + "/"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_the_server)
    page.goto(server.base_url + "/docs", timeout=WAIT_MS)
    page.wait_for_function(
        f"document.querySelectorAll('.opblock').length >= {len(operations)}"
        " || document.querySelector('.errors-wrapper, .version-pragma') !== null",
        timeout=WAIT_MS,
    )
    errors = page.locator(".errors-wrapper, .version-pragma")
    assert errors.count() == 0, errors.first.text_content()

    rendered = page.eval_on_selector_all(
        ".opblock",
        """blocks => blocks.map(b => [
            b.querySelector('.opblock-summary-method').textContent.trim(),
            b.querySelector('.opblock-summary-path').getAttribute('data-path'),
        ])""",
    )
    assert sorted(map(tuple, rendered)) == operations
    assert spec["info"]["title"] in (page.text_content(".information-container") or "")
    assert outside == []
