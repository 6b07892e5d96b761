"""What a translation gives back (``Translation``), and the one error a source can cause (``SourceTooLongError``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


class SourceTooLongError(ValueError):
    """Text ``index`` has ``n_tokens`` subwords (EOS excluded), more than ``limit``."""

    def __init__(self, index: int, n_tokens: int, limit: int) -> None:
        super().__init__(f"text has {n_tokens} subword tokens; the limit is {limit}: shorten or split it")
        self.index, self.n_tokens, self.limit = index, n_tokens, limit


@dataclass
class Translation:
    text: str
    score: float
    token_ids: list[int]
    source_ids: list[int]  # EOS included
    hypotheses: list[tuple[str, float, list[int]]] = field(default_factory=list)  # (text, score, ids), best first
    attention: np.ndarray | None = None  # cross-attention (layers, heads, target, source)
    truncated: bool = False  # stopped at its length limit without EOS (set by the serving layer, which knows it)
    missing: list = field(default_factory=list)  # glossary terms / spans it lacks (service/serving/terms.py Use)
    # decoded under glossary / do-not-translate constraints: its score holds forced subwords (set by the serving layer)
    constrained: bool = False
