"""The run's validation BLEU is one score: what picks ``best/`` during training also picks the release."""

from __future__ import annotations

import json
from pathlib import Path

from multi_bundle import cached_multi_build, source_digest

from model.train import bleu_by_direction, validation_bleu


def test_tagged_lines_score_the_mean_of_their_directions() -> None:
    sources = ["<2en> Guten Morgen euch allen hier", "<2zh> good morning everyone", "<2zh> see you"]
    references = ["Good morning to all of you here", "大家早上好", "再见"]
    hyps = ["Good morning to all of you here", "大家早上好", "你好"]
    by_direction = bleu_by_direction(sources, references, hyps)
    assert validation_bleu({"bleu": 1.0}, sources, references, hyps) == (
        round(sum(by_direction.values()) / 2, 2),
        by_direction,
    )
    assert validation_bleu({"bleu": 42.0}, ["plain"], ["x"], ["x"]) == (42.0, {})  # one pair: the corpus BLEU


def test_finalize_compares_candidates_by_the_validation_score(request) -> None:
    """The tiny multilingual run keeps one checkpoint, so its release is ``best/``, scored again at the end: that
    score must be the one its validation logged (before, the release step scored the mixed directions as one
    corpus with the 13a tokenizer, Chinese included, and compared checkpoints by a different number)."""
    build = cached_multi_build(Path(request.config.cache.mkdir("mtserve")), source_digest())
    logged = [json.loads(line) for line in (build / "run" / "log.jsonl").read_text().splitlines()]
    training = json.loads((build / "run" / "release" / "config.json").read_text())["training"]
    assert len(logged[-1]["valid_bleu_directions"]) >= 4 and logged[-1]["valid_bleu"] > 0
    assert training["chosen"] == "best"
    assert training["valid_bleu_greedy"]["best"] == max(record["valid_bleu"] for record in logged)
