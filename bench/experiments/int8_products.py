"""One product's cost per onnxruntime node, by operator choice and row count: speed-log item 44.

    python -m bench.experiments.int8_products [--rows 1 4 32] [--width 256] [--chain 20] [--repeats 5]

A decoder step at one row is ~150 onnxruntime nodes, 19 of them int8 products (engine-speed-log item 34), so what one
node costs decides a lone sentence's speed. Each candidate here is a graph of --chain products of --width x --width
(random weights, each product's output the next one's input), run in one session (one thread, the engine's
sequential mode); the table gives CPU microseconds per product, median of --repeats interleaved timings:

- ``add``: an Add of a bias row (what any trivial node costs);
- ``fp32``: MatMul over float32 weights;
- ``static int8``: QuantizeLinear (a fixed scale of 0.02 around 128, u8) + MatMulIntegerToFloat (s8 weights, a
  scale per column, bias): the exporter's int8 step graphs;
- ``dynamic int8``: DynamicQuantizeMatMul (the activations' scale computed per call);
- ``nbits8 bB``: MatMulNBits, 8-bit weights in blocks of B along the input, accuracy level 4 (int8 arithmetic):
  onnxruntime's weight-only kernels, made for a language model's one-row decoding.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from bench.harness import machine, now

KINDS = ("add", "fp32", "static int8", "dynamic int8", "nbits8 b32", "nbits8 b128")


def _weights(rng, width: int) -> np.ndarray:
    return (rng.standard_normal((width, width)) * 0.05).astype(np.float32)


def chain_model(kind: str, width: int, chain: int, seed: int = 0):
    """A ModelProto of ``chain`` products (or Adds) of ``kind`` from input ``x`` (rows, width) to output ``y``."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "x"
    for i in range(chain):
        w, y = _weights(rng, width), ("y" if i == chain - 1 else f"h{i}")
        if kind == "add":
            inits.append(numpy_helper.from_array(w[0], f"b{i}"))
            nodes.append(helper.make_node("Add", [x, f"b{i}"], [y]))
        elif kind == "fp32":
            inits.append(numpy_helper.from_array(w, f"w{i}"))
            nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [y]))
        elif kind in ("static int8", "dynamic int8"):
            scale = np.abs(w).max(axis=0) / 127
            inits += [
                numpy_helper.from_array(np.round(w / scale).astype(np.int8), f"wq{i}"),
                numpy_helper.from_array(scale.astype(np.float32), f"ws{i}"),
                numpy_helper.from_array(np.zeros(width, np.float32), f"b{i}"),
            ]
            if kind == "dynamic int8":
                nodes.append(
                    helper.make_node(
                        "DynamicQuantizeMatMul", [x, f"wq{i}", f"ws{i}", "", f"b{i}"], [y], domain="com.microsoft"
                    )
                )
            else:
                inits += [
                    numpy_helper.from_array(np.float32(0.02), f"xs{i}"),
                    numpy_helper.from_array(np.uint8(128), f"xz{i}"),
                ]
                nodes += [
                    helper.make_node("QuantizeLinear", [x, f"xs{i}", f"xz{i}"], [f"q{i}"]),
                    helper.make_node(
                        "MatMulIntegerToFloat",
                        [f"q{i}", f"wq{i}", f"xs{i}", f"ws{i}", f"xz{i}", "", f"b{i}"],
                        [y],
                        domain="com.microsoft",
                    ),
                ]
        elif kind.startswith("nbits8 b"):
            block = int(kind.removeprefix("nbits8 b"))
            blocks = w.T.reshape(width, width // block, block)  # (N, K / block, block)
            scale = np.abs(blocks).max(axis=2) / 127 + 1e-12
            quantized = (np.round(blocks / scale[..., None]) + 128).astype(np.uint8)
            inits += [
                numpy_helper.from_array(quantized, f"wq{i}"),
                numpy_helper.from_array(scale.astype(np.float32).reshape(-1), f"ws{i}"),
            ]
            nodes.append(
                helper.make_node(
                    "MatMulNBits",
                    [x, f"wq{i}", f"ws{i}"],
                    [y],
                    domain="com.microsoft",
                    K=width,
                    N=width,
                    bits=8,
                    block_size=block,
                    accuracy_level=4,
                )
            )
        else:
            raise ValueError(f"unknown kind {kind!r}; choose from {KINDS}")
        x = y
    graph = helper.make_graph(
        nodes,
        kind,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["rows", width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["rows", width])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 9
    return model


def session(model):
    """An onnxruntime CPU session of ``model`` with the engine's settings (service/engine/runtime.py), one thread."""
    from service.engine.runtime import create_session

    with tempfile.TemporaryDirectory() as tmp:  # create_session takes a path; the session reads the file at once
        path = Path(tmp) / "chain.onnx"
        onnx.save(model, str(path))
        return create_session(path, "cpu", intra_op_threads=1, inter_op_threads=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 32])
    parser.add_argument("--width", type=int, default=256, help="a multiple of 128")
    parser.add_argument("--chain", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=0, help="runs per timing (0: 2,000 / rows, at least 100)")
    args = parser.parse_args(argv)

    sessions = {kind: session(chain_model(kind, args.width, args.chain)) for kind in KINDS}
    rng = np.random.default_rng(1)
    print(f"# One product per onnxruntime node ({now()})\n")
    print(f"- machine: {machine()}")
    print(
        f"- {args.chain} products of {args.width} x {args.width} a run, one thread, CPU us per product (per Add for "
        f"``add``), median of {args.repeats} interleaved timings\n"
    )
    print("| rows | " + " | ".join(KINDS) + " | best int8 / static int8 |")
    print("|---:|" + "---:|" * (len(KINDS) + 1))
    for rows in args.rows:
        x = {"x": rng.standard_normal((rows, args.width)).astype(np.float32)}
        calls = args.calls or max(100, 2000 // rows)
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for _ in range(args.repeats):
            for kind, s in sessions.items():
                s.run(None, x)
                started = time.process_time()
                for _ in range(calls):
                    s.run(None, x)
                times[kind].append((time.process_time() - started) / calls / args.chain * 1e6)
        med = {kind: statistics.median(v) for kind, v in times.items()}
        best = min(med[k] for k in KINDS if "int8" in k or "nbits" in k)
        cells = " | ".join(f"{med[k]:.2f}" for k in KINDS)
        print(f"| {rows} | {cells} | {best / med['static int8']:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
