"""Export's ``--directions``: the directions a multilingual bundle serves, each tag checked against its tokenizer.

``de-en,en-de,zh-en,en-zh,de-zh:pivot=en,zh-de:pivot=en``: a direction's tag is model/directions.py's tag of its
target (``<2en>``), which must be one piece of the model's tokenizer (a user symbol it was trained with); a
``:pivot=<language>`` direction runs in two legs through that language (core/directions.py).
"""

from __future__ import annotations

from pathlib import Path

from core.directions import Direction, parse_option, tag_ids
from core.tokenizer import Tokenizer
from model.directions import TAGS


def directions_for(spec: str, tokenizer_file: Path) -> dict[str, Direction]:
    """The directions of ``spec``; DirectionError for a bad spec or a tag the tokenizer lacks as one piece."""
    tokenizer = Tokenizer(tokenizer_file)

    def tag_of(target: str) -> str | None:
        tag = TAGS.get(target)
        if tag is None:
            return None
        tag_ids(tokenizer.encode, tokenizer.sp.piece_to_id, tag)  # raises when it is not one piece
        return tag

    return parse_option(spec, tag_of)
