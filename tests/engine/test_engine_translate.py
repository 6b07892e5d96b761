"""Engine translations (numpy greedy / beam over ORT) against the PyTorch reference decoding of the same weights."""

from __future__ import annotations

import pytest
import torch

from core.bundle import load_bundle
from engine import Engine
from engine.decoding import TranslateOptions
from export.parity import translation_parity
from model.data import pad
from model.decoding import beam_search as torch_beam
from model.decoding import greedy_search as torch_greedy

SCORE_TOLERANCE = 1e-4


@pytest.mark.parametrize("beam_size", [1, 4])
def test_best_hypotheses_identical_to_pytorch(fp32_engine, reference_model, sentences, beam_size):
    parity = translation_parity(reference_model, fp32_engine, sentences, beam_size, batch_size=8)
    assert parity.total == len(sentences)
    assert parity.identical == parity.total, f"beam {beam_size}: sentences {parity.differing} differ"


def test_greedy_scores_match_pytorch(fp32_engine, reference_model, sentences):
    sources = fp32_engine.source_ids(sentences)
    reference = torch_greedy(reference_model, pad(sources))
    got = fp32_engine.translate_ids(sources)
    for ref, translation in zip(reference, got, strict=True):
        assert translation.token_ids == ref.tokens
        assert translation.score == pytest.approx(ref.score, abs=SCORE_TOLERANCE)
        assert translation.text == fp32_engine.tokenizer.decode(ref.tokens)
    assert any(t.text for t in got)


def test_nbest_lists_and_scores_match_pytorch(fp32_engine, reference_model, sentences):
    sources = fp32_engine.source_ids(sentences)
    with torch.no_grad():
        reference = torch_beam(reference_model, pad(sources), beam_size=4, n_best=4)
    got = fp32_engine.translate_ids(sources, TranslateOptions(beam_size=4, num_hypotheses=4))
    for ref, translation in zip(reference, got, strict=True):
        assert len(translation.hypotheses) == len(ref) == 4
        assert [ids for _, _, ids in translation.hypotheses] == [h.tokens for h in ref]
        for (text, score, ids), h in zip(translation.hypotheses, ref, strict=True):
            assert score == pytest.approx(h.score, abs=SCORE_TOLERANCE)
            assert text == fp32_engine.tokenizer.decode(ids)
        assert (translation.text, translation.score, translation.token_ids) == translation.hypotheses[0]


@pytest.mark.parametrize("beam_size", [1, 4])
def test_batch_of_mixed_lengths_gives_each_sentence_its_alone_result(fp32_engine, sentences, beam_size):
    options = TranslateOptions(beam_size=beam_size, num_hypotheses=min(beam_size, 2))
    batch = sorted(sentences[:12], key=len)[::3] + sentences[12:]  # short and long mixed
    assert len({len(s.split()) for s in batch}) > 5
    together = fp32_engine.translate(batch, options)
    for text, translation in zip(batch, together, strict=True):
        alone = fp32_engine.translate([text], options)[0]
        assert translation.token_ids == alone.token_ids, text
        assert translation.score == pytest.approx(alone.score, abs=1e-5)
        assert [h[2] for h in translation.hypotheses] == [h[2] for h in alone.hypotheses]


def test_max_length_limits_generated_tokens(fp32_engine, sentences):
    for translation in fp32_engine.translate(sentences[:6], TranslateOptions(beam_size=4, max_length=2)):
        assert len(translation.token_ids) <= 2


def test_int8_variant_translates(tiny_bundle_dir, fp32_engine, sentences, record_property, capsys):
    int8 = Engine(load_bundle(tiny_bundle_dir), variant="int8", providers="cpu")
    assert int8.variant == "int8" and "int8" in str(int8.bundle.graph("int8", "decoder"))
    for beam_size in (1, 4):
        options = TranslateOptions(beam_size=beam_size)
        got = int8.translate(sentences, options)
        want = fp32_engine.translate(sentences, options)
        assert all(t.token_ids and t.text for t in got)  # every sentence translated to something
        assert all(0 <= i < int8.tokenizer.vocab_size for t in got for i in t.token_ids)
        rate = sum(g.token_ids == w.token_ids for g, w in zip(got, want, strict=True)) / len(sentences)
        record_property(f"int8_agreement_beam{beam_size}", rate)
        with capsys.disabled():
            print(f"\nint8 vs fp32 identical translations, beam {beam_size}: {rate:.2%} of {len(sentences)}")
    # a different graph really ran: its log-probabilities are not fp32's
    src = fp32_engine.source_ids(sentences[:2])
    a = fp32_engine.run_decoder_full(fp32_engine.run_encoder(src), [[5, 6], [7]])["log_probs"]
    b = int8.run_decoder_full(int8.run_encoder(src), [[5, 6], [7]])["log_probs"]
    assert abs(a - b).max() > 1e-4
