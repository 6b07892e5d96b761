"""Screenshot of the attention viewer (docs/images/viewer.png): start the service on a model repository,
translate a sentence and compare a few sentences in headless Chromium, save the whole page as a PNG.

    python scripts/screenshot_viewer.py --repository model_repository --out docs/images/viewer.png
    python scripts/screenshot_viewer.py --url http://127.0.0.1:8000 --out viewer.png    # a running service

Needs selenium (the dev extra) and Debian's chromium + chromium-driver (scripts/install-test-tools.sh);
nothing downloads a browser. tests/viewer uses ``chrome_driver`` and ``capture`` from here.
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROME_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
)
SENTENCE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."
SIMILAR = (
    "Ein Mann fährt mit dem Fahrrad durch die Stadt.",
    "Ein Radfahrer fährt durch eine Straße.",
    "Zwei Hunde spielen im Schnee.",
    "Ein Hund läuft über eine Wiese.",
)
WIDTH = 1280


def chrome_driver(user_data_dir: Path, width: int = WIDTH, height: int = 1000):
    """Headless Debian Chromium through /usr/bin/chromedriver (never Selenium Manager, never a download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        raise FileNotFoundError(f"missing {', '.join(missing)}: run scripts/install-test-tools.sh as root")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={user_data_dir}")
    options.add_argument(f"--window-size={width},{height}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


def open_viewer(driver, url: str, timeout: float = 60.0) -> None:
    """Load the page and wait until the model picker is filled from /v1/models."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url.rstrip("/") + "/")
    WebDriverWait(driver, timeout).until(
        lambda d: d.execute_script("return document.querySelectorAll('#model option').length") > 0
    )


def runs(driver, form_id: str) -> int:
    return int(driver.find_element("id", form_id).get_attribute("data-runs"))


def submit_and_wait(driver, form_id: str, submit, timeout: float = 60.0) -> None:
    """Call ``submit()`` (which submits the form) and wait until the page has finished that attempt."""
    from selenium.webdriver.support.ui import WebDriverWait

    before = runs(driver, form_id)
    submit()
    WebDriverWait(driver, timeout).until(lambda d: runs(d, form_id) > before)


def translate(driver, sentence: str, beam_size: int | None = None, timeout: float = 60.0) -> str:
    """Type the sentence, press Enter, wait; returns the translation shown (empty when an error is shown)."""
    from selenium.webdriver.common.keys import Keys

    if beam_size is not None:
        beam = driver.find_element("id", "beam-size")
        beam.clear()
        beam.send_keys(str(beam_size))
    box = driver.find_element("id", "source")
    box.clear()
    box.send_keys(sentence)
    submit_and_wait(driver, "translate-form", lambda: box.send_keys(Keys.ENTER), timeout)
    return driver.find_element("id", "translation").text


def compare(driver, sentences: Sequence[str], timeout: float = 60.0) -> None:
    box = driver.find_element("id", "embed-texts")
    box.clear()
    box.send_keys("\n".join(sentences))
    submit_and_wait(driver, "embed-form", driver.find_element("id", "embed-button").click, timeout)


def full_page_screenshot(driver, out: Path, width: int = WIDTH) -> Path:
    """The whole page, not only the window (Chrome DevTools' captureBeyondViewport)."""
    driver.set_window_size(width, 1000)
    driver.execute_script("window.scrollTo(0, 0)")
    w, h = driver.execute_script(
        "const e = document.documentElement;"
        "return [e.scrollWidth, Math.max(e.scrollHeight, document.body.scrollHeight)]"
    )
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": True, "clip": {"x": 0, "y": 0, "width": w, "height": h, "scale": 1}},
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(base64.b64decode(shot["data"]))
    return out


def capture(driver, url: str, out: Path, sentence: str = SENTENCE, similar: Sequence[str] = SIMILAR) -> Path:
    """The README picture: a translated sentence with its maps, and a similarity matrix."""
    from selenium.webdriver.common.action_chains import ActionChains

    open_viewer(driver, url)
    translate(driver, sentence)
    cells = driver.find_elements("css selector", "#heatmap rect.cell")
    if not cells:
        raise RuntimeError("no heatmap was drawn: " + driver.find_element("id", "error").text)
    ActionChains(driver).move_to_element(max(cells, key=lambda c: float(c.get_attribute("data-value")))).perform()
    compare(driver, similar)
    return full_page_screenshot(driver, out)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve(repository: Path, timeout: float = 180.0) -> Iterator[str]:
    """``python -m service`` on a free loopback port, serving ``repository``; yields its URL."""
    port = _free_port()
    env = {
        **os.environ,
        "MT_HOST": "127.0.0.1",
        "MT_PORT": str(port),
        "MT_MODEL_REPOSITORY": str(repository.resolve()),
        "MT_PROVIDERS": "cpu",
    }
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen([sys.executable, "-m", "service"], cwd=ROOT, env=env, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + timeout
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"the service exited with {process.returncode}:\n{log.read().decode()[-3000:]}")
                try:
                    with urllib.request.urlopen(url + "/readyz", timeout=2) as response:
                        if response.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the service was not ready within {timeout:.0f} s")
                time.sleep(0.2)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--repository", type=Path, default=ROOT / "model_repository", help="model repository to serve")
    where.add_argument("--url", help="use a service that is already running instead")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images" / "viewer.png")
    parser.add_argument("--sentence", default=SENTENCE)
    parser.add_argument("--similar", nargs="+", default=list(SIMILAR), help="sentences for the similarity panel")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as profile:
        driver = chrome_driver(Path(profile))
        try:
            if args.url:
                out = capture(driver, args.url, args.out, args.sentence, args.similar)
            else:
                with serve(args.repository) as url:
                    out = capture(driver, url, args.out, args.sentence, args.similar)
        finally:
            driver.quit()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
