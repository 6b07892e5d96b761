"""Translation of a test set and sacreBLEU (cased, detokenized, 13a) with its signature, plus lowercased BLEU."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import sacrebleu
import torch
from tqdm import tqdm

from core.search import DEFAULT_LENGTH_PENALTY
from model.data import pad
from model.decoding import beam_search, greedy_search
from model.directions import bleu_tokenizer, tagged, wrong_language
from model.tokenizer import EOS_ID, Tokenizer
from model.transformer import Transformer


def translate(
    model: Transformer,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    beam_size: int = 1,
    length_penalty: float = DEFAULT_LENGTH_PENALTY,
    batch_size: int = 64,
    max_length: int | None = None,
    progress: bool = False,
) -> list[str]:
    """Translate in batches of similar length; output order follows the input."""
    model.eval()
    ids = [t[: model.cfg.max_positions - 1] + [EOS_ID] for t in tokenizer.encode_batch(texts)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    results: list[str] = [""] * len(ids)
    starts = range(0, len(order), batch_size)
    for start in tqdm(starts, desc="translate", disable=not progress, unit="batch"):
        chunk = order[start : start + batch_size]
        src = pad([ids[i] for i in chunk])
        if beam_size == 1:
            hyps = greedy_search(model, src, max_length)
        else:
            hyps = [nb[0] for nb in beam_search(model, src, beam_size, max_length, length_penalty)]
        for i, hyp in zip(chunk, hyps, strict=True):
            results[i] = tokenizer.decode(hyp.tokens)
    return results


# a unit of 1-6 letters five times in a row ("dilapidididididi"), or a phrase of 1-4 words five times in a row
# ("the man the man the man the man the man"): the two shapes of a decoder stuck in a loop ("hahaha", "Hmmmm"
# and "no, no, no, no" stay below both)
_CHAR_LOOP = re.compile(r"([^\W\d_]{1,6}?)\1{4,}")
_WORD_LOOP = re.compile(r"\b(\w+(?:\W+\w+){0,3}?)(?:\W+\1\b){4,}", re.IGNORECASE)


def is_loop(text: str) -> bool:
    """Whether a translation degenerated into a repeated syllable or phrase."""
    return bool(_CHAR_LOOP.search(text) or _WORD_LOOP.search(text))


def bleu(
    hypotheses: Sequence[str], references: Sequence[str], tokenize: str | None = None, language: str | None = None
) -> dict[str, object]:
    """sacreBLEU (cased, and lowercased) and chrF; ``tokenize``: sacreBLEU's tokenizer (``zh`` for Chinese targets;
    None: its default, 13a). With the target ``language``, also how many translations are in another language
    (``off_target``: model/directions.py ``wrong_language``; a zero-shot direction's typical failure)."""
    cased = sacrebleu.BLEU(tokenize=tokenize)
    lower = sacrebleu.BLEU(lowercase=True, tokenize=tokenize)
    chrf = sacrebleu.CHRF()
    score = cased.corpus_score(list(hypotheses), [list(references)])
    score_lc = lower.corpus_score(list(hypotheses), [list(references)])
    score_chrf = chrf.corpus_score(list(hypotheses), [list(references)])
    result = {
        "bleu": round(score.score, 2),
        "bleu_lowercase": round(score_lc.score, 2),
        "chrf": round(score_chrf.score, 2),
        "signature": str(cased.get_signature()),
        "signature_lowercase": str(lower.get_signature()),
        "signature_chrf": str(chrf.get_signature()),
        "detail": str(score),
        "n_sentences": len(hypotheses),
        "loops": sum(is_loop(h) for h in hypotheses),
    }
    if language is not None:
        result["off_target"] = sum(wrong_language(list(hypotheses), language))
    return result


def score_line(label: str, result: dict[str, object]) -> str:
    """One line of progress output for a scored split: BLEU, chrF, loops (and seconds when timed), signature."""
    seconds = f" ({result['seconds']}s)" if "seconds" in result else ""
    off_target = f" off-target {result['off_target']}" if "off_target" in result else ""
    return (
        f"{label}: BLEU {result['bleu']} (lowercased {result['bleu_lowercase']}) chrF {result['chrf']} "
        f"loops {result['loops']}{off_target}{seconds}  {result['signature']}"
    )


def write_hypotheses(path: str | Path, hypotheses: Sequence[str]) -> None:
    Path(path).write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")


def evaluate(
    model: Transformer,
    tokenizer: Tokenizer,
    sources: Sequence[str],
    references: Sequence[str],
    beam_size: int = 1,
    length_penalty: float = DEFAULT_LENGTH_PENALTY,
    progress: bool = False,
    direction: str | None = None,
    pivot: str | None = None,
) -> tuple[dict[str, object], list[str]]:
    """Translate ``sources`` and score them. A multilingual model is told the ``direction`` (``de-zh``) by the target
    tag; with ``pivot`` (``en``) it translates into the pivot language first and from there into the target, as a
    service without the direct direction would."""
    texts, legs = translate_direction(model, tokenizer, sources, beam_size, length_penalty, direction, pivot, progress)
    target = direction.split("-")[1] if direction else None
    result = bleu(texts, references, bleu_tokenizer(direction), target)
    result.update(beam_size=beam_size, length_penalty=length_penalty if beam_size > 1 else None)
    if direction is not None:
        result.update(direction=direction, legs=legs)
    return result, texts


def translate_direction(
    model: Transformer,
    tokenizer: Tokenizer,
    sources: Sequence[str],
    beam_size: int = 1,
    length_penalty: float = DEFAULT_LENGTH_PENALTY,
    direction: str | None = None,
    pivot: str | None = None,
    progress: bool = False,
) -> tuple[list[str], list[str | None]]:
    """``sources`` translated in a multilingual model's ``direction`` (each leg's target tag on its sources), through
    ``pivot`` in two legs when given; untagged for a single-direction model (no direction). Returns the translations
    and the legs."""
    legs = [None] if direction is None else _legs(direction, pivot)
    texts = list(sources)
    with torch.inference_mode():
        for leg in legs:
            tagged_texts = texts if leg is None else [tagged(t, leg) for t in texts]
            texts = translate(model, tokenizer, tagged_texts, beam_size, length_penalty, progress=progress)
    return texts, legs


def _legs(direction: str, pivot: str | None) -> list[str]:
    source, target = direction.split("-")
    if pivot is None or pivot in (source, target):
        return [direction]
    return [f"{source}-{pivot}", f"{pivot}-{target}"]
