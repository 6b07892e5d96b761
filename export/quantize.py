"""Derived variants of the fp32 graphs: int8 dynamic quantization (CPU) and fp16 (GPU)."""

from __future__ import annotations

import logging
from pathlib import Path

import onnx


def quantize_int8(src: Path, dst: Path, per_channel: bool = False) -> Path:
    """Dynamic quantization: int8 weights of MatMul/Gemm, activations quantized at run time."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    dst.parent.mkdir(parents=True, exist_ok=True)
    quantize_dynamic(
        str(src),
        str(dst),
        weight_type=QuantType.QInt8,
        per_channel=per_channel,
        op_types_to_quantize=["MatMul", "Gemm"],
    )
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
