"""HTML: translate the text of a fragment (or document) and keep its markup.

Parsed with lxml (libxml2's HTML parser). What is kept:
- every element, in the same nesting and order, with its attributes (so the output parses to the same tag
  structure); comments;
- untranslated and untouched: ``code``, ``pre``, ``script``, ``style``, ``kbd``, ``samp``, ``textarea``,
  ``svg``, ``math``, ``template`` and any element with ``translate="no"`` or class ``notranslate``;
- the whitespace before and after the fragment and around each translated run of text.

Entities are decoded for translation and written back by lxml's serializer: ``&amp; &lt; &gt;`` stay escaped
(in text and attributes), other entities come back as the characters they stand for (``&copy;`` -> ``©``).

How text is cut: block elements (``p``, ``li``, ``td``, ``h1``...) are translated separately; inside one, the
text of its inline elements (``b``, ``a``, ``span``...) forms one *unit*, split into sentences
(service/serving/segmentation.py). An inline element inside a sentence is placed around the target words that
the cross-attention aligns to its source words: each target word takes the source word its subwords attend to
most (attention summed over the word's source subwords, averaged over its target subwords and all layers and
heads); each element then takes the contiguous run of target words with the most of its own words minus others'
(inside its parent's run, after its earlier siblings). Untranslatable inline elements and ``<br>``/``<img>``
follow the target word aligned to the source word before them.

XML (``Markup(xml=True)``, the DeepL API's ``tag_handling=xml``) goes the same way with XML's rules instead of
HTML's: parsed by lxml's XML parser (no DTD, no entity expansion), names kept as written, no tag has a meaning of
its own; an element whose own text is only whitespace around child elements is structure, and it and its children
are blocks (translated separately), as are ``splitting_tags`` and any element holding a block;
``non_splitting_tags`` never are (``outline_detection`` false: only ``splitting_tags`` and what holds them are).
``ignore_tags`` (HTML or XML) are kept untranslated like ``code``.

``HtmlPlan(html, language).sentences`` lists what to translate; ``plan.render(aligned)`` writes the result from
one ``Aligned`` (target words, source word of each) per sentence (word_alignment.py ``align_words``).
service/serving/prepared.py does both through the model's scheduler.
"""

from __future__ import annotations

import html as html_lib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import lxml.etree
import lxml.html

from service.serving.segmentation import NO_SPACE_LANGUAGES, segment
from service.serving.words import is_glued

SKIP_TAGS = frozenset({"code", "pre", "script", "style", "kbd", "samp", "textarea", "svg", "math", "template"})
# fmt: off
BLOCK_TAGS = frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "center", "colgroup", "dd", "details",
    "dialog", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4",
    "h5", "h6", "head", "header", "hgroup", "hr", "html", "legend", "li", "main", "menu", "nav", "ol",
    "optgroup", "option", "p", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "title",
    "tr", "ul",
})
# fmt: on
SEPARATE_TAGS = frozenset({"pre", "script", "style", "template", "textarea", "svg", "math"})  # never inside a sentence
VOID_TAGS = frozenset({"br", "img", "wbr", "input", "area", "embed", "source", "track", "col", "meta", "link", "base"})
_DOCUMENT = re.compile(r"\s*(<!doctype|<html[\s>])", re.IGNORECASE)
# characters libxml2 refuses (it parses into an XML tree): C0 controls but tab/LF/CR, lone surrogates, U+FFFE/F
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")

_XML_DECLARATION = re.compile(r"\s*<\?xml[^>]*\?>")

Aligned = tuple[list[str], list[int | None]]  # target words, the (sentence-local) source word of each or None


class MarkupError(ValueError):
    """Markup that cannot be parsed (XML that is not well-formed); the message says where."""


@dataclass(frozen=True)
class Markup:
    """How tags are read: HTML's rules or XML's, and the tags a request names (lower case for HTML)."""

    xml: bool = False
    ignore: frozenset[str] = frozenset()  # kept untranslated, like <code>
    splitting: frozenset[str] = frozenset()  # XML: always a block
    non_splitting: frozenset[str] = frozenset()  # XML: never a block
    outline: bool = True  # XML: tell structure from whitespace-only text (else only ``splitting`` are blocks)

    def name(self, el) -> str:
        """The tag name the rules compare: lower case for HTML; as written, without a namespace, for XML."""
        return lxml.etree.QName(el).localname if self.xml else el.tag.lower()


HTML = Markup()


def _is_comment(el) -> bool:
    return not isinstance(el.tag, str)


def _skipped(el, markup: Markup = HTML) -> bool:
    """Untouched: never translated, content kept as it is (comments and processing instructions too)."""
    if _is_comment(el):
        return True
    name = markup.name(el)
    if name in markup.ignore or (not markup.xml and name in SKIP_TAGS):
        return True
    if (el.get("translate") or "").strip().lower() == "no":
        return True
    return not markup.xml and "notranslate" in (el.get("class") or "").split()


def _structural(el) -> bool:
    """XML: an element holding child elements and, around them, only whitespace."""
    if _is_comment(el) or len(el) == 0 or (el.text or "").strip():
        return False
    return not any((child.tail or "").strip() for child in el)


def _is_block(el, markup: Markup = HTML) -> bool:
    if _is_comment(el):
        return False
    if markup.xml:
        name = markup.name(el)
        if name in markup.splitting:
            return True
        if name in markup.non_splitting:
            return False
        parent = el.getparent()
        if markup.outline and (_structural(el) or (parent is not None and _structural(parent))):
            return True
        return not _skipped(el, markup) and any(_is_block(child, markup) for child in el)  # holds a block
    if el.tag.lower() in BLOCK_TAGS:
        return True
    return not _skipped(el, markup) and any(_is_block(child, markup) for child in el)


@dataclass(eq=False)
class _Node:
    """An element inside a unit: translated inline ("elem") or kept as one piece ("atom")."""

    el: object
    kind: str
    children: list[_Node] = field(default_factory=list)
    words: set[int] = field(default_factory=set)  # source words inside it (its descendants' too)
    anchor: int = 0  # atoms: number of source words before it
    ws_before: bool = False
    ws_after: bool = False
    start: int = 0  # target word interval given by the placement
    end: int = 0


@dataclass(eq=False)
class _Unit:
    """A run of inline content: text of a first slot (``(element, "text" | "tail")``) and inline children."""

    slot: tuple[object, str]
    root: _Node
    words: list[str]
    leading: str
    trailing: str
    sentences: list[tuple[int, int]] = field(default_factory=list)  # [start, end) source word ranges


class HtmlPlan:
    def __init__(self, markup: str, language: str = "en", split: bool = True, rules: Markup = HTML) -> None:
        self.language, self.split, self.rules = language, split, rules
        body = _NOT_XML.sub("\ufffd", markup)
        stripped = body.strip()
        self.leading, self.trailing = body[: len(body) - len(body.lstrip())], body[len(body.rstrip()) :]
        self.document = not rules.xml and bool(_DOCUMENT.match(stripped))
        self.has_doctype = stripped[:9].lower() == "<!doctype"  # lxml reports a default doctype when none was given
        self.units: list[_Unit] = []
        self.tree = None
        if not stripped:
            self.leading, self.trailing = body, ""
            return
        if rules.xml:
            self.tree = _parse_xml(self, stripped)
        elif self.document:
            self.tree = lxml.html.document_fromstring(stripped)
        else:
            self.tree = lxml.html.fragment_fromstring(stripped, create_parent="div")
        self._container(self.tree)

    # --- reading ----------------------------------------------------------------------------------
    def _container(self, el) -> None:
        """Units of a block element: runs of inline content between its block children."""
        slot, run = (el, "text"), []
        rules = self.rules
        for child in el:
            separates = _is_block(child, rules) or (
                _skipped(child, rules)
                and not _is_comment(child)
                and not rules.xml
                and child.tag.lower() in BLOCK_TAGS | SEPARATE_TAGS
            )
            if not separates:
                run.append(child)  # inline: translated with the text around it, or kept whole as an atom
                continue
            self._unit(slot, run)
            if not _skipped(child, rules):
                self._container(child)
            slot, run = (child, "tail"), []
        self._unit(slot, run)

    def _unit(self, slot: tuple[object, str], run: list) -> None:
        chars: list[tuple[str, _Node | None]] = []  # characters of the unit with their innermost element
        root = _Node(None, "root")

        def text(value: str | None, owner: _Node) -> None:
            chars.extend((c, owner) for c in value or "")

        rules = self.rules

        def walk(el, parent: _Node) -> None:
            if _skipped(el, rules) or (not rules.xml and el.tag.lower() in VOID_TAGS) or not _has_text(el, rules):
                node = _Node(el, "atom")
                node.anchor = len(chars)  # a character position for now; turned into a word count below
                chars.append((" ", None))  # an atom separates words
            else:
                node = _Node(el, "elem")
                text(el.text, node)
                for child in el:
                    walk(child, node)
            parent.children.append(node)
            text(el.tail, parent)

        text(getattr(slot[0], slot[1]), root)
        for child in run:
            walk(child, root)
        full = "".join(c for c, _ in chars)
        words, owners, starts = [], [], []
        for m in re.finditer(r"\S+", full):
            words.append(m.group())
            owners.append(chars[m.start()][1])
            starts.append(m.start())
        if not words:
            return
        parents = _parents(root)
        for w, owner in enumerate(owners):
            node = owner
            while node is not None:
                node.words.add(w)
                node = parents.get(node)
        for node in _atoms(root):
            at = node.anchor
            node.ws_before = at > 0 and (chars[at - 1][0].isspace() and chars[at - 1][1] is not None)
            node.ws_after = at + 1 < len(chars) and chars[at + 1][0].isspace() and chars[at + 1][1] is not None
            node.anchor = sum(1 for s in starts if s < at)
        leading = "".join(c for c, owner in chars[: len(full) - len(full.lstrip())] if owner is not None)
        trailing = "".join(c for c, owner in chars[len(full.rstrip()) :] if owner is not None)
        unit = _Unit(slot, root, words, leading, trailing)
        # sentences: split the unit's words (joined by spaces) and give each sentence the words starting in it
        joined = " ".join(words)
        offsets, at = [], 0
        for w in words:
            offsets.append(at)
            at += len(w) + 1
        pieces = segment(joined, self.language) if self.split else [joined]
        cursor, bounds = 0, []
        for piece in pieces:
            found = joined.find(piece, cursor)
            if found < 0:
                bounds = [0]
                break
            bounds.append(found)
            cursor = found + len(piece)
        first_words = sorted({next(i for i, o in enumerate(offsets) if o + len(words[i]) > b) for b in bounds} | {0})
        unit.sentences = [(s, e) for s, e in zip(first_words, [*first_words[1:], len(words)], strict=True) if e > s]
        self.units.append(unit)

    @property
    def sentences(self) -> list[str]:
        return [" ".join(u.words[s:e]) for u in self.units for s, e in u.sentences]

    # --- writing ----------------------------------------------------------------------------------
    def render(self, aligned: Sequence[Aligned], target_language: str = "en") -> str:
        """The markup with each sentence's text replaced by its target words (one ``Aligned`` per sentence,
        in the order of ``sentences``)."""
        if self.tree is None:
            return self.leading + self.trailing
        k = 0
        for unit in self.units:
            target: list[str] = []
            links: list[int | None] = []
            bounds: list[tuple[int, int]] = []
            for s, _ in unit.sentences:
                words, local = aligned[k]
                k += 1
                bounds.append((len(target), len(target) + len(words)))
                target.extend(words)
                links.extend(None if link is None else s + link for link in local)
            _render_unit(unit, target, links, bounds, target_language)
        if self.rules.xml:
            out = html_lib.escape(self.tree.text or "", quote=False)
            out += "".join(lxml.etree.tostring(child, encoding="unicode") for child in self.tree)
        elif self.document:
            doctype = self.tree.getroottree().docinfo.doctype if self.has_doctype else None
            out = lxml.html.tostring(self.tree, encoding="unicode", doctype=doctype or None)
        else:
            out = html_lib.escape(self.tree.text or "", quote=False)
            out += "".join(lxml.html.tostring(child, encoding="unicode") for child in self.tree)
        return self.leading + out + self.trailing


def plain_text(markup: str, language: str) -> str:
    """The text of an HTML fragment as it is translated (its sentences, without markup or skipped elements): what
    the language check and the warnings of an HTML translation read."""
    return " ".join(HtmlPlan(markup, language).sentences)


def _parse_xml(plan: HtmlPlan, text: str):
    """An XML fragment or document inside a wrapper element (its declaration kept verbatim in front); DTDs and
    entities are refused, never expanded or fetched."""
    declaration = _XML_DECLARATION.match(text)
    if declaration:
        plan.leading += declaration.group()
        text = text[declaration.end() :]
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise MarkupError("XML with a DOCTYPE or entity declarations is not translated; send the content alone")
    parser = lxml.etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)
    try:
        return lxml.etree.fromstring(f"<mt-root>{text}</mt-root>", parser)
    except lxml.etree.XMLSyntaxError as exc:
        raise MarkupError(f"the XML is not well-formed: {exc}") from None


def _has_text(el, markup: Markup = HTML) -> bool:
    """Whether an inline element has words of its own to translate (in its text or its children's)."""
    if (el.text or "").strip():
        return True
    for child in el:
        if (child.tail or "").strip():
            return True
        if _skipped(child, markup) or (not markup.xml and child.tag.lower() in VOID_TAGS):
            continue
        if _has_text(child, markup):
            return True
    return False


def _parents(root: _Node) -> dict[_Node, _Node | None]:
    out: dict[_Node, _Node | None] = {root: None}
    stack = [root]
    while stack:
        node = stack.pop()
        for child in node.children:
            out[child] = node
            stack.append(child)
    return out


def _atoms(root: _Node) -> list[_Node]:
    found, stack = [], [root]
    while stack:
        node = stack.pop()
        found.extend(c for c in node.children if c.kind == "atom")
        stack.extend(c for c in node.children if c.kind == "elem")
    return found


def _best_run(own: list[bool]) -> tuple[int, int] | None:
    """[start, end) maximising (own words - other words) inside; None when no own word (Kadane)."""
    best, best_range, total, start = 0, None, 0, 0
    for i, mine in enumerate(own):
        if total <= 0:
            total, start = 0, i
        total += 1 if mine else -1
        if total > best:
            best, best_range = total, (start, i + 1)
    return best_range


@dataclass(frozen=True)
class _Sentences:
    """Where each sentence of a unit lies: [start, end) of its source words and of its target words."""

    source: list[tuple[int, int]]
    target: list[tuple[int, int]]

    def atom_position(self, anchor: int, links: list[int | None]) -> int:
        """Where an atom that followed ``anchor`` source words goes: at the end of its sentence's translation
        when it followed the sentence's last word, else after the last target word aligned to the nearest source
        word before it (inside the same sentence's translation)."""
        if anchor == 0:
            return 0
        k = next(i for i, (s, e) in enumerate(self.source) if s < anchor <= e)
        (s, e), (lo, hi) = self.source[k], self.target[k]
        if anchor == e:
            return hi
        for w in range(anchor - 1, s - 1, -1):
            hits = [j for j in range(lo, hi) if links[j] == w]
            if hits:
                return max(hits) + 1
        return lo + round((anchor - s) * (hi - lo) / max(e - s, 1))


def _place(node: _Node, lo: int, hi: int, links: list[int | None], sentences: _Sentences) -> None:
    cursor = lo
    for child in node.children:
        if child.kind == "atom":
            pos = min(max(sentences.atom_position(child.anchor, links), cursor), hi)
            child.start = child.end = cursor = pos
            continue
        run = _best_run([links[j] in child.words for j in range(cursor, hi)])
        if run is None:
            start, end = cursor, min(cursor + 1, hi)  # nothing aligned: the next word, so its text is not lost
        else:
            start, end = cursor + run[0], cursor + run[1]
        child.start, child.end, cursor = start, end, end
        _place(child, start, end, links, sentences)


def _render_unit(
    unit: _Unit, target: list[str], links: list[int | None], bounds: list[tuple[int, int]], target_language: str
) -> None:
    _place(unit.root, 0, len(target), links, _Sentences(unit.sentences, bounds))
    events: list[tuple[str, object]] = []

    def emit(node: _Node, lo: int, hi: int) -> None:
        pos = lo
        for child in node.children:
            events.extend(("word", target[j]) for j in range(pos, child.start))
            if child.kind == "atom":
                events.append(("atom", child))
            else:
                events.append(("open", child.el))
                emit(child, child.start, child.end)
                events.append(("close", child.el))
            pos = child.end
        events.extend(("word", target[j]) for j in range(pos, hi))

    emit(unit.root, 0, len(target))
    # clear the unit's text: its first slot, and the text and tails of everything inside it (atoms keep theirs)
    setattr(unit.slot[0], unit.slot[1], None)
    stack = list(unit.root.children)
    while stack:
        node = stack.pop()
        node.el.tail = None
        if node.kind == "elem":
            node.el.text = None
            stack.extend(node.children)

    def write(slot: tuple[object, str], value: str) -> None:
        if value:
            setattr(slot[0], slot[1], (getattr(slot[0], slot[1]) or "") + value)

    spaced = target_language not in NO_SPACE_LANGUAGES
    current = space_slot = unit.slot
    write(current, unit.leading)
    previous = None  # "word", "atom+" (an atom with whitespace after it), "atom", or None at the start
    for kind, value in events:
        if kind == "word":
            if spaced and previous in ("word", "atom+") and not is_glued(value):  # type: ignore[arg-type]
                write(space_slot, " ")
            write(current, value)  # type: ignore[arg-type]
            previous, space_slot = "word", current
        elif kind == "open":
            current = (value, "text")
        elif kind == "close":
            current = space_slot = (value, "tail")
        else:
            atom: _Node = value  # type: ignore[assignment]
            if previous is not None and atom.ws_before:
                write(space_slot, " ")
            current = space_slot = (atom.el, "tail")
            previous = "atom+" if atom.ws_after else "atom"
    write(current, unit.trailing)
