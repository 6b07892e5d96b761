"""/v1/documents and LibreTranslate's /translate_file on the live server (tiny model): each format's fixture
translated and reopened with its library; bad files refused with their 4xx; a restart during a job."""

from __future__ import annotations

import io
import re
import signal
import zipfile

import pytest
from documents_helpers import finished, translate, upload
from fixtures import (
    GERMAN_ONLY,
    LINK,
    MARKDOWN,
    SENTENCES,
    make_docx,
    make_epub,
    make_odp,
    make_odt,
    make_pptx,
    make_srt,
    png,
)

ENGLISH = re.compile(r"\b(the|a|dog|cat|man|woman|child|ball|plays|runs|sits|park|in-the)\b")


def english(text: str) -> bool:
    """Translated: English words and none of the German-only words left (the tiny model maps word by word)."""
    words = set(re.findall(r"[\w-]+", text.lower()))
    return bool(ENGLISH.search(text.lower())) and not words & GERMAN_ONLY


def images(data: bytes) -> list[bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [z.read(n) for n in z.namelist() if n.lower().endswith(".png")]


def test_docx(client):
    import docx

    data = make_docx()
    out = docx.Document(io.BytesIO(translate(client, "brief.docx", data)))
    source = docx.Document(io.BytesIO(data))
    assert len(out.paragraphs) == len(source.paragraphs) and len(out.tables[0]._cells) == 4
    texts = [p.text for p in out.paragraphs if p.text] + [c.text for c in out.tables[0]._cells]
    texts += [out.sections[0].header.paragraphs[0].text, out.sections[0].footer.paragraphs[0].text]
    assert all(english(t) for t in texts), texts
    bold = [r.text for p in out.paragraphs for r in p.runs if r.bold]
    italic = [r.text for p in out.paragraphs for r in p.runs if r.italic]
    assert bold and all(english(t) for t in bold) and italic and all(english(t) for t in italic)
    link = out.paragraphs[3]._p.find(".//{*}hyperlink")
    assert link is not None and english("".join(link.itertext()))
    assert [r.target_ref for r in out.part.rels.values() if r.is_external] == [LINK]
    out_bytes = translate(client, "brief.docx", data)
    assert images(out_bytes) == [png()]


def test_pptx(client):
    import pptx

    out = pptx.Presentation(io.BytesIO(translate(client, "talk.pptx", make_pptx())))
    assert len(out.slides) == 2
    runs = [r for p in out.slides[0].placeholders[1].text_frame.paragraphs for r in p.runs]
    assert any(r.font.bold and english(r.text) for r in runs) and any(r.font.italic and english(r.text) for r in runs)
    assert any(r.hyperlink.address == LINK and english(r.text) for r in runs)
    assert english(out.slides[0].notes_slide.notes_text_frame.text)
    table = next(s for s in out.slides[1].shapes if s.has_table).table
    assert all(english(c.text) for c in table.iter_cells())


@pytest.mark.parametrize("kind", ["odt", "odp"])
def test_opendocument(client, kind):
    from odf import teletype, text
    from odf.opendocument import load

    data = (make_odt if kind == "odt" else make_odp)()
    out = translate(client, f"doc.{kind}", data)
    before, after = load(io.BytesIO(data)), load(io.BytesIO(out))
    paragraphs = after.getElementsByType(text.P)
    assert len(paragraphs) == len(before.getElementsByType(text.P))
    assert all(english(teletype.extractText(p)) for p in paragraphs if teletype.extractText(p).strip())
    spans = {s.getAttribute("stylename"): teletype.extractText(s) for s in after.getElementsByType(text.Span)}
    assert set(spans) == {"Bold", "Italic"} and all(english(t) for t in spans.values())
    [link] = after.getElementsByType(text.A)
    assert link.getAttribute("href") == LINK and english(teletype.extractText(link))
    assert images(out) == [png()]


def test_epub(client):
    from ebooklib import ITEM_DOCUMENT, epub
    from lxml import html

    data = make_epub()
    out = translate(client, "buch.epub", data)
    book = epub.read_epub(io.BytesIO(out))
    items = book.get_items_of_type(ITEM_DOCUMENT)
    chapters = [html.fromstring(i.get_content()) for i in items if i.file_name.startswith("chap")]
    blocks = [e for c in chapters for e in c.iter("h1", "h2", "p", "li", "td") if e.text_content().strip()]
    assert len(blocks) == 9 and all(english(e.text_content()) for e in blocks), [e.text_content() for e in blocks]
    bold = [e.text_content() for c in chapters for e in c.iter("b", "i")]
    assert len(bold) == 2 and all(english(t) for t in bold)
    links = [(a.get("href"), a.text_content()) for c in chapters for a in c.iter("a") if a.get("href") == LINK]
    assert len(links) == 1 and english(links[0][1])
    assert images(out) == [png()]


def test_srt(client):
    import srt

    data = make_srt()
    out = list(srt.parse(translate(client, "film.srt", data).decode()))
    source = list(srt.parse(data.decode()))
    assert [(c.index, c.start, c.end) for c in out] == [(c.index, c.start, c.end) for c in source]
    assert [c.content.count("\n") for c in out] == [c.content.count("\n") for c in source]
    assert all(english(c.content) for c in out)
    assert re.fullmatch(r"<i>[^<]+</i>[^<]+", out[1].content)


def test_markdown_html_and_text(client):
    md = translate(client, "readme.md", MARKDOWN.encode()).decode()
    assert re.search(r"\*\*[\w -]+\*\*", md) and f"]({LINK})" in md and "```\nder code bleibt\n```" in md
    assert md.startswith("---\ntitle: der hund\n---\n")
    body = md.split("---\n", 2)[2].split("```")[0] + md.split("```")[2]
    assert english(body.replace(LINK, ""))
    page = f"<html><body><h1>{SENTENCES[0]}</h1><p>ein <b>mann</b> rennt</p><pre>der code</pre></body></html>"
    html = translate(client, "page.html", page.encode()).decode()
    assert "<pre>der code</pre>" in html and re.search(r"<b>[\w -]+</b>", html) and english(html.split("<pre>")[0])
    text = "\n".join(SENTENCES) + "\n\n" + SENTENCES[0] + "\n"
    out = translate(client, "notes.txt", text.encode()).decode()
    assert out.count("\n") == text.count("\n") and english(out)


@pytest.mark.parametrize(
    ("name", "data", "status"),
    [
        ("empty.docx", b"", 400),
        ("empty.txt", b"   \n", 400),
        ("corrupt.docx", b"PK\x03\x04 not really a zip", 400),
        ("corrupt.srt", b"1\nnot a timing\nder hund\n", 400),
        ("binary.txt", b"\x00\x01\x02", 400),
        ("slides.docx", None, 415),  # a .pptx named .docx
        ("scan.pdf", b"%PDF-1.4", 415),
        ("huge.txt", b"der hund spielt. " * 15000, 413),  # over MT_MAX_DOCUMENT_BYTES (200 kB here)
        ("long.txt", b"der hund spielt. " * 1500, 413),  # over MT_MAX_DOCUMENT_CHARS (20,000 here)
    ],
)
def test_bad_files_get_their_4xx(client, name, data, status):
    response = upload(client, name, make_pptx() if data is None else data)
    assert response.status_code == status, response.text
    assert response.json()["detail"]


def test_unknown_job_pending_result_and_delete(client):
    assert client.get("/v1/documents/" + "0" * 32).status_code == 404
    job = upload(client, "a.txt", b"der hund\n").json()
    finished(client, job["id"])
    assert client.delete(f"/v1/documents/{job['id']}").status_code == 204
    assert client.get(f"/v1/documents/{job['id']}/result").status_code == 404
    assert upload(client, "a.txt", b"der hund\n", target_language="fr").status_code == 422


def test_libretranslate_translate_file_multipart(client):
    response = client.post(
        "/translate_file", files={"file": ("film.srt", make_srt())}, data={"source": "de", "target": "en"}
    )
    assert response.status_code == 200, response.text
    url = response.json()["translatedFileUrl"]
    assert url.startswith(str(client.base_url)) and url.endswith(".film.srt")
    translated = client.get(url)
    assert translated.status_code == 200 and "-->" in translated.text and english(translated.text)
    refused = client.post("/translate_file", files={"file": ("x.pdf", b"%PDF")}, data={"source": "de", "target": "en"})
    assert refused.status_code == 415 and "error" in refused.json()
    missing = client.post("/translate_file", files={"file": ("x.txt", b"der hund")}, data={"source": "de"})
    assert missing.status_code == 400 and "target" in missing.json()["error"]


def test_progress_metric(client):
    translate(client, "m.txt", b"der hund spielt\n")
    metrics = client.get("/metrics").text
    assert re.search(r'mt_document_jobs_total\{format="txt",outcome="done"\} [1-9]', metrics)
    assert re.search(r"mt_document_sentences_translated_total\{format=\"txt\"\} [1-9]", metrics)
    assert "mt_document_sentences_remaining 0.0" in metrics


def test_a_restart_during_a_job_loses_nothing(doc_server, client):
    """A job accepted, the server stopped while it waits or runs, started again on the same state directory: the
    job completes (resumed from its upload) and its result is served."""
    text = ("\n".join(SENTENCES) + "\n") * 40
    job = upload(client, "long.txt", text.encode()).json()
    doc_server.stop(signal.SIGTERM)
    doc_server.start()
    status = finished(client, job["id"], timeout=180)
    assert status["status"] == "done", status
    out = client.get(status["result_url"]).text
    assert out.count("\n") == text.count("\n") and english(out)


def test_a_document_gets_spans_numbers_and_names_back(client):
    """A document's sentences get what /v1/translate's do (docs/real-world-text.md): a URL copied (never its
    stand-in Y1), a number in English's convention, a name the tiny model cannot write searched again."""
    url = "https://www.beispiel.de/hilfe"
    text = f"der hund läuft zu {url} mit 1.250 katzen und Picciuto\n"
    out = translate(client, "notes.txt", text.encode()).decode()
    assert out.count(url) == 1 and not re.search(r"\bY\d", out), out
    assert "1.250" not in out and out.count("Picciuto") == 1, out
