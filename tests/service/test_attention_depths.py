"""/v1/attention on a model whose encoder and decoder differ in depth (the shipped de-en version 3: 6 encoder
layers, 3 decoder layers): ``layers`` counts within each kind asked for (issue 55: encoder layers were checked
against the decoder's depth), and docs/viewer.md's bertviz example draws it."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import numpy as np
import pytest
from live_server import LiveServer

ROOT = Path(__file__).resolve().parents[2]
BUNDLE = ROOT / "model_repository" / "de-en" / "3"
SOURCE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."


@pytest.fixture(scope="module")
def deep_server(tmp_path_factory):
    """The shipped de-en version 3 alone (linked, not copied)."""
    root = tmp_path_factory.mktemp("deep")
    (root / "repository" / "de-en").mkdir(parents=True)
    (root / "repository" / "de-en" / "3").symlink_to(BUNDLE, target_is_directory=True)
    with LiveServer(root / "repository", log_path=root / "service.log").start(timeout=240) as server:
        yield server


def attention(server, **body) -> httpx.Response:
    return httpx.post(server.url + "/v1/attention", json={"source": SOURCE, **body}, timeout=120)


def test_the_bundle_is_deeper_in_the_encoder(deep_server):
    [model] = httpx.get(deep_server.url + "/v1/models", timeout=30).json()["models"]
    assert model["layers"] == {"encoder": 6, "decoder": 3}


def test_encoder_layers_count_the_encoders_depth(deep_server):
    response = attention(deep_server, kinds=["encoder"], layers=[4, 5])
    assert response.status_code == 200, response.text
    full = np.asarray(attention(deep_server, kinds=["encoder"]).json()["encoder"])
    assert full.shape[0] == 6
    np.testing.assert_allclose(np.asarray(response.json()["encoder"]), full[[4, 5]], atol=1e-6)


@pytest.mark.parametrize("kinds", [["decoder"], ["cross"], ["encoder", "cross"]])
def test_a_layer_the_decoder_lacks_is_a_422_naming_each_depth(deep_server, kinds):
    response = attention(deep_server, kinds=kinds, layers=[4])
    assert response.status_code == 422
    message = str(response.json()["detail"])
    assert "layers [4] out of range: this model has 3" in message and "encoder 6, decoder 3" in message


def test_the_docs_bertviz_example_draws_the_shipped_model(deep_server):
    pytest.importorskip("IPython")
    bertviz = pytest.importorskip("bertviz")  # the dev extra has it
    torch = pytest.importorskip("torch")
    block = re.search(r"## Attention in bertviz.*?```python\n(.*?)```", (ROOT / "docs/viewer.md").read_text(), re.S)
    code = block.group(1).replace("http://127.0.0.1:8000", deep_server.url)
    assert "from bertviz import model_view\n" in code
    drawn = []

    def model_view(**kwargs):  # bertviz's, its HTML returned instead of displayed in a notebook
        drawn.append(bertviz.model_view(**kwargs, html_action="return").data)

    exec(
        compile(code.replace("from bertviz import model_view\n", ""), "docs/viewer.md", "exec"),
        {"model_view": model_view},
    )
    assert len(drawn) == 2 and "Encoder" in drawn[0] and "Cross" in drawn[1]
    # why two calls: one call with both kinds fails on this model
    found = attention(deep_server).json()
    layers = {kind: [torch.tensor(layer).unsqueeze(0) for layer in found[kind]] for kind in ("encoder", "decoder")}
    with pytest.raises(IndexError):
        bertviz.model_view(
            encoder_attention=layers["encoder"], decoder_attention=layers["decoder"],
            encoder_tokens=found["source_tokens"], decoder_tokens=found["target_tokens"], html_action="return",
        )  # fmt: skip
