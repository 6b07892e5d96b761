"""core/language.py ``uncopied_latin``: the Latin-script words of a Chinese translation that its source lacks."""

from __future__ import annotations

import pytest

from core.language import uncopied_latin


@pytest.mark.parametrize(
    ("chinese", "source", "expected"),
    [
        ("人 reparieren了一家房子。", "People repair the roof of a house.", ["reparieren"]),
        ("一名波士顿 Terrier在白 Zaun前的 Gras上。", "A Boston terrier on grass by a fence.", ["Zaun", "Gras"]),
        ("我用Python写了一个API。", "I wrote an API in Python.", []),  # copied, whatever the case
        ("他在Zürich工作。", "Er arbeitet in Zürich.", []),  # letters beyond ASCII
        ("他是Müller和Müller的朋友。", "He is a friend.", ["Müller"]),  # each word once
        ("这是一个测试。", "This is a test.", []),
        ("我有3个C。", "I have 3 Cs.", []),  # one letter is not a word
    ],
)
def test_uncopied_latin(chinese: str, source: str, expected: list[str]) -> None:
    assert uncopied_latin(chinese, source) == expected
