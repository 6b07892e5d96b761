"""Inputs a user can send: empty text, text over the model's limit, characters the tokenizer never saw."""

from __future__ import annotations

import pytest

from core.bundle import load_bundle
from core.tokenizer import EOS_ID, UNK_ID
from engine import Engine
from engine.decoding import TranslateOptions
from engine.translation import SourceTooLongError


class _NoRun:
    """Stands in for an ORT session that must not be used."""

    def run(self, *args, **kwargs):
        raise AssertionError("the engine ran a graph")


@pytest.fixture
def idle_engine(tiny_bundle_dir) -> Engine:
    engine = Engine(load_bundle(tiny_bundle_dir), variant="fp32", providers="cpu")
    engine.encoder = engine.decoder = _NoRun()
    return engine


@pytest.mark.parametrize("options", [TranslateOptions(), TranslateOptions(beam_size=4, num_hypotheses=3)])
def test_empty_text_translates_to_empty_without_engine_work(idle_engine, options):
    stats: dict[str, float] = {}
    sources = idle_engine.source_ids(["", "   "])
    assert sources == [[EOS_ID], [EOS_ID]]
    for translation in idle_engine.translate_ids(sources, options, stats):
        assert translation.text == "" and translation.token_ids == [] and translation.score == 0.0
    assert "encode" not in stats and "decode" not in stats and not stats.get("generated_tokens")


def test_empty_texts_beside_real_ones(fp32_engine):
    got = fp32_engine.translate(["", "ein mann spielt", ""], TranslateOptions(beam_size=4))
    assert [bool(t.text) for t in got] == [False, True, False]
    assert got[1].token_ids == fp32_engine.translate(["ein mann spielt"], TranslateOptions(beam_size=4))[0].token_ids


def _text_of_tokens(engine: Engine, n_tokens: int) -> str:
    """A text whose subwords plus EOS number exactly ``n_tokens``."""
    for words in range(1, 200):
        for tail in ("", " der", " ein"):
            text = " ".join(["hund"] * words) + tail
            if len(engine.tokenizer.encode(text)) + 1 == n_tokens:
                return text
    raise AssertionError(f"no text of {n_tokens} tokens")


def test_source_over_the_limit_names_the_text_and_the_limit(fp32_engine):
    limit = fp32_engine.max_source_tokens
    assert limit == fp32_engine.config["max_positions"]
    too_long = _text_of_tokens(fp32_engine, limit + 1)
    with pytest.raises(SourceTooLongError) as info:
        fp32_engine.translate(["ein mann", "der hund", too_long])
    error = info.value  # counted in subwords, EOS excluded
    assert (error.index, error.n_tokens, error.limit) == (2, limit, limit - 1)
    assert f"has {limit} subword tokens; the limit is {limit - 1}" in str(error)
    for call in (lambda: fp32_engine.embed([too_long]), lambda: fp32_engine.attention(too_long)):
        with pytest.raises(SourceTooLongError):
            call()


def test_a_lower_limit_applies_and_a_higher_one_is_capped_by_the_model(fp32_engine):
    text = _text_of_tokens(fp32_engine, 11)  # 10 subwords + EOS
    assert len(fp32_engine.source_ids([text], max_subwords=10)[0]) == 11
    with pytest.raises(SourceTooLongError) as info:
        fp32_engine.source_ids(["ein mann", text], max_subwords=9)
    assert (info.value.index, info.value.limit) == (1, 9)
    too_long = _text_of_tokens(fp32_engine, fp32_engine.max_source_tokens + 1)
    with pytest.raises(SourceTooLongError) as info:
        fp32_engine.source_ids([too_long], max_subwords=10_000)
    assert info.value.limit == fp32_engine.max_source_tokens - 1


def test_source_at_the_limit_translates(fp32_engine):
    at_limit = _text_of_tokens(fp32_engine, fp32_engine.max_source_tokens)
    for beam_size in (1, 4):
        translation = fp32_engine.translate([at_limit], TranslateOptions(beam_size=beam_size))[0]
        assert len(translation.source_ids) == fp32_engine.max_source_tokens
        assert len(translation.token_ids) <= fp32_engine.max_source_tokens - 1  # decoder positions stay in range
    assert fp32_engine.embed([at_limit]).shape[0] == 1


@pytest.mark.parametrize("text", ["你好世界", "ein mann 🙂 spielt", "🚲🚲🚲", "Größe ÇA va? ñ ø"])
def test_unseen_characters_translate_through_byte_fallback(fp32_engine, text):
    source = fp32_engine.source_ids([text])[0]
    assert UNK_ID not in source
    assert any(piece.startswith("<0x") for piece in fp32_engine.pieces(source))
    assert fp32_engine.tokenizer.decode(source) == text  # spelled out as UTF-8 bytes, nothing lost
    for beam_size in (1, 4):
        translation = fp32_engine.translate([text], TranslateOptions(beam_size=beam_size))[0]
        assert isinstance(translation.text, str)
    assert fp32_engine.embed([text]).shape == (1, fp32_engine.config["d_model"])
    assert fp32_engine.attention(text)["cross"].shape[-1] == len(source)
