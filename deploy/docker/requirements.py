"""Write the serving requirements of the image from pyproject.toml's ``[project] dependencies``.

The CPU image installs them as they are. The GPU image swaps ``onnxruntime`` for a pinned
``onnxruntime-gpu`` (the two wheels ship the same module and cannot be installed side by side).
Standard library only: it runs in the image's build stage before anything is installed.

    python deploy/docker/requirements.py pyproject.toml                      # CPU list
    python deploy/docker/requirements.py pyproject.toml --gpu-version 1.26.0 # GPU list
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

FORBIDDEN = {"torch"}  # the serving image must never pull a training framework


def package_name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def serving_requirements(pyproject: Path, gpu_version: str | None = None) -> list[str]:
    deps = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    names = {package_name(d) for d in deps}
    if names & FORBIDDEN:
        raise SystemExit(f"serving dependencies must not include {sorted(names & FORBIDDEN)}")
    if "onnxruntime" not in names:
        raise SystemExit("pyproject.toml's [project] dependencies do not list onnxruntime")
    if gpu_version is None:
        return list(deps)
    return [f"onnxruntime-gpu=={gpu_version}" if package_name(d) == "onnxruntime" else d for d in deps]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject", type=Path)
    parser.add_argument("--gpu-version", help="install onnxruntime-gpu==VERSION instead of onnxruntime")
    args = parser.parse_args(argv)
    sys.stdout.write("\n".join(serving_requirements(args.pyproject, args.gpu_version)) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
