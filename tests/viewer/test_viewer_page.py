"""The attention viewer in headless Chromium against the real service serving the tiny de-en model."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest
from live_server import LiveServer
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select
from tiny_bundle import SAMPLE_SENTENCES
from viewer_shots import shots

FETCH_SPY = """
window.__requests = [];
const realFetch = window.fetch;
window.fetch = (...args) => { window.__requests.push(String(args[0])); return realFetch(...args); };
"""


def drawn(driver, svg_id: str) -> np.ndarray:
    """The drawn cells as a (rows, cols) matrix of their data-value attributes."""
    cells = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map("
        "r => [Number(r.dataset.row), Number(r.dataset.col), Number(r.dataset.value)])",
        f"#{svg_id} rect.cell",
    )
    rows = 1 + max(c[0] for c in cells)
    cols = 1 + max(c[1] for c in cells)
    assert len(cells) == rows * cols, "every row x column pair is drawn exactly once"
    matrix = np.full((rows, cols), np.nan)
    for i, j, v in cells:
        matrix[i, j] = v
    assert not np.isnan(matrix).any()
    return matrix


def tokens(driver, svg_id: str, cls: str) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(t => t.dataset.token)", f"#{svg_id} .{cls}"
    )


def options(driver, select_id: str) -> list[str]:
    return [o.get_attribute("value") for o in Select(driver.find_element("id", select_id)).options]


def pick(driver, select_id: str, value: str) -> None:
    Select(driver.find_element("id", select_id)).select_by_value(value)


def test_translation_and_cross_attention_match_the_api(page, api, artifacts):
    sentence = SAMPLE_SENTENCES[2]
    shown = shots.translate(page, sentence)  # typed, then Enter: the form submits from the keyboard

    expected = api.post("/v1/translate", json={"texts": [sentence], "beam_size": 4}).json()["translations"][0]
    assert shown == expected["text"] and shown
    att = api.post("/v1/attention", json={"source": sentence, "target": shown}).json()

    assert tokens(page, "heatmap", "col-label") == att["source_tokens"]
    assert tokens(page, "heatmap", "row-label") == [*att["target_tokens"][1:], "</s>"]
    values = drawn(page, "heatmap")
    assert values.shape == (len(att["target_tokens"]), len(att["source_tokens"]))
    np.testing.assert_allclose(values, np.mean(att["cross"][0], axis=0), rtol=1e-4, atol=1e-6)  # default: mean

    tooltip = page.execute_script("return document.querySelector('#heatmap rect.cell title').textContent")
    assert tooltip == f"{att['target_tokens'][1]} → {att['source_tokens'][0]}: {values[0, 0]:.3f}"
    page.find_element("id", "heatmap").send_keys(Keys.ARROW_DOWN, Keys.ARROW_RIGHT)  # keyboard: focus, then move
    cursor = page.execute_script(
        "const r = document.querySelector('#heatmap rect.cursor');"
        "return [Number(r.dataset.row), Number(r.dataset.col), r.querySelector('title').textContent]"
    )
    assert cursor == [1, 1, f"{att['target_tokens'][2]} → {att['source_tokens'][1]}: {values[1, 1]:.3f}"]
    assert page.find_element("id", "readout").text == cursor[2]
    word_starts = page.execute_script("return document.querySelectorAll('#heatmap .col-label tspan.ws').length")
    assert word_starts == sum(t.startswith("\u2581") for t in att["source_tokens"]) > 0
    legend = page.find_element("id", "heatmap-legend").text
    assert "attention weight" in legend and "0.00" in legend

    lines = page.execute_script(
        "return Array.from(document.querySelectorAll('#lines line.link')).map("
        "l => [Number(l.dataset.row), Number(l.dataset.col), Number(l.getAttribute('stroke-opacity'))])"
    )
    assert len(lines) == int((values >= 0.01).sum())
    for i, j, opacity in lines:
        assert opacity == pytest.approx(values[i, j], abs=1e-3)

    assert not page.find_element("id", "error").is_displayed()
    assert page.find_element("id", "status").text == ""
    assert [e for e in page.get_log("browser") if e["level"] == "SEVERE"] == []
    shots.full_page_screenshot(page, artifacts / "translated.png")


def test_head_and_kind_pickers_redraw_with_the_api_values(page, api):
    sentence = SAMPLE_SENTENCES[4]
    shown = shots.translate(page, sentence, beam_size=2)
    att = api.post("/v1/attention", json={"source": sentence, "target": shown}).json()
    info = api.get("/v1/models").json()["models"][0]
    assert options(page, "head") == ["mean", *map(str, range(info["heads"]))]
    assert options(page, "layer") == [str(i) for i in range(info["layers"]["decoder"])]

    per_head = []
    for head in range(info["heads"]):
        pick(page, "head", str(head))
        per_head.append(drawn(page, "heatmap"))
        np.testing.assert_allclose(per_head[-1], att["cross"][0][head], rtol=1e-4, atol=1e-6)
        assert f"head {head}" in page.find_element("id", "heatmap-caption").text
    assert np.abs(per_head[0] - per_head[1]).max() > 1e-3, "the heads of the tiny model attend differently"

    pick(page, "kind", "encoder")  # the head choice is kept
    np.testing.assert_allclose(drawn(page, "heatmap"), att["encoder"][0][1], rtol=1e-4, atol=1e-6)
    assert tokens(page, "heatmap", "row-label") == att["source_tokens"]

    pick(page, "kind", "decoder")
    decoder = drawn(page, "heatmap")
    np.testing.assert_allclose(decoder, att["decoder"][0][1], rtol=1e-4, atol=1e-6)
    assert tokens(page, "heatmap", "col-label") == att["target_tokens"]
    assert np.triu(decoder, k=1).max() < 1e-6, "decoder self-attention is causal"


def test_layer_picker_draws_the_chosen_layer(page):
    """The tiny model has one layer; a two-layer /v1/attention answer (the real one's shape) checks the picker."""
    src, tgt = ["▁ein", "▁mann", "</s>"], ["<s>", "▁a", "▁man"]
    rng = np.random.default_rng(0)

    def maps(rows: int, cols: int) -> list:
        return rng.dirichlet(np.ones(cols), size=(2, 3, rows)).round(6).tolist()  # [layers][heads][rows][cols]

    answer = {"model": "de-en", "source_tokens": src, "target_tokens": tgt, "target_text": "a man", "score": -1.0}
    answer |= {"encoder": maps(3, 3), "decoder": maps(3, 3), "cross": maps(3, 3)}
    page.execute_script(
        "const answer = arguments[0]; const realFetch = window.fetch;"
        "window.fetch = (url, init) => url === '/v1/attention'"
        " ? Promise.resolve(new Response(answer, {status: 200, headers: {'Content-Type': 'application/json'}}))"
        " : realFetch(url, init);",
        json.dumps(answer),
    )
    shots.translate(page, "ein mann")
    assert options(page, "layer") == ["0", "1"]
    assert options(page, "head") == ["mean", "0", "1", "2"]
    pick(page, "layer", "1")
    np.testing.assert_allclose(drawn(page, "heatmap"), np.mean(answer["cross"][1], axis=0), rtol=1e-4, atol=1e-6)
    pick(page, "head", "2")
    np.testing.assert_allclose(drawn(page, "heatmap"), answer["cross"][1][2], rtol=1e-4, atol=1e-6)
    pick(page, "layer", "0")
    np.testing.assert_allclose(drawn(page, "heatmap"), answer["cross"][0][2], rtol=1e-4, atol=1e-6)
    assert "layer 0, head 2" in page.find_element("id", "heatmap-caption").text


def test_empty_input_is_refused_and_nothing_is_sent(page):
    page.execute_script(FETCH_SPY)
    box = page.find_element("id", "source")
    box.send_keys("   ")
    shots.submit_and_wait(page, "translate-form", lambda: box.send_keys(Keys.ENTER))
    error = page.find_element("id", "error")
    assert error.is_displayed() and "Enter a German sentence" in error.text
    assert page.switch_to.active_element.get_attribute("id") == "source"

    shots.compare(page, ["ein mann spielt"])  # one sentence: nothing to compare
    assert "at least two sentences" in page.find_element("id", "embed-error").text
    assert page.execute_script("return window.__requests") == []

    shots.translate(page, "der hund")  # the spy does see real requests
    assert page.execute_script("return window.__requests") == ["/v1/translate", "/v1/attention"]
    assert not error.is_displayed()


def test_long_input_is_warned_about(page, api):
    limit = api.get("/v1/models").json()["models"][0]["max_source_tokens"] - 1
    warning = page.find_element("id", "input-warning")
    page.find_element("id", "source").send_keys("ein mann spielt")
    assert not warning.is_displayed()
    page.find_element("id", "source").send_keys(" und spielt" * 40)
    assert warning.is_displayed()
    assert "Long input: 455 characters" in warning.text and f"at most {limit}" in warning.text


@pytest.fixture(scope="module")
def strict_server(tiny_repository, tmp_path_factory):
    """A second server whose limits a browser user can hit: 12 characters per text, beam size at most 2."""
    env = {"MT_MAX_CHARS_PER_TEXT": "12", "MT_MAX_BEAM_SIZE": "2", "MT_MAX_WAIT_MS": "10"}
    server = LiveServer(tiny_repository, env=env, log_path=tmp_path_factory.mktemp("strict") / "service.log")
    with server:
        yield server


@pytest.mark.parametrize(
    ("text", "beam", "field"), [(SAMPLE_SENTENCES[4], 2, "sentence: "), ("der hund", 5, "beam size: ")]
)
def test_api_errors_are_shown_in_words(browser, strict_server, text, beam, field):
    answer = httpx.post(strict_server.url + "/v1/translate", json={"texts": [text], "beam_size": beam}, timeout=30)
    assert answer.status_code == 422
    shots.open_viewer(browser, strict_server.url)
    assert shots.translate(browser, text, beam_size=beam) == ""
    error = browser.find_element("id", "error")
    assert error.is_displayed()
    assert "The service refused the request (HTTP 422):" in error.text
    for item in answer.json()["detail"]:
        assert f"{field}{item['msg']}" in error.text
    assert not browser.find_element("id", "result").is_displayed()


def test_similarity_matrix_is_the_embed_apis_cosine(page, api):
    sentences = SAMPLE_SENTENCES[:3]
    shots.compare(page, sentences)
    shown = drawn(page, "similarity")
    vectors = np.array(api.post("/v1/embed", json={"texts": sentences, "normalize": True}).json()["embeddings"])
    np.testing.assert_allclose(shown, vectors @ vectors.T, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.diag(shown), 1.0, atol=1e-4)
    short = [s if len(s) <= 32 else s[:31] + "…" for s in sentences]  # long labels are cut, tooltips are not
    assert tokens(page, "similarity", "row-label") == [f"{i + 1}. {s}" for i, s in enumerate(short)]
    tooltip = page.execute_script(
        "return document.querySelector('#similarity rect.cell[data-row=\"2\"] title').textContent"
    )
    assert tooltip.startswith(f"“{sentences[2]}” · “{sentences[0]}”: ")
    assert "cosine similarity" in page.find_element("id", "similarity-legend").text
    assert not page.find_element("id", "embed-error").is_displayed()


def test_controls_are_labelled_and_keyboard_reachable(page):
    unlabelled = page.execute_script(
        "return Array.from(document.querySelectorAll('input, select, textarea'))"
        ".filter(e => !e.id || !document.querySelector(`label[for='${e.id}']`)).map(e => e.id || e.outerHTML)"
    )
    assert unlabelled == []
    assert page.execute_script("return document.querySelectorAll('[onclick], div[role=button]').length") == 0
    page.find_element("id", "source").click()
    order = []
    for _ in range(3):
        page.switch_to.active_element.send_keys(Keys.TAB)
        order.append(page.switch_to.active_element.get_attribute("id"))
    assert order == ["model", "beam-size", "translate-button"]
    outline = page.execute_script(
        "const s = getComputedStyle(document.activeElement); return [s.outlineStyle, s.outlineWidth]"
    )
    assert outline == ["solid", "3px"], "keyboard focus is visible"


def test_screenshot_script_captures_the_whole_page(browser, live_server, artifacts):
    from matplotlib.image import imread

    out = shots.capture(browser, live_server.url, artifacts / "viewer.png", SAMPLE_SENTENCES[4], SAMPLE_SENTENCES[:4])
    image = imread(out)
    assert image.shape[1] == shots.WIDTH and image.shape[0] > 1000
    assert image[..., :3].std() > 0.05
