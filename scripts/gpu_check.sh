#!/usr/bin/env bash
# GPU check (issue 16): onnxruntime-gpu from a carried wheel, then bench/gpu_check.py's providers, BLEU fp16 vs
# fp32 and tokens/s vs PyTorch on CUDA. Runs offline; the whole procedure is in docs/benchmarks.md, "GPU check".
#
#   bash scripts/gpu_check.sh --data path/to/multi30k [--wheels DIR] [--venv DIR] [-- extra args of `run`]
#
# 1. preflight (python3, standard library): no GPU -> one "no GPU" line and exit 0; the carried wheel missing, not
#    the version requirements-gpu.txt pins, or built for another CUDA major than the driver's -> exit 2, naming
#    the wheel to carry and the pip command that downloads it;
# 2. a venv on python3 with --system-site-packages (the machine's torch, numpy, onnx, sacrebleu, sentencepiece,
#    safetensors), onnxruntime-gpu installed into it with pip --no-index --find-links DIR (nothing downloaded);
# 3. python -m bench.gpu_check run in that venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
DATA=""
WHEELS=".whl"
VENV=${GPU_CHECK_VENV:-/tmp/mtserve-gpu-check-venv}
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --data) DATA=$2; shift 2 ;;
    --wheels) WHEELS=$2; shift 2 ;;
    --venv) VENV=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "unknown argument: $1 (see the header of $0)" >&2; exit 64 ;;
  esac
done

wheel_file=$(mktemp)
trap 'rm -f "$wheel_file"' EXIT
status=0
"$PYTHON" -m bench.gpu_check preflight --wheels "$WHEELS" --write-wheel "$wheel_file" || status=$?
if [ "$status" -eq 3 ]; then
  exit 0  # no GPU: preflight said so
elif [ "$status" -ne 0 ]; then
  exit "$status"
fi
if [ -z "$DATA" ]; then
  echo "--data: the folder with test_2016_flickr.de / .en is required" >&2
  exit 64
fi

"$PYTHON" -m venv --system-site-packages "$VENV"
"$VENV/bin/python" -m pip install -q --no-index --find-links "$WHEELS" "$(cat "$wheel_file")"
PYTHONUNBUFFERED=1 "$VENV/bin/python" -m bench.gpu_check run --data "$DATA" "${EXTRA[@]}"
