"""Copies of the tiny bundle under another name, language pair or version, re-sealed (tests only)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from core.bundle import MANIFEST, write_manifest
from core.graphs import SEARCH_LOOP


def copy_bundle(source: Path, target: Path, **changes) -> Path:
    """``source`` bundle copied to ``target`` with manifest fields changed (name, version, languages, ...)."""
    shutil.copytree(source, target)
    manifest = json.loads((target / MANIFEST).read_text())
    manifest.update(changes)
    manifest.pop("manifest_sha256", None)
    write_manifest(target, manifest)
    return target


def without_search_loops(source: Path, target: Path) -> Path:
    """``source`` copied to ``target`` without its search loop graphs (a bundle exported before they existed)."""
    shutil.copytree(source, target)
    manifest = json.loads((target / MANIFEST).read_text())
    for variant in manifest["variants"].values():
        (target / variant.pop(SEARCH_LOOP)).unlink()
    manifest["files"] = [f for f in manifest["files"] if SEARCH_LOOP not in f]
    manifest["graphs"].pop(SEARCH_LOOP)
    manifest.pop("manifest_sha256", None)
    write_manifest(target, manifest)
    return target


def two_model_repository(tiny_bundle_dir: Path, root: Path) -> Path:
    """de-en/1 (the tiny bundle) and zh-en/1 (the same weights, labelled zh -> en)."""
    repository = root / "repository"
    copy_bundle(tiny_bundle_dir, repository / "de-en" / "1")
    copy_bundle(tiny_bundle_dir, repository / "zh-en" / "1", name="zh-en", source_language="zh")
    return repository
