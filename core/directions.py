"""The directions a bundle serves: the manifest's ``directions`` field, written by export/ and read by service/.

A bundle of one direction (every bundle made before multilingual models) has no ``directions``: it translates its
``source_language`` -> ``target_language``, its sources untagged. A multilingual model chooses its target language
by a tag at the start of the source (model/directions.py: ``<2en>``, ``<2de>``, ``<2zh>``, SentencePiece user
symbols); its manifest lists each direction it serves::

    "directions": {
        "de-en": {"tag": "<2en>"},
        "en-de": {"tag": "<2de>"},
        "de-zh": {"pivot": "en"}
    }

- ``tag``: the piece put before the source's own pieces (as training wrote it: ``tagged()`` gives ``"<2en> text"``,
  which the tokenizer cuts into ``▁``, ``<2en>``, then the text's pieces);
- ``pivot``: the direction is served in two legs through that language (``de-en`` then ``en-zh``), both of which
  the bundle must serve with a tag;
- an empty entry ``{}``: served untagged (a one-direction model).

The first direction listed is the bundle's own ``source_language`` -> ``target_language``: what older readers see.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from core.tokenizer import UNK_ID

_CODE = re.compile(r"^[a-z]{2,3}$")


class DirectionError(ValueError):
    """A ``directions`` field or ``--directions`` option that does not hold together; the message says why."""


@dataclass(frozen=True)
class Direction:
    source: str
    target: str
    tag: str | None = None  # the source's first piece; None: untagged
    pivot: str | None = None  # served through this language in two legs

    @property
    def name(self) -> str:
        return f"{self.source}-{self.target}"

    def legs(self) -> tuple[str, str]:
        """The two directions a pivoted direction runs: (source-pivot, pivot-target)."""
        if self.pivot is None:
            raise DirectionError(f"{self.name} is not pivoted")
        return f"{self.source}-{self.pivot}", f"{self.pivot}-{self.target}"

    def entry(self) -> dict[str, str]:
        """The manifest entry of this direction."""
        return {"pivot": self.pivot} if self.pivot else ({"tag": self.tag} if self.tag else {})


def split_name(name: str) -> tuple[str, str]:
    parts = name.split("-")
    if len(parts) != 2 or not all(_CODE.match(p) for p in parts) or parts[0] == parts[1]:
        raise DirectionError(f"direction {name!r} is not 'source-target' in ISO 639 codes (de-en, en-zh)")
    return parts[0], parts[1]


def check(directions: dict[str, Direction]) -> dict[str, Direction]:
    """``directions`` when every pivot's legs are served directly; DirectionError otherwise."""
    if not directions:
        raise DirectionError("a bundle serves at least one direction")
    if next(iter(directions.values())).pivot is not None:
        raise DirectionError("the first direction, the bundle's own pair, is served directly, not by pivot")
    for d in directions.values():
        if d.pivot is None:
            continue
        if d.tag is not None:
            raise DirectionError(f"{d.name}: a direction has a tag or a pivot, not both")
        for leg in d.legs():
            if leg not in directions or directions[leg].pivot is not None:
                raise DirectionError(f"{d.name} pivots through {d.pivot}, but {leg} is not served directly")
    return directions


def directions_of(manifest: dict[str, Any]) -> dict[str, Direction]:
    """The directions of a manifest, in its order (the first is the bundle's own pair); one untagged direction
    (``source_language`` -> ``target_language``) for a manifest without the field. DirectionError for a bad one."""
    listed = manifest.get("directions")
    if listed is None:
        source, target = manifest["source_language"], manifest["target_language"]
        return {f"{source}-{target}": Direction(source, target)}
    if not isinstance(listed, dict):
        raise DirectionError("'directions' must map 'source-target' to {'tag': ...} or {'pivot': ...}")
    out = {}
    for name, entry in listed.items():
        source, target = split_name(name)
        if not isinstance(entry, dict) or set(entry) - {"tag", "pivot"}:
            raise DirectionError(f"{name}: an entry holds 'tag' or 'pivot' only, not {entry!r}")
        out[name] = Direction(source, target, entry.get("tag"), entry.get("pivot"))
    return check(out)


def parse_option(spec: str, tag_of: Callable[[str], str | None]) -> dict[str, Direction]:
    """Directions from export's ``--directions`` (``de-en,en-de,de-zh:pivot=en``); ``tag_of(target)`` names the
    tokenizer's tag piece for a target language (None: the tokenizer has none, an error)."""
    out = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, option = item.partition(":")
        source, target = split_name(name)
        if option:
            key, _, value = option.partition("=")
            if key != "pivot" or not _CODE.match(value):
                raise DirectionError(f"{item!r}: the only option is ':pivot=<language>' (de-zh:pivot=en)")
            out[name] = Direction(source, target, pivot=value)
            continue
        tag = tag_of(target)
        if tag is None:
            raise DirectionError(f"{name}: the tokenizer has no tag piece for target {target!r} (model/directions.py)")
        out[name] = Direction(source, target, tag)
    return check(out)


def manifest_field(directions: dict[str, Direction]) -> dict[str, dict[str, str]]:
    return {name: d.entry() for name, d in directions.items()}


def sources_of(directions: dict[str, Direction]) -> list[str]:
    return sorted({d.source for d in directions.values()})


def tag_ids(encode: Callable[[str], Sequence[int]], piece_to_id: Callable[[str], int], tag: str | None) -> list[int]:
    """The ids a tag puts before the source's own ids: the tokenizer's cut of the tag alone (``▁``, ``<2en>``), which
    is how a tagged training line begins. DirectionError when the tag is not one piece of the vocabulary."""
    if tag is None:
        return []
    ids = list(encode(tag))
    if piece_to_id(tag) == UNK_ID or piece_to_id(tag) not in ids:
        raise DirectionError(f"the tokenizer has no piece {tag!r}: the bundle's tag is not a user symbol of it")
    return ids


def normalization_language(manifest: dict[str, Any]) -> str:
    """The language whose source rules (core/normalize.py) the engine applies to every source of the bundle: its
    source language; for a bundle with Chinese among several sources, Chinese (Simplified script: the conversion
    leaves text in other scripts as it is, so German and English sources pass unchanged)."""
    sources = sources_of(directions_of(manifest))
    return "zh" if "zh" in sources else manifest["source_language"]


def directions_info(manifest: dict[str, Any]) -> list[dict[str, str]]:
    """The directions of a bundle as /v1/models lists them: source, target, and the tag or pivot of each."""
    return [
        {"source_language": d.source, "target_language": d.target, **d.entry()}
        for d in directions_of(manifest).values()
    ]
