"""Each format read into units and written back, with a stand-in translation (every word upper-cased, aligned to
itself) through the real HTML placement: structure, formatting and untouched parts checked with each format's own
library. The live server's translations are tests/documents/test_documents_api.py's."""

from __future__ import annotations

import io
import zipfile

import pytest
from fixtures import LINK, MARKDOWN, make_docx, make_epub, make_odp, make_odt, make_pptx, make_srt, png

from service.documents import CorruptDocument, UnsupportedFormat, open_document
from service.serving.html import HtmlPlan


def upper(document) -> bytes:
    out = []
    for unit in document.units:
        plan = HtmlPlan(unit, "de")
        aligned = [(s.upper().split(), list(range(len(s.split())))) for s in plan.sentences]
        out.append(plan.render(aligned, "en"))
    return document.render(out)


def media(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {n: z.read(n) for n in z.namelist() if n.lower().endswith(".png")}


def test_docx_runs_links_tables_headers_and_images():
    import docx

    data = make_docx()
    out = upper(open_document(data, "brief.docx"))
    before, after = docx.Document(io.BytesIO(data)), docx.Document(io.BytesIO(out))
    assert len(after.paragraphs) == len(before.paragraphs)
    runs = [(r.text, r.bold, r.italic) for p in after.paragraphs for r in p.runs]
    assert ("HUND", True, None) in runs and ("PARK", None, True) in runs
    assert [c.text for row in after.tables[0].rows for c in row.cells] == [
        "DER HUND",
        "DIE KATZE",
        "EIN BALL",
        "DAS KIND",
    ]
    assert after.sections[0].header.paragraphs[0].text == "DER MANN UND DIE FRAU"
    assert after.sections[0].footer.paragraphs[0].text == "EIN KIND SPIELT"
    assert after.part.rels[next(k for k, r in after.part.rels.items() if r.is_external)].target_ref == LINK
    assert "DIE FRAU" in after.paragraphs[3]._p.xml.split("w:hyperlink")[1]
    assert media(out) == media(data) and list(media(out).values()) == [png()]


def test_pptx_slides_notes_links_and_tables():
    import pptx

    out = upper(open_document(make_pptx(), "talk.pptx"))
    prs = pptx.Presentation(io.BytesIO(out))
    assert len(prs.slides) == 2
    body = prs.slides[0].placeholders[1].text_frame.paragraphs
    runs = [(r.text, r.font.bold, r.font.italic, r.hyperlink.address) for p in body for r in p.runs]
    assert ("HUND", True, None, None) in runs and ("PARK", None, True, None) in runs
    assert ("DIE FRAU", None, None, LINK) in runs
    assert prs.slides[0].notes_slide.notes_text_frame.text == "EINE KLEINE KATZE SITZT AUF DEM BALL"
    table = next(s for s in prs.slides[1].shapes if s.has_table).table
    assert [c.text for c in table.iter_cells()] == ["DER HUND", "DIE KATZE", "EIN BALL", "DAS KIND"]
    assert list(media(out).values()) == [png()]


@pytest.mark.parametrize("kind", ["odt", "odp"])
def test_opendocument_spans_links_and_untouched_entries(kind):
    from odf import teletype, text
    from odf.opendocument import load

    data = (make_odt if kind == "odt" else make_odp)()
    out = upper(open_document(data, f"doc.{kind}"))
    doc = load(io.BytesIO(out))
    spans = [(s.getAttribute("stylename"), teletype.extractText(s)) for s in doc.getElementsByType(text.Span)]
    assert spans == [("Bold", "HUND"), ("Italic", "PARK")]
    assert [(a.getAttribute("href"), teletype.extractText(a)) for a in doc.getElementsByType(text.A)] == [
        (LINK, "DIE FRAU")
    ]
    with zipfile.ZipFile(io.BytesIO(data)) as a, zipfile.ZipFile(io.BytesIO(out)) as b:
        assert a.namelist() == b.namelist() and b.namelist()[0] == "mimetype"
        for name in a.namelist():
            if name not in ("content.xml", "styles.xml"):
                assert a.read(name) == b.read(name), name


def test_epub_chapters_inline_elements_and_untouched_entries():
    from ebooklib import ITEM_DOCUMENT, epub
    from lxml import html

    data = make_epub()
    out = upper(open_document(data, "buch.epub"))
    book = epub.read_epub(io.BytesIO(out))
    pages = {i.file_name: html.fromstring(i.get_content()) for i in book.get_items_of_type(ITEM_DOCUMENT)}
    one, two = pages["chap1.xhtml"], pages["chap2.xhtml"]
    assert [" ".join(p.text_content().split()) for p in one.iter("p")] == [
        "DER HUND SPIELT IM PARK", "EIN MANN RENNT UND DIE FRAU SITZT", "EINE KLEINE KATZE SITZT AUF DEM BALL"
    ]  # fmt: skip
    assert [(e.tag, e.text) for e in one.iter("b", "i")] == [("b", "HUND"), ("i", "PARK")]
    assert [(a.get("href"), a.text) for a in one.iter("a")] == [(LINK, "DIE FRAU")]
    assert [i.get("src") for i in one.iter("img")] == ["images/red.png"]
    assert one.findtext(".//code") == "der hund"
    assert [li.text for li in two.iter("li")] == ["DER HUND", "DIE KATZE"]
    assert [td.text for td in two.iter("td")] == ["EIN BALL", "DAS KIND SPIELT MIT DEM ROTEN BALL"]
    assert [a.text for a in pages["nav.xhtml"].iter("a")] == ["DIE KATZE", "DAS KIND"]
    with zipfile.ZipFile(io.BytesIO(data)) as a, zipfile.ZipFile(io.BytesIO(out)) as b:
        assert a.namelist() == b.namelist() and b.infolist()[0].filename == "mimetype"
        assert b.infolist()[0].compress_type == zipfile.ZIP_STORED and b.read("mimetype") == b"application/epub+zip"
        changed = [n for n in a.namelist() if a.read(n) != b.read(n)]
        assert changed == ["EPUB/chap1.xhtml", "EPUB/chap2.xhtml", "EPUB/nav.xhtml"]
        assert b"<title>DIE KATZE</title>" in b.read("EPUB/chap1.xhtml")


def test_srt_timings_lines_and_italics():
    import srt

    data = make_srt()
    out = list(srt.parse(upper(open_document(data, "film.srt")).decode()))
    source = list(srt.parse(data.decode()))
    assert [(c.index, c.start, c.end) for c in out] == [(c.index, c.start, c.end) for c in source]
    assert [c.content.count("\n") for c in out] == [c.content.count("\n") for c in source]
    assert out[1].content == "<i>EINE KLEINE KATZE</i> SITZT AUF DEM BALL"


def test_markdown_keeps_its_syntax_and_code():
    out = upper(open_document(MARKDOWN.encode(), "readme.md")).decode()
    assert out.startswith("---\ntitle: der hund\n---\n")  # front matter untouched
    assert "DER **HUND** SPIELT IM *PARK*" in out and f"[DIE FRAU]({LINK})" in out
    assert "| DER HUND | DIE KATZE |" in out and "```\nder code bleibt\n```" in out
    assert "- EIN `code` UND ![bild](bild.png)" in out
    assert out.count("\n") == MARKDOWN.count("\n")


def test_text_and_html_keep_lines_and_markup():
    text = "der hund & die katze\r\n\r\n  ein <b> ball\n"
    assert upper(open_document(text.encode(), "a.txt")) == text.upper().encode()
    page = "<html><body><p>ein <b>mann</b> rennt</p><pre>der code</pre></body></html>"
    assert upper(open_document(page.encode("latin-1"), "a.html")).decode() == page.replace(
        "ein <b>mann</b> rennt", "EIN <b>MANN</b> RENNT"
    )


@pytest.mark.parametrize(
    ("data", "name", "error"),
    [
        (b"", "a.txt", CorruptDocument),
        (b"   \n", "a.docx", CorruptDocument),
        (b"not a zip at all", "a.docx", CorruptDocument),
        (b"PK\x03\x04broken", "a.pptx", CorruptDocument),
        (b"\x00\x01binary", "a.txt", CorruptDocument),
        (b"1\nno timing\n", "a.srt", CorruptDocument),
        (b"%PDF-1.4", "a.pdf", UnsupportedFormat),
        (None, "a.docx", UnsupportedFormat),  # a .pptx named .docx
        (None, "a.odt", UnsupportedFormat),  # an .odp named .odt
        (None, "a.epub", UnsupportedFormat),  # an .odt named .epub
        (b"PK\x03\x04broken", "a.epub", CorruptDocument),
    ],
)
def test_bad_files_are_refused_with_their_status(data, name, error):
    if data is None:
        data = {".docx": make_pptx, ".odt": make_odp, ".epub": make_odt}[name[name.rindex(".") :]]()
    with pytest.raises(error) as raised:
        open_document(data, name)
    assert raised.value.status == (415 if error is UnsupportedFormat else 400)
