"""DeepL's glossary and document APIs against a live server, through the official ``deepl`` client: glossaries
created, listed, read and deleted, used by translate_text; .docx and .pptx documents translated; bad glossary and
document requests each a DeepL 4xx ({"message": ...})."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import deepl
import deepl.http_client
import docx
import httpx
import pptx
import pytest
from live_server import LiveServer

from service.protocols.deepl.glossaries import NAME_PATTERN

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "documents"))
from fixtures import make_docx, make_pptx  # noqa: E402

KEY, OTHER_KEY = "deepl-resources-key-1", "deepl-resources-key-2"
SENTENCE = "der hund spielt im park"


@pytest.fixture(autouse=True)
def no_client_retries(monkeypatch):
    monkeypatch.setattr(deepl.http_client, "max_network_retries", 0)
    monkeypatch.setattr(deepl.http_client, "min_connection_timeout", 30.0)


@pytest.fixture(scope="module")
def server(tiny_repository, tmp_path_factory):
    root = tmp_path_factory.mktemp("deepl-resources")
    env = {
        "MT_API_KEYS": f"{KEY},{OTHER_KEY}",
        "MT_STATE_DIR": str(root / "state"),
        "MT_MAX_WAIT_MS": "5",
        "MT_GLOSSARIES_PER_KEY": "3",
        "MT_MAX_DOCUMENT_BYTES": "200000",
    }
    live = LiveServer(tiny_repository, env=env, log_path=root / "service.log").start(timeout=240)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def translator(server):
    return deepl.Translator(KEY, server_url=server.url, send_platform_info=False)


def raw(server, key: str = KEY) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=60.0, headers={"Authorization": f"DeepL-Auth-Key {key}"})


def test_glossary_lifecycle_and_use(server, translator):
    pairs = translator.get_glossary_languages()
    assert [(p.source_lang, p.target_lang) for p in pairs] == [("de", "en")]
    free = translator.translate_text(SENTENCE, source_lang="DE", target_lang="EN-US").text
    assert "hound" not in free
    glossary = translator.create_glossary("pets", "DE", "EN", {"hund": "hound", "Park": "garden"})
    assert glossary.ready and glossary.entry_count == 2
    assert (glossary.source_lang, glossary.target_lang) == ("DE", "EN")
    assert [g.glossary_id for g in translator.list_glossaries()] == [glossary.glossary_id]
    assert translator.get_glossary(glossary.glossary_id).name == "pets"
    assert translator.get_glossary_entries(glossary) == {"hund": "hound", "Park": "garden"}
    bound = translator.translate_text(SENTENCE, source_lang="DE", target_lang="EN-US", glossary=glossary).text
    assert "hound" in bound and "garden" in bound
    with raw(server) as c:  # the same record through /v1
        assert c.get(f"/v1/glossaries/{glossary.glossary_id}/entries").json()["entries"] == {
            "hund": "hound",
            "Park": "garden",
        }
    other = deepl.Translator(OTHER_KEY, server_url=server.url, send_platform_info=False)
    with pytest.raises(deepl.GlossaryNotFoundException):
        other.get_glossary(glossary.glossary_id)  # another key's glossary is not there for it
    with pytest.raises(deepl.DeepLException, match="Glossary not found"):  # nor usable
        other.translate_text(SENTENCE, source_lang="DE", target_lang="EN-US", glossary=glossary.glossary_id)
    translator.delete_glossary(glossary)
    assert translator.list_glossaries() == []
    with pytest.raises(deepl.GlossaryNotFoundException):
        translator.delete_glossary(glossary.glossary_id)


def test_glossary_from_csv(translator):
    glossary = translator.create_glossary_from_csv("csv", "de", "en", 'Hund,hound\n"Katze, alt",old cat\n')
    try:
        assert translator.get_glossary_entries(glossary) == {"Hund": "hound", "Katze, alt": "old cat"}
    finally:
        translator.delete_glossary(glossary)


BAD_GLOSSARIES = [
    ({"name": "x", "source_lang": "fr", "target_lang": "en", "entries": "a\tb", "entries_format": "tsv"}, 400),
    ({"name": "x", "source_lang": "de", "target_lang": "en", "entries": "a\tb", "entries_format": "xlsx"}, 400),
    ({"name": "x", "source_lang": "de", "target_lang": "en", "entries": "a\tb\tc", "entries_format": "tsv"}, 400),
    (
        {"name": "x", "source_lang": "de", "target_lang": "en", "entries": "Hund\ta\nhund\tb", "entries_format": "tsv"},
        400,
    ),
    ({"name": "x", "source_lang": "de", "target_lang": "en", "entries": "\n", "entries_format": "tsv"}, 400),
    ({"name": " ", "source_lang": "de", "target_lang": "en", "entries": "a\tb", "entries_format": "tsv"}, 400),
    ({"name": "\x1d", "source_lang": "de", "target_lang": "en", "entries": "a\tb", "entries_format": "tsv"}, 400),
    ({"source_lang": "de", "target_lang": "en", "entries": "a\tb", "entries_format": "tsv"}, 400),
    ({"name": "x", "source_lang": "de", "target_lang": "en", "entries": ["a"], "entries_format": "tsv"}, 400),
]


@pytest.mark.parametrize("body, status", BAD_GLOSSARIES, ids=[str(i) for i in range(len(BAD_GLOSSARIES))])
def test_bad_glossaries_get_a_deepl_4xx(server, body, status):
    with raw(server) as c:
        r = c.post("/v2/glossaries", json=body)
    assert r.status_code == status, r.text
    assert set(r.json()) == {"message"}


def test_glossary_errors(server, translator):
    with raw(server) as c:
        assert c.get("/v2/glossaries/" + "0" * 32).status_code == 404
        assert c.get("/v2/glossaries/nope/entries").json() == {"message": "Glossary not found."}
        made = [translator.create_glossary(f"g{i}", "DE", "EN", {"Hund": "hound"}) for i in range(3)]
        r = c.post("/v2/glossaries", data={"name": "4th", "source_lang": "DE", "target_lang": "EN",
                                            "entries": "a\tb", "entries_format": "tsv"})  # fmt: skip
        assert r.status_code == 456 and "MT_GLOSSARIES_PER_KEY" in r.json()["message"]
        r = c.get(f"/v2/glossaries/{made[0].glossary_id}/entries", headers={"Accept": "application/json"})
        assert r.status_code == 415
        r = c.post("/v2/translate", json={"text": ["Hund"], "target_lang": "EN-US", "glossary_id": "nope",
                                          "source_lang": "DE"})  # fmt: skip
        assert r.status_code == 404
        r = c.post("/v2/translate", json={"text": ["Hund"], "target_lang": "EN-US", "glossary_ids": ["a"]})
        assert r.status_code == 400 and "glossary_id" in r.json()["message"]
    for g in made:
        translator.delete_glossary(g)


def _paragraph_texts(data: bytes) -> list[str]:
    return [p.text for p in docx.Document(io.BytesIO(data)).paragraphs if p.text.strip()]


def test_translate_document_docx_and_pptx(translator, tmp_path):
    source = make_docx()
    out = io.BytesIO()
    status = translator.translate_document(source, out, source_lang="DE", target_lang="EN-US", filename="brief.docx")
    assert status.done and status.billed_characters > 0
    before, after = _paragraph_texts(source), _paragraph_texts(out.getvalue())
    assert len(after) == len(before) and after != before
    path_in, path_out = tmp_path / "slides.pptx", tmp_path / "slides.en.pptx"
    path_in.write_bytes(make_pptx())
    translator.translate_document_from_filepath(path_in, path_out, target_lang="EN-GB")
    slides_in = pptx.Presentation(str(path_in)).slides
    slides_out = pptx.Presentation(str(path_out)).slides
    assert len(slides_out) == len(slides_in)
    usage = translator.get_usage()
    assert usage.character.count >= status.billed_characters  # documents count against the key's quota


def test_document_with_glossary(translator):
    glossary = translator.create_glossary("doc", "DE", "EN", {"Hund": "hound"})
    try:
        text = b"Der Hund spielt im Park.\n"
        out = io.BytesIO()
        translator.translate_document(text, out, source_lang="DE", target_lang="EN-US", filename="a.txt",
                                      glossary=glossary)  # fmt: skip
        assert "hound" in out.getvalue().decode().lower()  # the term is used; its case follows the sentence
    finally:
        translator.delete_glossary(glossary)


def test_document_errors(server, translator):
    with raw(server) as c:
        files = {"file": ("a.txt", b"Ein Hund.")}
        r = c.post("/v2/document", data={"target_lang": "EN-US"}, files=files)
        assert r.status_code == 200, r.text
        doc_id, doc_key = r.json()["document_id"], r.json()["document_key"]
        assert c.post(f"/v2/document/{doc_id}", json={"document_key": "wrong"}).status_code == 403
        assert c.post(f"/v2/document/{doc_id}", json={}).status_code == 400
        assert c.post("/v2/document/" + "0" * 32, json={"document_key": doc_key}).status_code == 404
        with raw(server, OTHER_KEY) as other:
            assert other.post(f"/v2/document/{doc_id}", json={"document_key": doc_key}).status_code == 404
        bad = [
            ({"target_lang": "EN-US"}, {"file": ("a.exe", b"MZ")}, 415),
            ({"target_lang": "FR"}, files, 400),
            ({}, files, 400),
            ({"target_lang": "EN-US", "output_format": "pdf"}, files, 400),
            ({"target_lang": "EN-US", "glossary_id": "nope"}, files, 400),  # a glossary needs source_lang
            ({"target_lang": "EN-US", "source_lang": "DE", "glossary_id": "nope"}, files, 404),
            ({"target_lang": "EN-US", "formality": "more"}, files, 400),
            ({"target_lang": "EN-US"}, {"file": ("a.docx", b"not a zip")}, 400),
            ({"target_lang": "EN-US"}, {"file": ("a.txt", b"")}, 400),
            ({"target_lang": "EN-US"}, {"file": ("a.txt", b"x" * 300_000)}, 413),
        ]
        for data, upload, status in bad:
            r = c.post("/v2/document", data=data, files=upload)
            assert r.status_code == status, (data, r.text)
            assert set(r.json()) == {"message"}, r.text
        assert c.post("/v2/document", json={"target_lang": "EN-US"}).status_code == 400
    # a result asked for before the job ran: DeepL's 503, which the client reports as DocumentNotReady
    long = ("Ein Hund läuft im Schnee. " * 200).encode()
    handle = translator.translate_document_upload(long, target_lang="EN-US", filename="long.txt")
    with pytest.raises(deepl.DocumentNotReadyException):
        translator.translate_document_download(handle, io.BytesIO())


def test_the_name_pattern_refuses_exactly_what_strip_removes():
    """The schema's pattern for a glossary name and the server's check are one rule: a character is blank for the
    pattern exactly when str.strip() removes it (a fuzzer that trusts the schema must never hear 400 for a name)."""
    differ = [hex(c) for c in range(0x110000) if (chr(c).strip() == "") != (re.search(NAME_PATTERN, chr(c)) is None)]
    assert differ == []
