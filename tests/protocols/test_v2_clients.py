"""Open Inference Protocol v2 through the real client libraries: tritonclient[http] and the kserve SDK's REST
client call health, metadata and infer on the live server and get /v1's translations and embeddings."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import tritonclient.http as triton
from kserve import InferenceRESTClient, InferInput, InferRequest, RESTConfig
from protocol_helpers import v1_translate
from tritonclient.utils import InferenceServerException

TEXTS = ["Ein Mann fährt mit dem Fahrrad durch die Stadt.", "Zwei Hunde spielen im Schnee.", "Hallo"]


@pytest.fixture(scope="module")
def client(host):
    with triton.InferenceServerClient(host) as c:
        yield c


def _text_input(texts: list[str], binary: bool = True) -> triton.InferInput:
    tensor = triton.InferInput("TEXT", [len(texts)], "BYTES")
    tensor.set_data_from_numpy(np.array([t.encode() for t in texts], dtype=object), binary_data=binary)
    return tensor


def _strings(array: np.ndarray) -> list[str]:
    """TRANSLATION as str: tritonclient gives bytes for binary outputs, str for JSON ones."""
    return [t.decode() if isinstance(t, bytes) else t for t in array]


def test_triton_health_and_metadata(client):
    assert client.is_server_live() and client.is_server_ready()
    server = client.get_server_metadata()
    assert server["name"] == "mtserve" and "binary_tensor_data" in server["extensions"]
    assert client.is_model_ready("de-en") and client.is_model_ready("de-en-embed")
    assert client.is_model_ready("de-en", model_version="1")
    meta = client.get_model_metadata("de-en")
    assert meta["versions"] == ["1"]
    assert meta["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [-1]}]
    assert [(o["name"], o["datatype"], o["shape"]) for o in meta["outputs"]] == [
        ("TRANSLATION", "BYTES", [-1]),
        ("SCORE", "FP32", [-1]),
        ("WARNINGS", "BYTES", [-1]),
    ]
    embed = client.get_model_metadata("de-en-embed", model_version="1")
    [(name, datatype, shape)] = [(o["name"], o["datatype"], o["shape"]) for o in embed["outputs"]]
    assert name == "EMBEDDING" and datatype == "FP32" and len(shape) == 2 and shape[1] > 0
    index = client.get_model_repository_index()
    assert {m["name"] for m in index} >= {"de-en", "de-en-embed"}


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_triton_infer_equals_v1(client, api, binary):
    outputs = [triton.InferRequestedOutput(n, binary_data=binary) for n in ("TRANSLATION", "SCORE")]
    result = client.infer("de-en", [_text_input(TEXTS, binary)], outputs=outputs)
    expected = v1_translate(api, TEXTS)
    assert _strings(result.as_numpy("TRANSLATION")) == [t["text"] for t in expected]
    np.testing.assert_allclose(result.as_numpy("SCORE"), [t["score"] for t in expected], rtol=1e-5, atol=1e-5)
    assert result.as_numpy("SCORE").dtype == np.float32
    assert result.get_response()["model_version"] == "1"


def test_triton_parameters_beam_and_max_length(client, api):
    result = client.infer(
        "de-en", [_text_input(TEXTS)], parameters={"beam_size": 1, "max_length": 3}, model_version="1"
    )
    expected = v1_translate(api, TEXTS, beam_size=1, max_length=3)
    assert _strings(result.as_numpy("TRANSLATION")) == [t["text"] for t in expected]


def test_triton_embeddings_equal_v1(client, api):
    result = client.infer("de-en-embed", [_text_input(TEXTS)], parameters={"pooling": "max"})
    expected = api.post("/v1/embed", json={"texts": TEXTS, "pooling": "max"}).json()["embeddings"]
    vectors = result.as_numpy("EMBEDDING")
    assert vectors.shape == (len(TEXTS), len(expected[0])) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, expected, atol=1e-5)


def test_triton_paragraphs_keep_their_lines(client):
    texts = ["Ein Hund läuft. Eine Katze schläft.\n\nZweiter Absatz.\n", "eins\nzwei\ndrei"]
    out = _strings(client.infer("de-en", [_text_input(texts)]).as_numpy("TRANSLATION"))
    assert [len(t.splitlines()) for t in out] == [3, 3] and out[0].endswith("\n") and "\n\n" in out[0]


def test_triton_errors(client):
    with pytest.raises(InferenceServerException) as info:
        client.infer("de-en", [_text_input(["x"])], model_version="2")
    assert info.value.status() == "404" and "version" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        client.get_model_metadata("no-such-model")
    assert info.value.status() == "404"
    with pytest.raises(InferenceServerException) as info:
        client.infer("de-en", [_text_input(["x"])], outputs=[triton.InferRequestedOutput("EMBEDDING")])
    assert info.value.status() == "400" and "no output EMBEDDING" in info.value.message()


def test_kserve_rest_client(live_server, api):
    async def run():
        client = InferenceRESTClient(RESTConfig(protocol="v2", timeout=60))
        try:
            assert await client.is_server_live(live_server.url)
            assert await client.is_server_ready(live_server.url)
            assert await client.is_model_ready(live_server.url, "de-en")
            request = InferRequest(
                "de-en", [InferInput("TEXT", [len(TEXTS)], "BYTES", TEXTS)], parameters={"beam_size": 2}
            )
            response = await client.infer(live_server.url, request, model_name="de-en")
            binary_input = InferInput("TEXT", [len(TEXTS)], "BYTES")
            binary_input.set_data_from_numpy(np.array([t.encode() for t in TEXTS], dtype=object), binary_data=True)
            embedded = await client.infer(live_server.url, InferRequest("de-en-embed", [binary_input]), "de-en-embed")
            return response, embedded
        finally:
            await client.close()

    response, embedded = asyncio.run(run())
    outputs = {o.name: o for o in response.outputs}
    expected = v1_translate(api, TEXTS, beam_size=2)
    assert list(outputs["TRANSLATION"].data) == [t["text"] for t in expected]
    np.testing.assert_allclose(outputs["SCORE"].data, [t["score"] for t in expected], rtol=1e-5, atol=1e-5)
    [vectors] = embedded.outputs
    assert vectors.name == "EMBEDDING" and vectors.shape[0] == len(TEXTS)
