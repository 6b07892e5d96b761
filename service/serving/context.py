"""What the serving layer needs to know about the request it serves, without knowing HTTP."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestContext:
    request_id: str = ""
    timeout_s: float = 30.0  # the deadline, from now
    batch_ids: list[int] = field(default_factory=list)  # filled with the engine batches that ran this request
    # awaited beside the work: returns once the client has gone away (the work is then cancelled); None where
    # nobody watches (a stream notices the client going away by itself)
    disconnected: Callable[[], Awaitable[None]] | None = None
    logged_texts: list[str] | None = None  # when set (opt-in debugging), the request's texts are appended
    quality: Any = None  # service.serving.quality.QualityPolicy: language checks of translations
    client: str = ""  # whose work it is: the API key's label (service/access/keys.py), "" without API keys
    priority: int = 0  # service/scheduling/batch_policy.py: 0 interactive, BACKGROUND for document jobs
    # service.observability.inference_stats.RequestTiming: where the time went (the statistics extension)
    timing: Any = None
    cache: Any = None  # service.serving.cache.TranslationCache, or None (MT_CACHE_MB=0)
    terms: Any = None  # service.serving.terms.Terms: glossary and do-not-translate spans of the request
    # URLs, numbers, codes ... found in each sentence are placed and checked like do-not-translate spans
    # (service/serving/spans.py); a request turns it off with protect_spans: false
    protect_spans: bool = True
    # names left to the model, searched again where a translation lost one (service/serving/names.py); a request
    # turns it off with protect_names: false
    protect_names: bool = True
