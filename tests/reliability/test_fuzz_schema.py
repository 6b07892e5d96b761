"""Schema fuzzing: schemathesis generates requests from the live server's /openapi.json, valid and invalid.

Every operation gets positive (schema-valid) and negative (schema-violating) cases, at least 1000 in all.
No response may be a 5xx, use an undocumented status or content type, miss a documented header or break
its documented schema; invalid data must be refused with a 4xx; valid data may only be refused for a
reason the schema cannot express (token count, n-best vs beam, layer/head range, unknown model name,
a deadline shorter than the work).
"""

from __future__ import annotations

import os

import httpx
import pytest
import schemathesis
from fuzz_checks import no_server_error
from hypothesis import HealthCheck, Phase, given, seed, settings
from reliability_helpers import SMALL_LIMITS, start_server
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

# Per operation and generation mode: 3 POST x 2 x 180 = 1080 cases on the POSTs. Deterministic in CI; for a deeper
# search set MT_FUZZ_SEED (random exploration from that seed) and MT_FUZZ_EXAMPLES (cases per POST and mode).
FUZZ_SEED = os.environ.get("MT_FUZZ_SEED")
# MT_FUZZ_PATHS=/v2,/translate: only operations whose path starts with one of these (a quicker look at some)
FUZZ_PATHS = tuple(p for p in os.environ.get("MT_FUZZ_PATHS", "").split(",") if p)
EXAMPLES = {"POST": int(os.environ.get("MT_FUZZ_EXAMPLES", "180")), "GET": 20}
MIN_CASES = 1000
# Refusals of schema-valid input the JSON schema cannot express (messages from the service).
SEMANTIC_422 = (
    "subword tokens; the limit is",
    "must not exceed beam_size",
    "out of range: this model has",
    "this server translates",  # a language pair (source_language / target_language) no loaded model serves
    # glossaries (docs/glossaries.md): rules on terms a JSON schema cannot state
    "duplicate source term",
    "empty term",
    "needs at least one entry",
    "needs a name",
    "holds a tab or line break",
    "each line needs a source term",
    "do_not_translate span",
    "characters; the limit is",
    "entries; split the glossary",
)
# The v2 and LibreTranslate endpoints answer {"error": ...} with 400: refusals of schema-valid input the schema
# cannot state (tensor shape against its data, an output of the other view, binary_data_size without the binary
# extension, data items that are not strings, limits on list items, a language pair nobody serves).
SEMANTIC_400 = (
    "subword tokens; the limit is",
    "but",  # "input TEXT has shape [2] but 1 elements", "binary_data_size is 3 but 0 bytes follow the header"
    "has no output",
    "has both data and binary_data_size",
    "has no data",
    "must be a string",
    "elements; at most",
    "characters; at most",
    "exceeds text limit",
    "no model translates",
    "is not valid Unicode",
    # the DeepL API ({"message": ...}): a language code nobody serves, formality without prefer_, the one model type,
    # more texts than MT_MAX_TEXTS_TRANSLATE, XML that is not well-formed
    "Value for 'target_lang' not supported",
    "Value for 'source_lang' not supported",
    "'formality' is not supported for given 'target_lang'",
    "Value for 'model_type' not supported. This server has one model",
    "Too many texts",
    "not well-formed",
    "could not be detected",
    # DeepL glossaries and documents: entries the schema cannot judge (duplicates, empty terms, lines without two
    # fields), a glossary without source_lang, file content and names (a type not served, a corrupt file)
    "Value for 'entries' not supported",
    "requires the source_lang parameter",
    "The glossary is for",
    "is not the document's source_lang",
    "Value for 'output_format' not supported",
)
DEEPL_RESOURCES = ("/v2/glossaries", "/v2/glossary-language-pairs", "/v2/document")
KNOWN_V2_MODELS = {"de-en", "de-en-embed"}
ADMIN_PATHS = {
    "/v1/models/{name}/load",
    "/v2/repository/models/{model_name}/load",
    "/v2/repository/models/{model_name}/unload",
}
ADMIN = {"X-Admin-Key": "fuzz-admin"}
DEEPL_PATHS = ("/v2/translate", "/v2/languages", "/v2/usage")


def _protocol(path: str) -> bool:
    return path.startswith("/v2") or path in ("/translate", "/detect", "/languages")


@schemathesis.check
def valid_data_accepted(ctx, response, case) -> None:
    """Schema-valid requests are answered, or refused only for a documented reason the schema cannot state."""
    if case.meta is None or not case.meta.generation.mode.is_positive:
        return
    status = response.status_code
    body = case.body if isinstance(case.body, dict) else {}
    if status in (200, 201, 204):  # answered, created (a glossary), deleted
        return
    if status == 403 and case.operation.path in ADMIN_PATHS:
        assert "admin key" in response.text, response.text  # the fuzzer never sends X-Admin-Key
        return
    if case.operation.path.startswith(DEEPL_RESOURCES) or case.operation.path == "/v2/translate":
        message = response.json().get("message", "") if status >= 400 else ""
        if status == 404 and message in ("Glossary not found.", "Document not found."):
            return  # an id the schema cannot know
        if status == 456 and "MT_GLOSSARIES_PER_KEY" in message:
            return
        if status in (413, 415) and case.operation.path == "/v2/document":
            return  # the file's size or type (its name and content), which the schema cannot state
    if _protocol(case.operation.path):
        if status == 404:
            params = case.path_parameters or {}
            unknown = params.get("model_name") not in KNOWN_V2_MODELS or params.get("model_version", "1") != "1"
            assert unknown, f"404 for a known model: {response.text}"
            return
        if status == 400:
            answer = response.json()
            deepl = case.operation.path in DEEPL_PATHS or case.operation.path.startswith(DEEPL_RESOURCES)
            message = answer["message"] if deepl else answer["error"]
            assert any(p in message for p in SEMANTIC_400), f"valid data refused: {message}"
            return
        if status == 504:
            return
        raise AssertionError(f"valid data answered {status}: {response.text[:500]}")
    if case.operation.path.startswith(("/v1/documents", "/translate_file", "/download_file")):
        if status == 404:
            assert any(p in response.text for p in ("no document job", "no model", "not found")), response.text
            return
        if status in (400, 413, 415, 409):
            return  # the file's content, size or type (which the schema cannot state), or a job not done yet
    if status == 404:
        if body.get("glossary_id") is not None or "glossary_id" in (case.path_parameters or {}):
            assert "no glossary" in response.text, response.text  # an id the schema cannot know
            return
        assert body.get("model") not in (None, "de-en"), f"404 for a known model: {response.text}"
        return
    if status == 409 and case.operation.path == "/v1/glossaries":
        assert "MT_GLOSSARIES_PER_KEY" in response.text, response.text
        return
    if status == 422:
        messages = [error["msg"] for error in response.json()["detail"]]
        assert all(any(p in m for p in SEMANTIC_422) for m in messages), f"valid data refused: {messages}"
        return
    if status == 504:
        return  # judged by no_server_error
    raise AssertionError(f"valid data answered {status}: {response.text[:500]}")


CHECKS = [
    no_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    valid_data_accepted,
]


@pytest.fixture(scope="module")
def fuzz_server(tiny_repository, tmp_path_factory):
    log_path = tmp_path_factory.mktemp("fuzz") / "service.log"
    env = {**SMALL_LIMITS, "MT_MAX_WAIT_MS": "1", "MT_ADMIN_KEY": ADMIN["X-Admin-Key"]}
    server = start_server(tiny_repository, {**env, "MT_STATE_DIR": str(log_path.parent / "state")}, log_path)
    yield server
    server.stop()


def _fuzz(operation, mode, base_url: str, counts: dict[str, int]) -> None:
    label = f"{operation.method.upper()} {operation.path} {mode.value}"
    counts[label] = 0
    print("fuzzing", label, flush=True)

    @settings(
        max_examples=EXAMPLES.get(operation.method.upper(), 20),
        deadline=None,
        database=None,
        derandomize=FUZZ_SEED is None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        counts[label] += 1
        try:
            case.call_and_validate(base_url=base_url, checks=CHECKS, timeout=30)
        except Exception as exc:
            # printed first: schemathesis's negative strategy may not replay the same case, and hypothesis then
            # reports only "FlakyStrategyDefinition", hiding what failed
            body = repr(case.body)[:500]
            print(f"failing case: {label} path={case.path_parameters} query={case.query} body={body}: {exc!r}")
            raise

    if FUZZ_SEED is not None:
        run = seed(int(FUZZ_SEED))(run)
    run()


def test_fuzz_every_operation(fuzz_server):
    schema = schemathesis.openapi.from_url(fuzz_server.url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    paths = {op.path for op in operations}
    assert {"/v1/translate", "/v1/embed", "/v1/attention", "/v1/models", "/healthz", "/readyz", "/metrics"} <= paths
    versioned = "/v2/models/{model_name}/versions/{model_version}"
    assert {"/v2", "/v2/models/{model_name}/infer", versioned, versioned + "/infer"} <= paths
    assert {"/translate", "/detect", "/languages"} <= paths
    assert {"/v2/models/stats", "/v2/models/{model_name}/stats", versioned + "/stats"} <= paths
    assert {"/v2/repository/index", "/v2/repository/models/{model_name}/load"} <= paths
    assert set(DEEPL_PATHS) <= paths
    counts: dict[str, int] = {}
    for operation in operations:
        if FUZZ_PATHS and not operation.path.startswith(FUZZ_PATHS):
            continue
        _fuzz(operation, GenerationMode.POSITIVE, fuzz_server.url, counts)
        has_input = operation.body or operation.path_parameters or operation.query
        if operation.method.upper() == "POST" and has_input:  # operations without parameters have no invalid input
            _fuzz(operation, GenerationMode.NEGATIVE, fuzz_server.url, counts)
    total = sum(counts.values())
    print("fuzz cases per operation:", counts, "total", total)
    assert total >= MIN_CASES or FUZZ_PATHS, counts
    assert fuzz_server.process.poll() is None, "the server died during fuzzing"


# Inputs a JSON-schema generator does not produce: bodies that are not (strict) JSON, lone surrogates,
# NaN / Infinity literals, numbers beyond float range, deep nesting, lists far beyond the limits.
HOSTILE = [
    ("/v1/translate", b'{"texts": ["\\ud800"]}'),
    ("/v1/translate", b'{"texts": ["a"], "model": "\\udfff"}'),
    ("/v1/embed", b'{"texts": ["ok", "\\udbff"]}'),
    ("/v1/attention", b'{"source": "a", "target": "\\ud800"}'),
    ("/v1/translate", b'{"texts": ["a"], "length_penalty": NaN}'),
    ("/v1/translate", b'{"texts": ["a"], "timeout_s": Infinity}'),
    ("/v1/translate", b'{"texts": ["a"], "beam_size": 1e400}'),
    ("/v1/translate", b'{"texts": ["a"], "max_length": 99999999999999999999999999999}'),
    ("/v1/translate", b'{"texts": ["a"], "beam_size": "2"}'),
    ("/v1/translate", b'{"texts": ["a"], "return_alignment": 1}'),
    ("/v1/attention", b'{"source": "a", "layers": [99999999999999999999999]}'),
    ("/v1/attention", b'{"source": "a", "heads": [], "aggregate": "mean"}'),
    ("/v1/translate", b'{"texts": ["a\\u0000b", "\\u202e\\ufeff\\u200b"]}'),
    ("/v1/translate", b"\xff\xfe\x00{"),
    ("/v1/embed", b'{"texts": ["\xc3\x28"]}'),
    ("/v1/translate", b'{"texts": ["a"], "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
    ("/v1/translate", b'{"texts": [' + b'"a",' * 20_000 + b'"a"]}'),
    ("/v1/translate", b""),
    ("/v1/translate", b"null"),
    ("/v1/translate", b'{"texts": ["a"]} trailing'),
]


INFER = "/v2/models/de-en/infer"
TENSOR = b'{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": '
PROTOCOL_HOSTILE = [
    (INFER, b'{"inputs": [' + TENSOR + b'["\\ud800"]}]}'),
    (INFER, b'{"id": "\\udfff", "inputs": [' + TENSOR + b'["a"]}]}'),
    (INFER, b'{"inputs": [' + TENSOR + b"[NaN]}]}"),
    (INFER, b'{"inputs": [' + TENSOR + b"[" * 900 + b'"a"' + b"]" * 900 + b"}]}"),
    (INFER, b'{"inputs": [' + TENSOR + b'["a"]}], "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
    (INFER, b'{"inputs": [' + TENSOR + b'["a"], "parameters": {"binary_data_size": 99999999999999999999}}]}'),
    (INFER, b"\xff\xfe\x00{"),
    (INFER, b""),
    ("/v2/models/de-en-embed/infer", b'{"inputs": [' + TENSOR + b'["\\u0000\\u202e"]}]}'),
    ("/translate", b'{"q": "\\ud800", "source": "de", "target": "en"}'),
    ("/translate", b'{"q": "a", "source": "\\ud800", "target": "en"}'),
    ("/translate", b'{"q": ["<p>a\\u0000<b>b</b>\\ud800</p>"], "source": "de", "target": "en", "format": "html"}'),
    ("/translate", b'{"q": "<" , "source": "auto", "target": "en", "format": "html"}'),
    ("/translate", b'{"q": "a", "source": "de", "target": "en", "alternatives": 1e400}'),
    ("/translate", b'{"q": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
    ("/translate", b"\xc3\x28"),
    ("/detect", b'{"q": "\\udbff"}'),
    ("/detect", b"q=%FF%FE&api_key=%00"),
]


# the repository extension's admin calls, with the admin key, with bodies that must be refused before anything loads
LOAD, UNLOAD = "/v2/repository/models/de-en/load", "/v2/repository/models/de-en/unload"
ADMIN_HOSTILE = [
    (LOAD, b'{"parameters": {"config": "{\\"max_batch_size\\": 8}"}}'),
    (LOAD, b'{"parameters": {"config": "' + b"[" * 5_000 + b'"}}'),
    (LOAD, b'{"parameters": {"config": 7}}'),
    (LOAD, b'{"parameters": {"file:1/model.onnx": "AAAA"}}'),
    (LOAD, b'{"parameters": {"version": "../../etc"}}'),
    (LOAD, b'{"parameters": {"version": 1e400}}'),
    (LOAD, b'{"parameters": []}'),
    (LOAD, b"[1, 2]"),
    (LOAD, b"\xff\xfe{"),
    (LOAD, b'{"parameters": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"),
    ("/v2/repository/models/..%2F..%2Fetc/load", b"{}"),
    ("/v2/repository/models/nope/load", b"{}"),
    ("/v2/repository/models/nope/unload", b"{}"),
    (UNLOAD, b'{"parameters": "x"}'),
    (UNLOAD, b"{not json"),
    ("/v2/repository/index", b"{not json"),
]


@pytest.mark.parametrize("path, body", ADMIN_HOSTILE, ids=[f"{i}" for i in range(len(ADMIN_HOSTILE))])
def test_hostile_admin_bodies_are_refused_and_the_model_serves_on(fuzz_server, path, body):
    headers = {"content-type": "application/json", **ADMIN}
    response = httpx.post(fuzz_server.url + path, content=body, headers=headers, timeout=60)
    assert response.status_code in (400, 404), response.text[:500]
    assert set(response.json()) == {"error"} and "Traceback" not in response.text
    assert httpx.get(fuzz_server.url + "/v2/models/de-en/ready", timeout=10).status_code == 200
    assert fuzz_server.process.poll() is None


@pytest.mark.parametrize("path, body", PROTOCOL_HOSTILE, ids=[f"{i}" for i in range(len(PROTOCOL_HOSTILE))])
def test_hostile_bodies_on_the_other_protocols(fuzz_server, path, body):
    content_type = "application/x-www-form-urlencoded" if b"=" in body[:3] else "application/json"
    response = httpx.post(fuzz_server.url + path, content=body, headers={"content-type": content_type}, timeout=60)
    assert response.status_code in (200, 400, 413), response.text[:500]
    if response.status_code != 200:
        assert set(response.json()) == {"error"} and "Traceback" not in response.text
    assert fuzz_server.process.poll() is None


DEEPL_HOSTILE = [
    b'{"text": ["\\ud800"], "target_lang": "EN-US"}',
    b'{"text": ["a"], "target_lang": "\\udfff"}',
    b'{"text": ["<p>a\\u0000<b>b</b>\\ud800</p>"], "target_lang": "EN-US", "tag_handling": "html"}',
    b'{"text": ["<a>&xxe;</a>"], "target_lang": "EN-US", "tag_handling": "xml"}',
    b'{"text": ["<!DOCTYPE a [<!ENTITY e \\"x\\">]><a>&e;</a>"], "target_lang": "EN-US", "tag_handling": "xml"}',
    b'{"text": ["<"], "target_lang": "EN-US", "tag_handling": "html"}',
    b'{"text": ["a"], "target_lang": "EN-US", "show_billed_characters": NaN}',
    b'{"text": ' + b"[" * 50_000 + b"]" * 50_000 + b', "target_lang": "EN-US"}',
    b'{"text": ["a"], "target_lang": "EN-US", "ignore_tags": [[["x"]]]}',
    b"\xc3\x28",
    b"text=%FF%FE&target_lang=EN-US",
    b"text=a&text=&target_lang=en-us&split_sentences=nonewlines",
]


@pytest.mark.parametrize("body", DEEPL_HOSTILE, ids=[f"{i}" for i in range(len(DEEPL_HOSTILE))])
def test_hostile_bodies_on_the_deepl_api(fuzz_server, body):
    content_type = "application/x-www-form-urlencoded" if body.startswith(b"text=") else "application/json"
    response = httpx.post(
        fuzz_server.url + "/v2/translate", content=body, headers={"content-type": content_type}, timeout=60
    )
    assert response.status_code in (200, 400, 413), response.text[:500]
    if response.status_code != 200:
        assert set(response.json()) == {"message"} and "Traceback" not in response.text
    assert fuzz_server.process.poll() is None


@pytest.mark.parametrize("path, body", HOSTILE, ids=[f"{i}" for i in range(len(HOSTILE))])
def test_hostile_bodies_get_a_4xx_or_an_answer(fuzz_server, path, body):
    headers = {"content-type": "application/json"}
    response = httpx.post(fuzz_server.url + path, content=body, headers=headers, timeout=60)
    assert response.status_code in (200, 413, 422), response.text[:500]
    payload = response.json()  # always JSON, never a stack trace
    if response.status_code != 200:
        assert "detail" in payload and "Traceback" not in response.text
    assert fuzz_server.process.poll() is None
