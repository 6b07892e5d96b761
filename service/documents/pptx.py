"""PowerPoint presentations (.pptx) through python-pptx: the text of every slide (text boxes, placeholders, tables,
grouped shapes) and of its speaker notes, its runs' formatting and hyperlinks kept (service/documents/office_runs.py).

Slide layouts and masters (their placeholder prompts) are not translated and stay as they are; images, charts,
media and every other part are written from the bytes they were read as. ``pages`` is the number of slides.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence

import pptx
from lxml import etree
from pptx.exc import PackageNotFoundError
from pptx.opc.constants import CONTENT_TYPE as CT

from service.documents.base import CorruptDocument
from service.documents.office_runs import Dialect, RunParagraph, text_paragraphs, write_all

A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
DRAWING = Dialect(
    run=A + "r",
    run_props=A + "rPr",
    text=A + "t",
    first=frozenset({A + "pPr"}),
    last=frozenset({A + "endParaRPr"}),
    containers=frozenset(),
)
STORIES = frozenset({CT.PML_SLIDE, CT.PML_NOTES_SLIDE})


class PptxDocument:
    def __init__(self, data: bytes) -> None:
        try:
            self.presentation = pptx.Presentation(io.BytesIO(data))
        except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError, etree.XMLSyntaxError) as exc:
            raise CorruptDocument(f"the file could not be read as a PowerPoint presentation (.pptx): {exc}") from None
        self.pages = len(self.presentation.slides)
        self.roots = []
        self.paragraphs: list[RunParagraph] = []
        for part in self.presentation.part.package.iter_parts():
            if part.content_type not in STORIES:
                continue
            root = part._element
            self.roots.append(root)
            self.paragraphs.extend(text_paragraphs(root, A + "p", DRAWING))
        self.units = [p.unit for p in self.paragraphs]
        self.characters = sum(p.markup.characters for p in self.paragraphs)

    def render(self, translated: Sequence[str]) -> bytes:
        write_all(self.paragraphs, translated, self.roots)
        out = io.BytesIO()
        self.presentation.save(out)
        return out.getvalue()
