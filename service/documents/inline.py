"""A paragraph's inline content as HTML markup and back: how every document format reuses the HTML path.

A format turns each paragraph into an HTML fragment (``Markup``): its text escaped, each piece of formatting it
must keep (a run's properties, a hyperlink, a styled span) an element ``<span data-k="K">`` or ``<a data-k="K">``
around the text it covers, and each thing that is not text (an image, a tab, a line break, a field) a void
``<img data-k="K">``. ``K`` indexes ``Markup.payloads``, where the format keeps what the element stands for.
The fragment is translated as HTML (service/serving/html.py): the elements land on the target words the
cross-attention aligns to their source words, and void elements follow the word before them. ``read`` parses the
translated fragment back into ``Text`` and ``Node`` pieces, in order, for the format to rebuild its paragraph.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

import lxml.html


@dataclass
class Node:
    """An element of the translated fragment: ``key`` indexes the payloads; ``children`` in order."""

    key: int
    children: list[Text | Node] = field(default_factory=list)


@dataclass
class Text:
    value: str


class Markup:
    """Builds one paragraph's fragment; ``payloads[k]`` is what element ``data-k=k`` stands for."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.payloads: list[Any] = []
        self.characters = 0  # text characters (the document's character limit counts them)
        self._open: list[str] = []

    def _key(self, payload: Any) -> int:
        self.payloads.append(payload)
        return len(self.payloads) - 1

    def text(self, value: str | None) -> None:
        if value:
            self.parts.append(html.escape(value, quote=False))
            self.characters += len(value)

    def open(self, payload: Any, tag: str = "span") -> None:
        """Formatting that covers the text up to the matching ``close``."""
        self.parts.append(f'<{tag} data-k="{self._key(payload)}">')
        self._open.append(tag)

    def close(self) -> None:
        self.parts.append(f"</{self._open.pop()}>")

    def atom(self, payload: Any) -> None:
        """Something that is not text, kept whole and placed after the target word aligned to the word before it."""
        self.parts.append(f'<img data-k="{self._key(payload)}">')

    @property
    def has_text(self) -> bool:
        return any(p.strip() for p in self.parts if not p.startswith("<"))

    def value(self) -> str:
        assert not self._open, "unclosed element"
        return "".join(self.parts)


def read(fragment: str) -> list[Text | Node]:
    """The pieces of a translated fragment (``Markup``'s elements found again by their ``data-k``). An element
    without a key (none is made by ``Markup``) contributes its content."""
    root = lxml.html.fragment_fromstring(fragment, create_parent="div")
    return _children(root)


def _children(el) -> list[Text | Node]:
    out: list[Text | Node] = []
    if el.text:
        out.append(Text(el.text))
    for child in el:
        if isinstance(child.tag, str):
            key = child.get("data-k")
            inner = _children(child)
            if key is not None and key.isdigit():
                out.append(Node(int(key), inner))
            else:
                out.extend(inner)
        if child.tail:
            out.append(Text(child.tail))
    return out


def plain(pieces: list[Text | Node]) -> str:
    """The text of pieces (tests, character counts)."""
    return "".join(p.value if isinstance(p, Text) else plain(p.children) for p in pieces)
