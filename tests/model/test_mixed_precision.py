"""Mixed precision: a few steps in each mode stay within a documented tolerance of float32 (docs/training.md).

Tolerance, for 8 steps of the tiny model on the same batches from the same weights (dropout off): every
step's loss within 1% of float32's, and the weights' change over the 8 steps within 15% of float32's change
(measured on this CPU: bf16 0.23% and 6.4%, fp16 with loss scaling 0.10% and 4.5%). CUDA cases are skipped
without a GPU; CPU bf16 runs everywhere (emulated where the CPU lacks bfloat16 instructions: slower, not wrong).
"""

from __future__ import annotations

import pytest
import torch
from model_toys import tiny_run

from model.checkpoint import load_training_state
from model.precision import autocast_dtype
from model.train import Trainer

STEPS = 8
LOSS_TOLERANCE = 0.01
UPDATE_TOLERANCE = 0.15

CUDA = torch.cuda.is_available()
CUDA_BF16 = CUDA and torch.cuda.is_bf16_supported()


def _flat(trainer: Trainer) -> torch.Tensor:
    return torch.cat([p.detach().float().cpu().flatten() for p in trainer.model.parameters()])


def _run(corpus_dir, out, device: str, autocast: str, force_dtype: torch.dtype | None = None):
    run = tiny_run(autocast=autocast, device=device)
    run.model.dropout = 0.0
    trainer = Trainer.from_run(run, corpus_dir, out, progress=False)
    if force_dtype is not None:  # a mode the run config refuses on this device (fp16 on a CPU): set directly
        trainer.autocast_dtype = force_dtype
        trainer.scaler = torch.amp.GradScaler(trainer.device.type)
    start = _flat(trainer)
    keys = trainer.epoch_batches(0)[:STEPS]
    losses = [trainer.train_step(trainer.source.batch(key)) for key in keys]
    return trainer, losses, start, _flat(trainer)


def _assert_parity(reference, candidate) -> None:
    _, ref_losses, ref_start, ref_end = reference
    _, losses, start, end = candidate
    assert torch.equal(start, ref_start)  # the same initial weights
    for step, (loss, ref) in enumerate(zip(losses, ref_losses, strict=True)):
        assert abs(loss - ref) <= LOSS_TOLERANCE * ref, f"step {step + 1}: loss {loss} vs float32 {ref}"
    change = float((end - ref_end).norm() / (ref_end - ref_start).norm())
    assert change <= UPDATE_TOLERANCE, f"weights moved {change:.1%} of float32's update away from it"


@pytest.mark.parametrize(
    "device, autocast",
    [
        ("cpu", "bf16"),
        pytest.param("cuda", "bf16", marks=pytest.mark.skipif(not CUDA_BF16, reason="needs a GPU with bf16")),
        pytest.param("cuda", "fp16", marks=pytest.mark.skipif(not CUDA, reason="needs a GPU")),
    ],
)
def test_mixed_precision_parity_with_float32(corpus_dir, tmp_path, device, autocast):
    reference = _run(corpus_dir, tmp_path / "fp32", device, "")
    candidate = _run(corpus_dir, tmp_path / autocast, device, autocast)
    expected = {"bf16": torch.bfloat16, "fp16": torch.float16}[autocast]
    assert candidate[0].autocast_dtype is expected and reference[0].autocast_dtype is None
    assert candidate[0].scaler.is_enabled() is (autocast == "fp16")
    assert all(p.dtype == torch.float32 for p in candidate[0].model.parameters())  # master weights stay float32
    _assert_parity(reference, candidate)


def test_mixed_precision_fp16_loss_scaling_path_on_the_cpu(corpus_dir, tmp_path):
    """The GradScaler path (scale, unscale before clipping, step, update, saved and resumed) without a GPU."""
    reference = _run(corpus_dir, tmp_path / "fp32", "cpu", "")
    candidate = _run(corpus_dir, tmp_path / "fp16", "cpu", "", force_dtype=torch.float16)
    _assert_parity(reference, candidate)
    trainer = candidate[0]
    scale = trainer.scaler.get_scale()
    assert 0 < scale < float("inf")

    trainer.save()
    last = tmp_path / "fp16" / "checkpoints" / "last.pt"
    assert load_training_state(last)["grad_scaler"]["scale"] == scale
    again = Trainer.from_run(tiny_run(), corpus_dir, tmp_path / "fp16", progress=False)
    again.scaler = torch.amp.GradScaler("cpu", init_scale=1.0)
    again.load(last)
    assert again.scaler.get_scale() == scale
    reference[0].save()
    assert "grad_scaler" not in load_training_state(tmp_path / "fp32" / "checkpoints" / "last.pt")


def test_mixed_precision_modes_by_device():
    assert autocast_dtype("", "cpu") is None and autocast_dtype("", "cuda", cuda_bf16=True) is None
    assert autocast_dtype("bf16", "cpu") is torch.bfloat16
    with pytest.raises(ValueError, match="fp16 is for CUDA"):
        autocast_dtype("fp16", "cpu")
    assert autocast_dtype("fp16", "cuda", cuda_bf16=True) is torch.float16
    assert autocast_dtype("bf16", "cuda", cuda_bf16=True) is torch.bfloat16
    with pytest.raises(ValueError, match="no bfloat16"):
        autocast_dtype("bf16", "cuda", cuda_bf16=False)
    assert autocast_dtype("auto", "cuda", cuda_bf16=True) is torch.bfloat16
    assert autocast_dtype("auto", "cuda", cuda_bf16=False) is torch.float16


def test_a_device_the_machine_lacks_is_refused(corpus_dir, tmp_path):
    if CUDA:
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="no GPU"):
        Trainer.from_run(tiny_run(device="cuda"), corpus_dir, tmp_path / "run", progress=False)
