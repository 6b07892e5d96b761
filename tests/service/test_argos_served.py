"""An imported Argos package served by the real server beside a model trained here: /v1/models lists it (its decoding
defaults are not all integers: Argos's length penalty 0.2), /v1/translate gives CTranslate2's greedy tokens, a request
that leaves the length penalty out gets the bundle's, a bundle's default beam above MT_MAX_BEAM_SIZE is capped; a
glossary term is placed, /v1/attention answers, the DeepL API serves it."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest
import sentencepiece as spm
from argos_package import convert, write_package
from live_server import LiveServer
from marian_checkpoint import SOURCE_WORDS, sentences, write_checkpoint

from export.argos import SOURCE
from export.cli import main

ctranslate2 = pytest.importorskip("ctranslate2")
pytest.importorskip("transformers")

MAX_BEAM = 3  # MT_MAX_BEAM_SIZE of the server: below the package's default beam (Argos's 4)
MAX_LENGTH = 20
TEXTS = sentences(SOURCE_WORDS, 8, seed=5)


@pytest.fixture(scope="module")
def served(tiny_repository, tmp_path_factory):
    root = tmp_path_factory.mktemp("argos-served")
    checkpoint = write_checkpoint(root / "checkpoint", joint=True, drop_source_pieces=3, eos_bias=2.0)
    ct2 = convert(checkpoint, root / "ct2", "float32")
    package = write_package(checkpoint, ct2, root / "de_en.argosmodel")
    repository = root / "repository"
    shutil.copytree(tiny_repository, repository)  # de-en, trained here
    args = ["import-argos", "--from", str(package), "--name", "argos", "--version", "1"]
    assert main([*args, "--repository", str(repository)]) == 0
    env = {"MT_MAX_BEAM_SIZE": str(MAX_BEAM), "MT_DEFAULT_MODEL": "argos"}  # the DeepL API routes de->en to it
    with LiveServer(repository, env=env, log_path=root / "service.log") as server:
        yield server.url, ct2, spm.SentencePieceProcessor(model_file=str(checkpoint / "source.spm"))


def _post(url: str, **body) -> dict:
    answer = httpx.post(f"{url}/v1/translate", json={"model": "argos", "split_sentences": False, **body}, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_models_list_it_with_its_defaults(served):
    url, _, _ = served
    answer = httpx.get(f"{url}/v1/models")
    assert answer.status_code == 200, answer.text  # a float default (length_penalty 0.2) once made this a 500
    models = {m["name"]: m for m in answer.json()["models"]}
    assert models["argos"]["source"] == SOURCE
    decoding = models["argos"]["decoding"]
    assert decoding["length_penalty"] == 0.2 and decoding["length_penalty_form"] == "hf"
    assert decoding["beam_size"] == MAX_BEAM  # the package's 4, capped
    assert "length_penalty" not in models["de-en"]["decoding"]


def test_greedy_translations_are_ctranslate2s(served):
    url, ct2, sp = served
    translations = _post(url, texts=TEXTS, beam_size=1, max_length=MAX_LENGTH)["translations"]
    translator = ctranslate2.Translator(str(ct2), compute_type="float32", intra_threads=1)
    pieces = [sp.encode(t, out_type=str) for t in TEXTS]  # as Argos feeds them: no </s>
    theirs = translator.translate_batch(pieces, beam_size=1, max_decoding_length=MAX_LENGTH, min_decoding_length=0)
    vocabulary = json.loads((ct2 / "shared_vocabulary.json").read_text(encoding="utf-8"))
    assert [t["target_tokens"] for t in translations] == [r.hypotheses[0] for r in theirs]
    assert set(vocabulary) >= {p for t in translations for p in t["target_tokens"]}


def test_left_out_options_are_the_bundles(served):
    """No beam, no length penalty: the bundle's (beam capped at MAX_BEAM, penalty 0.2), not /v1's 4 and 0.6: the
    n-best lists equal those asked for with 0.2 and differ from /v1's old default 0.6 on some text."""
    url, _, _ = served

    def nbest(**options) -> list[list]:
        body = {"texts": TEXTS, "num_hypotheses": MAX_BEAM, "max_length": MAX_LENGTH, **options}
        return [t["hypotheses"] for t in _post(url, **body)["translations"]]

    default = nbest()
    assert default == nbest(beam_size=MAX_BEAM, length_penalty=0.2)
    assert default != nbest(beam_size=MAX_BEAM, length_penalty=0.6)


def test_glossary_attention_and_deepl(served):
    url, _, sp = served
    text = "Der Zug fährt nach Berlin."
    glossary = _post(url, texts=[text], glossary={"Berlin": "Berlin"}, max_length=MAX_LENGTH)["translations"][0]
    assert "Berlin" in glossary["text"]
    assert not [w for w in glossary["warnings"] if w["code"] == "glossary_term_missing"]
    attention = httpx.post(f"{url}/v1/attention", json={"source": text, "model": "argos"}, timeout=60)
    assert attention.status_code == 200, attention.text
    maps = attention.json()
    assert maps["source_tokens"] == [*sp.encode(text, out_type=str), "</s>"]  # the EOS is shown, masked
    cross = maps["cross"]  # [layers][heads][target][source]: no weight on the masked EOS
    assert all(row[-1] == 0.0 for layer in cross for head in layer for row in head)
    v1 = _post(url, texts=TEXTS)["translations"]
    deepl = httpx.post(f"{url}/v2/translate", json={"text": TEXTS, "source_lang": "DE", "target_lang": "EN-US"})
    assert deepl.status_code == 200, deepl.text
    assert [t["text"] for t in deepl.json()["translations"]] == [t["text"] for t in v1]
