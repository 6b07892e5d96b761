"""What a newcomer met in the viewer (issue 55): no confidence or warnings beside a translation, a previous result
left under the error of an empty submit, and /favicon.ico a 404. (The source label per model:
test_viewer_two_models.py.)"""

from __future__ import annotations

from selenium.webdriver.common.keys import Keys
from viewer_shots import shots

ENGLISH = "A dog runs across the green meadow while the children are playing football in the park."


def test_favicon_is_served(api):
    icon = api.get("/favicon.ico")
    assert icon.status_code == 200 and icon.headers["content-type"] == "image/x-icon"
    assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO file's header: reserved 0, type 1 (icon)


def test_the_translations_confidence_and_warnings_are_shown(page, api):
    shown = shots.translate(page, ENGLISH, beam_size=4)
    answer = api.post("/v1/translate", json={"texts": [ENGLISH], "beam_size": 4}).json()["translations"][0]
    assert shown == answer["text"]
    items = [li.text for li in page.find_elements("css selector", "#warnings li")]
    assert items == [f"{w['code']}: {w['message']}" for w in answer["warnings"]]
    assert any(item.startswith("language_mismatch: the text looks like en") for item in items)
    confidence = page.find_element("id", "confidence").text
    if "confidence" in answer:
        assert f"Confidence {answer['confidence']:.2f}" in confidence
    else:  # the tiny test model has no fitted confidence map
        assert confidence.startswith("No confidence for this translation")


def test_an_empty_submit_clears_the_previous_result(page):
    assert shots.translate(page, "der hund")
    assert page.find_element("id", "result").is_displayed()
    box = page.find_element("id", "source")
    box.clear()
    shots.submit_and_wait(page, "translate-form", lambda: box.send_keys(Keys.ENTER))
    assert page.find_element("id", "error").is_displayed()
    assert not page.find_element("id", "result").is_displayed()
