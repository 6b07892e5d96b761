"""A multilingual bundle's directions as the serving layer routes to them (core/directions.py: the manifest's field).

One bundle is loaded once (one engine, one scheduler) whatever directions it serves. ``Routed`` is that loaded
model seen in one of its directions: its ``languages`` are the direction's, its ``source_prefix`` the direction's
tag ids, put before each source's own ids after tokenization (prepared.py), so that no preprocessing (spans,
casing, numbers) ever sees the tag, and taken off again (``untagged``) before anything reads the source's ids or
attention: /v1 answers never show the tag as a source token. A pivoted direction (``pivot``) runs its two legs,
each a ``Routed`` in a direct direction, one after the other (prepared.py ``Pivoted``). The bundle's own pair, its
first direction, is the ``LoadedModel`` itself (registry.py), so one-direction bundles are served exactly as before.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core.directions import Direction, directions_of, tag_ids
from engine.translation import Translation
from service.models.registry import LoadedModel, Registry
from service.protocols.v1.attention import OutOfRange
from service.serving.context import RequestContext
from service.serving.terms import Terms


class PivotRefused(OutOfRange):
    """Attention or alignment asked of a direction served by pivot: its translation has no single source-target
    attention (two models' worth of it, through a text the client never sent): 422 naming the field."""

    def __init__(self, field: str, model: Any, what: str | None = None) -> None:
        source, target = model.languages
        super().__init__(
            field,
            f"{what or field} is not available for {source}->{target}: model {model.name} serves it by pivot through "
            f"{model.pivot} ({source}->{model.pivot}, then {model.pivot}->{target}), so no attention links the source "
            f"to the translation; ask {source}->{model.pivot} and {model.pivot}->{target} separately",
        )


class Routed:
    """A loaded model in one of its directions; everything but the direction is the model's own (``__getattr__``)."""

    def __init__(self, model: LoadedModel, direction: Direction) -> None:
        self.model, self.direction = model, direction

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)

    def __repr__(self) -> str:
        return f"Routed({self.model.name!r}, {self.direction.name!r})"

    @property
    def languages(self) -> tuple[str, str]:
        return self.direction.source, self.direction.target

    @property
    def pivot(self) -> str | None:
        return self.direction.pivot

    @property
    def route_key(self) -> str:
        return f"{self.model.name} {self.direction.name}"

    @property
    def confidence_map(self) -> dict[str, Any] | None:
        """The direction's fitted confidence map (manifest ``direction_confidence``); None for a pivot: its score is
        the second leg's alone."""
        if self.direction.pivot:
            return None
        return self.model.bundle.manifest.get("direction_confidence", {}).get(self.direction.name)

    @property
    def source_prefix(self) -> list[int]:
        tokenizer = self.model.engine.tokenizer
        return tag_ids(tokenizer.encode, tokenizer.sp.piece_to_id, self.direction.tag)

    @property
    def replaced_by(self) -> Routed | LoadedModel | None:
        """The version that took over, in the same direction (late work follows it, service/serving/common.py)."""
        new = self.model.replaced_by
        return None if new is None else in_direction(new, self.direction.name)

    def legs(self) -> tuple[LoadedModel | Routed, LoadedModel | Routed]:
        """The two direct directions of a pivoted one."""
        first, second = self.direction.legs()
        return in_direction(self.model, first), in_direction(self.model, second)


def in_direction(model: LoadedModel | Routed, name: str) -> LoadedModel | Routed:
    """``model`` (in any direction) serving direction ``name``: the model itself for its own pair, else a view."""
    model = model.model if isinstance(model, Routed) else model
    directions = directions_of(model.bundle.manifest)
    if name == next(iter(directions)):
        return model
    return Routed(model, directions[name])


def routed(registry: Registry, name: str | None, source: str, target: str) -> LoadedModel | Routed:
    """The model ``name`` (the default when None) in direction source-target (which it must serve)."""
    return in_direction(registry.get(name), f"{source}-{target}")


def served_by(model: LoadedModel) -> dict[tuple[str, str], str]:
    """(source, target) -> the model's name for each direction of ``model``."""
    return {(d.source, d.target): model.name for d in directions_of(model.bundle.manifest).values()}


@dataclasses.dataclass
class PivotTranslation(Translation):
    """A pivoted direction's translation: the second leg's, with the first leg's source ids and its text."""

    pivot_text: str = ""


def second_leg(ctx: RequestContext) -> RequestContext:
    """The request's context for a pivot's second leg: the glossary's target terms, which the first leg put into the
    pivot-language text, and the do-not-translate spans are copied as they are (none of the glossary's source terms
    is in that text)."""
    terms = ctx.terms
    if not terms:
        return ctx
    kept = [*terms.do_not_translate, *(t for t in terms.glossary.values() if t not in terms.do_not_translate)]
    return dataclasses.replace(ctx, terms=Terms(do_not_translate=kept))


def untagged(model: Any, t: Translation) -> Translation:
    """``t`` without the tag's ids in its source ids and attention columns (a copy: ``t`` may be the cache's). The
    attention rows then sum to what the source's own tokens got (the rest went to the tag)."""
    n = len(model.source_prefix)
    if not n or t.source_ids[:n] != model.source_prefix:
        return t
    attention = t.attention[..., n:] if t.attention is not None else None  # (layers, heads, target, source)
    return dataclasses.replace(t, source_ids=t.source_ids[n:], attention=attention)
