"""load_bundle refuses a corrupted, truncated, missing, unlisted or edited file, naming it (and its sha256):
graphs, the shared weights files they read by offset (format 2), the tokenizer and the manifest."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from core.bundle import FORMAT, MANIFEST, BundleError, discover, load_bundle
from engine import Engine

# protobuf, SentencePiece, JSON, raw tensor bytes (ONNX external data): nothing that is unpickled
ALLOWED_SUFFIXES = {".onnx", ".model", ".json", ".weights"}


@pytest.fixture
def bundle_copy(tiny_bundle_dir, tmp_path) -> Path:
    return shutil.copytree(tiny_bundle_dir, tmp_path / "de-en" / "1")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(bundle: Path) -> dict:
    return json.loads((bundle / MANIFEST).read_text())


def test_a_good_bundle_loads_and_serves(bundle_copy):
    bundle = load_bundle(bundle_copy)
    assert bundle.name == "de-en" and bundle.version == "1"
    assert set(bundle.variants) == {"fp32", "int8"}
    assert Engine(bundle, variant="fp32", providers="cpu").translate(["ein mann spielt"])[0].text


def test_bundle_holds_only_onnx_sentencepiece_json_and_weights(bundle_copy):
    files = [p for p in bundle_copy.rglob("*") if p.is_file()]
    assert {p.suffix for p in files} <= ALLOWED_SUFFIXES, sorted(p.name for p in files)
    manifest = _manifest(bundle_copy)
    assert manifest["format"] == FORMAT
    assert {Path(rel).suffix for rel in manifest["files"]} == {".onnx", ".model", ".weights"}
    import onnx

    for variant, entry in manifest["variants"].items():
        for graph in ("encoder", "decoder", "decoder_step"):
            path = bundle_copy / entry[graph]
            model = onnx.load(str(path), load_external_data=False)  # a protobuf
            read = {
                (path.parent / e.value).relative_to(bundle_copy).as_posix()
                for i in model.graph.initializer
                for e in i.external_data
                if e.key == "location"
            }
            # external data only in the variant's listed weights files, next to the graph (no '..', no absolute)
            assert read and read == set(entry["weights"]) and read <= set(manifest["files"]), (variant, graph)
            assert all(Path(rel).parent == Path(entry[graph]).parent for rel in read)


def test_manifest_is_strict_json(bundle_copy):
    """No NaN / Infinity: browsers and other JSON parsers reject them."""

    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")

    json.loads((bundle_copy / MANIFEST).read_text(), parse_constant=refuse)


def _file(bundle: Path, what: str) -> str:
    """``variant/graph`` or ``variant/weights`` (the variant's own weights file) -> its path in the manifest."""
    if "/" not in what:
        return what
    variant, key = what.split("/")
    entry = _manifest(bundle)["variants"][variant]
    return next(w for w in entry["weights"] if Path(w).name == f"{variant}.weights") if key == "weights" else entry[key]


@pytest.mark.parametrize("what", ["fp32/decoder", "int8/encoder", "fp32/weights", "int8/weights", "tokenizer.model"])
def test_one_flipped_byte_is_refused(bundle_copy, what):
    rel = _file(bundle_copy, what)
    path = bundle_copy / rel
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    expected = _manifest(bundle_copy)["files"][rel]["sha256"]
    with pytest.raises(BundleError) as info:
        load_bundle(bundle_copy)
    message = str(info.value)
    assert rel in message
    assert f"expected sha256 {expected}" in message
    assert f"actual {_sha256(path)}" in message


@pytest.mark.parametrize("what", ["fp32/encoder", "fp32/weights", "int8/weights"])
def test_a_truncated_file_is_refused(bundle_copy, what):
    rel = _file(bundle_copy, what)
    path = bundle_copy / rel
    meta = _manifest(bundle_copy)["files"][rel]
    path.write_bytes(path.read_bytes()[: meta["size"] // 2])
    with pytest.raises(BundleError) as info:
        load_bundle(bundle_copy)
    message = str(info.value)
    assert rel in message and meta["sha256"] in message and _sha256(path) in message
    assert f"expected {meta['size']} bytes, found {meta['size'] // 2}" in message


def test_a_truncated_shared_weights_file_stops_every_variant_that_reads_it(bundle_copy):
    """fp32.weights holds the float tensors int8 reads too (embedding, LayerNorm, biases): the bundle is refused
    as a whole; and even unverified, onnxruntime builds no session of either variant from a file that ends before
    the tensors they read (it checks offset + length against the file's size)."""
    rel = _file(bundle_copy, "fp32/weights")
    manifest = _manifest(bundle_copy)
    assert rel in manifest["variants"]["fp32"]["weights"] and rel in manifest["variants"]["int8"]["weights"]
    path = bundle_copy / rel
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(BundleError, match="contents changed") as info:
        load_bundle(bundle_copy)
    assert rel in str(info.value) and f"expected {manifest['files'][rel]['size']} bytes, found 100" in str(info.value)
    unverified = load_bundle(bundle_copy, verify=False)
    for variant in ("fp32", "int8"):
        with pytest.raises(Exception, match="out of bounds"):
            Engine(unverified, variant=variant, providers="cpu")


@pytest.mark.parametrize("what", ["int8/decoder", "int8/weights"])
def test_a_missing_file_is_refused(bundle_copy, what):
    rel = _file(bundle_copy, what)
    expected = _manifest(bundle_copy)["files"][rel]["sha256"]
    (bundle_copy / rel).unlink()
    with pytest.raises(BundleError, match="missing") as info:
        load_bundle(bundle_copy)
    assert rel in str(info.value) and expected in str(info.value)


@pytest.mark.parametrize(
    "rel", ["notes.txt", "graphs/extra.onnx", "graphs/fp16.weights", "fp32/encoder.onnx", "weights.pt"]
)
def test_an_unlisted_file_is_refused(bundle_copy, rel):
    path = bundle_copy / rel
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"not part of the bundle")
    with pytest.raises(BundleError, match="not listed") as info:
        load_bundle(bundle_copy)
    assert rel in str(info.value) and _sha256(path) in str(info.value)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["variants"]["fp32"].__setitem__("bleu", {"split": "test", "beam1": {"bleu": 99.9}}),
        lambda m: m["model"].__setitem__("max_positions", 512),
        lambda m: m.__setitem__("default_variant", "int8"),
        lambda m: m["files"]["tokenizer.model"].__setitem__("sha256", "0" * 64),
    ],
    ids=["bleu", "model-config", "default-variant", "file-hash"],
)
def test_an_edited_manifest_is_refused(bundle_copy, edit):
    manifest = _manifest(bundle_copy)
    sealed = manifest["manifest_sha256"]
    edit(manifest)
    (bundle_copy / MANIFEST).write_text(json.dumps(manifest, indent=2))
    with pytest.raises(BundleError, match="edited after it was sealed") as info:
        load_bundle(bundle_copy)
    assert MANIFEST in str(info.value) and f"expected {sealed}" in str(info.value)


def test_a_missing_or_broken_manifest_is_refused(bundle_copy):
    (bundle_copy / MANIFEST).write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        load_bundle(bundle_copy)
    (bundle_copy / MANIFEST).write_text(json.dumps({"format": "something-else/9"}))
    with pytest.raises(BundleError, match="mtserve-bundle/1 or mtserve-bundle/2"):
        load_bundle(bundle_copy)
    (bundle_copy / MANIFEST).unlink()
    with pytest.raises(BundleError, match="missing") as info:
        load_bundle(bundle_copy)
    assert MANIFEST in str(info.value)


def test_an_unknown_variant_is_refused(bundle_copy):
    with pytest.raises(BundleError, match="fp8"):
        Engine(load_bundle(bundle_copy), variant="fp8", providers="cpu")


def test_discover_finds_the_newest_version(bundle_copy):
    repository = bundle_copy.parent.parent
    shutil.copytree(bundle_copy, repository / "de-en" / "12")
    (repository / "de-en" / "13").mkdir()  # no manifest: not a version
    assert discover(repository) == {"de-en": repository / "de-en" / "12"}


def test_resealing_replaces_the_manifest_whole_and_leaves_no_partial_file(bundle_copy, monkeypatch):
    """A reader during a re-seal (release_multi.sh measures a bundle while another step seals scores into it)
    sees the old manifest or the new one: the new one is written elsewhere and renamed over the old."""
    import os

    from core.bundle import write_manifest

    manifest = _manifest(bundle_copy)
    before = (bundle_copy / MANIFEST).read_text()
    seen = []
    rename = os.replace

    def replace(source, target):
        seen.append(((bundle_copy / MANIFEST).read_text(), Path(source).parent))  # the old one, still whole
        rename(source, target)

    monkeypatch.setattr(os, "replace", replace)
    write_manifest(bundle_copy, {**manifest, "description": "re-sealed"})
    assert seen == [(before, bundle_copy.parent)]  # not inside the bundle, where it would be an unlisted file
    assert load_bundle(bundle_copy).manifest["description"] == "re-sealed"
    assert sorted(p.name for p in bundle_copy.parent.iterdir()) == ["1"]
