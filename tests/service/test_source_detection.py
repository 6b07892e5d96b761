"""A source language left out, or "auto", is detected on every route that translates, wherever the target alone
names several models (issue 55: /translate_file with source=auto, DeepL's document upload without source_lang and
/v1/documents without source_language were refused with "?->en matches several models")."""

from __future__ import annotations

import time

import deepl
import httpx
import pytest
from bundle_copies import two_model_repository
from live_server import LiveServer

GERMAN = "Der Hund schläft im Garten, und die Kinder spielen im Park."
CHINESE = "我们明天去北京看望我的祖父母。"


@pytest.fixture(scope="module")
def two_models(tiny_bundle_dir, tmp_path_factory):
    """de-en and zh-en (the tiny weights under both names): "en" alone names two models."""
    repository = two_model_repository(tiny_bundle_dir, tmp_path_factory.mktemp("detect"))
    with LiveServer(repository, env={"MT_MAX_WAIT_MS": "5"}) as server:
        yield server


def wait_job(url: str, job_id: str) -> dict:
    for _ in range(600):
        job = httpx.get(f"{url}/v1/documents/{job_id}", timeout=30).json()
        if job["status"] in ("done", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish")


def test_v1_translate_without_a_source_detects_each_text(two_models):
    body = {"texts": [GERMAN, CHINESE], "target_language": "en"}
    response = httpx.post(two_models.url + "/v1/translate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    found = [(t["model"], t["detected_language"]) for t in response.json()["translations"]]
    assert found == [("de-en", "de"), ("zh-en", "zh")]


@pytest.mark.parametrize("source", [None, "auto"])
@pytest.mark.parametrize("text, model", [(GERMAN, "de-en"), (CHINESE, "zh-en")])
def test_v1_documents_detect_a_source_left_out_or_auto(two_models, source, text, model):
    form = {"target_language": "en", **({"source_language": source} if source else {})}
    files = {"file": ("brief.txt", text.encode())}
    response = httpx.post(two_models.url + "/v1/documents", data=form, files=files, timeout=60)
    assert response.status_code == 202, response.text
    job = wait_job(two_models.url, response.json()["id"])
    assert job["status"] == "done" and job["model"] == model
    assert job["detected_language"] == model[:2]


def test_libretranslate_translate_file_with_source_auto(two_models):
    files = {"file": ("brief.txt", CHINESE.encode())}
    response = httpx.post(
        two_models.url + "/translate_file", data={"source": "auto", "target": "en"}, files=files, timeout=120
    )
    assert response.status_code == 200, response.text
    translated = httpx.get(response.json()["translatedFileUrl"], timeout=30)
    assert translated.status_code == 200 and translated.text.strip()


def test_deepl_document_without_source_lang(two_models, tmp_path):
    source, out = tmp_path / "brief.txt", tmp_path / "brief.en.txt"
    source.write_text(GERMAN, encoding="utf-8")
    translator = deepl.Translator("any", server_url=two_models.url, send_platform_info=False)
    status = translator.translate_document_from_filepath(source, out, target_lang="EN-US")
    assert status.done and out.read_text(encoding="utf-8").strip()


def test_deepl_text_without_source_lang(two_models):
    translator = deepl.Translator("any", server_url=two_models.url, send_platform_info=False)
    results = translator.translate_text([GERMAN, CHINESE], target_lang="EN-US")
    assert [r.detected_source_lang for r in results] == ["DE", "ZH"]
