"""A multilingual bundle served beside a one-direction one (issue 60): each direction's tag put before the source ids
the engine receives (and never shown as a source token), pivoted directions in two legs answering ``pivot: "en"``,
every protocol's listings, and an unserved direction refused with what is served.

The repository holds the tiny trained de-en bundle (an old manifest, no ``directions``; the default model) and the
tiny trained multilingual bundle of tests/multi_bundle.py (de-en, en-de, zh-en, en-zh; de-zh and zh-de by pivot).
The server runs tests/source_recorder.py, which logs every source's ids as the engine gets them.
"""

from __future__ import annotations

import json
import shutil

import deepl
import httpx
import pytest
from libretranslatepy import LibreTranslateAPI
from live_server import LiveServer
from multi_bundle import LEXICON, NAME, cached_multi_bundle, source_digest
from source_recorder import COMMAND

from core.directions import tag_ids
from core.tokenizer import EOS_ID, Tokenizer

GERMAN, ENGLISH, CHINESE = "hund katze ball", "dog cat ball", "狗猫球"
TEXT = {"de": GERMAN, "en": ENGLISH, "zh": CHINESE}


@pytest.fixture(scope="module")
def repository(request, tiny_repository, tmp_path_factory):
    """The tiny multilingual bundle beside the tiny de-en one."""
    from pathlib import Path

    work = tmp_path_factory.mktemp("multi")
    repository = cached_multi_bundle(Path(request.config.cache.mkdir("mtserve")), work, source_digest())
    shutil.copytree(tiny_repository / "de-en", repository / "de-en")
    return repository


@pytest.fixture(scope="module")
def served(repository, tmp_path_factory):
    """(server, the recorder's log, the multilingual bundle's tokenizer)."""
    work = tmp_path_factory.mktemp("multi-served")
    log = work / "sources.jsonl"
    env = {"MT_TEST_SOURCE_LOG": str(log), "MT_SCHEDULER": "dynamic", "MT_MAX_WAIT_MS": "5"}
    server = LiveServer(repository, env=env, command=COMMAND, log_path=work / "service.log").start(timeout=240)
    yield server, log, Tokenizer(repository / NAME / "1" / "tokenizer.model")
    server.stop()


@pytest.fixture(scope="module")
def api(served):
    with httpx.Client(base_url=served[0].url, timeout=60.0) as client:
        yield client


def recorded(log, since: int) -> list[dict]:
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    return [json.loads(line) for line in lines[since:]]


def mark(log) -> int:
    return len(log.read_text(encoding="utf-8").splitlines()) if log.exists() else 0


def tagged_ids(tokenizer: Tokenizer, target: str, text: str) -> list[int]:
    """The ids training gave a source of ``text`` into ``target``: model/directions.py's tagged line, tokenized."""
    from model.directions import tagged

    return tokenizer.encode(tagged(text, f"xx-{target}")) + [EOS_ID]


def translate(api, text: str, source: str | None, target: str | None, **extra) -> httpx.Response:
    body = {"texts": [text], "source_language": source, "target_language": target, "beam_size": 1, **extra}
    return api.post("/v1/translate", json={k: v for k, v in body.items() if v is not None})


def words_of(text: str, language: str) -> list[str]:
    if language == "zh":
        return [w for w in LEXICON["zh"] if w in text]
    return text.split()


@pytest.mark.parametrize(("source", "target"), [("en", "de"), ("zh", "en"), ("en", "zh")])
def test_each_direction_puts_its_tag_before_the_source(api, served, source, target):
    _, log, tokenizer = served
    since = mark(log)
    answer = translate(api, TEXT[source], source, target)
    assert answer.status_code == 200, answer.text
    [t] = answer.json()["translations"]
    assert t["model"] == NAME
    [got] = recorded(log, since)
    assert got["model"] == NAME
    assert got["ids"] == tagged_ids(tokenizer, target, TEXT[source])  # the tag's pieces, then the text's
    tag = tag_ids(tokenizer.encode, tokenizer.sp.piece_to_id, f"<2{target}>")
    assert got["ids"][: len(tag)] == tag and tokenizer.pieces(tag)[-1] == f"<2{target}>"
    # the answer shows the source's own tokens only
    assert t["source_tokens"] == tokenizer.pieces(got["ids"][len(tag) :])
    assert not any(p.startswith("<2") for p in t["source_tokens"])
    # the trained model followed the tag: its words are the target language's
    produced = words_of(t["text"], target)
    assert produced and all(w in LEXICON[target] for w in produced), t["text"]
    assert "pivot" not in t


def test_the_old_bundle_answers_de_en_as_before(api, served):
    _, log, _ = served
    since = mark(log)
    [t] = translate(api, GERMAN, "de", "en").json()["translations"]
    assert t["model"] == "de-en"  # the default model serves its pair
    [got] = recorded(log, since)
    assert got["model"] == "de-en"
    assert t["source_tokens"][-1] == "</s>" and len(got["ids"]) == len(t["source_tokens"])  # no tag
    assert "pivot" not in t
    # the multilingual model in its own pair, asked by name: tagged with <2en>
    since = mark(log)
    [t] = api.post("/v1/translate", json={"texts": [GERMAN], "model": NAME}).json()["translations"]
    [got] = recorded(log, since)
    assert got["model"] == NAME and got["ids"] == tagged_ids(served[2], "en", GERMAN)
    assert set(t["text"].split()) <= set(LEXICON["en"]), t["text"]


def test_a_pivoted_direction_runs_two_legs_and_says_so(api, served):
    _, log, tokenizer = served
    since = mark(log)
    answer = translate(api, GERMAN, "de", "zh")
    assert answer.status_code == 200, answer.text
    [t] = answer.json()["translations"]
    assert t["pivot"] == "en" and t["model"] == NAME
    assert set(t["pivot_text"].split()) <= set(LEXICON["en"]), t["pivot_text"]
    first, second = recorded(log, since)
    assert first["ids"] == tagged_ids(tokenizer, "en", GERMAN)  # German into English
    assert second["ids"] == tagged_ids(tokenizer, "zh", t["pivot_text"])  # then that English into Chinese
    assert words_of(t["text"], "zh"), t["text"]
    assert t["source_tokens"] == tokenizer.pieces(tokenizer.encode(GERMAN) + [EOS_ID])  # the source's, untagged
    [z] = translate(api, CHINESE, "zh", "de").json()["translations"]
    assert z["pivot"] == "en" and set(z["text"].split()) <= set(LEXICON["de"]), z


def test_attention_and_alignment_of_a_pivoted_direction_are_refused(api, served):
    for field in ("return_alignment", "return_attention"):
        answer = translate(api, GERMAN, "de", "zh", **{field: True})
        assert answer.status_code == 422
        [detail] = answer.json()["detail"]
        assert detail["loc"] == ["body", field] and "pivot through en" in detail["msg"], detail
    answer = api.post("/v1/attention", json={"source": GERMAN, "source_language": "de", "target_language": "zh"})
    assert answer.status_code == 422 and "pivot" in answer.json()["detail"][0]["msg"]


def test_attention_and_alignment_of_a_tagged_direction_leave_the_tag_out(api, served):
    tokenizer = served[2]
    own = tokenizer.pieces(tokenizer.encode(ENGLISH) + [EOS_ID])
    body = {"source": ENGLISH, "source_language": "en", "target_language": "zh", "kinds": ["encoder", "cross"]}
    a = api.post("/v1/attention", json=body).json()
    assert a["source_tokens"] == own
    assert len(a["encoder"][0][0]) == len(own) and len(a["encoder"][0][0][0]) == len(own)
    assert all(len(row) == len(own) for row in a["cross"][0][0])
    [t] = translate(api, ENGLISH, "en", "zh", return_alignment=True).json()["translations"]
    assert t["source_tokens"] == own
    assert t["alignment"] and all(0 <= s < len(own) - 1 for s, _ in t["alignment"])


def test_auto_detection_covers_every_served_source(api):
    answer = api.post(
        "/v1/translate",
        json={"texts": ["der hund spielt im park", ENGLISH], "source_language": "auto", "target_language": "zh"},
    )
    assert answer.status_code == 200, answer.text
    de, en = answer.json()["translations"]
    assert (de["detected_language"], de["pivot"]) == ("de", "en")
    assert en["detected_language"] == "en" and "pivot" not in en


def test_an_unserved_direction_is_refused_with_what_is_served(api):
    answer = translate(api, GERMAN, "de", "fr")
    assert answer.status_code == 422
    message = answer.json()["detail"][0]["msg"]
    assert "no model translates de->fr" in message
    for pair in ("de->en (de-en)", "en->de (multi)", "de->zh (multi)", "zh->de (multi)", "en->zh (multi)"):
        assert pair in message, message
    answer = api.post("/v1/translate", json={"texts": [GERMAN], "model": "de-en", "target_language": "zh"})
    assert answer.status_code == 422 and "model de-en translates de->en, not target_language zh" in answer.text


def test_models_list_each_bundles_directions(api):
    models = {m["name"]: m for m in api.get("/v1/models").json()["models"]}
    assert models["de-en"]["directions"] == [{"source_language": "de", "target_language": "en"}]
    multi = models[NAME]["directions"]
    assert multi[0] == {"source_language": "de", "target_language": "en", "tag": "<2en>"}
    assert {"source_language": "de", "target_language": "zh", "pivot": "en"} in multi
    assert len(multi) == 6


def test_libretranslate_lists_and_translates_every_direction(served):
    lt = LibreTranslateAPI(served[0].url + "/")
    languages = {entry["code"]: entry["targets"] for entry in lt.languages()}
    assert languages == {"de": ["en", "zh"], "en": ["de", "zh"], "zh": ["de", "en"]}
    assert set(lt.translate(ENGLISH, "en", "de").split()) <= set(LEXICON["de"])
    assert words_of(lt.translate(GERMAN, "de", "zh"), "zh")


def test_deepl_lists_and_translates_every_direction(served):
    translator = deepl.Translator("any", server_url=served[0].url, send_platform_info=False)
    assert {lang.code for lang in translator.get_source_languages()} == {"DE", "EN", "ZH"}
    assert {"DE", "ZH", "EN-GB", "EN-US"} <= {lang.code for lang in translator.get_target_languages()}
    assert set(translator.translate_text(ENGLISH, source_lang="EN", target_lang="DE").text.split()) <= set(
        LEXICON["de"]
    )
    assert words_of(translator.translate_text(GERMAN, source_lang="DE", target_lang="ZH").text, "zh")
    english = translator.translate_text(CHINESE, source_lang="ZH", target_lang="EN-US").text
    assert set(english.split()) <= set(LEXICON["en"])
    with pytest.raises(deepl.DeepLException, match="target_lang"):
        translator.translate_text(GERMAN, source_lang="DE", target_lang="FR")


def test_open_inference_protocol_takes_the_direction_as_parameters(api):
    def infer(text: str, **parameters) -> httpx.Response:
        body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1], "data": [text]}]}
        return api.post(f"/v2/models/{NAME}/infer", json={**body, "parameters": parameters})

    answer = infer(ENGLISH, source_language="en", target_language="de")
    assert answer.status_code == 200, answer.text
    assert set(answer.json()["outputs"][0]["data"][0].split()) <= set(LEXICON["de"])
    pivoted = infer(GERMAN, source_language="de", target_language="zh").json()["outputs"][0]["data"][0]
    assert words_of(pivoted, "zh"), pivoted
    refused = infer(GERMAN, source_language="de", target_language="fr")
    assert refused.status_code == 400 and "not among its directions" in refused.text  # the protocol's 4xx


def test_glossaries_take_the_new_pairs(api):
    created = api.post(
        "/v1/glossaries",
        json={"name": "en-de", "source_language": "en", "target_language": "de", "entries": {"dog": "katze"}},
    )
    assert created.status_code in (200, 201), created.text
    [t] = translate(api, "dog ball", "en", "de", glossary_id=created.json()["glossary_id"]).json()["translations"]
    assert "katze" in t["text"].lower().split(), t  # the term (German nouns capitalized)


@pytest.mark.parametrize(("source", "target"), [("en", "zh"), ("de", "zh")])
def test_documents_translate_in_new_and_pivoted_directions(api, source, target):
    import time

    data = f"{TEXT[source]}\n\n{TEXT[source]}\n".encode()
    fields = {"source_language": source, "target_language": target}
    accepted = api.post("/v1/documents", files={"file": ("note.txt", data)}, data=fields)
    assert accepted.status_code == 202, accepted.text
    deadline = time.monotonic() + 120
    while (status := api.get(f"/v1/documents/{accepted.json()['id']}").json())["status"] not in ("done", "failed"):
        assert time.monotonic() < deadline, status
        time.sleep(0.1)
    assert status["status"] == "done" and status["progress"] == 1.0, status
    assert (status["source_language"], status["target_language"]) == (source, target)
    assert status["sentences_done"] == status["sentences_total"] == 2
    text = api.get(status["result_url"]).content.decode()
    assert len(words_of(text, "zh")) >= 2 and not set(text.split()) & set(LEXICON[source]), text


def test_a_glossary_holds_through_a_pivot(api):
    created = api.post(
        "/v1/glossaries",
        json={"name": "de-zh", "source_language": "de", "target_language": "zh", "entries": {"ball": "足球场"}},
    )
    assert created.status_code in (200, 201), created.text
    plain = translate(api, "hund ball", "de", "zh").json()["translations"][0]
    assert "足球场" not in plain["text"], plain
    [t] = translate(api, "hund ball", "de", "zh", glossary_id=created.json()["glossary_id"]).json()["translations"]
    assert t["pivot"] == "en" and "足球场" in t["pivot_text"] and "足球场" in t["text"], t
    assert not [w for w in t["warnings"] if w["code"].endswith("_missing")], t


def test_direction_models_choose_which_model_answers_a_shared_direction(repository, tmp_path):
    """de->en is served by both bundles: MT_DIRECTION_MODELS gives it to the multilingual one (the default model
    answers it otherwise, above); one that names a direction its model does not serve stops the start."""
    env = {"MT_DIRECTION_MODELS": f"de-en={NAME}"}
    with LiveServer(repository, env=env, log_path=tmp_path / "chosen.log").start(timeout=240) as server:
        body = {"texts": [GERMAN], "source_language": "de", "target_language": "en", "beam_size": 1}
        [t] = httpx.post(server.url + "/v1/translate", json=body, timeout=60).json()["translations"]
        assert t["model"] == NAME
        assert set(t["text"].split()) <= set(LEXICON["en"]), t["text"]
    bad = LiveServer(repository, env={"MT_DIRECTION_MODELS": "en-de=de-en"}, log_path=tmp_path / "bad.log")
    with pytest.raises(RuntimeError, match="model de-en does not serve en-de"):
        bad.start(timeout=240)
    bad.stop()


def test_the_repository_file_chooses_unless_the_setting_does(repository, tmp_path):
    """A release writes its choice beside its bundles (model_repository/direction-models): served without
    MT_DIRECTION_MODELS, de->en goes to the model it names; the setting, when given, overrides the file."""
    own = tmp_path / "repository"
    shutil.copytree(repository, own)
    (own / "direction-models").write_text(f"de-en={NAME}\n")
    body = {"texts": [GERMAN], "source_language": "de", "target_language": "en", "beam_size": 1}
    for env, expected in (({}, NAME), ({"MT_DIRECTION_MODELS": "de-en=de-en"}, "de-en")):
        with LiveServer(own, env=env, log_path=tmp_path / f"{expected}.log").start(timeout=240) as server:
            [t] = httpx.post(server.url + "/v1/translate", json=body, timeout=60).json()["translations"]
            assert t["model"] == expected, (env, t)
