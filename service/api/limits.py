"""What every API tells a client whose text is over the length limit: the setting that sets it, and the way to
translate a longer text (split it, or send it as a document)."""

from __future__ import annotations


def too_long_hint(limit: int, documents: str) -> str:
    """The advice after a protocol's own "too long" message; ``documents``: that protocol's document route."""
    return (
        f"the limit is {limit} characters per text (MT_MAX_CHARS_PER_TEXT, set by the server's operator): split the "
        f"text into several texts, or translate it as a document with {documents} (docs/documents.md)"
    )
