"""Conventions shared by the PyTorch reference search (``model/decoding.py``) and the numpy engine
(``service/engine/search.py``), so that both give the same hypotheses:

- log-probabilities are computed in float32 and summed in float64; a hypothesis score is the sum of the
  log-probabilities of its generated tokens, EOS included when generated;
- each sentence has its own length limit (``length_limits``), so a sentence decodes the same alone or in a batch;
- beam hypotheses are ranked by score / ``length_penalty`` (Wu et al. 2016), length counting EOS.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Hypothesis:
    tokens: list[int]  # generated ids, EOS excluded
    score: float  # sum of log-probs (EOS included when generated)
    normalized: float  # score / length penalty (equals score for greedy)

    @classmethod
    def beam(cls, tokens: list[int], score: float, length: int, alpha: float) -> Hypothesis:
        """A beam hypothesis: normalized = score / length_penalty(length, alpha), length counting a generated EOS."""
        return cls(tokens, score, score / length_penalty(length, alpha))


def length_limits(src_lengths: list[int], max_positions: int, max_length: int | None = None) -> list[int]:
    """Generated tokens allowed per sentence: ``max_length`` if given, else 2 * (source length, EOS included)
    + 10; never more than max_positions - 1 (the decoder's position table holds BOS + that many)."""
    cap = max_positions - 1
    return [min(max_length if max_length is not None else 2 * n + 10, cap) for n in src_lengths]


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty lp = ((5 + length) / 6) ** alpha; alpha 0 ranks by raw score."""
    return ((5.0 + length) / 6.0) ** alpha
