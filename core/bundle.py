"""The bundle format: ``model_repository/<name>/<version>/`` with manifest.json, tokenizer and ONNX graphs; the
manifest written (export/) and read and verified (service/) by this module alone.

Format 2 (``mtserve-bundle/2``, written since the compact layout) keeps every graph and weights file in
``graphs/``: graph protos whose large tensors are ONNX external data, regions of ``graphs/<variant>.weights``
that several graphs (and variants) share, each tensor stored once (export/pack.py). Format 1 has self-contained
graphs in one folder per variant (``fp32/encoder.onnx`` ...). Both load the same way: the manifest names each
variant's graph files, onnxruntime resolves a graph's external data next to it.

A multilingual bundle's manifest lists the directions it serves (``directions``: a target tag or a pivot each, read
and checked by core/directions.py); without the field a bundle serves its ``source_language`` -> ``target_language``.

Loading verifies the manifest's own digest and every listed file's size and sha256, and refuses files
the manifest does not list, so a corrupted, truncated, missing, added or edited file stops the load
with an error naming it. Nothing here unpickles anything: ONNX protobufs, a SentencePiece model, JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
TRAINED_HERE = "trained here"  # a manifest's ``source`` when it has none: every bundle made before imports existed
FORMAT = "mtserve-bundle/2"  # what the exporter writes
FORMATS = ("mtserve-bundle/1", FORMAT)  # what loads


class BundleError(Exception):
    """The bundle cannot be used; the message names the file and what is wrong with it."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_digest(manifest: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of the manifest without its own ``manifest_sha256`` field."""
    body = {k: v for k, v in manifest.items() if k != "manifest_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def describe_file(path: Path) -> dict[str, Any]:
    return {"size": path.stat().st_size, "sha256": sha256_file(path)}


def write_manifest(directory: Path, manifest: dict[str, Any]) -> Path:
    """Fill ``files`` from the listed paths' current contents, seal with the digest, write manifest.json."""
    manifest = dict(manifest)
    manifest["files"] = {rel: describe_file(directory / rel) for rel in sorted(manifest["files"])}
    manifest["manifest_sha256"] = manifest_digest(manifest)
    path = directory / MANIFEST
    # written next to the bundle (inside, it would be a file the manifest does not list) and renamed over: a reader
    # (a hot reload, a measurement of the same bundle) sees the old manifest or the new one, never half of one
    folder = directory.resolve()
    partial = folder.parent / f".{folder.name}.{MANIFEST}.{os.getpid()}.partial"
    partial.write_text(json.dumps(manifest, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    os.replace(partial, path)
    return path


@dataclass
class Bundle:
    path: Path
    manifest: dict[str, Any]

    @property
    def name(self) -> str:
        return self.manifest["name"]

    @property
    def version(self) -> str:
        return str(self.manifest["version"])

    @property
    def model_config(self) -> dict[str, Any]:
        return self.manifest["model"]

    @property
    def variants(self) -> list[str]:
        return list(self.manifest["variants"])

    @property
    def default_variant(self) -> str:
        return self.manifest.get("default_variant", "fp32")

    def graph(self, variant: str, graph: str) -> Path:
        variants = self.manifest["variants"]
        if variant not in variants:
            raise BundleError(f"{self.path}: no variant {variant!r}; the bundle has {sorted(variants)}")
        return self.path / variants[variant][graph]

    def weights(self, variant: str) -> list[Path]:
        """The weights files the variant's graphs read (format 2; none in format 1: graphs hold their weights)."""
        self.graph(variant, "encoder")  # refuses an unknown variant
        return [self.path / rel for rel in self.manifest["variants"][variant].get("weights", [])]

    @property
    def source(self) -> str:
        """Where the model came from: "trained here", or how it was imported (e.g. "imported: huggingface marian")."""
        return self.manifest.get("source", TRAINED_HERE)

    @property
    def tokenizer_file(self) -> Path:
        return self.path / self.manifest["tokenizer"]["file"]

    @property
    def target_tokenizer_file(self) -> Path:
        """The model that cuts target-language text (glossary terms, a given target): an imported model's own
        (``tokenizer.target_file``), else the one tokenizer that cuts both languages."""
        return self.path / self.manifest["tokenizer"].get("target_file", self.manifest["tokenizer"]["file"])


def load_bundle(path: str | Path, verify: bool = True) -> Bundle:
    path = Path(path)
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise BundleError(f"{manifest_path}: missing (not a model bundle)")
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{manifest_path}: not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") not in FORMATS:
        raise BundleError(f"{manifest_path}: not a {' or '.join(FORMATS)} manifest")
    if verify:
        _verify(path, manifest)
    return Bundle(path, manifest)


def _verify(path: Path, manifest: dict[str, Any]) -> None:
    expected_digest, actual_digest = manifest.get("manifest_sha256"), manifest_digest(manifest)
    if expected_digest != actual_digest:
        raise BundleError(
            f"{path / MANIFEST}: edited after it was sealed (manifest_sha256 expected {expected_digest}, "
            f"actual {actual_digest})"
        )
    files = manifest.get("files", {})
    for rel, meta in files.items():
        file = path / rel
        if not file.is_file():
            raise BundleError(f"{file}: missing (expected sha256 {meta['sha256']})")
        size = file.stat().st_size
        actual = sha256_file(file)
        if actual != meta["sha256"] or size != meta["size"]:
            raise BundleError(
                f"{file}: contents changed (expected sha256 {meta['sha256']}, actual {actual}; "
                f"expected {meta['size']} bytes, found {size})"
            )
    listed = set(files) | {MANIFEST}
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        rel = file.relative_to(path).as_posix()
        if rel not in listed:
            raise BundleError(f"{file}: not listed in the manifest (sha256 {sha256_file(file)}); remove it")


def versions_of(repository: str | Path, name: str) -> list[str]:
    """The version folders of a model that hold a manifest, lowest first (as integers)."""
    folder = Path(repository) / name
    if not folder.is_dir():
        return []
    found = [p.name for p in folder.iterdir() if p.is_dir() and p.name.isdigit() and (p / MANIFEST).exists()]
    return sorted(found, key=int)


def discover(repository: str | Path) -> dict[str, Path]:
    """Newest version of every model in a repository: {name: model_repository/<name>/<version>}."""
    repository = Path(repository)
    if not repository.is_dir():
        return {}
    models = sorted(p.name for p in repository.iterdir() if p.is_dir())
    return {name: repository / name / versions[-1] for name in models if (versions := versions_of(repository, name))}
