"""SubRip subtitles (.srt) through the srt library: each cue's text is a unit; index, timings and cue order are
untouched.

A cue's lines are one unit (a sentence often runs over two lines): its line breaks are ``<br>`` elements placed
after the target word aligned to the source word before them, so a cue keeps its number of lines. The formatting
tags SubRip players honour (``<i>``, ``<b>``, ``<u>``, ``<font ...>``) are kept around their aligned words; any
other ``<`` and ``&`` is text.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import srt

from service.documents.base import CorruptDocument, decode_text
from service.documents.inline import Markup, Node, Text, read

_TAG = re.compile(r"<(/?)(i|b|u|font)(\s[^<>]*)?>", re.IGNORECASE)
_BREAK = "\n"


class SubtitleDocument:
    pages = 0

    def __init__(self, data: bytes) -> None:
        text, self.encoding = decode_text(data, ".srt")
        try:
            self.cues = list(srt.parse(text))
        except (srt.SRTParseError, ValueError) as exc:
            raise CorruptDocument(f"the file could not be read as SubRip subtitles (.srt): {exc}") from None
        if text.strip() and not self.cues:
            raise CorruptDocument("the .srt file holds no cue (index, timing line, text)")
        self.markups: list[Markup] = []
        self.at: list[int] = []
        for i, cue in enumerate(self.cues):
            m = _cue_markup(cue.content)
            if m.has_text:
                self.markups.append(m)
                self.at.append(i)
        self.units = [m.value() for m in self.markups]
        self.characters = sum(m.characters for m in self.markups)

    def render(self, translated: Sequence[str]) -> bytes:
        for i, m, unit in zip(self.at, self.markups, translated, strict=True):
            content = _cue_text(read(unit), m.payloads)
            lines = [line.strip() for line in content.split(_BREAK)]
            self.cues[i].content = "\n".join(lines)
        return srt.compose(self.cues, reindex=False, strict=False).encode(self.encoding, errors="replace")


def _cue_markup(content: str) -> Markup:
    """A cue's text: tags as elements (a closing tag closes the innermost open one of its name), lines as atoms."""
    m, stack, at = Markup(), [], 0
    for tag in _TAG.finditer(content):
        _lines(m, content[at : tag.start()])
        at = tag.end()
        closing, name = tag.group(1) == "/", tag.group(2).lower()
        if closing:
            if name in stack:
                while stack:
                    m.close()
                    if stack.pop() == name:
                        break
        else:
            m.open(("tag", tag.group()[1:-1], name))
            stack.append(name)
    _lines(m, content[at:])
    while stack:
        stack.pop()
        m.close()
    return m


def _lines(m: Markup, text: str) -> None:
    for k, line in enumerate(text.split("\n")):
        if k:
            m.atom(("break",))
        m.text(line)


def _cue_text(nodes: Sequence[Text | Node], payloads: list) -> str:
    out = []
    for node in nodes:
        if isinstance(node, Text):
            out.append(node.value)
            continue
        payload = payloads[node.key] if node.key < len(payloads) else None
        inner = _cue_text(node.children, payloads)
        if payload == ("break",):
            out.append(_BREAK + inner)
        elif payload is not None:
            out.append(f"<{payload[1]}>{inner}</{payload[2]}>")
        else:
            out.append(inner)
    return "".join(out)
