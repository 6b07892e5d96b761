"""Every error status the API promises, provoked through the real server: 422, 404, 413, 429, 503, 504.

Validation and unknown models use the shared server; limits, queueing, readiness and deadlines use one
'constrained' server (small body and queue limits, a long batching wait, a delayed model load).
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from live_server import LiveServer
from service_http import SAMPLES, post_concurrently, scrape

BODY_LIMIT = 2048
QUEUE_LIMIT = 4
TOKEN_LIMIT = 20
MAX_WAIT_MS = 2000


@pytest.fixture(scope="module")
def constrained(tiny_repository, tmp_path_factory):
    """A server that loads its model after 3 s; the responses it gave while loading are kept in ``.early``."""
    server = LiveServer(
        tiny_repository,
        env={
            "MT_MAX_BODY_BYTES": str(BODY_LIMIT),
            "MT_MAX_QUEUE_SENTENCES": str(QUEUE_LIMIT),
            "MT_MAX_TOKENS_PER_TEXT": str(TOKEN_LIMIT),
            "MT_MAX_WAIT_MS": str(MAX_WAIT_MS),
            "MT_DISPATCH_WHEN_IDLE": "false",
            "MT_LOAD_DELAY_S": "3",
        },
        log_path=tmp_path_factory.mktemp("constrained") / "service.log",
    ).start(wait_ready=False)
    try:
        for _ in range(600):  # up to 60 s for the process to listen
            try:
                if httpx.get(server.url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise TimeoutError(f"constrained server never answered /healthz; log: {server.log()}")
        server.early = {
            "readyz": httpx.get(server.url + "/readyz", timeout=5),
            "translate": httpx.post(server.url + "/v1/translate", json={"texts": [SAMPLES[0]]}, timeout=5),
            "models": httpx.get(server.url + "/v1/models", timeout=5),
        }
        server.wait_ready(60)
        yield server
    finally:
        server.stop()


def detail_text(response: httpx.Response) -> str:
    body = response.json()
    assert set(body) == {"detail"}, body
    detail = body["detail"]
    return detail if isinstance(detail, str) else " ".join(str(e.get("msg")) for e in detail)


# --- 422 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, field, needle",
    [
        ({"texts": "ein mann"}, "texts", "valid list"),
        ({"texts": [1, 2]}, "texts", "valid string"),
        ({"texts": ["x"], "beam_size": "four"}, "beam_size", "valid integer"),
        ({"texts": []}, "texts", "at least 1"),
        ({"texts": ["ein mann"] * 65}, "texts", "at most 64"),
        ({"texts": ["x" * 2001]}, "texts", "at most 2000 characters"),
        ({"texts": ["x"], "beam_size": 9}, "beam_size", "less than or equal to 8"),
        ({"texts": ["x"], "timeout_s": 0}, "timeout_s", "greater than 0"),
        ({"texts": ["x"], "colour": "red"}, "colour", "Extra inputs"),
        ({"text": ["x"]}, "texts", "Field required"),
    ],
)
def test_translate_validation_422(api, body, field, needle):
    response = api.post("/v1/translate", json=body)
    assert response.status_code == 422
    errors = response.json()["detail"]
    assert any(field in map(str, e["loc"]) and needle in e["msg"] for e in errors), errors


def test_num_hypotheses_above_beam_size_422(api):
    response = api.post("/v1/translate", json={"texts": ["x"], "beam_size": 2, "num_hypotheses": 3})
    assert response.status_code == 422
    assert "num_hypotheses (3) must not exceed beam_size (2)" in detail_text(response)


def test_malformed_json_422(api):
    response = api.post("/v1/translate", content=b'{"texts": [', headers={"content-type": "application/json"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "json_invalid"


def test_error_bodies_echo_at_most_100_characters_of_the_input(api):
    long_text = "ab" * 1500  # over MT_MAX_CHARS_PER_TEXT
    response = api.post("/v1/translate", json={"texts": [long_text]})
    assert response.status_code == 422
    assert len(response.text) < 600 and long_text[:200] not in response.text
    [error] = response.json()["detail"]
    assert error["input"].startswith(long_text[:100]) and error["input"].endswith("(3000 characters)")


def test_a_body_without_content_type_is_told_to_send_json(api):
    body = b'{"texts": ["' + b"x" * 500 + b'"]}'
    response = api.post("/v1/translate", content=body, headers={"content-type": ""})
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert "Content-Type: application/json" in error["msg"]
    assert len(error["input"]) < 140  # the raw body is not echoed whole


def test_bad_timeout_header_422(api):
    response = api.post("/v1/translate", json={"texts": ["x"]}, headers={"X-Request-Timeout": "soon"})
    assert response.json()["detail"][0]["loc"] == ["header", "X-Request-Timeout"]
    assert response.status_code == 422
    assert "X-Request-Timeout must be seconds" in detail_text(response)


@pytest.mark.parametrize(
    "path, body, needle",
    [
        ("/v1/embed", {"texts": ["x"], "pooling": "sum"}, "'mean' or 'max'"),
        ("/v1/embed", {"texts": []}, "at least 1"),
        ("/v1/attention", {"source": "x", "kinds": ["self"]}, "'encoder', 'decoder' or 'cross'"),
        ("/v1/attention", {"source": "x", "aggregate": "max"}, "'none' or 'mean'"),
    ],
)
def test_embed_and_attention_validation_422(api, path, body, needle):
    response = api.post(path, json=body)
    assert response.status_code == 422
    assert needle in detail_text(response)


def test_text_over_the_token_limit_names_the_limit(constrained):
    texts = [SAMPLES[0], " ".join(["mann"] * 30)]  # the second has at least 30 subword tokens
    for path, body in (("/v1/translate", {"texts": texts}), ("/v1/embed", {"texts": texts})):
        response = httpx.post(constrained.url + path, json=body, timeout=30)
        assert response.status_code == 422
        [error] = response.json()["detail"]
        assert error["loc"] == ["body", "texts", 1]
        assert f"the limit is {TOKEN_LIMIT}" in error["msg"] and "shorten or split" in error["msg"]
    response = httpx.post(constrained.url + "/v1/attention", json={"source": texts[1]}, timeout=30)
    assert response.status_code == 422
    assert f"the limit is {TOKEN_LIMIT}" in detail_text(response)
    assert response.json()["detail"][0]["loc"] == ["body", "source"]
    response = httpx.post(constrained.url + "/v1/attention", json={"source": texts[0], "target": texts[1]}, timeout=30)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["body", "target"]


def test_model_limit_applies_on_the_default_server(api, manifest):
    limit = manifest["model"]["max_positions"] - 1  # below MT_MAX_TOKENS_PER_TEXT's default of 250
    response = api.post("/v1/translate", json={"texts": [" ".join(["mann"] * 80)]})
    assert response.status_code == 422
    assert f"the limit is {limit}" in detail_text(response)
    [info] = api.get("/v1/models").json()["models"]
    assert info["max_source_subwords"] == limit  # one limit: the one /v1/models reports is the one errors name


# --- 404 --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/translate", {"texts": ["x"], "model": "fr-en"}),
        ("/v1/embed", {"texts": ["x"], "model": "fr-en"}),
        ("/v1/attention", {"source": "x", "model": "fr-en"}),
    ],
)
def test_unknown_model_404(api, path, body):
    response = api.post(path, json=body)
    assert response.status_code == 404
    assert detail_text(response) == "unknown model 'fr-en'; available: ['de-en']"


# --- 413 --------------------------------------------------------------------------------------


def test_body_over_the_limit_413(constrained):
    body = {"texts": ["ein mann spielt " * 90] * 2}  # ~2.9 kB of JSON, each text under the character limit
    response = httpx.post(constrained.url + "/v1/translate", json=body, timeout=30)
    assert response.status_code == 413
    assert f"limit of {BODY_LIMIT} bytes" in detail_text(response)


def test_chunked_body_over_the_limit_413(constrained):
    def chunks():  # no Content-Length: the limit is enforced while reading
        yield b'{"texts": ["'
        for _ in range(40):
            yield b"ein mann spielt im park " * 4
        yield b'"]}'

    response = httpx.post(
        constrained.url + "/v1/translate", content=chunks(), headers={"content-type": "application/json"}, timeout=30
    )
    assert response.status_code == 413
    assert f"limit of {BODY_LIMIT} bytes" in detail_text(response)


def test_body_under_the_limit_is_served(constrained):
    response = httpx.post(constrained.url + "/v1/translate", json={"texts": [SAMPLES[0]], "beam_size": 1}, timeout=30)
    assert response.status_code == 200
    assert response.json()["translations"][0]["text"] == "a man plays"


# --- 429 --------------------------------------------------------------------------------------


def test_full_queue_429_with_retry_after(constrained):
    """A request of QUEUE_LIMIT sentences fills the queue (the batcher waits MAX_WAIT_MS for more); a flood then
    gets 429 until that batch runs."""
    url = constrained.url
    held: dict[str, httpx.Response] = {}
    body = {"texts": [SAMPLES[0], SAMPLES[3]] * (QUEUE_LIMIT // 2), "beam_size": 1}
    holder = threading.Thread(target=lambda: held.update(r=httpx.post(url + "/v1/translate", json=body, timeout=60)))
    holder.start()
    for _ in range(500):
        if scrape(url).value("mt_queue_depth", model="de-en") == QUEUE_LIMIT:
            break
        time.sleep(0.01)
    else:
        raise AssertionError("the holder request never filled the queue")
    flood = post_concurrently(url, "/v1/translate", [{"texts": [SAMPLES[3]], "beam_size": 1}] * 16)
    holder.join(60)
    statuses = [r.status_code for r in flood]
    assert set(statuses) <= {200, 429}
    refused = [r for r in flood if r.status_code == 429]
    assert refused, statuses
    for r in refused:
        assert int(r.headers["Retry-After"]) >= 1
        assert f"the queue is full ({QUEUE_LIMIT} of {QUEUE_LIMIT} sentences waiting)" in detail_text(r)
    assert held["r"].status_code == 200
    assert [t["text"] for t in held["r"].json()["translations"]][0] == "a man plays"
    assert scrape(url).value("mt_requests_total", endpoint="/v1/translate", status="429") >= len(refused)


# --- 503 --------------------------------------------------------------------------------------


def test_not_ready_503_until_the_model_is_loaded(constrained):
    early = constrained.early
    assert early["readyz"].status_code == 503
    assert early["readyz"].json()["status"] == "loading"
    assert early["translate"].status_code == 503
    assert int(early["translate"].headers["Retry-After"]) >= 1
    assert "still loading" in detail_text(early["translate"])
    assert early["models"].status_code == 503
    assert httpx.get(constrained.url + "/readyz").status_code == 200
    response = httpx.post(constrained.url + "/v1/translate", json={"texts": [SAMPLES[0]]}, timeout=30)
    assert response.status_code == 200


# --- 504 --------------------------------------------------------------------------------------


def test_deadline_passing_in_the_queue_504_without_engine_work(constrained):
    """The batcher holds a lone sentence for MAX_WAIT_MS, far beyond a 0.2 s deadline."""
    url = constrained.url
    before = scrape(url)
    response = httpx.post(url + "/v1/translate", json={"texts": [SAMPLES[3]], "timeout_s": 0.2}, timeout=30)
    after = scrape(url)
    assert response.status_code == 504
    assert "deadline passed before its work could start" in detail_text(response)

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert delta("mt_dropped_requests_total", model="de-en", reason="deadline") == 1
    assert delta("mt_batch_size_count", model="de-en") == 0  # no engine batch ran for it
    assert delta("mt_inference_duration_seconds_count", model="de-en") == 0
    assert delta("mt_requests_total", endpoint="/v1/translate", status="504") == 1


# --- client gone --------------------------------------------------------------------------------


def test_client_disconnect_drops_its_queued_work(constrained):
    """A client that gives up while its sentence waits for a batch costs no engine work."""
    url = constrained.url
    before = scrape(url)
    with pytest.raises(httpx.ReadTimeout):  # the batcher holds the sentence for MAX_WAIT_MS; the client leaves first
        httpx.post(url + "/v1/translate", json={"texts": [SAMPLES[3]]}, timeout=httpx.Timeout(30, read=0.5))
    for _ in range(100):
        after = scrape(url)
        dropped = after.value("mt_dropped_requests_total", model="de-en") - before.value(
            "mt_dropped_requests_total", model="de-en"
        )
        if dropped:
            break
        time.sleep(0.05)
    assert dropped == 1
    assert (
        after.value("mt_dropped_requests_total", model="de-en", reason="client_disconnected")
        - before.value("mt_dropped_requests_total", model="de-en", reason="client_disconnected")
        == 1
    )
    assert after.value("mt_queue_depth", model="de-en") == 0  # removed from the queue: no batch will run it
    assert after.value("mt_batch_size_count", model="de-en") == before.value("mt_batch_size_count", model="de-en")
