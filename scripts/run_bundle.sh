#!/usr/bin/env bash
# An int8 bundle of a multilingual run's model between releases, for the tools that translate through the engine
# (scripts/backtranslate_multi.sh, export.foreign_words, export.cli evaluate --direction):
#   RUN=runs/long/warm-d256 WORK=/tmp/step12000 STEP=12000 bash scripts/run_bundle.sh
# writes $WORK/repository/multi/1: $RUN/best (STEP empty) or the checkpoint $RUN/checkpoints/step<STEP>.pt as a
# release folder ($WORK/model), exported with the four English directions (int8 calibrated on 256 of $DATA's
# training sources) and the 4-gram block. Prints the model's step.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
RUN=${RUN:?RUN: the run folder}
WORK=${WORK:?WORK: the folder to write (replaced)}
DATA=${DATA:-runs/data/multi6}  # the run's prepared data: calibration sources and prepare.json
STEP=${STEP:-}
model=$WORK/model && bundle=$WORK/repository/multi/1
rm -rf "$WORK" && mkdir -p "$model"
if [ -z "$STEP" ]; then
    [ -f "$RUN/best/model.safetensors" ] || { echo "no $RUN/best: the run has not validated yet" >&2; exit 2; }
    cp "$RUN"/best/model.safetensors "$RUN"/best/config.json "$model"/
else
    checkpoint=$(printf "%s/checkpoints/step%07d.pt" "$RUN" "$STEP")
    [ -f "$checkpoint" ] || { echo "no $checkpoint" >&2; exit 2; }
    "$PY" - "$RUN" "$checkpoint" "$model" <<'PYEOF'
import json, sys
from pathlib import Path

from model.checkpoint import CONFIG_FILE, load_training_state, save_release
from model.config import ModelConfig
from model.transformer import Transformer

run, checkpoint, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
state = load_training_state(checkpoint)
model = Transformer(ModelConfig.from_dict(json.loads((run / "best" / CONFIG_FILE).read_text())["model"]))
model.load_state_dict(state["model"])
save_release(out, model, {"step": state["step"]})
PYEOF
fi
cp "$RUN"/tokenizer.model "$DATA"/prepare.json "$model"/
shuf -n 256 --random-source=<(yes) "$DATA"/train.src > "$WORK"/calibration.src
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} "$PY" -m export.cli export --model "$model" --out "$bundle" --name multi \
    --variants int8 --directions de-en,en-de,zh-en,en-zh --calibration-data "$WORK"/calibration.src --force > /dev/null
"$PY" -m export.cli decoding --bundle "$bundle" --no-repeat-ngram-size 4 \
    --why "scripts/run_bundle.sh: a run's model between releases" > /dev/null
"$PY" -c "import json, sys; print(json.load(open(sys.argv[1])).get('step', '?'))" "$model"/config.json
