"""One decoder self-attention call with a key/value cache: the step graph's way against an in-place cache.

    python -m bench.experiments.attention_cache [--rows 1 4 32 128] [--past 10 30] [--calls 2000]

Issue 16's lever "the KV cache written in place". The step graph (export/decoder_step.py) runs
``com.microsoft.MultiHeadAttention`` with ``past_key`` / ``past_value`` inputs: the kernel copies the whole cache
into a new ``present`` tensor of past + 1 columns every step, per layer, keys and values. onnxruntime's
``com.microsoft.GroupQueryAttention`` (kv heads = heads) can instead share one preallocated buffer between past and
present through I/O binding and write only the new column (``seqlens_k`` per row, right padded). This script
times one call of each, one thread, same shapes as the de-en model (4 heads x 64), after warm-up:

- ``mha``: MultiHeadAttention, numpy feeds, present returned (what the engine does now, minus the projections);
- ``gqa-shared``: GroupQueryAttention on OrtValues bound once, past = present = a (rows, heads, max_len, d_head)
  buffer, only ``seqlens_k`` and the query/key/value change between calls;
- ``gqa-plain``: GroupQueryAttention fed like MultiHeadAttention (numpy past, a new present of past + 1 columns
  returned): its kernel without the in-place cache, which the engine could use without I/O binding.

It prints microseconds per call and the ratio; the engine-level effect would be that difference times the
decoder's layers per step (3), against the step times in docs/engine-speed-log.md.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

HEADS, D_HEAD = 4, 64
D = HEADS * D_HEAD
MS = "com.microsoft"


def _model(op: str) -> onnx.ModelProto:
    f32, i32 = TensorProto.FLOAT, TensorProto.INT32
    q = helper.make_tensor_value_info("query", f32, ["rows", 1, D])
    k = helper.make_tensor_value_info("key", f32, ["rows", 1, D])
    v = helper.make_tensor_value_info("value", f32, ["rows", 1, D])
    pk = helper.make_tensor_value_info("past_key", f32, ["rows", HEADS, "past", D_HEAD])
    pv = helper.make_tensor_value_info("past_value", f32, ["rows", HEADS, "past", D_HEAD])
    out = helper.make_tensor_value_info("output", f32, ["rows", 1, D])
    prk = helper.make_tensor_value_info("present_key", f32, ["rows", HEADS, "total", D_HEAD])
    prv = helper.make_tensor_value_info("present_value", f32, ["rows", HEADS, "total", D_HEAD])
    if op == "mha":
        mask = helper.make_tensor_value_info("mask", i32, ["rows", "total"])
        node = helper.make_node(
            "MultiHeadAttention",
            ["query", "key", "value", "", "mask", "", "past_key", "past_value"],
            ["output", "present_key", "present_value"],
            domain=MS,
            num_heads=HEADS,
        )
        inputs = [q, k, v, mask, pk, pv]
    else:
        seqlens = helper.make_tensor_value_info("seqlens_k", i32, ["rows"])
        total = helper.make_tensor_value_info("total_sequence_length", i32, [])
        node = helper.make_node(
            "GroupQueryAttention",
            ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"],
            ["output", "present_key", "present_value"],
            domain=MS,
            num_heads=HEADS,
            kv_num_heads=HEADS,
        )
        inputs = [q, k, v, pk, pv, seqlens, total]
    graph = helper.make_graph([node], op, inputs, [out, prk, prv])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 9
    return model


def _session(op: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    return ort.InferenceSession(_model(op).SerializeToString(), options, providers=["CPUExecutionProvider"])


def _cpu_us_per_call(call, calls: int) -> float:
    """CPU microseconds per call of ``call()``, after 50 warm-up calls."""
    for _ in range(50):
        call()
    started = time.process_time()
    for _ in range(calls):
        call()
    return (time.process_time() - started) / calls * 1e6


def _step_feeds(rows: int, past: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One new token's query/key/value per row and a cache of ``past`` tokens, as numpy feeds."""
    feeds = {n: rng.standard_normal((rows, 1, D), dtype=np.float32) for n in ("query", "key", "value")}
    feeds["past_key"] = rng.standard_normal((rows, HEADS, past, D_HEAD), dtype=np.float32)
    feeds["past_value"] = rng.standard_normal((rows, HEADS, past, D_HEAD), dtype=np.float32)
    return feeds


FETCH = ["output", "present_key", "present_value"]


def time_mha(rows: int, past: int, calls: int, rng: np.random.Generator) -> float:
    session = _session("mha")
    feeds = {**_step_feeds(rows, past, rng), "mask": np.ones((rows, past + 1), np.int32)}
    return _cpu_us_per_call(lambda: session.run(FETCH, feeds), calls)


def time_gqa(rows: int, past: int, calls: int, rng: np.random.Generator, max_len: int = 128) -> float:
    import onnxruntime as ort

    session = _session("gqa")
    cache_k = rng.standard_normal((rows, HEADS, max_len, D_HEAD), dtype=np.float32)
    cache_v = rng.standard_normal((rows, HEADS, max_len, D_HEAD), dtype=np.float32)
    k_value, v_value = ort.OrtValue.ortvalue_from_numpy(cache_k), ort.OrtValue.ortvalue_from_numpy(cache_v)
    seqlens = np.full(rows, past, np.int32)  # seqlens_k = total length - 1: the new token's column
    binding = session.io_binding()
    for name in ("query", "key", "value"):
        binding.bind_cpu_input(name, rng.standard_normal((rows, 1, D), dtype=np.float32))
    binding.bind_ortvalue_input("past_key", k_value)
    binding.bind_ortvalue_input("past_value", v_value)
    binding.bind_cpu_input("seqlens_k", seqlens)
    binding.bind_cpu_input("total_sequence_length", np.array(past + 1, np.int32))
    binding.bind_output("output")
    binding.bind_ortvalue_output("present_key", k_value)
    binding.bind_ortvalue_output("present_value", v_value)
    return _cpu_us_per_call(lambda: session.run_with_iobinding(binding), calls)


def time_gqa_plain(rows: int, past: int, calls: int, rng: np.random.Generator) -> float:
    session = _session("gqa")
    feeds = _step_feeds(rows, past, rng)
    feeds["seqlens_k"] = np.full(rows, past, np.int32)  # total length - 1, every row
    feeds["total_sequence_length"] = np.array(past + 1, np.int32)
    present = session.run(FETCH, feeds)[1]
    if present.shape != (rows, HEADS, past + 1, D_HEAD):
        raise RuntimeError(f"GroupQueryAttention returned a present of {present.shape}, not past + 1 columns")
    return _cpu_us_per_call(lambda: session.run(FETCH, feeds), calls)


def check_same(rows: int, past: int, rng: np.random.Generator) -> float:
    """Max abs difference of the two kernels' outputs on the same cache (GQA right-padded in a wider buffer)."""
    import onnxruntime as ort

    qkv = {n: rng.standard_normal((rows, 1, D), dtype=np.float32) for n in ("query", "key", "value")}
    pk = rng.standard_normal((rows, HEADS, past, D_HEAD), dtype=np.float32)
    pv = rng.standard_normal((rows, HEADS, past, D_HEAD), dtype=np.float32)
    mha = _session("mha").run(
        ["output"], {**qkv, "mask": np.ones((rows, past + 1), np.int32), "past_key": pk, "past_value": pv}
    )[0]
    buffer_k = np.zeros((rows, HEADS, 64, D_HEAD), np.float32)
    buffer_v = np.zeros_like(buffer_k)
    buffer_k[:, :, :past], buffer_v[:, :, :past] = pk, pv
    k_value, v_value = ort.OrtValue.ortvalue_from_numpy(buffer_k), ort.OrtValue.ortvalue_from_numpy(buffer_v)
    session = _session("gqa")
    binding = session.io_binding()
    for name, array in qkv.items():
        binding.bind_cpu_input(name, array)
    binding.bind_ortvalue_input("past_key", k_value)
    binding.bind_ortvalue_input("past_value", v_value)
    binding.bind_cpu_input("seqlens_k", np.full(rows, past, np.int32))
    binding.bind_cpu_input("total_sequence_length", np.array(past + 1, np.int32))
    binding.bind_output("output")
    binding.bind_ortvalue_output("present_key", k_value)
    binding.bind_ortvalue_output("present_value", v_value)
    session.run_with_iobinding(binding)
    gqa = binding.copy_outputs_to_cpu()[0]
    return float(np.abs(gqa - mha).max())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.experiments.attention_cache",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 32, 128])
    parser.add_argument("--past", type=int, nargs="+", default=[10, 30])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    import onnxruntime as ort

    from bench.harness import cpu_model

    rng = np.random.default_rng(0)
    print(f"onnxruntime {ort.__version__}, 1 thread, {cpu_model()}; CPU us per call, median of 3")
    print(f"outputs agree: max abs diff {check_same(4, 10, rng):.2e} (4 rows, 10 cached)")
    print(
        "| rows | cached | MultiHeadAttention (past -> present) | GroupQueryAttention (shared buffer) | gqa / mha "
        "| GroupQueryAttention (past -> present) | plain gqa / mha |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for rows in args.rows:
        for past in args.past:
            mha = sorted(time_mha(rows, past, args.calls, rng) for _ in range(3))[1]
            gqa = sorted(time_gqa(rows, past, args.calls, rng) for _ in range(3))[1]
            plain = sorted(time_gqa_plain(rows, past, args.calls, rng) for _ in range(3))[1]
            print(f"| {rows} | {past} | {mha:.1f} | {gqa:.1f} | {gqa / mha:.2f}x | {plain:.1f} | {plain / mha:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
