"""``python -m export.cli import-hf`` and ``import-argos``: a Hugging Face Marian checkpoint (export/marian.py) or an
Argos Translate package (export/argos.py) imported as our Transformer and tokenizer, and written as a bundle by the
importers' one writer (export/imported_bundle.py) with ``export`` (export.cli's ``cmd_export``, passed in by the
command line, which imports this module)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def cmd_import_hf(args: argparse.Namespace, export: Callable[[argparse.Namespace], int]) -> int:
    """A Hugging Face MarianMTModel checkpoint as a sealed bundle: imported as our Transformer and tokenizer
    (export/marian.py), written by the importers' writer (export/imported_bundle.py), the checkpoint's config,
    generation defaults and vocabulary mapping recorded in the manifest's ``imported``."""
    from export.imported_bundle import Imported, write_imported
    from export.marian import SOURCE, ImportRefused, import_marian

    source = Path(args.source)
    if not source.is_dir():  # a hub id: downloads on a machine with internet (untested here: there is none)
        from huggingface_hub import snapshot_download

        source = Path(snapshot_download(args.source))
    try:
        imported = import_marian(source)
    except ImportRefused as exc:
        print(f"{args.source}: {exc}", file=sys.stderr)
        return 2
    source_language = args.source_language or imported.source_language
    target_language = args.target_language or imported.target_language
    if not source_language or not target_language:
        print(
            "the checkpoint names no languages (tokenizer_config.json): pass --source-language and --target-language",
            file=sys.stderr,
        )
        return 2
    vmap = imported.vocab
    record = {
        "config": imported.config,
        "generation": imported.generation,
        "vocabulary": {
            "marian_size": imported.config["vocab_size"],
            "size": vmap.size,
            "marian_ids": vmap.marian_ids,
            "excluded": vmap.excluded,
        },
    }
    bundle = Imported(
        imported.model,
        imported.tokenizer_proto,
        SOURCE,
        record,
        imported_decoding(imported.generation),
        imported.target_tokenizer_proto,
    )
    return write_imported(bundle, args, source_language, target_language, export)


def cmd_import_argos(args: argparse.Namespace, export: Callable[[argparse.Namespace], int]) -> int:
    """An Argos Translate package (.argosmodel: a CTranslate2 Transformer, SentencePiece, metadata) as a sealed
    bundle: imported as our Transformer and tokenizer (export/argos.py, int8 weights de-quantized), written by the
    importers' writer (export/imported_bundle.py); the package's metadata and licence files, CTranslate2 header and
    config and the vocabulary mapping recorded in the manifest's ``imported``."""
    from export.argos import SOURCE, import_argos
    from export.imported_bundle import Imported, write_imported
    from export.marian import ImportRefused

    try:
        imported = import_argos(Path(args.source).read_bytes(), source_eos=args.source_eos)
    except ImportRefused as exc:
        print(f"{args.source}: {exc}", file=sys.stderr)
        return 2
    metadata = imported.package.metadata
    source_language = args.source_language or metadata.get("from_code")
    target_language = args.target_language or metadata.get("to_code")
    if not source_language or not target_language:
        print(
            "metadata.json names no from_code / to_code: pass --source-language and --target-language", file=sys.stderr
        )
        return 2
    bundle = Imported(imported.model, imported.tokenizer_proto, SOURCE, imported.info, imported.decoding)
    return write_imported(bundle, args, source_language, target_language, export)


HF_LENGTH_PENALTY = 1.0  # generate's length_penalty when the checkpoint's generation config names none


def imported_decoding(generation: dict) -> dict[str, int | float | str]:
    """A checkpoint's generation defaults as the bundle's decoding defaults (what a request leaves out):
    ``num_beams`` the beam, ``max_length`` the generated tokens less one (generate counts the decoder start), and
    beam hypotheses ranked by generate's length penalty n ** a (core/search.py LengthPenalty) with its exponent."""
    out: dict = {"length_penalty_form": "hf"}
    out["length_penalty"] = float(generation.get("length_penalty", HF_LENGTH_PENALTY))
    if generation.get("num_beams"):
        out["beam_size"] = int(generation["num_beams"])
    if generation.get("max_length"):
        out["max_length"] = int(generation["max_length"]) - 1
    return out
