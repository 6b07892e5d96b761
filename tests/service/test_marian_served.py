"""An imported Marian checkpoint served by the real server beside a model trained here: /v1/models says where each
came from; /v1/translate, /v1/attention, glossaries and the DeepL API answer with transformers' results."""

from __future__ import annotations

import shutil

import httpx
import numpy as np
import pytest
from live_server import LiveServer
from marian_checkpoint import write_checkpoint

from core.bundle import TRAINED_HERE
from export.cli import main
from export.marian import SOURCE

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

TEXTS = ["Der Hund läuft über die Straße.", "Eine Frau liest ein Buch am Morgen.", "Zug nach Berlin."]
MAX_LENGTH = 12  # generated tokens: generate's max_length is one more (the decoder start)


@pytest.fixture(scope="module")
def served(tiny_repository, tmp_path_factory):
    root = tmp_path_factory.mktemp("marian-served")
    checkpoint = write_checkpoint(root / "checkpoint", drop_source_pieces=3)
    repository = root / "repository"
    shutil.copytree(tiny_repository, repository)  # de-en, trained here
    args = ["import-hf", "--from", str(checkpoint), "--name", "marian", "--version", "1"]
    assert main([*args, "--repository", str(repository)]) == 0
    hf = transformers.MarianMTModel.from_pretrained(checkpoint, attn_implementation="eager").eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(checkpoint)
    env = {"MT_DEFAULT_MODEL": "marian"}  # the DeepL API routes de->en to it
    with LiveServer(repository, env=env, log_path=root / "service.log") as server:
        yield server.url, hf, tokenizer


def _generate(hf, tokenizer, text: str) -> list[str]:
    """transformers' greedy translation as target pieces (EOS left out)."""
    with torch.no_grad():
        ids = hf.generate(**tokenizer([text], return_tensors="pt"), max_length=MAX_LENGTH + 1, num_beams=1)[0]
    generated = [i for i in ids.tolist()[1:] if i != hf.config.eos_token_id]
    return tokenizer.convert_ids_to_tokens(generated)


def test_models_say_where_each_came_from(served):
    url, _, _ = served
    models = {m["name"]: m for m in httpx.get(f"{url}/v1/models").json()["models"]}
    assert models["marian"]["source"] == SOURCE
    assert models["de-en"]["source"] == TRAINED_HERE


def test_translations_are_generates(served):
    url, hf, tokenizer = served
    body = {"texts": TEXTS, "model": "marian", "beam_size": 1, "max_length": MAX_LENGTH, "split_sentences": False}
    answer = httpx.post(f"{url}/v1/translate", json=body, timeout=60).json()
    for text, translation in zip(TEXTS, answer["translations"], strict=True):
        assert translation["target_tokens"] == _generate(hf, tokenizer, text), text


@pytest.mark.parametrize("target", [None, "the dog runs over the street"])
def test_attention_is_output_attentions(served, target):
    """The maps of the model's own translation, and of a given target (cut by the bundle's target tokenizer)."""
    url, hf, tokenizer = served
    for text in TEXTS:
        body = {"source": text, "model": "marian", **({"target": target} if target else {})}
        answer = httpx.post(f"{url}/v1/attention", json=body, timeout=60).json()
        assert answer["target_tokens"][0] == "<s>"
        pieces = answer["target_tokens"][1:]
        if target:
            assert pieces == tokenizer.convert_ids_to_tokens(tokenizer(text_target=target).input_ids[:-1])
        decoder_input = [hf.config.decoder_start_token_id, *tokenizer.convert_tokens_to_ids(pieces)]
        with torch.no_grad():
            inputs = tokenizer([text], return_tensors="pt")
            out = hf(**inputs, decoder_input_ids=torch.tensor([decoder_input]), output_attentions=True)
        assert answer["source_tokens"] == tokenizer.convert_ids_to_tokens(inputs.input_ids[0])
        for kind, theirs in (
            ("encoder", out.encoder_attentions),
            ("decoder", out.decoder_attentions),
            ("cross", out.cross_attentions),
        ):
            expected = torch.stack(theirs)[:, 0].numpy()
            np.testing.assert_allclose(np.asarray(answer[kind]), expected, atol=1e-5, err_msg=f"{text}: {kind}")


@pytest.mark.parametrize("beam_size", [1, 4])
def test_glossary_term_is_placed(served, beam_size):
    """The term in the target side's pieces (target.spm's cut), whatever the model would have said. A capitalised
    term has one form (a lower-case one also gets its capitalised form as a second alternative)."""
    url, _, tokenizer = served
    body = {"texts": [TEXTS[2]], "model": "marian", "glossary": {"Berlin": "Berlin"}, "max_length": MAX_LENGTH}
    body["beam_size"] = beam_size
    translation = httpx.post(f"{url}/v1/translate", json=body, timeout=60).json()["translations"][0]
    term = tokenizer.convert_ids_to_tokens(tokenizer(text_target="Berlin").input_ids[:-1])
    tokens = translation["target_tokens"]
    assert any(tokens[i : i + len(term)] == term for i in range(len(tokens))), (term, tokens)
    assert "Berlin" in translation["text"]
    assert not [w for w in translation["warnings"] if w["code"] == "glossary_term_missing"]


def test_deepl_api_serves_it(served):
    url, _, _ = served
    v1 = httpx.post(f"{url}/v1/translate", json={"texts": TEXTS, "model": "marian"}, timeout=60).json()
    deepl = httpx.post(
        f"{url}/v2/translate", json={"text": TEXTS, "source_lang": "DE", "target_lang": "EN-US"}, timeout=60
    )
    assert deepl.status_code == 200, deepl.text
    assert [t["text"] for t in deepl.json()["translations"]] == [t["text"] for t in v1["translations"]]


def test_a_request_without_beam_and_length_gets_the_checkpoints(served):
    # the checkpoint's generation config: num_beams 4, max_length 40 (39 generated tokens); the model trained here
    # names none, and a request without beam_size still gets /v1's 4 there
    url, _, _ = served
    models = {m["name"]: m for m in httpx.get(f"{url}/v1/models").json()["models"]}
    assert models["marian"]["decoding"] == {
        "no_repeat_ngram_size": 0,
        "beam_size": 4,
        "max_length": 39,
        "length_penalty_form": "hf",
        "length_penalty": 1.0,  # generate's default: the checkpoint names none
    }
    assert "beam_size" not in models["de-en"]["decoding"]

    def tokens(model: str, **options) -> list[list[str]]:
        body = {"texts": TEXTS, "model": model, "split_sentences": False, **options}
        answer = httpx.post(f"{url}/v1/translate", json=body, timeout=60)
        assert answer.status_code == 200, answer.text
        return [t["target_tokens"] for t in answer.json()["translations"]]

    assert tokens("marian") == tokens("marian", beam_size=4, max_length=39)
    assert tokens("marian", num_hypotheses=2) == tokens("marian", beam_size=4, max_length=39, num_hypotheses=2)
    assert tokens("de-en") == tokens("de-en", beam_size=4)
