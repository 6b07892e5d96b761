"""Bundle integrity: a corrupted, truncated, missing or extra file, or an edited manifest, stops the service at
start-up: non-zero exit, and the log names the file with the expected and the actual sha256."""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest
from live_server import LiveServer


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _corrupt(bundle: Path, rel: str) -> tuple[str, list[str]]:
    path = bundle / rel
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte flipped
    expected = _sha(path)
    path.write_bytes(bytes(data))
    return rel, [f"expected sha256 {expected}", f"actual {_sha(path)}"]


def _truncate(bundle: Path, rel: str) -> tuple[str, list[str]]:
    path = bundle / rel
    expected = _sha(path)
    path.write_bytes(path.read_bytes()[:100])
    return rel, [f"expected sha256 {expected}", f"actual {_sha(path)}", "found 100)"]


def _delete(bundle: Path, rel: str) -> tuple[str, list[str]]:
    path = bundle / rel
    expected = _sha(path)
    path.unlink()
    return rel, ["missing", f"expected sha256 {expected}"]


def _add(bundle: Path, rel: str) -> tuple[str, list[str]]:
    path = bundle / rel
    path.write_bytes(b"not part of the release")
    return rel, ["not listed in the manifest", f"sha256 {_sha(path)}"]


def _edit_manifest(bundle: Path, _: str) -> tuple[str, list[str]]:
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    expected = manifest["manifest_sha256"]
    manifest["source_language"] = "fr"  # any edit after sealing
    path.write_text(json.dumps(manifest, indent=2))
    return "manifest.json", ["edited after it was sealed", f"manifest_sha256 expected {expected}", "actual "]


def _swap_digest(bundle: Path, _: str) -> tuple[str, list[str]]:
    """Tampered file and a manifest 'fixed' to match it, without resealing: the manifest digest catches it."""
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text())
    expected = manifest["manifest_sha256"]
    rel = sorted(manifest["files"])[0]
    (bundle / rel).write_bytes(b"tampered")
    manifest["files"][rel] = {"size": 8, "sha256": _sha(bundle / rel)}
    path.write_text(json.dumps(manifest, indent=2))
    return "manifest.json", ["edited after it was sealed", f"manifest_sha256 expected {expected}"]


def _graph(bundle: Path, variant: str, graph: str) -> str:
    manifest = json.loads((bundle / "manifest.json").read_text())
    return manifest["variants"][variant][graph]


CASES = {
    "corrupted-encoder": (_corrupt, ("fp32", "encoder")),
    "truncated-tokenizer": (_truncate, "tokenizer.model"),
    "missing-int8-decoder": (_delete, ("int8", "decoder")),
    "extra-file": (_add, "notes.txt"),
    "edited-manifest": (_edit_manifest, ""),
    "re-hashed-without-reseal": (_swap_digest, ""),
}


@pytest.fixture(scope="module")
def refused_starts(tiny_repository, tmp_path_factory):
    """Start one server per broken copy of the repository, all at once; collect exit codes and logs."""
    servers = {}
    for name, (damage, target) in CASES.items():
        root = tmp_path_factory.mktemp(name)
        repository = root / "repository"
        shutil.copytree(tiny_repository, repository)
        bundle = repository / "de-en" / "1"
        rel = _graph(bundle, *target) if isinstance(target, tuple) else target
        named, needles = damage(bundle, rel)
        server = LiveServer(repository, log_path=root / "service.log").start(wait_ready=False)
        servers[name] = (server, bundle / named, needles)
    results = {}
    deadline = time.monotonic() + 120
    for name, (server, path, needles) in servers.items():
        try:
            code = server.process.wait(max(1.0, deadline - time.monotonic()))
        except Exception:
            code = None
        finally:
            server.stop()  # only acts on a server that is (wrongly) still running
        results[name] = (code, server.log_path.read_text(errors="replace"), path, needles)
    return results


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_bundle_refuses_to_start(refused_starts, case):
    code, log, path, needles = refused_starts[case]
    assert code not in (None, 0), f"the service started (or hung) with a damaged bundle: {log[-2000:]}"
    refusal = [line for line in log.splitlines() if "refusing to start" in line]
    assert refusal, log[-2000:]
    entry = json.loads(refusal[0])
    assert entry["level"] == "error"
    assert str(path) in entry["message"]
    for needle in needles:
        assert needle in entry["message"], (needle, entry["message"])
