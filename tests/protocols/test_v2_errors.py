"""The v2 protocol's error form ({"error": message}) for bad input, over plain HTTP."""

from __future__ import annotations

import json
import struct

import pytest

GOOD = {"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": ["Ein Hund."]}]}


def _with(**changes) -> dict:
    tensor = {**GOOD["inputs"][0], **changes}
    return {"inputs": [tensor]}


@pytest.mark.parametrize(
    "body, status, needle",
    [
        (b"{not json", 400, "not valid JSON"),
        (b"[1, 2]", 400, "JSON object"),
        (json.dumps({"inputs": []}).encode(), 400, "inputs"),
        (json.dumps(_with(name="INPUT0")).encode(), 400, "inputs.0.name"),
        (json.dumps(_with(datatype="FP32")).encode(), 400, "inputs.0.datatype"),
        (json.dumps(_with(shape=[3])).encode(), 400, "shape [3] but 1 elements"),
        (json.dumps(_with(data=[1])).encode(), 400, "inputs.0.data"),
        (json.dumps(_with(data=None)).encode(), 400, "no data"),
        (json.dumps({**GOOD, "parameters": {"beam_size": 99}}).encode(), 400, "beam_size"),
        (json.dumps({**GOOD, "parameters": {"beam_size": "2"}}).encode(), 400, "beam_size"),
        (json.dumps({**GOOD, "outputs": [{"name": "LOGITS"}]}).encode(), 400, "outputs.0.name"),
        (json.dumps(_with(shape=[70], data=["a"] * 70)).encode(), 400, "at most 64 per request"),
        (json.dumps(_with(data=["Wort " * 600])).encode(), 400, "characters; at most"),
        (json.dumps(_with(data=["Wort " * 300])).encode(), 400, "subword tokens; the limit is"),
        (b'{"inputs": [{"name": "TEXT", "shape": [1], "datatype": "BYTES", "data": [NaN]}]}', 400, "not valid JSON"),
    ],
)
def test_bad_infer_requests(api, body, status, needle):
    response = api.post("/v2/models/de-en/infer", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"} and needle in response.json()["error"], response.text


@pytest.mark.parametrize("timeout", [None, 5_000_000])
def test_a_bad_deadline_header_is_400_even_beside_the_timeout_parameter(api, timeout):
    """The deadline is read as /v1 reads it (service/api/requests.py deadline_s): the protocol's own parameter wins,
    but an invalid X-Request-Timeout is never ignored."""
    body = {**GOOD, "parameters": {"timeout": timeout}} if timeout else GOOD
    response = api.post("/v2/models/de-en/infer", json=body, headers={"X-Request-Timeout": "soon"})
    assert response.status_code == 400 and response.json() == {"error": "header X-Request-Timeout must be seconds"}


@pytest.mark.parametrize(
    "path",
    [
        "/v2/models/nope",
        "/v2/models/nope/ready",
        "/v2/models/de-en/versions/7",
        "/v2/models/de-en-embed/versions/0/ready",
    ],
)
def test_unknown_model_or_version_404(api, path):
    response = api.get(path)
    assert response.status_code == 404 and set(response.json()) == {"error"}


def test_unknown_model_infer_404(api):
    response = api.post("/v2/models/nope/infer", json=GOOD)
    assert response.status_code == 404 and "available" in response.json()["error"]


def test_binary_request_and_response(api):
    """Triton's binary tensor data extension by hand: a JSON header, then length-prefixed UTF-8 elements."""
    texts = ["Ein Hund.", "Grüße"]
    raw = b"".join(struct.pack("<I", len(t.encode())) + t.encode() for t in texts)
    header = json.dumps(
        {
            "inputs": [
                {"name": "TEXT", "shape": [2], "datatype": "BYTES", "parameters": {"binary_data_size": len(raw)}}
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    response = api.post(
        "/v2/models/de-en/infer",
        content=header + raw,
        headers={"content-type": "application/octet-stream", "inference-header-content-length": str(len(header))},
    )
    assert response.status_code == 200, response.text
    length = int(response.headers["inference-header-content-length"])
    meta = json.loads(response.content[:length])
    sizes = [o["parameters"]["binary_data_size"] for o in meta["outputs"]]
    assert [o["name"] for o in meta["outputs"]] == ["TRANSLATION", "SCORE", "WARNINGS"] and sizes[1] == 8
    assert len(response.content) == length + sum(sizes)
    truncated = api.post(
        "/v2/models/de-en/infer",
        content=header + raw[:-1],
        headers={"inference-header-content-length": str(len(header))},
    )
    assert truncated.status_code == 400 and "binary_data_size" in truncated.json()["error"]


def test_server_endpoints(api):
    assert api.get("/v2/health/live").json() == {"live": True}
    assert api.get("/v2/health/ready").json() == {"ready": True}
    assert api.get("/v2").json()["name"] == "mtserve"


@pytest.mark.parametrize(
    "method, path, status",
    [
        ("GET", "/v2/models/de-en/config", 404),
        ("GET", "/v2/models/de-en/trace/setting", 404),
        ("GET", "/v2/repository/models/de-en/load", 405),
        ("GET", "/v2/no/such/path", 404),
        ("GET", "/v2/models/de-en/infer", 405),
        ("DELETE", "/v2", 405),
    ],
)
def test_unrouted_v2_paths_answer_in_the_protocols_error_form(api, method, path, status):
    response = api.request(method, path)
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error"} and path in response.json()["error"]
    if status == 405:
        assert "GET" in response.headers["allow"] or "POST" in response.headers["allow"]


def test_v2_with_a_slash_is_answered_not_redirected(api):
    response = api.get("/v2/", follow_redirects=False)
    assert response.status_code == 200 and response.json() == api.get("/v2").json()


def test_tritonclient_shows_our_message_for_an_unrouted_path(host):
    import tritonclient.http as triton
    from tritonclient.utils import InferenceServerException

    with triton.InferenceServerClient(host) as client, pytest.raises(InferenceServerException) as info:
        client.get_model_config("de-en")
    assert "/v2/models/de-en/config" in str(info.value) and "decoding the response" not in str(info.value)


def test_any_rank_of_n_elements_and_unknown_top_level_fields_are_accepted(api):
    flat = api.post("/v2/models/de-en/infer", json=GOOD).json()
    texts = ["Ein Hund.", "Eine Katze."]
    rank3 = {"inputs": [_with(shape=[1, 2, 1], data=[[["Ein Hund."], ["Eine Katze."]]])["inputs"][0]]}
    answer = api.post("/v2/models/de-en/infer", json={**rank3, "sequence_id": 7, "client_note": "x"})
    assert answer.status_code == 200, answer.text
    output = next(o for o in answer.json()["outputs"] if o["name"] == "TRANSLATION")
    assert output["shape"] == [1, 2, 1] and output["data"][0] == flat["outputs"][0]["data"][0]
    flat3 = api.post("/v2/models/de-en/infer", json=_with(shape=[2, 1, 1], data=texts))
    assert (
        flat3.status_code == 200
        and len(next(o for o in flat3.json()["outputs"] if o["name"] == "TRANSLATION")["data"]) == 2
    )
