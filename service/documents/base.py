"""What every document format offers, and the errors a file can cause (each with the HTTP status it earns).

A ``Document`` is read from the uploaded bytes; ``units`` are its translatable paragraphs as HTML markup
(service/documents/inline.py; a whole page for HTML files), ``render(translated)`` writes the file again with each
unit replaced by its translation (the same markup, translated by service/serving/html.py). Everything a format
does not translate is written back as it was read.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from typing import Protocol

BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


class DocumentError(ValueError):
    """A file the service cannot translate; ``status`` is the HTTP answer (400 corrupt or empty)."""

    status = 400


class CorruptDocument(DocumentError):
    status = 400


class UnsupportedFormat(DocumentError):
    """Not a format the service translates, or content of another format than the file's name says (415)."""

    status = 415


class DocumentTooLarge(DocumentError):
    status = 413


class Document(Protocol):
    units: list[str]  # HTML markup of each translatable paragraph, in document order
    characters: int  # text characters of the units (the character limit counts them)
    pages: int  # slides of a presentation; 0 where a format has no pages before layout

    def render(self, translated: Sequence[str]) -> bytes:
        """The file with unit i replaced by ``translated[i]`` (its markup, translated)."""
        ...


def decode_text(data: bytes, what: str) -> tuple[str, str]:
    """(text, encoding) of a text file: a BOM's encoding, else UTF-8, else a declared charset (HTML's meta), else
    cp1252. A file with NUL bytes is binary: CorruptDocument."""
    for bom, encoding in BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding), encoding
            except UnicodeDecodeError:
                raise CorruptDocument(f"the {what} file is not valid {encoding}") from None
    if b"\x00" in data:
        raise CorruptDocument(f"the {what} file holds binary data (NUL bytes); is it really a {what} file?")
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    declared = re.search(rb"""charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", data[:4096])
    if declared:
        name = declared.group(1).decode("ascii")
        try:
            return data.decode(name), name
        except (LookupError, UnicodeDecodeError):
            pass
    return data.decode("cp1252", errors="replace"), "cp1252"
