"""Plain text (.txt) and HTML pages (.html, .htm).

Text: each line is a unit (as /v1/translate keeps N lines in, N lines out), line endings and blank lines kept.
HTML: the whole page is one unit, translated by service/serving/html.py (markup kept, inline tags placed by
alignment, ``code``/``pre``/``script``/``style`` and ``translate="no"`` untouched). Both are written back in the
encoding they were read in (a BOM, UTF-8, the page's declared charset, else cp1252); a character that encoding
lacks becomes a character reference in HTML and ``?`` in text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import lxml.html

from service.documents.base import CorruptDocument, decode_text
from service.documents.inline import Markup, plain, read

_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)


class TextDocument:
    pages = 0

    def __init__(self, data: bytes) -> None:
        text, self.encoding = decode_text(data, ".txt")
        self.lines = text.splitlines(keepends=True)
        self.units, self.at, self.characters = [], [], 0
        for i, line in enumerate(self.lines):
            m = Markup()
            m.text(line.rstrip("\r\n"))
            if m.has_text:
                self.units.append(m.value())
                self.at.append(i)
                self.characters += m.characters

    def render(self, translated: Sequence[str]) -> bytes:
        lines = list(self.lines)
        for i, unit in zip(self.at, translated, strict=True):
            ending = lines[i][len(lines[i].rstrip("\r\n")) :]
            lines[i] = plain(read(unit)) + ending
        return "".join(lines).encode(self.encoding, errors="replace")


class HtmlDocument:
    pages = 0

    def __init__(self, data: bytes) -> None:
        text, self.encoding = decode_text(data, ".html")
        declaration = _XML_DECLARATION.match(text)  # lxml refuses a str that declares an encoding
        self.declaration = declaration.group() if declaration else ""
        body = text[len(self.declaration) :]
        try:
            root = lxml.html.document_fromstring(body) if body.strip() else None
        except (ValueError, lxml.etree.ParserError) as exc:
            raise CorruptDocument(f"the file could not be read as HTML: {exc}") from None
        self.characters = len(root.text_content().strip()) if root is not None else 0
        self.units = [body] if self.characters else []
        self.body = body

    def render(self, translated: Sequence[str]) -> bytes:
        page = translated[0] if translated else self.body
        encoding = "utf-8" if self.encoding == "utf-8-sig" else self.encoding
        prefix = b"\xef\xbb\xbf" if self.encoding == "utf-8-sig" else b""
        return prefix + (self.declaration + page).encode(encoding, errors="xmlcharrefreplace")
