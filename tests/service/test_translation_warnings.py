"""Warnings and confidence on every translation, through the real server (service/serving/quality.py)."""

from __future__ import annotations

import httpx
import pytest
from bundle_copies import copy_bundle
from live_server import LiveServer

ENGLISH = "A dog runs across the green meadow while the children are playing football in the park."


def translate(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/v1/translate", json=body, timeout=60)


def codes(translation: dict) -> list[str]:
    return [w["code"] for w in translation["warnings"]]


def test_a_plain_sentence_has_an_empty_warning_list(live_server):
    [t] = translate(live_server.url, {"texts": ["ein mann spielt"]}).json()["translations"]
    assert t["warnings"] == [] or codes(t) == ["truncated"]  # the tiny model may not stop; nothing else applies


def test_truncated_unknown_characters_language_and_sentences(live_server):
    url = live_server.url
    [cut] = translate(url, {"texts": ["ein mann spielt auf der straße"], "max_length": 2}).json()["translations"]
    assert "truncated" in codes(cut) and "max_length 2" in cut["warnings"][codes(cut).index("truncated")]["message"]
    [emoji] = translate(url, {"texts": ["der hund 🐕"]}).json()["translations"]
    assert "unknown_characters" in codes(emoji) and "🐕" in str(emoji["warnings"])
    [english] = translate(url, {"texts": [ENGLISH]}).json()["translations"]
    warning = english["warnings"][codes(english).index("language_mismatch")]
    assert "looks like en" in warning["message"] and "translates from de" in warning["message"]
    two = "Der Hund rennt über die Wiese. Die Katze schläft auf dem Sofa."
    [whole] = translate(url, {"texts": [two], "split_sentences": False}).json()["translations"]
    assert "multiple_sentences" in codes(whole)
    [split] = translate(url, {"texts": [two]}).json()["translations"]
    assert "multiple_sentences" not in codes(split)


@pytest.mark.parametrize("text", ["", "\n\t", "   "])
def test_empty_and_whitespace_only_texts_translate_to_empty_text_without_warnings(live_server, text):
    [t] = translate(live_server.url, {"texts": [text]}).json()["translations"]
    assert t["text"].strip() == "" and t["warnings"] == [] and "confidence" not in t
    assert t["target_tokens"] == []


def test_reject_mode_refuses_a_text_in_another_language(tiny_repository, tmp_path):
    env = {"MT_LANGUAGE_MISMATCH": "reject"}
    with LiveServer(tiny_repository, env=env, log_path=tmp_path / "log") as server:
        response = translate(server.url, {"texts": ["der hund", ENGLISH]})
        assert response.status_code == 422
        [error] = response.json()["detail"]
        assert error["loc"] == ["body", "texts", 1] and "looks like en" in error["msg"]
        assert translate(server.url, {"texts": ["der hund"]}).status_code == 200


def test_off_mode_checks_no_language_and_keeps_the_other_warnings(tiny_repository, tmp_path):
    with LiveServer(tiny_repository, env={"MT_LANGUAGE_MISMATCH": "off"}, log_path=tmp_path / "log") as server:
        [english, emoji] = translate(server.url, {"texts": [ENGLISH, "der hund 🐕"]}).json()["translations"]
        assert "language_mismatch" not in codes(english)
        assert "unknown_characters" in codes(emoji)
        detected = httpx.post(server.url + "/detect", json={"q": ENGLISH}, timeout=60)  # /detect still detects
        assert detected.status_code == 200 and detected.json()[0]["language"] == "en"


def test_confidence_comes_from_the_bundles_fitted_map(tiny_bundle_dir, tmp_path):
    repository = tmp_path / "repository"
    copy_bundle(tiny_bundle_dir, repository / "de-en" / "1", confidence={"a": 1.0, "b": -50.0})  # always low
    with LiveServer(repository, log_path=tmp_path / "log") as server:
        [t] = translate(server.url, {"texts": ["ein mann spielt"]}).json()["translations"]
        assert 0.0 <= t["confidence"] < 0.01 and "low_confidence" in codes(t)
    repository2 = tmp_path / "repository2"
    copy_bundle(tiny_bundle_dir, repository2 / "de-en" / "1", confidence={"a": 1.0, "b": 50.0})  # always high
    with LiveServer(repository2, log_path=tmp_path / "log2") as server:
        [t] = translate(server.url, {"texts": ["ein mann spielt"]}).json()["translations"]
        assert t["confidence"] > 0.99 and "low_confidence" not in codes(t)


def test_every_endpoint_takes_an_empty_or_whitespace_text_as_the_empty_sentence(live_server):
    url = live_server.url
    vectors = httpx.post(url + "/v1/embed", json={"texts": ["", " \n\t "]}, timeout=60).json()["embeddings"]
    assert vectors[0] == vectors[1]  # whitespace only = empty: the encoder's vector of </s> alone
    for source in ("", "\n\t"):
        answer = httpx.post(url + "/v1/attention", json={"source": source, "kinds": ["cross"]}, timeout=60)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["source_tokens"] == ["</s>"] and body["target_text"] == "" and body["target_tokens"] == ["<s>"]


def test_constrained_output_has_no_confidence_but_says_why(tiny_bundle_dir, tmp_path):
    """A glossary's forced subwords made every constrained translation's confidence about 0 with low_confidence,
    whatever its quality (issue 55): the map was fitted on free output, so none is given, and the warning says so."""
    repository = tmp_path / "repository"
    copy_bundle(tiny_bundle_dir, repository / "de-en" / "1", confidence={"a": 1.0, "b": 3.0})  # high for free output
    with LiveServer(repository, log_path=tmp_path / "log") as server:
        body = {"texts": ["der hund spielt im park", "ein mann spielt"], "beam_size": 4}
        free = translate(server.url, body).json()["translations"]
        bound = translate(server.url, {**body, "glossary": {"hund": "hound"}}).json()["translations"]
        kept = translate(server.url, {**body, "do_not_translate": ["park"]}).json()["translations"]
    assert all(t["confidence"] > 0.5 and "low_confidence" not in codes(t) for t in free)
    for t in (bound[0], kept[0]):  # the texts the terms were found in
        assert "confidence" not in t and "low_confidence" not in codes(t)
        assert "confidence_unavailable" in codes(t)
    assert bound[1]["confidence"] == free[1]["confidence"] and "confidence_unavailable" not in codes(bound[1])
