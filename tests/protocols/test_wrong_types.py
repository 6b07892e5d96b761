"""Every field of every protocol's JSON request, sent with a value its schema refuses (another type, a number out
of an enum, null where null is not allowed), gets that protocol's own 4xx: /v1 422 {"detail"}, the DeepL API 400
{"message"}, the inference protocol and LibreTranslate 400 {"error"}; never a 500, never silently an answer
(issue 55: DeepL's ``split_sentences: {}`` was a 500, ``outline_detection: -58800`` and LibreTranslate's
``format: null`` were answered). The fields and their schemas are read from /openapi.json, so a new field is
covered the day it is documented."""

from __future__ import annotations

import httpx
import jsonschema
import pytest

# the JSON operations and the form of their errors; each is sent its documented example with one field changed
OPERATIONS = {
    "/v1/translate": "detail",
    "/v1/embed": "detail",
    "/v1/attention": "detail",
    "/v1/glossaries": "detail",
    "/v2/translate": "message",
    "/v2/glossaries": "message",
    "/v2/models/{model_name}/infer": "error",
    "/translate": "error",
    "/detect": "error",
}
CANDIDATES = [{"x": 1}, [{"x": 1}], [[1]], 1.5, 7, -58800, True, None, "x", ""]


def _openapi(url: str) -> dict:
    return httpx.get(url + "/openapi.json", timeout=30).json()


def _cases(openapi: dict) -> list[tuple[str, dict, str, object]]:
    """(operation path, its example body, a field, a value the field's schema refuses) for every field."""
    cases = []
    for path in OPERATIONS:
        content = openapi["paths"][path]["post"]["requestBody"]["content"]["application/json"]
        schema = content["schema"]
        if "$ref" in schema:
            schema = openapi["components"]["schemas"][schema["$ref"].split("/")[-1]]
        example = content.get("example") or schema["examples"][0]
        for field, field_schema in schema["properties"].items():
            rooted = {**field_schema, "components": openapi["components"]}  # its $refs resolve against the root
            for value in CANDIDATES:
                if not jsonschema.Draft202012Validator(rooted).is_valid(value):
                    cases.append((path, example, field, value))
    return cases


def test_every_operation_is_covered(live_server):
    cases = _cases(_openapi(live_server.url))
    assert {c[0] for c in cases} == set(OPERATIONS)
    assert ("/v2/translate", "split_sentences") in {(c[0], c[2]) for c in cases}
    assert len(cases) > 300


def test_a_wrong_value_of_any_field_gets_the_protocols_4xx(live_server):
    failures = []
    with httpx.Client(base_url=live_server.url, timeout=60) as client:
        for path, example, field, value in _cases(_openapi(live_server.url)):
            body = {**example, field: value}
            response = client.post(path.replace("{model_name}", "de-en"), json=body)
            key = OPERATIONS[path]
            shaped = response.headers.get("content-type", "").startswith("application/json") and key in response.json()
            if response.status_code not in (400, 422) or not shaped:
                failures.append(f"{path} {field}={value!r}: {response.status_code} {response.text[:200]}")
    assert failures == [], "\n".join(failures)


DEEPL = {"text": ["Ein Hund läuft."], "target_lang": "EN-US"}


@pytest.mark.parametrize(
    "path, body, key",
    [
        ("/v2/translate", {**DEEPL, "split_sentences": {}}, "message"),
        ("/v2/translate", {**DEEPL, "outline_detection": -58800}, "message"),
        ("/translate", {"q": "Ein Hund läuft.", "source": "de", "target": "en", "format": None}, "error"),
    ],
)
def test_the_issue_s_reproductions(api, path, body, key):
    response = api.post(path, json=body)
    assert response.status_code == 400 and set(response.json()) == {key}, response.text
