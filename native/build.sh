#!/usr/bin/env bash
# Build the fused decoder step's onnxruntime operator library (native/fused_step/, engine/fused_step.py).
#   bash native/build.sh [OUTPUT]     default OUTPUT: build/native/libmtserve_fused_step.so
# CFLAGS: -O3 -march=native by default (the machine that builds it runs it: `make native`, the tests); the Docker
# image builds for x86-64-v2 (NATIVE_MARCH=x86-64-v2): its AVX-512 VNNI, AMX, AVX-VNNI and AVX2 kernels are compiled
# for their instruction sets either way and chosen at run time. NATIVE_MARCH=x86-64-v3 on an AVX-512 machine builds
# what an AVX2 CPU's `make native` would (the AVX2 benchmark's build, docs/benchmarks.md). -ffp-contract=off keeps
# a * b + c two roundings, as in onnxruntime's own kernels; no -ffast-math (it would link crtfastmath, which flushes
# subnormals process-wide).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/build/native/libmtserve_fused_step.so}"
cc="${CC:-$(command -v cc || command -v gcc || true)}"
if [ -z "$cc" ]; then
  echo "native/build.sh: no C compiler (cc or gcc) on PATH" >&2
  exit 1
fi
mkdir -p "$(dirname "$out")"
"$cc" -O3 -march="${NATIVE_MARCH:-native}" -ffp-contract=off -fPIC -shared -Wall -Wextra \
  -I"$root/native/third_party/onnxruntime" "$root/native/fused_step/fused_step_op.c" -o "$out.tmp" -lpthread -lm
mv "$out.tmp" "$out"
echo "built $out"
