"""The DeepL API against a live server: the official ``deepl`` client (PyPI) with ``server_url``, and raw HTTP for
form bodies, bad input, methods and the quota kept across a restart."""

from __future__ import annotations

import json

import deepl
import deepl.http_client
import httpx
import pytest
from live_server import LiveServer
from protocol_helpers import v1_translate

KEY, OTHER_KEY, BUSY_KEY = "deepl-test-key-1", "deepl-test-key-2", "deepl-test-key-3"
BURST = 5  # work requests a key may send before its (very slow) rate limit applies
LIMIT = 60  # characters per key
TEXTS = ["Ein Hund läuft im Schnee.", "Zwei Katzen schlafen."]


@pytest.fixture(autouse=True)
def no_client_retries(monkeypatch):
    """The client retries 429 and 5xx with backoff: no test waits for that."""
    monkeypatch.setattr(deepl.http_client, "max_network_retries", 0)
    monkeypatch.setattr(deepl.http_client, "min_connection_timeout", 30.0)


@pytest.fixture(scope="module")
def keyed_server(tiny_repository, tmp_path_factory):
    """API keys and a character limit of LIMIT per key; its state directory is reused by the restart test."""
    root = tmp_path_factory.mktemp("deepl")
    env = {
        "MT_API_KEYS": f"{KEY},{OTHER_KEY},{BUSY_KEY}",
        "MT_KEY_RATE_PER_S": "0.001",
        "MT_KEY_BURST": str(BURST),
        "MT_KEY_CHARACTER_LIMIT": str(LIMIT),
        "MT_STATE_DIR": str(root / "state"),
        "MT_MAX_WAIT_MS": "5",
        "MT_LANGUAGE_MISMATCH": "reject",
    }
    server = LiveServer(tiny_repository, env=env, log_path=root / "service.log").start(timeout=240)
    yield server
    server.stop()


def client(url: str, key: str = "any") -> deepl.Translator:
    return deepl.Translator(key, server_url=url, send_platform_info=False)


# --- the official client, on the open shared server --------------------------------------------------------
def test_translate_one_text_as_v1_does(live_server, api):
    result = client(live_server.url).translate_text(TEXTS[0], source_lang="DE", target_lang="EN-US")
    assert result.text == v1_translate(api, [TEXTS[0]])[0]["text"]
    assert result.detected_source_lang == "DE"
    assert result.billed_characters == len(TEXTS[0])


def test_translate_many_texts_without_source(live_server, api):
    results = client(live_server.url).translate_text(TEXTS, target_lang="en-gb")
    assert [r.text for r in results] == [t["text"] for t in v1_translate(api, TEXTS)]
    assert [r.detected_source_lang for r in results] == ["DE", "DE"]


def test_split_sentences(live_server, api):
    text = "Ein Hund läuft.\nZwei Katzen schlafen."
    translator = client(live_server.url)
    split = translator.translate_text(text, source_lang="DE", target_lang="EN-US", split_sentences="1")
    assert split.text == v1_translate(api, [text])[0]["text"]
    whole = translator.translate_text(text, source_lang="DE", target_lang="EN-US", split_sentences="0")
    assert whole.text == v1_translate(api, [text], split_sentences=False)[0]["text"]
    across = translator.translate_text(text, source_lang="DE", target_lang="EN-US", split_sentences="nonewlines")
    assert "\n" in across.text  # the break between two sentences is kept


def test_html_keeps_markup_and_ignored_tags(live_server, api):
    html = "<p>Ein Hund <b>läuft</b>.</p><p>Zwei <x-keep>Katzen schlafen</x-keep>.</p>"
    translator = client(live_server.url)
    result = translator.translate_text(html, source_lang="DE", target_lang="EN-US", tag_handling="html")
    assert result.text.startswith("<p>") and "<b>" in result.text and result.text.count("<p>") == 2
    assert result.billed_characters == len("Ein Hund läuft.Zwei Katzen schlafen.")
    kept = translator.translate_text(
        html, source_lang="DE", target_lang="EN-US", tag_handling="html", ignore_tags=["x-keep"]
    )
    assert "<x-keep>Katzen schlafen</x-keep>" in kept.text


def test_xml_tags(live_server):
    xml = "<doc><title>Ein Hund</title><par>Zwei Katzen schlafen. <code>x=1</code></par></doc>"
    result = client(live_server.url).translate_text(
        xml, source_lang="DE", target_lang="EN-US", tag_handling="xml", ignore_tags="code"
    )
    assert result.text.startswith("<doc><title>") and "<code>x=1</code>" in result.text


def test_languages(live_server):
    translator = client(live_server.url)
    assert [(lang.code, lang.name) for lang in translator.get_source_languages()] == [("DE", "German")]
    targets = translator.get_target_languages()
    assert [lang.code for lang in targets] == ["EN-GB", "EN-US"]
    assert all(lang.supports_formality is False for lang in targets)


def test_formality(live_server):
    translator = client(live_server.url)
    result = translator.translate_text(TEXTS[0], source_lang="DE", target_lang="EN-US", formality="prefer_more")
    assert result.text
    with pytest.raises(deepl.DeepLException, match="formality"):
        translator.translate_text(TEXTS[0], source_lang="DE", target_lang="EN-US", formality="more")


def test_unserved_pair_is_a_bad_request(live_server):
    with pytest.raises(deepl.DeepLException, match="target_lang") as raised:
        client(live_server.url).translate_text(TEXTS[0], target_lang="FR")
    assert raised.value.http_status_code == 400


# --- keys and quotas ----------------------------------------------------------------------------------------
def test_bad_key_is_an_authorization_error(keyed_server):
    with pytest.raises(deepl.AuthorizationException):
        client(keyed_server.url, "wrong").translate_text(TEXTS[0], target_lang="EN-US")
    with pytest.raises(deepl.AuthorizationException):
        client(keyed_server.url, "wrong").get_usage()
    answer = httpx.get(keyed_server.url + "/v2/usage", params={"auth_key": KEY})
    assert answer.status_code == 403 and "Legacy" in answer.json()["message"]


def test_quota_per_key_then_exceeded(keyed_server):
    translator = client(keyed_server.url, KEY)
    before = translator.get_usage().character
    assert (before.count, before.limit) == (0, LIMIT)
    translator.translate_text(TEXTS, source_lang="DE", target_lang="EN-US")
    used = sum(len(t) for t in TEXTS)
    after = translator.get_usage().character
    assert after.count == used and not after.limit_reached
    with pytest.raises(deepl.QuotaExceededException):
        translator.translate_text("x" * (LIMIT - used + 1), source_lang="DE", target_lang="EN-US")
    assert translator.get_usage().character.count == used  # a refusal is not charged
    assert client(keyed_server.url, OTHER_KEY).get_usage().character.count == 0  # each key counts its own
    with pytest.raises(deepl.DeepLException):  # a failed translation is not charged either
        translator.translate_text("Hallo", source_lang="DE", target_lang="EN-US", formality="less")
    assert translator.get_usage().character.count == used


def test_a_key_over_its_rate_limit_gets_429_with_retry_after(keyed_server):
    body = {"text": ["Hallo"], "source_lang": "DE", "target_lang": "EN-US", "formality": "less"}  # cheap 400s
    headers = {"Authorization": f"DeepL-Auth-Key {BUSY_KEY}"}
    for _ in range(BURST):
        assert httpx.post(keyed_server.url + "/v2/translate", json=body, headers=headers).status_code == 400
    limited = httpx.post(keyed_server.url + "/v2/translate", json=body, headers=headers)
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) > 0
    assert set(limited.json()) == {"message"} and "rate limit" in limited.json()["message"]
    with pytest.raises(deepl.TooManyRequestsException):
        client(keyed_server.url, BUSY_KEY).translate_text("Hallo", target_lang="EN-US")
    assert client(keyed_server.url, BUSY_KEY).get_usage().character.count == 0  # not a work request: answered


def test_a_text_in_another_language_is_refused_under_reject(keyed_server):
    translator = client(keyed_server.url, OTHER_KEY)
    before = translator.get_usage().character.count
    with pytest.raises(deepl.DeepLException, match="looks like en") as raised:
        english = "The children are playing in the garden."
        translator.translate_text(english, source_lang="DE", target_lang="EN-US")
    assert raised.value.http_status_code == 400
    assert translator.get_usage().character.count == before


def test_quota_is_kept_across_a_restart(keyed_server, tiny_repository):
    """Last of the keyed tests: it stops the module's server and starts another on the same MT_STATE_DIR."""
    client(keyed_server.url, OTHER_KEY).translate_text(TEXTS[1], source_lang="DE", target_lang="EN-US")
    used = {key: client(keyed_server.url, key).get_usage().character.count for key in (KEY, OTHER_KEY)}
    assert used[OTHER_KEY] == len(TEXTS[1])
    keyed_server.stop()
    same = {name: keyed_server.env[name] for name in ("MT_API_KEYS", "MT_KEY_CHARACTER_LIMIT", "MT_STATE_DIR")}
    with LiveServer(tiny_repository, env=same) as restarted:
        assert {key: client(restarted.url, key).get_usage().character.count for key in used} == used


# --- raw HTTP -----------------------------------------------------------------------------------------------
def test_form_body_with_repeated_text(api):
    answer = api.post(
        "/v2/translate",
        data={"text": TEXTS, "source_lang": "de", "target_lang": "EN", "show_billed_characters": "1"},
    )
    assert answer.status_code == 200, answer.text
    translations = answer.json()["translations"]
    assert [t["text"] for t in translations] == [t["text"] for t in v1_translate(api, TEXTS)]
    assert [t["billed_characters"] for t in translations] == [len(t) for t in TEXTS]
    plain = api.post("/v2/translate", json={"text": TEXTS[:1], "target_lang": "EN-US"}).json()
    assert "billed_characters" not in plain["translations"][0]  # only when asked, like DeepL


@pytest.mark.parametrize(
    "body, names",
    [
        ({"target_lang": "EN-US"}, "'text'"),
        ({"text": ["a"]}, "'target_lang'"),
        ({"text": [], "target_lang": "EN-US"}, "'text'"),
        ({"text": [1], "target_lang": "EN-US"}, "'text'"),
        ({"text": ["a"], "target_lang": "ZH-HANT"}, "'target_lang'"),
        ({"text": ["a"], "target_lang": "EN-US", "source_lang": "FR"}, "'source_lang'"),
        ({"text": ["a"], "target_lang": "EN-US", "split_sentences": "2"}, "'split_sentences'"),
        ({"text": ["a"], "target_lang": "EN-US", "tag_handling": "markdown"}, "'tag_handling'"),
        ({"text": ["a"], "target_lang": "EN-US", "formality": "polite"}, "'formality'"),
        ({"text": ["a"], "target_lang": "EN-US", "model_type": "quality_optimized"}, "'model_type'"),
        ({"text": ["a"], "target_lang": "EN-US", "glossary_id": "g1"}, "source_lang"),  # DeepL: a glossary needs it
        ({"text": ["a"], "target_lang": "EN-US", "show_billed_characters": "yes"}, "'show_billed_characters'"),
        ({"text": ["<a><b></a>"], "target_lang": "EN-US", "tag_handling": "xml"}, "well-formed"),
        ({"text": ["\ud800"], "target_lang": "EN-US"}, "'text'"),
    ],
)
def test_bad_input_is_a_400_with_a_message(api, body, names):
    raw = json.dumps(body).encode()
    answer = api.post("/v2/translate", content=raw, headers={"content-type": "application/json"})
    assert answer.status_code == 400, answer.text
    assert set(answer.json()) == {"message"} and names in answer.json()["message"]


def test_not_json_nor_form_is_a_400(api):
    answer = api.post("/v2/translate", content=b"\xff{", headers={"content-type": "application/json"})
    assert answer.status_code == 400 and "message" in answer.json()


@pytest.mark.parametrize("method, path", [("GET", "/v2/translate"), ("PUT", "/v2/usage"), ("DELETE", "/v2/languages")])
def test_wrong_method_is_a_405_in_deepl_form(api, method, path):
    answer = api.request(method, path)
    assert answer.status_code == 405 and set(answer.json()) == {"message"}
    assert "POST" in answer.headers["allow"]


def test_languages_type_and_usage_without_keys(api):
    assert api.get("/v2/languages", params={"type": "target"}).json()[0]["language"] == "EN-GB"
    assert api.post("/v2/languages", data={"type": "source"}).json() == [{"language": "DE", "name": "German"}]
    bad = api.get("/v2/languages", params={"type": "both"})
    assert bad.status_code == 400 and "'type'" in bad.json()["message"]
    before = api.get("/v2/usage").json()
    assert before["character_limit"] == 10**12  # no limit, as DeepL reports it
    api.post("/v2/translate", json={"text": ["Hallo."], "target_lang": "EN-US"}).raise_for_status()
    assert api.post("/v2/usage").json()["character_count"] == before["character_count"] + len("Hallo.")
