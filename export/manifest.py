"""Bundle manifest: what the model is, how it was made, what it scored, and every file's sha256."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path
from typing import Any

from core.bundle import FORMAT, FORMATS, write_manifest
from core.directions import manifest_field
from core.graphs import SEARCH_LOOP
from core.tokenizer import SPECIAL_IDS
from export.onnx_export import OPSET, graph_signature
from export.pack import GRAPH_KEYS

MANIFEST_GRAPHS = (*GRAPH_KEYS, SEARCH_LOOP)  # the packed graphs and the search loop written after packing


def git_commit(repo: Path | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo or Path(__file__).parent, capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo or Path(__file__).parent,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def build_manifest(
    bundle_dir: Path,
    name: str,
    version: int,
    source_language: str,
    target_language: str,
    model_config: dict[str, Any],
    parameters: int,
    variants: dict[str, dict[str, str]],
    vocab_size: int,
    training: dict[str, Any],
    default_variant: str = "fp32",
    commit: str | None = None,
    bundle_format: str = FORMAT,
    source_normalization: str | None = None,
    directions: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``commit``: the exporting code's git commit, taken before the export wrote anything (a bundle inside the
    repository would otherwise mark its own export "-dirty"); looked up now when not given.

    ``files``: the tokenizer, every variant's graphs and the weights files they read (format 2), each once.
    ``source_normalization``: the core.normalize rule set the training data went through (the engine applies
    it to every source); the field is left out for a model trained on text as it came.
    ``directions``: a multilingual model's directions (core/directions.py); left out for a one-direction model."""
    if bundle_format not in FORMATS:
        raise ValueError(f"bundle format {bundle_format!r} is none of {FORMATS}")
    files = ["tokenizer.model"]
    for v in variants.values():
        for rel in [v[key] for key in MANIFEST_GRAPHS if key in v] + v.get("weights", []):
            if rel not in files:
                files.append(rel)
    fp32 = variants["fp32"]
    graphs = {g: graph_signature(bundle_dir / fp32[g]) for g in MANIFEST_GRAPHS if g in fp32}
    manifest = {
        "format": bundle_format,
        "name": name,
        "version": version,
        "source_language": source_language,
        "target_language": target_language,
        "model": model_config,
        "parameters": parameters,
        "tokenizer": {
            "file": "tokenizer.model",
            "type": "sentencepiece",
            "vocab_size": vocab_size,
            "special_ids": SPECIAL_IDS,
        },
        "variants": variants,
        "default_variant": default_variant,
        "opset": OPSET,
        "graphs": graphs,
        "training": training,
        "created": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
        "git_commit": commit or git_commit(),
        "files": files,
    }
    if source_normalization:
        manifest["source_normalization"] = source_normalization
    if directions:
        manifest["directions"] = manifest_field(directions)
    return manifest


def seal(bundle_dir: Path, manifest: dict[str, Any]) -> Path:
    """Hash every listed file and write the sealed manifest.json."""
    if isinstance(manifest["files"], dict):
        manifest = {**manifest, "files": list(manifest["files"])}
    return write_manifest(bundle_dir, manifest)
