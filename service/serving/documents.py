"""A document's units translated through the model's scheduler, in chunks, at background priority.

Every unit is HTML markup (service/documents/): it is planned with ``HtmlPlan``, its sentences are tokenized and
submitted a chunk at a time (one engine batch's worth, ``chunk`` sentences), each chunk queued behind every
interactive request (``batch_policy.BACKGROUND``) and awaited before the next is queued, so a long document never
fills the queue. After each chunk ``progress(done, total)`` is awaited. A sentence longer than the model's limit is
kept as it is (counted in ``Translated.untranslated``), not a failure of the whole document.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from engine.decoding import TranslateOptions
from engine.translation import SourceTooLongError
from service.models.registry import LoadedModel
from service.serving.context import RequestContext
from service.serving.directions import second_leg
from service.serving.html import Aligned, HtmlPlan
from service.serving.prepared import html_options, repair, run_sources, settled, shown_sentences
from service.serving.word_alignment import align_words

Progress = Callable[[int, int], Awaitable[None]]


@dataclass
class Translated:
    units: list[str]
    sentences: int
    untranslated: int  # sentences over the model's limit, kept in the source language
    model: LoadedModel  # the version that ran the last chunk


def plan_units(model: LoadedModel, units: Sequence[str]) -> list[HtmlPlan]:
    return [HtmlPlan(unit, model.languages[0]) for unit in units]


async def translate_units(
    model: LoadedModel,
    plans: Sequence[HtmlPlan],
    options: TranslateOptions,
    ctx: RequestContext,
    chunk: int,
    progress: Progress,
) -> Translated:
    if model.pivot is not None:  # two legs through the pivot language (service/serving/directions.py)
        return await _pivoted(model, plans, options, ctx, chunk, progress)
    sentences = [s for plan in plans for s in plan.sentences]
    aligned: list[Aligned] = []
    untranslated, used = 0, model
    for start in range(0, len(sentences), chunk):
        part = sentences[start : start + chunk]
        sources, uses, shown, kept = [], [], [], {}
        for k, sentence in enumerate(part):
            try:
                tokenized, found_uses, seen = shown_sentences(used, [sentence], [k], ctx)  # constraints in the sources
            except SourceTooLongError:
                kept[k] = sentence
                continue
            sources.extend(tokenized)
            uses.extend(found_uses)
            shown.extend(seen)
        results, used = await run_sources(used, sources, html_options(options), ctx)
        # numbers and names as in plain text (prepared.py repair); the words get stand-ins back by the uses
        results = [settled(used, r, u) for r, u in zip(results, uses, strict=True)]
        results, uses = await repair(used, sources, uses, shown, results, html_options(options), ctx)
        found = iter(zip(results, uses, strict=True))
        for k, sentence in enumerate(part):
            if k in kept:
                words = sentence.split()
                aligned.append((words, list(range(len(words)))))
                untranslated += 1
            else:
                result, its_uses = next(found)
                aligned.append(align_words(used, result, len(sentence.split()), its_uses, sentence))
        await progress(start + len(part), len(sentences))
    target = model.languages[1]
    out, k = [], 0
    for plan in plans:
        n = len(plan.sentences)
        out.append(plan.render(aligned[k : k + n], target))
        k += n
    return Translated(out, len(sentences), untranslated, used)


async def _pivoted(
    model: LoadedModel,
    plans: Sequence[HtmlPlan],
    options: TranslateOptions,
    ctx: RequestContext,
    chunk: int,
    progress: Progress,
) -> Translated:
    """The units translated into the pivot language, then those into the target; progress counts the source's
    sentences, the first leg's half of them, the second leg's the rest."""
    first, second = model.legs()
    total = sum(len(p.sentences) for p in plans)
    half = total // 2

    async def first_half(done: int, _: int) -> None:
        await progress(done * half // max(total, 1), total)

    middle = await translate_units(first, plans, options, ctx, chunk, first_half)
    again = plan_units(second, middle.units)
    n = sum(len(p.sentences) for p in again)

    async def second_half(done: int, _: int) -> None:
        await progress(half + done * (total - half) // max(n, 1), total)

    if not n:
        await progress(total, total)
    last = await translate_units(second, again, options, second_leg(ctx), chunk, second_half)
    return Translated(last.units, total, middle.untranslated + last.untranslated, last.model)
