"""Teacher-forced scoring (one decoder call over BOS + target, cache length 0) equals step-by-step decoding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.search import length_limits
from core.tokenizer import BOS_ID, EOS_ID
from engine.decoder_state import pad_batch
from model.data import pad
from model.decoding import greedy_search as torch_greedy

TOLERANCE = 1e-4


def _close(got: np.ndarray, want: np.ndarray) -> None:
    """Equal within 1e-4 wherever the probability is not vanishingly small, and the same argmax."""
    keep = want > -30
    assert keep.any()
    assert np.abs(got[keep] - want[keep]).max() <= TOLERANCE
    assert (got.argmax(-1) == want.argmax(-1)).all()


def _step_by_step(engine, src: list[int], target: list[int]) -> np.ndarray:
    """(len(target) + 1, vocab): one decoder call per token, growing the key/value cache from length 0."""
    enc = engine.run_encoder([src])
    layers, _, heads, _, d_head = enc["cross_keys"].shape
    past_keys = past_values = np.zeros((layers, 1, heads, 0, d_head), dtype=np.float32)
    rows = []
    for token in [BOS_ID, *target]:
        log_probs, past_keys, past_values = engine.decoder.run(
            ["log_probs", "present_keys", "present_values"],
            {
                "tokens": np.array([[token]], dtype=np.int64),
                "src_mask": enc["src_mask"],
                "cross_keys": enc["cross_keys"],
                "cross_values": enc["cross_values"],
                "past_keys": past_keys,
                "past_values": past_values,
            },
        )
        rows.append(log_probs[0, -1])
    assert past_keys.shape[3] == len(target) + 1
    return np.stack(rows)


def test_teacher_forcing_equals_step_by_step(fp32_engine, sentences):
    for text in sentences[:8]:
        src = fp32_engine.source_ids([text])[0]
        target = fp32_engine.translate_ids([src])[0].token_ids
        full = fp32_engine.run_decoder_full(fp32_engine.run_encoder([src]), [target])["log_probs"][0]
        assert full.shape == (len(target) + 1, fp32_engine.tokenizer.vocab_size)
        _close(full, _step_by_step(fp32_engine, src, target))


def test_teacher_forcing_matches_pytorch(fp32_engine, reference_model, sentences):
    sources = fp32_engine.source_ids(sentences[:6])
    targets = [t.token_ids for t in fp32_engine.translate_ids(sources)]
    got = fp32_engine.run_decoder_full(fp32_engine.run_encoder(sources), targets)["log_probs"]
    with torch.no_grad():
        tgt_in = torch.from_numpy(pad_batch([[BOS_ID, *t] for t in targets]))
        want = torch.log_softmax(reference_model(pad(sources), tgt_in), dim=-1).numpy()
    for b, target in enumerate(targets):
        n = len(target) + 1
        _close(got[b, :n], want[b, :n])


def test_padded_batch_scores_each_target_as_alone(fp32_engine, sentences):
    sources = fp32_engine.source_ids(sentences[:5])
    targets = [t.token_ids for t in fp32_engine.translate_ids(sources)]
    assert len({len(t) for t in targets}) > 1  # different target lengths: some rows are padded
    together = fp32_engine.run_decoder_full(fp32_engine.run_encoder(sources), targets)
    for b, (src, target) in enumerate(zip(sources, targets, strict=True)):
        alone = fp32_engine.run_decoder_full(fp32_engine.run_encoder([src]), [target])
        n = len(target) + 1
        _close(together["log_probs"][b, :n], alone["log_probs"][0, :n])
        np.testing.assert_allclose(
            together["cross_attention"][:, b, :, :n, : len(src)], alone["cross_attention"][:, 0], atol=1e-5
        )


def test_score_of_a_given_target_equals_its_translation_score(fp32_engine, sentences):
    """A given target is scored as a whole sentence (its tokens + EOS): equal to the translation's score when the
    search ended with EOS; lower when the search stopped at its length limit (no EOS was generated)."""
    compared = 0
    for text in sentences[:8]:
        translation = fp32_engine.translate([text])[0]
        given = fp32_engine.attention_ids(translation.source_ids, translation.token_ids)
        generated = fp32_engine.attention_ids(translation.source_ids)  # no target: the greedy translation
        assert generated["target_ids"] == translation.token_ids
        (limit,) = length_limits([len(translation.source_ids)], fp32_engine.max_source_tokens)
        for result in (given, generated):
            if len(translation.token_ids) < limit:
                assert result["score"] == pytest.approx(translation.score, abs=TOLERANCE)
            else:  # cut at the limit: the given target adds log P(EOS) < 0
                assert result["score"] < translation.score
        compared += len(translation.token_ids) < limit
    assert compared >= 4


def test_score_prefers_the_models_translation(fp32_engine):
    """Scoring can fail: a scrambled target scores lower than the model's own translation."""
    src = fp32_engine.source_ids(["ein mann spielt im park"])[0]
    best = fp32_engine.translate_ids([src])[0]
    scrambled = best.token_ids[::-1]
    assert scrambled != best.token_ids
    assert fp32_engine.attention_ids(src, scrambled)["score"] < best.score - 1.0


def test_cache_length_zero_single_token_matches_pytorch(fp32_engine, reference_model):
    sources = fp32_engine.source_ids(["der hund", "eine katze sitzt auf dem ball"])
    enc = fp32_engine.run_encoder(sources)
    got = fp32_engine.run_decoder_full(enc, [[], []])  # tokens = BOS only, past_len 0
    assert got["log_probs"].shape[:2] == (2, 1)
    assert got["self_attention"].shape[-2:] == (1, 1)
    with torch.no_grad():
        memory = reference_model.encode(pad(sources))
        out = reference_model.decode(
            torch.full((2, 1), BOS_ID), reference_model.cross_kv(memory.memory), memory.src_mask, None
        )
        want = torch.log_softmax(out.logits, dim=-1).numpy()
    _close(got["log_probs"], want)


def test_source_of_length_one(fp32_engine, reference_model):
    """Only EOS as the source: the encoder and decoder graphs accept it and agree with PyTorch."""
    src = [[EOS_ID]]
    enc = fp32_engine.run_encoder(src)
    assert enc["encoder_output"].shape == (1, 1, fp32_engine.config["d_model"])
    reference = torch_greedy(reference_model, torch.tensor(src))[0]
    result = fp32_engine.attention_ids(src[0], reference.tokens)
    assert result["cross"].shape[-1] == 1
    np.testing.assert_allclose(result["cross"], 1.0, atol=1e-6)  # one key: all the attention goes there
    assert result["score"] == pytest.approx(reference.score, abs=TOLERANCE)
    with torch.no_grad():
        tgt_in = torch.tensor([[BOS_ID, *reference.tokens]])
        want = torch.log_softmax(reference_model(torch.tensor(src), tgt_in), dim=-1).numpy()
    _close(fp32_engine.run_decoder_full(enc, [reference.tokens])["log_probs"], want)


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_attention_scores_a_target_as_translate_scored_it(tiny_bundle_dir, variant):
    """One score: /v1/attention's score of a translation is the score /v1/translate gave it (the same step
    graph and variant, summed the same way), for greedy exactly and for beam search to rounding."""
    from core.bundle import load_bundle
    from engine import Engine
    from engine.decoding import TranslateOptions

    engine = Engine(load_bundle(tiny_bundle_dir), variant=variant)
    for text in ("ein mann spielt", "der hund rennt über die wiese", "eine frau"):
        greedy = engine.translate([text], TranslateOptions(beam_size=1))[0]
        assert engine.attention(text)["score"] == greedy.score
        beam = engine.translate([text], TranslateOptions(beam_size=4))[0]
        scored = engine.attention_ids(beam.source_ids, beam.token_ids)["score"]
        assert abs(scored - beam.score) < 1e-4, (text, scored, beam.score)
