"""The text side of a bundle, read once wherever an engine's text is handled (the engine, and the server process's
stand-in for an engine in a worker process, service/execution/facade.py): its tokenizers and its source
normalization."""

from __future__ import annotations

from collections.abc import Callable

from core.bundle import Bundle
from core.directions import normalization_language
from core.normalize import fold_unknown, source_normalizer
from core.tokenizer import Tokenizer


def bundle_text(bundle: Bundle) -> tuple[Tokenizer, Tokenizer, Callable[[str], str]]:
    """The source tokenizer, the target tokenizer (target-language text is cut by the target side's model where the
    bundle has one, export/marian_vocab.py; else the same object) and the source normalization: the manifest's,
    then the characters the vocabulary lacks as equivalents it has (core/normalize.py fold_unknown)."""
    tokenizer = Tokenizer(bundle.tokenizer_file)
    target = bundle.target_tokenizer_file
    target_tokenizer = tokenizer if target == bundle.tokenizer_file else Tokenizer(target)
    manifest = bundle.manifest
    normalizer = source_normalizer(manifest.get("source_normalization"), normalization_language(manifest))
    return tokenizer, target_tokenizer, lambda text: fold_unknown(normalizer(text), tokenizer.spelled_in_bytes)
