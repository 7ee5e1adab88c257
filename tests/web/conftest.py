"""Headless Chromium for the browser tests: Debian's /usr/bin/chromium driven by Python
playwright (never `playwright install`). The AudioWorklet runs at real time without an
audio device thanks to the autoplay flag."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from harness.live import TIMEOUT_S, LiveServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--autoplay-policy=no-user-gesture-required",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: Browser waits, in ms for playwright: a fraction of the suite-wide constant.
WAIT_MS = TIMEOUT_S * 1000 / 2
SAMPLE_RATE_HZ = 24000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"{CHROMIUM} is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page (own context: storage, downloads); uncaught page errors fail the test."""
    context = browser.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page = context.new_page()
    page_errors: list[str] = []
    page.on("pageerror", lambda exc: page_errors.append(str(exc)))
    yield page
    context.close()
    assert page_errors == [], f"uncaught errors in the page: {page_errors}"


def load(page: Any, server: LiveServer) -> None:
    """Open the page of ``server`` and wait until its script has wired everything."""
    page.goto(server.base_url + "/", timeout=WAIT_MS)
    page.wait_for_function("document.body.dataset.ready === '1'", timeout=WAIT_MS)


def tts_state(page: Any) -> dict[str, Any]:
    return page.evaluate("window.ttsState")


def wait_state(page: Any, condition: str) -> dict[str, Any]:
    """Wait until the JS expression over `s` (window.ttsState) is true; return the state."""
    page.wait_for_function(f"(s => {condition})(window.ttsState)", timeout=WAIT_MS)
    return tts_state(page)
