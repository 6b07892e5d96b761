"""Numbers as languages write them: German groups thousands with "." and writes decimals with ","; English and
Chinese the other way round (``1.250.000`` and ``12,5`` in German are ``1,250,000`` and ``12.5`` in English).

Used where a number must come through a translation: data preparation's placeholders (model/augment.py) and the
service's number checks and conversions (service/serving/spans.py). Times and numeric dates (16:45, 12.05.2024,
2024-05-12) are copied as written, never converted.
"""

from __future__ import annotations

import re

# digits with optional thousands groups (".", ",", thin or plain space) and an optional decimal part
NUMBER = re.compile(
    r"(?<![A-Za-z0-9.,])\d{1,3}(?:(?:[.,]|\u202f|\u00a0)\d{3})+(?:[.,]\d+)?(?![A-Za-z0-9])"  # grouped thousands
    r"|(?<![A-Za-z0-9.,])\d+(?:[.,]\d+)?(?![A-Za-z0-9])"  # plain digits (beside Chinese too), optional decimals
)
# times and numeric dates are copied as written (16:45, 12.05.2024, 2024-05-12)
TIME_OR_DATE = re.compile(
    r"(?<![A-Za-z0-9.,:])(?:\d{1,3}:\d{1,3}(?::\d{2})?|\d{1,2}\.\d{1,2}\.\d{2,4}|\d{4}-\d{2}-\d{2})(?![A-Za-z0-9])"
)  # 16:45, a score (2:2) or a ratio (1:100), 12.05.2024, 2024-05-12
# a German ordinal ("am 27. Juli", "der 50. Etage") or a number inside a compound ("90-ern", "3-jährige"): not a
# number the translation writes as such
NOT_A_QUANTITY = re.compile(r"\.\s+[^\W\d_]|-[^\W\d_]")


def number_value(text: str, language: str) -> float | None:
    """The value of a number as written in ``language``: German groups thousands with "." (or a space) and writes
    decimals with ","; English and Chinese the other way round. None when it cannot be read so."""
    compact = text.replace("\u202f", "").replace("\u00a0", "").replace(" ", "")
    group, decimal = (".", ",") if language == "de" else (",", ".")
    parts = compact.split(decimal)
    if len(parts) > 2:
        return None
    whole = parts[0]
    if group in whole:
        chunks = whole.split(group)
        if not (1 <= len(chunks[0]) <= 3 and all(len(c) == 3 for c in chunks[1:])):
            return None
        whole = "".join(chunks)
    if not whole.isdigit() or (len(parts) == 2 and not parts[1].isdigit()):
        return None
    return float(whole + ("." + parts[1] if len(parts) == 2 else ""))


def written_in(text: str, source: str, target: str) -> str | None:
    """A number of ``source`` written in ``target``'s convention (``1.250.000``, de -> en: ``1,250,000``), the text
    itself where both write numbers alike, None when ``text`` is not a number of ``source``."""
    value = number_value(text, source)
    if value is None:
        return None
    if _convention(source) == _convention(target):
        return text
    group, decimal = (".", ",") if _convention(target) == "de" else (",", ".")
    compact = text.replace("\u202f", "").replace("\u00a0", "").replace(" ", "")
    digits_decimal = compact.split(_decimal(source))
    whole = digits_decimal[0].replace(_group(source), "")
    grouped = _group_thousands(whole, group) if _grouped(text, source) else whole  # 50667 (a postcode) stays so
    return grouped + (decimal + digits_decimal[1] if len(digits_decimal) == 2 else "")


def _convention(language: str) -> str:
    return "de" if language == "de" else "en"


def _group(language: str) -> str:
    return "." if _convention(language) == "de" else ","


def _decimal(language: str) -> str:
    return "," if _convention(language) == "de" else "."


def _grouped(text: str, language: str) -> bool:
    return any(sep in text.split(_decimal(language))[0] for sep in (_group(language), "\u202f", "\u00a0", " "))


def _group_thousands(digits: str, group: str) -> str:
    head = len(digits) % 3 or 3
    return group.join([digits[:head]] + [digits[i : i + 3] for i in range(head, len(digits), 3)])
