"""Markdown (.md) through markdown-it-py (CommonMark with GFM tables): the text of paragraphs, headings, list
items, block quotes and table cells is translated where it stands in the file; everything else (code blocks,
HTML blocks, front matter, blank lines, list markers, quote markers, table rules, link reference definitions)
keeps its bytes.

Each inline run markdown-it finds is a unit: emphasis, strong, strikethrough and links become elements around their
aligned target words and are written back with the source's markers (``*``/``_``, ``**``, ``[text](url "title")``);
inline code, images, inline HTML and hard line breaks are kept whole and placed by alignment. A paragraph's soft
line breaks are not kept: its translation is one line (the rendered page is the same). Characters Markdown would
read as syntax are escaped in the translation.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from markdown_it import MarkdownIt

from service.documents.base import decode_text
from service.documents.inline import Markup, Node, Text, read

_FRONT_MATTER = re.compile(r"\A---\r?\n.*?\r?\n(---|\.\.\.)\r?\n", re.S)
_SYNTAX = re.compile(r"([\\`*_\[\]<|])")
_MARKS = {"em_open": "em", "strong_open": "strong", "s_open": "s"}


def _escape(text: str) -> str:
    return _SYNTAX.sub(r"\\\1", text)


def _title(title: str | None) -> str:
    return f' "{title}"' if title else ""


class _Unit:
    """One inline run: its markup, and where its text lies in the file (line, start column, end) per line."""

    def __init__(self, token, lines: list[str], cursor: list[int]) -> None:
        self.markup = Markup()
        self.spans: list[tuple[int, int, int]] = []
        self.continuation = ""
        for k, content_line in enumerate(token.content.split("\n")):
            row, col = cursor
            row = max(row, token.map[0])
            while row < len(lines):
                at = lines[row].find(content_line, col if row == cursor[0] else 0)
                if at >= 0:
                    break
                row, col = row + 1, 0
            if row >= len(lines):  # not found as written (tabs expanded, ...): the unit is left as it is
                self.spans = []
                return
            self.spans.append((row, at, at + len(content_line)))
            if k == 1:
                self.continuation = lines[row][:at]
            cursor[:] = [row, at + len(content_line)]
        self._children(token.children or [])

    def _children(self, children) -> None:
        m, stack = self.markup, []
        for child in children:
            kind = child.type
            if kind == "text":
                m.text(child.content)
            elif kind == "softbreak":
                m.text(" ")
            elif kind in _MARKS:
                m.open(("mark", child.markup), tag="span")
                stack.append(kind)
            elif kind == "link_open":
                m.open(("link", child.attrs.get("href", ""), child.attrs.get("title")), tag="a")
            elif kind.endswith("_close"):
                m.close()
            elif kind == "code_inline":
                m.atom(("raw", f"{child.markup}{child.content}{child.markup}"))
            elif kind == "image":
                src, title = child.attrs.get("src", ""), child.attrs.get("title")
                m.atom(("raw", f"![{child.content}]({src}{_title(title)})"))
            elif kind == "hardbreak":
                m.atom(("break",))
            else:  # html_inline and anything else: as written
                m.atom(("raw", child.content))

    def text(self, nodes: Sequence[Text | Node]) -> str:
        out, payloads = [], self.markup.payloads
        for node in nodes:
            if isinstance(node, Text):
                out.append(_escape(node.value))
                continue
            payload = payloads[node.key] if node.key < len(payloads) else ("none",)
            inner = self.text(node.children)
            if payload[0] == "mark":
                out.append(f"{payload[1]}{inner}{payload[1]}")
            elif payload[0] == "link":
                out.append(f"[{inner}]({payload[1]}{_title(payload[2])})")
            elif payload[0] == "raw":
                out.append(payload[1] + inner)
            elif payload[0] == "break":
                out.append("\\\n" + self.continuation + inner.lstrip())
            else:
                out.append(inner)
        return "".join(out)


class MarkdownDocument:
    pages = 0

    def __init__(self, data: bytes) -> None:
        text, self.encoding = decode_text(data, ".md")
        self.lines = text.splitlines(keepends=True)
        front = _FRONT_MATTER.match(text)
        skip = front.group().count("\n") if front else 0
        parser = MarkdownIt("commonmark").enable(["table", "strikethrough"])
        tokens = parser.parse(text[front.end() :] if front else text)
        cursor = [skip, 0]
        self.parts: list[_Unit] = []
        for token in tokens:
            if token.type != "inline" or token.map is None:
                continue
            token.map = [token.map[0] + skip, token.map[1] + skip]
            unit = _Unit(token, self.lines, cursor)
            if unit.spans and unit.markup.has_text:
                self.parts.append(unit)
        self.units = [u.markup.value() for u in self.parts]
        self.characters = sum(u.markup.characters for u in self.parts)

    def render(self, translated: Sequence[str]) -> bytes:
        lines = list(self.lines)
        edits: list[tuple[int, int, int, str]] = []
        for unit, value in zip(self.parts, translated, strict=True):
            new = unit.text(read(value)).strip()
            for k, (row, start, end) in enumerate(unit.spans):
                edits.append((row, start, end, new if k == 0 else ""))
        dropped = set()
        for row, start, end, new in sorted(edits, reverse=True):  # right to left: earlier columns stay valid
            line = lines[row]
            lines[row] = line[:start] + new + line[end:]
            if not new and not lines[row].strip(" \t>\r\n"):
                dropped.add(row)  # a continuation line left with nothing but its indentation or quote marks
        return "".join(line for i, line in enumerate(lines) if i not in dropped).encode(self.encoding, "replace")
