"""The translation cache: a sentence translated before, with the same model version and options, is answered from
the cache without queueing (MT_CACHE_MB; in process, or in Redis shared by the replicas with MT_REDIS_URL).

The key is exact: the model's name, version and variant, every decoding option (``TranslateOptions``: beam, length,
n-best, attention, and any field added to it later, e.g. a glossary's), and the sentence's subword ids: the text as
the model sees it after normalisation and tokenization, so two spellings the tokenizer reads alike share an entry.
It sits under ``run_sources`` (service/serving/prepared.py), where /v1, v2 and LibreTranslate translations (plain
text and HTML) all pass; n-best hypotheses and attention are stored with the translation. Streamed translations
are not cached (their tokens are the answer).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from engine.decoding import TranslateOptions
from engine.translation import Translation
from service.execution.work import Source
from service.models.registry import LoadedModel
from service.state.cache import LocalLRU, RedisLRU

DTYPES = {"float32", "float16", "float64"}  # what attention arrays may be decoded as


def cache_key(model: LoadedModel, options: TranslateOptions, source: Sequence[int]) -> str:
    """The sha256 of everything that decides the translation (see the module docstring)."""
    described = [model.name, model.version, model.variant, dataclasses.asdict(options), list(source)]
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def encode(t: Translation) -> bytes:
    out: dict[str, Any] = {
        "text": t.text,
        "score": t.score,
        "token_ids": list(map(int, t.token_ids)),
        "source_ids": list(map(int, t.source_ids)),
        "hypotheses": [[text, score, list(map(int, ids))] for text, score, ids in t.hypotheses],
        "truncated": t.truncated,
    }
    if t.attention is not None:
        a = np.ascontiguousarray(t.attention)
        out["attention"] = {"dtype": str(a.dtype), "shape": list(a.shape), "data": base64.b64encode(a).decode()}
    return json.dumps(out, ensure_ascii=False).encode()


def decode(raw: bytes) -> Translation:
    d = json.loads(raw)
    attention = None
    if "attention" in d:
        a = d["attention"]
        if a["dtype"] not in DTYPES:
            raise ValueError(f"cached attention of dtype {a['dtype']}")
        attention = np.frombuffer(base64.b64decode(a["data"]), dtype=a["dtype"]).reshape(a["shape"]).copy()
    hypotheses = [(text, score, ids) for text, score, ids in d["hypotheses"]]
    return Translation(d["text"], d["score"], d["token_ids"], d["source_ids"], hypotheses, attention, d["truncated"])


class TranslationCache:
    """Looks sentences up and stores their translations in ``store`` (service/state/cache.py), counting hits and
    misses per model (``mt_cache_hits_total``, ``mt_cache_misses_total``)."""

    def __init__(self, store: Any, hits: Any, misses: Any) -> None:
        self.store, self.hits, self.misses = store, hits, misses

    async def lookup(
        self, model: LoadedModel, options: TranslateOptions, sources: list[Source]
    ) -> list[Translation | None]:
        found: list[Translation | None] = []
        for source in sources:
            raw = await self.store.get(cache_key(model, options, source.ids))
            try:
                found.append(None if raw is None else decode(raw))
            except (ValueError, KeyError, TypeError):  # an entry this version cannot read: a miss
                found.append(None)
        hit = sum(t is not None for t in found)
        if hit:
            self.hits.labels(model.name).inc(hit)
        if len(found) - hit:
            self.misses.labels(model.name).inc(len(found) - hit)
        return found

    async def store_results(
        self, model: LoadedModel, options: TranslateOptions, sources: list[Source], results: list[Translation]
    ) -> None:
        for source, t in zip(sources, results, strict=True):
            await self.store.put(cache_key(model, options, source.ids), encode(t))


def translation_cache(cache_mb: float, link: Any = None, metrics: Any = None) -> TranslationCache | None:
    """The cache MT_CACHE_MB asks for: None when 0, in Redis with a link (MT_REDIS_URL), else in process."""
    if cache_mb <= 0:
        return None
    max_bytes = int(cache_mb * (1 << 20))
    store = LocalLRU(max_bytes) if link is None else RedisLRU(link, max_bytes)
    return TranslationCache(store, metrics.cache_hits, metrics.cache_misses)
