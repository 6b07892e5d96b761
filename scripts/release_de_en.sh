#!/usr/bin/env bash
# Reproduce the shipped default model end to end: train (or resume) -> evaluate -> export -> bundle BLEU -> parity.
#   bash scripts/release_de_en.sh ../shared/data/multi30k
# Multi30k (task 1, raw files) is public: https://github.com/multi30k/dataset (data/task1/raw).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:?usage: scripts/release_de_en.sh <multi30k folder with train.de, val.de, test_2016_flickr.de ...>}
RUN=${RUN:-runs/de-en}
PY=${PYTHON:-.venv/bin/python}
OUT=checkpoints/de-en
BUNDLE=model_repository/de-en/1

"$PY" -m model.cli train --config configs/multi30k_de_en.json --data "$DATA" --out "$RUN"
mkdir -p "$OUT"
cp "$RUN"/release/model.safetensors "$RUN"/release/config.json "$RUN"/release/tokenizer.model "$OUT"/
cp "$RUN"/curve.png "$RUN"/log.jsonl "$OUT"/
"$PY" -m model.cli evaluate --model "$OUT" --data "$DATA" --beam 1 4 --threads 2 --output "$OUT"/evaluation.json
"$PY" -m export.cli export --model "$OUT" --out "$BUNDLE" --name de-en --version 1 --variants fp32 int8 fp16 \
    --calibration-data "$DATA"/train.de --force
"$PY" -m export.cli evaluate --bundle "$BUNDLE" --data "$DATA" --beam 1 4
"$PY" -m export.cli verify --bundle "$BUNDLE" --model "$OUT" --data "$DATA" --beam 1 4 --output docs/parity-de-en.json
