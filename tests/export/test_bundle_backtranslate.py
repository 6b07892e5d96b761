"""export.cli backtranslate on the tiny multilingual bundle of tests/multi_bundle.py: the engine translates monolingual
text in the reverse direction with the service's tagging and the bundle's decoding defaults, and model/backtranslate.py
writes (synthetic source, real target) files that a rerun continues."""

from __future__ import annotations

import json
import random
from pathlib import Path

from multi_bundle import LEXICON, NAME, cached_multi_bundle, sentence, source_digest

from core.bundle import load_bundle
from engine import Engine
from engine.decoding import TranslateOptions
from export.cli import main as export_main
from export.direction_scoring import direction_named, translate_split
from model.data import read_lines
from model.evaluate import is_loop


def test_the_bundle_back_translates_what_it_would_serve(request, tmp_path, capsys):
    repository = cached_multi_bundle(Path(request.config.cache.mkdir("mtserve")), tmp_path, source_digest())
    bundle = repository / NAME / "1"
    rng = random.Random(11)
    english = [sentence([rng.randrange(len(LEXICON["en"])) for _ in range(rng.randint(2, 5))], "en") for _ in range(9)]
    mono = tmp_path / "news.en"
    mono.write_text("\n".join(english) + "\n", encoding="utf-8")
    out = tmp_path / "bt"
    args = ["backtranslate", "--bundle", str(bundle), "--input", str(mono), "--direction", "en-de", "--out", str(out)]
    args += ["--variant", "fp32", "--beam", "2", "--no-progress"]

    assert export_main([*args, "--limit", "5"]) == 0
    first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert first["read"] == 5 and first["kept"] + first["dropped_this_call"] == 5
    assert export_main(args) == 0  # the rerun continues after the first 5
    second = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert second["read"] == 9 and second["kept"] == first["kept"] + 4 - second["dropped_this_call"]

    engine = Engine(load_bundle(bundle), variant="fp32", providers="cpu")
    direction, _ = direction_named(engine.bundle.manifest, "en-de")
    expected, _ = translate_split(engine, direction, english, engine.resolved(TranslateOptions(beam_size=2)), 32)
    kept = [(e, g) for e, g in zip(english, expected, strict=True) if g.strip() and not is_loop(g)]  # what it drops
    assert read_lines(out / "bt.en") == [e for e, _ in kept]
    assert read_lines(out / "bt.de") == [g for _, g in kept]
    assert sum(any(w in g.split() for w in LEXICON["de"]) for _, g in kept) >= len(kept) // 2  # German, not English


def test_a_direction_the_bundle_does_not_serve_is_a_clear_error(request, tmp_path, capsys):
    repository = cached_multi_bundle(Path(request.config.cache.mkdir("mtserve")), tmp_path, source_digest())
    mono = tmp_path / "news.en"
    mono.write_text("dog\n", encoding="utf-8")
    args = ["backtranslate", "--bundle", str(repository / NAME / "1"), "--input", str(mono), "--direction", "en-fr"]
    assert export_main([*args, "--out", str(tmp_path / "bt"), "--variant", "fp32"]) == 2
    assert "--direction" in capsys.readouterr().err and not (tmp_path / "bt").exists()
