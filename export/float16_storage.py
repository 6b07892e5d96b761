"""Float16 storage (``python -m export.cli export --float16-storage``): a bundle's float weights once, as float16.

The export rounds the model's weights to float16 (model/checkpoint.py ``round_to_float16``), and export/pack.py stores
every float32 tensor of the graphs that float16 holds exactly in ``graphs/float16.weights``, read as a Cast that
onnxruntime folds at session start. That file is a safetensors file: the model's parameters come first, under their
PyTorch names and shapes (a graph's transposed matrix is a folded Transpose of one), then whatever else the graphs
hold (``onnx.<initializer>``). So the bundle is also the PyTorch release: ``release_from_bundle`` writes the folder
``load_release`` reads, for fine-tuning or another export, without a second copy of the weights in the clone.

safetensors lays its tensors end to end after a JSON header (https://huggingface.co/docs/safetensors, "Format"); the
weights therefore do not start on page boundaries, which costs nothing for tensors that are folded (read once).
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np

HALF_FILE = "float16.weights"
FLOAT16_WEIGHTS = "rounded to float16 at export (--float16-storage), stored as float16"  # manifest training.weights
OTHER = "onnx."  # name prefix of stored tensors that are not parameters of the model


def exact_half(array: np.ndarray) -> np.ndarray | None:
    """``array`` (float32) as float16 if that holds every element exactly (bit for bit once widened), else None."""
    array = np.ascontiguousarray(array)
    half = array.astype(np.float16)
    return half if np.array_equal(half.astype(np.float32).view(np.uint32), array.view(np.uint32)) else None


def parameters(model: Any) -> dict[str, np.ndarray]:
    """The model's float parameters by name, each tensor once (tied ones under their first name), as float32."""
    out: dict[str, np.ndarray] = {}
    seen: set[int] = set()
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            out[name] = tensor.detach().float().contiguous().numpy()
    return out


def layout(tensors: list[tuple[str, tuple[int, ...], bytes]]) -> tuple[bytes, list[int]]:
    """The safetensors header for float16 ``tensors`` (name, shape, bytes) laid end to end in this order, and the
    offset of each tensor in the file."""
    header: dict[str, Any] = {}
    begin = 0
    for name, shape, data in tensors:
        header[name] = {"dtype": "F16", "shape": list(shape), "data_offsets": [begin, begin + len(data)]}
        begin += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)  # the data starts 8-byte aligned
    start = 8 + len(text)
    offsets, at = [], start
    for _, _, data in tensors:
        offsets.append(at)
        at += len(data)
    return struct.pack("<Q", len(text)) + text, offsets


def release_from_bundle(bundle_dir: Path, out: Path) -> dict[str, Any]:
    """Write ``out`` as a release folder (model.safetensors in float32, config.json, tokenizer.model, prepare.json
    where the manifest recorded it) from a float16-stored bundle: the weights the bundle computes with."""
    from safetensors.numpy import load_file, save_file

    from model.checkpoint import CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE

    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    if manifest.get("training", {}).get("weights") != FLOAT16_WEIGHTS:
        raise ValueError(f"{bundle_dir} was not exported with --float16-storage: its graphs hold no named weights")
    stored = load_file(str(bundle_dir / "graphs" / HALF_FILE))
    weights = {name: array.astype(np.float32) for name, array in stored.items() if not name.startswith(OTHER)}
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / WEIGHTS_FILE))
    run = manifest.get("training", {}).get("run", {})
    meta = {"model": manifest["model"], "run": run, "from_bundle": f"{manifest['name']}/{manifest['version']}"}
    (out / CONFIG_FILE).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    shutil.copy(bundle_dir / manifest["tokenizer"]["file"], out / TOKENIZER_FILE)
    return meta
