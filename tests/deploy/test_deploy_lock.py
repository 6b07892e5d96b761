"""The lock file the CPU image and `make serve` install from (deploy/docker/requirements.lock, written by
`make lock`, i.e. `uv pip compile ... --generate-hashes`) is in step with pyproject.toml's serving dependencies:
every one is locked at a version its specifier allows, every locked package carries hashes, and nothing of
training (torch) is in it."""

from __future__ import annotations

import re
import tomllib

from deploy_helpers import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

LOCK = ROOT / "deploy/docker/requirements.lock"


def locked() -> dict[str, tuple[str, int]]:
    """name -> (version, number of hashes) of each locked package."""
    found: dict[str, tuple[str, int]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text()):
        match = re.match(r"([A-Za-z0-9_.\-\[\]]+)==([^\s;\\]+)", block)
        if match:
            name = canonicalize_name(match.group(1).split("[")[0])
            found[name] = (match.group(2), block.count("--hash=sha256:"))
    return found


def test_every_serving_dependency_is_locked_at_an_allowed_version_with_hashes():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    lock = locked()
    assert lock, "no package found in the lock file"
    for dep in map(Requirement, deps):
        name = canonicalize_name(dep.name)
        assert name in lock, f"{dep.name} is not in {LOCK.name}: run `make lock`"
        version, _ = lock[name]
        assert dep.specifier.contains(version, prereleases=True), f"{dep}: locked {version}; run `make lock`"
    assert all(hashes > 0 for _, hashes in lock.values()), "every locked package needs its hashes"
    assert "torch" not in lock


def test_the_lock_names_its_refresh_command():
    assert "make lock" in LOCK.read_text().splitlines()[1]
    assert "lock:" in (ROOT / "Makefile").read_text()
