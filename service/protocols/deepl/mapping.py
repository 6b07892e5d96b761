"""The DeepL API's translate and languages on our models: DeepL's language codes, billed characters, a request's
texts routed, split and translated (service/serving/routing.py, prepared.py), each answer as DeepL shapes it.

Language codes are DeepL's: upper case, case-insensitive on input, a target with its regional variants (EN-GB and
EN-US, also the older EN, are our ``en``; ZH and ZH-HANS our ``zh``, whose models write Simplified Chinese, so
ZH-HANT is refused). A source left out is detected for each text among the languages served into the target (the
best guess: DeepL always names one). HTTP, fields and errors are service/protocols/deepl/routes.py's.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import lxml.etree
import lxml.html

from core import language
from engine.decoding import TranslateOptions
from service.models.registry import LoadedModel, Registry
from service.serving.context import RequestContext
from service.serving.html import Markup
from service.serving.prepared import prepare
from service.serving.quality import check_languages
from service.serving.routing import AUTO, UnservedPair, route

# DeepL's target codes of a language with regional variants: (code, name) as /v2/languages lists them, the first
# being what an unspecified code means; EN, PT and ZH alone are accepted as targets too
TARGET_VARIANTS = {
    "en": (("EN-GB", "English (British)"), ("EN-US", "English (American)")),
    "pt": (("PT-BR", "Portuguese (Brazilian)"), ("PT-PT", "Portuguese (European)")),
    "zh": (("ZH", "Chinese (simplified)"), ("ZH-HANS", "Chinese (simplified)")),
}
ALSO_ACCEPTED = {"EN": "en", "PT": "pt"}  # deprecated by DeepL as targets, still answered
_CODE = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,4})?$")
_TAG = re.compile(r"<[^>]*>")


class BadValue(ValueError):
    """A field's value the server cannot take (400 with DeepL's "Value for '<field>' not supported." wording)."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"Value for '{field}' not supported. {why}")


def source_languages(registry: Registry) -> list[dict[str, Any]]:
    return [
        {"language": c.upper(), "name": language.language_name(c)} for c in sorted({s for s, _ in registry.pairs()})
    ]


def target_languages(registry: Registry) -> list[dict[str, Any]]:
    """Every served target with its variants; no target has formality (``supports_formality`` false)."""
    out = []
    for code in sorted({t for _, t in registry.pairs()}):
        variants = TARGET_VARIANTS.get(code, ((code.upper(), language.language_name(code)),))
        out.extend({"language": c, "name": name, "supports_formality": False} for c, name in variants)
    return out


def target_code(asked: str, registry: Registry) -> str:
    """Our code of a DeepL target code; BadValue when nothing serves it."""
    code = asked.strip().upper()
    ours = ALSO_ACCEPTED.get(code)
    if ours is None:
        ours = next((lang for lang, vs in TARGET_VARIANTS.items() if code in (c for c, _ in vs)), None)
    if ours is None and _CODE.match(code) and "-" not in code:
        ours = code.lower()
    served = [v["language"] for v in target_languages(registry)]
    if ours is None or ours not in {t for _, t in registry.pairs()}:
        raise BadValue("target_lang", f"This server translates into {', '.join(served)}; {asked!r} is not one.")
    return ours


def source_code(asked: str, registry: Registry) -> str:
    code = asked.strip().upper()
    sources = sorted({s for s, _ in registry.pairs()})
    if not _CODE.match(code) or "-" in code or code.lower() not in sources:
        listed = ", ".join(s.upper() for s in sources)
        raise BadValue("source_lang", f"This server translates from {listed}; {asked!r} is not one.")
    return code.lower()


def billed_characters(text: str, fmt: str, rules: Markup) -> int:
    """What DeepL bills for a text: its Unicode code points; with tag handling only the text outside the markup."""
    if fmt != "html" or "<" not in text:
        return len(text)
    try:
        if rules.xml:
            parser = lxml.etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)
            tree = lxml.etree.fromstring(f"<r>{text}</r>", parser)
        else:
            tree = lxml.html.fragment_fromstring(text, create_parent="div")
    except (lxml.etree.LxmlError, ValueError):
        return len(text)  # not parseable: the whole text (the translation refuses XML that is not well-formed)
    return sum(len(t) for t in tree.xpath("//text()"))


@dataclass(frozen=True)
class Request:
    """A /v2/translate request in our terms."""

    texts: list[str]
    source: str | None  # our code, or None: detect
    target: str  # our code
    split: bool | str  # False, True or "nonewlines"
    fmt: str  # "text" or "html" (markup: HTML's or XML's rules)
    rules: Markup
    beam_size: int | None  # None: the model's default


def _best_guess(text: str, candidates: Sequence[str]) -> str | None:
    known = [c for c in candidates if language.supported(c)]
    return language.detect(text, known)[0] if known else candidates[0]


async def translate(registry: Registry, req: Request, ctx: RequestContext) -> tuple[list[dict[str, Any]], LoadedModel]:
    """DeepL's ``translations`` (``text``, ``detected_source_language``) in the order of the texts, and the model of
    the first text (the metrics label)."""
    if req.source is None:
        plain = [_TAG.sub(" ", t) if req.fmt == "html" else t for t in req.texts]
        models, _ = await asyncio.to_thread(route, registry, plain, None, AUTO, req.target, _best_guess)
    else:
        models, _ = route(registry, req.texts, None, req.source, req.target)
    if ctx.quality is not None:
        check_languages(models, req.texts, ctx.quality)
    groups: dict[str, list[int]] = {}
    for i, model in enumerate(models):
        groups.setdefault(model.route_key, []).append(i)
    options = TranslateOptions.request(beam_size=req.beam_size)
    work = [
        prepare(models[idx[0]], [req.texts[j] for j in idx], ctx, req.split, req.fmt, idx, req.rules)
        for idx in groups.values()
    ]
    runs = await asyncio.gather(*(prepared.run(options, ctx) for prepared in work))
    out: list[dict[str, Any]] = [{} for _ in req.texts]
    first = models[0]
    for (results, used), idx in zip(runs, groups.values(), strict=True):
        first = used if idx[0] == 0 else first
        for i, t in zip(idx, results, strict=True):
            out[i] = {"detected_source_language": models[i].languages[0].upper(), "text": t.text}
    return out, first


def unserved(exc: UnservedPair) -> str:
    """DeepL's wording for a pair no model serves."""
    return f"Value for '{'target_lang' if exc.field.startswith('target') else 'source_lang'}' not supported. {exc}"
