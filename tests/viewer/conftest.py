"""Fixtures for the attention viewer: headless Debian Chromium driven by Selenium, the page on the live server.

The browser helpers live in scripts/screenshot_viewer.py (the README screenshot script), loaded here so the
tests exercise them too.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from viewer_shots import shots

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "viewer"


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    missing = [str(p) for p in (shots.CHROMIUM, shots.CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: run `bash scripts/install-test-tools.sh` as root")
    driver = shots.chrome_driver(tmp_path_factory.mktemp("chromium-profile"))
    driver.set_script_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def page(browser, live_server):
    """The viewer freshly loaded from the live server, its model list filled in."""
    browser.set_window_size(shots.WIDTH, 1000)
    shots.open_viewer(browser, live_server.url)
    browser.get_log("browser")  # start each test with an empty console log
    return browser


@pytest.fixture
def api(live_server):
    with httpx.Client(base_url=live_server.url, timeout=30) as client:
        yield client


@pytest.fixture
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS
