"""Request limits (all settings): body size 413; texts, characters and tokens per text, beam size and max length
422 with the limit in the message. The strict server runs with SMALL_LIMITS and MT_MAX_BODY_BYTES=4096."""

from __future__ import annotations

import json

import httpx
import pytest
from reliability_helpers import SMALL_LIMITS

BODY_LIMIT = 4096
MAX_TEXTS = int(SMALL_LIMITS["MT_MAX_TEXTS_TRANSLATE"])
MAX_CHARS = int(SMALL_LIMITS["MT_MAX_CHARS_PER_TEXT"])
MAX_TOKENS = int(SMALL_LIMITS["MT_MAX_TOKENS_PER_TEXT"])
MAX_LENGTH = int(SMALL_LIMITS["MT_MAX_LENGTH_CAP"])
MAX_BEAM = int(SMALL_LIMITS["MT_MAX_BEAM_SIZE"])


def messages(response: httpx.Response) -> str:
    detail = response.json()["detail"]
    return detail if isinstance(detail, str) else " | ".join(e["msg"] for e in detail)


def test_body_over_the_limit_413_by_content_length(strict_server):
    body = json.dumps({"texts": ["x" * 150] * 30}).encode()
    assert len(body) > BODY_LIMIT
    response = httpx.post(
        strict_server.url + "/v1/translate", content=body, headers={"content-type": "application/json"}, timeout=30
    )
    assert response.status_code == 413
    assert f"limit of {BODY_LIMIT} bytes" in response.json()["detail"]


def test_body_over_the_limit_413_when_streamed_without_length(strict_server):
    """Chunked upload: no Content-Length to check up front, so the limit applies while the body streams in."""

    def chunks():
        yield b'{"texts": ['
        for _ in range(40):
            yield b'"' + b"y" * 150 + b'",'
        yield b'"y"]}'

    response = httpx.post(
        strict_server.url + "/v1/translate", content=chunks(), headers={"content-type": "application/json"}, timeout=30
    )
    assert response.status_code == 413, response.text
    assert f"limit of {BODY_LIMIT} bytes" in response.json()["detail"]


def test_body_just_under_the_limit_is_served(strict_server):
    body = {"texts": ["der hund"], "model": None}
    assert len(json.dumps(body)) < BODY_LIMIT
    assert httpx.post(strict_server.url + "/v1/translate", json=body, timeout=30).status_code == 200


@pytest.mark.parametrize("path", ["/v1/translate", "/v1/embed"])
def test_too_many_texts_422(strict_server, path):
    response = httpx.post(strict_server.url + path, json={"texts": ["der hund"] * (MAX_TEXTS + 1)}, timeout=30)
    assert response.status_code == 422
    assert f"at most {MAX_TEXTS} items" in messages(response)
    setting = {"/v1/translate": "MT_MAX_TEXTS_TRANSLATE", "/v1/embed": "MT_MAX_TEXTS_EMBED"}[path]
    assert setting in messages(response)
    ok = httpx.post(strict_server.url + path, json={"texts": ["der hund"] * MAX_TEXTS}, timeout=30)
    assert ok.status_code == 200


@pytest.mark.parametrize(
    "path, field", [("/v1/translate", "texts"), ("/v1/embed", "texts"), ("/v1/attention", "source")]
)
def test_too_many_characters_422(strict_server, path, field):
    text = "a" * (MAX_CHARS + 1)
    body = {"texts": [text]} if field == "texts" else {"source": text}
    response = httpx.post(strict_server.url + path, json=body, timeout=30)
    assert response.status_code == 422
    assert f"at most {MAX_CHARS} characters" in messages(response)
    # what a newcomer meets without warning (issue 55): the message names the setting and the way on
    assert "MT_MAX_CHARS_PER_TEXT" in messages(response) and "POST /v1/documents" in messages(response)


LONG = "Ein Hund. " * (MAX_CHARS // 10 + 1)


@pytest.mark.parametrize(
    "path, body, key, documents",
    [
        ("/v2/translate", {"text": [LONG], "target_lang": "EN-US"}, "message", "POST /v2/document"),
        ("/translate", {"q": LONG, "source": "de", "target": "en"}, "error", "POST /translate_file"),
        ("/detect", {"q": LONG}, "error", "POST /translate_file"),
        (
            "/v2/models/de-en/infer",
            {"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": [LONG]}]},
            "error",
            "POST /v1/documents",
        ),
    ],
)
def test_every_protocol_names_the_character_limit_and_the_documents_route(strict_server, path, body, key, documents):
    response = httpx.post(strict_server.url + path, json=body, timeout=30)
    assert response.status_code == 400, response.text
    message = response.json()[key]
    assert "MT_MAX_CHARS_PER_TEXT" in message and documents in message and str(MAX_CHARS) in message


@pytest.mark.parametrize(
    "path, field", [("/v1/translate", "texts"), ("/v1/embed", "texts"), ("/v1/attention", "source")]
)
def test_too_many_tokens_422(strict_server, path, field):
    """Within the character limit but over the subword-token limit: the message names both counts."""
    text = " ".join(["katze"] * 30)  # each word is at least one subword: 30 words, > MAX_TOKENS pieces
    assert len(text) <= MAX_CHARS
    body = {"texts": ["der hund", text]} if field == "texts" else {"source": text}
    response = httpx.post(strict_server.url + path, json=body, timeout=30)
    assert response.status_code == 422, response.text
    assert f"the limit is {MAX_TOKENS}" in messages(response)
    if field == "texts":
        assert response.json()["detail"][0]["loc"] == ["body", "texts", 1]  # names the text over the limit


@pytest.mark.parametrize(
    "option, value, needle",
    [
        ("beam_size", MAX_BEAM + 1, f"less than or equal to {MAX_BEAM}"),
        ("max_length", MAX_LENGTH + 1, f"less than or equal to {MAX_LENGTH}"),
        ("num_hypotheses", MAX_BEAM + 1, f"less than or equal to {MAX_BEAM}"),
    ],
)
def test_decoding_options_are_capped_422(strict_server, option, value, needle):
    response = httpx.post(strict_server.url + "/v1/translate", json={"texts": ["der hund"], option: value}, timeout=30)
    assert response.status_code == 422
    assert needle in messages(response)


def test_max_length_bounds_the_generated_tokens(strict_server):
    long_source = "ein kind rennt im park und spielt mit dem ball"
    response = httpx.post(
        strict_server.url + "/v1/translate", json={"texts": [long_source], "max_length": 2, "beam_size": 1}, timeout=30
    )
    assert response.status_code == 200
    assert len(response.json()["translations"][0]["target_tokens"]) <= 2


def test_openapi_states_the_limits(strict_server):
    schemas = httpx.get(strict_server.url + "/openapi.json", timeout=30).json()["components"]["schemas"]
    translate = schemas["TranslateRequest"]["properties"]
    assert translate["texts"]["maxItems"] == MAX_TEXTS
    assert translate["texts"]["items"]["maxLength"] == MAX_CHARS
    # absent: the model's default (an imported checkpoint's num_beams), so the bound is stated in its anyOf
    assert {"maximum": MAX_BEAM, "minimum": 1, "type": "integer"} in translate["beam_size"]["anyOf"]
    assert {"maximum": MAX_LENGTH, "minimum": 1, "type": "integer"} in translate["max_length"]["anyOf"]
    text = json.dumps(schemas)
    for keyword in ('"ge":', '"le":', '"gt":', '"lt":'):  # pydantic-only keywords would mean a bound is not stated
        assert keyword not in text
