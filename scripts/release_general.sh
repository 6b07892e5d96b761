#!/usr/bin/env bash
# The general-domain models end to end (docs/general-domain.md): prepare the corpora -> train (or resume) one
# shared de+zh -> en model -> export it twice (de-en version 3, zh-en version 2) -> bundle BLEU on every split ->
# confidence -> parity.
#   bash scripts/release_general.sh ../shared/data
# Steps that are done are cheap to repeat: prepare rewrites the same files, train resumes from
# runs/general/checkpoints/last.pt and, once its 30,100 steps are done, only finalizes (average vs best).
# STAGE=export skips preparation and training (a finished run), STAGE=evaluate also the export.
set -euo pipefail
cd "$(dirname "$0")/.."
SHARED=${1:?usage: scripts/release_general.sh <folder of the corpora: ../shared/data>}
DATA=${DATA:-runs/data/general}
RUN=${RUN:-runs/general}
PY=${PYTHON:-.venv/bin/python}
STAGE=${STAGE:-all}
OUT=${OUT:-checkpoints/general}
REPOSITORY=${REPOSITORY:-model_repository}
DE=$REPOSITORY/de-en/3
ZH=$REPOSITORY/zh-en/2
VARIANTS=${VARIANTS:-fp32 int8 fp16}

if [ "$STAGE" = all ]; then
    "$PY" -m model.cli prepare --recipe configs/data/general.json --data "$SHARED" --out "$DATA"
    "$PY" -m model.cli train --config configs/general_de_zh_en.json --data "$DATA" --out "$RUN"
fi
if [ "$STAGE" = all ] || [ "$STAGE" = export ]; then
    mkdir -p "$OUT"
    cp "$RUN"/release/model.safetensors "$RUN"/release/config.json "$RUN"/release/tokenizer.model \
        "$RUN"/release/prepare.json "$OUT"/
    cp "$RUN"/curve.png "$RUN"/log.jsonl "$OUT"/
    # Both bundles calibrate int8 on the same mixed German+Chinese sources, so their weights files are the same
    # bytes (git stores them once); they differ in the manifest's languages and source normalisation.
    "$PY" -m export.cli export --model "$OUT" --out "$DE" --name de-en --version 3 --variants $VARIANTS \
        --source-language de --calibration-data "$DATA"/train.src --force
    "$PY" -m export.cli export --model "$OUT" --out "$ZH" --name zh-en --version 2 --variants $VARIANTS \
        --source-language zh --calibration-data "$DATA"/train.src --force
    # The vocabulary shortlist of each bundle (issue 33; export/shortlist.py): IBM Model 1 over that direction's
    # training pairs, gathered into one parallel text per direction. It ships only if int8 BLEU with it stays within
    # 0.2 of the whole vocabulary on every split and beam (export.cli compare), measured on a copy of the bundle.
    for pair in "de news-de tatoeba-de multi30k" "zh news-zh tatoeba-zh tico-zh cedict"; do
        set -- $pair
        src=$1 && shift
        folder=$DATA/shortlist-$src && mkdir -p "$folder"
        for c in "$@"; do cat "$DATA/$c.train.$src"; done > "$folder"/train.$src
        for c in "$@"; do cat "$DATA/$c.train.en"; done > "$folder"/train.en
    done
    for pair in "de $DE news-de.val multi30k.test tatoeba-de.test" "zh $ZH news-zh.val tico-zh.test tatoeba-zh.test"; do
        set -- $pair
        src=$1 bundle=$2 && shift 2
        trial=$(mktemp -d)/$(basename "$(dirname "$bundle")")/$(basename "$bundle")
        mkdir -p "$(dirname "$trial")" && cp -r "$bundle" "$trial"
        "$PY" -m export.cli shortlist --bundle "$trial" --data "$DATA"/shortlist-$src
        "$PY" -m export.cli evaluate --bundle "$bundle" --data "$DATA" --split "$@" --beam 1 4 --variants int8 \
            --no-seal --report "$OUT"/shortlist-check.$src.whole.json
        "$PY" -m export.cli evaluate --bundle "$trial" --data "$DATA" --split "$@" --beam 1 4 --variants int8 \
            --no-seal --report "$OUT"/shortlist-check.$src.shortlist.json
        if "$PY" -m export.cli compare --base "$OUT"/shortlist-check.$src.whole.json \
            --candidate "$OUT"/shortlist-check.$src.shortlist.json --max-loss 0.2; then
            rm -rf "$bundle" && cp -r "$trial" "$bundle"
            echo "$bundle: shortlist kept"
        else
            echo "$bundle: shortlist left out (over 0.2 BLEU lost; see $OUT/shortlist-check.$src.*.json)"
        fi
        rm -rf "$(dirname "$(dirname "$trial")")"
    done
fi
# Every split of each direction, greedy and beam 4, every variant through the engine; the first split is the
# bundle's headline BLEU. Reports beside the released weights.
"$PY" -m export.cli evaluate --bundle "$DE" --data "$DATA" \
    --split news-de.val multi30k.test tatoeba-de.test --beam 1 4 --report "$OUT"/evaluation.de-en.json
"$PY" -m export.cli evaluate --bundle "$ZH" --data "$DATA" \
    --split news-zh.val tico-zh.test tatoeba-zh.test --beam 1 4 --report "$OUT"/evaluation.zh-en.json
# Confidence is fitted on the validation splits of every domain and tested on the test splits.
"$PY" -m export.confidence --bundle "$DE" --data "$DATA" --fit-split news-de.val tatoeba-de.val multi30k.val \
    --test-split tatoeba-de.test multi30k.test
"$PY" -m export.confidence --bundle "$ZH" --data "$DATA" --fit-split news-zh.val tatoeba-zh.val tico-zh.val \
    --test-split tatoeba-zh.test tico-zh.test
# Parity PyTorch vs onnxruntime on 1,000 news sentences (the long ones) of each direction.
"$PY" -m export.cli verify --bundle "$DE" --model "$OUT" --data "$DATA" --split news-de.val --limit 1000 \
    --beam 1 4 --output docs/parity-de-en-3.json
"$PY" -m export.cli verify --bundle "$ZH" --model "$OUT" --data "$DATA" --split news-zh.val --limit 1000 \
    --beam 1 4 --output docs/parity-zh-en-2.json
