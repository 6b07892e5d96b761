"""scripts/backtranslate_multi.sh end to end on the tiny multilingual run of tests/multi_bundle.py: its best/ exported
as an int8 bundle of the English directions, English lines back-translated into German and Chinese, and a recipe of
the two tagged corpora prepared into a training folder."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

from multi_bundle import LEXICON, cached_multi_build, run_data, sentence, source_digest

from model.data import read_lines

ROOT = Path(__file__).resolve().parents[2]


def test_backtranslate_multi_prepares_tagged_synthetic_pairs(request, tmp_path):
    build = cached_multi_build(Path(request.config.cache.mkdir("mtserve")), source_digest())
    data = run_data(build, tmp_path / "data")
    rng = random.Random(3)
    english = [sentence([rng.randrange(len(LEXICON["en"])) for _ in range(rng.randint(2, 4))], "en") for _ in range(8)]
    (tmp_path / "news.en").write_text("\n".join(english) + "\n", encoding="utf-8")
    bt = tmp_path / "bt"
    corpora = [
        {"name": f"news-bt-{pair}", "source": pair, "reader": "parallel", "path": str(bt / f"news-{pair}"),
         "directions": [f"{pair}-en"], "source_tag": "<bt>"}
        for pair in ("de", "zh")
    ]  # fmt: skip
    corpora.append({"name": "m30k-ft-zh", "source": "zh", "reader": "parallel", "path": str(bt / "m30k-zh"),
                    "directions": ["en-zh"], "chinese_latin": "none"})  # fmt: skip
    captions = english[:4]
    (tmp_path / "captions.en").write_text("\n".join(captions) + "\n", encoding="utf-8")
    recipe = {"name": "bt", "directions": ["de-en", "en-de", "zh-en", "en-zh"], "corpora": corpora}
    (tmp_path / "recipe.json").write_text(json.dumps(recipe))
    (tmp_path / "shared").mkdir()
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "RUN": str(build / "run"),
        "DATA": str(data),
        "SHARED": str(tmp_path / "shared"),
        "MONO": str(tmp_path / "news.en"),
        "FT_INPUT": str(tmp_path / "captions.en"),
        "BT": str(bt),
        "RECIPE": str(tmp_path / "recipe.json"),
        "OUT_DATA": str(tmp_path / "prepared"),
        "WORK": str(tmp_path / "work"),
    }
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "backtranslate_multi.sh")], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--new-data" in result.stderr  # it says how to resume the run on the new data
    step = json.loads((build / "run" / "best" / "config.json").read_text())["step"]
    kept = 0
    for pair in ("de", "zh"):
        folder = bt / f"news-{pair}"
        assert (folder / "model-step").read_text().strip() == str(step)
        real, synthetic = read_lines(folder / "bt.en"), read_lines(folder / f"bt.{pair}")
        assert len(real) == len(synthetic) and set(real) <= set(english)
        # the synthetic side is in the asked language (Chinese comes out without spaces)
        assert any(w in line for line in synthetic for w in LEXICON[pair]), (pair, synthetic)
        kept += len(real)
    # the captions forward into Chinese: real English sources, synthetic Chinese targets, untagged as synthetic
    forward = bt / "m30k-zh"
    assert (forward / "model-step").read_text().strip() == str(step)
    assert set(read_lines(forward / "bt.en")) <= set(captions)
    prepared = tmp_path / "prepared"
    pairs = list(zip(read_lines(prepared / "train.src"), read_lines(prepared / "train.tgt"), strict=True))
    back = [(s, t) for s, t in pairs if s.startswith("<2en> <bt> ")]
    ahead = [(s, t) for s, t in pairs if s.startswith("<2zh> ")]
    assert back and len(back) + len(ahead) == len(pairs)
    assert len(back) <= kept and {t for _, t in back} <= set(english)
    assert len(ahead) <= len(read_lines(forward / "bt.en"))
    assert {s.removeprefix("<2zh> ") for s, _ in ahead} <= set(captions)
