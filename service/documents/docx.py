"""Word documents (.docx) through python-docx: every paragraph of the body, tables, headers, footers, footnotes,
endnotes and comments, its runs' formatting kept (service/documents/office_runs.py).

python-docx opens the package and writes it back; parts that hold no story (images, styles, settings, themes,
fonts, custom XML) are written from the bytes they were read as.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence

import docx
from docx.opc.constants import CONTENT_TYPE as CT
from docx.opc.exceptions import PackageNotFoundError
from lxml import etree

from service.documents.base import CorruptDocument
from service.documents.office_runs import Dialect, RunParagraph, text_paragraphs, write_all

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
WORD = Dialect(
    run=W + "r",
    run_props=W + "rPr",
    text=W + "t",
    first=frozenset({W + "pPr"}),
    last=frozenset(),
    containers=frozenset({W + "hyperlink", W + "ins", W + "smartTag"}),
    field_char=W + "fldChar",
    space_attr="{http://www.w3.org/XML/1998/namespace}space",
)
STORIES = frozenset(
    {CT.WML_DOCUMENT_MAIN, CT.WML_HEADER, CT.WML_FOOTER, CT.WML_FOOTNOTES, CT.WML_ENDNOTES, CT.WML_COMMENTS}
)


class DocxDocument:
    pages = 0

    def __init__(self, data: bytes) -> None:
        try:
            self.doc = docx.Document(io.BytesIO(data))
        except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError, etree.XMLSyntaxError) as exc:
            raise CorruptDocument(f"the file could not be read as a Word document (.docx): {exc}") from None
        self.roots: list[tuple[object, object]] = []  # (part, root element) of every story
        self.paragraphs: list[RunParagraph] = []
        for part in self.doc.part.package.iter_parts():
            if part.content_type not in STORIES:
                continue
            root = getattr(part, "_element", None)
            if root is None:  # a part python-docx keeps as bytes: parsed here, written back in render
                try:
                    root = etree.fromstring(part.blob)
                except etree.XMLSyntaxError as exc:
                    raise CorruptDocument(f"the document's part {part.partname} is not XML: {exc}") from None
            self.roots.append((part, root))
            self.paragraphs.extend(text_paragraphs(root, W + "p", WORD))
        self.units = [p.unit for p in self.paragraphs]
        self.characters = sum(p.markup.characters for p in self.paragraphs)

    def render(self, translated: Sequence[str]) -> bytes:
        write_all(self.paragraphs, translated, [root for _, root in self.roots])
        for part, root in self.roots:
            if getattr(part, "_element", None) is None:
                part._blob = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
        out = io.BytesIO()
        self.doc.save(out)
        return out.getvalue()
