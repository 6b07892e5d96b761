"""E-books (.epub): every XHTML content document the package's OPF manifest lists (chapters, the navigation
document) read with lxml, each block of text (``p``, ``h1``..``h6``, ``li``, ``td``, ``figcaption``...)
translated with its inline elements kept.

Text directly in a block has the block's formatting; an inline element around text (``em``, ``strong``, ``span``,
``a``...) becomes ``<span data-k>`` (``<a data-k>`` for links) around its text, so the HTML path
(service/serving/html.py) places it on the aligned target words, and it is rebuilt with the same name and
attributes. What is not text (images, line breaks, empty anchors), what is never translated (``code``, ``pre``,
``script``, ``style``, ``svg``, ``math``, ``translate="no"``, class ``notranslate``) and elements of other
namespaces are kept whole and placed by alignment; a block inside a block is translated as its own unit.

Why not ebooklib: its ``write_epub`` rebuilds the package (a new OPF, navigation and NCX, re-serialised
documents), and an e-book must come back with everything but its text unchanged. So, as for OpenDocument, the zip
is copied entry by entry (same order, names, dates and compression; ``mimetype`` first and stored, as EPUB
requires) and only the content documents that hold text are replaced; images, fonts, CSS, the OPF and the NCX
keep their bytes.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from collections.abc import Sequence

from lxml import etree

from service.documents.base import CorruptDocument, UnsupportedFormat
from service.documents.inline import Markup
from service.documents.zipped_xml import repack, rewrite

MIMETYPE = "application/epub+zip"
XHTML = "{http://www.w3.org/1999/xhtml}"
CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
OPF = "{http://www.idpf.org/2007/opf}"
BLOCKS = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "div", "dt", "figcaption",
        "figure", "footer", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hgroup", "legend", "li", "main", "nav",
        "ol", "p", "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "title", "tr", "ul",
    }
)  # fmt: skip
SKIPPED = frozenset({"code", "pre", "script", "style", "kbd", "samp", "textarea", "svg", "math", "template"})


def _parser() -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)


def _local(el) -> str | None:
    """The XHTML name of an element; None for comments, processing instructions and other namespaces."""
    if not isinstance(el.tag, str) or not el.tag.startswith(XHTML):
        return None
    return el.tag[len(XHTML) :]


def _kept_whole(el) -> bool:
    name = _local(el)
    if name is None or name in SKIPPED or (el.get("translate") or "").strip().lower() == "no":
        return True
    return "notranslate" in (el.get("class") or "").split()


def _has_text(el) -> bool:
    return any(t.strip() for t in el.itertext())


class _Block:
    def __init__(self, el) -> None:
        self.el, self.markup = el, Markup()
        self.rebuilt: set[int] = set()  # keys of the inline elements (rebuilt around their translated text)
        self._scan(el)

    def _scan(self, el) -> None:
        m = self.markup
        m.text(el.text)
        for child in el:
            if _kept_whole(child) or _local(child) in BLOCKS or not _has_text(child):  # comments, PIs too
                m.atom(child)
            else:
                m.open(child, tag="a" if _local(child) == "a" else "span")
                self.rebuilt.add(len(m.payloads) - 1)
                self._scan(child)
                m.close()
            m.text(child.tail)

    def write(self, translated: str) -> None:
        rewrite(self.el, translated, self.markup.payloads, lambda key, _original: key in self.rebuilt)


class EpubDocument:
    pages = 0

    def __init__(self, data: bytes) -> None:
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
            mimetype = self.zip.read("mimetype").decode("ascii", "replace").strip()
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            raise CorruptDocument(f"the file could not be read as an EPUB package: {exc}") from None
        if mimetype != MIMETYPE:
            raise UnsupportedFormat(f"the package is of type {mimetype!r}, not an EPUB; rename it or upload another")
        self.trees: dict[str, etree._ElementTree] = {}
        self.blocks: list[_Block] = []
        for name in self._content_documents():
            tree = self._parse(name)
            before = len(self.blocks)
            for el in tree.getroot().iter(XHTML + "*"):
                if _local(el) in BLOCKS and not any(_kept_whole(a) for a in (el, *el.iterancestors())):
                    block = _Block(el)
                    if block.markup.has_text:
                        self.blocks.append(block)
            if len(self.blocks) > before:
                self.trees[name] = tree
        self.units = [b.markup.value() for b in self.blocks]
        self.characters = sum(b.markup.characters for b in self.blocks)

    def _parse(self, name: str) -> etree._ElementTree:
        try:
            return etree.parse(io.BytesIO(self.zip.read(name)), _parser())
        except KeyError:
            raise CorruptDocument(f"the EPUB's manifest lists {name}, which the package lacks") from None
        except etree.XMLSyntaxError as exc:
            raise CorruptDocument(f"{name} of the EPUB is not well-formed XML: {exc}") from None

    def _content_documents(self) -> list[str]:
        """The package paths of the XHTML documents the OPF manifest lists, in manifest order."""
        container = self._parse("META-INF/container.xml").getroot()
        rootfile = container.find(f"{CONTAINER}rootfiles/{CONTAINER}rootfile")
        if rootfile is None or not rootfile.get("full-path"):
            raise CorruptDocument("the EPUB's META-INF/container.xml names no package document")
        opf_path = rootfile.get("full-path")
        base = posixpath.dirname(opf_path)
        manifest = self._parse(opf_path).getroot().find(f"{OPF}manifest")
        if manifest is None:
            raise CorruptDocument(f"the EPUB's package document {opf_path} has no manifest")
        return [
            posixpath.normpath(posixpath.join(base, item.get("href", "")))
            for item in manifest.iter(f"{OPF}item")
            if item.get("media-type") == "application/xhtml+xml" and item.get("href")
        ]

    def render(self, translated: Sequence[str]) -> bytes:
        for block, unit in zip(self.blocks, translated, strict=True):
            block.write(unit)
        replaced = {
            name: etree.tostring(tree, xml_declaration=True, encoding=tree.docinfo.encoding or "utf-8")
            for name, tree in self.trees.items()
        }
        return repack(self.zip, replaced)
