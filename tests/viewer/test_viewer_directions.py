"""The viewer with a multilingual bundle (issue 60): the picker lists each direction a model serves, a direction's
translation and attention come from that direction, and a pivoted one says it has no attention map."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from live_server import LiveServer
from multi_bundle import LEXICON, NAME, cached_multi_bundle, source_digest
from test_viewer_page import options, pick, tokens
from viewer_shots import shots


@pytest.fixture(scope="module")
def multi_server(request, tiny_repository, tmp_path_factory):
    work = tmp_path_factory.mktemp("viewer-multi")
    repository = cached_multi_bundle(Path(request.config.cache.mkdir("mtserve")), work, source_digest())
    shutil.copytree(tiny_repository / "de-en", repository / "de-en")
    with LiveServer(repository, log_path=work / "service.log").start(timeout=240) as server:
        yield server


def test_the_picker_lists_every_direction_and_translates_in_the_chosen_one(browser, multi_server):
    shots.open_viewer(browser, multi_server.url)
    listed = options(browser, "model")
    assert "de-en" in listed and NAME in listed  # each model's own pair: its name, as before
    assert {f"{NAME}:{pair}" for pair in ("en-de", "zh-en", "en-zh", "de-zh", "zh-de")} <= set(listed)
    pick(browser, "model", f"{NAME}:en-zh")
    assert browser.find_element("id", "source-label").text == "English sentence"
    shown = shots.translate(browser, "dog cat ball", beam_size=1)
    assert shown and any(w in shown for w in LEXICON["zh"]), shown  # Chinese: the <2zh> direction
    source = tokens(browser, "heatmap", "col-label")
    assert source[-1] == "</s>" and not any(t.startswith("<2") for t in source), source  # no tag in the map


def test_a_pivoted_direction_says_it_has_no_attention_map(browser, multi_server):
    shots.open_viewer(browser, multi_server.url)
    pick(browser, "model", f"{NAME}:de-zh")
    assert "through en" in browser.find_element("id", "model-info").text
    shots.translate(browser, "hund katze ball", beam_size=1)
    error = browser.find_element("id", "error").text
    assert "through en" in error and "no attention map" in error, error
    assert any(w in error for w in LEXICON["zh"]), error
