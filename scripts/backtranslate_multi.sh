#!/usr/bin/env bash
# Tagged back-translation of news-en-mono for the multilingual run of issue 60 (docs/models-round3.md):
#   bash scripts/backtranslate_multi.sh
# 1. export the run's best/ as an int8 bundle of the four English directions (tagged as the service tags them, the
#    4-gram block; scripts/run_bundle.sh), in $WORK (not in model_repository/: it is a tool, not a release);
# 2. translate the English news into German and Chinese with it (export.cli backtranslate: beam 4, loops and empty
#    outputs dropped; a rerun continues where runs/bt/<corpus>/bt.done says);
#    and Multi30k's English captions forward into Chinese ($FT_INPUT -> $BT/m30k-zh: en-zh pairs with a synthetic
#    Chinese target, which the recipe keeps only where the Chinese has no Latin-script word: `chinese_latin: none`;
#    English captions had German targets alone, and `<2zh>` on them wrote German, or left English, words); the
#    three translations run side by side, one thread each (stop the training run first: they want the cores);
# 3. prepare the recipe with the three synthetic corpora ($RECIPE, configs/data/multi-bt.json) into $OUT_DATA.
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
FT_INPUT=${FT_INPUT-$SHARED/multi30k/train.en}  # empty: no forward translation
BT=${BT:-runs/bt}
RECIPE=${RECIPE:-configs/data/multi-bt.json}
OUT_DATA=${OUT_DATA:-runs/data/multi6bt}
WORK=${WORK:-runs/bt/bundle}
LIMIT=${LIMIT:-0}                        # a smoke run: the first N news sentences
BEAM=${BEAM:-4}
export OMP_NUM_THREADS=1

bundle=$WORK/repository/multi/1
step=$(RUN=$RUN WORK=$WORK DATA=$DATA STEP="" PYTHON=$PY bash scripts/run_bundle.sh)  # best/ as an int8 bundle
echo "back-translating with $RUN/best (step $step)" >&2

translate() {  # input direction out
    "$PY" -m export.cli backtranslate --bundle "$bundle" --input "$1" --direction "$2" --out "$3" \
        --beam "$BEAM" --limit "$LIMIT" --no-progress > "$3.json"
    echo "$step" > "$3/model-step"
}
mkdir -p "$BT"
jobs=()
translate "$MONO" en-de "$BT/news-de" & jobs+=($!)
translate "$MONO" en-zh "$BT/news-zh" & jobs+=($!)
if [ -n "$FT_INPUT" ]; then translate "$FT_INPUT" en-zh "$BT/m30k-zh" & jobs+=($!); fi
for job in "${jobs[@]}"; do wait "$job"; done  # set -e: a failed translation stops the script here
for f in "$BT"/*.json; do echo "$(basename "$f" .json): $(cat "$f")" >&2; done
"$PY" -m model.cli prepare --recipe "$RECIPE" --data "$SHARED" --out "$OUT_DATA" | grep -E "news-bt|m30k-ft|mix" >&2
echo "resume: $PY -m model.cli train --config $RUN.json --data $OUT_DATA --out $RUN --new-data --no-progress" >&2
