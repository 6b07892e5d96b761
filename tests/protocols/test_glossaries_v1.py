"""Glossaries and do-not-translate spans through the real server: inline and stored glossaries (kept across a
restart, owned per API key), inflected German forms, HTML translate="no", streaming, n-best, bad glossaries."""

from __future__ import annotations

import json

import httpx
import pytest
from live_server import LiveServer

KEY_A, KEY_B = "glossary-key-a-0123456789", "glossary-key-b-9876543210"
GLOSSARY = {"name": "pets", "source_language": "de", "target_language": "en", "entries": {"hund": "hound"}}


@pytest.fixture(scope="module")
def server(tiny_repository, tmp_path_factory):
    state = tmp_path_factory.mktemp("glossary-state")
    env = {
        "MT_STATE_DIR": str(state),
        "MT_API_KEYS": f"{KEY_A},{KEY_B}",
        "MT_GLOSSARY_MAX_ENTRIES": "5",
        "MT_GLOSSARY_MAX_TERM_CHARS": "40",
        "MT_GLOSSARIES_PER_KEY": "3",
        "MT_MAX_WAIT_MS": "10",
    }
    log = tmp_path_factory.mktemp("glossary-server") / "service.log"
    live = LiveServer(tiny_repository, env=env, log_path=log).start()
    yield live
    live.stop()


def client(server, key: str = KEY_A) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=60.0, headers={"Authorization": f"Bearer {key}"})


@pytest.fixture(scope="module")
def api(server):
    with client(server) as c:
        yield c


def translate(api, texts, **body) -> list[dict]:
    r = api.post("/v1/translate", json={"texts": texts, **body})
    assert r.status_code == 200, r.text
    return r.json()["translations"]


def codes(t: dict) -> list[str]:
    return [w["code"] for w in t.get("warnings", [])]


@pytest.mark.parametrize("beam", [1, 4])
def test_inline_glossary_is_used(api, beam):
    [free] = translate(api, ["der hund spielt im park"], beam_size=beam)
    [bound] = translate(api, ["der hund spielt im park"], beam_size=beam, glossary={"hund": "hound"})
    assert "hound" not in free["text"].lower() and "hound" in bound["text"].lower()
    assert "glossary_term_missing" not in codes(bound)


def test_glossary_applies_only_where_its_term_is_found(api):
    texts = ["der hund spielt", "die katze sitzt"]
    free = translate(api, texts)
    bound = translate(api, texts, glossary={"hund": "hound"})
    assert bound[1]["text"] == free[1]["text"]


@pytest.mark.parametrize("source", ["die katzen spielen", "die Katzen spielen", "der KATZE ball"])
def test_inflected_and_cased_german_forms_match(api, source):
    [t] = translate(api, [source], glossary={"Katze": "kitty"})
    assert "kitty" in t["text"].lower(), t


def test_longer_word_is_not_a_match(api):
    [t] = translate(api, ["der hundball"], glossary={"hund": "hound"})
    assert "hound" not in t["text"]


def test_do_not_translate_spans_come_back_exactly(api):
    spans = ["ACME Füße", "X-9000"]
    [t] = translate(api, ["der hund von ACME Füße spielt mit X-9000"], do_not_translate=spans)
    assert all(span in t["text"] for span in spans), t["text"]
    assert "do_not_translate_missing" not in codes(t)


def test_n_best_hypotheses_hold_the_term(api):
    [t] = translate(api, ["ein hund rennt"], beam_size=4, num_hypotheses=3, glossary={"hund": "hound"})
    assert len(t["hypotheses"]) == 3 and all("hound" in h["text"].lower() for h in t["hypotheses"])


def test_paragraph_sentences_each_get_their_terms(api):
    [t] = translate(api, ["der hund spielt. die katze rennt."], glossary={"hund": "hound", "katze": "kitty"})
    assert "hound" in t["text"].lower() and "kitty" in t["text"].lower()


def test_html_translate_no_and_glossary(api):
    markup = '<p>der hund <span translate="no">Rex Müller</span> spielt im park</p>'
    [t] = translate(api, [markup], format="html", glossary={"hund": "hound"})
    assert '<span translate="no">Rex Müller</span>' in t["text"] and "hound" in t["text"].lower()


def test_streaming_with_a_glossary(api):
    body = {"texts": ["der hund spielt im park"], "glossary": {"hund": "hound"}, "do_not_translate": ["park"]}
    with api.stream("POST", "/v1/translate", json={**body, "stream": True}) as r:
        assert r.status_code == 200
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    data = [json.loads(line[6:]) for line in events]
    deltas = "".join(d["text"] for d in data if "text" in d and "translation" not in d)
    [final] = [d["translation"] for d in data if "translation" in d]
    assert deltas == final["text"] and "hound" in final["text"] and "park" in final["text"]


def test_stored_glossary_create_use_list_entries(api):
    r = api.post("/v1/glossaries", json=GLOSSARY)
    assert r.status_code == 201, r.text
    gid = r.json()["glossary_id"]
    assert r.json()["entry_count"] == 1
    [t] = translate(api, ["der hund spielt"], glossary_id=gid)
    assert "hound" in t["text"]
    assert gid in [g["glossary_id"] for g in api.get("/v1/glossaries").json()["glossaries"]]
    assert api.get(f"/v1/glossaries/{gid}/entries").json() == {"entries": {"hund": "hound"}}
    # an inline entry wins over the stored one of the same source term
    [t] = translate(api, ["der hund spielt"], glossary_id=gid, glossary={"Hund": "doggo"})
    assert "doggo" in t["text"] and "hound" not in t["text"]
    assert api.delete(f"/v1/glossaries/{gid}").status_code == 204


@pytest.mark.parametrize(
    ("content", "filename", "fmt"),
    [("hund\thound\nkatze\tkitty\n", "terms.tsv", None), ('"hund",hound\n', "t.csv", None)],
)
def test_upload_tsv_and_csv(api, content, filename, fmt):
    form = {"name": "upload", "source_language": "de", "target_language": "en"}
    r = api.post("/v1/glossaries", data=form, files={"entries": (filename, content.encode())})
    assert r.status_code == 201, r.text
    gid = r.json()["glossary_id"]
    assert api.get(f"/v1/glossaries/{gid}/entries").json()["entries"]["hund"] == "hound"
    api.delete(f"/v1/glossaries/{gid}")


def test_another_key_cannot_see_or_use_a_glossary(api, server):
    gid = api.post("/v1/glossaries", json=GLOSSARY).json()["glossary_id"]
    with client(server, KEY_B) as other:
        assert gid not in [g["glossary_id"] for g in other.get("/v1/glossaries").json()["glossaries"]]
        assert other.get(f"/v1/glossaries/{gid}").status_code == 404
        assert other.delete(f"/v1/glossaries/{gid}").status_code == 404
        r = other.post("/v1/translate", json={"texts": ["der hund"], "glossary_id": gid})
        assert r.status_code == 404
    api.delete(f"/v1/glossaries/{gid}")


BAD = [
    ({**GLOSSARY, "entries": {}}, "entries"),
    ({**GLOSSARY, "entries": {"hund": " "}}, "entries"),
    ({**GLOSSARY, "entries": {"Hund": "a", "hund": "b"}}, "entries"),
    ({**GLOSSARY, "entries": {f"w{i}": "x" for i in range(6)}}, "entries"),
    ({**GLOSSARY, "entries": {"hund": "x" * 41}}, "entries"),
    ({**GLOSSARY, "entries": "hund\thound\textra", "entries_format": "tsv"}, "entries"),
    ({**GLOSSARY, "entries_format": "xml"}, "entries_format"),
    ({**GLOSSARY, "target_language": "fr"}, "source_language"),
    ({**GLOSSARY, "name": ""}, "name"),
    ({k: v for k, v in GLOSSARY.items() if k != "entries"}, "entries"),
]


@pytest.mark.parametrize(("body", "field"), BAD)
def test_bad_glossaries_are_422_naming_the_field(api, body, field):
    r = api.post("/v1/glossaries", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:2] == ["body", field]


@pytest.mark.parametrize(
    ("extra", "status", "field"),
    [
        ({"glossary": {"": "x"}}, 422, "glossary"),
        ({"glossary": {"a": "b", "A": "c"}}, 422, "glossary"),
        ({"do_not_translate": [" "]}, 422, "do_not_translate"),
        ({"glossary_id": "0" * 32}, 404, None),
    ],
)
def test_bad_inline_terms(api, extra, status, field):
    r = api.post("/v1/translate", json={"texts": ["der hund"], **extra})
    assert r.status_code == status, r.text
    if field:
        assert r.json()["detail"][0]["loc"][:2] == ["body", field]


def test_per_key_glossary_limit_is_409(api):
    made = []
    try:
        for _ in range(3):
            r = api.post("/v1/glossaries", json=GLOSSARY)
            assert r.status_code == 201
            made.append(r.json()["glossary_id"])
        assert api.post("/v1/glossaries", json=GLOSSARY).status_code == 409
    finally:
        for gid in made:
            api.delete(f"/v1/glossaries/{gid}")
    assert api.post("/v1/glossaries", json=GLOSSARY).status_code == 201  # deleting freed the places


def test_stored_glossary_survives_a_restart_then_deletes(server, api):
    for g in api.get("/v1/glossaries").json()["glossaries"]:
        api.delete(f"/v1/glossaries/{g['glossary_id']}")
    gid = api.post("/v1/glossaries", json=GLOSSARY).json()["glossary_id"]
    server.stop()
    server.start()
    with client(server) as fresh:
        assert fresh.get(f"/v1/glossaries/{gid}").json()["name"] == "pets"
        [t] = translate(fresh, ["der hund spielt"], glossary_id=gid)
        assert "hound" in t["text"]
        assert fresh.delete(f"/v1/glossaries/{gid}").status_code == 204
        assert fresh.get(f"/v1/glossaries/{gid}").status_code == 404
        assert fresh.post("/v1/translate", json={"texts": ["der hund"], "glossary_id": gid}).status_code == 404
