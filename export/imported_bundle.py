"""The one bundle writer of every importer (``import-hf``: export/marian.py, ``import-argos``: export/argos.py): a model
imported as our Transformer and tokenizer is written by ``export`` (the same graphs, variants and packing as a model
trained here), then the import is recorded in the manifest (``source``, ``imported``: where from, what was read and
how it was mapped, PyTorch-vs-onnxruntime parity of the graphs) and the manifest sealed again."""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.bundle import load_bundle
from export.manifest import seal
from model.checkpoint import TOKENIZER_FILE, save_release
from model.transformer import Transformer

TARGET_TOKENIZER_FILE = "target_tokenizer.model"  # the bundle's manifest names it as tokenizer.target_file
MAX_GRAPH_DIFF = 1e-4  # PyTorch vs onnxruntime, fp32 graphs: above this the import fails (exit 1)
PARITY_SHAPES = [(1, 5, 1, 0), (3, 9, 1, 4), (2, 7, 3, 2)]  # (batch, source, target, past) of the graph check


@dataclass
class Imported:
    """What an importer hands the writer."""

    model: Transformer
    tokenizer_proto: bytes  # the source side's SentencePiece model over our ids (tokenizer.model)
    source: str  # the manifest's source ("imported: ...")
    record: dict[str, Any]  # the manifest's "imported" (besides from, kind and parity, which the writer adds)
    decoding: dict[str, Any] = field(default_factory=dict)  # the bundle's decoding defaults
    target_tokenizer_proto: bytes | None = None  # the target side's, when it cuts text otherwise


def write_imported(
    imported: Imported,
    args: argparse.Namespace,
    source_language: str,
    target_language: str,
    export: Callable[[argparse.Namespace], int],
) -> int:
    """Write ``args.repository/args.name/args.version`` (``args``: the import command's: source, variants,
    calibration_data, calibration_sentences, force) with ``export`` (export.cli's ``cmd_export``, passed in: the
    command line imports this module); 0 when the graphs match PyTorch within MAX_GRAPH_DIFF."""
    from engine import Engine
    from export.parity import graph_max_diff

    out = Path(args.repository) / args.name / str(args.version)
    with tempfile.TemporaryDirectory() as tmp:
        release = Path(tmp)
        run = {"source_lang": source_language, "target_lang": target_language}
        save_release(release, imported.model, {"run": run})
        (release / TOKENIZER_FILE).write_bytes(imported.tokenizer_proto)
        export_args = argparse.Namespace(
            model=str(release),
            out=str(out),
            name=args.name,
            version=args.version,
            variants=args.variants,
            source_language=source_language,
            target_language=target_language,
            source_normalization="",
            calibration_data=args.calibration_data,
            calibration_sentences=args.calibration_sentences,
            bundle_format=2,
            force=args.force,
        )
        status = export(export_args)
    if status:
        return status
    bundle = load_bundle(out)
    manifest = bundle.manifest
    if imported.target_tokenizer_proto is not None:
        (out / TARGET_TOKENIZER_FILE).write_bytes(imported.target_tokenizer_proto)  # listed here, sealed below
        manifest["tokenizer"]["target_file"] = TARGET_TOKENIZER_FILE
        manifest["files"] = [*manifest["files"], TARGET_TOKENIZER_FILE]
    engine = Engine(bundle, variant="fp32", shortlist=False)
    parity = {"max_abs_diff": graph_max_diff(imported.model, engine, PARITY_SHAPES), "shapes": PARITY_SHAPES}
    manifest["source"] = imported.source
    manifest["training"] = {"imported_from": str(args.source)}
    manifest["imported"] = {"from": str(args.source), "kind": imported.source, **imported.record, "parity": parity}
    manifest["decoding"] = {**manifest.get("decoding", {}), **imported.decoding}
    seal(bundle.path, manifest)
    worst = max(parity["max_abs_diff"].values())
    print(f"imported {args.source} as {out}; graph parity max |diff| {worst:.2e}", file=sys.stderr)
    return 0 if worst <= MAX_GRAPH_DIFF else 1
