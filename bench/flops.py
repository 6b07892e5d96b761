"""Multiply-adds of the Transformer's inference work, and this machine's measured single-thread matmul rate.

    python -m bench.flops --model checkpoints/de-en   # prints the counts at source 15 / position 10 and GFLOP/s

Counts are multiply-adds (MACs; 1 MAC = 2 FLOPs) of the matrix products only (projections, attention
scores and weighted sums, feed-forward, output projection); softmax, LayerNorm, embedding lookups and
residual adds are O(d) per token and left out. They follow the engine's schedule: cross-attention keys /
values are computed once per source token by the encoder, and a decoder step (one new token per row,
key/value cache of the earlier ones) projects only the new token.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path


def _cfg(config: dict) -> tuple[int, int, int, int, int, int]:
    gated = config.get("activation") in ("swiglu", "geglu")
    d_ff = config["d_ff"] * (3 if gated else 2) // 2  # gated FFNs have a third (d, d_ff) matrix
    return (
        config["d_model"],
        d_ff,
        config["vocab_size"],
        config["n_encoder_layers"],
        config["n_decoder_layers"],
        config["n_heads"],
    )


def encoder_macs_per_token(config: dict, src_len: int) -> int:
    """Encoder work per source token, including the decoder's cross-attention keys/values of that token."""
    d, d_ff, _, n_enc, n_dec, _ = _cfg(config)
    per_layer = 4 * d * d + 2 * d * d_ff + 2 * src_len * d  # Q,K,V,O projections; FFN; scores + weighted sum
    return n_enc * per_layer + n_dec * 2 * d * d  # + cross K and V projections of every decoder layer


def decoder_step_macs(config: dict, src_len: int, position: int) -> int:
    """One decoder step for one row: the token at ``position`` (0-based) attends to position + 1 cached keys."""
    d, d_ff, vocab, _, n_dec, _ = _cfg(config)
    self_attn = 4 * d * d + 2 * (position + 1) * d  # Q,K,V,O projections of the new token; scores + sum
    cross_attn = 2 * d * d + 2 * src_len * d  # Q, O projections; scores + sum over the source
    return n_dec * (self_attn + cross_attn + 2 * d * d_ff) + d * vocab  # + output projection


def translation_macs(config: dict, src_len: int, out_len: int, beam: int = 1) -> int:
    """Encoder + ``out_len + 1`` decoder steps (EOS included) on ``beam`` rows for one sentence."""
    steps = sum(decoder_step_macs(config, src_len, t) for t in range(out_len + 1))
    return src_len * encoder_macs_per_token(config, src_len) + beam * steps


def sgemm_rate(threads: int = 1, repeats: int = 7) -> dict[str, float]:
    """Median GFLOP/s of float32 matmuls on ``threads`` threads: numpy (its BLAS) and torch when importable.

    Shapes: a large square product (the machine's practical peak) and the decoder's largest per-step
    product at batch 32 (32 x d_model) @ (d_model x vocab) for the default model.
    """
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    import numpy as np

    shapes = {"1024x1024x1024": (1024, 1024, 1024), "32x256x8000": (32, 256, 8000)}
    result: dict[str, float] = {}
    libs = [("numpy", np.matmul, lambda a: a)]
    try:
        import torch

        torch.set_num_threads(threads)
        libs.append(("torch", torch.matmul, torch.from_numpy))
    except ImportError:
        pass
    rng = np.random.default_rng(0)
    for lib, matmul, wrap in libs:
        for name, (m, k, n) in shapes.items():
            a = wrap(rng.standard_normal((m, k), dtype=np.float32))
            b = wrap(rng.standard_normal((k, n), dtype=np.float32))
            inner = max(1, int(2e9 / (2 * m * k * n)))  # about 2 GFLOP per timing
            matmul(a, b)
            times = []
            for _ in range(repeats):
                started = time.process_time()  # CPU time: the run is on one thread, other load does not count
                for _ in range(inner):
                    matmul(a, b)
                times.append((time.process_time() - started) / inner)
            result[f"{lib} {name}"] = round(2 * m * k * n / sorted(times)[len(times) // 2] / 1e9, 1)
    return result


def int8_gemm_rate(threads: int = 1, repeats: int = 7) -> dict[str, float]:
    """Median GOP/s (2 ops per multiply-add) of onnxruntime's int8 dynamic-quantized MatMul on ``threads`` threads,
    the kernel the int8 bundles run: a large square product and the batch-32 output projection."""
    import logging
    import tempfile

    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger().setLevel(logging.ERROR)
    result = {}
    rng = np.random.default_rng(0)
    for name, (m, k, n) in {"1024x1024x1024": (1024, 1024, 1024), "32x256x8000": (32, 256, 8000)}.items():
        w = numpy_helper.from_array(rng.standard_normal((k, n), dtype=np.float32) / 32, "w")
        x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, k])
        y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
        graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm", [x_info], [y_info], [w])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        model.ir_version = 9
        with tempfile.TemporaryDirectory() as tmp:
            onnx.save(model, f"{tmp}/f.onnx")
            quantize_dynamic(f"{tmp}/f.onnx", f"{tmp}/q.onnx", weight_type=QuantType.QInt8)
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            session = ort.InferenceSession(f"{tmp}/q.onnx", options, providers=["CPUExecutionProvider"])
        feeds = {"x": rng.standard_normal((m, k), dtype=np.float32)}
        inner = max(1, int(4e9 / (2 * m * k * n)))
        session.run(None, feeds)
        times = []
        for _ in range(repeats):
            started = time.process_time()
            for _ in range(inner):
                session.run(None, feeds)
            times.append((time.process_time() - started) / inner)
        result[f"onnxruntime int8 {name}"] = round(2 * m * k * n / sorted(times)[len(times) // 2] / 1e9, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.flops", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="checkpoints/de-en", help="released model folder (its config.json)")
    parser.add_argument("--src-len", type=int, default=15)
    parser.add_argument("--position", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    config = json.loads((Path(args.model) / "config.json").read_text())["model"]
    dec = decoder_step_macs(config, args.src_len, args.position)
    enc = encoder_macs_per_token(config, args.src_len)
    report = {
        "decoder_step_macs": dec,
        "decoder_step_gflop": round(2 * dec / 1e9, 5),
        "output_projection_share": round(config["d_model"] * config["vocab_size"] / dec, 3),
        "encoder_macs_per_source_token": enc,
        "sgemm_gflops": sgemm_rate(args.threads),
        "int8_gemm_gops": int8_gemm_rate(args.threads),
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
