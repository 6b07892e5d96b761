"""Compare two HTML fragments' markup: the same elements in the same nesting and order, with the same attributes,
and the same untouched (untranslatable) elements, whatever their text."""

from __future__ import annotations

import lxml.html

UNTOUCHED = ("code", "pre", "script", "style")


def _root(markup: str):
    return lxml.html.fragment_fromstring(markup.strip(), create_parent="div")


def structure(markup: str) -> list[tuple[int, str, tuple]]:
    """(depth, tag, attributes) of every element and comment, in document order."""
    out = []

    def walk(el, depth: int) -> None:
        for child in el:
            tag = child.tag if isinstance(child.tag, str) else "#comment"
            out.append((depth, tag, tuple(sorted(child.attrib.items())) if tag != "#comment" else (child.text,)))
            walk(child, depth + 1)

    walk(_root(markup), 0)
    return out


def untouched(markup: str) -> list[str]:
    """Serialisation of every element that must come back as it was (without its tail)."""
    found = []
    for el in _root(markup).iter():
        if not isinstance(el.tag, str):
            continue
        if el.tag in UNTOUCHED or el.get("translate") == "no":
            found.append(lxml.html.tostring(el, encoding="unicode", with_tail=False))
    return found


def assert_same_markup(source: str, translated: str) -> None:
    assert structure(translated) == structure(source), (source, translated)
    assert untouched(translated) == untouched(source), (source, translated)
