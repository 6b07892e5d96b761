"""Mixed precision: which autocast dtype a run gets on its device, and whether its loss needs scaling.

The weights, the optimizer and the loss stay float32 in every mode; autocast runs the matrix products of the
forward pass (and so their gradients) in a 16-bit type. bfloat16 keeps float32's exponent range, so its
gradients need no scaling; float16 does not (small gradients underflow to zero), so an fp16 run multiplies
the loss by torch.amp.GradScaler's factor and skips the updates whose gradients overflowed. On a CPU bf16
pays only with bfloat16 instructions (AVX512_BF16, AMX): bench/train_speed.py measures it, docs/training.md
has the figures; fp16 autocast is for CUDA only.
"""

from __future__ import annotations

import torch

from core.cpu import cpu_flags


def cpu_has_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU has bfloat16 arithmetic (AVX512_BF16 or AMX-BF16 among /proc/cpuinfo's flags)."""
    flags = cpu_flags(cpuinfo)
    return "avx512_bf16" in flags or "amx_bf16" in flags


def autocast_dtype(setting: str, device_type: str, cuda_bf16: bool | None = None) -> torch.dtype | None:
    """The dtype TrainConfig.autocast asks for on ``device_type`` ("cpu" or "cuda"); None: float32 throughout.

    "": float32. "bf16": bfloat16 (on CUDA only where the GPU has it, Ampere on). "fp16": float16, CUDA only.
    "auto": on a CPU bf16 where it has bfloat16 instructions, else float32; on CUDA bf16 where the GPU has
    it, else fp16. ``cuda_bf16`` overrides torch's answer to "does this GPU have bf16" (tests).
    """
    if not setting:
        return None
    if device_type == "cpu":
        if setting == "fp16":
            raise ValueError("autocast fp16 is for CUDA; on a CPU use bf16 (or auto: bf16 where the CPU has it)")
        if setting == "bf16":
            return torch.bfloat16
        return torch.bfloat16 if cpu_has_bf16() else None
    if cuda_bf16 is None:
        cuda_bf16 = torch.cuda.is_bf16_supported()
    if setting == "fp16":
        return torch.float16
    if setting == "bf16":
        if not cuda_bf16:
            raise ValueError("autocast bf16: this GPU has no bfloat16 (before Ampere); use fp16 or auto")
        return torch.bfloat16
    return torch.bfloat16 if cuda_bf16 else torch.float16


def needs_grad_scaler(dtype: torch.dtype | None) -> bool:
    """float16 gradients underflow without loss scaling; bfloat16 and float32 ones do not."""
    return dtype is torch.float16
