"""The viewer's document panel in headless Chromium: a file picked, uploaded to /v1/documents, its progress shown,
the translated file downloaded through the page's link; a refused file's 4xx shown in words."""

from __future__ import annotations

import time

from selenium.webdriver.support.ui import WebDriverWait
from tiny_bundle import SAMPLE_SENTENCES
from viewer_shots import shots

GERMAN_ONLY = {"mann", "spielt", "katze", "sitzt", "kind", "rennt", "hund", "kleine", "rote", "blauen"}
PROGRESS_SPY = """
window.__progress = [];
const text = document.getElementById('document-progress-text');
new MutationObserver(() => window.__progress.push(text.textContent))
  .observe(text, {childList: true, characterData: true, subtree: true});
"""


def pick_and_upload(driver, path) -> None:
    driver.find_element("id", "document-file").send_keys(str(path))
    shots.submit_and_wait(driver, "document-form", driver.find_element("id", "document-button").click, timeout=120)


def downloaded(folder, name: str, timeout: float = 30.0) -> bytes:
    target = folder / name
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if target.exists() and not list(folder.glob("*.crdownload")):
            return target.read_bytes()
        time.sleep(0.1)
    raise AssertionError(f"{name} was not downloaded into {folder}: {list(folder.iterdir())}")


def test_text_file_is_uploaded_translated_and_downloaded(page, api, tmp_path):
    source = "\n".join(SAMPLE_SENTENCES[1:4]) + "\n"
    path = tmp_path / "notiz.txt"
    path.write_text(source, encoding="utf-8")
    page.execute_script(PROGRESS_SPY)
    pick_and_upload(page, path)

    assert not page.find_element("id", "document-error").is_displayed(), page.find_element("id", "document-error").text
    assert page.find_element("id", "document-progress").get_attribute("value") == "1"
    seen = page.execute_script("return window.__progress")
    assert seen[0].startswith("0 %") and seen[-1] == "100 %, 3 of 3 sentences", seen
    link = page.find_element("id", "document-download")
    assert link.is_displayed() and "notiz.txt" in link.text
    assert link.get_attribute("href").startswith("blob:") and link.get_attribute("download") == "notiz.txt"
    assert page.switch_to.active_element == link, "the download link takes the focus"

    folder = tmp_path / "downloads"
    folder.mkdir()
    page.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder)})
    link.click()
    translated = downloaded(folder, "notiz.txt").decode("utf-8")

    lines = translated.splitlines()
    assert len(lines) == 3 and all(lines) and translated.endswith("\n")
    assert not {w for line in lines for w in line.lower().split()} & GERMAN_ONLY, translated
    accepted = api.post("/v1/documents", files={"file": ("notiz.txt", source.encode())}).json()
    deadline = time.monotonic() + 60
    while (status := api.get(f"/v1/documents/{accepted['id']}").json())["status"] != "done":
        assert status["status"] != "failed" and time.monotonic() < deadline, status
        time.sleep(0.1)
    assert translated == api.get(status["result_url"]).text, "the page offers the service's translation"
    assert [e for e in page.get_log("browser") if e["level"] == "SEVERE"] == []


def test_unsupported_file_is_refused_in_words(page, api, tmp_path):
    error = page.find_element("id", "document-error")
    shots.submit_and_wait(page, "document-form", page.find_element("id", "document-button").click)
    assert error.is_displayed() and "Choose a file" in error.text  # nothing picked: nothing sent
    assert page.switch_to.active_element.get_attribute("id") == "document-file"

    path = tmp_path / "tabelle.xyz"
    path.write_bytes(b"der hund")
    pick_and_upload(page, path)
    refused = api.post("/v1/documents", files={"file": ("tabelle.xyz", b"der hund")})
    assert refused.status_code == 415
    WebDriverWait(page, 10).until(lambda d: error.is_displayed())
    assert f"Error (HTTP 415): {refused.json()['detail']}" in error.text
    assert "not translated here" in error.text
    assert not page.find_element("id", "document-result").is_displayed()
    assert not page.find_element("id", "document-progress-box").is_displayed()
