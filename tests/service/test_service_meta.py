"""GET endpoints: /v1/models, health, readiness, /openapi.json (with working examples), /docs and /metrics."""

from __future__ import annotations

import pytest
from service_http import SAMPLES, scrape

POST_ENDPOINTS = ("/v1/translate", "/v1/embed", "/v1/attention")
METRIC_NAMES = (
    "mt_requests_total",
    "mt_request_duration_seconds",
    "mt_queue_wait_seconds",
    "mt_batch_size",
    "mt_inference_duration_seconds",
    "mt_generated_tokens_total",
    "mt_queue_depth",
    "mt_model_info",
)


def test_models_lists_the_loaded_bundle(api, manifest):
    response = api.get("/v1/models")
    assert response.status_code == 200
    body = response.json()
    assert body["default"] == "de-en"
    [info] = body["models"]
    cfg = manifest["model"]
    assert info["name"] == "de-en" and info["version"] == "1"
    assert (info["source_language"], info["target_language"]) == ("de", "en")
    assert info["parameters"] == manifest["parameters"] > 0
    assert info["variant"] in info["variants"]
    assert sorted(info["variants"]) == ["fp32", "int8"]
    assert info["providers"] == ["CPUExecutionProvider"]
    assert info["threads"] == {"intra_op": 1, "inter_op": 1} and info["search"] == "host"  # CPU: host search
    # MT_FUSED_STEP=auto: the tiny bundle's post-norm step is not one the fused operator computes (or, in a clone
    # without `make native`, the library is not built): the graphs run, and /v1/models says why
    assert info["fused_step"] != "fused" and info["fused_step"]
    assert info["max_source_tokens"] == cfg["max_positions"]
    assert info["layers"] == {"encoder": cfg["n_encoder_layers"], "decoder": cfg["n_decoder_layers"]}
    assert info["heads"] == cfg["n_heads"] and info["dimension"] == cfg["d_model"]
    assert info["bleu"] is None or isinstance(info["bleu"], dict)


def test_health_and_readiness(api):
    assert api.get("/healthz").json() == {"status": "alive"}
    ready = api.get("/readyz")
    assert ready.status_code == 200
    assert ready.json() == {"status": "ready", "models": ["de-en"]}


def _request_schema(spec: dict, path: str) -> dict:
    schema = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


@pytest.mark.parametrize("path", POST_ENDPOINTS)
def test_openapi_has_an_example_for_each_post_endpoint_and_it_works(api, path):
    spec = api.get("/openapi.json").json()
    schema = _request_schema(spec, path)
    examples = schema.get("examples")
    assert examples, f"{path}: request body has no examples"
    for example in examples:
        response = api.post(path, json=example)
        assert response.status_code == 200, (example, response.text)
    responses = spec["paths"][path]["post"]["responses"]
    assert {"200", "404", "422", "429", "503", "504"} <= set(responses)


def test_openapi_states_the_limits_from_the_settings(api):
    spec = api.get("/openapi.json").json()
    texts = _request_schema(spec, "/v1/translate")["properties"]["texts"]
    assert texts["maxItems"] == 64 and texts["minItems"] == 1
    assert texts["items"]["maxLength"] == 2000


def test_docs_page(api):
    response = api.get("/docs")
    assert response.status_code == 200
    assert "text/html" in response.headers["content-type"]
    assert "swagger" in response.text.lower() and "/openapi.json" in response.text


def test_metrics_parse_and_name_every_series(api, live_server):
    assert api.post("/v1/translate", json={"texts": SAMPLES[:2], "beam_size": 2}).status_code == 200
    assert api.post("/v1/embed", json={"texts": SAMPLES[:1]}).status_code == 200
    metrics = scrape(live_server.url)
    names = set(metrics.families) | {name for name, _, _ in metrics.samples}
    missing = [n for n in METRIC_NAMES if n not in names]
    assert not missing, f"missing metrics: {missing}"
    assert metrics.label_values("mt_inference_duration_seconds_count", "stage") >= {"encode", "decode"}
    assert metrics.value("mt_inference_duration_seconds_count", stage="decode") >= 1
    assert metrics.value("mt_model_info", model="de-en", version="1", provider="CPUExecutionProvider") == 1
    assert metrics.value("mt_requests_total", endpoint="/v1/translate", model="de-en", status="200") >= 1
    assert metrics.value("mt_request_duration_seconds_count", endpoint="/v1/embed", model="de-en") >= 1
    assert metrics.value("mt_generated_tokens_total", model="de-en") >= 1
    assert metrics.value("mt_queue_wait_seconds_count", model="de-en") >= 2
    assert metrics.value("mt_queue_depth", model="de-en") == 0
    assert metrics.families["mt_batch_size"].type == "histogram"


def test_request_counter_counts_each_status(api, live_server):
    before = scrape(live_server.url)
    assert api.post("/v1/translate", json={"texts": SAMPLES[:1]}).status_code == 200
    assert api.post("/v1/translate", json={"texts": []}).status_code == 422
    after = scrape(live_server.url)
    for status in ("200", "422"):
        labels = {"endpoint": "/v1/translate", "status": status}
        assert after.value("mt_requests_total", **labels) - before.value("mt_requests_total", **labels) == 1


def test_openapi_keeps_the_v1_schema_names(api):
    """The /v1 contract only grows: its schemas keep their names (another API's model of the same class name,
    e.g. LibreTranslate's, would make FastAPI rename both to module-qualified names)."""
    schemas = api.get("/openapi.json").json()["components"]["schemas"]
    v1 = {
        "TranslateRequest",
        "TranslateResponse",
        "TranslationOut",
        "Hypothesis",
        "EmbedRequest",
        "EmbedResponse",
        "AttentionRequest",
        "AttentionResponse",
        "ModelInfo",
        "ModelsResponse",
    }
    assert v1 <= set(schemas), sorted(v1 - set(schemas))
    translate = api.get("/openapi.json").json()["paths"]["/v1/translate"]["post"]["responses"]["200"]
    assert translate["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/TranslateResponse"
