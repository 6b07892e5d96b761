"""Checkpoints: training state (torch, loaded with weights_only=True) and released weights (safetensors)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from model.config import ModelConfig
from model.transformer import Transformer

WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.model"


def save_training_state(path: Path, state: dict[str, Any]) -> None:
    """Write a temporary file, flush it to the disk, rename it over ``path``: a process killed at any moment (a
    lost worker of an elastic run, the end of a session) leaves the previous checkpoint or the new one, whole."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)  # rename: atomic on a POSIX file system


def load_training_state(path: Path) -> dict[str, Any]:
    return torch.load(path, map_location="cpu", weights_only=True)


def save_release(directory: Path, model: Transformer, extra: dict[str, Any] | None = None) -> None:
    """A model directory the export step reads: weights, config (+ how it was made), tokenizer beside."""
    directory.mkdir(parents=True, exist_ok=True)
    save_model(model, str(directory / WEIGHTS_FILE))
    meta = {"model": model.cfg.to_dict(), **(extra or {})}
    (directory / CONFIG_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")


def load_release(directory: str | Path) -> tuple[Transformer, dict[str, Any]]:
    directory = Path(directory)
    meta = json.loads((directory / CONFIG_FILE).read_text())
    model = Transformer(ModelConfig.from_dict(meta["model"]))
    load_model(model, str(directory / WEIGHTS_FILE))
    model.eval()
    return model, meta


def tokenizer_path(directory: str | Path) -> Path:
    """A release's tokenizer, or its run's (a run's ``best/`` and ``averaged/`` folders hold only the weights)."""
    path = Path(directory) / TOKENIZER_FILE
    return path if path.exists() else Path(directory).parent / TOKENIZER_FILE


def round_to_float16(model: torch.nn.Module) -> None:
    """Round every parameter to the nearest float16 value, kept in its own dtype (a release stored as float16)."""
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(parameter.to(torch.float16).to(parameter.dtype))


def average_state_dicts(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the model weights in several training checkpoints."""
    total: dict[str, torch.Tensor] = {}
    for path in paths:
        weights = load_training_state(path)["model"]
        for name, value in weights.items():
            total[name] = total.get(name, 0) + value.double()
    return {name: (value / len(paths)).float() for name, value in total.items()}
