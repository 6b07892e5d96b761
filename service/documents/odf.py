"""OpenDocument text and presentations (.odt, .odp): ``content.xml`` (and the headers and footers in
``styles.xml``) read with lxml, every ``text:p`` / ``text:h`` translated with its spans and links kept.

Text directly in a paragraph has the paragraph's style; a ``text:span`` (its style: bold, italic, font) becomes
``<span data-k>`` and a ``text:a`` ``<a data-k>`` around its text, placed on the aligned target words and rebuilt
with the same attributes. Runs of spaces (``text:s``) are one space. Everything else inside a paragraph (frames
and images, notes, tabs, line breaks, fields, bookmarks, annotations) is kept whole and placed by alignment; a
paragraph inside one (a note's body, a text box) is translated as its own unit.

The package is copied entry by entry with zipfile (same order, names, dates and compression; ``mimetype`` first
and stored); only the two XML entries are replaced, every other entry (images, ``meta.xml``, the manifest) keeps
its bytes.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence

from lxml import etree

from service.documents.base import CorruptDocument, UnsupportedFormat
from service.documents.inline import Markup
from service.documents.zipped_xml import repack, rewrite

TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
STYLE = "{urn:oasis:names:tc:opendocument:xmlns:style:1.0}"
DRAW = "{urn:oasis:names:tc:opendocument:xmlns:drawing:1.0}"
REBUILT = frozenset({TEXT + "span", TEXT + "a"})  # the elements remade around their translated text
MIMETYPES = {
    "odt": "application/vnd.oasis.opendocument.text",
    "odp": "application/vnd.oasis.opendocument.presentation",
}
HEADERS = frozenset(
    STYLE + n for n in ("header", "footer", "header-left", "footer-left", "header-first", "footer-first")
)


class _Paragraph:
    def __init__(self, p) -> None:
        self.p, self.markup = p, Markup()
        self._scan(p)

    def _scan(self, el) -> None:
        m = self.markup
        m.text(el.text)
        for child in el:
            tag = child.tag
            if tag == TEXT + "span":
                m.open(child)
                self._scan(child)
                m.close()
            elif tag == TEXT + "a":
                m.open(child, tag="a")
                self._scan(child)
                m.close()
            elif tag == TEXT + "s":
                m.text(" ")
            elif isinstance(tag, str):
                m.atom(child)
            m.text(child.tail)

    def write(self, translated: str) -> None:
        rewrite(self.p, translated, self.markup.payloads, lambda _key, original: original.tag in REBUILT)


class OdfDocument:
    def __init__(self, data: bytes, kind: str) -> None:
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
            mimetype = self.zip.read("mimetype").decode("ascii", "replace").strip()
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            raise CorruptDocument(f"the file could not be read as an OpenDocument (.{kind}) package: {exc}") from None
        if mimetype != MIMETYPES[kind]:
            other = next((k for k, v in MIMETYPES.items() if v == mimetype), None)
            found = f"an .{other} document" if other else f"of type {mimetype!r}"
            raise UnsupportedFormat(f"the file is {found}, not .{kind}; rename it or upload another file")
        self.data = data
        self.trees: dict[str, object] = {}
        self.paragraphs: list[_Paragraph] = []
        for name in ("content.xml", "styles.xml"):
            try:
                root = etree.fromstring(self.zip.read(name), etree.XMLParser(resolve_entities=False, huge_tree=False))
            except KeyError:
                if name == "content.xml":
                    raise CorruptDocument(f"the .{kind} package has no content.xml") from None
                continue
            except etree.XMLSyntaxError as exc:
                raise CorruptDocument(f"{name} of the .{kind} package is not XML: {exc}") from None
            self.trees[name] = root
            for p in root.iter(TEXT + "p", TEXT + "h"):
                if name == "styles.xml" and not any(a.tag in HEADERS for a in p.iterancestors()):
                    continue
                paragraph = _Paragraph(p)
                if paragraph.markup.has_text:
                    self.paragraphs.append(paragraph)
        self.units = [p.markup.value() for p in self.paragraphs]
        self.characters = sum(p.markup.characters for p in self.paragraphs)
        self.pages = sum(1 for _ in self.trees["content.xml"].iter(DRAW + "page"))

    def render(self, translated: Sequence[str]) -> bytes:
        for paragraph, unit in zip(self.paragraphs, translated, strict=True):
            paragraph.write(unit)
        replaced = {
            name: etree.tostring(root, xml_declaration=True, encoding="UTF-8") for name, root in self.trees.items()
        }
        return repack(self.zip, replaced)
