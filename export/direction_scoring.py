"""A bundle's translations of a test split in one of its directions, for ``export.cli evaluate --direction``.

The engine gets the ids the service would give it: the direction's tag ids (core/directions.py ``tag_ids``, the
tokenizer's cut of ``<2de>``) before each source's own ids, the source cut so that tag + source + EOS fit the
model's limit (the service refuses a longer text with 422; a test set must still score every line). A direction
served by pivot runs its two legs one after the other, the first leg's translations being the second leg's sources,
as the service does (service/serving/prepared.py ``Pivoted``). A one-direction bundle has one untagged direction, so
its scores are those it always had.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.bundle import load_bundle
from core.directions import Direction, DirectionError, directions_of, tag_ids
from core.tokenizer import EOS_ID
from engine import Engine
from engine.decoding import TranslateOptions


def direction_named(manifest: dict[str, Any], name: str | None) -> tuple[Direction, bool]:
    """The direction ``name`` of the bundle (None: its own pair) and whether it is the bundle's own pair (the first
    listed). DirectionError naming the served directions when the bundle does not serve it."""
    directions = directions_of(manifest)
    own = next(iter(directions))
    name = name or own
    if name not in directions:
        raise DirectionError(f"the bundle serves {', '.join(directions)}; not {name}")
    return directions[name], name == own


def engine_in_direction(
    bundle_dir: str, name: str | None, variant: str, threads: int = 1, providers: str = "cpu"
) -> tuple[Engine, Direction]:
    """An engine on the bundle (the fused int8 step where the CPU and `make native` allow) and its direction ``name``
    (``direction_named``: DirectionError when the bundle does not serve it), for the commands that translate a file."""
    bundle = load_bundle(bundle_dir)
    direction, _ = direction_named(bundle.manifest, name)
    engine = Engine(bundle, variant=variant, providers=providers, intra_op_threads=threads, fused_step="auto")
    return engine, direction


def source_ids(engine: Engine, sources: Sequence[str], prefix: Sequence[int] = ()) -> tuple[list[list[int]], int]:
    """``prefix`` + subword ids + EOS of each source, the source cut to the model's limit; and how many were cut."""
    limit = engine.max_source_tokens - 1 - len(prefix)
    ids = engine.tokenizer.encode_batch([engine.normalize_source(s) for s in sources])  # as Engine.source_ids does
    return [[*prefix, *seq[:limit], EOS_ID] for seq in ids], sum(len(seq) > limit for seq in ids)


def translate_split(
    engine: Engine,
    direction: Direction,
    sources: Sequence[str],
    options: TranslateOptions,
    batch_size: int,
) -> tuple[list[str], int]:
    """Translations of ``sources`` in ``direction`` (both legs of a pivot), and how many sources were cut."""
    directions = directions_of(engine.bundle.manifest)
    legs = [directions[leg] for leg in direction.legs()] if direction.pivot else [direction]
    texts, truncated = list(sources), 0
    for leg in legs:
        prefix = tag_ids(engine.tokenizer.encode, engine.tokenizer.sp.piece_to_id, leg.tag)
        ids, cut = source_ids(engine, texts, prefix)
        truncated += cut
        texts = []
        for start in range(0, len(ids), batch_size):
            texts += [t.text for t in engine.translate_ids(ids[start : start + batch_size], options)]
    return texts, truncated
