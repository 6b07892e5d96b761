"""What the server process holds of an engine that runs in a worker process (service/execution/remote.py): the
bundle's tokenizers, its source normalization, its limits and decoding defaults, and what the worker reported of
its sessions (providers, threads, variant, the fused step). The serving layer reads ``model.engine`` for these, as
it reads an in-process ``Engine``; tokenizing stays in the server process. ``source_ids``, ``target_ids``,
``pieces`` and ``resolved`` are the Engine's own methods, so both modes cut and resolve alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.bundle import Bundle
from engine.bundle_text import bundle_text
from engine.decoding import DecodingDefaults, TranslateOptions
from engine.engine import Engine


class EngineFacade:
    source_ids = Engine.source_ids
    target_ids = Engine.target_ids
    _ids = Engine._ids
    pieces = Engine.pieces
    resolved = Engine.resolved

    def __init__(self, bundle: Bundle, info: dict[str, Any], worker: Any) -> None:
        """As Engine.__init__ reads the bundle's tokenizers and normalization; ``info`` the worker's report."""
        self.bundle, self.worker = bundle, worker
        self.config = bundle.model_config
        self.tokenizer, self.target_tokenizer, self.normalize_source = bundle_text(bundle)
        self.update(info)

    def update(self, info: dict[str, Any]) -> None:
        """The worker process's report on its engine (after each start)."""
        self.info = info
        self.variant, self.providers, self.threads = info["variant"], info["providers"], info["threads"]
        self.fused_step, self.max_source_tokens = info["fused_step"], info["max_source_tokens"]
        self.device_runner = "device" if info["device"] else None  # only ever tested against None
        self.decoding = dict(info["decoding"])
        self.defaults = DecodingDefaults.of(self.decoding)

    def translate(self, texts: Sequence[str], options: TranslateOptions | None = None) -> list:
        """Texts translated in the worker process (tools and tests; requests go through the scheduler)."""
        return self.worker.translate(list(texts), options)
