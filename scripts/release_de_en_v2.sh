#!/usr/bin/env bash
# Reproduce de-en version 2 (Multi30k captions + everyday Tatoeba German) end to end:
# split Tatoeba -> mix with Multi30k -> fine-tune version 1 -> evaluate both test sets -> export -> bundle BLEU
# -> confidence -> parity.
#   bash scripts/release_de_en_v2.sh ../shared/data/multi30k ../shared/data/tatoeba-deu-eng/deu.txt
# Multi30k (task 1, raw): https://github.com/multi30k/dataset. Tatoeba deu-eng (manythings.org/anki):
# Tatoeba (tatoeba.org), CC-BY 2.0 FR.
set -euo pipefail
cd "$(dirname "$0")/.."
MULTI30K=${1:?usage: scripts/release_de_en_v2.sh <multi30k folder> <deu.txt: English TAB German>}
PAIRS=${2:?usage: scripts/release_de_en_v2.sh <multi30k folder> <deu.txt: English TAB German>}
TATOEBA=${TATOEBA:-runs/data/tatoeba-de}
WEIGHT=${WEIGHT:-1}          # how many times Multi30k's training split enters the mix (measured: model card)
DATA=${DATA:-runs/data/de-en-mix$WEIGHT}
RUN=${RUN:-runs/de-en-mix$WEIGHT}
STEPS=${STEPS:-2400}
PY=${PYTHON:-.venv/bin/python}
OUT=checkpoints/de-en-v2
BUNDLE=model_repository/de-en/2

"$PY" -m model.cli split --input "$PAIRS" --lang de --out "$TATOEBA"   # by a hash of the English side
"$PY" -m model.cli mix --out "$DATA" --source de --target en \
    --corpus multi30k="$MULTI30K":"$WEIGHT" --corpus tatoeba="$TATOEBA":1
# Starts from checkpoints/de-en (version 1) and resumes from "$RUN"/checkpoints/last.pt when there.
"$PY" -m model.cli train --config configs/multi30k_tatoeba_de_en.json --data "$DATA" --out "$RUN" \
    --max-steps "$STEPS"
mkdir -p "$OUT"
cp "$RUN"/release/model.safetensors "$RUN"/release/config.json "$RUN"/release/tokenizer.model "$OUT"/
cp "$RUN"/curve.png "$RUN"/log.jsonl "$DATA"/mix.json "$TATOEBA"/split.json "$OUT"/
for split in multi30k.test_2016_flickr tatoeba.test; do
    "$PY" -m model.cli evaluate --model "$OUT" --data "$DATA" --split "$split" --beam 1 4 --threads 2 \
        --output "$OUT/evaluation.$split.json"
done
"$PY" -m export.cli export --model "$OUT" --out "$BUNDLE" --name de-en --version 2 --variants fp32 int8 fp16 \
    --calibration-data "$DATA"/train.de --force
# Bundle BLEU on Tatoeba for both versions, from copies (evaluate records its split in the manifest), then
# Multi30k's into the new bundle.
for version in 1 2; do
    rm -rf runs/bundle-copy && cp -r model_repository/de-en/$version runs/bundle-copy
    "$PY" -m export.cli evaluate --bundle runs/bundle-copy --data "$DATA" --split tatoeba.test --beam 1 4 \
        > "$OUT/evaluation.bundle-v$version.tatoeba.test.json"
done
"$PY" -m export.cli evaluate --bundle "$BUNDLE" --data "$DATA" --split multi30k.test_2016_flickr --beam 1 4
"$PY" -m export.confidence --bundle "$BUNDLE" --data "$DATA" --fit-split val --test-split multi30k.test_2016_flickr
"$PY" -m export.cli verify --bundle "$BUNDLE" --model "$OUT" --data "$DATA" --split multi30k.test_2016_flickr \
    --beam 1 4 --output docs/parity-de-en-2.json
