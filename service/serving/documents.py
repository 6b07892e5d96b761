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
