#!/usr/bin/env bash
# Reproduce the shipped zh-en model end to end: split -> train (or resume) -> evaluate -> export -> bundle BLEU
# -> confidence -> parity.
#   bash scripts/release_zh_en.sh ../shared/data/tatoeba-cmn-eng/cmn.txt
# The Tatoeba English-Mandarin pairs (manythings.org/anki, cmn-eng) are CC-BY 2.0 FR, by the Tatoeba contributors.
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:?usage: scripts/release_zh_en.sh <cmn.txt: English TAB Chinese TAB attribution>}
DATA=${DATA:-runs/data/zh-en}
RUN=${RUN:-runs/zh-en}
PY=${PYTHON:-.venv/bin/python}
OUT=checkpoints/zh-en
BUNDLE=model_repository/zh-en/1
EPOCHS=${EPOCHS:-60}

"$PY" -m model.cli split --input "$PAIRS" --lang zh --out "$DATA"   # by a hash of the English side
"$PY" -m model.cli train --config configs/tatoeba_zh_en.json --data "$DATA" --out "$RUN" --epochs "$EPOCHS"
mkdir -p "$OUT"
cp "$RUN"/release/model.safetensors "$RUN"/release/config.json "$RUN"/release/tokenizer.model "$OUT"/
cp "$RUN"/curve.png "$RUN"/log.jsonl "$DATA"/split.json "$OUT"/
"$PY" -m model.cli evaluate --model "$OUT" --data "$DATA" --split test --beam 1 4 --threads 2 \
    --output "$OUT"/evaluation.json
"$PY" -m export.cli export --model "$OUT" --out "$BUNDLE" --name zh-en --version 1 --variants fp32 int8 fp16 \
    --calibration-data "$DATA"/train.zh --force
"$PY" -m export.cli evaluate --bundle "$BUNDLE" --data "$DATA" --split test --beam 1 4
"$PY" -m export.confidence --bundle "$BUNDLE" --data "$DATA" --fit-split val --test-split test
"$PY" -m export.cli verify --bundle "$BUNDLE" --model "$OUT" --data "$DATA" --split test --beam 1 4 \
    --output docs/parity-zh-en.json
