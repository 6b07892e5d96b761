"""Conventions shared by the PyTorch reference search (``model/decoding.py``) and the numpy engine
(``engine/search.py``), so that both give the same hypotheses:

- log-probabilities are computed in float32 and summed in float64; a hypothesis score is the sum of the
  log-probabilities of its generated tokens, EOS included when generated;
- each sentence has its own length limit (``length_limits``), so a sentence decodes the same alone or in a batch;
- beam hypotheses are ranked by score / ``length_penalty`` (Wu et al. 2016), length counting EOS; a bundle may name
  transformers' form instead (``LengthPenalty``: imported checkpoints rank as ``generate`` does).
"""

from __future__ import annotations

from dataclasses import dataclass

# the decoding defaults of a request that leaves them out (the beam: when its bundle names none), written once here
DEFAULT_BEAM = 4
DEFAULT_LENGTH_PENALTY = 0.6


@dataclass
class Hypothesis:
    tokens: list[int]  # generated ids, EOS excluded
    score: float  # sum of log-probs (EOS included when generated)
    normalized: float  # score / length penalty (equals score for greedy)

    @classmethod
    def beam(cls, tokens: list[int], score: float, length: int, penalty: float | LengthPenalty) -> Hypothesis:
        """A beam hypothesis: normalized = score / length_divisor(length, penalty), length counting a generated
        EOS; ``penalty``: the length penalty (a request's ``length_penalty``, alone or in the bundle's form)."""
        return cls(tokens, score, score / length_divisor(length, penalty))


def length_limits(src_lengths: list[int], max_positions: int, max_length: int | None = None) -> list[int]:
    """Generated tokens allowed per sentence: ``max_length`` if given, else 2 * (source length, EOS included)
    + 10; never more than max_positions - 1 (the decoder's position table holds BOS + that many)."""
    cap = max_positions - 1
    return [min(max_length if max_length is not None else 2 * n + 10, cap) for n in src_lengths]


PENALTY_FORMS = ("gnmt", "hf")


@dataclass(frozen=True)
class LengthPenalty:
    """A length penalty of a bundle's form (its manifest's ``decoding.length_penalty_form``): "gnmt" ((5 + n) / 6)
    ** length_penalty (Wu et al. 2016, who call it alpha; our models), "hf" n ** length_penalty (transformers'
    ``generate``: imported checkpoints)."""

    length_penalty: float
    form: str = "gnmt"

    def __post_init__(self) -> None:
        if self.form not in PENALTY_FORMS:
            raise ValueError(f"length penalty form {self.form!r}: one of {', '.join(PENALTY_FORMS)}")


def length_divisor(length: int, penalty: float | LengthPenalty) -> float:
    """What a beam hypothesis's score is divided by: GNMT's lp = ((5 + length) / 6) ** length_penalty, or
    length ** length_penalty for a LengthPenalty of form "hf"; length_penalty 0 ranks by raw score."""
    if isinstance(penalty, LengthPenalty):
        if penalty.form == "hf":
            return float(length) ** penalty.length_penalty
        penalty = penalty.length_penalty
    return ((5.0 + length) / 6.0) ** penalty
