"""One typed request (engine/decoding.py): a protocol's fields fill TranslateOptions, resolved once against the
bundle's defaults; each decoding default is written once (core/search.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from core.search import DEFAULT_BEAM, DEFAULT_LENGTH_PENALTY, LengthPenalty
from engine.decoding import DecodingDefaults, TranslateOptions, beam_within, decoding_defaults

ROOT = Path(__file__).resolve().parent.parent.parent


def test_left_out_fields_take_the_bundles_defaults_once():
    asked = TranslateOptions.request(num_hypotheses=2)
    assert asked.beam_size is None and asked.length_penalty is None and not asked.is_resolved  # the bundle's
    defaults = DecodingDefaults.of(
        {"beam_size": 6, "max_length": 40, "no_repeat_ngram_size": 3, "length_penalty_form": "hf"}
    )
    resolved = asked.resolve(defaults)
    assert (resolved.beam_size, resolved.max_length, resolved.no_repeat_ngram_size) == (6, 40, 3)
    assert resolved.penalty == LengthPenalty(DEFAULT_LENGTH_PENALTY, "hf")
    # resolved options keep what they were resolved to: another version's defaults do not change them
    assert resolved.resolve(DecodingDefaults()) is resolved


def test_a_given_field_wins_and_the_beam_holds_the_n_best():
    given = TranslateOptions.request(beam_size=2, max_length=9, no_repeat_ngram_size=0, length_penalty=1.0)
    resolved = given.resolve(DecodingDefaults(beam_size=6, max_length=40, no_repeat_ngram_size=3))
    assert (resolved.beam_size, resolved.max_length, resolved.no_repeat_ngram_size) == (2, 9, 0)
    assert resolved.penalty == LengthPenalty(1.0, "gnmt")
    plain = decoding_defaults({})
    assert plain == {"no_repeat_ngram_size": 0}
    assert TranslateOptions.request(num_hypotheses=5).resolve(DecodingDefaults.of(plain)).beam_size == 5


@pytest.mark.parametrize(("cap", "beam"), [(DEFAULT_BEAM, None), (16, None), (2, 2), (1, 1)])
def test_a_protocol_without_a_beam_field_takes_the_model_default_within_the_cap(cap, beam):
    assert beam_within(cap) == beam
    assert TranslateOptions.request(max_beam_size=cap).beam_size == beam


def _assignments(name: str) -> list[str]:
    found = []
    for package in ("core", "engine", "service", "export", "model"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
                    found.append(str(path.relative_to(ROOT)))
    return found


def test_each_decoding_default_is_written_once():
    assert _assignments("DEFAULT_BEAM") == ["core/search.py"]
    assert _assignments("DEFAULT_LENGTH_PENALTY") == ["core/search.py"]
    # no other 0.6 (the length penalty's value) in the engine or the serving side
    for package in ("engine", "service"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                assert not (isinstance(node, ast.Constant) and node.value == DEFAULT_LENGTH_PENALTY), path
