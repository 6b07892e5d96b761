"""Argos Translate packages built in the test: a random Marian checkpoint (tests/marian_checkpoint.py, one joint
SentencePiece model) converted by CTranslate2's own TransformersConverter, zipped as an .argosmodel (metadata.json,
model/, sentencepiece.model, a README naming the licence, a stanza/ folder the import leaves out)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

TOP = "translate-de_en-1_0"
METADATA = {
    "package_version": "1.0",
    "argos_version": "1.9.0",
    "from_code": "de",
    "from_name": "German",
    "to_code": "en",
    "to_name": "English",
    "type": "translate",
}
README = "# German-English\n\nA random test model. Licence: CC-BY 4.0 (https://creativecommons.org/licenses/by/4.0/)\n"


def convert(checkpoint: Path, out: Path, quantization: str) -> Path:
    """CTranslate2's conversion of a Hugging Face Marian checkpoint (``quantization``: float32, int8, ...)."""
    import ctranslate2

    ctranslate2.converters.TransformersConverter(str(checkpoint)).convert(str(out), quantization=quantization)
    return out


def write_package(checkpoint: Path, ct2_model: Path, path: Path) -> Path:
    """An .argosmodel of a CTranslate2 model folder and the checkpoint's (joint) SentencePiece model."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{TOP}/metadata.json", json.dumps(METADATA))
        archive.writestr(f"{TOP}/README.md", README)
        archive.writestr(f"{TOP}/sentencepiece.model", (checkpoint / "source.spm").read_bytes())
        archive.writestr(f"{TOP}/stanza/de/tokenize/de.pt", b"not read")
        for file in sorted(ct2_model.iterdir()):
            archive.writestr(f"{TOP}/model/{file.name}", file.read_bytes())
    return path
