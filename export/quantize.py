"""Derived variants of the fp32 graphs: int8 (CPU; static, calibrated, or dynamic for comparisons) and fp16 (GPU)."""

from __future__ import annotations

import heapq
import logging
from pathlib import Path

import onnx


def weight_matmuls(model: onnx.ModelProto) -> list[str]:
    """Names of the MatMul/Gemm nodes whose second input is a constant (projections, not attention products)."""
    constants = {i.name for i in model.graph.initializer}
    constants |= {out for node in model.graph.node if node.op_type == "Constant" for out in node.output}
    return [n.name for n in model.graph.node if n.op_type in ("MatMul", "Gemm") and n.input[1] in constants]


def quantize_int8_static(src: Path, dst: Path, calibration: Path | list[dict]) -> Path:
    """Static int8: per-channel int8 weights in 7 bits ([-64, 63], onnxruntime's ``reduce_range``), uint8 activations
    with scales calibrated (min/max). Without VNNI, onnxruntime multiplies u8 x s8 with ``vpmaddubsw``, which adds each
    pair of products into a saturating int16: 255 x 127 x 2 overflows it, 255 x 63 x 2 does not, so 7-bit weights give
    the same exact products on AVX2-only CPUs as on VNNI ones (a random Marian model's int8 scores: 0.61 nats a token
    off fp32 on an AVX2 EPYC with 8-bit weights, 0.13 with 7-bit; docs/engine-speed-log.md item 52). ``calibration`` is
    either the ranges, an onnxruntime calibration cache (export/calibration.py ``calibrate``, which reduces the feeds
    as they arrive), or a list of feeds (all held at once: small graphs).

    Only projections with constant weights are quantized; their outputs stay float (no requantization): each
    is QuantizeLinear + MatMulIntegerToFloat with its bias, and only the projection reads the rounded input
    (export/qdq_fusion.py). Every scale is a constant of the graph, so a row's result does not depend on the
    other rows of the batch (see export/calibration.py).
    """
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    from export.calibration import QUANTIZED_OPS, FeedReader
    from export.qdq_fusion import fuse_quantized_matmuls

    if isinstance(calibration, list) and not calibration:
        raise ValueError(f"no calibration feeds for {src.name}")
    cached = not isinstance(calibration, list)
    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    dst.parent.mkdir(parents=True, exist_ok=True)
    quantize_static(
        str(src),
        str(dst),
        None if cached else FeedReader(calibration),
        quant_format=QuantFormat.QDQ,
        op_types_to_quantize=QUANTIZED_OPS,
        nodes_to_quantize=weight_matmuls(onnx.load(str(src), load_external_data=False)),
        activation_type=QuantType.QUInt8,
        weight_type=QuantType.QInt8,
        per_channel=True,
        reduce_range=True,
        calibrate_method=CalibrationMethod.MinMax,
        extra_options={"OpTypesToExcludeOutputQuantization": QUANTIZED_OPS, "CalibMovingAverage": False},
        calibration_cache_path=calibration if cached else None,
    )
    model = onnx.load(str(dst))
    fuse_quantized_matmuls(model)  # bias in the integer GEMM, float residuals (export/qdq_fusion.py)
    onnx.save(model, str(dst))
    onnx.checker.check_model(str(dst))
    return dst


FP16_BLOCKED_OPS = ["Softmax", "LayerNormalization", "Range", "Where", "Expand", "ConstantOfShape"]


def convert_fp16(src: Path, dst: Path) -> Path:
    """fp16 weights and compute, fp32 graph inputs/outputs (the engine feeds and reads fp32)."""
    from onnxconverter_common import float16

    model = onnx.load(str(src))
    # Softmax / LayerNormalization stay fp32 (range and accuracy); shape-building ops stay as they are.
    converted = float16.convert_float_to_float16(model, keep_io_types=True, op_block_list=FP16_BLOCKED_OPS)
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(converted, str(dst))
    onnx.checker.check_model(str(dst))
    return dst


def convert_fp16_step(src: Path, dst: Path) -> Path:
    """The fp16 twin of a decoder_step graph (fp16 weights and fused attention, fp32 inputs and outputs), one file.

    onnxruntime's own converter (onnxruntime.transformers.float16): onnxconverter-common's leaves the contrib
    MultiHeadAttention outputs typed float and the graph does not load. The fused attention has fp16 kernels on
    CUDA and, since onnxruntime 1.2x, on the CPU, where tests/export/test_fp16_step.py checks its translations.
    External weights (bundle format 2) are read in and stored inside ``dst``.
    """
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(src))
    del model.graph.value_info[:]  # float types of intermediate tensors; the converter writes its own
    converted = convert_float_to_float16(model, keep_io_types=True, op_block_list=FP16_BLOCKED_OPS)
    sort_nodes(converted.graph)  # the converter appends the input casts after the nodes that read them
    dst.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(converted, str(dst))
    onnx.checker.check_model(str(dst))
    return dst


def sort_nodes(graph: onnx.GraphProto) -> None:
    """Reorder ``graph``'s nodes so each comes after the nodes whose outputs it reads (ONNX requires it;
    onnxruntime sorts on load, onnx.checker does not). Among nodes that are ready, the earliest in the old order
    goes first, so a graph already in order is left as it is."""
    nodes = list(graph.node)
    producer = {name: i for i, node in enumerate(nodes) for name in node.output}
    waiting_on = [{producer[n] for n in node.input if n in producer} for node in nodes]
    readers: dict[int, list[int]] = {i: [] for i in range(len(nodes))}
    for i, deps in enumerate(waiting_on):
        for d in deps:
            readers[d].append(i)
    ready = [i for i, deps in enumerate(waiting_on) if not deps]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for r in readers[i]:
            waiting_on[r].discard(i)
            if not waiting_on[r]:
                heapq.heappush(ready, r)
    if len(order) != len(nodes):
        raise ValueError("the graph has a cycle")
    del graph.node[:]
    graph.node.extend(nodes[i] for i in order)
