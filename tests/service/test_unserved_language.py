"""A text in a language no model serves is named as what it is, by the warning and the detected language alike
(issue 55: French to de-en warned "looks like en" while detected_language said "de"; "Bonjour, comment allez-vous ?"
got no warning)."""

from __future__ import annotations

import httpx
import pytest
from bundle_copies import two_model_repository
from live_server import LiveServer

from core.language import unserved

FRENCH = ["Le chien dort dans le jardin et les enfants jouent.", "Bonjour, comment allez-vous ?"]
GERMAN = "Der Hund schläft im Garten, und die Kinder spielen im Park."
CHINESE = "我们明天去北京看望我的祖父母。"


def test_unserved_names_only_a_language_outside_the_known_ones():
    assert unserved(FRENCH[0], ["de", "en", "zh"])[0] == "fr"
    assert unserved(FRENCH[1], ["de", "en", "zh"])[0] == "fr"
    assert unserved(GERMAN, ["de", "en", "zh"]) is None
    assert unserved(CHINESE, ["de", "en", "zh"]) is None
    assert unserved("der hund", ["de", "en", "zh"]) is None  # too little to tell: not called another language
    assert unserved(FRENCH[0], ["de", "fr"]) is None  # known: the usual check applies


@pytest.fixture(scope="module")
def two_models(tiny_bundle_dir, tmp_path_factory):
    repository = two_model_repository(tiny_bundle_dir, tmp_path_factory.mktemp("unserved"))
    with LiveServer(repository, env={"MT_MAX_WAIT_MS": "5"}) as server:
        yield server


def mismatch(t: dict) -> str:
    [warning] = [w["message"] for w in t["warnings"] if w["code"] == "language_mismatch"]
    return warning


def test_auto_names_french_in_both_fields(two_models):
    body = {"texts": [*FRENCH, GERMAN, CHINESE], "source_language": "auto", "target_language": "en"}
    answer = httpx.post(two_models.url + "/v1/translate", json=body, timeout=60).json()["translations"]
    for t in answer[:2]:
        assert t["detected_language"] == "fr" and "looks like fr" in mismatch(t)
    assert answer[2]["detected_language"] == "de" and answer[3]["detected_language"] == "zh"
    assert not [w for t in answer[2:] for w in t["warnings"] if w["code"] == "language_mismatch"]


def test_a_named_source_warns_about_french(two_models):
    body = {"texts": FRENCH, "source_language": "de"}
    for t in httpx.post(two_models.url + "/v1/translate", json=body, timeout=60).json()["translations"]:
        assert "looks like fr" in mismatch(t) and "translates from de" in mismatch(t)


def test_libretranslate_auto_agrees_with_its_warning(two_models):
    body = {"q": FRENCH, "source": "auto", "target": "en"}
    answer = httpx.post(two_models.url + "/translate", json=body, timeout=60).json()
    assert [d["language"] for d in answer["detectedLanguage"]] == ["fr", "fr"]
    for found in answer["warnings"]:
        assert any(w["code"] == "language_mismatch" and "looks like fr" in w["message"] for w in found)
