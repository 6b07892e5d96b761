"""Paragraphs made of runs (Office Open XML: Word's ``w:p``, PowerPoint's ``a:p``) as inline markup and back.

A run is text with properties (``w:rPr`` / ``a:rPr``: bold, italic, font, size, colour; in PowerPoint also its
hyperlink). Adjacent runs with equal properties are one piece of text; the properties most of the paragraph's
text has are its *base* and need no element; every other run becomes ``<span data-k>`` around its text, so the
translation carries it onto the aligned target words. Word's hyperlinks (and tracked insertions, smart tags)
contain runs: ``<a data-k>`` around theirs. What is not text (tabs, breaks, images, footnote references,
bookmarks, fields with their codes and results, equations, deleted text) is kept whole and placed by alignment.
Paragraph properties stay first and PowerPoint's end-of-paragraph properties last.

Rebuilt runs copy their properties from the source run; kept elements are moved, not copied, so a paragraph
nested inside one (a text box) is the same element that its own translation rewrites.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

from lxml import etree

from service.documents.inline import Markup, Node, Text, read


@dataclass(frozen=True)
class Dialect:
    """Tag names of one vocabulary (Clark notation)."""

    run: str
    run_props: str
    text: str
    first: frozenset[str]  # paragraph children kept first (paragraph properties)
    last: frozenset[str]  # kept last (PowerPoint's endParaRPr)
    containers: frozenset[str]  # elements holding runs (Word's hyperlink)
    field_char: str | None = None  # Word's fldChar: runs between begin and end are one kept piece
    space_attr: str | None = None  # xml:space on Word's w:t


@dataclass
class _Run:
    props: object | None  # the rPr element or None


@dataclass
class _Kept:
    elements: list  # moved as they are
    props: object | None = None  # set when the element came from inside a run: rebuilt inside a run with these


class RunParagraph:
    """One paragraph: its markup (``unit``), rebuilt from a translated unit by ``write``."""

    def __init__(self, p, dialect: Dialect) -> None:
        self.p, self.d = p, dialect
        self.pieces: list[tuple] = []  # ("text", props, str) | ("kept", _Kept) | ("open", el) | ("close",)
        self._field: list | None = None
        self._depth = 0
        for child in p:
            if child.tag in dialect.first or child.tag in dialect.last:
                continue
            self._scan(child)
        if self._field:
            self.pieces.append(("kept", _Kept(self._field)))
        self.base = self._base()
        self.markup = Markup()
        self._build()

    # --- reading --------------------------------------------------------------------------------------------
    def _scan(self, el) -> None:
        d = self.d
        if self._field is not None or (el.tag == d.run and self._field_change(el) > 0):
            self._field = [*(self._field or []), el]
            self._depth += self._field_change(el) if el.tag == d.run else 0
            if self._depth <= 0:
                self.pieces.append(("kept", _Kept(self._field)))
                self._field, self._depth = None, 0
            return
        if el.tag == d.run:
            props = el.find(d.run_props)
            for child in el:
                if child.tag == d.run_props:
                    continue
                if child.tag == d.text:
                    self.pieces.append(("text", props, child.text or ""))
                else:
                    self.pieces.append(("kept", _Kept([child], props)))
        elif el.tag in d.containers:
            self.pieces.append(("open", el))
            for child in el:
                self._scan(child)
            self.pieces.append(("close",))
        else:
            self.pieces.append(("kept", _Kept([el])))

    def _field_change(self, run) -> int:
        if self.d.field_char is None:
            return 0
        change = 0
        for fc in run.iter(self.d.field_char):
            kind = next((v for k, v in fc.attrib.items() if k.endswith("fldCharType")), "")
            change += 1 if kind == "begin" else -1 if kind == "end" else 0
        return change

    def _base(self) -> bytes | None:
        """The properties most of the text has (as bytes, the key runs are compared by)."""
        totals: dict[bytes | None, int] = {}
        for piece in self.pieces:
            if piece[0] == "text":
                key = _key(piece[1])
                totals[key] = totals.get(key, 0) + len(piece[2])
        return max(totals, key=totals.get) if totals else None

    def _build(self) -> None:
        m, current = self.markup, None  # current: the props key of the open run span, or None
        for piece in self.pieces:
            kind = piece[0]
            if kind == "text":
                key = _key(piece[1])
                if key != current and current is not None:
                    m.close()
                    current = None
                if key != self.base and current is None:
                    m.open(_Run(piece[1]))
                    current = key
                m.text(piece[2])
                continue
            if current is not None:
                m.close()
                current = None
            if kind == "kept":
                m.atom(piece[1])
            elif kind == "open":
                m.open(piece[1], tag="a")
            else:
                m.close()
        if current is not None:
            m.close()

    @property
    def unit(self) -> str:
        return self.markup.value()

    # --- writing --------------------------------------------------------------------------------------------
    def write(self, translated: str) -> None:
        """Replace the paragraph's content with the translated unit's text, formatting and kept elements."""
        d = self.d
        first = [c for c in self.p if c.tag in d.first]
        last = [c for c in self.p if c.tag in d.last]
        base_props = next((p[1] for p in self.pieces if p[0] == "text" and _key(p[1]) == self.base), None)
        for child in list(self.p):
            self.p.remove(child)
        for child in first:
            self.p.append(child)
        self._emit(read(translated), self.p, base_props)
        for child in last:
            self.p.append(child)

    def _emit(self, nodes: Sequence[Text | Node], parent, props) -> None:
        payloads = self.markup.payloads
        for node in nodes:
            if isinstance(node, Text):
                self._text_run(parent, props, node.value)
                continue
            payload = payloads[node.key] if node.key < len(payloads) else None
            if isinstance(payload, _Run):
                self._emit(node.children, parent, payload.props)
            elif isinstance(payload, _Kept):
                for el in payload.elements:
                    el.tail = None
                    if payload.props is None:
                        parent.append(el)
                    else:
                        run = etree.SubElement(parent, self.d.run)
                        run.append(copy.deepcopy(payload.props))
                        run.append(el)
                self._emit(node.children, parent, props)
            elif payload is not None:  # a container: a shallow copy holds its translated runs
                container = etree.SubElement(parent, payload.tag, attrib=dict(payload.attrib))
                self._emit(node.children, container, props)
            else:
                self._emit(node.children, parent, props)

    def _text_run(self, parent, props, value: str) -> None:
        if not value:
            return
        d = self.d
        previous = parent[-1] if len(parent) else None
        if (
            previous is not None
            and previous.tag == d.run
            and previous.get("_mt") == "1"
            and _key(previous.find(d.run_props)) == _key(props)
        ):
            t = previous.find(d.text)
            t.text = (t.text or "") + value
            self._preserve(t)
            return
        run = etree.SubElement(parent, d.run)
        run.set("_mt", "1")
        if props is not None:
            run.append(copy.deepcopy(props))
        t = etree.SubElement(run, d.text)
        t.text = value
        self._preserve(t)

    def _preserve(self, t) -> None:
        if self.d.space_attr is not None and t.text and t.text != t.text.strip():
            t.set(self.d.space_attr, "preserve")


def text_paragraphs(root, tag: str, dialect: Dialect) -> list[RunParagraph]:
    """Every paragraph (``tag``) under ``root`` that has text to translate, in document order."""
    paragraphs = (RunParagraph(p, dialect) for p in root.iter(tag))
    return [p for p in paragraphs if p.markup.has_text]


def write_all(paragraphs: Sequence[RunParagraph], translated: Sequence[str], roots: Sequence) -> None:
    """Rewrite each paragraph from its translated unit, then ``finish`` each root."""
    for paragraph, unit in zip(paragraphs, translated, strict=True):
        paragraph.write(unit)
    for root in roots:
        finish(root)


def finish(root) -> None:
    """Drop the marks ``write`` puts on the runs it makes (call once every paragraph of ``root`` is written)."""
    for el in root.iter():
        if isinstance(el.tag, str) and "_mt" in el.attrib:
            del el.attrib["_mt"]


def _key(props) -> bytes | None:
    return None if props is None else etree.tostring(props, method="c14n")
