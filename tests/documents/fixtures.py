"""Fixture files made with each format's own library: paragraphs with bold and italic runs, a hyperlink, a table,
a header, an image (office formats), cues with timings (.srt). Sentences use the tiny model's German words, so
its translations are English words (tests/tiny_bundle.py)."""

from __future__ import annotations

import io
import struct
import zlib

SENTENCES = [
    "der hund spielt im park",
    "eine kleine katze sitzt auf dem ball",
    "ein mann rennt und die frau sitzt",
    "das kind spielt mit dem roten ball",
]
GERMAN_ONLY = {"hund", "katze", "spielt", "rennt", "sitzt", "frau", "kind", "kleine", "roten"}
LINK = "https://example.org/hund"


def png(width: int = 3, height: int = 2) -> bytes:
    """A valid PNG (red pixels), built with zlib: the image every office fixture embeds."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def make_docx() -> bytes:
    import docx
    from docx.opc.constants import RELATIONSHIP_TYPE as RT
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    doc = docx.Document()
    doc.sections[0].header.paragraphs[0].text = "der mann und die frau"
    doc.sections[0].footer.paragraphs[0].text = "ein kind spielt"
    doc.add_heading("die katze", level=1)
    p = doc.add_paragraph("der ")
    p.add_run("hund").bold = True
    p.add_run(" spielt im ")
    p.add_run("park").italic = True
    doc.add_paragraph(SENTENCES[1])
    p = doc.add_paragraph("ein mann rennt und ")
    r_id = doc.part.relate_to(LINK, RT.HYPERLINK, is_external=True)
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), r_id)
    run = OxmlElement("w:r")
    text = OxmlElement("w:t")
    text.text = "die frau"
    run.append(text)
    link.append(run)
    p._p.append(link)
    p.add_run(" sitzt")
    table = doc.add_table(rows=2, cols=2)
    for i, cell in enumerate(c for row in table.rows for c in row.cells):
        cell.text = ["der hund", "die katze", "ein ball", "das kind"][i]
    doc.add_picture(io.BytesIO(png()))
    doc.add_paragraph(SENTENCES[3])
    out = io.BytesIO()
    doc.save(out)
    return out.getvalue()


def make_pptx() -> bytes:
    import pptx
    from pptx.util import Inches

    prs = pptx.Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[1])  # title and content
    slide.shapes.title.text = "die katze"
    frame = slide.placeholders[1].text_frame
    p = frame.paragraphs[0]
    p.add_run().text = "der "
    bold = p.add_run()
    bold.text = "hund"
    bold.font.bold = True
    p.add_run().text = " spielt im "
    italic = p.add_run()
    italic.text = "park"
    italic.font.italic = True
    q = frame.add_paragraph()
    q.add_run().text = "ein mann rennt und "
    linked = q.add_run()
    linked.text = "die frau"
    linked.hyperlink.address = LINK
    q.add_run().text = " sitzt"
    slide.notes_slide.notes_text_frame.text = SENTENCES[1]
    second = prs.slides.add_slide(prs.slide_layouts[5])  # title only
    second.shapes.title.text = SENTENCES[3]
    table = second.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    for i, cell in enumerate(table.iter_cells()):
        cell.text = ["der hund", "die katze", "ein ball", "das kind"][i]
    second.shapes.add_picture(io.BytesIO(png()), Inches(1), Inches(4))
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


def _odf_styles(doc):
    from odf.style import Style, TextProperties

    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    italic = Style(name="Italic", family="text")
    italic.addElement(TextProperties(fontstyle="italic"))
    doc.automaticstyles.addElement(bold)
    doc.automaticstyles.addElement(italic)
    return bold, italic


def _odf_paragraph(bold, italic):
    from odf.text import A, P, Span

    p = P(text="der ")
    p.addElement(Span(stylename=bold, text="hund"))
    p.addText(" spielt im ")
    p.addElement(Span(stylename=italic, text="park"))
    q = P(text="ein mann rennt und ")
    q.addElement(A(href=LINK, text="die frau"))
    q.addText(" sitzt")
    return p, q


def _odf_table():
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import P

    table = Table(name="T")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    words = iter(["der hund", "die katze", "ein ball", "das kind"])
    for _ in range(2):
        row = TableRow()
        for _ in range(2):
            cell = TableCell()
            cell.addElement(P(text=next(words)))
            row.addElement(cell)
        table.addElement(row)
    return table


def _odf_bytes(doc) -> bytes:
    out = io.BytesIO()
    doc.write(out)
    return out.getvalue()


def make_odt() -> bytes:
    from odf.draw import Frame, Image
    from odf.opendocument import OpenDocumentText
    from odf.style import Footer, Header, MasterPage, PageLayout
    from odf.text import H, P

    doc = OpenDocumentText()
    bold, italic = _odf_styles(doc)
    layout = PageLayout(name="Page")
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Standard", pagelayoutname=layout)
    header = Header()
    header.addElement(P(text="der mann und die frau"))
    footer = Footer()
    footer.addElement(P(text="ein kind spielt"))
    master.addElement(header)
    master.addElement(footer)
    doc.masterstyles.addElement(master)
    doc.text.addElement(H(outlinelevel=1, text="die katze"))
    for p in _odf_paragraph(bold, italic):
        doc.text.addElement(p)
    doc.text.addElement(P(text=SENTENCES[1]))
    doc.text.addElement(_odf_table())
    href = doc.addPicture("Pictures/red.png", "image/png", png())
    holder = P()
    frame = Frame(width="1cm", height="1cm", anchortype="as-char")
    frame.addElement(Image(href=href))
    holder.addElement(frame)
    doc.text.addElement(holder)
    doc.text.addElement(P(text=SENTENCES[3]))
    return _odf_bytes(doc)


def make_odp() -> bytes:
    from odf.draw import Frame, Image, Page, TextBox
    from odf.opendocument import OpenDocumentPresentation
    from odf.presentation import Notes
    from odf.style import MasterPage, PageLayout
    from odf.text import P

    doc = OpenDocumentPresentation()
    bold, italic = _odf_styles(doc)
    layout = PageLayout(name="Slide")
    doc.automaticstyles.addElement(layout)
    master = MasterPage(name="Default", pagelayoutname=layout)
    doc.masterstyles.addElement(master)
    first = Page(masterpagename=master)
    box = Frame(width="20cm", height="5cm", x="1cm", y="1cm")
    text = TextBox()
    text.addElement(P(text="die katze"))
    for p in _odf_paragraph(bold, italic):
        text.addElement(p)
    box.addElement(text)
    first.addElement(box)
    notes = Notes()
    notes_frame = Frame(width="10cm", height="5cm")
    notes_box = TextBox()
    notes_box.addElement(P(text=SENTENCES[1]))
    notes_frame.addElement(notes_box)
    notes.addElement(notes_frame)
    first.addElement(notes)
    doc.presentation.addElement(first)
    second = Page(masterpagename=master)
    table_frame = Frame(width="10cm", height="4cm", x="1cm", y="1cm")
    table_frame.addElement(_odf_table())
    second.addElement(table_frame)
    picture = Frame(width="1cm", height="1cm", x="1cm", y="6cm")
    picture.addElement(Image(href=doc.addPicture("Pictures/red.png", "image/png", png())))
    second.addElement(picture)
    caption = Frame(width="10cm", height="2cm", x="1cm", y="8cm")
    caption_box = TextBox()
    caption_box.addElement(P(text=SENTENCES[3]))
    caption.addElement(caption_box)
    second.addElement(caption)
    doc.presentation.addElement(second)
    return _odf_bytes(doc)


def make_srt() -> bytes:
    import datetime

    import srt

    def at(seconds: float) -> datetime.timedelta:
        return datetime.timedelta(seconds=seconds)

    cues = [
        srt.Subtitle(1, at(1.0), at(2.5), "der hund spielt\nim park"),
        srt.Subtitle(2, at(3.25), at(5.0), "<i>eine kleine katze</i> sitzt auf dem ball"),
        srt.Subtitle(3, at(6.0), at(8.125), "ein mann rennt\nund die frau sitzt"),
        srt.Subtitle(4, at(9.0), at(10.0), SENTENCES[3]),
    ]
    return srt.compose(cues).encode("utf-8")


MARKDOWN = f"""---
title: der hund
---

# die katze

der **hund** spielt im *park*

ein mann rennt und [die frau]({LINK}) sitzt

> {SENTENCES[1]}

| a | b |
| --- | --- |
| der hund | die katze |
| ein ball | das kind |

```
der code bleibt
```

- {SENTENCES[3]}
- ein `code` und ![bild](bild.png)
"""


def make_epub() -> bytes:
    """An e-book made with ebooklib: two chapters (a heading, bold and italic text, a link, a list, a table, an
    image, code that stays), a stylesheet, the navigation document and the NCX."""
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("mt-test-book")
    book.set_title("der hund")
    book.set_language("de")
    book.add_item(epub.EpubItem(uid="img", file_name="images/red.png", media_type="image/png", content=png()))
    css = epub.EpubItem(uid="css", file_name="style/book.css", media_type="text/css", content=b"p { margin: 0 }")
    book.add_item(css)
    one = epub.EpubHtml(title="die katze", file_name="chap1.xhtml", lang="de")
    one.content = (
        "<h1>die katze</h1>"
        "<p>der <b>hund</b> spielt im <i>park</i></p>"
        f'<p>ein mann rennt und <a href="{LINK}">die frau</a> sitzt</p>'
        f'<p>{SENTENCES[1]} <img src="images/red.png" alt="ball"/></p>'
        "<pre><code>der hund</code></pre>"
    )
    two = epub.EpubHtml(title="das kind", file_name="chap2.xhtml", lang="de")
    two.content = (
        f"<h2>das kind</h2><ul><li>der hund</li><li>die katze</li></ul>"
        f"<table><tr><td>ein ball</td><td>{SENTENCES[3]}</td></tr></table>"
    )
    for chapter in (one, two):
        chapter.add_item(css)
        book.add_item(chapter)
    book.toc = [one, two]
    book.spine = ["nav", one, two]
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    out = io.BytesIO()
    epub.write_epub(out, book)
    return out.getvalue()
