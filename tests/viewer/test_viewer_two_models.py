"""The viewer with the shipped models: the picker lists de-en and zh-en, and Chinese subwords are drawn as such."""

from __future__ import annotations

from pathlib import Path

import pytest
from live_server import LiveServer
from test_viewer_page import pick, tokens
from viewer_shots import shots

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "model_repository"


@pytest.fixture(scope="module")
def shipped_server(tmp_path_factory):
    if not (SHIPPED / "zh-en").is_dir():
        pytest.skip("no zh-en bundle in model_repository")
    with LiveServer(SHIPPED, log_path=tmp_path_factory.mktemp("shipped") / "log") as server:
        yield server


def test_picker_lists_both_models_and_chinese_tokens_render(browser, shipped_server):
    shots.open_viewer(browser, shipped_server.url)
    assert {"de-en", "zh-en"} <= set(
        browser.execute_script("return Array.from(document.querySelectorAll('#model option')).map(o => o.value)")
    )
    pick(browser, "model", "zh-en")
    shown = shots.translate(browser, "我们明天去北京。", beam_size=1)
    assert shown and shown.isascii()  # an English translation
    source = tokens(browser, "heatmap", "col-label")
    assert source[-1] == "</s>" and any("\u4e00" <= ch <= "\u9fff" for t in source for ch in t), source


def test_the_source_label_and_example_follow_the_chosen_model(browser, shipped_server):
    shots.open_viewer(browser, shipped_server.url)
    label = browser.find_element("id", "source-label")
    for model, name, example in (("zh-en", "Chinese", "我们"), ("de-en", "German", "Ein Mann")):
        pick(browser, "model", model)
        assert label.text == f"{name} sentence"
        assert browser.find_element("id", "source").get_attribute("placeholder").startswith(example)
    pick(browser, "model", "zh-en")
    shots.translate(browser, "")  # an empty submit names the language asked for
    assert "Enter a Chinese sentence" in browser.find_element("id", "error").text
    shots.translate(browser, "我们明天去北京。", beam_size=1)
    assert browser.find_element("id", "confidence").text.startswith("Confidence 0.")  # the shipped map
