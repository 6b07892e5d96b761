#!/usr/bin/env bash
# Tagged back-translation of news-en-mono for the multilingual run of issue 60 (docs/models-round3.md):
#   bash scripts/backtranslate_multi.sh
# 1. export the run's best/ as an int8 bundle of the four English directions (tagged as the service tags them, the
#    4-gram block), in $WORK (not in model_repository/: it is a tool, not a release);
# 2. translate the English news into German and Chinese with it (export.cli backtranslate: beam 4, loops and empty
#    outputs dropped; a rerun continues where runs/bt/<corpus>/bt.done says);
# 3. prepare the recipe with both back-translated corpora ($RECIPE, configs/data/multi-bt.json) into $OUT_DATA.
# Then resume the run on it (the next epoch starts on the new pairs):
#   python -m model.cli train --config $RUN.json --data $OUT_DATA --out $RUN --new-data --no-progress
# A fresh back-translation by a better model: remove runs/bt/news-de and runs/bt/news-zh first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
RUN=${RUN:-runs/long/m6-d384}
DATA=${DATA:-runs/data/multi6}           # the run's prepared data: calibration sources and prepare.json
SHARED=${SHARED:-../shared/data}
MONO=${MONO:-$SHARED/news-en-mono/news.en}
BT=${BT:-runs/bt}
RECIPE=${RECIPE:-configs/data/multi-bt.json}
OUT_DATA=${OUT_DATA:-runs/data/multi6bt}
WORK=${WORK:-runs/bt/bundle}
LIMIT=${LIMIT:-0}                        # a smoke run: the first N news sentences
BEAM=${BEAM:-4}
export OMP_NUM_THREADS=1

[ -f "$RUN/best/model.safetensors" ] || { echo "no $RUN/best: the run has not validated yet" >&2; exit 2; }
model=$WORK/model && bundle=$WORK/repository/multi/1
rm -rf "$WORK" && mkdir -p "$model"
cp "$RUN"/best/model.safetensors "$RUN"/best/config.json "$RUN"/tokenizer.model "$model"/
cp "$DATA"/prepare.json "$model"/
step=$("$PY" -c "import json, sys; print(json.load(open(sys.argv[1])).get('step', '?'))" "$RUN"/best/config.json)
echo "back-translating with $RUN/best (step $step)" >&2
shuf -n 256 --random-source=<(yes) "$DATA"/train.src > "$WORK"/calibration.src
"$PY" -m export.cli export --model "$model" --out "$bundle" --name multi --variants int8 \
    --directions de-en,en-de,zh-en,en-zh --calibration-data "$WORK"/calibration.src --force > /dev/null
"$PY" -m export.cli decoding --bundle "$bundle" --no-repeat-ngram-size 4 \
    --why "scripts/backtranslate_multi.sh: no loops in synthetic sources" > /dev/null

for pair in de zh; do
    "$PY" -m export.cli backtranslate --bundle "$bundle" --input "$MONO" --direction "en-$pair" \
        --out "$BT/news-$pair" --beam "$BEAM" --limit "$LIMIT"
    echo "$step" > "$BT/news-$pair/model-step"
done
"$PY" -m model.cli prepare --recipe "$RECIPE" --data "$SHARED" --out "$OUT_DATA" | grep -E "news-bt|mix" >&2
echo "resume: $PY -m model.cli train --config $RUN.json --data $OUT_DATA --out $RUN --new-data --no-progress" >&2
