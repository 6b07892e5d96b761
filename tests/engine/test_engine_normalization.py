"""A bundle trained on normalised text (manifest "source_normalization") has every source normalised the same
way before tokenizing; a bundle without the field tokenizes sources as sent."""

from __future__ import annotations

import pytest
from bundle_copies import copy_bundle

from core.bundle import load_bundle
from core.normalize import fold_unknown, normalize_for, source_normalizer
from engine import Engine


def test_source_normalizer_versions():
    assert source_normalizer(None, "de")("  \u201eA\u201c  ") == "  \u201eA\u201c  "  # as sent
    assert source_normalizer("1", "de")("  \u201eA\u201c  ") == '"A"'
    assert source_normalizer("1", "zh")("漢語") == "汉语"
    with pytest.raises(ValueError, match="unknown"):
        source_normalizer("2", "de")


def test_engine_normalizes_sources_only_for_a_bundle_that_says_so(tiny_bundle_dir, tmp_path):
    text = "der  \u201emann\u201c spielt\u00a0ball"
    plain = Engine(load_bundle(tiny_bundle_dir), variant="fp32")
    normalizing = Engine(
        load_bundle(copy_bundle(tiny_bundle_dir, tmp_path / "1", source_normalization="1")), variant="fp32"
    )
    # every bundle: only the characters its vocabulary lacks are written as equivalents it has (core/normalize.py
    # fold_unknown: here the no-break space; the tiny vocabulary has no ASCII quote either, so "„" stays); the double
    # space stays
    folded = fold_unknown(text, plain.tokenizer.spelled_in_bytes)
    assert plain.tokenizer.spelled_in_bytes("\u00a0") and folded == text.replace("\u00a0", " ")
    assert plain.source_ids([text]) == [plain.tokenizer.encode(folded) + [2]]
    assert normalizing.source_ids([text]) == [plain.tokenizer.encode(normalize_for(text, "de")) + [2]]
    assert normalizing.source_ids([text]) != plain.source_ids([text])
    assert normalizing.translate([text])[0].text == plain.translate([normalize_for(text, "de")])[0].text
