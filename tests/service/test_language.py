"""Offline language detection (core/language.py): lingua with its bundled models, restricted to a set."""

from __future__ import annotations

import pytest

from core import language


@pytest.mark.parametrize(
    "text, code",
    [
        ("Ein Mann fährt mit dem Fahrrad durch die Stadt.", "de"),
        ("A man rides his bike through the city.", "en"),
        ("我们明天去公园吧。", "zh"),
    ],
)
def test_detects_the_language(text, code):
    found, confidence = language.detect(text, ["de", "en", "zh"])
    assert found == code and 0.5 < confidence <= 1.0


def test_confidences_are_ranked_and_restricted():
    ranked = language.confidences("Guten Morgen, wie geht es dir?", ["en", "de"])
    assert [c for c, _ in ranked] == ["de", "en"]
    assert ranked[0][1] >= ranked[1][1] and abs(sum(v for _, v in ranked) - 1) < 1e-6


def test_routing_detector_picks_among_candidates():
    assert language.detect_among("Das ist ein Haus.", ["de", "en"]) == "de"
    assert language.detect_among("Das ist ein Haus.", ["en"]) == "en"  # one candidate: nothing to detect
    assert language.detect_among("12345 !!!", ["de", "en"]) is None  # no letters to go by
    assert language.detect_among("Hallo", ["xx"]) is None


def test_unknown_code_and_names():
    with pytest.raises(language.UnknownLanguage):
        language.detect("hello", ["en", "qq"])
    assert language.language_name("de") == "German" and language.language_name("zh") == "Chinese"
    assert language.language_name("qq") == "qq"


def test_start_up_builds_the_detectors_the_first_requests_use(monkeypatch):
    """service.app warms lingua before /readyz says ready: the language check's set per model (its candidates and
    the model's source language) and /detect's; afterwards no request builds one (about 1 s each)."""
    from types import SimpleNamespace

    import core.language as language
    from service.app import _warm_language_detectors
    from service.settings import LanguageSettings

    language._build.cache_clear()
    models = {"de-en": SimpleNamespace(languages=("de", "en")), "fr-en": SimpleNamespace(languages=("fr", "en"))}
    _warm_language_detectors(LanguageSettings(detect_languages=["en", "zh"]), models)

    def no_build(*args, **kwargs):
        raise AssertionError("a detector was built after start-up")

    monkeypatch.setattr(language.LanguageDetectorBuilder, "from_iso_codes_639_1", no_build)
    for languages in (("en", "zh"), ("de", "en", "zh"), ("en", "fr", "zh")):
        assert language.detector(languages) is not None
    language._build.cache_clear()
