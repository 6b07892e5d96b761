"""Model choice by name, language pair and detected language, through the real server with two models."""

from __future__ import annotations

import httpx
import pytest
from bundle_copies import two_model_repository
from live_server import LiveServer


@pytest.fixture(scope="module")
def two_models(tiny_bundle_dir, tmp_path_factory):
    repository = two_model_repository(tiny_bundle_dir, tmp_path_factory.mktemp("two"))
    with LiveServer(repository, env={"MT_MAX_WAIT_MS": "5"}) as server:
        yield server


def post(server, body):
    return httpx.post(server.url + "/v1/translate", json=body, timeout=60)


def test_both_models_are_listed_with_their_pairs_and_versions(two_models):
    models = httpx.get(two_models.url + "/v1/models", timeout=10).json()["models"]
    pairs = {(m["name"], m["source_language"], m["target_language"], m["version"]) for m in models}
    assert pairs == {("de-en", "de", "en", "1"), ("zh-en", "zh", "en", "1")}
    for m in models:
        assert m["versions_available"] == ["1"] and m["version_reason"] == "the highest version on disk"


def test_a_request_picks_its_model_by_name_or_by_language_pair(two_models):
    by_name = post(two_models, {"texts": ["der hund"], "model": "zh-en"}).json()
    assert by_name["model"] == "zh-en" and by_name["version"] == "1"
    assert by_name["translations"][0]["model"] == "zh-en"
    by_pair = post(two_models, {"texts": ["der hund"], "source_language": "zh", "target_language": "en"}).json()
    assert by_pair["model"] == "zh-en"
    by_source = post(two_models, {"texts": ["der hund"], "source_language": "de"}).json()
    assert by_source["model"] == "de-en"
    default = post(two_models, {"texts": ["der hund"]}).json()
    assert default["model"] == "de-en" and default["translations"][0]["version"] == "1"
    # the same weights under both names: the same translation whichever way the model was chosen
    assert by_name["translations"][0]["text"] == default["translations"][0]["text"]


def test_a_pair_nobody_serves_is_a_422_that_lists_the_pairs_served(two_models):
    response = post(two_models, {"texts": ["x"], "source_language": "fr", "target_language": "en"})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "source_language"]
    for needle in ("no model translates fr->en", "de->en (de-en)", "zh->en (zh-en)"):
        assert needle in error["msg"]
    response = post(two_models, {"texts": ["x"], "source_language": "de", "target_language": "fr"})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "target_language"]
    response = post(two_models, {"texts": ["x"], "model": "de-en", "source_language": "zh"})
    assert response.status_code == 422 and "translates de->en" in response.text
    assert post(two_models, {"texts": ["x"], "source_language": "German"}).status_code == 422  # not ISO 639-1
