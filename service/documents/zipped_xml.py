"""What the zipped-XML formats (OpenDocument, EPUB) share: a block's children rebuilt from its translated
fragment, and the package copied entry by entry with only the rewritten XML documents replaced.

Both containers start with a ``mimetype`` entry, stored uncompressed, which readers check before anything else
(OpenDocument 1.2 part 3 section 3.3, EPUB OCF 3.0 section 4.3); every other entry keeps its name, order, date
and compression, so images, fonts and styles come back byte-identical.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lxml import etree

from service.documents.inline import Node, Text, read


def rewrite(el, translated: str, payloads: Sequence[Any], rebuilt: Callable[[int, Any], bool]) -> None:
    """Replace ``el``'s content by the translated fragment: text as text; an element whose key ``rebuilt(key,
    original)`` accepts made again (same tag and attributes) around its translated children; any other kept
    element (an image, a note, a code span) moved to where the alignment put it, whole."""
    for child in list(el):
        el.remove(child)
    el.text = None
    _emit(read(translated), el, payloads, rebuilt)


def _emit(nodes: Sequence[Text | Node], parent, payloads: Sequence[Any], rebuilt) -> None:
    last = None
    for node in nodes:
        if isinstance(node, Text):
            if last is None:
                parent.text = (parent.text or "") + node.value
            else:
                last.tail = (last.tail or "") + node.value
            continue
        original = payloads[node.key] if node.key < len(payloads) else None
        if original is None:
            continue
        if rebuilt(node.key, original):
            last = etree.SubElement(parent, original.tag, attrib=dict(original.attrib))
            _emit(node.children, last, payloads, rebuilt)
        else:  # kept whole: moved here
            original.tail = None
            parent.append(original)
            last = original


def repack(source: zipfile.ZipFile, replaced: Mapping[str, bytes]) -> bytes:
    """The package again, ``mimetype`` first and stored, the other entries in order with ``replaced`` bytes where
    given and their own bytes elsewhere."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        first = zipfile.ZipInfo("mimetype", source.getinfo("mimetype").date_time)  # stored: ZipInfo's default
        target.writestr(first, source.read("mimetype"))
        for info in source.infolist():
            if info.filename != "mimetype":
                data = replaced.get(info.filename, source.read(info))
                target.writestr(info, data, compress_type=info.compress_type)
    return out.getvalue()
