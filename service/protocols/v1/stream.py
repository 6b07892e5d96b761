"""POST /v1/translate with ``"stream": true``: each text's translation as it is decoded.

The events, in the order they happen (texts interleave):
- ``delta`` {"index": i, "text": "..."}: new text of text i. Concatenated, a text's deltas equal its final
  ``text`` exactly: only what can no longer change is sent (greedy: the tokens chosen so far; beam search: the
  prefix that every live beam and every ended hypothesis of the sentence share), and only whole words (a word
  goes out once the next one has begun, so no half word is ever sent and rewritten). Sentences of a text
  (sentence splitting) stream one after the other with the text between them.
  A sentence with spans, numbers or names (service/serving/spans.py, names.py) is sent when done, after the second
  search of one that lost a number or a name (prepared.py ``repair``), as the non-streaming answer has it.
- ``translation`` {"index": i, "translation": {...}}: text i is done; the object is the one the non-streaming
  answer has at ``translations[i]``.
- ``error`` {"code": 504, "detail": "..."}: the request failed after streaming began (its deadline passed, an
  engine failure, shutdown); nothing follows.
- ``done`` {"model": ..., "version": ...}: every text is done (the non-streaming answer's top-level fields).
Tokens stream with continuous batching (MT_SCHEDULER=continuous); with dynamic batching or off, each text's
deltas come at once when its batch ends. A client that disconnects stops the work (its rows are freed).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from engine.decoding import TranslateOptions
from engine.translation import Translation
from service.models.registry import LoadedModel, Registry
from service.protocols.v1.translate import plan, text_out
from service.serving.common import run_work
from service.serving.context import RequestContext
from service.serving.directions import untagged
from service.serving.prepared import (
    REPAIRED,
    Prepared,
    constrained,
    initial_case,
    mark_truncated,
    prepare,
    repair,
    settled,
)
from service.serving.routing import Detector
from service.serving.segmentation import Layout, gap, merge
from service.serving.words import match_initial_case


def stable_text(model: LoadedModel, tokens: list[int]) -> str:
    """The words of ``tokens`` that are complete: up to the last piece that begins a word (SentencePiece's "▁")."""
    pieces = model.engine.pieces(tokens)
    last = max((j for j in range(1, len(pieces)) if pieces[j].startswith("\u2581")), default=0)
    return model.engine.tokenizer.decode(tokens[:last]) if last else ""


@dataclass(eq=False)
class _Text:
    """One text of the request: its layout, its sentences' streamed tokens and results, what was sent."""

    index: int
    layout: Layout
    first: int  # its first sentence among its model's sources
    tokens: dict[int, list[int]] = field(default_factory=dict)
    done: dict[int, Translation] = field(default_factory=dict)
    sent: str = ""
    # sentences whose words change after decoding (a stand-in put back, a number rewritten, capitals given back:
    # service/serving/spans.py, casing.py): shown only when done, so that the deltas still add up to the text
    held: set[int] = field(default_factory=set)

    def visible(self, model: LoadedModel, target: str, streams: bool) -> str:
        """What can be shown now: the text up to the first sentence not done, and that sentence's stable words."""
        out = []
        several = len(self.layout.parts) > 1
        for kind, value in self.layout.parts:
            if kind == "sentence":
                k = int(value)
                if k in self.done:
                    out.append(self.done[k].text.strip() if several else self.done[k].text)
                    continue
                if streams and k not in self.held:
                    partial = match_initial_case(self.layout.sentences[k], stable_text(model, self.tokens.get(k, [])))
                    out.append(partial.lstrip() if several else partial)
                break
            out.append(gap(str(value), target) if kind == "gap" else str(value))
        return "".join(out)


class _Listener:
    """Hears one model's sentences (service/scheduling/tickets.py Listener), turned into events of their texts."""

    def __init__(self, texts: list[_Text], owner: list[tuple[_Text, int]], stream: _Stream, prepared: Prepared) -> None:
        self.texts, self.owner, self.stream, self.prepared = texts, owner, stream, prepared
        # per sentence: the request's terms, spans, numbers and names found in it (service/serving/terms.py)
        self.uses = prepared.uses
        for index, (text, k) in enumerate(owner):
            if self.uses[index]:
                text.held.add(k)
        self.model: LoadedModel | None = None  # set by run_work to the version that runs the sentences
        self.repairs: list[asyncio.Future] = []  # second searches of sentences that lost a number or a name

    def progress(self, index: int, tokens: list[int]) -> None:
        text, k = self.owner[index]
        text.tokens.setdefault(k, []).extend(tokens)
        self.stream.guard(self._update, text)

    def result(self, index: int, result: Translation) -> None:
        text, k = self.owner[index]
        result = untagged(self.model, result)  # a multilingual model's tag is no source token (directions.py)
        result = mark_truncated(self.model, result, self.stream.options)  # type: ignore[arg-type]
        result = settled(self.model, result, self.uses[index])  # type: ignore[arg-type]
        if any(u.kind in REPAIRED for u in result.missing):  # searched again first, as the plain answer is
            self.repairs.append(asyncio.ensure_future(self._repair(index, result)))
            return
        self._done(index, result)

    async def _repair(self, index: int, result: Translation) -> None:
        """A held sentence (it has uses) that lost a number or a name: prepared.py ``repair``, then shown."""
        p, stream = self.prepared, self.stream
        args = [p.sources[index]], [p.uses[index]], [p.shown[index]], [result]
        [fixed], _ = await repair(self.model, *args, stream.options, stream.ctx)  # type: ignore[arg-type]
        self._done(index, fixed)

    def _done(self, index: int, result: Translation) -> None:
        text, k = self.owner[index]
        text.done[k] = initial_case(result, text.layout.sentences[k])  # as the plain answer has it
        self.stream.guard(self._update, text)
        if len(text.done) == len(text.layout.sentences):
            self.stream.guard(self.stream.finish, self.model, text)

    def _update(self, text: _Text) -> None:
        model = self.model
        if self.stream.html or model is None:
            return
        visible = text.visible(model, model.languages[1], True)
        if len(visible) > len(text.sent) and visible.startswith(text.sent):
            self.stream.emit("delta", {"index": text.index, "text": visible[len(text.sent) :]})
            text.sent = visible


class _Stream:
    def __init__(self, body: Any, ctx: RequestContext, options: TranslateOptions, detected: list[str | None]) -> None:
        self.body, self.ctx, self.options, self.detected = body, ctx, options, detected
        self.html = getattr(body, "format", "text") == "html"
        self.events: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()

        self.failure: BaseException | None = None  # an error of this stream's own bookkeeping

    def emit(self, event: str, data: dict[str, Any]) -> None:
        self.events.put_nowait((event, data))

    def guard(self, function, *args) -> None:
        """Run a listener's work; an error ends this stream (never the scheduler's delivery to other requests)."""
        if self.failure is not None:
            return
        try:
            function(*args)
        except Exception as exc:
            self.failure = exc
            self.events.put_nowait(None)

    def finish(self, model: LoadedModel, text: _Text) -> None:
        """Text done: the rest of its text (nothing if the deltas already said it all), then its answer object."""
        parts = [text.done[k] for k in range(len(text.layout.sentences))]
        merged = merge(text.layout, parts, model.languages[1], self.options.num_hypotheses)
        if not self.html:
            if not merged.text.startswith(text.sent):  # never expected: the deltas would not add up
                raise RuntimeError(f"streamed text {text.sent!r} is not a prefix of {merged.text!r}")
            if len(merged.text) > len(text.sent):
                self.emit("delta", {"index": text.index, "text": merged.text[len(text.sent) :]})
                text.sent = merged.text
        answer = text_out(model, merged, self.body, text.index, self.detected[text.index], self.options, self.ctx)
        self.emit("translation", {"index": text.index, "translation": answer})


async def translate_stream(
    registry: Registry, body: Any, ctx: RequestContext, detect: Detector | None = None
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(event, data) pairs of a streamed translation; raises before the first pair for what the non-streaming
    answer refuses (routing, validation, a text over the model's limit), so those keep their HTTP status."""
    p = plan(registry, body, ctx, detect)
    models, detected, groups, options, split, fmt = p.models, p.detected, p.groups, p.options, p.split, p.fmt
    ctx = dataclasses.replace(ctx, disconnected=None)  # the event stream notices the client going away
    stream = _Stream(body, ctx, options, detected)
    work = []
    for indices in groups.values():
        model = models[indices[0]]
        prepared = prepare(model, [body.texts[j] for j in indices], ctx, split, fmt, indices)
        # HTML is put back together from whole sentences, a pivoted direction's text is the second leg's: either's text
        # comes with its final event
        if fmt == "html" or model.pivot is not None:
            work.append((model, prepared, None, indices))
            continue
        texts, owner, first = [], [], 0
        for j, layout in zip(indices, prepared.layouts, strict=True):
            text = _Text(j, layout, first)
            texts.append(text)
            owner += [(text, k) for k in range(len(layout.sentences))]
            first += len(layout.sentences)
        work.append((model, prepared, _Listener(texts, owner, stream, prepared), indices))
    for model, prepared, _, _ in work:
        refusal = model.scheduler.refusal(len(prepared.sources))
        if refusal is not None:
            raise refusal  # a full queue answers 429 before the stream starts, as without streaming
    return _events(stream, work, options, ctx)


async def _events(stream: _Stream, work: list, options: TranslateOptions, ctx: RequestContext):
    async def run(model: LoadedModel, prepared: Any, listener: _Listener | None, indices: list[int]) -> LoadedModel:
        if listener is None:  # HTML: whole texts at the end
            results, used = await prepared.run(options, ctx)
            for j, t in zip(indices, results, strict=True):
                answer = text_out(used, t, stream.body, j, stream.detected[j], options, ctx)
                stream.emit("translation", {"index": j, "translation": answer})
            return used
        for text in listener.texts:
            if not text.layout.sentences:  # nothing to translate (empty, whitespace): answered at once
                listener.model = model
                stream.finish(model, text)
        if not prepared.sources:
            return model
        try:
            _, used = await run_work(model, constrained(options, prepared.sources), prepared.sources, ctx, listener)
            await asyncio.gather(*listener.repairs)  # the sentences searched again (their events come when done)
        finally:
            for pending in listener.repairs:
                pending.cancel()  # the work failed or was cancelled: no second search outlives it
        return used

    task = asyncio.ensure_future(asyncio.gather(*(run(*w) for w in work)))
    task.add_done_callback(lambda _: stream.events.put_nowait(None))
    try:
        while (item := await stream.events.get()) is not None:
            yield item
        if stream.failure is not None:
            raise stream.failure
        used = task.result()  # raises the work's error (after the events that came before it)
        first = used[0]
        yield "done", {"model": first.name, "version": first.version}
    finally:
        if not task.done():  # the client went away (or the consumer stopped): stop the work
            task.cancel()
