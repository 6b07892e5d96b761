"""Texts of one model prepared for translation: split into sentences (plain text: service/serving/segmentation.py;
HTML: service/serving/html.py), tokenized with the model's limit (a text over it is refused before anything is
queued), then run through the model's scheduler and put back together.

``prepare(model, texts, ctx, split, fmt, indices)`` -> an object whose ``await .run(options, ctx)`` gives (one
``Translation`` per text, the model version that ran them), the shape ``run_work`` answers with. Every endpoint
that translates texts (/v1, streaming, v2, LibreTranslate) goes through it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.search import length_limits
from core.tokenizer import EOS_ID
from engine.decoding import TranslateOptions
from engine.translation import SourceTooLongError, Translation
from service.execution.work import Source
from service.models.registry import LoadedModel
from service.serving.casing import casing_of, truecased
from service.serving.common import run_work, tokenize
from service.serving.context import RequestContext
from service.serving.directions import PivotRefused, PivotTranslation, in_direction, second_leg, untagged
from service.serving.html import HTML, HtmlPlan, Markup
from service.serving.names import find_names, in_small_letters
from service.serving.segmentation import Layout, merge, split_text
from service.serving.spans import find_spans, has_placeholders, merged, with_stand_ins
from service.serving.terms import Use, constraints, settle
from service.serving.word_alignment import align_words
from service.serving.words import match_initial_case


def tokenize_sentences(
    model: LoadedModel, sentences: list[str], owners: list[int], ctx: RequestContext
) -> tuple[list[Source], list[list[Use]]]:
    """Sources of the sentences, each with the constraints of the request's terms found in it (``ctx.terms``), and
    those uses; one over the model's limit is reported with the index of its text (``owners[i]``: the request index
    of sentence i's text)."""
    sources, uses, _ = shown_sentences(model, sentences, owners, ctx)
    return sources, uses


def shown_sentences(
    model: LoadedModel, sentences: list[str], owners: list[int], ctx: RequestContext
) -> tuple[list[Source], list[list[Use]], list[str]]:
    """``tokenize_sentences``, and each sentence as the model sees it (stand-ins, truecasing): ``repair`` puts
    stand-ins in place of the names a translation lost."""
    source, target = model.languages
    encode = model.engine.tokenizer.encode
    # all-caps and Title-Case sentences are translated truecased and given their casing back (casing.py)
    casings = [casing_of(s) if source != "zh" else None for s in sentences]
    shown = [truecased(s, encode) if c else s for s, c in zip(sentences, casings, strict=True)]
    terms, protect = ctx.terms, ctx.protect_spans
    names = ctx.protect_names and target != "zh"  # names go into Latin-script targets (names.py)
    ordinary = in_small_letters(model.engine.tokenizer, model.engine.target_tokenizer) if names else None
    placeholders = has_placeholders(model.engine.tokenizer)
    uses = []
    for k, (sentence, casing) in enumerate(zip(shown, casings, strict=True)):
        given = terms.find(sentence, source) if terms else []
        found = find_spans(sentence, source, target) if protect else []
        mine = merged(given, found, sentence)
        mine = merged(mine, find_names(sentence, source, ordinary), sentence) if names else mine
        if any(u.kind for u in mine):  # spans found here: the model sees stand-ins (spans.py with_stand_ins)
            shown[k], mine = with_stand_ins(sentence, mine, placeholders)
        case = [Use("", "", casing, kind="casing")] if casing and target != "zh" else []
        uses.append(mine + case)
    try:
        ids = tokenize(model, shown, ctx) if sentences else []
    except SourceTooLongError as exc:
        exc.index = owners[exc.index]
        raise
    prefix = model.source_prefix  # a multilingual model's tag (directions.py): after preprocessing, never through it
    ids = [prefix + i for i in ids] if prefix else ids
    target_encode = model.engine.target_tokenizer.encode  # the terms' and spans' target forms
    sources = [Source(i, constraints=constraints(u, target_encode)) for i, u in zip(ids, uses, strict=True)]
    return sources, uses, shown


def constrained(options: TranslateOptions, sources: list[Source]) -> TranslateOptions:
    """The options of sources of which some carry constraints: batched apart, never decoded live."""
    return dataclasses.replace(options, constrained=True) if any(s.constraints for s in sources) else options


def settled(model: LoadedModel, t: Translation, uses: list[Use]) -> Translation:
    """A sentence's translation checked against its uses (service/serving/terms.py settle)."""
    tokenizer = model.engine.target_tokenizer
    return settle(t, uses, lambda text: tokenizer.decode(tokenizer.encode(text)))


async def run_sources(
    model: LoadedModel, sources: list[Source], options: TranslateOptions, ctx: RequestContext
) -> tuple[list[Translation], LoadedModel]:
    """Translations of the sources: those in the translation cache (``ctx.cache``, service/serving/cache.py) at
    once, the others through the model's scheduler (then cached under the version that ran them)."""
    if not sources:
        return [], model
    results, used = await _run_sources(model, sources, options, ctx)
    return [untagged(model, t) for t in results], used  # the tag is no source token of the answers


async def _run_sources(
    model: LoadedModel, sources: list[Source], options: TranslateOptions, ctx: RequestContext
) -> tuple[list[Translation], LoadedModel]:
    options = constrained(options, sources)
    cache = ctx.cache
    if cache is None or options.constrained:  # a sentence's terms are not in the cache's key: never cached
        return await run_work(model, options, sources, ctx)
    found = await cache.lookup(model, options, sources)
    missing = [i for i, t in enumerate(found) if t is None]
    used = model
    if missing:
        asked = [sources[i] for i in missing]
        results, used = await run_work(model, options, asked, ctx)
        await cache.store_results(used, options, asked, results)
        for i, t in zip(missing, results, strict=True):
            found[i] = t
    return found, used  # type: ignore[return-value]


def initial_case(t: Translation, sentence: str) -> Translation:
    """The translation (a copy: it may be the cache's) with its first letter cased as the sentence's
    (service/serving/words.py): a one-word heading is "Welcome", not "welcome"."""
    text = match_initial_case(sentence, t.text)
    hypotheses = [(match_initial_case(sentence, h), score, ids) for h, score, ids in t.hypotheses]
    return dataclasses.replace(t, text=text, hypotheses=hypotheses) if text != t.text else t


REPAIRED = ("number", "name")  # what a translation may lose and get back by a second, constrained search


async def repair(
    model: LoadedModel,
    sources: list[Source],
    uses: list[list[Use]],
    shown: list[str],
    results: list[Translation],
    options: TranslateOptions,
    ctx: RequestContext,
) -> tuple[list[Translation], list[list[Use]]]:
    """The sentences whose free translation lost a number or a name (spans.py, names.py: both are left to the
    model) searched again: each of their numbers required in the target's convention, and each name they lost
    replaced by a stand-in (``shown``: the sentences as the model saw them), which the search must write and which
    is replaced by the name's target form afterwards (forcing the name's own words put them at odd places; the
    stand-in is copied where the name belongs). The new translation is taken where it holds them all, with the uses
    it was settled against (HTML puts stand-ins back in its words by them). Only those sentences pay for the second
    search, which costs the others' words more than it gains (docs/real-world-text.md)."""
    lost = [i for i, t in enumerate(results) if any(u.kind in REPAIRED for u in t.missing)]
    if not lost:
        return results, uses
    encode = model.engine.target_tokenizer.encode
    again, retry_uses = [], []
    placeholders = has_placeholders(model.engine.tokenizer)
    for i in lost:
        text, required = _stand_ins_for_names(shown[i], uses[i], results[i].missing, placeholders)
        try:
            ids = sources[i].ids if text == shown[i] else model.engine.source_ids([text], model.max_source_subwords)[0]
        except SourceTooLongError:  # the stand-ins made it longer than the model takes: searched as it was
            ids, required = sources[i].ids, [_required(u) for u in uses[i]]
        again.append(dataclasses.replace(sources[i], ids=ids, constraints=constraints(required, encode)))
        retry_uses.append(required)
    retried, _ = await run_sources(model, again, options, ctx)
    out, out_uses = list(results), list(uses)
    for i, t, required in zip(lost, retried, retry_uses, strict=True):
        # names settle with their stand-ins; numbers against the sentence's own uses (rewritten in the target's
        # convention where the model wrote the source's)
        settle_uses = [u if u.kind == "name" else own for u, own in zip(required, uses[i], strict=True)]
        t = settled(model, mark_truncated(model, t, options), settle_uses)
        if not any(u.kind in REPAIRED for u in t.missing):
            out[i], out_uses[i] = t, settle_uses
    return out, out_uses


def _stand_ins_for_names(text: str, uses: list[Use], missing: list[Use], placeholders: bool) -> tuple[str, list[Use]]:
    """The sentence with a stand-in for each name its translation lost, and its uses for the second search: those
    names with their stand-ins, numbers required as their target form, the rest as they were."""
    lost = [u for u in uses if u.kind == "name" and u in missing]
    shown, placed = with_stand_ins(text, lost, placeholders, kinds=("name",)) if lost else (text, [])
    placed_of = dict(zip(map(id, lost), placed, strict=True))
    return shown, [placed_of.get(id(u), _required(u) if u.kind == "number" else u) for u in uses]


def _required(use: Use) -> Use:
    return dataclasses.replace(use, stand_in=use.target) if use.kind == "number" and not use.stand_in else use


def mark_truncated(model: LoadedModel, t: Translation, options: TranslateOptions) -> Translation:
    """A sentence's translation that reached its length limit ended without EOS: truncated."""
    max_length = model.engine.resolved(options).max_length  # the model's default when the request left it out
    [limit] = length_limits([len(t.source_ids)], model.engine.max_source_tokens, max_length)
    return dataclasses.replace(t, truncated=True) if t.token_ids and len(t.token_ids) >= limit else t


def html_options(options: TranslateOptions) -> TranslateOptions:
    """HTML needs the cross-attention (tags follow the words they align to) and has no n-best."""
    return dataclasses.replace(options, return_attention=True, num_hypotheses=1)


@dataclass
class Prepared:
    """Plain texts: each one's layout (sentences and what lies between them) and its sentences' sources."""

    model: LoadedModel
    layouts: list[Layout]
    sources: list[Source]
    uses: list[list[Use]]
    shown: list[str]  # each sentence as the model sees it (shown_sentences)

    async def run(self, options: TranslateOptions, ctx: RequestContext) -> tuple[list[Translation], LoadedModel]:
        results, used = await run_sources(self.model, self.sources, options, ctx)
        results = [
            settled(used, mark_truncated(self.model, r, options), u) for r, u in zip(results, self.uses, strict=True)
        ]
        results, _ = await repair(used, self.sources, self.uses, self.shown, results, options, ctx)
        sentences = [s for layout in self.layouts for s in layout.sentences]
        results = [initial_case(r, s) for r, s in zip(results, sentences, strict=True)]
        target = self.model.languages[1]
        out, k = [], 0
        for layout in self.layouts:
            n = len(layout.sentences)
            out.append(merge(layout, results[k : k + n], target, options.num_hypotheses))
            k += n
        return out, used


@dataclass
class PreparedHtml:
    """HTML texts: each one's plan (markup kept, sentences to translate) and its sentences' sources."""

    model: LoadedModel
    plans: list[HtmlPlan]
    sources: list[Source]
    uses: list[list[Use]]
    shown: list[str]  # each sentence as the model sees it (shown_sentences)

    async def run(self, options: TranslateOptions, ctx: RequestContext) -> tuple[list[Translation], LoadedModel]:
        options = html_options(options)
        results, used = await run_sources(self.model, self.sources, options, ctx)
        results = [settled(used, r, u) for r, u in zip(results, self.uses, strict=True)]
        # numbers and names as in plain text; the words of a retried sentence get its stand-ins back by its uses
        results, all_uses = await repair(used, self.sources, self.uses, self.shown, results, options, ctx)
        target = self.model.languages[1]
        out, k = [], 0
        for plan in self.plans:
            sentences = plan.sentences
            mine = results[k : k + len(sentences)]
            k += len(sentences)
            uses = all_uses[k - len(sentences) : k]
            aligned = [
                align_words(used, t, len(s.split()), u, s) for t, s, u in zip(mine, sentences, uses, strict=True)
            ]
            rendered = plan.render(aligned, target)
            if not mine:
                out.append(Translation(rendered, 0.0, [], [EOS_ID]))
                continue
            combined = merge(Layout(tuple(("sentence", i) for i in range(len(mine))), tuple(sentences)), mine, target)
            combined.text = rendered
            out.append(combined)
        return out, used


@dataclass
class Pivoted:
    """Texts of a direction served by pivot (directions.py): the first leg (source -> pivot) prepared now, the second
    (pivot -> target) prepared on the first's translations, both on the same model; each answer is the second leg's
    translation with the first leg's source ids, and its text in the pivot language as ``pivot_text``."""

    model: LoadedModel  # the pivoted direction (a Routed)
    first: Prepared | PreparedHtml
    then: Any  # (texts, its context) -> the second leg prepared

    @property
    def sources(self) -> list[Source]:
        """The first leg's sources (what a queue's refusal counts before the work starts)."""
        return self.first.sources

    async def run(self, options: TranslateOptions, ctx: RequestContext) -> tuple[list[Translation], LoadedModel]:
        if options.return_attention:  # the answer asked for attention or alignment
            raise PivotRefused("return_attention / return_alignment", self.model)
        middle, _ = await self.first.run(options, ctx)
        ctx = second_leg(ctx)  # the glossary's targets, now in the pivot text, copied on
        final, used = await self.then([t.text for t in middle], ctx).run(options, ctx)
        fields = [{f.name: getattr(t, f.name) for f in dataclasses.fields(t)} for t in final]
        out = [
            PivotTranslation(**{**f, "source_ids": m.source_ids}, pivot_text=m.text)
            for f, m in zip(fields, middle, strict=True)
        ]
        return out, in_direction(used, self.model.direction.name)


def prepare(
    model: LoadedModel,
    texts: Sequence[str],
    ctx: RequestContext,
    split: bool | str = True,
    fmt: str = "text",
    indices: Sequence[int] | None = None,
    rules: Markup = HTML,
) -> Prepared | PreparedHtml | Pivoted:
    """Split (``split`` false: each text is one sentence; "nonewlines": at punctuation only) and tokenize texts of
    one model, as plain text or (``fmt`` "html") as markup read by ``rules`` (HTML's, or XML's). ``indices``: the
    request index of each text (names a text over the model's limit)."""
    indices = list(indices) if indices is not None else list(range(len(texts)))
    if model.pivot is not None:
        first, second = model.legs()
        then = lambda middle, leg_ctx: prepare(second, middle, leg_ctx, split, fmt, indices, rules)  # noqa: E731
        return Pivoted(model, prepare(first, texts, ctx, split, fmt, indices, rules), then)
    if fmt == "html":
        plans = [HtmlPlan(text, model.languages[0], bool(split), rules) for text in texts]
        sentences = [s for plan in plans for s in plan.sentences]
        owners = [indices[i] for i, plan in enumerate(plans) for _ in plan.sentences]
        return PreparedHtml(model, plans, *shown_sentences(model, sentences, owners, ctx))
    layouts = [split_text(text, model.languages[0], split) for text in texts]
    sentences = [s for layout in layouts for s in layout.sentences]
    owners = [indices[i] for i, layout in enumerate(layouts) for _ in layout.sentences]
    return Prepared(model, layouts, *shown_sentences(model, sentences, owners, ctx))
