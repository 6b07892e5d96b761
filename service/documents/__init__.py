"""Documents: the formats the service translates whole files of, each read into translatable units and written
back with its formatting (service/documents/base.py has the interface; one module per format).

``open_document(data, filename)`` picks the format from the file name's extension, checks the content is that
format (an office file named for another office format is refused with 415, a damaged one with 400) and reads it.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import PurePath

from service.documents.base import CorruptDocument, Document, DocumentError, DocumentTooLarge, UnsupportedFormat

# extension -> (format name, media type of the translated file)
FORMATS: dict[str, tuple[str, str]] = {
    ".txt": ("txt", "text/plain; charset=utf-8"),
    ".html": ("html", "text/html"),
    ".htm": ("html", "text/html"),
    ".md": ("md", "text/markdown; charset=utf-8"),
    ".markdown": ("md", "text/markdown; charset=utf-8"),
    ".srt": ("srt", "application/x-subrip"),
    ".docx": ("docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
    ".pptx": ("pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
    ".odt": ("odt", "application/vnd.oasis.opendocument.text"),
    ".odp": ("odp", "application/vnd.oasis.opendocument.presentation"),
    ".epub": ("epub", "application/epub+zip"),
}
ZIPPED = {
    "docx": "word/document.xml",
    "pptx": "ppt/presentation.xml",
    "odt": "mimetype",
    "odp": "mimetype",
    "epub": "mimetype",
}
MIMETYPES = {  # a zip's ``mimetype`` entry -> its format (OpenDocument and EPUB packages start with one)
    b"application/vnd.oasis.opendocument.text": "odt",
    b"application/vnd.oasis.opendocument.presentation": "odp",
    b"application/epub+zip": "epub",
}

__all__ = [
    "FORMATS",
    "CorruptDocument",
    "Document",
    "DocumentError",
    "DocumentTooLarge",
    "UnsupportedFormat",
    "format_of",
    "open_document",
]


def format_of(filename: str) -> str:
    """The format named by the file's extension; UnsupportedFormat (415) listing the supported ones otherwise."""
    suffix = PurePath(filename or "").suffix.lower()
    if suffix not in FORMATS:
        listed = ", ".join(sorted(FORMATS))
        raise UnsupportedFormat(
            f"files of type {suffix or '(no extension)'!r} are not translated; send one of {listed}"
        )
    return FORMATS[suffix][0]


def _sniff_zip(data: bytes) -> str | None:
    """The office format a zip package holds, by its main part (None: not a zip, or none of ours)."""
    try:
        names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
    if "word/document.xml" in names:
        return "docx"
    if "ppt/presentation.xml" in names:
        return "pptx"
    if "mimetype" in names:
        mimetype = zipfile.ZipFile(io.BytesIO(data)).read("mimetype").strip()
        return MIMETYPES.get(mimetype, "odp" if b"presentation" in mimetype else None)
    return None


def open_document(data: bytes, filename: str) -> Document:
    """The document read from ``data``; DocumentError with its HTTP status when it cannot be."""
    fmt = format_of(filename)
    if not data.strip():
        raise CorruptDocument("the file is empty")
    sniffed = _sniff_zip(data) if data[:2] == b"PK" else None
    if sniffed is not None and sniffed != fmt:
        raise UnsupportedFormat(f"the file's content is a .{sniffed} document, but its name says .{fmt}; rename it")
    if fmt in ZIPPED and data[:2] != b"PK":
        raise CorruptDocument(f"the file is not a .{fmt} document (a .{fmt} file is a zip package)")
    if fmt == "docx":
        from service.documents.docx import DocxDocument

        return DocxDocument(data)
    if fmt == "pptx":
        from service.documents.pptx import PptxDocument

        return PptxDocument(data)
    if fmt in ("odt", "odp"):
        from service.documents.odf import OdfDocument

        return OdfDocument(data, fmt)
    if fmt == "epub":
        from service.documents.epub import EpubDocument

        return EpubDocument(data)
    if sniffed is not None or data[:2] == b"PK":
        raise UnsupportedFormat(f"the file is a zip package, not a .{fmt} text file; rename it or send another file")
    if fmt == "md":
        from service.documents.markdown import MarkdownDocument

        return MarkdownDocument(data)
    if fmt == "srt":
        from service.documents.subtitles import SubtitleDocument

        return SubtitleDocument(data)
    from service.documents.plain import HtmlDocument, TextDocument

    return HtmlDocument(data) if fmt == "html" else TextDocument(data)
