"""/docs (Swagger UI) and /redoc render in headless Chromium from the service's own files: no CDN request."""

from __future__ import annotations

import time

import httpx
from selenium.webdriver.common.by import By


def _wait_for(browser, css: str, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = browser.find_elements(By.CSS_SELECTOR, css)
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{css} never appeared; page: {browser.page_source[:500]}")


def _external_requests(browser, url: str) -> list[str]:
    entries = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    return [e for e in entries if not e.startswith(url)]


def test_swagger_ui_renders_offline(browser, live_server):
    html = httpx.get(live_server.url + "/docs", timeout=10).text
    assert "cdn.jsdelivr" not in html and "unpkg" not in html
    browser.get(live_server.url + "/docs")
    operations = _wait_for(browser, ".opblock-summary-path")
    paths = {op.text.strip().replace("\u200b", "") for op in operations}
    assert "/v1/translate" in paths
    assert _external_requests(browser, live_server.url) == []


def test_redoc_renders_offline(browser, live_server):
    browser.get(live_server.url + "/redoc")
    _wait_for(browser, "[data-section-id]")
    assert "Translate a batch of texts" in browser.page_source
    # the only outside address is ReDoc's own "API docs by Redocly" footer image; offline it is just missing
    assert [u for u in _external_requests(browser, live_server.url) if not u.endswith("/logo-mini.svg")] == []
